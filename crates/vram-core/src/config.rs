//! Raw Hugging Face `config.json` → normalised [`Model`].
//!
//! Defaults follow each architecture's transformers configuration class (transformers 5.x
//! `models/*/configuration_*.py`), because a key absent from config.json means "the class
//! default", not "false": GPT-2, OPT, Falcon, Gemma and Starcoder2 tie their embeddings
//! when `tie_word_embeddings` is absent; Llama, Qwen, Mistral do not.

use serde_json::{Map, Value};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::{Act, Attention, Block, Mla, Mlp, Model, Moe, Norm, QkNorm, QuantizationConfig, RopeScaling};
use crate::sniff::sniff;

/// Architectures read natively; anything else is an [`Error::UnsupportedArchitecture`] unless
/// [`ParseOptions::approximate_unknown`] asks for a Llama-style guess.
pub const KNOWN_MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi",
    "phi3",
    "gpt2",
    "gpt_neox",
    "falcon",
    "opt",
    "starcoder2",
    "olmo2",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
];

/// Largest dimension accepted from a config (guards absurd or hostile input).
const MAX_DIM: u64 = 1 << 24;
/// Largest layer count accepted.
const MAX_LAYERS: u64 = 10_000;
/// Longest context accepted in `max_position_embeddings` (2^40 tokens, beyond any model).
const MAX_POSITIONS: u64 = 1 << 40;

/// Families vram recognises but cannot estimate, with the reason given to the user.
const UNSUPPORTED: &[(&[&str], &str)] = &[
    (
        &["bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "modernbert", "camembert", "mpnet", "ernie", "nomic_bert", "xlm"],
        "encoder models are not supported yet: vram models decoder-only causal LMs",
    ),
    (
        &["t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper", "blenderbot", "m2m_100", "nllb-moe", "seamless_m4t", "switch_transformers", "speecht5", "fsmt", "prophetnet"],
        "encoder-decoder models are not supported yet: vram models decoder-only causal LMs",
    ),
    (
        &["mamba", "mamba2", "falcon_mamba", "rwkv", "recurrent_gemma", "xlstm", "jamba", "zamba", "zamba2", "bamba", "nemotron_h", "granitemoehybrid", "falcon_h1", "lfm2"],
        "state-space, recurrent and hybrid models are not supported yet: their recurrent state is not a KV cache and their layers are not attention blocks",
    ),
    (
        &["llava", "llava_next", "llava_onevision", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "mllama", "idefics2", "idefics3", "paligemma", "pixtral", "llama4", "clip", "siglip", "vit", "blip-2", "kosmos-2", "phi3_v", "internvl", "chameleon", "gemma3n", "qwen2_5_omni", "smolvlm", "mistral3", "aya_vision", "dinov2", "sam"],
        "vision and multimodal models are not supported yet: only language models are estimated",
    ),
];

/// How a config is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// Estimate an unknown or unsupported architecture as a Llama-style decoder from its
    /// standard keys instead of failing; the [`Model`] then carries
    /// [`Model::approximation`] (the CLI's `--approximate-architecture`).
    pub approximate_unknown: bool,
}

/// Parse a config.json's bytes into a [`Model`]. `file` names the source in error messages.
/// Unknown or unsupported architectures are errors; see [`parse_config_with`].
pub fn parse_config(bytes: &[u8], name: &str, file: &str) -> Result<Model> {
    parse_config_with(bytes, name, file, ParseOptions::default())
}

/// [`parse_config`] with options (the approximate-architecture opt-in).
pub fn parse_config_with(bytes: &[u8], name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let mut obj = json_object(bytes, file)?;
    let quantization = quantization(&obj, file)?;
    let mut warnings = Vec::new();
    let outer = Outer::read(&obj);
    let outer = unwrap_text_config(&mut obj, outer, &mut warnings);
    let c = Cfg { obj: &obj, file };
    let model_type = c.str("model_type").unwrap_or_default();
    if model_type.is_empty() && !["hidden_size", "n_embd", "d_model"].iter().any(|k| obj.contains_key(*k)) {
        return Err(Error::MissingKey {
            file: file.into(),
            key: "model_type".into(),
            why: "know the architecture; the file has no model dimensions either, so it is not a model's config.json (tokenizer_config.json, generation_config.json and *.index.json are other files)".into(),
        });
    }
    let approximation = check_architecture(&outer, &model_type, file, opts)?;
    if let Some(why) = &approximation {
        warnings.push(format!("APPROXIMATE: {why}"));
    }
    let mut m = match model_type.as_str() {
        "gpt2" => gpt2(&c, name)?,
        "gpt_neox" => gpt_neox(&c, name)?,
        "falcon" => falcon(&c, name)?,
        "opt" => opt(&c, name)?,
        "phi" => phi(&c, name)?,
        _ => llama_like(&c, name, &model_type)?,
    };
    m.model_type = if model_type.is_empty() { "unknown".into() } else { model_type };
    m.use_cache = c.bool("use_cache", true)?;
    m.stored_dtype = c.str("torch_dtype").or_else(|| c.str("dtype")).and_then(|s| DType::from_torch_name(&s));
    positions(&c, &mut m)?;
    if let Some(q) = quantization.as_ref().filter(|q| q.method == "mxfp4") {
        warnings.push(format!(
            "the checkpoint is pre-quantized ({}); inference and serving use the stored quantization; training (full or LoRA) assumes the bf16 weights transformers dequantizes it to (Mxfp4Config(dequantize=True): MXFP4 is not trainable)",
            q.describe()
        ));
    } else if let Some(q) = &quantization {
        warnings.push(format!(
            "the checkpoint is pre-quantized ({}); inference, serving and LoRA (--peft lora: the stored weights are the frozen base) use the stored quantization, while a full-fine-tuning estimate assumes UNQUANTIZED weights in the chosen precision (weight memory overstated)",
            q.describe()
        ));
    }
    m.quantization = quantization;
    m.approximation = approximation;
    m.warnings.splice(0..0, warnings);
    validate(&m, file)?;
    Ok(m)
}

/// Trained context, rotary width and RoPE scaling.
fn positions(c: &Cfg, m: &mut Model) -> Result<()> {
    m.max_positions = c.opt(&["max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"])?.unwrap_or(0);
    // Rotary width: learned positions (GPT-2, OPT) and ALiBi (Falcon-RW, BLOOM) have none;
    // partial rotary per `partial_rotary_factor` (Phi, StableLM) or `rotary_pct` (GPT-NeoX).
    let alibi = c.bool("alibi", false)?;
    m.rotary_dim = match m.attention.mla {
        Some(mla) => mla.qk_rope_head_dim,
        None if m.position_embeddings > 0 || alibi => 0,
        None => {
            let frac = c.f64("partial_rotary_factor", c.f64("rotary_pct", 1.0)?)?.clamp(0.0, 1.0);
            (m.head_dim as f64 * frac) as u64
        }
    };
    if m.rotary_dim > 0 {
        m.rope_scaling = rope_scaling(c, m.max_positions)?;
    }
    Ok(())
}

/// The top level as a JSON object; a file that is not JSON at all says what it is instead.
fn json_object(bytes: &[u8], file: &str) -> Result<Map<String, Value>> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| {
        let kind = sniff(bytes);
        if kind.is_textual() {
            Error::Json { file: file.into(), message: e.to_string() }
        } else {
            Error::NotAConfig { file: file.into(), kind: kind.describe().into(), hint: kind.hint().into() }
        }
    })?;
    match root {
        Value::Object(obj) => Ok(obj),
        _ => Err(Error::Json { file: file.into(), message: "the top level must be a JSON object".into() }),
    }
}

/// What the top level of a config says, before a multimodal wrapper is unwrapped.
struct Outer {
    model_type: String,
    architectures: Vec<String>,
    /// The language model was read from `text_config`.
    unwrapped: bool,
}

impl Outer {
    fn read(obj: &Map<String, Value>) -> Outer {
        let strings = |v: &Vec<Value>| v.iter().filter_map(Value::as_str).map(str::to_string).collect();
        Outer {
            model_type: obj.get("model_type").and_then(Value::as_str).unwrap_or_default().to_string(),
            architectures: obj.get("architectures").and_then(Value::as_array).map_or_else(Vec::new, strings),
            unwrapped: false,
        }
    }
}

/// Multimodal wrappers (Gemma-3, LLaVA …) keep the language model under `text_config`.
fn unwrap_text_config(obj: &mut Map<String, Value>, mut outer: Outer, warnings: &mut Vec<String>) -> Outer {
    if obj.contains_key("hidden_size") || obj.contains_key("n_embd") {
        return outer;
    }
    if let Some(Value::Object(text)) = obj.get("text_config").cloned() {
        warnings.push("multimodal config: estimating the language model in `text_config` only".to_string());
        let outer_dtype = obj.get("torch_dtype").cloned();
        *obj = text;
        if !obj.contains_key("torch_dtype") {
            if let Some(d) = outer_dtype {
                obj.insert("torch_dtype".into(), d);
            }
        }
        outer.unwrapped = true;
    }
    outer
}

/// Refuse what vram cannot estimate, or (with the opt-in) say why the estimate is approximate.
fn check_architecture(outer: &Outer, model_type: &str, file: &str, opts: ParseOptions) -> Result<Option<String>> {
    let mut problems: Vec<(String, String)> = Vec::new();
    if outer.unwrapped && !KNOWN_MODEL_TYPES.contains(&outer.model_type.as_str()) {
        let reason = family_reason(&outer.model_type)
            .unwrap_or("multimodal models are not supported yet: the vision tower is not counted, only the language model in `text_config` could be estimated");
        problems.push((format!("model_type `{}`", outer.model_type), reason.into()));
    }
    if !KNOWN_MODEL_TYPES.contains(&model_type) {
        let what = if model_type.is_empty() { "a config without `model_type`".to_string() } else { format!("model_type `{model_type}`") };
        let reason = family_reason(model_type).unwrap_or("vram does not know this architecture");
        problems.push((what, reason.into()));
    }
    for arch in &outer.architectures {
        if let Some(reason) = head_problem(arch, outer.unwrapped) {
            problems.push((format!("architecture `{arch}`"), reason));
        }
    }
    let Some((what, reason)) = problems.first().cloned() else { return Ok(None) };
    if !opts.approximate_unknown {
        return Err(Error::UnsupportedArchitecture {
            file: file.into(),
            what,
            model_type: model_type.into(),
            reason,
            supported: KNOWN_MODEL_TYPES.to_vec(),
        });
    }
    let all: Vec<String> = problems.iter().map(|(w, r)| format!("{w}: {r}")).collect();
    Ok(Some(format!("{}; estimated as a Llama-style decoder (RMSNorm, SwiGLU, rotary) from its standard keys", all.join("; "))))
}

fn family_reason(model_type: &str) -> Option<&'static str> {
    UNSUPPORTED.iter().find(|(types, _)| types.contains(&model_type)).map(|(_, r)| *r)
}

/// Why a class in `architectures` is not a causal LM head, if it is not one. Heads decide the
/// parameters: a classifier replaces the vocab-sized LM head, a bare `…Model` has none.
fn head_problem(arch: &str, unwrapped: bool) -> Option<String> {
    if arch.ends_with("ForCausalLM") || arch.ends_with("LMHeadModel") || (unwrapped && arch.ends_with("ForConditionalGeneration")) {
        return None;
    }
    let what = [
        ("ForSequenceClassification", "a sequence-classification head replaces the LM head"),
        ("ForTokenClassification", "a token-classification head replaces the LM head"),
        ("ForQuestionAnswering", "a question-answering head replaces the LM head"),
        ("ForMaskedLM", "a masked-LM head belongs to an encoder"),
        ("ForConditionalGeneration", "conditional generation is an encoder-decoder or multimodal model"),
        ("Model", "a bare backbone has no LM head (an embedding or reward model?)"),
    ]
    .iter()
    .find(|(suffix, _)| arch.ends_with(suffix))
    .map_or("it is not a causal-LM class (`…ForCausalLM`)", |(_, w)| w);
    Some(format!("{what}; vram estimates causal-LM checkpoints (`…ForCausalLM`)"))
}

/// The checkpoint's `quantization_config` (transformers `utils/quantization_config.py`).
fn quantization(obj: &Map<String, Value>, file: &str) -> Result<Option<QuantizationConfig>> {
    let q = match obj.get("quantization_config") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(q)) => q,
        Some(v) => {
            return Err(Error::BadKey {
                file: file.into(),
                key: "quantization_config".into(),
                value: v.to_string(),
                hint: "expected an object".into(),
            })
        }
    };
    let u = |k: &str| q.get(k).and_then(Value::as_u64);
    let s = |k: &str| q.get(k).and_then(Value::as_str).map(str::to_string);
    let flag = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
    // compressed-tensors: config_groups.<g>.weights.{num_bits, group_size}.
    let ct_weights = q.get("config_groups").and_then(Value::as_object).and_then(|g| g.values().find_map(|v| v.get("weights")));
    let ct = |k: &str| ct_weights.and_then(|w| w.get(k)).and_then(Value::as_u64);
    let bnb_bits = if flag("load_in_4bit") {
        Some(4)
    } else if flag("load_in_8bit") {
        Some(8)
    } else {
        None
    };
    let method = s("quant_method")
        .map(|m| m.to_ascii_lowercase())
        .or(bnb_bits.map(|_| "bitsandbytes".to_string()))
        .unwrap_or_else(|| "unknown".into());
    let implied_bits = match method.as_str() {
        "fp8" | "fbgemm_fp8" => Some(8),
        "mxfp4" => Some(4),
        _ => None,
    };
    let block =
        q.get("weight_block_size").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).fold(1u64, u64::saturating_mul));
    // MXFP4 shares one E8M0 scale per 32 values (OCP Microscaling spec v1.0).
    let implied_group = if method == "mxfp4" { Some(32) } else { None };
    let mut excluded = Vec::new();
    for k in ["modules_to_not_convert", "ignore", "llm_int8_skip_modules", "ignored_layers"] {
        if let Some(Value::Array(a)) = q.get(k) {
            excluded.extend(a.iter().filter_map(Value::as_str).map(str::to_string));
        }
    }
    Ok(Some(QuantizationConfig {
        bits: u("bits").or(u("w_bit")).or(u("weight_bits")).or(bnb_bits).or(ct("num_bits")).or(implied_bits),
        group_size: u("group_size").or(u("q_group_size")).or(ct("group_size")).or(block).or(implied_group),
        format: s("fmt").or(s("bnb_4bit_quant_type")).or(s("format")).or(s("checkpoint_format")).or(s("version")),
        method,
        excluded,
        raw: q.clone(),
    }))
}

/// `rope_scaling` (transformers 4.x) or `rope_parameters` (5.x): which extension applies and the
/// native and extended context (`modeling_rope_utils.py`).
fn rope_scaling(c: &Cfg, max_positions: u64) -> Result<Option<RopeScaling>> {
    let Some(Value::Object(r)) = c.get("rope_scaling").or_else(|| c.get("rope_parameters")) else { return Ok(None) };
    let kind = r.get("rope_type").or_else(|| r.get("type")).and_then(Value::as_str).unwrap_or("default").to_string();
    if kind == "default" {
        return Ok(None);
    }
    let factor = match r.get("factor") {
        None | Some(Value::Null) => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite() && *f > 0.0 && *f <= 1e6)
            .ok_or_else(|| c.bad("rope_scaling.factor", v, "expected a positive number"))?,
    };
    // Phi-3 longrope keeps original_max_position_embeddings at the top level.
    let original = r.get("original_max_position_embeddings").and_then(Value::as_u64).or(c.opt(&["original_max_position_embeddings"])?);
    let native = original.unwrap_or(max_positions).min(MAX_POSITIONS);
    if native == 0 {
        return Ok(None);
    }
    // Linear, Llama-3 and LongRoPE configs state the reach in max_position_embeddings; dynamic
    // NTK and YaRN stretch the native context by `factor`.
    let stretched = match kind.as_str() {
        "linear" | "llama3" | "longrope" => native,
        "dynamic" | "yarn" | "ntk" => ((native as f64 * factor) as u64).min(MAX_POSITIONS),
        // Another type (mrope, default …): its reach is not known, so claim none beyond the config's.
        _ => max_positions,
    };
    Ok(Some(RopeScaling { kind, factor, native_positions: native, extended_positions: stretched.max(max_positions) }))
}

struct Cfg<'a> {
    obj: &'a Map<String, Value>,
    file: &'a str,
}

impl Cfg<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }
    fn str(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|v| v.as_str()).map(str::to_string)
    }
    fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.bad(key, v, "expected true or false")),
        }
    }
    fn f64(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| self.bad(key, v, "expected a number")),
        }
    }
    /// An optional positive integer; `0` is read as absent only when `zero_ok`.
    fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n <= MAX_DIM.max(MAX_LAYERS) * 64 => Ok(Some(n)),
                // Floats with an integral value (some configs write 4096.0).
                _ => match v.as_f64() {
                    Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= 1e12 => Ok(Some(f as u64)),
                    _ => Err(self.bad(key, v, "expected a non-negative integer")),
                },
            },
        }
    }
    /// First present key among `keys`, or a `MissingKey` error naming the first.
    fn req(&self, keys: &[&str], why: &str) -> Result<u64> {
        for k in keys {
            if let Some(v) = self.opt_u64(k)? {
                return Ok(v);
            }
        }
        Err(Error::MissingKey { file: self.file.into(), key: keys[0].into(), why: why.into() })
    }
    fn opt(&self, keys: &[&str]) -> Result<Option<u64>> {
        for k in keys {
            if let Some(v) = self.opt_u64(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
    fn bad(&self, key: &str, v: &Value, hint: &str) -> Error {
        Error::BadKey { file: self.file.into(), key: key.into(), value: v.to_string(), hint: hint.into() }
    }
    fn act(&self, keys: &[&str], default: Act) -> Act {
        keys.iter().find_map(|k| self.str(k)).map_or(default, |s| act_from_name(&s))
    }
    fn dropout(&self, keys: &[&str]) -> Result<f64> {
        for k in keys {
            if self.get(k).is_some() {
                return self.f64(k, 0.0);
            }
        }
        Ok(0.0)
    }
}

/// transformers `ACT2FN` names → how PyTorch evaluates them.
fn act_from_name(s: &str) -> Act {
    match s {
        "silu" | "swish" => Act::Silu,
        "gelu_new" | "gelu_fast" | "gelu_python" | "gelu_accurate" | "gelu_python_tanh" => Act::GeluPython,
        "relu" => Act::Relu,
        // "gelu", "gelu_pytorch_tanh", "gelu_10" and the rest: one native kernel.
        _ => Act::Gelu,
    }
}

fn base(name: &str) -> Model {
    Model {
        name: name.into(),
        model_type: String::new(),
        hidden: 0,
        layers: 0,
        heads: 0,
        kv_heads: 0,
        head_dim: 0,
        vocab: 0,
        intermediate: 0,
        tied_embeddings: false,
        position_embeddings: 0,
        embed_dim: 0,
        norm: Norm::RmsNorm,
        block: Block::Sequential,
        attention: Attention {
            qkv_bias: false,
            o_bias: false,
            fused_qkv: false,
            qk_norm: QkNorm::None,
            mla: None,
            softcap: false,
            sinks: false,
        },
        mlp: Mlp { gated: true, fused_gate_up: false, act: Act::Silu, bias: false },
        moe: None,
        final_norm: true,
        lm_head_bias: false,
        sliding_window: None,
        sliding_layers: 0,
        final_softcap: false,
        attention_dropout: 0.0,
        hidden_dropout: 0.0,
        stored_dtype: None,
        use_cache: true,
        checkpoint_parameters: None,
        max_positions: 0,
        rotary_dim: 0,
        warnings: Vec::new(),
        approximation: None,
        quantization: None,
        checkpoint_quantization: None,
        checkpoint_bytes: None,
        rope_scaling: None,
    }
}

/// The dimensions every decoder has, under the names `keys` lists (first present wins):
/// hidden size, layers, heads, vocabulary. Sets MHA defaults (kv heads = heads, head_dim =
/// hidden / heads) that architectures then override.
fn core_dims(c: &Cfg, name: &str, hidden: &[&str], layers: &[&str], heads: &[&str]) -> Result<Model> {
    let mut m = base(name);
    m.hidden = c.req(hidden, "size every weight matrix")?;
    m.layers = c.req(layers, "count the decoder layers")?;
    m.heads = c.req(heads, "shape attention")?;
    m.vocab = c.req(&["vocab_size"], "size the embedding and the logits")?;
    m.embed_dim = m.hidden;
    m.kv_heads = m.heads;
    m.head_dim = m.hidden.checked_div(m.heads).unwrap_or(0);
    Ok(m)
}

/// Llama and its descendants: Mistral, Mixtral, Qwen2/3 (+MoE), Gemma 1/2/3, Phi-3, OLMo-2,
/// Starcoder2, DeepSeek-V2/V3.
fn llama_like(c: &Cfg, name: &str, mt: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.kv_heads = c.opt(&["num_key_value_heads"])?.unwrap_or(m.heads);
    let gemma = mt.starts_with("gemma");
    let default_head_dim = if gemma { 256 } else { m.hidden.checked_div(m.heads).unwrap_or(0) };
    m.head_dim = c.opt(&["head_dim"])?.unwrap_or(default_head_dim);
    let is_moe_type = matches!(mt, "mixtral" | "qwen2_moe" | "qwen3_moe" | "deepseek_v2" | "deepseek_v3" | "gpt_oss");
    m.intermediate = match c.opt(&["intermediate_size"])? {
        Some(i) => i,
        None if is_moe_type => 0,
        None => return Err(Error::MissingKey { file: c.file.into(), key: "intermediate_size".into(), why: "size the MLP".into() }),
    };
    // Tie defaults per configuration class (transformers 5.x).
    let tie_default = matches!(mt, "gemma" | "gemma2" | "gemma3" | "gemma3_text" | "starcoder2");
    m.tied_embeddings = c.bool("tie_word_embeddings", tie_default)?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.mlp.act = c.act(&["hidden_activation", "hidden_act"], if gemma { Act::Gelu } else { Act::Silu });
    // GptOssConfig defaults attention_bias to true (configuration_gpt_oss.py); the others to false.
    let attn_bias = c.bool("attention_bias", mt == "gpt_oss")?;
    m.attention.qkv_bias = attn_bias;
    m.attention.o_bias = attn_bias;
    m.mlp.bias = c.bool("mlp_bias", false)?;
    match mt {
        // Qwen2 hard-codes bias on q/k/v and none on o_proj (modeling_qwen2.py).
        "qwen2" | "qwen2_moe" => {
            m.attention.qkv_bias = true;
            m.attention.o_bias = false;
        }
        "mistral" | "mixtral" | "phi3" => {
            m.attention.qkv_bias = false;
            m.attention.o_bias = false;
        }
        _ => {}
    }
    if gemma {
        m.norm = Norm::GemmaRmsNorm;
        if mt != "gemma" {
            m.block = Block::Sandwich;
        }
        m.attention.softcap = mt == "gemma2" && c.f64("attn_logit_softcapping", 0.0)? != 0.0;
        m.final_softcap = c.f64("final_logit_softcapping", 0.0)? != 0.0;
    }
    if matches!(mt, "qwen3" | "qwen3_moe" | "gemma3" | "gemma3_text") {
        m.attention.qk_norm = QkNorm::PerHead;
    }
    if mt == "olmo2" {
        m.attention.qk_norm = QkNorm::Full;
        m.block = Block::PostNorm;
        m.norm = Norm::RmsNormFp32Weight;
    }
    if mt == "gpt_oss" {
        // modeling_gpt_oss.py: GptOssAttention.sinks [heads]; GptOssRMSNorm multiplies the fp32
        // normalised tensor by its weight before casting back, as OLMo-2's does.
        m.attention.sinks = true;
        m.norm = Norm::RmsNormFp32Weight;
    }
    if mt == "phi3" {
        m.attention.fused_qkv = true;
        m.mlp.fused_gate_up = true;
    }
    if mt == "starcoder2" {
        let b = c.bool("use_bias", true)?;
        m.norm = Norm::LayerNorm { bias: true };
        m.attention.qkv_bias = b;
        m.attention.o_bias = b;
        m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], Act::Gelu), bias: b };
        m.hidden_dropout = c.dropout(&["residual_dropout"])?;
    }
    if mt.starts_with("deepseek") {
        m.attention.mla = Some(Mla {
            q_lora_rank: c.opt(&["q_lora_rank"])?,
            kv_lora_rank: c.req(&["kv_lora_rank"], "size the MLA latent")?,
            qk_nope_head_dim: c.req(&["qk_nope_head_dim"], "shape MLA heads")?,
            qk_rope_head_dim: c.req(&["qk_rope_head_dim"], "shape MLA heads")?,
            v_head_dim: c.req(&["v_head_dim"], "shape MLA heads")?,
        });
        let mla = m.attention.mla.expect("just set");
        m.head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
        m.kv_heads = m.heads;
    }
    m.moe = moe(c, mt, m.layers)?;
    if let Some(moe) = &m.moe {
        if m.intermediate == 0 {
            m.intermediate = moe.expert_intermediate;
        }
    }
    sliding(c, mt, &mut m)?;
    Ok(m)
}

fn moe(c: &Cfg, mt: &str, layers: u64) -> Result<Option<Moe>> {
    let why = "size the mixture of experts";
    let m = match mt {
        "mixtral" => Moe {
            experts: c.req(&["num_local_experts"], why)?,
            top_k: c.req(&["num_experts_per_tok"], why)?,
            expert_intermediate: c.req(&["intermediate_size"], why)?,
            shared_intermediate: 0,
            shared_gate: false,
            sparse_layers: vec![true; layers as usize],
            biased: false,
        },
        // GptOssConfig (configuration_gpt_oss.py): num_local_experts (alias num_experts),
        // num_experts_per_tok (the published config also writes experts_per_token), every layer
        // an MoE block of `intermediate_size` experts. Its class defaults (128 experts, top-4) are
        // gpt-oss-120b's, so a config without them is refused rather than read as 120b.
        "gpt_oss" => Moe {
            experts: c.req(&["num_local_experts", "num_experts"], why)?,
            top_k: c.req(&["num_experts_per_tok", "experts_per_token"], why)?,
            expert_intermediate: c.req(&["intermediate_size"], why)?,
            shared_intermediate: 0,
            shared_gate: false,
            sparse_layers: vec![true; layers as usize],
            biased: true,
        },
        "qwen2_moe" | "qwen3_moe" => {
            let step = c.opt(&["decoder_sparse_step"])?.unwrap_or(1).max(1);
            let dense: Vec<u64> = match c.get("mlp_only_layers") {
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).collect(),
                _ => vec![],
            };
            let experts = c.req(&["num_experts"], why)?;
            Moe {
                experts,
                top_k: c.req(&["num_experts_per_tok"], why)?,
                expert_intermediate: c.req(&["moe_intermediate_size"], why)?,
                shared_intermediate: if mt == "qwen2_moe" { c.opt(&["shared_expert_intermediate_size"])?.unwrap_or(0) } else { 0 },
                shared_gate: mt == "qwen2_moe",
                // modeling_qwen2_moe.py: sparse when not in mlp_only_layers and (i + 1) % step == 0.
                sparse_layers: (0..layers).map(|i| experts > 0 && !dense.contains(&i) && (i + 1) % step == 0).collect(),
                biased: false,
            }
        }
        "deepseek_v2" | "deepseek_v3" => {
            let first = c.opt(&["first_k_dense_replace"])?.unwrap_or(0);
            let freq = c.opt(&["moe_layer_freq"])?.unwrap_or(1).max(1);
            let ei = c.req(&["moe_intermediate_size"], why)?;
            let experts = c.req(&["n_routed_experts"], why)?;
            Moe {
                experts,
                top_k: c.req(&["num_experts_per_tok"], why)?,
                expert_intermediate: ei,
                shared_intermediate: ei * c.opt(&["n_shared_experts"])?.unwrap_or(0),
                shared_gate: false,
                // modeling_deepseek_v3.py: MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0.
                sparse_layers: (0..layers).map(|i| experts > 0 && i >= first && i % freq == 0).collect(),
                biased: false,
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(m))
}

/// Which layers use a sliding window, from `layer_types`, Gemma's patterns, or a global window.
///
/// Only the number of sliding layers is kept, not which ones: activation memory and the KV
/// cache depend on the count alone (every layer has the same shape), so gpt-oss's and Gemma-2's
/// alternation (sliding on even layers) is described exactly by `sliding_layers`.
fn sliding(c: &Cfg, mt: &str, m: &mut Model) -> Result<()> {
    let mut window = c.opt(&["sliding_window"])?;
    if mt == "gpt_oss" && !c.obj.contains_key("sliding_window") {
        // GptOssConfig.sliding_window defaults to 128 (configuration_gpt_oss.py).
        window = Some(128);
    }
    if let Some(Value::Array(types)) = c.get("layer_types") {
        // transformers validates layer_types against num_hidden_layers (configuration_utils.py
        // layer_type_validation); gpt-oss knows only these two kinds.
        let kinds_ok = types.iter().all(|t| matches!(t.as_str(), Some("sliding_attention" | "full_attention")));
        if mt == "gpt_oss" && (types.len() as u64 != m.layers || !kinds_ok) {
            return Err(c.bad(
                "layer_types",
                &Value::Array(types.clone()),
                &format!("expected {} entries (num_hidden_layers), each \"sliding_attention\" or \"full_attention\"", m.layers),
            ));
        }
        let n = types.iter().filter(|t| t.as_str() == Some("sliding_attention")).count() as u64;
        if n > 0 {
            if window.is_none() && mt == "gpt_oss" {
                return Err(Error::MissingKey {
                    file: c.file.into(),
                    key: "sliding_window".into(),
                    why: "size the sliding-window layers that layer_types names (it is null)".into(),
                });
            }
            m.sliding_window = window;
            m.sliding_layers = n.min(m.layers);
        }
        return Ok(());
    }
    let Some(w) = window else { return Ok(()) };
    m.sliding_window = Some(w);
    m.sliding_layers = match mt {
        // Gemma-2 alternates local and global layers, starting with local.
        "gemma2" => m.layers.div_ceil(2),
        // GptOssConfig without layer_types: layer i slides when (i + 1) % 2 == 1, i.e. even layers.
        "gpt_oss" => m.layers.div_ceil(2),
        // Gemma-3: every `sliding_window_pattern`-th layer is global (default 6).
        "gemma3" | "gemma3_text" => {
            let p = c.opt(&["sliding_window_pattern"])?.unwrap_or(6).max(1);
            m.layers - m.layers / p
        }
        "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" => {
            if c.bool("use_sliding_window", false)? {
                let from = c.opt(&["max_window_layers"])?.unwrap_or(m.layers).min(m.layers);
                m.layers - from
            } else {
                0
            }
        }
        _ => m.layers,
    };
    if m.sliding_layers == 0 {
        m.sliding_window = None;
    }
    Ok(())
}

fn gpt2(c: &Cfg, name: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["n_embd", "hidden_size"], &["n_layer", "num_hidden_layers"], &["n_head", "num_attention_heads"])?;
    m.intermediate = c.opt(&["n_inner"])?.unwrap_or(4 * m.hidden);
    m.position_embeddings = c.opt(&["n_positions", "max_position_embeddings"])?.unwrap_or(1024);
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.norm = Norm::LayerNorm { bias: true };
    m.attention =
        Attention { qkv_bias: true, o_bias: true, fused_qkv: true, qk_norm: QkNorm::None, mla: None, softcap: false, sinks: false };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["activation_function"], Act::GeluPython), bias: true };
    m.attention_dropout = c.dropout(&["attn_pdrop"])?;
    m.hidden_dropout = c.dropout(&["resid_pdrop"])?;
    Ok(m)
}

fn gpt_neox(c: &Cfg, name: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["intermediate_size"], "size the MLP")?;
    m.tied_embeddings = c.bool("tie_word_embeddings", false)?;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = if c.bool("use_parallel_residual", true)? { Block::ParallelTwoNorms } else { Block::Sequential };
    m.attention = Attention {
        qkv_bias: c.bool("attention_bias", true)?,
        o_bias: c.bool("attention_bias", true)?,
        fused_qkv: true,
        qk_norm: QkNorm::None,
        mla: None,
        softcap: false,
        sinks: false,
    };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], Act::Gelu), bias: true };
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["hidden_dropout"])?;
    Ok(m)
}

fn falcon(c: &Cfg, name: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    let new_arch = c.bool("new_decoder_architecture", false)?;
    // configuration_falcon.py: new architecture uses num_kv_heads; else multi_query means 1.
    m.kv_heads = if new_arch {
        c.opt(&["num_kv_heads"])?.unwrap_or(m.heads)
    } else if c.bool("multi_query", true)? {
        1
    } else {
        m.heads
    };
    m.intermediate = c.opt(&["ffn_hidden_size"])?.unwrap_or(4 * m.hidden);
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = if new_arch {
        Block::ParallelTwoNorms
    } else if c.bool("parallel_attn", true)? {
        Block::Parallel
    } else {
        Block::Sequential
    };
    let bias = c.bool("bias", false)?;
    m.attention =
        Attention { qkv_bias: bias, o_bias: bias, fused_qkv: true, qk_norm: QkNorm::None, mla: None, softcap: false, sinks: false };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: Act::Gelu, bias };
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["hidden_dropout"])?;
    if c.bool("alibi", false)? {
        m.warnings.push("ALiBi Falcon: the position bias is materialised per layer in eager attention".into());
    }
    Ok(m)
}

fn opt(c: &Cfg, name: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["ffn_dim"], "size the MLP")?;
    m.embed_dim = c.opt(&["word_embed_proj_dim"])?.unwrap_or(m.hidden);
    // OPTLearnedPositionalEmbedding keeps an offset of 2 rows.
    m.position_embeddings = c.opt(&["max_position_embeddings"])?.unwrap_or(2048) + 2;
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.norm = Norm::LayerNorm { bias: c.bool("layer_norm_elementwise_affine", true)? };
    let bias = c.bool("enable_bias", true)?;
    m.attention =
        Attention { qkv_bias: bias, o_bias: bias, fused_qkv: false, qk_norm: QkNorm::None, mla: None, softcap: false, sinks: false };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["activation_function"], Act::Relu), bias };
    m.final_norm = c.bool("do_layer_norm_before", true)? && !c.bool("_remove_final_layer_norm", false)?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["dropout"])?;
    Ok(m)
}

fn phi(c: &Cfg, name: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["intermediate_size"], "size the MLP")?;
    m.kv_heads = c.opt(&["num_key_value_heads"])?.unwrap_or(m.heads);
    m.tied_embeddings = c.bool("tie_word_embeddings", false)?;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = Block::Parallel;
    let qk = if c.bool("qk_layernorm", false)? { QkNorm::LayerNormPerHead } else { QkNorm::None };
    m.attention = Attention { qkv_bias: true, o_bias: true, fused_qkv: false, qk_norm: qk, mla: None, softcap: false, sinks: false };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], Act::GeluPython), bias: true };
    m.lm_head_bias = true;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["resid_pdrop"])?;
    Ok(m)
}

fn validate(m: &Model, file: &str) -> Result<()> {
    let bad = |key: &str, value: u64, hint: &str| Error::BadKey {
        file: file.into(),
        key: key.into(),
        value: value.to_string(),
        hint: hint.into(),
    };
    for (key, v) in [
        ("hidden_size", m.hidden),
        ("num_attention_heads", m.heads),
        ("vocab_size", m.vocab),
        ("head_dim", m.head_dim),
        ("intermediate_size", m.intermediate),
    ] {
        if v == 0 || v > MAX_DIM {
            return Err(bad(key, v, &format!("must be between 1 and {MAX_DIM}")));
        }
    }
    if m.layers == 0 || m.layers > MAX_LAYERS {
        return Err(bad("num_hidden_layers", m.layers, &format!("must be between 1 and {MAX_LAYERS}")));
    }
    if m.kv_heads == 0 || m.kv_heads > m.heads || m.heads % m.kv_heads != 0 {
        return Err(bad("num_key_value_heads", m.kv_heads, &format!("must divide num_attention_heads ({})", m.heads)));
    }
    if let Some(moe) = &m.moe {
        if moe.top_k == 0 || moe.top_k > moe.experts.max(1) || moe.experts > 4096 || moe.expert_intermediate > MAX_DIM {
            return Err(bad("num_experts_per_tok", moe.top_k, &format!("must be between 1 and the number of experts ({})", moe.experts)));
        }
    }
    if m.position_embeddings > MAX_DIM {
        return Err(bad("max_position_embeddings", m.position_embeddings, "too large for a learned position table"));
    }
    // Per-tensor numel stays inside u64 with these caps (4096 experts * 3 * 2^24 * 2^24 < 2^62);
    // the total is summed in u128 and must describe fewer than 2^50 (a quadrillion) parameters,
    // so every byte count derived from it fits u64 with room for 16 bytes per parameter.
    let total: u128 = m.tensors().iter().map(|t| t.numel as u128 * t.count as u128).sum();
    if total >= 1 << 50 {
        return Err(Error::BadKey {
            file: file.into(),
            key: "hidden_size".into(),
            value: m.hidden.to_string(),
            hint: format!("the config describes {total} parameters, beyond any real model"),
        });
    }
    Ok(())
}
