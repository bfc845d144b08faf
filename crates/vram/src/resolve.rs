//! Raw flags → validated core types, once. Every bad value becomes a clear error.

use anyhow::Result;
use vram_core::units::parse_size;
use vram_core::{AttentionImpl, Checkpointing, DType, Job, Mode, Model, Optimizer, OptimizerImpl, Overheads, ParseOptions, Precision};

use crate::cli::JobArgs;
pub use crate::errors::UsageError;
use crate::source::load_model;

/// Resolve the model and the job.
pub fn resolve(a: &JobArgs) -> Result<(Model, Job)> {
    let spec = a
        .model
        .as_deref()
        .ok_or_else(|| UsageError("--model is required: a preset (`vram models`), a config.json or a model directory".into()))?;
    let mut model = load_model(spec, ParseOptions { approximate_unknown: a.approximate_architecture })?;
    let mode = match a.mode.to_ascii_lowercase().as_str() {
        "train" | "training" => Mode::Train,
        "infer" | "inference" | "serve" => Mode::Infer,
        other => return Err(UsageError(format!("invalid mode `{other}`: use train or infer")).into()),
    };
    let precision = match &a.precision {
        Some(p) => Precision::parse(p)?,
        None if mode == Mode::Train => Precision::Bf16Mixed,
        None => Precision::Bf16,
    };
    let (optimizer, implied) = Optimizer::parse(&a.optimizer)?;
    let optimizer_impl = match (&a.optimizer_impl, implied) {
        (Some(s), _) => OptimizerImpl::parse(s)?,
        (None, Some(i)) => i,
        (None, None) => OptimizerImpl::Foreach,
    };
    let kv_dtype = match a.kv_dtype.to_ascii_lowercase().as_str() {
        "auto" => None,
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8" => Some(DType::F8),
        other => Some(
            DType::from_torch_name(other)
                .ok_or_else(|| UsageError(format!("invalid KV-cache dtype `{other}`: use auto, fp8, bf16, fp16 or fp32")))?,
        ),
    };
    let mut overheads = Overheads::default();
    if let Some(s) = &a.cuda_context {
        overheads.cuda_context = parse_size(s)?;
    }
    if let Some(s) = &a.cublas_workspace {
        overheads.cublas_workspace = parse_size(s)?;
    }
    if let Some(r) = a.allocator_reserve {
        overheads.allocator_reserve = r;
    }
    let job = Job {
        mode,
        batch: a.batch_size,
        seq: a.seq_len,
        precision,
        optimizer,
        optimizer_impl,
        checkpointing: Checkpointing::parse(&a.checkpointing)?,
        attention: AttentionImpl::parse(&a.attention)?,
        grad_accum: a.grad_accum,
        fused_cross_entropy: a.fused_cross_entropy,
        kv_dtype,
        prompt_len: a.prompt_len,
        use_cache: a.use_cache.as_deref().map(parse_bool).transpose()?,
        model_state_shards: 1,
        overheads,
    };
    job.validate()?;
    // Past the trained context (or its RoPE scaling's reach) the number is still given, with why.
    let context = model.context_warnings(job.seq);
    model.warnings.extend(context);
    Ok((model, job))
}

fn parse_bool(s: &str) -> Result<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        other => Err(UsageError(format!("invalid boolean `{other}`: use true or false")).into()),
    }
}

/// Resolve the distributed layout flags; `None` when the job is a plain single-GPU one.
pub fn resolve_parallel(a: &crate::cli::ParallelArgs) -> Result<Option<vram_core::parallel::Parallel>> {
    use vram_core::parallel::{Engine, FsdpStrategy, Parallel};
    let any = a.gpus.is_some_and(|g| g > 1)
        || a.nodes.is_some_and(|n| n > 1)
        || a.zero.is_some()
        || a.fsdp.is_some()
        || a.offload.is_some()
        || a.tp > 1
        || a.pp > 1
        || a.cp > 1
        || a.ep > 1
        || a.sp
        || a.distributed_optimizer;
    if !any {
        return Ok(None);
    }
    let gpus = a.gpus.unwrap_or(a.nodes.unwrap_or(1) * a.gpus_per_node);
    let mut p = Parallel {
        gpus,
        gpus_per_node: a.gpus_per_node,
        tp: a.tp,
        pp: a.pp,
        cp: a.cp,
        ep: a.ep,
        sp: a.sp,
        virtual_stages: a.virtual_stages,
        distributed_optimizer: a.distributed_optimizer,
        ..Parallel::single()
    };
    if let Some(n) = a.nodes {
        if n * a.gpus_per_node != gpus {
            return Err(UsageError(format!("--nodes {n} × --gpus-per-node {} is not --gpus {gpus}", a.gpus_per_node)).into());
        }
    }
    if let Some(s) = &a.nccl_buffer {
        p.nccl_buffer = parse_size(s)?;
    }
    match (&a.zero, &a.fsdp) {
        (Some(_), Some(_)) => return Err(UsageError("--zero (DeepSpeed) and --fsdp are two engines: pick one".into()).into()),
        (Some(z), None) => {
            p.engine = Engine::DeepSpeed;
            p.zero = *z;
        }
        (None, Some(f)) => {
            p.engine = Engine::Fsdp;
            p.fsdp = FsdpStrategy::parse(f)?;
        }
        (None, None) => {
            p.engine = if a.tp > 1 || a.pp > 1 || a.cp > 1 || a.ep > 1 || a.sp || a.distributed_optimizer {
                Engine::Megatron
            } else {
                Engine::Ddp
            };
        }
    }
    match a.offload.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("none") => {}
        Some("optimizer") | Some("cpu") => p.offload_optimizer = true,
        Some("params") | Some("param") | Some("all") => {
            p.offload_optimizer = true;
            p.offload_params = true;
        }
        Some(other) => return Err(UsageError(format!("invalid --offload `{other}`: use optimizer or params")).into()),
    }
    Ok(Some(p))
}
