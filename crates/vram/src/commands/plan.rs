//! `vram plan`: search distributed layouts, rank them, or write the best for an engine.

use anyhow::Result;
use vram_core::gpu;
use vram_core::parallel::Engine;
use vram_core::plan::{search, PlanRequest, Throughput};

use super::{emit, emit_json};
use crate::cli::PlanArgs;
use crate::errors::usage;
use crate::render;
use crate::resolve;

/// Where the best plan goes.
#[derive(Clone, Copy)]
enum Output {
    Table,
    Json,
    DeepSpeed,
    Accelerate,
    Torchrun,
}

fn output(a: &PlanArgs) -> Result<Output> {
    match a.emit.as_deref() {
        None if a.job.json => Ok(Output::Json),
        None => Ok(Output::Table),
        Some("deepspeed") => Ok(Output::DeepSpeed),
        Some("accelerate") => Ok(Output::Accelerate),
        Some("torchrun") => Ok(Output::Torchrun),
        Some(other) => Err(usage(format!("invalid --emit `{other}`: use deepspeed, accelerate or torchrun"))),
    }
}

fn throughput(a: &PlanArgs, g: &gpu::Gpu) -> Result<Throughput> {
    let mut tp = Throughput::for_gpu(g);
    tp.mfu = a.mfu;
    if let Some(bw) = a.inter_node_gbps {
        tp.inter_node_gbps = bw;
    }
    if !(a.mfu > 0.0 && a.mfu <= 1.0) || tp.inter_node_gbps <= 0.0 || !tp.inter_node_gbps.is_finite() {
        return Err(usage("--mfu must be in (0, 1] and --inter-node-gbps positive"));
    }
    Ok(tp)
}

/// Resolve, search, render.
pub fn run(a: &PlanArgs) -> Result<()> {
    resolve::reject_searched_flags(&a.job, "`vram plan`", a.global_batch_size)?;
    resolve::reject_alloc_conf(&a.job, "`vram plan`")?;
    let (model, job) = resolve::resolve(&a.job)?;
    let g = resolve::gpu(&a.gpu)?;
    let tp = throughput(a, &g)?;
    let out = output(a)?;
    let req = PlanRequest {
        model: &model,
        job: &job,
        gpu: &g,
        gpus: a.gpus,
        gpus_per_node: a.gpus_per_node,
        global_batch: a.global_batch_size,
        target: a.target_utilization,
        throughput: tp,
        keep: usize::from(a.top),
        only: if matches!(out, Output::DeepSpeed) { Some(Engine::DeepSpeed) } else { None },
    };
    let result = search(&req)?;
    let Some(best) = result.top.first() else {
        return Err(anyhow::anyhow!(
            "no layout of {} fits {} × {} at {:.0}% (searched {} configurations): add GPUs, shorten --seq-len, or raise --target-utilization",
            model.name,
            a.gpus,
            g.name,
            a.target_utilization * 100.0,
            result.evaluated
        ));
    };
    match out {
        Output::DeepSpeed => emit_json(&render::emit::deepspeed(best, &job)),
        Output::Accelerate => emit(&render::emit::accelerate(best, &job)),
        Output::Torchrun => emit(&format!("{}\n", render::emit::torchrun(best, &job))),
        Output::Json => emit_json(&render::plan::json(&model, &job, &g, &result)),
        Output::Table => emit(&render::plan::text(&model, &job, &g, &result)),
    }
}
