//! Whisper (transformers models/whisper/configuration_whisper.py, modeling_whisper.py): an audio
//! encoder (two convs over log-mel frames, learned positions, pre-LN layers) and a text decoder
//! whose layers add cross-attention over the encoder output; the output projection is tied to
//! the decoder's token embedding.

use super::keys::{encdec_stack, require_head, Cfg};
use crate::error::Result;
use crate::model::{Block, Frontend, Model, Seq2Seq};

/// WhisperConfig's defaults (whisper-tiny's shape), for keys a config leaves out.
fn key(c: &Cfg, k: &str, default: u64) -> Result<u64> {
    Ok(c.opt(&[k])?.unwrap_or(default))
}

/// One pre-LN stack of Whisper (`WhisperEncoderLayer` / `WhisperDecoderLayer`, keys.rs
/// `encdec_stack`): k_proj has no bias, positions are learned, a final LayerNorm.
fn stack(c: &Cfg, name: &str, d: u64, layers: u64, heads: u64, ffn: u64, positions: u64) -> Result<Model> {
    let mut m = encdec_stack(c, name, d, layers, heads, ffn)?;
    m.position_embeddings = positions;
    m.block = Block::Sequential;
    m.k_bias = false;
    m.final_norm = true;
    Ok(m)
}

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    require_head(
        c,
        "whisper",
        &["WhisperForConditionalGeneration"],
        "vram models WhisperForConditionalGeneration (speech recognition and translation fine-tuning); audio classification heads are not modelled yet",
    )?;
    let d = key(c, "d_model", 384)?;
    let mut encoder = stack(
        c,
        &format!("{name} (encoder)"),
        d,
        key(c, "encoder_layers", 4)?,
        key(c, "encoder_attention_heads", 6)?,
        key(c, "encoder_ffn_dim", 1536)?,
        key(c, "max_source_positions", 1500)?,
    )?;
    encoder.use_cache = false;
    encoder.attention.head_major_q = true;
    encoder.model_type = "whisper_encoder".into();
    // The decoder is validated with the rest of the config; the encoder stack here.
    super::validate(&encoder, c.file)?;
    let mel = key(c, "num_mel_bins", 80)?;
    if mel == 0 || mel > 4096 {
        return Err(c.bad("num_mel_bins", &serde_json::Value::from(mel), "expected 1–4096 mel bins (Whisper: 80 or 128)"));
    }
    let mut m = stack(
        c,
        name,
        d,
        key(c, "decoder_layers", 4)?,
        key(c, "decoder_attention_heads", 6)?,
        key(c, "decoder_ffn_dim", 1536)?,
        key(c, "max_target_positions", 448)?,
    )?;
    m.vocab = key(c, "vocab_size", 51865)?;
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.cross_attention = true;
    m.attention.head_major_q = true;
    let source_tokens = encoder.position_embeddings;
    m.seq2seq = Some(Box::new(Seq2Seq {
        encoder,
        source_tokens,
        frontend: Frontend::Audio { mel_bins: mel },
        labels_disable_cache: false,
        fp32_logits_bias: false,
    }));
    Ok(m)
}
