//! Renderers: pure functions from a report to text or JSON, one module per command. No I/O here.

mod common;
pub mod emit;
pub mod estimate;
pub mod fit;
pub mod lists;
pub mod llama_split;
pub mod measured;
pub mod plan;
pub mod prometheus;
pub mod serve;
pub mod serve_advice;
pub mod serve_log;
pub mod serve_quants;
pub mod svg;

use vram_core::advice::Search;
use vram_core::fit::Fit;
use vram_core::gpu::Gpu;
use vram_core::{Estimate, Job, Model};

/// Everything `vram estimate` reports.
pub struct EstimateReport<'a> {
    /// The model.
    pub model: &'a Model,
    /// The job.
    pub job: &'a Job,
    /// The estimate.
    pub estimate: &'a Estimate,
    /// The GPU, when given.
    pub gpu: Option<&'a Gpu>,
    /// Advice notes.
    pub advice: Vec<String>,
}

/// Everything `vram fit` reports.
pub struct FitReport<'a> {
    /// The model.
    pub model: &'a Model,
    /// The job (batch is searched).
    pub job: &'a Job,
    /// The GPU.
    pub gpu: &'a Gpu,
    /// The search result.
    pub fit: &'a Fit,
    /// The global batch size, when given.
    pub global_batch: Option<u64>,
    /// The estimate at the chosen batch.
    pub chosen: Option<&'a Estimate>,
    /// What would fit when batch 1 does not, or raise the batch when it does.
    pub search: Option<&'a Search>,
    /// (tokens/s, seconds per step) for each row.
    pub throughput: Vec<(f64, f64)>,
    /// The MFU assumed for it.
    pub mfu: f64,
}
