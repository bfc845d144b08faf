//! `vram fit`: the batch-size table, as text or JSON.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::advice::Search;
use vram_core::units::gib;
use vram_core::Mode;

use super::common::{estimate_body, gpu_json, gpu_line, header, job_json, model_json};
use super::FitReport;

/// `vram fit` as a table.
pub fn text(r: &FitReport) -> String {
    let f = r.fit;
    let mut out = String::new();
    header(&mut out, r.model, r.job);
    let _ = writeln!(out, "GPU: {} · target {:.0}% = {:.2} GiB", gpu_line(r.gpu), f.target_utilization * 100.0, gib(f.budget));
    let _ = writeln!(out);
    rows(&mut out, r);
    let _ = writeln!(out);
    match (&f.chosen, f.max_batch) {
        (Some(c), Some(b)) => chosen(&mut out, r, c, b),
        _ => no_fit(&mut out, r),
    }
    if let Some(s) = r.search.filter(|s| !s.alternatives.is_empty()) {
        alternatives_text(&mut out, s);
    }
    out
}

/// One row per batch size searched, the largest within target marked.
fn rows(out: &mut String, r: &FitReport) {
    let f = r.fit;
    let accum = r.global_batch.is_some();
    let _ =
        writeln!(out, "  {:>6} {:>7} {:>14} {:>12} {:>8}", "batch", if accum { "accum" } else { "" }, "allocated GiB", "total GiB", "util");
    for row in &f.rows {
        let mark = if Some(row.batch) == f.max_batch {
            "  ← largest within target"
        } else if row.utilization > 1.0 {
            "  OOM"
        } else {
            ""
        };
        let acc = if accum { row.grad_accum.to_string() } else { String::new() };
        let _ = writeln!(
            out,
            "  {:>6} {:>7} {:>14.2} {:>12.2} {:>7.1}%{mark}",
            row.batch,
            acc,
            gib(row.peak_allocated),
            gib(row.total),
            row.utilization * 100.0
        );
    }
}

/// The chosen micro-batch, the next size, the verdict and the Trainer flags.
fn chosen(out: &mut String, r: &FitReport, c: &vram_core::fit::FitRow, b: u64) {
    let accum = r.global_batch.is_some();
    let _ = write!(out, "largest micro-batch: {b} ({:.1}% of the GPU, {:.2} GiB)", c.utilization * 100.0, gib(c.total));
    if accum {
        let _ = write!(out, " with gradient accumulation {} (global batch {})", c.grad_accum, r.global_batch.unwrap_or(b));
    }
    let _ = writeln!(out);
    if let Some(n) = &r.fit.next {
        let _ = writeln!(out, "next size {} would need {:.2} GiB ({:.1}%)", n.batch, gib(n.total), n.utilization * 100.0);
    }
    let _ = writeln!(out, "verdict: {}", r.fit.verdict.describe());
    if r.job.mode == Mode::Train {
        let _ = writeln!(
            out,
            "HF Trainer: --per_device_train_batch_size {b}{}",
            if accum { format!(" --gradient_accumulation_steps {}", c.grad_accum) } else { String::new() }
        );
    }
    if let Some(e) = r.chosen {
        let _ = writeln!(out, "peak at: {} · attention kernel {:?}", e.peak_phase.describe(), e.attention_kernel);
    }
}

/// Batch 1 does not fit: what it needs.
fn no_fit(out: &mut String, r: &FitReport) {
    let f = r.fit;
    let need = f.next.as_ref().map_or(0, |n| n.total);
    let _ = writeln!(out, "batch 1 does not fit: it needs {:.2} GiB, the target allows {:.2} GiB", gib(need), gib(f.budget));
    let _ = writeln!(out, "verdict: {}", f.verdict.describe());
}

/// Alternatives the table shows when batch 1 does not fit, and when it does; `--json` has them all.
const SHOWN: (usize, usize) = (6, 3);

/// What would let batch 1 fit, or raise the largest batch: each line re-estimated.
fn alternatives_text(out: &mut String, s: &Search) {
    let _ = writeln!(out);
    match s.baseline_max_batch {
        None => {
            let _ = writeln!(out, "what would let batch 1 fit (each re-estimated; GiB per GPU at batch 1):");
        }
        Some(_) => {
            let _ = writeln!(out, "what would raise the batch (each re-estimated; GiB per GPU at batch {}):", s.reference_batch);
        }
    }
    let shown = if s.baseline_max_batch.is_none() { SHOWN.0 } else { SHOWN.1 };
    for a in s.alternatives.iter().take(shown) {
        let gpus = if a.gpus > 1 { format!("[{} GPUs] ", a.gpus) } else { String::new() };
        let job = if a.changes_job {
            "(changes the job) "
        } else if a.changes_method {
            "(changes the training method) "
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  batch {:>4}  {:>8.2} GiB  saves {:>7.2} GiB  {gpus}{job}{}",
            a.max_batch,
            gib(a.total),
            gib(a.saving),
            a.change
        );
        if !a.hf_flags.is_empty() {
            let _ = writeln!(out, "              HF/TRL: {}", a.hf_flags);
        }
        if !a.cost.is_empty() {
            let _ = writeln!(out, "              cost: {}", a.cost);
        }
    }
    if s.alternatives.len() > shown {
        let _ = writeln!(out, "  … {} more in --json", s.alternatives.len() - shown);
    }
}

/// `vram fit --json`.
pub fn json(r: &FitReport) -> Value {
    let f = r.fit;
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
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
        "alternatives": r.search.map(|s| &s.alternatives),
        "alternatives_reference_batch": r.search.map(|s| s.reference_batch),
        "throughput": r.fit.rows.iter().zip(&r.throughput).map(|(row, (tps, step))| json!({"batch": row.batch, "tokens_per_second": tps, "step_seconds": step})).collect::<Vec<_>>(),
        "mfu": r.mfu,
    })
}
