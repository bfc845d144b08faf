//! llama.cpp's `--fit` (common/fit.cpp `common_params_fit_impl`, on by default since
//! ggml-org/llama.cpp#16653, December 2025): before loading, llama-server measures what the
//! model, its context and its compute buffers would take on the GPU and changes the parameters
//! the user left at their defaults until `--fit-target` (1 GiB) stays free.
//!
//! 1. An unset context (`-c` not given, llama.cpp's default 0) is the model's training context
//!    per stream (× `--parallel` when the KV cache is not unified). If it leaves the margin free,
//!    nothing changes.
//! 2. Otherwise an unset context is reduced: measured again at `--fit-ctx` (4096, per stream),
//!    interpolated linearly between the two measurements to the target and rounded down to a
//!    multiple of 256 per stream, never below `--fit-ctx`. On one GPU that ends the fit when the
//!    minimum context leaves the target reachable.
//! 3. Otherwise, unless `-ngl`, `-ot`, `--n-cpu-moe` or `--cpu-moe` was given, weights move to
//!    RAM: for a dense model the most layers (counted back to front, the output layer last) that
//!    fit; for a MoE model the dense weights first, with as few layers' experts in RAM as fit.
//!
//! vram evaluates its own plan where llama.cpp measures its allocator, and models one GPU; the
//! MoE placement is taken as `--n-cpu-moe N` (llama.cpp moves the experts of layers from the
//! front, one partial layer allowed: the same bytes to within a layer's share).

use crate::error::Result;
use crate::gguf::{llama_cpp_with, CpuMoe, Gguf, HParams, LlamaCppConfig, LlamaCppPlan, Overrides};
use serde::Serialize;

/// `--fit-target`'s default: MiB left free per device (common/common.h `fit_params_target`).
pub const DEFAULT_MARGIN: u64 = 1024 << 20;
/// `--fit-ctx`'s default: the smallest context the fit reduces to (`fit_params_min_ctx`).
pub const DEFAULT_MIN_CTX: u64 = 4096;

/// The fit's settings, and which parameters the user left to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitSettings {
    /// Bytes to leave free on the GPU (`--fit-target`).
    pub margin: u64,
    /// The smallest context per stream it reduces to (`--fit-ctx`); `None` when `-c 0` asked for
    /// the full context (llama.cpp's `UINT32_MAX` sentinel).
    pub min_ctx: Option<u64>,
    /// The context was not given: it starts at the training context and may be reduced.
    pub ctx_auto: bool,
    /// `-ngl` and the tensor overrides were not given: weights may move to RAM.
    pub layers_auto: bool,
}

/// What the fit did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum FitAction {
    /// The initial parameters leave the margin free.
    NoChange,
    /// The context was reduced and everything fits.
    ContextReduced {
        /// The training context it started from (all streams).
        from: u64,
    },
    /// Weights moved to RAM (after the context went to its minimum, if it was the fit's).
    WeightsToRam,
    /// Nothing the fit may change makes it fit: llama.cpp warns and loads as set.
    CannotFit {
        /// Why.
        reason: String,
    },
}

/// The fit's outcome: the settings llama.cpp loads with.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// The settings after the fit.
    pub config: LlamaCppConfig,
    /// The overrides after the fit (`--n-cpu-moe N` for a MoE model's experts).
    pub overrides: Overrides,
    /// What it did.
    pub action: FitAction,
    /// Bytes the model, context and compute buffers would use at the initial parameters.
    pub projected_initial: u64,
    /// Free device memory the fit compares against (CUDA total − CUDA context).
    pub free: u64,
}

/// What the fit counts on the GPU: model, context (KV and recurrent state) and compute buffers
/// (`llama_memory_breakdown`: `model + context + compute`; the CUDA context and a projector are
/// outside it).
pub fn fit_used(p: &LlamaCppPlan) -> u64 {
    p.gpu_weights_bytes + p.gpu_kv_bytes + p.gpu_state_bytes + p.gpu_compute_bytes
}

/// Apply llama.cpp's `--fit` to `c` on one GPU with `free` bytes free (see the module).
/// `c.ctx` is ignored when `s.ctx_auto`.
pub fn fit(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, o: &Overrides, free: u64, s: &FitSettings) -> Result<Fitted> {
    let streams = if c.unified { 1 } else { c.parallel.max(1) };
    let train = if hp.context_length > 0 { hp.context_length } else { DEFAULT_MIN_CTX };
    let ctx_max = if s.ctx_auto { train.saturating_mul(streams).min(u32::MAX as u64) } else { c.ctx };
    let mut cfg = LlamaCppConfig { ctx: ctx_max, ..*c };
    let used = |cfg: &LlamaCppConfig, o: &Overrides| -> Result<u64> { Ok(fit_used(&llama_cpp_with(g, hp, cfg, o)?)) };
    let projected_initial = used(&cfg, o)?;
    let done =
        |cfg: LlamaCppConfig, overrides: Overrides, action: FitAction| Fitted { config: cfg, overrides, action, projected_initial, free };
    let target = free.saturating_sub(s.margin);
    if projected_initial <= target {
        return Ok(done(cfg, o.clone(), FitAction::NoChange));
    }
    // Step 2: reduce a context the user left unset.
    if let (true, Some(min_ctx)) = (s.ctx_auto, s.min_ctx) {
        let ctx_min = min_ctx.saturating_mul(streams);
        if ctx_max > ctx_min {
            let used_min = used(&LlamaCppConfig { ctx: ctx_min, ..cfg }, o)?;
            if target > used_min && projected_initial > used_min {
                // Linear interpolation between the two measurements, rounded down for CUDA.
                let step = (ctx_max - ctx_min) as u128 * (target - used_min) as u128 / (projected_initial - used_min) as u128;
                let ctx = ctx_min + step as u64;
                let align = 256 * streams;
                cfg.ctx = (ctx - ctx % align).max(ctx_min);
                return Ok(done(cfg, o.clone(), FitAction::ContextReduced { from: ctx_max }));
            }
            cfg.ctx = ctx_min;
        }
    }
    // Step 3: weights to RAM, where the user set none of the placement.
    if !s.layers_auto {
        let reason = "-ngl or a tensor override was given, so llama.cpp's fit leaves the weights where they are (\"n_gpu_layers already set by user\")";
        return Ok(done(cfg, o.clone(), FitAction::CannotFit { reason: reason.into() }));
    }
    let all_experts = Overrides { tensor: Vec::new(), cpu_moe: CpuMoe::All };
    let moe = llama_cpp_with(g, hp, &cfg, &all_experts)?.overridden_tensors > 0;
    let full = LlamaCppConfig { n_gpu_layers: hp.layers + 1, ..cfg };
    if moe {
        // Dense weights first: as few layers' experts in RAM as leave the target free.
        let first = |n: u64| Overrides { tensor: Vec::new(), cpu_moe: CpuMoe::FirstLayers(n) };
        let fits = |n: u64| -> Result<bool> { Ok(used(&full, &first(n))? <= target) };
        if let Some(n) = crate::serve_advice::smallest(1, hp.layers, &fits)? {
            return Ok(done(full, first(n), FitAction::WeightsToRam));
        }
        let layers = most_layers(hp.layers + 1, |n| Ok(used(&LlamaCppConfig { n_gpu_layers: n, ..cfg }, &all_experts)? <= target))?;
        return Ok(done(LlamaCppConfig { n_gpu_layers: layers, ..cfg }, all_experts, FitAction::WeightsToRam));
    }
    let layers = most_layers(hp.layers + 1, |n| Ok(used(&LlamaCppConfig { n_gpu_layers: n, ..cfg }, o)? <= target))?;
    Ok(done(LlamaCppConfig { n_gpu_layers: layers, ..cfg }, o.clone(), FitAction::WeightsToRam))
}

/// The most layers on the GPU, 0 to `max`, for which `fits` holds (0 assumed to): use shrinks
/// as layers leave, so bisect.
pub fn most_layers(max: u64, fits: impl Fn(u64) -> Result<bool>) -> Result<u64> {
    let (mut lo, mut hi) = (0u64, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}
