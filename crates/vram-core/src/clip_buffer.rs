//! The compute buffer llama.cpp's vision encoder reserves when llama-server loads `--mmproj`
//! (tools/mtmd/clip.cpp `alloc_compute_meta`, logged as "CUDA0 compute buffer size" and "CPU
//! compute buffer size"): at load clip builds the graph of one square warm-up image and
//! ggml-alloc reserves that graph's peak. The warm-up side per projector type (clip.cpp
//! `load_hparams`): the tower's `image_size` for the fixed-size families (Gemma 3, Idefics3 /
//! SmolVLM, LLaVA's MLP), 46·2·patch px for the Qwen2-VL / 2.5-VL / 3-VL mergers
//! (`set_warmup_n_tokens(46*46)`: 8,464 patches), 16·patch·merge px for Pixtral. Under flash
//! attention (llama-server's `auto` default) no attention scores are materialised; without it the
//! f32 scores [N, N, heads] dominate.
//!
//! The per-family peaks were read from the graph builders (tools/mtmd/models/*.cpp) and checked
//! by replaying ggml-alloc over the warm-up graphs; against public load logs
//! (validation/logs/llama.cpp/clip_logs.jsonl, `tests/clip_buffer.rs`) they are exact for
//! Gemma 3 and the Qwen3-VL family, within 1% for Qwen2.5-VL (whose flash-attention form is an
//! approximation: it is marked so) and Pixtral. The warm-up is not the worst case: a
//! dynamic-resolution model's buffer grows at run time with a larger image.

use crate::error::{Error, Result};
use crate::gguf::Gguf;
use serde::Serialize;

/// The vision encoder's warm-up compute buffers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClipCompute {
    /// `clip.projector_type`.
    pub projector: String,
    /// The warm-up image's side, px.
    pub warmup_side: u64,
    /// Vision-transformer positions at warm-up.
    pub patches: u64,
    /// Whether the graph is the flash-attention one.
    pub flash_attn: bool,
    /// The backend's compute buffer (the GPU's when the encoder is offloaded).
    pub device_bytes: u64,
    /// The CPU's compute buffer beside it: the graph inputs (the image, positions, masks).
    pub host_inputs_bytes: u64,
    /// Whether `device_bytes` is an approximation (Qwen2.5-VL under flash attention).
    pub approximate: bool,
}

/// The projector types whose warm-up buffer a public load log has confirmed
/// (validation/logs/llama.cpp/clip_logs.jsonl); the others follow the graph builders only.
pub const LOG_CHECKED: &[&str] = &["gemma3", "qwen2.5vl_merger", "qwen3vl_merger", "pixtral"];

/// The projector types modelled.
pub const MODELLED: &[&str] = &["gemma3", "idefics3", "mlp", "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "pixtral"];

fn key(g: &Gguf, k: &str, file: &str) -> Result<u64> {
    g.metadata.get(k).and_then(|v| v.as_u64()).ok_or_else(|| Error::MissingKey {
        file: file.into(),
        key: k.into(),
        why: "size the vision encoder's compute buffer".into(),
    })
}

/// The warm-up compute buffers of an mmproj file, or `None` for a projector type not modelled
/// (the caller says so).
pub fn clip_compute(g: &Gguf, flash_attn: bool, file: &str) -> Result<Option<ClipCompute>> {
    let Some(crate::gguf::MetaValue::Str(projector)) = g.metadata.get("clip.projector_type").cloned() else {
        return Ok(None);
    };
    if !MODELLED.contains(&projector.as_str()) {
        return Ok(None);
    }
    let d = key(g, "clip.vision.embedding_length", file)? as f64;
    let f = key(g, "clip.vision.feed_forward_length", file)? as f64;
    let h = key(g, "clip.vision.attention.head_count", file)? as f64;
    let p = key(g, "clip.vision.patch_size", file)?.max(1);
    let merge = g.metadata.get("clip.vision.spatial_merge_size").and_then(|v| v.as_u64()).unwrap_or(1).max(1);
    let class_token = g.tensors.iter().any(|t| t.name == "v.class_embd");
    let (side, n) = match projector.as_str() {
        "qwen2vl_merger" | "qwen2.5vl_merger" | "qwen3vl_merger" => (92 * p, 92 * 92),
        "pixtral" => (16 * p * merge, 256 * merge * merge),
        _ => {
            let side = key(g, "clip.vision.image_size", file)?;
            (side, (side / p).pow(2) + class_token as u64)
        }
    };
    if n == 0 || n > 1 << 22 || d > 1e6 || f > 1e7 || h > 1e4 {
        return Err(Error::Gguf { file: file.into(), message: format!("implausible vision encoder: {n} patches, width {d}") });
    }
    let nf = n as f64;
    let (nd, nff, scores) = (4.0 * nf * d, 4.0 * nf * f, 4.0 * nf * nf * h);
    // The graph's inputs: the f32 image (3 channels) and, for the Qwen family, m-rope positions
    // (4 i32 a patch); Pixtral's row and column positions; Qwen2.5-VL's f32 window mask.
    let image = 12.0 * (side as f64).powi(2);
    let qwen_pos = 16.0 * nf;
    let deepstack = g.tensors.iter().any(|t| t.name.starts_with("v.deepstack."));
    let mut approximate = false;
    let (device, host) = match (projector.as_str(), flash_attn) {
        ("gemma3" | "idefics3", true) => ((5.0 * nd).max(3.0 * nd + nff), image),
        ("gemma3" | "idefics3", false) => ((scores + 6.0 * nd).max(3.0 * nd + nff), image),
        ("mlp", fa) => {
            // LLaVA's MLP projector after the tower: its two outputs over the patches.
            let proj = g.metadata.get("clip.vision.projection_dim").and_then(|v| v.as_u64()).unwrap_or(0) as f64;
            let tail = 2.0 * (nf - 1.0).max(0.0) * proj * 4.0 + nd + image;
            let body = if fa { (5.0 * nd).max(3.0 * nd + nff) } else { (scores + 6.0 * nd).max(3.0 * nd + nff) };
            (body.max(tail), image + 4.0 * nf)
        }
        ("qwen2vl_merger", true) => (image + qwen_pos + (6.0 * nd).max(2.0 * nd + nff), image + qwen_pos),
        ("qwen2vl_merger", false) => (image + qwen_pos + scores + 5.0 * nd, image + qwen_pos),
        ("qwen3vl_merger", fa) => {
            let extra = if deepstack { 3.0 * nd } else { 0.0 };
            let body = if fa { (6.0 * nd).max(2.0 * nd + nff) } else { scores + 7.0 * nd };
            (image + qwen_pos + body + extra, image + qwen_pos)
        }
        ("qwen2.5vl_merger", fa) => {
            let mask = 4.0 * nf * nf;
            approximate = fa;
            let body = if fa { 6.0 * nf * nf + 4.0 * nd + 1.2 * nff } else { mask + scores + 5.46 * nd };
            (body, image + qwen_pos + mask)
        }
        ("pixtral", true) => (4.0 * nd + 3.0 * nff, image + 8.0 * nf),
        ("pixtral", false) => ((scores + 6.0 * nd).max(4.0 * nd + 3.0 * nff), image + 8.0 * nf),
        _ => return Ok(None),
    };
    Ok(Some(ClipCompute {
        projector,
        warmup_side: side,
        patches: n,
        flash_attn,
        device_bytes: device as u64,
        host_inputs_bytes: host as u64,
        approximate,
    }))
}
