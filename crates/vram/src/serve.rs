//! `vram serve`: resolve vLLM-style flags and run the core's serving accounting.

use anyhow::Result;
use vram_core::gpu::{self, Gpu};
use vram_core::serve::{serve, Quantization, ServeConfig, ServeReport};
use vram_core::units::parse_size;
use vram_core::{DType, Model};

use crate::cli::ServeArgs;
use crate::resolve::UsageError;

/// Everything `vram serve` prints for vLLM.
pub struct VllmServe {
    /// The model.
    pub model: Model,
    /// The GPU.
    pub gpu: Gpu,
    /// The settings as given.
    pub config: ServeConfig,
    /// vLLM's accounting.
    pub report: ServeReport,
}

/// Resolve the flags and compute vLLM's accounting.
pub fn vllm(a: &ServeArgs, model: Model) -> Result<VllmServe> {
    match a.engine.to_ascii_lowercase().as_str() {
        "vllm" => {}
        "sglang" | "tgi" => {
            return Err(UsageError(format!(
                "--engine {}: only vLLM's accounting is modelled so far (use --engine vllm; for .gguf files llama.cpp is used)",
                a.engine
            ))
            .into())
        }
        other => return Err(UsageError(format!("unknown --engine `{other}`: use vllm")).into()),
    }
    let g = gpu::lookup(&a.gpu)?;
    let dtype = match a.dtype.to_ascii_lowercase().as_str() {
        "auto" => None,
        "half" => Some(DType::F16),
        other => Some(
            DType::from_torch_name(other)
                .filter(|d| matches!(d, DType::BF16 | DType::F16 | DType::F32))
                .ok_or_else(|| UsageError(format!("invalid --dtype `{other}`: use auto, bfloat16, float16 or float32")))?,
        ),
    };
    let kv_cache_dtype = match a.kv_cache_dtype.to_ascii_lowercase().as_str() {
        "auto" => None,
        "fp8" | "fp8_e4m3" | "fp8_e5m2" => Some(DType::F8),
        other => return Err(UsageError(format!("invalid --kv-cache-dtype `{other}`: use auto or fp8 (vLLM's values)")).into()),
    };
    let quantization = a.quantization.as_deref().map(Quantization::parse).transpose()?.unwrap_or(Quantization::None);
    let mut config = ServeConfig {
        gpu_is_a100: g.name.starts_with("a100"),
        gpu_memory_utilization: a.gpu_memory_utilization,
        tp: a.tp,
        max_model_len: a.max_model_len,
        dtype,
        quantization,
        kv_cache_dtype,
        block_size: a.block_size,
        max_num_batched_tokens: a.max_num_batched_tokens,
        max_num_seqs: a.max_num_seqs,
        non_torch_memory: a.non_torch_memory.as_deref().map(parse_size).transpose()?,
        enforce_eager: a.enforce_eager,
        ..ServeConfig::new(g.memory)
    };
    if let Some(c) = &a.cuda_context {
        config.cuda_context = parse_size(c)?;
    }
    let report = serve(&model, &config)?;
    Ok(VllmServe { model, gpu: g, config, report })
}
