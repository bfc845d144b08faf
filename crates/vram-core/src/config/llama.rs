//! Llama and its descendants (one parser: their configs differ only in defaults and switches).

use serde_json::Value;

use super::keys::{core_dims, Cfg};
use crate::error::{Error, Result};
use crate::model::{Act, Block, Mla, Mlp, Model, Moe, Norm, QkNorm};

/// Llama and its descendants: Mistral, Mixtral, Qwen2/3 (+MoE), Gemma 1/2/3, Phi-3, OLMo-2,
/// Starcoder2, DeepSeek-V2/V3.
pub(super) fn parse(c: &Cfg, name: &str, mt: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.kv_heads = c.opt(&["num_key_value_heads"])?.unwrap_or(m.heads);
    let gemma = mt.starts_with("gemma");
    let llama4 = mt == "llama4_text";
    // Llama4TextConfig's head_dim defaults to 128, not hidden / heads.
    let default_head_dim = if gemma {
        256
    } else if llama4 {
        128
    } else {
        m.hidden.checked_div(m.heads).unwrap_or(0)
    };
    m.head_dim = c.opt(&["head_dim"])?.unwrap_or(default_head_dim);
    let is_moe_type = matches!(mt, "mixtral" | "qwen2_moe" | "qwen3_moe" | "deepseek_v2" | "deepseek_v3" | "gpt_oss" | "llama4_text");
    m.intermediate = match c.opt(&["intermediate_size"])? {
        Some(i) => i,
        None if is_moe_type => 0,
        None => return Err(Error::MissingKey { file: c.file.into(), key: "intermediate_size".into(), why: "size the MLP".into() }),
    };
    // Tie defaults per configuration class (transformers 5.x).
    let tie_default = matches!(mt, "gemma" | "gemma2" | "gemma3" | "gemma3_text" | "starcoder2");
    m.tied_embeddings = c.bool("tie_word_embeddings", tie_default)?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.mlp.act = c.act(&["hidden_activation", "hidden_act"], if gemma { Act::Gelu } else { Act::Silu })?;
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
        m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], Act::Gelu)?, bias: b };
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
    if llama4 {
        llama4_text(c, &mut m)?;
    }
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
            dense_dispatch: false,
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
            dense_dispatch: false,
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
                dense_dispatch: false,
            }
        }
        // Llama4TextConfig (configuration_llama4.py): experts of `intermediate_size` (8192),
        // `num_local_experts` (16), top-1, a shared expert as wide; MoE on `moe_layers`, else
        // every `interleave_moe_layer_step`-th layer counting from step − 1.
        "llama4_text" => {
            let experts = c.opt(&["num_local_experts"])?.unwrap_or(16);
            let ei = c.opt(&["intermediate_size"])?.unwrap_or(8192);
            let step = c.opt(&["interleave_moe_layer_step"])?.unwrap_or(1);
            let sparse_layers = match c.get("moe_layers") {
                Some(Value::Array(a)) => {
                    let listed: Vec<u64> = a.iter().filter_map(Value::as_u64).collect();
                    (0..layers).map(|i| listed.contains(&i)).collect()
                }
                Some(Value::Null) | None if step == 0 => {
                    return Err(c.bad("interleave_moe_layer_step", &Value::from(0), "must be at least 1"));
                }
                _ => (0..layers).map(|i| i + 1 >= step && (i + 1 - step) % step == 0).collect(),
            };
            Moe {
                experts,
                top_k: c.opt(&["num_experts_per_tok"])?.unwrap_or(1),
                expert_intermediate: ei,
                shared_intermediate: ei,
                shared_gate: false,
                sparse_layers,
                biased: false,
                dense_dispatch: true,
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
                dense_dispatch: false,
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

/// Llama 4's text layers (Llama4TextConfig): dense layers of `intermediate_size_mlp` (16384),
/// bias-free attention (`attention_bias`), every `no_rope_layer_interval`-th layer (4) without
/// rotary positions unless `no_rope_layers` lists them, chunked attention on the rotary layers.
fn llama4_text(c: &Cfg, m: &mut Model) -> Result<()> {
    m.intermediate = c.opt(&["intermediate_size_mlp"])?.unwrap_or(16384);
    let interval = c.opt(&["no_rope_layer_interval"])?.unwrap_or(4);
    let listed: Vec<bool> = match c.get("no_rope_layers") {
        Some(Value::Array(a)) if !a.is_empty() => a.iter().map(|v| v.as_u64() == Some(0) || v.as_bool() == Some(false)).collect(),
        _ if interval == 0 => return Err(c.bad("no_rope_layer_interval", &Value::from(0), "must be at least 1")),
        _ => (0..m.layers).map(|i| (i + 1) % interval == 0).collect(),
    };
    if listed.len() as u64 != m.layers {
        return Err(c.bad(
            "no_rope_layers",
            &Value::from(listed.len()),
            &format!("one entry per layer ({} layers): 1 where the layer rotates, 0 where it has no positions", m.layers),
        ));
    }
    // An explicit null turns chunking off (Llama4TextConfig's default, absent, is 8192).
    let chunk = match c.is_null("attention_chunk_size") {
        true => None,
        false => Some(c.opt(&["attention_chunk_size"])?.unwrap_or(8192)).filter(|&n| n > 0),
    };
    // The chunked layers are the rotary ones (Llama4TextConfig.layer_types); like Gemma's
    // sliding layers only their number is kept (vram counts them first).
    let rotary = listed.iter().filter(|n| !**n).count() as u64;
    if let Some(w) = chunk.filter(|_| rotary > 0) {
        m.sliding_window = Some(w);
        m.sliding_layers = rotary;
    }
    m.llama4 = Some(crate::model::Llama4Text { rotary_layers: rotary, qk_l2: c.bool("use_qk_norm", true)? });
    Ok(())
}
