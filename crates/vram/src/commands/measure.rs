//! `vram run`, `vram tune` and `vram watch`: arguments → the measuring loops in `run`, `tune`
//! and `watch` (which own processes and NVML) → output.

use anyhow::Result;
use vram_core::estimate;

use super::{emit, emit_json};
use crate::cli::{RunArgs, TuneArgs, WatchArgs};
use crate::errors::usage;
use crate::{resolve, run, tune, watch};

/// `vram run`: exits with the command's own code.
pub fn run(a: RunArgs) -> Result<u8> {
    if a.job.json {
        return Err(usage("`vram run` prints its report to stderr and writes JSON with --out run.json; --json is not read here"));
    }
    if a.job.model.is_none() && resolve::job_flags_given(&a.job) {
        return Err(usage(
            "job flags (--batch-size, --precision, …) describe the estimate to compare with: give --model too, or drop them",
        ));
    }
    let estimate = match &a.job.model {
        Some(_) => {
            let (model, job) = resolve::resolve(&a.job)?;
            let e = estimate(&model, &job)?;
            Some((model.name.clone(), e.peak_allocated, e.total, job.overheads.context_for(job.mode)))
        }
        None => None,
    };
    let code = run::run_with(
        run::RunOptions {
            command: a.command,
            interval: run::parse_interval(&a.interval)?,
            out: a.out,
            timeline: a.timeline,
            svg: a.svg,
            metrics: a.metrics,
            estimate,
            snapshot: a.snapshot,
        },
        run::RunExtras { force: a.force, metrics_command_label: a.metrics_command_label },
    )?;
    Ok(code.clamp(0, 255) as u8)
}

fn measure_kind(s: &str) -> Result<tune::Measure> {
    match s {
        "nvml" => Ok(tune::Measure::Nvml),
        "child-report" => Ok(tune::Measure::ChildReport),
        other => Err(usage(format!("invalid --measure `{other}`: use nvml or child-report"))),
    }
}

/// `vram tune`: 0 when a batch was chosen, 1 when none could be, 128 + signal when interrupted.
pub fn tune(a: TuneArgs) -> Result<u8> {
    resolve::reject_searched_flags(&a.job, "`vram tune`", a.global_batch_size)?;
    let (model, job) = resolve::resolve(&a.job)?;
    let g = resolve::gpu(&a.gpu)?;
    let measure = measure_kind(&a.measure)?;
    let global = a.global_batch_size;
    let est = |b: u64| -> u64 {
        let accum = global.map_or(job.grad_accum, |gb| (gb / b.max(1)).max(1));
        estimate(&model, &vram_core::Job { batch: b.max(1), grad_accum: accum, ..job.clone() }).map_or(u64::MAX, |e| e.total)
    };
    let report = tune::tune(tune::TuneOptions {
        command: a.command,
        gpu_memory: g.memory,
        target: a.target_utilization,
        margin: a.margin,
        max_trials: a.max_trials,
        timeout: run::parse_duration(&a.timeout, 1.0, 7.0 * 86400.0)?,
        interval: run::parse_interval(&a.interval)?,
        measure,
        global_batch: global,
        estimate: &est,
    })?;
    if a.job.json {
        emit_json(&serde_json::to_value(&report)?)?;
    } else {
        emit(&tune::text(&report, g.memory))?;
    }
    Ok(report.exit_code())
}

/// `vram watch`.
pub fn watch(a: &WatchArgs) -> Result<()> {
    let text = watch::watch_with(a.once, a.json, run::parse_interval(&a.interval)?, a.metrics.clone(), a.metrics_command_label)?;
    emit(&text)
}
