//! T5, Flan-T5 and mT5 (transformers models/t5/modeling_t5.py, configuration_t5.py; mT5 is the
//! same module tree): a shared token embedding, no position embeddings but a relative position
//! bias in each stack's first self-attention, pre-norm layers with T5LayerNorm (an RMSNorm
//! without bias), attention without biases (`inner_dim = num_heads × d_kv`, independent of
//! `d_model`), a ReLU MLP (`wi`, `wo`) or a gated one (`wi_0`, `wi_1`, `wo`: v1.1, Flan, mT5)
//! with dropout between activation and `wo`, a final norm per stack. The LM head: checkpoints
//! from v1.1 on store their own (`tie_word_embeddings: false`), but transformers 5 ties it to
//! the shared embedding always (configuration_t5.py / configuration_mt5.py `__post_init__`:
//! `self.tie_word_embeddings = True`, the flag only deciding whether decoder outputs are
//! scaled); vram follows transformers 5 and says so.

use super::keys::{act_from_name, base, require_head, Cfg};
use crate::error::Result;
use crate::model::{Attention, Block, Frontend, Mlp, Model, Norm, Seq2Seq};

/// T5Config's defaults (t5-small's shape; MT5Config: mt5-small's), for keys a config leaves out.
struct Defaults {
    vocab: u64,
    d_ff: u64,
    layers: u64,
    heads: u64,
    proj: &'static str,
}

const T5: Defaults = Defaults { vocab: 32128, d_ff: 2048, layers: 6, heads: 8, proj: "relu" };
const MT5: Defaults = Defaults { vocab: 250112, d_ff: 1024, layers: 8, heads: 6, proj: "gated-gelu" };

/// `feed_forward_proj` as T5Config reads it: `[gated-]ACT`, and "gated-gelu" means gelu_new
/// unless `dense_act_fn` is written (configuration_t5.py, kept for backwards compatibility).
fn feed_forward(c: &Cfg, default: &str) -> Result<Mlp> {
    let proj = c.str("feed_forward_proj").unwrap_or_else(|| default.to_string());
    let parts: Vec<&str> = proj.split('-').collect();
    let (gated, act) = match parts.as_slice() {
        [act] => (false, *act),
        ["gated", act] => (true, *act),
        _ => {
            return Err(c.bad(
                "feed_forward_proj",
                &serde_json::Value::from(proj.clone()),
                "expected `ACT` or `gated-ACT` (e.g. \"relu\", \"gated-gelu\")",
            ))
        }
    };
    // A written `dense_act_fn` wins (transformers 5: T5Config(feed_forward_proj="gated-gelu",
    // dense_act_fn="gelu").dense_act_fn == "gelu"; BLIP-2's Flan-T5-XL config writes "gelu").
    let act = match c.str("dense_act_fn") {
        Some(written) => written,
        None if proj == "gated-gelu" => "gelu_new".to_string(),
        None => act.to_string(),
    };
    let key = if c.str("dense_act_fn").is_some() { "dense_act_fn" } else { "feed_forward_proj" };
    let act = act_from_name(&act).ok_or_else(|| c.bad(key, &serde_json::Value::from(act.as_str()), super::keys::UNKNOWN_ACT))?;
    Ok(Mlp { gated, fused_gate_up: false, act, bias: false })
}

/// T5Config's `attribute_map` aliases (`hidden_size`, `num_attention_heads`,
/// `num_hidden_layers`, `head_dim`), set after the named arguments: written, they win.
fn stack(c: &Cfg, name: &str, d: &Defaults, layers: u64) -> Result<Model> {
    let mut m = base(name);
    m.hidden = c.opt(&["hidden_size", "d_model"])?.unwrap_or(512);
    m.embed_dim = m.hidden;
    m.layers = layers;
    m.heads = c.opt(&["num_attention_heads", "num_heads"])?.unwrap_or(d.heads);
    m.kv_heads = m.heads;
    m.head_dim = c.opt(&["head_dim", "d_kv"])?.unwrap_or(64);
    m.intermediate = c.opt(&["d_ff"])?.unwrap_or(d.d_ff);
    m.norm = Norm::T5LayerNorm;
    m.block = Block::Sequential;
    m.attention = Attention::plain(false, false, false);
    m.mlp = feed_forward(c, d.proj)?;
    m.final_norm = true;
    m.tied_embeddings = true;
    m.relative_buckets = c.opt(&["relative_attention_num_buckets"])?.unwrap_or(32);
    if m.relative_buckets == 0 || m.relative_buckets > 1 << 16 {
        return Err(c.bad(
            "relative_attention_num_buckets",
            &serde_json::Value::from(m.relative_buckets),
            "expected 1–65536 buckets (T5: 32)",
        ));
    }
    m.hidden_dropout = c.dropout(&["dropout_rate"])?;
    m.mlp_dropout = m.hidden_dropout > 0.0;
    Ok(m)
}

/// Heads vram models: conditional generation (`T5WithLMHeadModel` is its old name).
const HEADS: &[&str] = &["T5ForConditionalGeneration", "T5WithLMHeadModel", "MT5ForConditionalGeneration"];

pub(super) fn parse(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    require_head(
        c,
        model_type,
        HEADS,
        "vram models T5/mT5 for conditional generation (seq2seq fine-tuning); T5EncoderModel and classification heads are not modelled yet",
    )?;
    let d = if model_type == "mt5" { &MT5 } else { &T5 };
    let layers = c.opt(&["num_hidden_layers", "num_layers"])?.unwrap_or(d.layers);
    let mut encoder = stack(c, &format!("{name} (encoder)"), d, layers)?;
    encoder.use_cache = false;
    encoder.model_type = format!("{model_type}_encoder");
    super::validate(&encoder, c.file)?;
    let mut m = stack(c, name, d, c.opt(&["num_decoder_layers"])?.unwrap_or(layers))?;
    m.vocab = c.opt(&["vocab_size"])?.unwrap_or(d.vocab);
    m.tied_embeddings = true;
    if !c.bool("tie_word_embeddings", model_type == "t5")? {
        m.warnings.push(format!(
            "the checkpoint stores its own LM head (tie_word_embeddings: false), but transformers ≥ 5 ties it to the shared embedding (configuration_t5.py), as counted here; under transformers 4.x the head adds {} parameters with their gradients and optimizer states",
            m.vocab.saturating_mul(m.hidden)
        ));
    }
    m.cross_attention = true;
    // The length T5 was pre-trained on (`n_positions`, 512), the default source length.
    let source_tokens = c.opt(&["n_positions"])?.unwrap_or(512);
    m.seq2seq =
        Some(Box::new(Seq2Seq { encoder, source_tokens, frontend: Frontend::Text, labels_disable_cache: false, fp32_logits_bias: false }));
    Ok(m)
}
