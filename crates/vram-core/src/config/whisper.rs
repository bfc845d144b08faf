//! Whisper (transformers models/whisper/configuration_whisper.py, modeling_whisper.py): an audio
//! encoder (two convs over log-mel frames, learned positions, pre-LN layers) and a text decoder
//! whose layers add cross-attention over the encoder output; the output projection is tied to
//! the decoder's token embedding.

use super::keys::{base, Cfg};
use crate::error::{Error, Result};
use crate::model::{Act, Attention, Block, Frontend, Mlp, Model, Norm, QkNorm, Seq2Seq};

/// WhisperConfig's defaults (whisper-tiny's shape), for keys a config leaves out.
fn key(c: &Cfg, k: &str, default: u64) -> Result<u64> {
    Ok(c.opt(&[k])?.unwrap_or(default))
}

/// One pre-LN stack of Whisper (`WhisperEncoderLayer` / `WhisperDecoderLayer`): LayerNorm with
/// bias, q/v/o with bias and k without, a plain MLP (fc1, activation, fc2) with biases.
fn stack(c: &Cfg, name: &str, d: u64, layers: u64, heads: u64, ffn: u64, positions: u64) -> Result<Model> {
    let mut m = base(name);
    m.hidden = d;
    m.embed_dim = d;
    m.layers = layers;
    m.heads = heads;
    m.kv_heads = heads;
    m.head_dim = d.checked_div(heads).unwrap_or(0);
    m.intermediate = ffn;
    m.position_embeddings = positions;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = Block::Sequential;
    m.attention =
        Attention { qkv_bias: true, o_bias: true, fused_qkv: false, qk_norm: QkNorm::None, mla: None, softcap: false, sinks: false };
    m.k_bias = false;
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["activation_function"], Act::Gelu), bias: true };
    m.final_norm = true;
    m.tied_embeddings = true;
    m.hidden_dropout = c.dropout(&["dropout"])?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.mlp_dropout = c.dropout(&["activation_dropout"])? > 0.0;
    Ok(m)
}

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    if let Some(serde_json::Value::Array(a)) = c.get("architectures") {
        if let Some(arch) = a.iter().filter_map(serde_json::Value::as_str).find(|a| *a != "WhisperForConditionalGeneration") {
            return Err(Error::InvalidValue {
                what: "Whisper head".into(),
                value: arch.into(),
                hint: "vram models WhisperForConditionalGeneration (speech recognition and translation fine-tuning); audio classification heads are not modelled yet".into(),
            });
        }
    }
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
    let source_tokens = encoder.position_embeddings;
    m.seq2seq =
        Some(Box::new(Seq2Seq { encoder, source_tokens, frontend: Frontend::Audio { mel_bins: mel }, labels_disable_cache: false }));
    Ok(m)
}
