//! Raw flags → validated core types, once. Every bad value becomes a clear error.

use anyhow::Result;
use vram_core::units::parse_size;
use vram_core::{AttentionImpl, Checkpointing, DType, Job, Mode, Model, Optimizer, OptimizerImpl, Overheads, Precision};

use crate::cli::JobArgs;
use crate::load::load_model;

/// A usage or input error (bad flag, unreadable or malformed file): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Resolve the model and the job.
pub fn resolve(a: &JobArgs) -> Result<(Model, Job)> {
    let model = load_model(&a.model)?;
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
    Ok((model, job))
}

fn parse_bool(s: &str) -> Result<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        other => Err(UsageError(format!("invalid boolean `{other}`: use true or false")).into()),
    }
}
