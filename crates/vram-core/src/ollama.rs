//! Ollama's settings mapped onto the llama.cpp launch it makes (Ollama runs llama.cpp's engine
//! or its own on the same GGUF tensors; both size one KV cache for all parallel requests).
//!
//! Sources (github.com/ollama/ollama):
//! - envconfig/config.go of v0.33.3: `NumParallel = Uint("OLLAMA_NUM_PARALLEL", 1)` (older
//!   releases tried 4, then 1), `ContextLength = Uint("OLLAMA_CONTEXT_LENGTH", 0)` ("default:
//!   4k/32k/256k based on VRAM"; earlier releases defaulted to 2048, then 4096),
//!   `OLLAMA_FLASH_ATTENTION`, `OLLAMA_KV_CACHE_TYPE` ("default: f16").
//! - docs.ollama.com/context-length: the ladder, "< 24 GiB VRAM: 4k context, 24-48 GiB VRAM: 32k
//!   context, >= 48 GiB VRAM: 256k context".
//! - server/sched.go `pickBestFullFitByLibrary`: `req.opts.NumCtx = req.origNumCtx * p` — the
//!   runner's context is num_ctx × the parallel requests, passed as `--ctx-size` with
//!   `--parallel p`, so each request keeps num_ctx tokens.
//! - llm/server.go: a num_ctx above the model's trained context is lowered to it; a quantized KV
//!   cache needs flash attention, else Ollama falls back to f16.

use serde::Serialize;

use crate::error::{Error, Result};

/// What the user set: environment variables and `num_ctx`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OllamaInput {
    /// `num_ctx` (`/set parameter num_ctx N`, a Modelfile `PARAMETER num_ctx`, the API's options).
    pub num_ctx: Option<u64>,
    /// `OLLAMA_CONTEXT_LENGTH`.
    pub context_length: Option<u64>,
    /// `OLLAMA_NUM_PARALLEL`.
    pub num_parallel: Option<u64>,
    /// `OLLAMA_FLASH_ATTENTION` (already read as a bool).
    pub flash_attention: Option<bool>,
    /// `OLLAMA_KV_CACHE_TYPE`.
    pub kv_cache_type: Option<String>,
}

/// The llama.cpp settings Ollama launches with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OllamaLaunch {
    /// Tokens each request keeps (num_ctx after the defaults and the cap).
    pub num_ctx: u64,
    /// Parallel requests.
    pub parallel: u64,
    /// The runner's `--ctx-size`: num_ctx × parallel.
    pub ctx_size: u64,
    /// Flash attention.
    pub flash_attn: bool,
    /// KV cache type: f16, q8_0 or q4_0.
    pub kv_cache_type: String,
    /// How each figure was chosen.
    pub notes: Vec<String>,
}

const GIB: u64 = 1 << 30;

/// Ollama's default context for a GPU of `vram` bytes (docs.ollama.com/context-length).
pub fn default_context(vram: u64) -> u64 {
    match vram {
        v if v < 24 * GIB => 4096,
        v if v < 48 * GIB => 32768,
        _ => 262_144,
    }
}

/// Read `OLLAMA_FLASH_ATTENTION` as Go's `strconv.ParseBool` with envconfig's `Bool` fallback:
/// an unparsable value counts as true.
pub fn parse_bool(v: &str) -> bool {
    !matches!(v, "0" | "f" | "F" | "false" | "FALSE" | "False")
}

/// Resolve Ollama's launch for a model trained to `trained_ctx` tokens on `vram` bytes of GPU.
pub fn resolve(i: &OllamaInput, vram: u64, trained_ctx: u64) -> Result<OllamaLaunch> {
    let bad = |what: &str, value: String, hint: &str| Error::InvalidValue { what: what.into(), value, hint: hint.into() };
    let mut notes = Vec::new();
    let parallel = i.num_parallel.unwrap_or(1);
    if parallel == 0 || parallel > 512 {
        return Err(bad("OLLAMA_NUM_PARALLEL", parallel.to_string(), "1 to 512 parallel requests"));
    }
    let mut num_ctx = match (i.num_ctx, i.context_length) {
        (Some(n), _) => n,
        (None, Some(n)) if n > 0 => n,
        _ => {
            let d = default_context(vram);
            notes.push(format!("num_ctx {d}: Ollama's default for a {} GiB GPU (4k below 24 GiB, 32k to 48 GiB, 256k above; releases before the VRAM ladder used 4096 or 2048)", vram / GIB));
            d
        }
    };
    if num_ctx == 0 || num_ctx > 1 << 24 {
        return Err(bad("num_ctx", num_ctx.to_string(), "1 to 16M tokens"));
    }
    if trained_ctx > 0 && num_ctx > trained_ctx {
        notes.push(format!("num_ctx {num_ctx} is above the model's trained {trained_ctx}: Ollama lowers it (llm/server.go)"));
        num_ctx = trained_ctx;
    }
    let flash_attn = i.flash_attention.unwrap_or(false);
    let mut kv = i.kv_cache_type.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "f16".into());
    if !matches!(kv.as_str(), "f16" | "q8_0" | "q4_0") {
        return Err(bad("OLLAMA_KV_CACHE_TYPE", kv, "f16, q8_0 or q4_0 (Ollama's values)"));
    }
    if kv != "f16" && !flash_attn {
        notes.push(format!("OLLAMA_KV_CACHE_TYPE={kv} needs flash attention (OLLAMA_FLASH_ATTENTION=1): Ollama uses f16"));
        kv = "f16".into();
    }
    let ctx_size = num_ctx.checked_mul(parallel).filter(|c| *c <= 1 << 24).ok_or_else(|| {
        bad("num_ctx × OLLAMA_NUM_PARALLEL", format!("{num_ctx} × {parallel}"), "the runner's context must stay below 16M tokens")
    })?;
    notes.push(format!(
        "Ollama runs llama.cpp with --ctx-size {ctx_size} (num_ctx {num_ctx} × {parallel} parallel, server/sched.go) --parallel {parallel}"
    ));
    Ok(OllamaLaunch { num_ctx, parallel, ctx_size, flash_attn, kv_cache_type: kv, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_multiplies_the_context() {
        let i = OllamaInput { num_parallel: Some(4), context_length: Some(8192), ..Default::default() };
        let l = resolve(&i, 24 * GIB, 131072).unwrap();
        assert_eq!((l.num_ctx, l.parallel, l.ctx_size), (8192, 4, 32768));
    }

    #[test]
    fn num_ctx_wins_over_the_environment_and_is_capped() {
        let i = OllamaInput { num_ctx: Some(200_000), context_length: Some(8192), ..Default::default() };
        assert_eq!(resolve(&i, 80 * GIB, 131072).unwrap().num_ctx, 131072);
    }

    #[test]
    fn the_default_follows_vram() {
        let l = |g: u64| resolve(&OllamaInput::default(), g * GIB, 1 << 20).unwrap().num_ctx;
        assert_eq!((l(16), l(24), l(80)), (4096, 32768, 262_144));
    }

    #[test]
    fn a_quantized_cache_without_flash_attention_is_f16() {
        let i = OllamaInput { kv_cache_type: Some("q8_0".into()), ..Default::default() };
        assert_eq!(resolve(&i, 24 * GIB, 8192).unwrap().kv_cache_type, "f16");
        let i = OllamaInput { flash_attention: Some(true), ..i };
        assert_eq!(resolve(&i, 24 * GIB, 8192).unwrap().kv_cache_type, "q8_0");
        assert!(resolve(&OllamaInput { kv_cache_type: Some("q5_1".into()), ..Default::default() }, GIB, 8192).is_err());
    }
}
