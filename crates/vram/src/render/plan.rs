//! `vram plan`: the ranked layouts, as text or JSON.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::gpu::Gpu;
use vram_core::units::gib;
use vram_core::{Job, Model};

use super::common::{gpu_json, gpu_line, header, job_json, model_json};

/// `vram plan`.
pub fn text(model: &Model, job: &Job, gpu: &Gpu, r: &vram_core::plan::PlanResult) -> String {
    let mut out = String::new();
    header(&mut out, model, job);
    let t = &r.throughput;
    let _ = writeln!(
        out,
        "searched {} layouts, {} fit; global batch {} sequences ({:.1}M tokens)",
        r.evaluated,
        r.fitting,
        r.global_batch,
        r.global_tokens / 1e6
    );
    let _ = writeln!(
        out,
        "assumed: MFU {:.0}%, {} GB/s in a node, {} GB/s between nodes, {:.0}% of data-parallel traffic overlapped",
        t.mfu * 100.0,
        t.intra_node_gbps,
        t.inter_node_gbps,
        t.dp_overlap * 100.0
    );
    let _ = writeln!(out);
    let _ =
        writeln!(out, "  tp/pp/cp/dp: tensor, pipeline, context and data parallel sizes · mb: micro-batch · accum: gradient accumulation");
    let _ = writeln!(
        out,
        "  {:>2}  {:>3} {:>3} {:>3} {:>5} {:>3} {:>6} {:<10} {:>9} {:>9} {:>12}",
        "#", "tp", "pp", "cp", "dp", "mb", "accum", "recompute", "GiB/GPU", "s/step", "tokens/s"
    );
    for (i, p) in r.top.iter().enumerate() {
        let par = &p.parallel;
        let engine = par.engine_label();
        let _ = writeln!(
            out,
            "  {:>2}  {:>3} {:>3} {:>3} {:>5} {:>3} {:>6} {:<10} {:>9.2} {:>9.2} {:>12.0}",
            i + 1,
            par.tp,
            par.pp,
            par.cp,
            par.dp(),
            p.micro_batch,
            p.grad_accum,
            format!("{:?}", p.checkpointing).to_lowercase(),
            gib(p.per_gpu_bytes),
            p.step_seconds,
            p.tokens_per_second
        );
        let _ = writeln!(out, "      {engine} — why: {}", p.reason);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "on {} · write the best as a config: --emit deepspeed | accelerate | torchrun", gpu_line(gpu));
    out
}

/// `vram plan --json`.
pub fn json(m: &Model, j: &Job, g: &Gpu, r: &vram_core::plan::PlanResult) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "model": model_json(m),
        "job": job_json(j),
        "gpu": gpu_json(g),
        "evaluated": r.evaluated,
        "fitting": r.fitting,
        "global_batch": r.global_batch,
        "assumptions": r.throughput,
        "plans": r.top,
    })
}
