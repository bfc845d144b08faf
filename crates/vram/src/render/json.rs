//! JSON output. The schema is documented in the README and stable: fields are only added.

use serde_json::{json, Value};
use vram_core::gpu::Gpu;
use vram_core::{Estimate, Job, Model};

use super::{EstimateReport, FitReport};

fn model(m: &Model) -> Value {
    json!({
        "name": m.name,
        "model_type": m.model_type,
        "parameters": m.parameters(),
        "checkpoint_parameters": m.checkpoint_parameters,
        "hidden_size": m.hidden,
        "num_layers": m.layers,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_dim,
        "vocab_size": m.vocab,
        "tied_embeddings": m.tied_embeddings,
        "moe": m.moe.as_ref().map(|x| json!({"experts": x.experts, "top_k": x.top_k})),
        "stored_dtype": m.stored_dtype.map(|d| d.torch_name()),
        "warnings": m.warnings,
    })
}

fn job(j: &Job) -> Value {
    serde_json::to_value(j).unwrap_or(Value::Null)
}

fn gpu(g: &Gpu) -> Value {
    json!({"name": g.name, "display": g.display, "memory_bytes": g.memory, "memory_source": g.memory_source, "tflops_16bit": g.tflops_16bit})
}

fn estimate_body(e: &Estimate) -> Value {
    json!({
        "components": e.components,
        "peak_allocated_bytes": e.peak_allocated,
        "total_bytes": e.total,
        "peak_phase": e.peak_phase,
        "phases": e.phases.iter().map(|p| json!({"phase": p.phase, "allocated_bytes": p.allocated})).collect::<Vec<_>>(),
        "attention_kernel": e.attention_kernel,
        "notes": e.notes,
    })
}

/// `vram estimate --json`.
pub fn estimate(r: &EstimateReport) -> Value {
    let mut v = estimate_body(r.estimate);
    v["vram_version"] = json!(env!("CARGO_PKG_VERSION"));
    v["model"] = model(r.model);
    v["job"] = job(r.job);
    v["advice"] = json!(r.advice);
    v["gpu"] = match r.gpu {
        Some(g) => {
            let mut gv = gpu(g);
            let util = r.estimate.total as f64 / g.memory as f64;
            gv["utilization"] = json!(util);
            gv["fits"] = json!(r.estimate.total <= g.memory);
            gv
        }
        None => Value::Null,
    };
    v
}

/// `vram fit --json`.
pub fn fit(r: &FitReport) -> Value {
    let f = r.fit;
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "model": model(r.model),
        "job": job(r.job),
        "gpu": gpu(r.gpu),
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
        "alternatives": r.alternatives,
        "throughput": r.fit.rows.iter().zip(&r.throughput).map(|(row, (tps, step))| json!({"batch": row.batch, "tokens_per_second": tps, "step_seconds": step})).collect::<Vec<_>>(),
        "mfu": r.mfu,
    })
}

/// `vram models --json`.
pub fn models(rows: &[(String, String, String, u64)]) -> Value {
    Value::Array(rows.iter().map(|(n, mt, hf, p)| json!({"name": n, "model_type": mt, "hf_id": hf, "parameters": p})).collect())
}

/// `vram gpus --json`.
pub fn gpus(list: &[Gpu]) -> Value {
    Value::Array(list.iter().map(gpu).collect())
}

/// `vram estimate --json` with a distributed layout.
pub fn parallel(
    m: &Model,
    j: &Job,
    par: &vram_core::parallel::Parallel,
    e: &vram_core::parallel::ParallelEstimate,
    g: Option<&Gpu>,
) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "model": model(m),
        "job": job(j),
        "parallel": par,
        "rank": e.rank,
        "components": e.components,
        "peak_allocated_bytes": e.peak_allocated,
        "total_bytes": e.total,
        "cpu_per_node_bytes": e.cpu_per_node,
        "gpu": g.map(|g| {
            let mut v = gpu(g);
            v["utilization"] = json!(e.total as f64 / g.memory as f64);
            v["fits"] = json!(e.total <= g.memory);
            v
        }),
        "notes": e.notes,
    })
}

/// `vram plan --json`.
pub fn plan(m: &Model, j: &Job, g: &Gpu, r: &vram_core::plan::PlanResult) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "model": model(m),
        "job": job(j),
        "gpu": gpu(g),
        "evaluated": r.evaluated,
        "fitting": r.fitting,
        "global_batch": r.global_batch,
        "assumptions": r.throughput,
        "plans": r.top,
    })
}

/// `vram serve --json` (vLLM): one entry per GPU (every TP rank holds the same).
pub fn serve(s: &crate::serve::VllmServe) -> Value {
    let r = &s.report;
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
        "vram_version": env!("CARGO_PKG_VERSION"),
        "engine": "vllm",
        "model": model(&s.model),
        "gpu": gpu(&s.gpu),
        "config": s.config,
        "gpus": gpus,
    })
}

/// `vram serve --json` for a GGUF model under llama.cpp.
pub fn llama_cpp(s: &crate::serve::LlamaCppServe) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "engine": "llama.cpp",
        "file": s.file,
        "gguf": {
            "version": s.gguf.version,
            "architecture": s.gguf.architecture(),
            "file_type": s.gguf.file_type(),
            "tensors": s.gguf.tensors.len(),
            "tensor_bytes": s.gguf.tensor_bytes(),
            "bytes_by_type": s.gguf.bytes_by_type().iter().map(|(t, b)| json!({"type": t, "bytes": b})).collect::<Vec<_>>(),
            "header_bytes": s.gguf.header_bytes,
        },
        "hparams": s.hparams,
        "gpu": gpu(&s.gpu),
        "config": s.config,
        "plan": s.plan,
        "fits": s.plan.gpu_total_bytes <= s.gpu.memory,
        "offload_table": s.offload_table.iter().map(|(n, c)| json!({"n_gpu_layers": n, "max_ctx_size": c})).collect::<Vec<_>>(),
    })
}
