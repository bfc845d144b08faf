//! `vram fit`: the largest micro-batch within a target share of one GPU.

use anyhow::Result;
use vram_core::gpu::Gpu;
use vram_core::plan::single_gpu_throughput;
use vram_core::{advice, estimate, fit, Job, Model};

use super::show;
use crate::cli::FitArgs;
use crate::errors::{usage, DoesNotFit};
use crate::render::{self, FitReport};
use crate::resolve;

/// Resolve, search, render.
pub fn run(a: &FitArgs) -> Result<()> {
    if !(a.mfu > 0.0 && a.mfu <= 1.0) {
        return Err(usage(format!("invalid --mfu {}: a fraction in (0, 1]", a.mfu)));
    }
    resolve::reject_searched_flags(&a.job, "`vram fit`", a.global_batch_size)?;
    let (model, job) = resolve::resolve(&a.job)?;
    let g = resolve::gpu(&a.gpu)?;
    let f = fit::fit(&model, &job, g.memory, a.target_utilization, a.global_batch_size)?;
    let chosen = match f.chosen.as_ref() {
        Some(c) => Some(estimate(&model, &Job { batch: c.batch, grad_accum: c.grad_accum, ..job.clone() })?),
        None => None,
    };
    // What would fit (batch 1 does not) or raise the batch: every saver re-estimated. With a
    // global batch the micro-batch must divide it, which the search does not know: skip it there.
    let search = match a.global_batch_size {
        None => Some(advice::search(&model, &job.with_batch(1), f.budget)?),
        Some(_) if f.max_batch.is_none() => Some(advice::search(&model, &job.with_batch(1), f.budget)?),
        Some(_) => None,
    };
    let throughput = throughput(&model, &job, &g, &f, a.mfu);
    let report = FitReport {
        model: &model,
        job: &job,
        gpu: &g,
        fit: &f,
        global_batch: a.global_batch_size,
        chosen: chosen.as_ref(),
        search: search.as_ref(),
        throughput,
        mfu: a.mfu,
    };
    show(a.job.json, || render::fit::json(&report), || render::fit::text(&report))?;
    if a.fail_if_oom && f.max_batch.is_none() {
        return Err(DoesNotFit.into());
    }
    Ok(())
}

/// (tokens/s, seconds per step) for each searched batch size.
fn throughput(model: &Model, job: &Job, g: &Gpu, f: &fit::Fit, mfu: f64) -> Vec<(f64, f64)> {
    f.rows.iter().map(|r| single_gpu_throughput(model, &Job { batch: r.batch, grad_accum: r.grad_accum, ..job.clone() }, g, mfu)).collect()
}
