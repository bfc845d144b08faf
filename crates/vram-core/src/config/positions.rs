//! Positions: trained context, rotary width, RoPE scaling.

use serde_json::Value;

use super::keys::Cfg;
use super::MAX_POSITIONS;
use crate::error::Result;
use crate::model::{Model, RopeScaling};

/// Trained context, rotary width and RoPE scaling.
pub(super) fn positions(c: &Cfg, m: &mut Model) -> Result<()> {
    m.max_positions = c.opt(&["max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"])?.unwrap_or(0);
    // Rotary width: learned positions (GPT-2, OPT) and ALiBi (Falcon-RW, BLOOM) have none;
    // partial rotary per `partial_rotary_factor` (Phi, StableLM) or `rotary_pct` (GPT-NeoX).
    let alibi = c.bool("alibi", false)?;
    m.rotary_dim = match m.attention.mla {
        Some(mla) => mla.qk_rope_head_dim,
        None if m.position_embeddings > 0 || alibi || m.relative_buckets > 0 => 0,
        // Granite-4.0-H builds its rotary embedding only for `position_embedding_type` "rope"
        // (transformers granitemoehybrid GraniteMoeHybridModel.__init__); its checkpoints say "nope".
        None if m.model_type == "granitemoehybrid" && c.get("position_embedding_type").and_then(Value::as_str) != Some("rope") => 0,
        // Jamba's attention layers have no positional encoding (transformers models/jamba).
        None if m.model_type == "jamba" => 0,
        // Zamba2's shared attention rotates q and k only with `use_mem_rope` (modeling_zamba2.py).
        None if m.model_type == "zamba2" && !c.bool("use_mem_rope", false)? => 0,
        // The first Zamba's shared attention has no positional encoding (modeling_zamba.py).
        None if m.model_type == "zamba" => 0,
        // Qwen3-Next and Qwen3.5 rotate a quarter of each head by default (their configs'
        // `partial_rotary_factor` default 0.25, which Qwen3.5 writes inside `rope_parameters`).
        None if matches!(m.model_type.as_str(), "qwen3_next" | "qwen3_5_text" | "qwen3_5_moe_text") => {
            let nested = match c.get("rope_parameters") {
                Some(Value::Object(r)) => r.get("partial_rotary_factor").and_then(Value::as_f64),
                _ => None,
            };
            let frac = c.f64("partial_rotary_factor", nested.unwrap_or(0.25))?.clamp(0.0, 1.0);
            (m.head_dim as f64 * frac) as u64
        }
        None => {
            let frac = c.f64("partial_rotary_factor", c.f64("rotary_pct", 1.0)?)?.clamp(0.0, 1.0);
            (m.head_dim as f64 * frac) as u64
        }
    };
    // Zamba2Config: `use_long_context` extends the context to 16384 (and rescales RoPE).
    if m.model_type == "zamba2" && c.bool("use_long_context", false)? {
        m.max_positions = 16384;
    }
    if m.rotary_dim > 0 {
        m.rope_scaling = rope_scaling(c, m.max_positions)?;
    }
    Ok(())
}

/// `rope_scaling` (transformers 4.x) or `rope_parameters` (5.x): which extension applies and the
/// native and extended context (`modeling_rope_utils.py`).
fn rope_scaling(c: &Cfg, max_positions: u64) -> Result<Option<RopeScaling>> {
    let Some(Value::Object(r)) = c.get("rope_scaling").or_else(|| c.get("rope_parameters")) else { return Ok(None) };
    let kind = r.get("rope_type").or_else(|| r.get("type")).and_then(Value::as_str).unwrap_or("default").to_string();
    if kind == "default" {
        return Ok(None);
    }
    let factor = match r.get("factor") {
        None | Some(Value::Null) => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite() && *f > 0.0 && *f <= 1e6)
            .ok_or_else(|| c.bad("rope_scaling.factor", v, "expected a positive number"))?,
    };
    // Phi-3 longrope keeps original_max_position_embeddings at the top level.
    let original = r.get("original_max_position_embeddings").and_then(Value::as_u64).or(c.opt(&["original_max_position_embeddings"])?);
    let native = original.unwrap_or(max_positions).min(MAX_POSITIONS);
    if native == 0 {
        return Ok(None);
    }
    // Linear, Llama-3 and LongRoPE configs state the reach in max_position_embeddings; dynamic
    // NTK and YaRN stretch the native context by `factor`.
    let stretched = match kind.as_str() {
        "linear" | "llama3" | "longrope" => native,
        "dynamic" | "yarn" | "ntk" => ((native as f64 * factor) as u64).min(MAX_POSITIONS),
        // Another type (mrope, default …): its reach is not known, so claim none beyond the config's.
        _ => max_positions,
    };
    Ok(Some(RopeScaling { kind, factor, native_positions: native, extended_positions: stretched.max(max_positions) }))
}
