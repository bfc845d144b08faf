//! Qwen3-Next and Qwen3.5's language models (transformers models/qwen3_next, models/qwen3_5,
//! models/qwen3_5_moe): decoders whose layers are Gated DeltaNet linear attention
//! ("linear_attention") except every `full_attention_interval`-th ("full_attention": gated
//! attention with per-head q/k norms and partial rotary positions); every layer ends with its MLP
//! or, in the MoE variants, a sparse MoE block with a gated shared expert. Norms are
//! zero-centred RMSNorms (`x · (1 + w)` in fp32, as Gemma's).
//!
//! Qwen3.5's checkpoints are vision-language configs (`qwen3_5`, `qwen3_5_moe`); their language
//! model is read as `AutoModelForCausalLM` loads it (`Qwen3_5ForCausalLM`: the text model, the
//! vision tower's weights skipped).

use serde_json::{Map, Value};

use super::keys::Cfg;
use super::llava::{inherit_top_level, nested};
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{DeltaNet, Model, Norm, Ssm, VisionFamily, LM_ONLY_WARNING};

/// The three language models: `qwen3_next` (fused `in_proj_qkvz`/`in_proj_ba`, MoE unless
/// `num_experts` is 0), `qwen3_5_text` (dense MLP) and `qwen3_5_moe_text` (MoE on every layer).
pub(super) fn parse(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let next = model_type == "qwen3_next";
    let moe_type = next || model_type == "qwen3_5_moe_text";
    // The configuration classes' defaults (configuration_qwen3_next.py,
    // configuration_qwen3_5.py, configuration_qwen3_5_moe.py, transformers 5.23).
    let defaults: &[(&str, u64)] = match model_type {
        "qwen3_next" => &[
            ("vocab_size", 151_936),
            ("hidden_size", 2048),
            ("intermediate_size", 5632),
            ("num_hidden_layers", 48),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 2),
            ("num_experts", 512),
            ("num_experts_per_tok", 10),
        ],
        "qwen3_5_moe_text" => &[
            ("vocab_size", 248_320),
            ("hidden_size", 2048),
            ("num_hidden_layers", 40),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 2),
            ("num_experts", 256),
            ("num_experts_per_tok", 8),
        ],
        _ => &[
            ("vocab_size", 248_320),
            ("hidden_size", 4096),
            ("intermediate_size", 12288),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 4),
        ],
    };
    let mut obj = c.obj.clone();
    for (k, v) in defaults.iter().chain(&[("head_dim", 256), ("moe_intermediate_size", 512), ("shared_expert_intermediate_size", 512)]) {
        obj.entry(*k).or_insert(Value::from(*v));
    }
    let c2 = Cfg { obj: &obj, file: c.file };
    let c = &c2;
    // The decoder's Qwen3 parts (GQA attention with per-head q/k norms, SwiGLU MLP) as Qwen3's;
    // the MoE layout as Qwen3-MoE's (decoder_sparse_step, mlp_only_layers).
    let base = if moe_type { "qwen3_moe" } else { "qwen3" };
    let mut m = super::llama::parse(c, name, base)?;
    m.norm = Norm::GemmaRmsNorm;
    m.attention.output_gate = true;
    m.attention.qkv_bias = c.bool("attention_bias", false)?;
    m.attention.o_bias = m.attention.qkv_bias;
    if moe_type && c.opt(&["num_experts"])?.unwrap_or(0) == 0 {
        m.moe = None;
    }
    if m.layers == 0 {
        return Err(c.bad("num_hidden_layers", &Value::from(0), "at least one linear-attention and one full-attention layer"));
    }
    let types = layer_types(c, m.layers)?;
    let is_attention = |i: u64| types[i as usize];
    let attention = types.iter().filter(|t| **t).count() as u64;
    if attention == 0 || attention == m.layers {
        return Err(c.bad(
            "layer_types",
            &Value::from(attention),
            "vram models Qwen3-Next and Qwen3.5 with some \"full_attention\" and some \"linear_attention\" layers",
        ));
    }
    if let Some(moe) = m.moe.as_mut() {
        // Qwen3NextSparseMoeBlock / Qwen3_5MoeSparseMoeBlock: the routed experts beside a shared
        // expert of `shared_expert_intermediate_size` whose output a sigmoid gate scales.
        moe.shared_intermediate = c.opt(&["shared_expert_intermediate_size"])?.unwrap_or(512);
        moe.shared_gate = moe.shared_intermediate > 0;
        if model_type == "qwen3_5_moe_text" {
            // Qwen3_5MoeDecoderLayer: the MoE block on every layer.
            moe.sparse_layers = vec![true; m.layers as usize];
        }
        // vram's layer order: the attention layers, then the linear-attention layers.
        let order = (0..m.layers).filter(|&i| is_attention(i)).chain((0..m.layers).filter(|&i| !is_attention(i)));
        let sparse = moe.sparse_layers.clone();
        moe.sparse_layers = order.map(|i| sparse[i as usize]).collect();
    }
    let dn = DeltaNet {
        key_heads: c.opt(&["linear_num_key_heads"])?.unwrap_or(16),
        value_heads: c.opt(&["linear_num_value_heads"])?.unwrap_or(32),
        key_dim: c.opt(&["linear_key_head_dim"])?.unwrap_or(128),
        value_dim: c.opt(&["linear_value_head_dim"])?.unwrap_or(128),
        fused_projections: next,
        first_layer_linear: !is_attention(0),
    };
    let kernel = c.opt(&["linear_conv_kernel_dim"])?.unwrap_or(4);
    // The value heads are grouped over the key heads (fix_query_key_value_ordering views the
    // projection per key head; torch_chunk_gated_delta_rule repeats q and k to the value heads).
    let sized = |x: u64| (1..=4096).contains(&x);
    if !(sized(dn.key_heads) && sized(dn.value_heads) && sized(dn.key_dim) && sized(dn.value_dim)) || dn.value_heads % dn.key_heads != 0 {
        return Err(c.bad(
            "linear_num_value_heads",
            &Value::from(dn.value_heads),
            "linear_num_key_heads, linear_num_value_heads (a multiple of the key heads), linear_key_head_dim and linear_value_head_dim between 1 and 4096",
        ));
    }
    if !(1..=64).contains(&kernel) {
        return Err(c.bad("linear_conv_kernel_dim", &Value::from(kernel), "a depthwise conv kernel of 1–64 taps"));
    }
    m.ssm = Some(Ssm {
        attention_layers: attention,
        delta_net: Some(dn),
        cache_state_dtype: c.dtype("mamba_ssm_dtype")?,
        ..Ssm::mixers(dn.value_heads * dn.value_dim, dn.key_dim, kernel, 0)
    });
    let family = if next { "Qwen3-Next" } else { "Qwen3.5" };
    m.warnings.push(format!(
        "{family}: {attention} gated-attention layers and {} Gated DeltaNet layers, each with its {}; the linear attention follows transformers' PyTorch path (`torch_chunk_gated_delta_rule`, taken when flash-linear-attention is not installed); with its Triton kernels training and a prefill hold less, which vram does not model yet",
        m.layers - attention,
        if m.moe.is_some() { "MoE block (routed experts and a gated shared expert)" } else { "MLP" },
    ));
    Ok(m)
}

/// Which layers are full attention (true) and which linear attention: `layer_types`, or every
/// `full_attention_interval`-th layer (default 4) as the configuration classes fill it in.
fn layer_types(c: &Cfg, layers: u64) -> Result<Vec<bool>> {
    match c.get("layer_types") {
        Some(Value::Array(a)) => {
            if a.len() as u64 != layers {
                return Err(c.bad("layer_types", &Value::from(a.len()), "one entry per layer (num_hidden_layers)"));
            }
            a.iter()
                .map(|t| match t.as_str() {
                    Some("full_attention") => Ok(true),
                    Some("linear_attention") => Ok(false),
                    _ => Err(c.bad("layer_types", t, "each entry \"full_attention\" or \"linear_attention\"")),
                })
                .collect()
        }
        None | Some(Value::Null) => {
            let every = c.opt(&["full_attention_interval"])?.unwrap_or(4);
            if every == 0 {
                return Err(c.bad("full_attention_interval", &Value::from(0), "a period of at least 1"));
            }
            Ok((0..layers).map(|i| (i + 1) % every == 0).collect())
        }
        Some(v) => Err(c.bad("layer_types", v, "expected a list of \"full_attention\" and \"linear_attention\"")),
    }
}

/// Qwen3.5's vision-language configs (`qwen3_5`, `qwen3_5_moe`): the language model in
/// `text_config`, read as `AutoModelForCausalLM` loads such a checkpoint — `Qwen3_5ForCausalLM`
/// / `Qwen3_5MoeForCausalLM` ("VLM compatibility" in transformers' auto mapping), whose
/// `_keys_to_ignore_on_load_unexpected` skips `model.visual.*`: the vision tower is not loaded.
pub(super) fn parse_vl(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let outer = obj.get("model_type").and_then(Value::as_str).unwrap_or("qwen3_5").to_string();
    let mut text = nested(&obj, "text_config", file)?;
    let want = format!("{outer}_text");
    match text.get("model_type").and_then(Value::as_str) {
        None => {
            text.insert("model_type".into(), Value::from(want.clone()));
        }
        Some(t) if t == want => {}
        Some(t) => {
            return Err(Error::InvalidValue {
                what: format!("{outer} language model"),
                value: t.into(),
                hint: format!("a {outer} config's text_config has model_type \"{want}\""),
            })
        }
    }
    // A quantized release (FP8, AWQ …) writes `quantization_config` at the top; the language
    // model AutoModelForCausalLM loads is the part it quantizes, so it goes with it (dropping it
    // would estimate an FP8 checkpoint as bf16 without a word).
    if let (false, Some(q)) = (text.contains_key("quantization_config"), obj.get("quantization_config")) {
        text.insert("quantization_config".into(), q.clone());
    }
    inherit_top_level(&mut text, &obj, file)?;
    let class = if outer == "qwen3_5_moe" { "Qwen3_5MoeForCausalLM" } else { "Qwen3_5ForCausalLM" };
    text.insert("architectures".into(), Value::from(vec![Value::from(class)]));
    let mut m = parse_object(text, name, file, opts)?;
    m.warnings.insert(
        0,
        format!("{LM_ONLY_WARNING}: {class}, the language model alone (the vision tower's weights are not loaded). With images (--images-per-sample, --image-size or --freeze-vision-tower) vram estimates Qwen3_5ForConditionalGeneration, tower included"),
    );
    // The tower Qwen3_5ForConditionalGeneration loads beside it: Qwen3-VL's without DeepStack
    // (modeling_qwen3_5.py Qwen3_5VisionModel), its merger into the language model's width.
    // A config without `vision_config` (written for the language model) has no tower to load.
    if obj.get("vision_config").is_some_and(Value::is_object) {
        let lm = "Qwen3.5 (Gated DeltaNet)";
        let (mm, warnings) = super::qwen2_vl::vision_part(&obj, VisionFamily::Qwen3Vl, false, m.hidden, lm, name, file)?;
        m.vision_unloaded = Some(mm);
        m.vision_warnings = warnings;
    }
    Ok(m)
}
