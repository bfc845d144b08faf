//! GPT-2 (transformers models/gpt2/configuration_gpt2.py).

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Act, Attention, Mlp, Model, Norm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["n_embd", "hidden_size"], &["n_layer", "num_hidden_layers"], &["n_head", "num_attention_heads"])?;
    m.intermediate = c.opt(&["n_inner"])?.unwrap_or(4 * m.hidden);
    m.position_embeddings = c.opt(&["n_positions", "max_position_embeddings"])?.unwrap_or(1024);
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.norm = Norm::LayerNorm { bias: true };
    m.attention = Attention::plain(true, true, true);
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["activation_function"], Act::GeluPython)?, bias: true };
    m.attention_dropout = c.dropout(&["attn_pdrop"])?;
    m.hidden_dropout = c.dropout(&["resid_pdrop"])?;
    Ok(m)
}
