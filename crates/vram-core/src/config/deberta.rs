//! DeBERTa-v2 and DeBERTa-v3 (transformers models/deberta_v2: `DebertaV2Model`): BERT's post-LN
//! layers with disentangled attention — no absolute positions (v3: `position_biased_input`
//! false), relative-position embeddings shared by every layer, content-to-position and
//! position-to-content scores gathered by relative distance. Eager attention only: the model
//! class has no SDPA or flash path.

use serde_json::Value;

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Disentangled, Encoder};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<crate::model::Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["intermediate_size"], "size the MLP")?;
    // DebertaV2Config defaults: max_position_embeddings 512, type_vocab_size 0,
    // position_biased_input true (v3 configs write false), relative_attention false.
    let max_pos = c.opt(&["max_position_embeddings"])?.unwrap_or(512);
    m.position_embeddings = if c.bool("position_biased_input", true)? { max_pos } else { 0 };
    m.max_positions = max_pos;
    let unsupported = |key: &str, v: Value, why: &str| Err(c.bad(key, &v, why));
    if let Some(k) = c.opt(&["conv_kernel_size"])?.filter(|&k| k > 0) {
        return unsupported(
            "conv_kernel_size",
            Value::from(k),
            "DeBERTa-v2 xlarge/xxlarge's convolution layer is not modelled yet (the v3 models have none)",
        );
    }
    if let Some(e) = c.opt(&["embedding_size"])?.filter(|&e| e != m.hidden) {
        return unsupported(
            "embedding_size",
            Value::from(e),
            "DeBERTa with embeddings narrower than hidden_size (embed_proj) is not modelled yet",
        );
    }
    if let Some(a) = c.opt(&["attention_head_size"])?.filter(|&a| a * m.heads != m.hidden) {
        return unsupported("attention_head_size", Value::from(a), "attention heads × head size must equal hidden_size");
    }
    let disentangled = if c.bool("relative_attention", false)? {
        let buckets = c.get("position_buckets").and_then(Value::as_i64).unwrap_or(-1);
        let max_rel = c.get("max_relative_positions").and_then(Value::as_i64).unwrap_or(-1);
        // DisentangledSelfAttention.__init__: pos_ebd_size = position_buckets if > 0, else
        // max_relative_positions (max_position_embeddings when < 1).
        let span = if buckets > 0 {
            buckets as u64
        } else if max_rel >= 1 {
            max_rel as u64
        } else {
            max_pos
        };
        let types: Vec<String> = match c.get("pos_att_type") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(|s| s.to_ascii_lowercase()).collect(),
            Some(Value::String(s)) => s.split('|').map(|s| s.trim().to_ascii_lowercase()).collect(),
            _ => Vec::new(),
        };
        let norm = c.str("norm_rel_ebd").unwrap_or_else(|| "none".into());
        Some(Disentangled {
            span,
            share_att_key: c.bool("share_att_key", false)?,
            c2p: types.iter().any(|t| t == "c2p"),
            p2c: types.iter().any(|t| t == "p2c"),
            rel_norm: norm.split('|').any(|n| n.trim() == "layer_norm"),
        })
    } else {
        None
    };
    if disentangled.is_some_and(|d| d.span == 0 || d.span > 1 << 16) {
        return unsupported("position_buckets", Value::from(disentangled.map_or(0, |d| d.span)), "a relative span of 1 to 65536 positions");
    }
    let token_types = c.opt(&["type_vocab_size"])?.unwrap_or(0);
    // DebertaV2ForQuestionAnswering's qa_outputs is Linear(hidden, 2) on every token: a
    // 2-label token classifier in parameters and memory (start and end logits).
    let head = super::bert::head_with_qa(c, &mut m, "DeBERTa", "qa_outputs")?;
    // DebertaV2Model has no pooler; the sequence classifier's ContextPooler (dense hidden →
    // pooler_hidden_size) is the encoder's pooler dense of a classification head.
    if let Some(p) = c.opt(&["pooler_hidden_size"])?.filter(|&p| p != m.hidden) {
        return unsupported("pooler_hidden_size", Value::from(p), "a ContextPooler narrower or wider than hidden_size is not modelled yet");
    }
    // DebertaV2Config: hidden_dropout_prob 0.1, attention_probs_dropout_prob 0.1; the MLM
    // head (legacy, default) ties its decoder to the word embeddings.
    let enc = Encoder { token_types, head, vision: None, pooler: false, attention_output_dropout: true, disentangled, modern: None };
    let mut m = super::bert::post_ln(c, m, enc, ["hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob"])?;
    m.use_cache = false;
    Ok(m)
}
