//! `vram estimate`: one GPU, or the most loaded rank of a distributed layout.

use anyhow::Result;
use vram_core::gpu::Gpu;
use vram_core::parallel::{estimate_parallel, Parallel};
use vram_core::{advice, estimate, Job, Mode, Model};

use super::show;
use crate::cli::EstimateArgs;
use crate::errors::DoesNotFit;
use crate::render::{self, EstimateReport};
use crate::resolve;

/// Resolve, estimate, render.
pub fn run(a: &EstimateArgs) -> Result<()> {
    if let Some(file) = &a.measurement {
        return measured(a, file);
    }
    let (model, job) = resolve::resolve(&a.job)?;
    let g = a.gpu.as_deref().map(resolve::gpu).transpose()?;
    if let Some(par) = resolve::resolve_parallel(&a.parallel, job.mode)? {
        resolve::reject_alloc_conf(&a.job, "a distributed estimate (--gpus)")?;
        return parallel(a, &model, &job, &par, g.as_ref());
    }
    let est = estimate(&model, &job)?;
    let mut advice = advice::notes(&model, &job, &est)?;
    if let Some(note) = stored_fp32_note(a, &model, &job) {
        advice.push(note);
    }
    let report = EstimateReport { model: &model, job: &job, estimate: &est, gpu: g.as_ref(), advice };
    show(a.job.json, || render::estimate::json(&report), || render::estimate::text(&report))?;
    fail_if_oom(a, est.total, g.as_ref())
}

/// `--fail-if-oom`: exit code 3 when the total exceeds the GPU.
fn fail_if_oom(a: &EstimateArgs, total: u64, g: Option<&Gpu>) -> Result<()> {
    match g {
        Some(g) if a.fail_if_oom && total > g.memory => Err(DoesNotFit.into()),
        _ => Ok(()),
    }
}

/// A checkpoint published in fp32 is estimated in bf16 for inference unless asked otherwise.
fn stored_fp32_note(a: &EstimateArgs, model: &Model, job: &Job) -> Option<String> {
    if job.mode != Mode::Infer || a.job.precision.is_some() {
        return None;
    }
    let d = model.stored_dtype.filter(|d| d.bytes() == 4)?;
    Some(format!("the checkpoint is stored in {}: estimated in bf16; pass --precision fp32 to load it as published", d.torch_name()))
}

fn parallel(a: &EstimateArgs, model: &Model, job: &Job, par: &Parallel, g: Option<&Gpu>) -> Result<()> {
    let est = estimate_parallel(model, job, par, job.grad_accum)?;
    show(
        a.job.json,
        || render::estimate::parallel_json(model, job, par, &est, g),
        || render::estimate::parallel_text(model, job, par, &est, g),
    )?;
    fail_if_oom(a, est.total, g)
}

/// `--measurement FILE`: a `vram.measure` measurement with the device-level terms added. The
/// measurement fixed the module, its input and precision: job flags that would change them are
/// refused rather than silently ignored.
fn measured(a: &EstimateArgs, file: &str) -> Result<()> {
    let j = &a.job;
    let given: Vec<&str> = [
        (j.batch_size.is_some(), "--batch-size"),
        (j.precision.is_some(), "--precision"),
        (j.optimizer.is_some(), "--optimizer"),
        (j.checkpointing.is_some(), "--checkpointing"),
        (j.peft.given(), "LoRA/QLoRA flags"),
        (j.task.is_some() || j.num_labels.is_some(), "--task/--num-labels"),
        (j.mode != "train", "--mode"),
        (j.seq_len.is_some(), "--seq-len"),
        (j.attention != "sdpa", "--attention"),
        (j.grad_accum.is_some(), "--grad-accum"),
        (j.optimizer_impl.is_some(), "--optimizer-impl"),
        (j.fused_cross_entropy, "--fused-cross-entropy"),
        (j.use_cache.is_some(), "--use-cache"),
        (j.prompt_len.is_some() || j.kv_dtype.is_some(), "--prompt-len/--kv-dtype"),
        (j.padded, "--padded"),
        (j.image_size.is_some() || j.images_per_sample.is_some() || j.freeze_vision_tower, "image flags"),
        (j.source_len.is_some(), "--source-len"),
        (j.approximate_architecture, "--approximate-architecture"),
        (a.parallel.gpus.is_some(), "--gpus"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    if !given.is_empty() {
        return Err(crate::errors::usage(format!(
            "{} cannot change a measurement (its module, input and precision were fixed when it was taken): measure again with vram.measure, or drop them",
            given.join(", ")
        )));
    }
    resolve::reject_alloc_conf(j, "a measurement (it has no allocation sequence)")?;
    let bytes = crate::source::local::read_limited(std::path::Path::new(file), 16 << 20)?;
    let m = vram_core::measurement::parse(&bytes, file)?;
    let (components, total) = m.components(&resolve::overheads(j)?);
    let g = a.gpu.as_deref().map(resolve::gpu).transpose()?;
    let report = render::measured::MeasuredReport { file, m: &m, components: &components, total, gpu: g.as_ref() };
    show(j.json, || render::measured::json(&report), || render::measured::text(&report))?;
    fail_if_oom(a, total, g.as_ref())
}
