//! The JSON the CLI prints with `--json`, built from the same core types (the CLI's
//! crates/vram/src/render/{common,estimate,fit,serve,lists}.rs). No number is computed here:
//! every value is a field of a core result. `scripts/web-test.sh` diffs these objects against
//! the CLI's output, so a drift between the two is caught.

use serde_json::{json, Value};
use vram_core::advice::Search;
use vram_core::fit::Fit;
use vram_core::gpu::Gpu;
use vram_core::serve::{ServeConfig, ServeReport};
use vram_core::{Estimate, Job, Model};

/// The version both the page and the CLI report.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use vram_core::report::{estimate_body, gpu_json, job_json, model_json};

/// `vram estimate --json`.
pub fn estimate_json(model: &Model, job: &Job, e: &Estimate, gpu: Option<&Gpu>, advice: &[String]) -> Value {
    let mut v = estimate_body(e);
    v["vram_version"] = json!(VERSION);
    v["model"] = model_json(model);
    v["job"] = job_json(job);
    v["advice"] = json!(advice);
    v["gpu"] = match gpu {
        Some(g) => {
            let mut gv = gpu_json(g);
            gv["utilization"] = json!(e.total as f64 / g.memory as f64);
            gv["fits"] = json!(e.total <= g.memory);
            gv
        }
        None => Value::Null,
    };
    v
}

/// Everything `vram fit --json` shows.
pub struct FitReport<'a> {
    /// The model.
    pub model: &'a Model,
    /// The job (its batch is searched).
    pub job: &'a Job,
    /// The GPU.
    pub gpu: &'a Gpu,
    /// The search.
    pub fit: &'a Fit,
    /// `global_batch_size`, when given.
    pub global_batch: Option<u64>,
    /// The estimate at the chosen batch.
    pub chosen: Option<&'a Estimate>,
    /// What would let batch 1 fit or raise the batch.
    pub search: Option<&'a Search>,
    /// (tokens/s, seconds per step) per row.
    pub throughput: &'a [(f64, f64)],
    /// Model FLOPs utilisation assumed for the throughput.
    pub mfu: f64,
}

/// `vram fit --json`.
pub fn fit_json(r: &FitReport) -> Value {
    let f = r.fit;
    json!({
        "vram_version": VERSION,
        "model": model_json(r.model),
        "job": job_json(r.job),
        "gpu": gpu_json(r.gpu),
        "target_utilization": f.target_utilization,
        "budget_bytes": f.budget,
        "global_batch_size": r.global_batch,
        "max_batch_size": f.max_batch,
        "grad_accum": f.chosen.as_ref().map(|c| c.grad_accum),
        "utilization": f.chosen.as_ref().map(|c| c.utilization),
        "chosen": f.chosen,
        "next": f.next,
        "rows": f.rows,
        "estimate": r.chosen.map(estimate_body),
        "verdict": f.verdict,
        "verdict_text": f.verdict.describe(),
        "alternatives": r.search.map(|s| &s.alternatives),
        "alternatives_reference_batch": r.search.map(|s| s.reference_batch),
        "throughput": f.rows.iter().zip(r.throughput).map(|(row, (tps, step))| json!({"batch": row.batch, "tokens_per_second": tps, "step_seconds": step})).collect::<Vec<_>>(),
        "mfu": r.mfu,
    })
}

/// `vram serve --json` for vLLM: one entry per GPU (every TP rank holds the same).
pub fn serve_json(model: &Model, gpu: &Gpu, config: &ServeConfig, r: &ServeReport) -> Value {
    let mut per_gpu = serde_json::to_value(r).unwrap_or(Value::Null);
    per_gpu["process_bytes_at_least"] = json!(r.process_bytes());
    let gpus: Vec<Value> = (0..r.tp)
        .map(|rank| {
            let mut v = per_gpu.clone();
            v["rank"] = json!(rank);
            v
        })
        .collect();
    json!({
        "vram_version": VERSION,
        "engine": "vllm",
        "model": model_json(model),
        "gpu": gpu_json(gpu),
        "config": config,
        "gpus": gpus,
    })
}

/// `vram models --json`.
pub fn presets_json() -> Result<Value, vram_core::Error> {
    let rows = vram_core::presets::PRESETS
        .iter()
        .map(|p| {
            let m = vram_core::presets::load(p.name)?;
            Ok(json!({"name": p.name, "model_type": m.model_type, "hf_id": p.hf_id, "parameters": m.parameters()}))
        })
        .collect::<Result<Vec<_>, vram_core::Error>>()?;
    Ok(Value::Array(rows))
}

/// `vram gpus --json`.
pub fn gpus_json() -> Value {
    Value::Array(vram_core::gpu::catalogue().iter().map(gpu_json).collect())
}
