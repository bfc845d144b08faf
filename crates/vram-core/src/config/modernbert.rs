//! ModernBERT (transformers models/modernbert: configuration_modernbert.py, modeling_modernbert.py;
//! also mmBERT and the Ettin encoders, which share the class): pre-LN layers with bias-free
//! LayerNorm (the first layer has no `attn_norm`), a fused `Wqkv`, rotary positions (a base per
//! layer type), a GeGLU MLP (`Wi` = input and gate in one matrix), global attention every
//! `global_attn_every_n_layers` layers and a `local_attention`-token window on the others, a final
//! norm, and `ModernBertPredictionHead` (dense, activation, norm) under every task head.

use serde_json::Value;

use super::keys::{core_dims, Cfg};
use crate::error::Result;
use crate::model::{Act, Attention, Block, Encoder, EncoderHead, Mlp, Model, ModernBert, Norm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    if m.heads == 0 || m.hidden % m.heads != 0 {
        return Err(c.bad("num_attention_heads", &Value::from(m.heads), "hidden_size must be a multiple of num_attention_heads"));
    }
    m.intermediate = c.req(&["intermediate_size"], "size the GeGLU MLP")?;
    m.position_embeddings = 0;
    m.max_positions = c.opt(&["max_position_embeddings"])?.unwrap_or(8192);
    // Dropouts (ModernBertConfig: all 0.0). Attention dropout is modelled like every encoder's;
    // the embedding and MLP dropouts are not yet.
    for key in ["embedding_dropout", "mlp_dropout"] {
        let p = c.f64(key, 0.0)?;
        if p > 0.0 {
            return Err(c.bad(
                key,
                &Value::from(p),
                "ModernBERT with embedding or MLP dropout is not modelled yet (the published models use 0.0)",
            ));
        }
    }
    m.attention_dropout = c.f64("attention_dropout", 0.0)?;
    m.hidden_dropout = 0.0;
    // Layer types: `layer_types` (transformers 5.x), else global every n-th layer (0, n, 2n …).
    let global = match c.get("layer_types") {
        Some(Value::Array(a)) => {
            if a.len() as u64 != m.layers {
                return Err(c.bad("layer_types", &Value::from(a.len()), "one entry per hidden layer"));
            }
            a.iter().filter(|t| t.as_str() == Some("full_attention")).count() as u64
        }
        _ => {
            let every = c.opt(&["global_attn_every_n_layers"])?.unwrap_or(3);
            if every == 0 {
                return Err(c.bad("global_attn_every_n_layers", &Value::from(every), "at least 1"));
            }
            m.layers.div_ceil(every)
        }
    };
    let local = c.opt(&["local_attention"])?.unwrap_or(128);
    m.sliding_layers = m.layers - global.min(m.layers);
    // ModernBertConfig.sliding_window = local_attention // 2; transformers builds the window mask
    // from it and skips it below that length (masking_utils.py _ignore_bidirectional_mask_sdpa).
    m.sliding_window = (m.sliding_layers > 0).then_some(local / 2);
    let norm_bias = c.bool("norm_bias", false)?;
    m.norm = Norm::LayerNorm { bias: norm_bias };
    m.block = Block::Sequential;
    m.final_norm = true;
    let attention_bias = c.bool("attention_bias", false)?;
    m.attention = Attention::plain(attention_bias, attention_bias, true);
    m.mlp = Mlp { gated: true, fused_gate_up: true, act: c.act(&["hidden_activation"], Act::Gelu)?, bias: c.bool("mlp_bias", false)? };
    // ModernBertForQuestionAnswering: the prediction head and a 2-output classifier on every token.
    let head = super::bert::head_with_qa(c, &mut m, "ModernBERT", "the head and qa classifier")?;
    let pooling = c.str("classifier_pooling").unwrap_or_else(|| "cls".into());
    if pooling != "cls" && pooling != "mean" {
        return Err(c.bad("classifier_pooling", &Value::from(pooling), "ModernBERT pools with \"cls\" or \"mean\""));
    }
    if c.bool("sparse_prediction", false)? && head == EncoderHead::MaskedLm {
        return Err(c.bad(
            "sparse_prediction",
            &Value::Bool(true),
            "ModernBERT's sparse prediction (logits of the masked tokens only) is not modelled yet: set it false for an upper bound",
        ));
    }
    let modern = ModernBert {
        mean_pooling: pooling == "mean",
        head_bias: c.bool("classifier_bias", false)?,
        decoder_bias: c.bool("decoder_bias", true)?,
        classifier_dropout: c.f64("classifier_dropout", 0.0)? > 0.0,
    };
    m.tied_embeddings = head == EncoderHead::MaskedLm && c.bool("tie_word_embeddings", true)?;
    m.encoder = Some(Encoder {
        token_types: 0,
        head,
        vision: None,
        pooler: false,
        attention_output_dropout: false,
        disentangled: None,
        modern: Some(modern),
    });
    m.use_cache = false;
    Ok(m)
}
