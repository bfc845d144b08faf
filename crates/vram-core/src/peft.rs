//! Parameter-efficient fine-tuning: which modules peft's LoRA/DoRA adapts and how many
//! parameters that trains (`peft/tuners/lora/{config,layer,dora}.py`, peft 0.21), and how
//! bitsandbytes stores a frozen base loaded in 4 or 8 bits (`bitsandbytes/functional.py`
//! `quantize_4bit`, `nn/modules.py` `Params4bit`/`Int8Params`, bitsandbytes 0.50).

use serde::Serialize;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::{EncoderHead, Model, Role, TensorGroup};

/// LoRA or DoRA (weight-decomposed LoRA: a trainable magnitude vector per adapted module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// `LoraConfig()`.
    Lora,
    /// `LoraConfig(use_dora=True)`.
    Dora,
}

impl Method {
    /// Parse `lora` or `dora` (`qlora` is LoRA on a 4-bit base: say `--load-in-4bit`).
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "lora" => Ok(Method::Lora),
            "dora" => Ok(Method::Dora),
            "qlora" => Err(bad("peft method", s, "QLoRA is LoRA on a 4-bit base: use --peft lora --load-in-4bit")),
            _ => Err(bad("peft method", s, "use lora or dora")),
        }
    }
}

/// Which modules get adapters (`LoraConfig.target_modules`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Targets {
    /// peft's default for the architecture (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`,
    /// peft/utils/constants.py).
    Default,
    /// `"all-linear"`: every `nn.Linear`/`Conv1D` but the output layer
    /// (tuners_utils.py `_maybe_include_all_linear_layers`).
    AllLinear,
    /// Module names, matched as peft matches a list: the module's name equals the entry or ends
    /// with `.entry` (tuners_utils.py `check_target_module_exists`).
    Names(Vec<String>),
}

impl Targets {
    /// Parse `all-linear` or a comma-separated list (also a Python-style list `["q_proj","v_proj"]`).
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("all-linear") || t.eq_ignore_ascii_case("all_linear") {
            return Ok(Targets::AllLinear);
        }
        let names: Vec<String> = t
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split([',', ' '])
            .map(|n| n.trim().trim_matches(['"', '\'']).to_string())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return Err(bad("LoRA target modules", s, "use all-linear or module names such as q_proj,v_proj"));
        }
        Ok(Targets::Names(names))
    }
}

/// A LoRA/DoRA adapter configuration (peft `LoraConfig`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lora {
    /// LoRA or DoRA.
    pub method: Method,
    /// Rank `r` (peft default 8).
    pub r: u64,
    /// `lora_alpha` (peft default 8): scales the update, allocates nothing.
    pub alpha: f64,
    /// `lora_dropout` (peft default 0.0): above 0 each adapted module keeps a dropout mask.
    pub dropout: f64,
    /// Target modules.
    pub targets: Targets,
    /// `modules_to_save`: fully trained copies of these modules (`embed_tokens`, `lm_head`).
    pub modules_to_save: Vec<String>,
}

impl Default for Lora {
    fn default() -> Self {
        Lora { method: Method::Lora, r: 8, alpha: 8.0, dropout: 0.0, targets: Targets::Default, modules_to_save: Vec::new() }
    }
}

/// 4-bit data type of bitsandbytes' `Linear4bit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantType {
    /// NormalFloat4 (QLoRA paper).
    Nf4,
    /// 4-bit float.
    Fp4,
}

/// What the training script does to the unquantized rest of a bitsandbytes base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KbitPrepare {
    /// peft `prepare_model_for_kbit_training`: every fp16/bf16 parameter that is not 4-bit becomes
    /// fp32 (embeddings, LM head, norms, biases; peft/utils/other.py).
    Peft,
    /// TRL `SFTTrainer` with `bf16=True`: the same, then `peft_module_casting_to_bf16` puts the
    /// embeddings and LM head back in bf16, norms stay fp32 (trl/trainer/utils.py).
    Trl,
}

/// How the frozen base weights are held on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum BaseWeights {
    /// Unquantized, in this dtype (`torch_dtype=`).
    Dtype {
        /// The load dtype.
        dtype: DType,
    },
    /// `BitsAndBytesConfig(load_in_4bit=True, …)`.
    Bnb4 {
        /// `bnb_4bit_quant_type`.
        quant_type: QuantType,
        /// `bnb_4bit_use_double_quant`: the per-block scales are themselves quantized.
        nested: bool,
        /// `bnb_4bit_compute_dtype`: what each weight is dequantized to for its matmul.
        compute: DType,
        /// `bnb_4bit_quant_storage` (uint8 by default; bf16 for FSDP-QLoRA): same bytes either way.
        storage: DType,
        /// What happens to the unquantized rest.
        prepare: KbitPrepare,
    },
    /// `BitsAndBytesConfig(load_in_8bit=True)`: LLM.int8 (`Linear8bitLt`).
    Bnb8 {
        /// What happens to the unquantized rest.
        prepare: KbitPrepare,
    },
}

impl BaseWeights {
    /// Whether the base is quantized by bitsandbytes at load time.
    pub fn is_bnb(self) -> bool {
        !matches!(self, BaseWeights::Dtype { .. })
    }

    /// The preparation of a bitsandbytes base (`None` for an unquantized one).
    pub fn prepare(self) -> Option<KbitPrepare> {
        match self {
            BaseWeights::Dtype { .. } => None,
            BaseWeights::Bnb4 { prepare, .. } | BaseWeights::Bnb8 { prepare } => Some(prepare),
        }
    }

    /// Short name for titles: `bf16`, `nf4`, `nf4 (double quant)`, `int8`.
    pub fn describe(self) -> String {
        match self {
            BaseWeights::Dtype { dtype } => dtype.short_name().to_string(),
            BaseWeights::Bnb4 { quant_type, nested, .. } => {
                let t = if quant_type == QuantType::Nf4 { "nf4" } else { "fp4" };
                if nested {
                    format!("{t} (double quant)")
                } else {
                    t.to_string()
                }
            }
            BaseWeights::Bnb8 { .. } => "int8 (LLM.int8)".into(),
        }
    }
}

/// bitsandbytes' 4-bit block size (`quantize_4bit(blocksize=64)`, the `Linear4bit` default).
pub const BNB4_BLOCK: u64 = 64;
/// Block size of the second-level quantization of the absmax (`compress_statistics`:
/// `quantize_blockwise(absmax, blocksize=256)`, functional.py).
pub const BNB4_NESTED_BLOCK: u64 = 256;

/// Bytes bitsandbytes keeps for one 4-bit weight of `numel` elements (functional.py
/// `quantize_4bit`): two values per byte, an fp32 absmax per 64-element block, the 16-entry fp32
/// code; with double quantization the absmax becomes uint8 plus an fp32 absmax per 256 of them,
/// the 256-entry fp32 code of the second level and its fp32 offset. Each tensor is counted
/// separately; the caching allocator's 512-byte rounding is applied by the caller if wanted.
pub fn bnb4_tensors(numel: u64, nested: bool) -> Vec<u64> {
    let blocks = numel.div_ceil(BNB4_BLOCK);
    let mut v = vec![numel.div_ceil(2), 16 * 4];
    if nested {
        v.extend([blocks, blocks.div_ceil(BNB4_NESTED_BLOCK) * 4, 256 * 4, 4]);
    } else {
        v.push(blocks * 4);
    }
    v
}

/// Bytes of an LLM.int8 weight (`Int8Params`): int8 data plus an fp32 scale per output row (`SCB`).
pub fn bnb8_tensors(rows: u64, numel: u64) -> Vec<u64> {
    vec![numel, rows * 4]
}

/// Which linear of a decoder layer a module is, for the activation model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// Reads the attention input (q/k/v, fused qkv, MLA q_a/kv_a).
    AttnIn,
    /// Inside attention (MLA q_b/kv_b).
    AttnInner,
    /// Attention output projection.
    AttnOut,
    /// Reads the MLP input (gate/up/fc1, router, shared expert gate/up and gate).
    MlpIn,
    /// MLP output projection (down/fc2, shared expert down).
    MlpOut,
    /// Outside the decoder layers (OPT project_in/out).
    Outside,
    /// Fused routed experts adapted as a parameter (`target_parameters`, `lora.ParamWrapper`).
    Experts,
    /// The MoE router adapted as a parameter.
    Router,
    /// Cross-attention's query projection (reads the decoder's hidden states).
    CrossIn,
    /// Cross-attention's key and value projections (read the encoder output: per source token).
    CrossMemory,
    /// Cross-attention's output projection.
    CrossOut,
    /// Reads a linear-attention mixer's input (Gated DeltaNet `in_proj_*`).
    MixerIn,
    /// A linear-attention mixer's output projection (Gated DeltaNet `out_proj`).
    MixerOut,
}

/// One group of identical modules LoRA adapts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Adapted {
    /// The module's name as transformers and peft print it (`q_proj`, `c_attn`).
    pub name: String,
    /// Input features.
    pub din: u64,
    /// Output features.
    pub dout: u64,
    /// How many such modules (one per layer).
    pub count: u64,
    /// Where it sits in a layer.
    pub slot: Slot,
    /// Whether it lives in MoE layers (the layer index matters for mixed dense/MoE models).
    pub moe_layer: bool,
    /// Experts stacked in the parameter (1 for a module).
    pub experts: u64,
    /// Rank of this target: `r`, or `2r` for a fused gate_up_proj (peft doubles it).
    pub rank: u64,
}

/// What a LoRA configuration adapts on a model, and the parameters that trains.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// Adapted module groups.
    pub adapted: Vec<Adapted>,
    /// Trainable adapter parameters (lora_A, lora_B, DoRA magnitudes), all fp32 under peft's
    /// default `autocast_adapter_dtype=True` (peft/tuners/tuners_utils.py `_cast_adapter_dtype`).
    pub adapter_parameters: u64,
    /// Fully trained copies made by `modules_to_save` (`ModulesToSaveWrapper`), in the base dtype.
    pub saved_module_parameters: u64,
    /// Tensors in the trainable set (the optimizer's parameter list).
    pub trainable: Vec<TensorGroup>,
}

impl Resolved {
    /// Adapted modules in total.
    pub fn modules(&self) -> u64 {
        self.adapted.iter().map(|a| a.count).sum()
    }
}

/// The architecture an encoder-decoder's encoder stack belongs to (`t5_encoder` → `t5`).
fn family(model_type: &str) -> &str {
    model_type.strip_suffix("_encoder").unwrap_or(model_type)
}

/// The name transformers gives a normalised linear leaf on this architecture.
fn hf_leaf<'a>(model_type: &str, leaf: &'a str, in_mlp: bool) -> &'a str {
    match (family(model_type), leaf) {
        // modeling_t5.py: SelfAttention/EncDecAttention q, k, v, o; DenseReluDense wi (wi_0,
        // wi_1 gated) and wo.
        ("t5" | "mt5", "q_proj") => "q",
        ("t5" | "mt5", "k_proj") => "k",
        ("t5" | "mt5", "v_proj") => "v",
        ("t5" | "mt5", "o_proj" | "out_proj") => "o",
        ("t5" | "mt5", "gate_proj") => "wi_0",
        ("t5" | "mt5", "up_proj") => "wi_1",
        ("t5" | "mt5", "fc1") => "wi",
        ("t5" | "mt5", "down_proj" | "fc2") => "wo",
        // modeling_bart.py / modeling_whisper.py: self_attn.out_proj.
        ("bart" | "mbart" | "whisper", "o_proj") => "out_proj",
        // modeling_bert.py (RoBERTa, XLM-R, CamemBERT, ELECTRA alike): attention.self.query/
        // key/value, attention.output.dense, intermediate.dense, output.dense.
        ("bert" | "roberta" | "xlm-roberta" | "camembert" | "electra", "q_proj") => "query",
        ("bert" | "roberta" | "xlm-roberta" | "camembert" | "electra", "k_proj") => "key",
        ("bert" | "roberta" | "xlm-roberta" | "camembert" | "electra", "v_proj") => "value",
        ("bert" | "roberta" | "xlm-roberta" | "camembert" | "electra", "o_proj" | "fc1" | "fc2") => "dense",
        // transformers 5 names ViT's and DINOv2's attention q_proj/k_proj/v_proj/o_proj and
        // their MLP fc1/fc2 (modeling_vit.py ViTAttention, ViTMLP): vram's own names.
        // CLIPAttention / SiglipAttention: q_proj, k_proj, v_proj, out_proj; mlp.fc1/fc2.
        ("clip_vision_model" | "siglip_vision_model", "o_proj") => "out_proj",
        // modeling_distilbert.py: attention.q_lin/k_lin/v_lin/out_lin, ffn.lin1/lin2.
        ("distilbert", "q_proj") => "q_lin",
        ("distilbert", "k_proj") => "k_lin",
        ("distilbert", "v_proj") => "v_lin",
        ("distilbert", "o_proj") => "out_lin",
        ("distilbert", "fc1") => "lin1",
        ("distilbert", "fc2") => "lin2",
        // modeling_modernbert.py: attn.Wqkv (fused), attn.Wo, mlp.Wi (input and gate fused),
        // mlp.Wo: the attention's and the MLP's output projections share the name `Wo`.
        ("modernbert", "qkv_proj") => "Wqkv",
        ("modernbert", "o_proj" | "down_proj") => "Wo",
        ("modernbert", "gate_up_proj") => "Wi",
        ("gpt2", "qkv_proj") => "c_attn",
        ("gpt2", "o_proj") => "c_proj",
        ("gpt2", "fc1") => "c_fc",
        ("gpt2", "fc2") => "c_proj",
        ("starcoder2", "fc1") => "c_fc",
        ("starcoder2", "fc2") => "c_proj",
        ("opt", "o_proj") => "out_proj",
        ("phi", "o_proj") => "dense",
        ("gpt_neox" | "falcon", "qkv_proj") => "query_key_value",
        ("gpt_neox" | "falcon", "o_proj") => "dense",
        ("gpt_neox" | "falcon", "fc1") => "dense_h_to_4h",
        ("gpt_neox" | "falcon", "fc2") => "dense_4h_to_h",
        (_, "gate") if in_mlp => "gate",
        _ => leaf,
    }
}

/// peft's default target modules for a `model_type` (peft/utils/constants.py
/// `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`, peft 0.21.2; checked against
/// `validation/fixtures/peft_targets.json`).
pub fn default_targets(model_type: &str) -> Option<&'static [&'static str]> {
    Some(match family(model_type) {
        "t5" | "mt5" => &["q", "v"],
        "bert" | "roberta" | "xlm-roberta" | "electra" => &["query", "value"],
        "bart" | "mbart" | "whisper" => &["q_proj", "v_proj"],
        "gpt2" | "gpt_bigcode" => &["c_attn"],
        "gpt_neox" | "falcon" | "bloom" => &["query_key_value"],
        "phi" => &["q_proj", "v_proj", "fc1", "fc2"],
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen3" | "gemma" | "gemma2" | "gemma3_text" | "opt" | "stablelm" | "gptj" => {
            &["q_proj", "v_proj"]
        }
        _ => return None,
    })
}

/// How transformers 5 re-fused an MoE architecture's experts, which decides what peft adapts
/// (transformers/conversion_mapping.py `_MODEL_TO_CONVERSION_PATTERN`; peft
/// utils/transformers_weight_conversion.py `_MOE_TARGET_MODULE_MAPPING`, `_convert_peft_config_moe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MoePattern {
    /// Mixtral: the v4 names w1, w3 (fused into gate_up_proj), w2 (down_proj) and gate (the router).
    Mixtral,
    /// Qwen2-MoE style: gate_proj, up_proj (gate_up_proj), down_proj and gate.
    Qwen2Moe,
}

fn moe_pattern(model_type: &str) -> Option<MoePattern> {
    match model_type {
        // `mixtral` converts itself (measured with peft 0.21.2: experts and router adapted).
        "mixtral" | "minimax" | "minimax_m2" => Some(MoePattern::Mixtral),
        // qwen2_moe itself has no conversion entry: its experts are not adapted (measured).
        "deepseek_v2" | "deepseek_v3" | "qwen3_moe" | "glm4_moe" | "olmoe" | "ernie4_5_moe" | "hunyuan_v1_moe" | "qwen3_next" => {
            Some(MoePattern::Qwen2Moe)
        }
        _ => None,
    }
}

impl MoePattern {
    /// v4 name → which v5 parameter it became.
    fn mapping(self) -> &'static [(&'static str, Slot)] {
        match self {
            MoePattern::Mixtral => &[("gate", Slot::Router), ("w1", Slot::Experts), ("w3", Slot::Experts), ("w2", Slot::MlpOut)],
            MoePattern::Qwen2Moe => {
                &[("gate", Slot::Router), ("gate_proj", Slot::Experts), ("up_proj", Slot::Experts), ("down_proj", Slot::MlpOut)]
            }
        }
    }
}

/// One linear module of the model, as LoRA sees it.
struct Linear {
    name: String,
    din: u64,
    dout: u64,
    count: u64,
    slot: Slot,
    moe_layer: bool,
}

/// Every `nn.Linear`/`Conv1D` of the model but the output layer, as peft's `all-linear` finds
/// them. Routed experts are 3-D parameters in transformers 5, not modules: LoRA does not adapt
/// them through `target_modules`.
fn linears(m: &Model) -> Vec<Linear> {
    let mut out = Vec::new();
    let mut push = |t: &TensorGroup, moe_layer: bool, count: u64| {
        // The MoE router is a custom module holding a weight in transformers 5 (MixtralTopKRouter,
        // GptOssTopKRouter), not an nn.Linear: only the MoE conversion targets it, as a parameter.
        // A mixer's depthwise nn.Conv1d is no linear layer for peft's all-linear.
        if (t.role != Role::Linear && t.role != Role::Router)
            || t.name.ends_with("conv1d.weight")
            || t.name.ends_with("mlp.gate.weight")
            || t.name.ends_with("mlp.router.weight")
        {
            return;
        }
        let Some(stem) = t.name.strip_suffix(".weight") else { return };
        let leaf = stem.rsplit('.').next().unwrap_or(stem);
        let in_mlp = stem.contains(".mlp.");
        let cross = stem.contains(".encoder_attn.");
        let mixer = stem.contains(".linear_attn.");
        let slot = match leaf {
            "out_proj" if mixer => Slot::MixerOut,
            _ if mixer => Slot::MixerIn,
            "q_proj" if cross => Slot::CrossIn,
            "k_proj" | "v_proj" if cross => Slot::CrossMemory,
            "out_proj" if cross => Slot::CrossOut,
            "q_proj" | "k_proj" | "v_proj" | "qkv_proj" | "q_a_proj" | "kv_a_proj_with_mqa" => Slot::AttnIn,
            "q_b_proj" | "kv_b_proj" => Slot::AttnInner,
            "o_proj" => Slot::AttnOut,
            "down_proj" | "fc2" => Slot::MlpOut,
            "project_in" | "project_out" => Slot::Outside,
            _ => Slot::MlpIn,
        };
        out.push(Linear { name: hf_leaf(&m.model_type, leaf, in_mlp).to_string(), din: t.cols, dout: t.rows, count, slot, moe_layer });
    };
    for t in m.tensors() {
        if !t.name.starts_with("layers.") {
            push(&t, false, t.count);
        }
    }
    // Per layer kind (dense / MoE; a hybrid's attention / linear-attention layers), counted by
    // how many layers of that kind exist.
    for moe in [false, true] {
        for mixer in [false, true] {
            let kind = |i: u64| m.is_moe_layer(i) == moe && m.is_ssm_layer(i) == mixer;
            let n = (0..m.layers).filter(|&i| kind(i)).count() as u64;
            let Some(i) = (0..m.layers).find(|&i| kind(i)) else { continue };
            for t in m.layer_inventory(i) {
                push(&t, moe, n);
            }
        }
    }
    // A module both layer kinds of a hybrid have (the MLP) is one group over all its layers.
    let mut merged: Vec<Linear> = Vec::with_capacity(out.len());
    for l in out {
        match merged
            .iter_mut()
            .find(|x| x.name == l.name && x.din == l.din && x.dout == l.dout && x.slot == l.slot && x.moe_layer == l.moe_layer)
        {
            Some(x) => x.count += l.count,
            None => merged.push(l),
        }
    }
    merged
}

/// [`resolve`] over the whole model: an encoder-decoder's encoder stack adds its own adapted
/// modules (peft matches the same names in both stacks). [`resolve`] itself sees one stack, as
/// the memory model accounts each where it lives.
pub fn resolve_model(model: &Model, lora: &Lora) -> Result<Resolved> {
    let mut r = resolve(model, lora)?;
    if let Some(s) = &model.seq2seq {
        let enc = resolve(&s.encoder, lora)?;
        r.adapted.extend(enc.adapted);
        r.adapter_parameters += enc.adapter_parameters;
        r.saved_module_parameters += enc.saved_module_parameters;
        r.trainable.extend(enc.trainable);
    }
    Ok(r)
}

/// Resolve `lora` against `model`: the adapted modules and the trainable parameters, or a clear
/// error for a rank of 0, a name that matches no module, or an architecture without a default.
pub fn resolve(model: &Model, lora: &Lora) -> Result<Resolved> {
    if lora.r == 0 || lora.r > 1 << 16 {
        return Err(bad("LoRA rank", &lora.r.to_string(), "must be between 1 and 65536 (peft's default is 8; 8–64 is usual)"));
    }
    if !(0.0..1.0).contains(&lora.dropout) || !lora.dropout.is_finite() {
        return Err(bad("LoRA dropout", &lora.dropout.to_string(), "must be a probability in [0, 1), e.g. 0.05"));
    }
    let all = linears(model);
    let names: Vec<String> = match &lora.targets {
        Targets::AllLinear => Vec::new(),
        // peft 0.21 converts an MoE model's config for transformers 5 before it fills in the
        // default targets, leaving none (NoMatchingPeftModuleError; measured in
        // validation/fixtures/peft_targets.json).
        Targets::Default if model.moe.is_some() && moe_pattern(&model.model_type).is_some() => {
            return Err(bad(
                "LoRA target modules",
                "default",
                &format!(
                    "peft 0.21 finds no default target modules for {} on transformers 5 (NoMatchingPeftModuleError: its MoE conversion runs first); pass --lora-target-modules, e.g. q_proj,v_proj or all-linear",
                    model.model_type
                ),
            ))
        }
        Targets::Default => match default_targets(&model.model_type) {
            Some(d) => d.iter().map(|s| s.to_string()).collect(),
            None => {
                return Err(bad(
                    "LoRA target modules",
                    "default",
                    &format!(
                        "peft has no default target modules for model_type `{}` (it raises \"Please specify `target_modules`\"); pass --lora-target-modules all-linear or names from: {}",
                        model.model_type,
                        available(&all)
                    ),
                ))
            }
        },
        Targets::Names(n) => n.clone(),
    };
    let pattern = moe_pattern(&model.model_type).filter(|_| model.moe.is_some());
    // Names the MoE conversion turns into parameter targets (all-linear includes them all).
    let mapped: Vec<(&str, Slot)> = pattern.map_or(&[][..], MoePattern::mapping).to_vec();
    let leaf = |n: &str| n.rsplit('.').next().unwrap_or(n).to_string();
    let mut param_targets: Vec<Slot> = Vec::new();
    let mut module_names: Vec<String> = Vec::new();
    let listed: Vec<String> = if lora.targets == Targets::AllLinear {
        let mut v: Vec<String> = all.iter().map(|l| l.name.clone()).collect();
        v.extend(mapped.iter().map(|(n, _)| n.to_string()));
        v
    } else {
        names.iter().map(|n| leaf(n)).collect()
    };
    for n in &listed {
        match mapped.iter().find(|(old, _)| old == n) {
            Some((_, slot)) => param_targets.push(*slot),
            None if all.iter().any(|l| &l.name == n) => module_names.push(n.clone()),
            None => {
                return Err(bad(
                    "LoRA target module",
                    n,
                    &format!("no module of {} is named so; its linear modules are: {}", model.name, available(&all)),
                ))
            }
        }
    }
    let mut adapted: Vec<Adapted> = all
        .into_iter()
        .filter(|l| module_names.contains(&l.name))
        .map(|l| Adapted {
            name: l.name,
            din: l.din,
            dout: l.dout,
            count: l.count,
            slot: l.slot,
            moe_layer: l.moe_layer,
            experts: 1,
            rank: lora.r,
        })
        .collect();
    if let Some(p) = pattern {
        adapted.extend(expert_targets(model, lora, p, &listed, &param_targets)?);
    }
    let mut trainable = Vec::new();
    let mut adapter_parameters = 0u64;
    for a in &adapted {
        // lora_A: Linear(din, r, bias=False); lora_B: Linear(r, dout, bias=False) (layer.py update_layer);
        // DoRA: lora_magnitude_vector of dout (dora.py DoraLinearLayer).
        // ParamWrapper: lora_A Linear(in, r·experts), lora_B Linear(r·experts, out) (layer.py update_layer).
        let re = a.rank * a.experts;
        let mut shapes = vec![
            TensorGroup::matrix(format!("{}.lora_A.weight", a.name), 1, re, a.din, a.count, Role::Adapter),
            TensorGroup::matrix(format!("{}.lora_B.weight", a.name), 1, a.dout, re, a.count, Role::Adapter),
        ];
        if lora.method == Method::Dora {
            shapes.push(TensorGroup::vector(format!("{}.lora_magnitude_vector", a.name), a.dout, a.count, Role::Adapter));
        }
        for t in shapes {
            adapter_parameters = adapter_parameters.saturating_add(t.numel.saturating_mul(t.count));
            trainable.push(t);
        }
    }
    let mut saved = 0u64;
    for s in &lora.modules_to_save {
        let group = save_target(model, s)?;
        saved = saved.saturating_add(group.numel.saturating_mul(group.count));
        trainable.push(group);
    }
    for group in classifier_copy(model, lora) {
        saved = saved.saturating_add(group.numel.saturating_mul(group.count));
        trainable.push(group);
    }
    Ok(Resolved { adapted, adapter_parameters, saved_module_parameters: saved, trainable })
}

/// The MoE parameters peft adapts after transformers' conversion: the router's weight and the
/// fused experts, each a `lora.ParamWrapper` (no dropout, no DoRA: peft refuses both), the fused
/// gate_up_proj at twice the rank (its two v4 projections share it).
fn expert_targets(model: &Model, lora: &Lora, p: MoePattern, listed: &[String], slots: &[Slot]) -> Result<Vec<Adapted>> {
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let fused: Vec<&str> = p.mapping().iter().filter(|(_, s)| *s == Slot::Experts).map(|(n, _)| *n).collect();
    let present = fused.iter().filter(|n| listed.iter().any(|l| l == *n)).count();
    if present > 0 && present < fused.len() {
        return Err(bad(
            "LoRA target modules",
            &listed.join(","),
            &format!(
                "{} are fused into gate_up_proj on transformers 5: target both or neither (peft refuses one alone)",
                fused.join(" and ")
            ),
        ));
    }
    if lora.dropout > 0.0 || lora.method == Method::Dora {
        return Err(bad(
            "LoRA configuration",
            if lora.method == Method::Dora { "dora" } else { "lora_dropout > 0" },
            "peft adapts this model's fused experts and router as parameters (lora.ParamWrapper), which support neither dropout nor DoRA: set --lora-dropout 0 and --peft lora, or name attention modules only",
        ));
    }
    let moe = model.moe.as_ref().expect("pattern only for MoE models");
    let (h, e, i, n) = (model.hidden, moe.experts, moe.expert_intermediate, model.moe_layers());
    let mut v = Vec::new();
    let mut push = |name: &str, din: u64, dout: u64, experts: u64, rank: u64, slot: Slot| {
        v.push(Adapted { name: name.into(), din, dout, count: n, slot, moe_layer: true, experts, rank });
    };
    if slots.contains(&Slot::Router) {
        push("gate", h, e, 1, lora.r, Slot::Router);
    }
    if slots.contains(&Slot::Experts) {
        push("experts.gate_up_proj", h, 2 * i, e, 2 * lora.r, Slot::Experts);
    }
    if slots.contains(&Slot::MlpOut) {
        push("experts.down_proj", i, h, e, lora.r, Slot::Experts);
    }
    Ok(v)
}

/// An encoder's classification head, which peft trains as a `modules_to_save` copy with
/// `task_type` SEQ_CLS or TOKEN_CLS (peft_model.py `PeftModelForSequenceClassification`:
/// `classifier_module_names = ["classifier", "score"]`). The module named `classifier` is the
/// whole head on RoBERTa, XLM-R, CamemBERT and ELECTRA (dense + out_proj: vram's `pooler.dense`
/// and `classifier`), the last linear on BERT and DistilBERT.
fn classifier_copy(m: &Model, lora: &Lora) -> Vec<TensorGroup> {
    let Some(enc) = m.encoder.filter(|e| e.vision.is_none()) else { return Vec::new() };
    if lora.modules_to_save.iter().any(|s| s == "classifier") {
        return Vec::new();
    }
    if !matches!(enc.head, EncoderHead::SequenceClassification { .. } | EncoderHead::TokenClassification { .. }) {
        return Vec::new();
    }
    let whole_head = matches!(family(&m.model_type), "roberta" | "xlm-roberta" | "camembert" | "electra")
        && matches!(enc.head, EncoderHead::SequenceClassification { .. });
    m.tensors().into_iter().filter(|t| t.name.starts_with("classifier.") || (whole_head && t.name.starts_with("pooler.dense."))).collect()
}

/// The module a `modules_to_save` entry names (embeddings or the LM head).
fn save_target(m: &Model, name: &str) -> Result<TensorGroup> {
    // An encoder's classification head (peft's ViT recipe: modules_to_save=["classifier"]).
    if name == "classifier" && m.encoder.is_some() {
        let n: u64 = m.tensors().iter().filter(|t| t.name.starts_with("classifier.")).map(|t| t.numel.saturating_mul(t.count)).sum();
        if n == 0 {
            return Err(bad(
                "LoRA modules_to_save",
                name,
                "the model has no classification head (pass --task image-classification or text-classification)",
            ));
        }
        return Ok(TensorGroup::vector("classifier".into(), n, 1, Role::Linear));
    }
    let role = match name {
        "embed_tokens" | "wte" | "embed_in" | "word_embeddings" => Role::Embedding,
        "lm_head" | "embed_out" => Role::LmHead,
        _ => {
            return Err(bad(
                "LoRA modules_to_save",
                name,
                "vram models modules_to_save for the token embedding (embed_tokens) and the LM head (lm_head)",
            ))
        }
    };
    let tensors = m.tensors();
    let found = tensors.iter().find(|t| t.role == role).or_else(|| {
        // A tied LM head is the embedding.
        (role == Role::LmHead && m.tied_embeddings).then(|| tensors.iter().find(|t| t.role == Role::Embedding)).flatten()
    });
    found.cloned().ok_or_else(|| bad("LoRA modules_to_save", name, "the model has no such module"))
}

fn available(all: &[Linear]) -> String {
    let mut names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

fn bad(what: &str, value: &str, hint: &str) -> Error {
    Error::InvalidValue { what: what.into(), value: value.into(), hint: hint.into() }
}
