//! Falcon (transformers models/falcon/configuration_falcon.py).

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Act, Attention, Block, Mlp, Model, Norm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
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
    m.attention = Attention::plain(bias, bias, true);
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: Act::Gelu, bias };
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["hidden_dropout"])?;
    if c.bool("alibi", false)? {
        m.warnings.push("ALiBi Falcon: the position bias is materialised per layer in eager attention".into());
    }
    Ok(m)
}
