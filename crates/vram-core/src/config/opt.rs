//! OPT (transformers models/opt/configuration_opt.py).

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Act, Attention, Mlp, Model, Norm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["ffn_dim"], "size the MLP")?;
    m.embed_dim = c.opt(&["word_embed_proj_dim"])?.unwrap_or(m.hidden);
    // OPTLearnedPositionalEmbedding keeps an offset of 2 rows.
    m.position_embeddings = c.opt(&["max_position_embeddings"])?.unwrap_or(2048) + 2;
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.norm = Norm::LayerNorm { bias: c.bool("layer_norm_elementwise_affine", true)? };
    let bias = c.bool("enable_bias", true)?;
    m.attention = Attention::plain(bias, bias, false);
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["activation_function"], Act::Relu)?, bias };
    m.final_norm = c.bool("do_layer_norm_before", true)? && !c.bool("_remove_final_layer_norm", false)?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.hidden_dropout = c.dropout(&["dropout"])?;
    Ok(m)
}
