//! Phi-1/1.5/2 (transformers models/phi/configuration_phi.py).

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Act, Attention, Block, Mlp, Model, Norm, QkNorm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["intermediate_size"], "size the MLP")?;
    m.kv_heads = c.opt(&["num_key_value_heads"])?.unwrap_or(m.heads);
    m.tied_embeddings = c.bool("tie_word_embeddings", false)?;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = Block::Parallel;
    let qk = if c.bool("qk_layernorm", false)? { QkNorm::LayerNormPerHead } else { QkNorm::None };
    m.attention = Attention { qk_norm: qk, ..Attention::plain(true, true, false) };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], Act::GeluPython)?, bias: true };
    m.lm_head_bias = true;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["resid_pdrop"])?;
    Ok(m)
}
