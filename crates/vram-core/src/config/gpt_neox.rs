//! GPT-NeoX / Pythia (transformers models/gpt_neox/configuration_gpt_neox.py).

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Act, Attention, Block, Mlp, Model, Norm, QkNorm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
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
        // Set after the rotary width is read (config/mod.rs): its torch.cat makes q head-major.
        head_major_q: false,
        output_gate: false,
    };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], Act::Gelu)?, bias: true };
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["hidden_dropout"])?;
    Ok(m)
}
