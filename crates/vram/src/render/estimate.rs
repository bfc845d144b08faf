//! `vram estimate`: the component table, as text or JSON, for one GPU or the most loaded rank.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::gpu::Gpu;
use vram_core::parallel::{Parallel, ParallelEstimate};
use vram_core::units::{gb, gib};
use vram_core::{Job, Model};

use super::common::{component_table, estimate_body, gib_cell, gpu_json, gpu_line, header, job_json, model_json, verdict};
use super::EstimateReport;

/// `vram estimate` as a table.
pub fn text(r: &EstimateReport) -> String {
    let e = r.estimate;
    let mut out = String::new();
    header(&mut out, r.model, r.job);
    let _ = writeln!(out, "attention kernel: {:?} · peak at: {}", e.attention_kernel, e.peak_phase.describe());
    let _ = writeln!(out);
    component_table(
        &mut out,
        &e.components,
        ("peak allocated (torch.cuda.max_memory_allocated)", "total (what nvidia-smi shows)"),
        e.peak_allocated,
        e.total,
        r.gpu,
    );
    let _ = writeln!(out);
    let phases: Vec<String> = e.phases.iter().map(|p| format!("{} {:.2}", p.phase.describe(), gib(p.allocated))).collect();
    let _ = writeln!(out, "allocated by phase (GiB): {}", phases.join(" · "));
    if let Some(c) = e.components.iter().find(|c| c.name == "caching allocator reserve") {
        let _ = writeln!(out, "allocator reserve: {}", c.detail);
    }
    for n in e.notes.iter().chain(r.advice.iter()) {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `vram estimate --json`.
pub fn json(r: &EstimateReport) -> Value {
    let mut v = estimate_body(r.estimate);
    v["vram_version"] = json!(env!("CARGO_PKG_VERSION"));
    v["model"] = model_json(r.model);
    v["job"] = job_json(r.job);
    v["advice"] = json!(r.advice);
    v["gpu"] = match r.gpu {
        Some(g) => {
            let mut gv = gpu_json(g);
            let util = r.estimate.total as f64 / g.memory as f64;
            gv["utilization"] = json!(util);
            gv["fits"] = json!(r.estimate.total <= g.memory);
            gv
        }
        None => Value::Null,
    };
    v
}

/// `vram estimate` with a distributed layout: the most loaded rank.
pub fn parallel_text(model: &Model, job: &Job, par: &Parallel, e: &ParallelEstimate, gpu: Option<&Gpu>) -> String {
    let mut out = String::new();
    header(&mut out, model, job);
    let _ = writeln!(out, "{}", par.describe());
    let _ = writeln!(out, "most loaded rank: {}", e.rank);
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<50} {:>10} {:>7}", "component (per GPU)", "GiB", "share");
    let total = e.total.max(1) as f64;
    for c in &e.components {
        let _ = writeln!(out, "  {:<50} {:>10} {:>6.1}%", c.name, gib_cell(c.bytes), c.bytes as f64 / total * 100.0);
    }
    let _ = writeln!(out, "  {:<50} {:>10.2}", "peak allocated per GPU", gib(e.peak_allocated));
    let _ = writeln!(out, "  {:<50} {:>10.2}    = {:.2} GB", "total per GPU (what nvidia-smi shows)", gib(e.total), gb(e.total));
    if let Some(cpu) = e.cpu_per_node {
        let _ = writeln!(out, "  {:<50} {:>10.2}    = {:.2} GB", "CPU memory per node (offload)", gib(cpu), gb(cpu));
    }
    if let Some(g) = gpu {
        let util = e.total as f64 / g.memory as f64;
        let _ = writeln!(out);
        let _ = writeln!(out, "on {}: {:.1}% — {}", gpu_line(g), util * 100.0, verdict(util));
    }
    for n in &e.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `vram estimate --json` with a distributed layout.
pub fn parallel_json(m: &Model, j: &Job, par: &Parallel, e: &ParallelEstimate, g: Option<&Gpu>) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "model": model_json(m),
        "job": job_json(j),
        "parallel": par,
        "rank": e.rank,
        "components": e.components,
        "peak_allocated_bytes": e.peak_allocated,
        "total_bytes": e.total,
        "cpu_per_node_bytes": e.cpu_per_node,
        "gpu": g.map(|g| {
            let mut v = gpu_json(g);
            v["utilization"] = json!(e.total as f64 / g.memory as f64);
            v["fits"] = json!(e.total <= g.memory);
            v
        }),
        "notes": e.notes,
    })
}
