//! Raw Hugging Face `config.json` → normalised [`Model`].
//!
//! Defaults follow each architecture's transformers configuration class (transformers 5.x
//! `models/*/configuration_*.py`), because a key absent from config.json means "the class
//! default", not "false": GPT-2, OPT, Falcon, Gemma and Starcoder2 tie their embeddings
//! when `tie_word_embeddings` is absent; Llama, Qwen, Mistral do not.

//! One file per family; [`registry`] maps `model_type` to its parser, so adding a family
//! touches its own file and the registry only.

mod bart;
mod bert;
mod clip;
mod deberta;
mod distilbert;
mod electra;
mod falcon;
mod gemma3_vl;
mod gpt2;
mod gpt_neox;
mod idefics3;
mod keys;
mod llama;
mod llama4;
mod llava;
mod mamba;
mod modernbert;
mod opt;
mod paligemma;
mod phi;
mod positions;
mod quantization;
mod qwen2_vl;
mod qwen3_next;
mod registry;
mod t5;
mod vision;
mod whisper;
mod zamba;
mod zamba2;

use serde_json::{Map, Value};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::sniff::sniff;
use keys::Cfg;
use positions::positions;
use quantization::quantization;
pub use registry::known_model_types;

/// Largest dimension accepted from a config (guards absurd or hostile input).
const MAX_DIM: u64 = 1 << 24;
/// Largest layer count accepted.
const MAX_LAYERS: u64 = 10_000;
/// Longest context accepted in `max_position_embeddings` (2^40 tokens, beyond any model).
const MAX_POSITIONS: u64 = 1 << 40;

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
    let obj = json_object(bytes, file)?;
    let model_type = obj.get("model_type").and_then(Value::as_str).unwrap_or_default();
    if let Some(parse) = registry::composite(model_type, &obj) {
        return parse(obj, name, file, opts);
    }
    parse_object(obj, name, file, opts)
}

/// A config already read as a JSON object (a nested `text_config`/`vision_config` too).
fn parse_object(mut obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
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
    // An unknown type reaches here only with the approximate opt-in: read as a Llama-style decoder.
    let parse = registry::parser(&model_type).unwrap_or(llama::parse);
    let mut m = parse(&c, name, &model_type)?;
    m.model_type = if model_type.is_empty() { "unknown".into() } else { model_type };
    // An encoder has no KV cache: `use_cache` in its config is for its decoder variants.
    m.use_cache = m.encoder.is_none() && c.bool("use_cache", true)?;
    m.stored_dtype = c.str("torch_dtype").or_else(|| c.str("dtype")).and_then(|s| DType::from_torch_name(&s));
    positions(&c, &mut m)?;
    m.mtp_layers = c.opt_u64("num_nextn_predict_layers")?.or(c.opt_u64("mtp_num_hidden_layers")?).unwrap_or(0).min(MAX_LAYERS);
    m.draft_vocab = c.opt_u64("draft_vocab_size")?.filter(|&v| v > 0);
    // These families' rotary ends in torch.cat([rotated, passed], -1) (the passed part empty
    // when the rotary is full: Phi-3), whose output is contiguous [B, H, S, D]: q reaches SDPA
    // head-major, flash allocates its output in that layout and transformers'
    // transpose-contiguous after it is a copy (apply_rotary_pos_emb of modeling_qwen3_5.py,
    // modeling_phi3.py, modeling_gpt_neox.py; PhiAttention.forward). An H100's allocator history
    // showed the copy (validation/gpu/h100/qwen3.5-dev-4l-sdpa-train-snapshot.*); Phi-3-mini's
    // recorded training held exactly one per layer over the oracle of before (recordings.jsonl).
    if matches!(m.model_type.as_str(), "qwen3_next" | "qwen3_5_text" | "qwen3_5_moe_text" | "phi3" | "gpt_neox" | "phi") && m.rotary_dim > 0
    {
        m.attention.head_major_q = true;
    }
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
    /// The top level describes a vision tower too (`vision_config`).
    vision: bool,
}

impl Outer {
    fn read(obj: &Map<String, Value>) -> Outer {
        let strings = |v: &Vec<Value>| v.iter().filter_map(Value::as_str).map(str::to_string).collect();
        Outer {
            model_type: obj.get("model_type").and_then(Value::as_str).unwrap_or_default().to_string(),
            architectures: obj.get("architectures").and_then(Value::as_array).map_or_else(Vec::new, strings),
            unwrapped: false,
            vision: matches!(obj.get("vision_config"), Some(Value::Object(_))),
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
    if outer.unwrapped && !registry::is_known(&outer.model_type) {
        let reason = registry::family_reason(&outer.model_type)
            .unwrap_or("multimodal models are not supported yet: the vision tower is not counted, only the language model in `text_config` could be estimated");
        problems.push((format!("model_type `{}`", outer.model_type), reason.into()));
    }
    // A known language model inside a vision-language wrapper (Gemma-3's Gemma3ForConditional-
    // Generation): estimating the text model alone would silently drop the vision tower.
    if outer.unwrapped && outer.vision && registry::is_known(&outer.model_type) {
        problems.push((
            format!("model_type `{}` with a `vision_config`", outer.model_type),
            "a vision-language model whose vision tower and projector vram does not model yet (it models LLaVA, Qwen2-VL, Qwen2.5-VL and Gemma-3); the language model alone would leave them out".into(),
        ));
    }
    if !registry::is_known(model_type) {
        let what = if model_type.is_empty() { "a config without `model_type`".to_string() } else { format!("model_type `{model_type}`") };
        let reason = registry::family_reason(model_type).unwrap_or("vram does not know this architecture");
        problems.push((what, reason.into()));
    }
    // Encoders' classes name encoder heads, which the encoder parser reads (or refuses).
    for arch in outer.architectures.iter().filter(|_| !registry::reads_own_heads(model_type)) {
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
            supported: known_model_types(),
        });
    }
    let all: Vec<String> = problems.iter().map(|(w, r)| format!("{w}: {r}")).collect();
    Ok(Some(format!("{}; estimated as a Llama-style decoder (RMSNorm, SwiGLU, rotary) from its standard keys", all.join("; "))))
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

pub(super) fn validate(m: &Model, file: &str) -> Result<()> {
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
        // A vision transformer and Whisper's audio encoder have no vocabulary.
        let no_vocab = m.encoder.is_some_and(|e| e.vision.is_some()) || m.model_type.ends_with("_encoder");
        if (v == 0 && !(no_vocab && key == "vocab_size")) || v > MAX_DIM {
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
