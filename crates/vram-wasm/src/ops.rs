//! One function per operation: read the fields, call the core, build the CLI's JSON.

use serde_json::{json, Value};
use vram_core::fit::DEFAULT_TARGET_UTILIZATION;
use vram_core::plan::single_gpu_throughput;
use vram_core::serve::{cuda_total, serve, Quantization, ServeConfig, VllmEngine};
use vram_core::{advice, estimate, fit, DType, Job, Mode, Model};

use crate::fields::Fields;
use crate::report::{self, FitReport};
use crate::resolve::{self, JOB_KEYS, MODEL_KEYS, PEFT_KEYS};
use crate::RequestError;

type R<T> = Result<T, RequestError>;

/// Model FLOPs utilisation `fit` assumes for its throughput column (the CLI's `--mfu` default).
const DEFAULT_MFU: f64 = 0.40;

fn known(extra: &[&'static str]) -> Vec<&'static str> {
    MODEL_KEYS.iter().chain(JOB_KEYS).chain(PEFT_KEYS).chain(extra).copied().collect()
}

/// `vram estimate --model M [job] [--gpu G] --json`.
pub fn estimate_op(mut f: Fields) -> R<Value> {
    let mut model = resolve::model(&mut f)?;
    let precision_given = f.has("precision");
    let job = resolve::job(&mut f, &mut model)?;
    let gpu = f.str("gpu")?.map(|g| resolve::gpu(&g)).transpose()?;
    f.finish("estimate", &known(&["gpu"]))?;
    let est = estimate(&model, &job)?;
    let mut notes = advice::notes(&model, &job, &est)?;
    // A checkpoint published in fp32 is estimated in bf16 for inference unless asked otherwise.
    if job.mode == Mode::Infer && !precision_given {
        if let Some(d) = model.stored_dtype.filter(|d| d.bytes() == 4) {
            notes.push(format!(
                "the checkpoint is stored in {}: estimated in bf16; pass --precision fp32 to load it as published",
                d.torch_name()
            ));
        }
    }
    let mut v = report::estimate_json(&model, &job, &est, gpu.as_ref(), &notes);
    if let Some(g) = &gpu {
        // The CLI prints this verdict in its table; the page shows it beside the bar.
        v["gpu"]["verdict_text"] = json!(vram_core::fit::Verdict::of_utilization(est.total as f64 / g.memory as f64).describe());
    }
    Ok(v)
}

/// `vram fit --model M --gpu G [--target-utilization T] [--global-batch-size N] [job] --json`.
pub fn fit_op(mut f: Fields) -> R<Value> {
    // fit searches the micro-batch (and derives accumulation from a global batch): refuse them.
    let global_batch = f.u64("global_batch_size")?;
    if global_batch == Some(0) || global_batch.is_some_and(|n| n > 1 << 24) {
        return Err(RequestError::new("`global_batch_size` must be between 1 and 16777216 (2^24) sequences"));
    }
    let mut searched = Vec::new();
    if f.has("batch_size") {
        searched.push("`batch_size`");
    }
    if f.has("grad_accum") && global_batch.is_some() {
        searched.push("`grad_accum`");
    }
    if !searched.is_empty() {
        return Err(RequestError::new(format!(
            "{} {} chosen by fit itself (it searches the micro-batch; global_batch_size sets the accumulation); drop {}",
            searched.join(", "),
            if searched.len() == 1 { "is" } else { "are" },
            if searched.len() == 1 { "it" } else { "them" }
        )));
    }
    let target = f.f64("target_utilization")?.unwrap_or(DEFAULT_TARGET_UTILIZATION);
    let mfu = f.f64("mfu")?.unwrap_or(DEFAULT_MFU);
    if !(mfu > 0.0 && mfu <= 1.0) {
        return Err(RequestError::new(format!("invalid mfu {mfu}: a fraction in (0, 1]")));
    }
    let mut model = resolve::model(&mut f)?;
    let job = resolve::job(&mut f, &mut model)?;
    let gpu = resolve::gpu(&f.str("gpu")?.ok_or_else(|| RequestError::new("fit needs `gpu`: a name (h100) or a size (80GB)"))?)?;
    f.finish("fit", &known(&["gpu", "target_utilization", "global_batch_size", "mfu"]))?;
    let fit = fit::fit(&model, &job, gpu.memory, target, global_batch)?;
    let chosen = match fit.chosen.as_ref() {
        Some(c) => Some(estimate(&model, &Job { batch: c.batch, grad_accum: c.grad_accum, ..job.clone() })?),
        None => None,
    };
    // With a global batch the micro-batch must divide it, which the search does not know.
    let search = match global_batch {
        Some(_) if fit.max_batch.is_some() => None,
        _ => Some(advice::search(&model, &job.with_batch(1), fit.budget)?),
    };
    let throughput: Vec<(f64, f64)> = fit
        .rows
        .iter()
        .map(|r| single_gpu_throughput(&model, &Job { batch: r.batch, grad_accum: r.grad_accum, ..job.clone() }, &gpu, mfu))
        .collect();
    Ok(report::fit_json(&FitReport {
        model: &model,
        job: &job,
        gpu: &gpu,
        fit: &fit,
        global_batch,
        chosen: chosen.as_ref(),
        search: search.as_ref(),
        throughput: &throughput,
        mfu,
    }))
}

/// Keys of `serve`, as vLLM's flags.
const SERVE_KEYS: &[&str] = &[
    "model",
    "config",
    "config_name",
    "approximate_architecture",
    "gpu",
    "tensor_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enforce_eager",
    "language_model_only",
    "cuda_context",
    "enable_chunked_prefill",
    "performance_mode",
    "cudagraph_mode",
    "max_cudagraph_capture_size",
    "speculative_config",
    "draft_config",
];

/// `vram serve --model M --gpu G [vLLM flags] --json` (vLLM; GGUF files are for the CLI).
pub fn serve_op(mut f: Fields) -> R<Value> {
    let model = resolve::model(&mut f)?;
    let gpu = resolve::gpu(&f.str("gpu")?.ok_or_else(|| RequestError::new("serve needs `gpu`: a name (h100) or a size (80GB)"))?)?;
    let (max_model_len, max_model_len_auto) = match f.str("max_model_len")?.map(|s| s.to_ascii_lowercase()) {
        None => (None, false),
        Some(s) if s == "auto" || s == "-1" => (None, true),
        Some(s) => (
            Some(
                s.replace('_', "")
                    .parse()
                    .map_err(|_| RequestError::new(format!("max_model_len `{s}` is not a number of tokens or `auto`")))?,
            ),
            false,
        ),
    };
    let mut config = ServeConfig {
        gpu_memory_utilization: f
            .f64("gpu_memory_utilization")?
            .unwrap_or(vram_core::serve::VllmVersion::NEWEST.default_gpu_memory_utilization()),
        tp: f.u64("tensor_parallel_size")?.unwrap_or(1),
        max_model_len,
        max_model_len_auto,
        dtype: vllm_dtype(&f.str("dtype")?.unwrap_or_else(|| "auto".into()))?,
        quantization: quantization(f.str("quantization")?.as_deref(), &model)?,
        kv_cache_dtype: vllm_kv_dtype(&f.str("kv_cache_dtype")?.unwrap_or_else(|| "auto".into()))?,
        block_size: f.u64("block_size")?.unwrap_or(16),
        max_num_batched_tokens: f.u64("max_num_batched_tokens")?,
        max_num_seqs: f.u64("max_num_seqs")?,
        enforce_eager: f.bool("enforce_eager")?.unwrap_or(false),
        language_model_only: f.bool("language_model_only")?.unwrap_or(false),
        chunked_prefill: f.bool("enable_chunked_prefill")?.unwrap_or(true),
        performance_mode: f
            .str("performance_mode")?
            .map(|m| vram_core::serve::PerformanceMode::parse(&m))
            .transpose()?
            .unwrap_or(vram_core::serve::PerformanceMode::Balanced),
        cudagraph_mode: f.str("cudagraph_mode")?.map(|m| vram_core::serve_graphs::CudagraphMode::parse(&m)).transpose()?,
        max_cudagraph_capture_size: f.u64("max_cudagraph_capture_size")?,
        engine: VllmEngine::V1,
        ..ServeConfig::new(cuda_total(&gpu)).with_gpu_traits(&gpu)
    };
    if let Some(c) = f.str("cuda_context")? {
        config.cuda_context = resolve::size("cuda_context", &c)?;
    }
    config.speculative = speculative(&mut f, &model, config.tp)?;
    f.finish("serve", SERVE_KEYS)?;
    let report = serve(&model, &config)?;
    // The ranked alternatives, as `vram serve --json` gives them (serve_advice.rs).
    let advice = vram_core::serve_advice::vllm(&model, &config, &report, vram_core::serve_advice::fp8_compute(&gpu.name));
    let mut v = report::serve_json(&model, &gpu, &config, &report);
    v["advice"] = vram_core::report::serve_advice_json(&advice);
    Ok(v)
}

/// vLLM `--speculative-config` (an object or its text). The page reads no files: an EAGLE head
/// or a draft model that is not a preset comes as `draft_config`, the text of its config.json.
fn speculative(f: &mut Fields, target: &Model, tp: u64) -> R<Option<vram_core::serve_spec::Speculative>> {
    use vram_core::serve_spec::SpecMethod;
    let draft_text = f.str("draft_config")?;
    let Some(v) = f.object("speculative_config")? else {
        return match draft_text {
            Some(_) => Err(RequestError::new("`draft_config` describes the drafter of a `speculative_config`; give that too")),
            None => Ok(None),
        };
    };
    let req = vram_core::serve_spec::parse_request(&v, target, tp)?;
    let name = req.model.clone().unwrap_or_else(|| "draft".into());
    let draft = match (req.method, draft_text, req.model.as_deref()) {
        (SpecMethod::Eagle | SpecMethod::Eagle3, Some(text), _) => {
            Some(vram_core::serve_spec::parse_head_config(text.as_bytes(), &name, "draft_config")?)
        }
        (SpecMethod::DraftModel, Some(text), _) => Some(vram_core::parse_config(text.as_bytes(), &name, "draft_config")?),
        (SpecMethod::DraftModel, None, Some(m)) if vram_core::presets::find(m).is_some() => Some(vram_core::presets::load(m)?),
        (SpecMethod::Eagle | SpecMethod::Eagle3 | SpecMethod::DraftModel, None, m) => {
            return Err(RequestError::new(format!(
                "the page cannot read the drafter{}: give the text of its config.json as `draft_config`",
                m.map(|m| format!(" `{m}`")).unwrap_or_default()
            )))
        }
        (_, Some(_), _) => {
            return Err(RequestError::new(format!("method {} has no drafter to describe: drop `draft_config`", req.method.name())))
        }
        _ => None,
    };
    Ok(Some(vram_core::serve_spec::Speculative {
        method: req.method,
        num_speculative_tokens: req.num_speculative_tokens,
        draft: draft.map(Box::new),
    }))
}

/// vLLM `--dtype`.
fn vllm_dtype(s: &str) -> R<Option<DType>> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "auto" => None,
        "half" => Some(DType::F16),
        other => Some(
            DType::from_torch_name(other)
                .filter(|d| matches!(d, DType::BF16 | DType::F16 | DType::F32))
                .ok_or_else(|| RequestError::new(format!("invalid dtype `{other}`: use auto, bfloat16, float16 or float32")))?,
        ),
    })
}

/// vLLM `--kv-cache-dtype`.
fn vllm_kv_dtype(s: &str) -> R<Option<DType>> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" => Ok(Some(DType::F8)),
        other => Err(RequestError::new(format!("invalid kv_cache_dtype `{other}`: use auto or fp8 (vLLM's values)"))),
    }
}

/// `--quantization`, defaulting to the checkpoint's own; a different method than the
/// checkpoint's is refused, as vLLM refuses it (config/model.py `_verify_quantization`).
fn quantization(flag: Option<&str>, model: &Model) -> R<Quantization> {
    Ok(Quantization::resolve(flag, model)?)
}

/// `vram models --json`.
pub fn presets_op(f: Fields) -> R<Value> {
    f.finish("presets", &[])?;
    Ok(report::presets_json()?)
}

/// `vram gpus --json`.
pub fn gpus_op(f: Fields) -> R<Value> {
    f.finish("gpus", &[])?;
    Ok(report::gpus_json())
}
