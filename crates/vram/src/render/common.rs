//! Shared pieces of the renderers: number formats, the model and GPU lines, the verdict, and
//! the JSON objects every command embeds.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::gpu::{Gpu, MemorySource};
use vram_core::parallel::{Engine, FsdpStrategy, Parallel};
use vram_core::units::{gb, gib};
use vram_core::{Estimate, Job, Mode, Model};

pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn job_line(model: &Model, job: &Job) -> String {
    match job.mode {
        Mode::Train => format!(
            "train · batch {} × seq {} · {} · {} ({}) · checkpointing {} · attention {}{}{}",
            job.batch,
            job.seq,
            job.precision.name(),
            job.optimizer.name(),
            format!("{:?}", job.optimizer_impl).to_ascii_lowercase(),
            format!("{:?}", job.checkpointing).to_ascii_lowercase(),
            format!("{:?}", job.attention).to_ascii_lowercase(),
            if job.grad_accum > 1 { format!(" · grad accum {}", job.grad_accum) } else { String::new() },
            if job.fused_cross_entropy { " · fused cross-entropy" } else { "" },
        ),
        Mode::Infer => format!(
            "infer · batch {} × context {}{} · weights {} · KV {}",
            job.batch,
            job.seq,
            job.prompt_len.map_or(String::new(), |p| format!(" (prompt {p})")),
            job.precision.name(),
            job.kv_dtype.map_or_else(|| "auto".to_string(), |d| d.torch_name().to_string()),
        ),
    }
    .replace("train", if model.moe.is_some() { "train (MoE)" } else { "train" })
}

pub fn header(out: &mut String, model: &Model, job: &Job) {
    model_lines(out, model, Some(&job_line(model, job)));
}

/// The model's title line, an optional line under it, then its warnings.
pub fn model_lines(out: &mut String, model: &Model, under: Option<&str>) {
    let _ = writeln!(
        out,
        "{} — {} parameters ({}{})",
        model.name,
        thousands(model.parameters()),
        model.model_type,
        model.stored_dtype.map_or(String::new(), |d| format!(", stored {}", d.torch_name()))
    );
    if let Some(line) = under {
        let _ = writeln!(out, "{line}");
    }
    for w in &model.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
}

pub fn gpu_line(gpu: &Gpu) -> String {
    let src = match gpu.memory_source {
        MemorySource::NvidiaSmi => "nvidia-smi total",
        MemorySource::Nominal => "nominal",
        MemorySource::User => "as given",
    };
    format!("{} ({:.2} GiB = {:.2} GB, {src})", gpu.name, gib(gpu.memory), gb(gpu.memory))
}

/// GiB with two decimals; amounts that would print as 0.00 show as `<0.01`.
pub fn gib_cell(bytes: u64) -> String {
    if bytes > 0 && gib(bytes) < 0.005 {
        "<0.01".into()
    } else {
        format!("{:.2}", gib(bytes))
    }
}

/// Verdict for a utilisation: the 85–95% sweet spot.
pub fn verdict(util: f64) -> &'static str {
    if util > 1.0 {
        "does NOT fit: out of memory"
    } else if util > 0.95 {
        "fits, but above 95%: likely to OOM on longer samples or fragmentation"
    } else if util >= 0.85 {
        "fits, in the 85–95% sweet spot"
    } else if util >= 0.70 {
        "fits, below the 85% sweet spot"
    } else {
        "fits, under 70%: the card is underused (raise the batch)"
    }
}

/// The model as JSON.
pub fn model_json(m: &Model) -> Value {
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

/// The job as JSON.
pub fn job_json(j: &Job) -> Value {
    serde_json::to_value(j).unwrap_or(Value::Null)
}

/// The GPU as JSON.
pub fn gpu_json(g: &Gpu) -> Value {
    json!({"name": g.name, "display": g.display, "memory_bytes": g.memory, "memory_source": g.memory_source, "tflops_16bit": g.tflops_16bit})
}

/// An estimate's components, totals and phases as JSON.
pub fn estimate_body(e: &Estimate) -> Value {
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

/// `n` with its noun in the right number: "1 GPU", "8 GPUs".
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The engine and its options in words a user reads: "DDP", "DeepSpeed ZeRO-3, optimizer
/// offloaded to CPU", "FSDP full shard", "Megatron-LM, sequence parallel, distributed optimizer".
pub fn engine_name(par: &Parallel) -> String {
    let mut parts = vec![match par.engine {
        Engine::Ddp => "DDP".to_string(),
        Engine::DeepSpeed => format!("DeepSpeed ZeRO-{}", par.zero),
        Engine::Fsdp => format!(
            "FSDP {}",
            match par.fsdp {
                FsdpStrategy::FullShard => "full shard",
                FsdpStrategy::ShardGradOp => "shard gradients and optimizer",
                FsdpStrategy::HybridShard => "hybrid shard",
                FsdpStrategy::NoShard => "no shard",
            }
        ),
        Engine::Megatron => "Megatron-LM".to_string(),
    }];
    if par.sp {
        parts.push("sequence parallel".into());
    }
    if par.distributed_optimizer {
        parts.push("distributed optimizer".into());
    }
    if par.virtual_stages > 1 {
        parts.push(format!("{} virtual pipeline stages", par.virtual_stages));
    }
    if par.offload_params {
        parts.push("parameters and optimizer offloaded to CPU".into());
    } else if par.offload_optimizer {
        parts.push("optimizer offloaded to CPU".into());
    }
    parts.join(", ")
}
