//! `vram`: how much GPU memory a training or inference job takes, before you launch it.

mod cli;
mod explain;
mod hub;
mod load;
mod measure;
mod metrics;
mod render;
mod resolve;
mod run;
mod serve;
mod tune;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use vram_core::{advice, estimate, fit, gpu, presets, Mode};

use cli::{Cli, Command};
use render::{EstimateReport, FitReport};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // `vram … | head` closing the pipe is not an error.
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// 2 for bad usage or input (flags, files, names), 1 for anything else.
fn exit_code(e: &anyhow::Error) -> u8 {
    let input = e.chain().any(|c| c.is::<vram_core::Error>() || c.is::<resolve::UsageError>() || c.is::<std::io::Error>());
    if input || e.to_string().contains("is neither a file") || e.to_string().contains("config.json") {
        2
    } else {
        1
    }
}

fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn emit_json(v: &serde_json::Value) -> Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(v)?))
}

/// Print a report as JSON or as text; only the chosen renderer runs.
fn show(json: bool, as_json: impl FnOnce() -> serde_json::Value, as_text: impl FnOnce() -> String) -> Result<()> {
    if json {
        emit_json(&as_json())
    } else {
        emit(&as_text())
    }
}

fn run(cli: Cli) -> Result<u8> {
    let done: Result<()> = match cli.command {
        Command::Run(a) => {
            let estimate = match &a.job.model {
                Some(_) => {
                    let (model, job) = resolve::resolve(&a.job)?;
                    let e = estimate(&model, &job)?;
                    Some((model.name.clone(), e.peak_allocated, e.total, job.overheads.cuda_context))
                }
                None => None,
            };
            let code = run::run(run::RunOptions {
                command: a.command,
                interval: run::parse_interval(&a.interval)?,
                out: a.out,
                timeline: a.timeline,
                svg: a.svg,
                metrics: a.metrics,
                estimate,
            })?;
            return Ok(code.clamp(0, 255) as u8);
        }
        Command::Tune(a) => {
            let (model, job) = resolve::resolve(&a.job)?;
            let g = gpu::lookup(&a.gpu)?;
            let measure = match a.measure.as_str() {
                "nvml" => tune::Measure::Nvml,
                "child-report" => tune::Measure::ChildReport,
                other => return Err(resolve::UsageError(format!("invalid --measure `{other}`: use nvml or child-report")).into()),
            };
            let global = a.global_batch_size;
            let est = |b: u64| -> u64 {
                let accum = global.map_or(job.grad_accum, |gb| (gb / b.max(1)).max(1));
                estimate(&model, &vram_core::Job { batch: b.max(1), grad_accum: accum, ..job.clone() }).map_or(u64::MAX, |e| e.total)
            };
            let report = tune::tune(tune::TuneOptions {
                command: a.command,
                gpu_memory: g.memory,
                target: a.target_utilization,
                margin: a.margin,
                max_trials: a.max_trials,
                timeout: run::parse_duration(&a.timeout, 1.0, 7.0 * 86400.0)?,
                interval: run::parse_interval(&a.interval)?,
                measure,
                global_batch: global,
                estimate: &est,
            })?;
            if a.job.json {
                emit_json(&serde_json::to_value(&report)?)?;
            } else {
                emit(&tune::text(&report, g.memory))?;
            }
            return Ok(if report.batch.is_some() { 0 } else { 1 });
        }
        Command::Watch(a) => {
            let text = watch::watch(a.once, a.json, run::parse_interval(&a.interval)?, a.metrics)?;
            emit(&text)?;
            return Ok(0);
        }
        Command::Estimate(a) => {
            let (model, job) = resolve::resolve(&a.job)?;
            let g = a.gpu.as_deref().map(gpu::lookup).transpose()?;
            if let Some(par) = resolve::resolve_parallel(&a.parallel)? {
                let est = vram_core::parallel::estimate_parallel(&model, &job, &par, job.grad_accum)?;
                return show(
                    a.job.json,
                    || render::json::parallel(&model, &job, &par, &est, g.as_ref()),
                    || render::text::parallel(&model, &job, &par, &est, g.as_ref()),
                )
                .map(|()| 0);
            }
            let est = estimate(&model, &job)?;
            let adv = advice::notes(&model, &job, &est)?;
            let mut advice = adv;
            if job.mode == Mode::Infer {
                if let Some(d) = model.stored_dtype.filter(|d| d.bytes() == 4 && a.job.precision.is_none()) {
                    advice.push(format!(
                        "the checkpoint is stored in {}: estimated in bf16; pass --precision fp32 to load it as published",
                        d.torch_name()
                    ));
                }
            }
            let report = EstimateReport { model: &model, job: &job, estimate: &est, gpu: g.as_ref(), advice };
            show(a.job.json, || render::json::estimate(&report), || render::text::estimate(&report))
        }
        Command::Fit(a) => {
            let (model, job) = resolve::resolve(&a.job)?;
            let g = gpu::lookup(&a.gpu)?;
            let f = fit::fit(&model, &job, g.memory, a.target_utilization, a.global_batch_size)?;
            let chosen = match f.chosen.as_ref() {
                Some(c) => Some(estimate(&model, &vram_core::Job { batch: c.batch, grad_accum: c.grad_accum, ..job.clone() })?),
                None => None,
            };
            let alternatives = if f.max_batch.is_none() { advice::alternatives(&model, &job.with_batch(1), f.budget)? } else { Vec::new() };
            if !(a.mfu > 0.0 && a.mfu <= 1.0) {
                return Err(resolve::UsageError(format!("invalid --mfu {}: a fraction in (0, 1]", a.mfu)).into());
            }
            let throughput = f
                .rows
                .iter()
                .map(|r| {
                    vram_core::plan::single_gpu_throughput(
                        &model,
                        &vram_core::Job { batch: r.batch, grad_accum: r.grad_accum, ..job.clone() },
                        &g,
                        a.mfu,
                    )
                })
                .collect();
            let report = FitReport {
                model: &model,
                job: &job,
                gpu: &g,
                fit: &f,
                global_batch: a.global_batch_size,
                chosen: chosen.as_ref(),
                alternatives,
                throughput,
                mfu: a.mfu,
            };
            show(a.job.json, || render::json::fit(&report), || render::text::fit(&report))
        }
        Command::Plan(a) => {
            let (model, job) = resolve::resolve(&a.job)?;
            let g = gpu::lookup(&a.gpu)?;
            let mut tp = vram_core::plan::Throughput::for_gpu(&g);
            tp.mfu = a.mfu;
            if let Some(bw) = a.inter_node_gbps {
                tp.inter_node_gbps = bw;
            }
            if !(a.mfu > 0.0 && a.mfu <= 1.0) || tp.inter_node_gbps <= 0.0 || !tp.inter_node_gbps.is_finite() {
                return Err(resolve::UsageError("--mfu must be in (0, 1] and --inter-node-gbps positive".into()).into());
            }
            let only = match a.emit.as_deref() {
                None => None,
                Some("deepspeed") => Some(vram_core::parallel::Engine::DeepSpeed),
                Some("accelerate") | Some("torchrun") => None,
                Some(other) => {
                    return Err(resolve::UsageError(format!("invalid --emit `{other}`: use deepspeed, accelerate or torchrun")).into())
                }
            };
            let req = vram_core::plan::PlanRequest {
                model: &model,
                job: &job,
                gpu: &g,
                gpus: a.gpus,
                gpus_per_node: a.gpus_per_node,
                global_batch: a.global_batch_size,
                target: a.target_utilization,
                throughput: tp,
                keep: a.top.clamp(1, 100),
                only,
            };
            let result = vram_core::plan::search(&req)?;
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
            match a.emit.as_deref() {
                Some("deepspeed") => emit_json(&render::emit::deepspeed(best, &job)),
                Some("accelerate") => emit(&render::emit::accelerate(best, &job)),
                Some("torchrun") => emit(&format!("{}\n", render::emit::torchrun(best, &job))),
                _ if a.job.json => emit_json(&render::json::plan(&model, &job, &g, &result)),
                _ => emit(&render::text::plan(&model, &job, &g, &result)),
            }
        }
        Command::Serve(a) => {
            let path = std::path::Path::new(&a.model);
            if a.model.to_ascii_lowercase().ends_with(".gguf") || (path.is_file() && load::is_gguf(path)) {
                let s = serve::llama_cpp(&a, path)?;
                show(a.json, || render::json::llama_cpp(&s), || render::text::llama_cpp(&s))
            } else {
                let s = serve::vllm(&a, load::load_model(&a.model)?)?;
                show(a.json, || render::json::serve(&s), || render::text::serve(&s))
            }
        }
        Command::Explain(a) => explain::run(a),
        Command::Models(a) => {
            let rows = presets::PRESETS
                .iter()
                .map(|p| {
                    let m = presets::load(p.name)?;
                    Ok((p.name.to_string(), m.model_type.clone(), p.hf_id.to_string(), m.parameters()))
                })
                .collect::<Result<Vec<_>>>()?;
            show(a.json, || render::json::models(&rows), || render::text::models(&rows))
        }
        Command::Gpus(a) => {
            let list = gpu::catalogue();
            show(a.json, || render::json::gpus(&list), || render::text::gpus(&list))
        }
    };
    done.map(|()| 0)
}
