//! BART and mBART (transformers models/bart/modeling_bart.py, models/mbart/modeling_mbart.py):
//! a shared token embedding; encoder and decoder each with learned positions (two extra rows:
//! `BartLearnedPositionalEmbedding`'s offset of 2) and a LayerNorm on the embeddings
//! (`layernorm_embedding`); BART's layers are post-LN, mBART's pre-LN with a final LayerNorm;
//! every decoder layer adds cross-attention; the LM head is tied to the shared embedding
//! (`final_logits_bias` is a buffer, not a parameter).

use super::keys::{encdec_stack, require_head, Cfg};
use crate::error::{Error, Result};
use crate::model::{Block, Frontend, Model, Seq2Seq};

/// BartConfig's defaults (bart-large's shape), for keys a config leaves out. BartConfig's
/// `attribute_map` aliases `hidden_size`, `num_attention_heads` and `num_hidden_layers` to the
/// encoder's keys, and `PretrainedConfig.__init__` sets them after the named arguments: when
/// both are written, the alias wins (a config with `encoder_layers: 3` and
/// `num_hidden_layers: 6` builds six encoder layers).
fn key(c: &Cfg, k: &str, default: u64) -> Result<u64> {
    let alias = match k {
        "d_model" => Some("hidden_size"),
        "encoder_attention_heads" => Some("num_attention_heads"),
        "encoder_layers" => Some("num_hidden_layers"),
        _ => None,
    };
    Ok(c.opt(&[alias.unwrap_or(k), k])?.unwrap_or(default))
}

/// One stack (keys.rs `encdec_stack`) with BART's learned positions and embedding LayerNorm.
fn stack(c: &Cfg, name: &str, pre_ln: bool, d: u64, layers: u64, heads: u64, ffn: u64) -> Result<Model> {
    let mut m = encdec_stack(c, name, d, layers, heads, ffn)?;
    // BartLearnedPositionalEmbedding(max_position_embeddings, d): num_embeddings + 2 rows.
    m.position_embeddings = key(c, "max_position_embeddings", 1024)?.saturating_add(2);
    m.block = if pre_ln { Block::Sequential } else { Block::PostLn };
    // mBART ends each stack with a LayerNorm (`layer_norm`); BART has none.
    m.final_norm = pre_ln;
    m.embedding_norm = true;
    Ok(m)
}

/// Heads vram models: conditional generation (the bare `…Model` has the same parameters, the
/// tied head adding none).
const HEADS: &[&str] = &["BartForConditionalGeneration", "BartModel", "MBartForConditionalGeneration", "MBartModel"];

pub(super) fn parse(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    require_head(
        c,
        model_type,
        HEADS,
        "vram models BART/mBART for conditional generation (summarization, translation fine-tuning); classification and question-answering heads are not modelled yet",
    )?;
    let pre_ln = model_type == "mbart";
    let d = key(c, "d_model", 1024)?;
    let mut encoder = stack(
        c,
        &format!("{name} (encoder)"),
        pre_ln,
        d,
        key(c, "encoder_layers", 12)?,
        key(c, "encoder_attention_heads", 16)?,
        key(c, "encoder_ffn_dim", 4096)?,
    )?;
    encoder.use_cache = false;
    encoder.model_type = format!("{model_type}_encoder");
    super::validate(&encoder, c.file)?;
    let mut m =
        stack(c, name, pre_ln, d, key(c, "decoder_layers", 12)?, key(c, "decoder_attention_heads", 16)?, key(c, "decoder_ffn_dim", 4096)?)?;
    m.vocab = key(c, "vocab_size", if pre_ln { 250027 } else { 50265 })?;
    if !c.bool("tie_word_embeddings", true)? {
        // transformers 5 then unties all four: `shared`, both stacks' embed_tokens and lm_head
        // (measured: an mBART config with tie_word_embeddings false has 2 × vocab × d_model
        // more parameters than shared + lm_head); not modelled yet.
        return Err(Error::InvalidValue {
            what: format!("{model_type} tie_word_embeddings"),
            value: "false".into(),
            hint: "vram models BART/mBART with the shared embedding tied to both stacks and the LM head (the released checkpoints); untied embeddings are not modelled yet".into(),
        });
    }
    m.cross_attention = true;
    let source_tokens = key(c, "max_position_embeddings", 1024)?;
    m.seq2seq =
        Some(Box::new(Seq2Seq { encoder, source_tokens, frontend: Frontend::Text, labels_disable_cache: true, fp32_logits_bias: true }));
    Ok(m)
}
