//! `vram serve`: resolve vLLM-style, SGLang (`--engine sglang`) or llama.cpp flags, run the core's serving accounting,
//! render. The engine is chosen here; each engine resolves its own flags.

use anyhow::{Context, Result};
use serde_json::Value;
use vram_core::gpu::Gpu;
use vram_core::serve::{cuda_total, serve, Quantization, ServeConfig, ServeLora, ServeReport, VllmEngine, VllmVersion};
use vram_core::sglang::{SglangConfig, SglangReport};
use vram_core::units::GIB;
use vram_core::{DType, Model};

use super::show;
use crate::cli::{MaxModelLen, ServeArgs};
use crate::errors::{usage, UsageError};
use crate::render;
use crate::render::emit::launch::{self, Format, Launch};
use crate::resolve;
use vram_core::serve_advice::ServeAdvice;

/// Pick the engine from the model file, resolve, compute, render.
pub fn run(a: &ServeArgs) -> Result<()> {
    // Read the log first: a bad path fails before any model is fetched.
    let log = match &a.log {
        Some(p) => Some((p.display().to_string(), read_log(p)?)),
        None => None,
    };
    if !a.command.is_empty() {
        let mut p = super::paste::translate(a)?;
        // vram's own output flags stay outside the pasted command.
        (p.args.emit, p.args.emit_alternative, p.args.emit_file, p.args.force) =
            (a.emit.clone(), a.emit_alternative, a.emit_file.clone(), a.force);
        return run_with(&p.args, &p.notes, log.as_ref());
    }
    if a.cache_type_k.is_some() || a.cache_type_v.is_some() {
        if a.kv_cache_dtype != "auto" {
            return Err(usage("give the KV type once: --kv-cache-dtype, or llama.cpp's -ctk/-ctv".to_string()));
        }
        let kv = super::paste::kv_type(&[a.cache_type_k.clone(), a.cache_type_v.clone()])?;
        let a = ServeArgs { kv_cache_dtype: kv.unwrap_or_else(|| "auto".into()), ..a.clone() };
        return run_with(&a, &[], log.as_ref());
    }
    run_with(a, &[], log.as_ref())
}

/// The most a start-up log may be: logs are kilobytes; 64 MiB is surely the wrong file.
const LOG_LIMIT: u64 = 64 << 20;

/// Read and parse a start-up log (a regular file of at most 64 MiB).
fn read_log(path: &std::path::Path) -> Result<vram_core::startup_log::StartupLog> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open --log {}", path.display()))?;
    if !meta.is_file() {
        return Err(usage(format!(
            "--log {} is not a regular file (a FIFO, socket, device or directory): give a saved start-up log",
            path.display()
        )));
    }
    if meta.len() > LOG_LIMIT {
        return Err(usage(format!("--log {} is {} bytes, over the 64 MiB limit: a start-up log is a few KB", path.display(), meta.len())));
    }
    let bytes = crate::source::local::read_limited(path, LOG_LIMIT)?;
    let text = String::from_utf8_lossy(&bytes);
    vram_core::startup_log::parse(&text).with_context(|| format!("--log {}", path.display()))
}

fn run_with(a: &ServeArgs, pasted: &[String], log: Option<&(String, vram_core::startup_log::StartupLog)>) -> Result<()> {
    use render::serve_log as cmp;
    use vram_core::startup_log::StartupLog;
    let model = a.model.as_deref().ok_or_else(|| UsageError("--model is required (or paste a launch command after `--`)".into()))?;
    let path = std::path::Path::new(model);
    // A Hub repository of GGUF files (`org/name-GGUF[:QUANT]`, llama-server's -hf spelling).
    if let Some(spec) = super::serve_quants::spec(a, model)? {
        reject_other_engines_flags(a, Engine::LlamaCpp)?;
        if spec.quant.is_none() && a.emit.is_some() {
            return Err(usage(format!(
                "--emit writes one launch: name the quant ({}:Q4_K_M, …); the quant table says which fits",
                spec.repo
            )));
        }
        let format = emit_format(a, Engine::LlamaCpp)?;
        return match spec.quant.clone() {
            Some(q) => {
                let one = super::serve_quants::one(a, &spec, &q)?;
                let mm = match local_mmproj(a)? {
                    Some(m) => Some(m),
                    None => one.mmproj.clone(),
                };
                let mut s = llama_cpp_gguf(a, one.name.clone(), one.gguf.clone(), mm.as_ref())?;
                s.notes.extend(one.notes.iter().cloned());
                let alt = if s.split.is_none() && s.plan.gpu_total_bytes > s.gpu.memory {
                    super::serve_quants::smaller_that_fits(a, &spec, &one, s.gpu.memory)?
                } else {
                    None
                };
                show_llama_cpp(a, s, pasted, log, alt, format)
            }
            None => super::serve_quants::table(a, &spec, pasted, log.is_some()),
        };
    }
    let gguf = model.to_ascii_lowercase().ends_with(".gguf") || (path.is_file() && crate::source::local::is_gguf(path));
    let engine = if gguf { Engine::LlamaCpp } else { parse_engine(&a.engine)? };
    reject_other_engines_flags(a, engine)?;
    let format = emit_format(a, engine)?;
    let with_log = |est_json: Value, est_text: String, compare: &dyn Fn(&StartupLog) -> Option<cmp::Comparison>, planned: &str| {
        with_log(a, log, est_json, est_text, compare, planned)
    };
    if gguf {
        show_llama_cpp(a, llama_cpp(a, path)?, pasted, log, None, format)
    } else if engine == Engine::Sglang {
        let mut s =
            sglang(a, crate::source::load_model(model, vram_core::ParseOptions { approximate_unknown: a.approximate_architecture })?)?;
        s.report.notes.splice(0..0, pasted.iter().cloned());
        let fp8 = vram_core::serve_advice::fp8_compute(&s.gpu.name);
        let nvswitch = vram_core::serve::nvswitch_gpu(&s.gpu.name);
        let advice = vram_core::serve_advice::sglang_alternatives(&s.model, &s.config, &s.report, fp8, nvswitch);
        if let Some(f) = format {
            let l = launch::sglang(a, model);
            if write_launch(a, f, l, &advice, s.report.fits)? {
                return Ok(());
            }
        }
        let (json, text) = with_advice(render::serve::sglang_json(&s), render::serve::sglang_text(&s), &advice, "SGLang");
        let c = |l: &StartupLog| if let StartupLog::Sglang(l) = l { Some(cmp::sglang(&s, l)) } else { None };
        with_log(json, text, &c, "SGLang (--engine sglang)")
    } else {
        let mut s =
            vllm(a, crate::source::load_model(model, vram_core::ParseOptions { approximate_unknown: a.approximate_architecture })?)?;
        s.report.notes.splice(0..0, pasted.iter().cloned());
        let fp8 = vram_core::serve_advice::fp8_compute(&s.gpu.name);
        let advice = vram_core::serve_advice::vllm(&s.model, &s.config, &s.report, fp8);
        if let Some(f) = format {
            if write_launch(a, f, launch::vllm(a, model), &advice, s.report.fits)? {
                return Ok(());
            }
        }
        let (json, text) = with_advice(render::serve::vllm_json(&s), render::serve::vllm_text(&s), &advice, "vLLM");
        let c = |l: &StartupLog| if let StartupLog::Vllm(l) = l { Some(cmp::vllm(&s, l)) } else { None };
        with_log(json, text, &c, "vLLM")
    }
}

/// Print the estimate; with --log, the comparison follows it (text) or sits beside it (JSON).
fn with_log(
    a: &ServeArgs,
    log: Option<&(String, vram_core::startup_log::StartupLog)>,
    est_json: Value,
    est_text: String,
    compare: &dyn Fn(&vram_core::startup_log::StartupLog) -> Option<render::serve_log::Comparison>,
    planned: &str,
) -> Result<()> {
    use render::serve_log as cmp;
    match log {
        None => show(a.json, || est_json, || est_text),
        Some((file, l)) => {
            let c = compare(l).unwrap_or_else(|| cmp::mismatch(l, planned));
            show(a.json, || cmp::json(est_json.clone(), l, &c), || format!("{est_text}{}", cmp::text(&c, file)))
        }
    }
}

/// Print a llama.cpp plan (one GPU or several), its advice, and the comparison with a log.
fn show_llama_cpp(
    a: &ServeArgs,
    mut s: LlamaCppServe,
    pasted: &[String],
    log: Option<&(String, vram_core::startup_log::StartupLog)>,
    smaller_quant: Option<vram_core::serve_advice::Alternative>,
    format: Option<Format>,
) -> Result<()> {
    use render::serve_log as cmp;
    use vram_core::startup_log::StartupLog;
    s.notes.splice(0..0, pasted.iter().cloned());
    if let Some((p, fit)) = &s.split {
        if let Some(f) = format {
            // The launch as given, over its GPUs: llama-server's own --fit places the layers
            // again at start-up, so the flags are the user's, not vram's fitted ones.
            if a.emit_alternative.is_some() {
                return Err(usage(
                    "--emit-alternative: the ranked alternatives are for one GPU; with several GPUs --emit writes the launch as given",
                ));
            }
            let l = launch::llama_server(a, &s.file);
            if f == Format::K8s && !l.is_hub_model() {
                return Err(usage(format!(
                    "--emit k8s needs a model the pod can download: give the GGUF repository (org/name:QUANT) instead of the local file {}; or use --emit docker or llama-server",
                    s.file
                )));
            }
            let none = ServeAdvice { needed: false, max_concurrency: 0.0, alternatives: Vec::new() };
            if write_launch(a, f, l, &none, p.fits(&memories(&s.gpu, &s.device_gpus)))? {
                return Ok(());
            }
        }
        return split_output(a, &s, p, *fit, log);
    }
    let mut advice = vram_core::serve_advice::llama_cpp(&s.gguf, &s.hparams, &s.config, &s.overrides, s.gpu.memory)?;
    // A smaller quant of the same Hub repository that fits (read from its header).
    if let Some(alt) = smaller_quant.filter(|_| advice.needed) {
        advice.alternatives.push(alt);
        vram_core::serve_advice::rank(&mut advice.alternatives);
    }
    if let Some(f) = format {
        let l = launch::llama_server(a, &s.file);
        if f == Format::K8s && !l.is_hub_model() {
            return Err(usage(format!(
                "--emit k8s needs a model the pod can download: give the GGUF repository (org/name:QUANT) instead of the local file {}; or use --emit docker or llama-server",
                s.file
            )));
        }
        let fits = s.plan.gpu_total_bytes <= s.gpu.memory;
        if write_launch(a, f, l, &advice, fits)? {
            return Ok(());
        }
    }
    let (json, text) = with_advice(render::serve::llama_cpp_json(&s), render::serve::llama_cpp_text(&s), &advice, "llama.cpp");
    let c = |l: &StartupLog| if let StartupLog::LlamaCpp(l) = l { Some(cmp::llama_cpp(&s, l)) } else { None };
    with_log(a, log, json, text, &c, "llama.cpp (a .gguf file)")
}

/// Print a multi-GPU llama.cpp plan, with the per-GPU comparison when a log is given.
fn split_output(
    a: &ServeArgs,
    s: &LlamaCppServe,
    p: &vram_core::llama_split::SplitPlan,
    fit: Option<u64>,
    log: Option<&(String, vram_core::startup_log::StartupLog)>,
) -> Result<()> {
    use render::llama_split as r;
    use vram_core::startup_log::StartupLog;
    let l = match log {
        None => None,
        Some((file, StartupLog::LlamaCpp(l))) => Some((file, l)),
        Some((file, _)) => {
            return Err(
                UsageError(format!("--log {file} is not a llama.cpp start-up log; this .gguf file is planned under llama.cpp")).into()
            )
        }
    };
    show(
        a.json,
        || {
            let mut v = r::json(s, p, fit);
            if let Some((_, l)) = l {
                v["log"] = r::compare_json(p, l);
            }
            v
        },
        || format!("{}{}", r::text(s, p, fit), l.map(|(f, l)| r::compare_text(p, l, f)).unwrap_or_default()),
    )
}

/// The estimate with the ranked alternatives: under the table, and as `advice` in the JSON.
fn with_advice(mut json: Value, text: String, advice: &ServeAdvice, engine: &str) -> (Value, String) {
    json["advice"] = render::serve_advice::json(advice);
    (json, format!("{text}{}", render::serve_advice::text(advice, engine)))
}

/// `--emit`: which format, refused (exit 2) where it cannot describe this engine's launch.
fn emit_format(a: &ServeArgs, engine: Engine) -> Result<Option<Format>> {
    let Some(s) = a.emit.as_deref() else { return Ok(None) };
    let f = Format::parse(s).map_err(usage)?;
    match (engine, f) {
        (Engine::LlamaCpp, Format::Vllm | Format::Sglang) => Err(usage(format!(
            "--emit {s}: a .gguf model is planned under llama.cpp; use --emit llama-server, docker or k8s"
        ))),
        (Engine::LlamaCpp, _) if a.engine.eq_ignore_ascii_case("ollama") => {
            Err(usage("--emit writes llama-server launches; under --engine ollama the launch is Ollama's own (`ollama run`, its OLLAMA_* variables)"))
        }
        (Engine::Vllm | Engine::Sglang, Format::LlamaServer) => {
            Err(usage("--emit llama-server: this launch is planned under vLLM or SGLang; give a .gguf file or a GGUF repository (org/name:QUANT)"))
        }
        (Engine::Sglang, Format::Vllm) => Err(usage("--emit vllm: this launch is planned under SGLang (--engine sglang); use --emit sglang, docker or k8s, or drop --engine sglang for vLLM")),
        (Engine::Vllm, Format::Sglang) => Err(usage("--emit sglang: this launch is planned under vLLM; add --engine sglang to plan and emit an SGLang launch, or use --emit vllm")),
        _ => Ok(Some(f)),
    }
}

/// Write the launch (with `--emit-alternative N` applied) to stdout or `--emit-file`. Returns
/// whether that was all the output (no file: the launch replaces the report on stdout).
fn write_launch(a: &ServeArgs, f: Format, mut l: Launch, advice: &ServeAdvice, fits: bool) -> Result<bool> {
    let fits = match a.emit_alternative {
        None => fits,
        Some(n) => {
            let count = advice.alternatives.len();
            let alt = n.checked_sub(1).and_then(|i| advice.alternatives.get(i)).ok_or_else(|| {
                usage(format!(
                    "--emit-alternative {n}: there are {count} ranked alternatives for this launch (run without --emit to see them)"
                ))
            })?;
            l.apply(alt).map_err(usage)?;
            alt.fits
        }
    };
    if !fits {
        l.warning =
            Some("vram estimates that this launch does NOT fit (see `vram serve` without --emit for the ranked alternatives)".into());
    }
    let text = launch::render(f, &l);
    let Some(path) = &a.emit_file else {
        super::emit(&text)?;
        return Ok(true);
    };
    if path.exists() && !a.force {
        return Err(usage(format!("--emit-file {} exists; pass --force to overwrite it", path.display())));
    }
    std::fs::write(path, text).with_context(|| format!("cannot write --emit-file {}", path.display()))?;
    Ok(false)
}

/// Which engine plans the model.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    Vllm,
    Sglang,
    LlamaCpp,
}

/// Flags of an engine that does not serve this model would be ignored: refuse them by name.
fn reject_other_engines_flags(a: &ServeArgs, engine: Engine) -> Result<()> {
    let given = |present: bool, flag: &'static str| present.then_some(flag);
    let vllm_only = || {
        [
            given(a.pipeline_parallel_size != 1, "--pipeline-parallel-size"),
            given(a.data_parallel_size != 1, "--data-parallel-size"),
            given(a.enable_expert_parallel, "--enable-expert-parallel"),
            given(a.cpu_offload_gb.is_some(), "--cpu-offload-gb"),
            given(a.vllm_version.is_some(), "--vllm-version"),
            given(a.cuda_graph_memory.is_some(), "--cuda-graph-memory"),
            given(a.max_cudagraph_capture_size.is_some(), "--max-cudagraph-capture-size"),
            given(!a.cudagraph_capture_sizes.is_empty(), "--cudagraph-capture-sizes"),
            given(a.cudagraph_mode.is_some(), "--cudagraph-mode"),
            given(a.max_num_seqs.is_some(), "--max-num-seqs"),
            given(a.max_num_batched_tokens.is_some(), "--max-num-batched-tokens"),
            given(a.non_torch_memory.is_some(), "--non-torch-memory"),
            given(a.enforce_eager, "--enforce-eager"),
            given(a.enable_prefix_caching, "--enable-prefix-caching"),
            given(a.no_enable_prefix_caching, "--no-enable-prefix-caching"),
            given(a.no_enable_chunked_prefill, "--no-enable-chunked-prefill"),
            given(a.disable_sliding_window, "--disable-sliding-window"),
            given(a.num_gpu_blocks_override.is_some(), "--num-gpu-blocks-override"),
            given(a.enable_eplb, "--enable-eplb"),
            given(a.eplb_config.is_some(), "--eplb-config"),
            given(a.speculative_config.is_some(), "--speculative-config"),
            given(a.performance_mode.is_some(), "--performance-mode"),
            given(a.flashinfer_sampler.is_some(), "--flashinfer-sampler"),
            given(a.mamba_cache_mode.is_some(), "--mamba-cache-mode"),
            given(a.mamba_ssm_cache_dtype != "auto", "--mamba-ssm-cache-dtype"),
            given(a.gpu_memory_utilization.is_some(), "--gpu-memory-utilization"),
            given(a.block_size != 16, "--block-size"),
            given(a.vllm_engine != "v1", "--vllm-engine"),
            given(a.model_runner.is_some(), "--model-runner"),
            given(a.enable_lora, "--enable-lora"),
            given(!a.lora_modules.is_empty(), "--lora-modules"),
            given(a.kv_cache_memory_bytes.is_some(), "--kv-cache-memory-bytes"),
            given(a.max_loras.is_some(), "--max-loras"),
            given(a.max_lora_rank.is_some(), "--max-lora-rank"),
            given(a.max_cpu_loras.is_some(), "--max-cpu-loras"),
            given(a.limit_mm_per_prompt.is_some(), "--limit-mm-per-prompt"),
            given(a.mm_processor_kwargs.is_some(), "--mm-processor-kwargs"),
            given(a.language_model_only, "--language-model-only"),
        ]
    };
    let sglang_only = || {
        [
            given(a.mem_fraction_static.is_some(), "--mem-fraction-static"),
            given(a.context_length.is_some(), "--context-length"),
            given(a.max_running_requests.is_some(), "--max-running-requests"),
            given(a.chunked_prefill_size.is_some(), "--chunked-prefill-size"),
            given(a.cuda_graph_max_bs.is_some(), "--cuda-graph-max-bs"),
            given(a.disable_cuda_graph, "--disable-cuda-graph"),
            given(a.max_total_tokens.is_some(), "--max-total-tokens"),
            given(a.page_size.is_some(), "--page-size"),
            given(a.max_mamba_cache_size.is_some(), "--max-mamba-cache-size"),
            given(a.mamba_ssm_dtype.is_some(), "--mamba-ssm-dtype"),
            given(a.mamba_full_memory_ratio.is_some(), "--mamba-full-memory-ratio"),
            given(a.mamba_radix_cache_strategy.is_some(), "--mamba-radix-cache-strategy"),
            given(a.disable_radix_cache, "--disable-radix-cache"),
            given(a.disable_overlap_schedule, "--disable-overlap-schedule"),
            given(a.attn_dp_size.is_some(), "--attn-dp-size"),
            given(a.speculative_algorithm.is_some(), "--speculative-algorithm"),
            given(a.speculative_draft_model_path.is_some(), "--speculative-draft-model-path"),
            given(a.speculative_num_steps.is_some(), "--speculative-num-steps"),
            given(a.speculative_eagle_topk.is_some(), "--speculative-eagle-topk"),
            given(a.speculative_num_draft_tokens.is_some(), "--speculative-num-draft-tokens"),
            given(a.enable_dp_attention, "--enable-dp-attention"),
            given(a.enable_dp_lm_head, "--enable-dp-lm-head"),
            given(a.ep_size.is_some(), "--ep-size"),
            given(a.language_only, "--language-only"),
            given(!a.lora_paths.is_empty(), "--lora-paths"),
            given(a.max_loras_per_batch.is_some(), "--max-loras-per-batch"),
            given(a.max_loaded_loras.is_some(), "--max-loaded-loras"),
            given(a.lora_target_modules.is_some(), "--lora-target-modules"),
        ]
    };
    let llama_only = || {
        [
            given(a.n_gpu_layers.is_some(), "--n-gpu-layers/-ngl"),
            given(a.ctx_size.is_some(), "--ctx-size/-c"),
            given(a.fit.is_some(), "--fit"),
            given(a.fit_target.is_some(), "--fit-target"),
            given(a.fit_ctx.is_some(), "--fit-ctx"),
            given(a.n_cpu_moe.is_some(), "--n-cpu-moe/-ncmoe"),
            given(a.cpu_moe, "--cpu-moe/-cmoe"),
            given(!a.override_tensor.is_empty(), "--override-tensor/-ot"),
            given(!a.override_kv.is_empty(), "--override-kv"),
            given(a.ubatch_size != 512, "--ubatch-size"),
            given(a.batch_size.is_some(), "--batch-size/-b"),
            given(a.no_mmap, "--no-mmap"),
            given(a.mlock, "--mlock"),
            given(a.swa_full, "--swa-full"),
            given(a.no_op_offload, "--no-op-offload"),
            given(a.parallel.is_some(), "--parallel/-np"),
            given(a.kv_unified, "--kv-unified"),
            given(a.no_kv_unified, "--no-kv-unified"),
            given(a.mmproj.is_some(), "--mmproj"),
            given(a.no_mmproj, "--no-mmproj"),
            given(a.no_mmproj_offload, "--no-mmproj-offload"),
            given(!a.lora.is_empty(), "--lora"),
            given(a.gpus.is_some(), "--gpus"),
            given(a.tensor_split.is_some(), "--tensor-split/-ts"),
            given(a.split_mode.is_some(), "--split-mode/-sm"),
            given(a.main_gpu.is_some(), "--main-gpu/-mg"),
            given(a.flash_attn.is_some(), "--flash-attn/-fa"),
            given(a.cache_type_k.is_some() || a.cache_type_v.is_some(), "--cache-type-k/-ctk, --cache-type-v/-ctv"),
            given(a.num_ctx.is_some(), "--num-ctx (Ollama)"),
        ]
    };
    // (foreign flags, whose they are, what to use instead), for each foreign engine in turn.
    let groups: Vec<(Vec<&str>, &str, &str)> = match engine {
        Engine::LlamaCpp => {
            let mut v: Vec<&str> = vllm_only().into_iter().flatten().collect();
            v.extend(
                [
                    given(a.tp != 1, "--tensor-parallel-size"),
                    given(a.quantization.is_some(), "--quantization"),
                    given(a.dtype != "auto", "--dtype"),
                    given(!matches!(a.engine.as_str(), "vllm" | "llama.cpp" | "ollama"), "--engine"),
                    given(a.approximate_architecture, "--approximate-architecture"),
                ]
                .into_iter()
                .flatten(),
            );
            let hint = "a .gguf file is planned under llama.cpp: use --n-gpu-layers/-ngl, --ctx-size/-c, --parallel/-np";
            vec![(v, "vLLM", hint), (sglang_only().into_iter().flatten().collect(), "SGLang", hint)]
        }
        Engine::Vllm => vec![
            (
                llama_only().into_iter().flatten().collect(),
                "llama.cpp",
                "this model is planned under vLLM: use --max-model-len and --gpu-memory-utilization",
            ),
            (
                sglang_only().into_iter().flatten().collect(),
                "SGLang",
                "this model is planned under vLLM: add --engine sglang for SGLang's flags, or use --max-model-len and --gpu-memory-utilization",
            ),
        ],
        Engine::Sglang => {
            // --dp-size, --enable-lora and --max-lora-rank are SGLang's too.
            let shared = ["--data-parallel-size", "--enable-lora", "--max-lora-rank"];
            let mut v: Vec<&str> = vllm_only().into_iter().flatten().filter(|f| !shared.contains(f)).collect();
            v.extend(given(a.max_model_len.is_some(), "--max-model-len"));
            vec![
                (llama_only().into_iter().flatten().collect(), "llama.cpp", "this model is planned under SGLang: use --context-length and --mem-fraction-static"),
                (
                    v,
                    "vLLM",
                    "this model is planned under SGLang (--engine sglang): use --context-length, --mem-fraction-static, --max-running-requests, --chunked-prefill-size, --disable-cuda-graph",
                ),
            ]
        }
    };
    for (foreign, whose, hint) in groups {
        if foreign.is_empty() {
            continue;
        }
        let (verb, noun) = if foreign.len() == 1 { ("is a", "flag") } else { ("are", "flags") };
        return Err(UsageError(format!("{} {verb} {whose} {noun}, not read for this model ({hint})", foreign.join(", "))).into());
    }
    Ok(())
}

/// vLLM's image flags (`--limit-mm-per-prompt`, `--mm-processor-kwargs`,
/// `--language-model-only`) are refused by name on a model with no vision tower: vLLM ignores or
/// rejects them there, and a plan that quietly dropped them would read as if they applied.
fn reject_image_flags_on_text_model(a: &ServeArgs, model: &Model) -> Result<()> {
    if model.multimodal.is_some() || model.vision_unloaded.is_some() {
        return Ok(());
    }
    let given: Vec<&str> = [
        (a.limit_mm_per_prompt.is_some(), "--limit-mm-per-prompt"),
        (a.mm_processor_kwargs.is_some(), "--mm-processor-kwargs"),
        (a.language_model_only, "--language-model-only"),
    ]
    .into_iter()
    .filter_map(|(present, flag)| present.then_some(flag))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(UsageError(format!(
        "{} set(s) a vision-language model's image inputs, but `{}` has no vision tower: drop the flag (or give the VLM's config)",
        given.join(", "),
        model.name
    ))
    .into())
}

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
pub fn vllm(a: &ServeArgs, mut model: Model) -> Result<VllmServe> {
    reject_image_flags_on_text_model(a, &model)?;
    // vLLM builds the checkpoint's whole architecture (a Qwen3.5 config's tower included, which
    // a training estimate leaves out) unless --language-model-only; under it the model stays a
    // VLM here and the core serves its language model (`Model::as_served`) with a note saying so.
    if a.language_model_only {
        model.warnings.retain(|w| !w.starts_with(vram_core::model::LM_ONLY_WARNING));
    } else {
        model.load_vision();
    }
    // vLLM sizes a vision-language model by its largest image, not the training image size.
    model.drop_image_assumption();
    let g = resolve::gpu(&a.gpu)?;
    let (dtype, kv_cache_dtype) = (vllm_dtype(&a.dtype)?, vllm_kv_dtype(&a.kv_cache_dtype)?);
    let quantization = quantization(a.quantization.as_deref(), &model)?;
    let vllm_version = a.vllm_version.as_deref().map(VllmVersion::parse).transpose()?.unwrap_or(VllmVersion::NEWEST);
    let kwargs = a.mm_processor_kwargs.as_deref().map(processor_kwargs).transpose()?.unwrap_or_default();
    let lora = serve_lora(a)?;
    check_vllm_lora_modules(a, lora.as_ref())?;
    let mut config = ServeConfig {
        gpu_memory_utilization: a.gpu_memory_utilization.unwrap_or(vllm_version.default_gpu_memory_utilization()),
        tp: a.tp,
        pp: a.pipeline_parallel_size,
        dp: a.data_parallel_size,
        expert_parallel: a.enable_expert_parallel,
        vllm_version,
        cuda_graph_memory: a.cuda_graph_memory.as_deref().map(|s| resolve::size_or_zero("--cuda-graph-memory", s)).transpose()?,
        cudagraph_mode: a.cudagraph_mode.as_deref().map(vram_core::serve_graphs::CudagraphMode::parse).transpose()?,
        cudagraph_capture_sizes: (!a.cudagraph_capture_sizes.is_empty()).then(|| a.cudagraph_capture_sizes.clone()),
        max_cudagraph_capture_size: a.max_cudagraph_capture_size,
        chunked_prefill: !a.no_enable_chunked_prefill,
        disable_sliding_window: a.disable_sliding_window,
        num_gpu_blocks_override: a.num_gpu_blocks_override,
        eplb: eplb(a)?,
        speculative: speculative(a, &model)?,
        flashinfer_sampler: match a.flashinfer_sampler.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None => None,
            Some("on" | "1" | "true") => Some(true),
            Some("off" | "0" | "false") => Some(false),
            Some(other) => return Err(UsageError(format!("invalid --flashinfer-sampler `{other}`: use on or off")).into()),
        },
        performance_mode: a
            .performance_mode
            .as_deref()
            .map(vram_core::serve::PerformanceMode::parse)
            .transpose()?
            .unwrap_or(vram_core::serve::PerformanceMode::Balanced),
        max_model_len: match a.max_model_len {
            Some(MaxModelLen::Tokens(n)) => Some(n),
            _ => None,
        },
        max_model_len_auto: a.max_model_len == Some(MaxModelLen::Auto),
        dtype,
        quantization,
        kv_cache_dtype,
        block_size: a.block_size,
        max_num_batched_tokens: a.max_num_batched_tokens,
        max_num_seqs: a.max_num_seqs,
        non_torch_memory: a.non_torch_memory.as_deref().map(|s| resolve::size_or_zero("--non-torch-memory", s)).transpose()?,
        enforce_eager: a.enforce_eager,
        engine: vllm_engine(&a.vllm_engine)?,
        model_runner: a.model_runner.as_deref().map(vram_core::serve::ModelRunner::parse).transpose()?,
        lora,
        kv_cache_memory_bytes: a.kv_cache_memory_bytes.as_deref().map(kv_cache_memory_bytes).transpose()?,
        cpu_offload_bytes: cpu_offload(a.cpu_offload_gb)?,
        mm_limit_per_prompt: a.limit_mm_per_prompt.as_deref().map(image_limit).transpose()?.flatten(),
        mm_max_pixels: kwargs.max_pixels,
        mm_longest_edge: kwargs.longest_edge,
        language_model_only: a.language_model_only,
        prefix_caching: match (a.enable_prefix_caching, a.no_enable_prefix_caching) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        mamba_cache_mode: a.mamba_cache_mode.as_deref().map(mamba_cache_mode).transpose()?,
        mamba_ssm_cache_dtype: vllm_dtype(&a.mamba_ssm_cache_dtype).map_err(|_| {
            UsageError(format!("invalid --mamba-ssm-cache-dtype `{}`: use auto, float32, bfloat16 or float16", a.mamba_ssm_cache_dtype))
        })?,
        ..ServeConfig::new(cuda_total(&g)).with_gpu_traits(&g)
    };
    if let Some(c) = &a.cuda_context {
        config.cuda_context = resolve::size("--cuda-context", c)?;
    }
    let dp = replicas("--data-parallel-size", a.data_parallel_size)?;
    let mut report = serve(&model, &config)?;
    let moe = model.moe.as_ref().map(|m| m.experts).filter(|&n| n > 0);
    if dp > 1 {
        report.notes.push(format!(
            "--data-parallel-size {dp}: {dp} replicas of this {}-GPU group ({} GPUs in all), each with its own attention weights and KV cache; the figures are per GPU — requests spread over the replicas, so {dp}× the concurrency below{}",
            config.tp * config.pp,
            dp * config.tp * config.pp,
            if moe.is_some() {
                format!(
                    "; the experts are spread over all {} TP × DP GPUs, as vLLM spreads them (fused_moe/config.py flatten_tp_across_dp_and_pcp), and each MoE layer gathers the {dp} replicas' tokens in the profile run (modelled, not checked against a log)",
                    config.tp * dp
                )
            } else {
                String::new()
            }
        ));
    }
    match (a.enable_expert_parallel, moe) {
        (true, None) => report.notes.push("--enable-expert-parallel: the model has no routed experts, so it changes nothing".into()),
        (true, Some(n)) => {
            let ranks = config.tp * dp;
            report.notes.push(format!(
                "--enable-expert-parallel: each of the {ranks} TP × DP GPUs holds whole experts, {} of the {n} on the busiest (fused_moe/expert_map_manager.py determine_expert_map), with vLLM's default allgather_reducescatter dispatch; other --all2all-backend kernels (DeepEP, pplx) add communication buffers vram does not model",
                n.div_ceil(ranks)
            ));
        }
        _ => {}
    }
    Ok(VllmServe { model, gpu: g, config, report })
}

/// vLLM `--speculative-config`: the JSON object vLLM reads (config/speculative.py
/// `SpeculativeConfig`). Without `method`, vLLM picks one: the target's MTP layers when no
/// `model` is named, else by the model's name (eagle3, eagle) or a draft model. Keys that change
/// no memory are accepted; keys that would (a drafter's own quantization, KV dtype or TP, parallel
/// drafting) are refused by name.
fn speculative(a: &ServeArgs, target: &Model) -> Result<Option<vram_core::serve_spec::Speculative>> {
    use vram_core::serve_spec::SpecMethod;
    let Some(text) = a.speculative_config.as_deref() else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        UsageError(format!(
            r#"--speculative-config `{text}`: not a JSON object ({e}); e.g. '{{"method": "ngram", "num_speculative_tokens": 4}}'"#
        ))
    })?;
    let req = vram_core::serve_spec::parse_request(&v, target, a.tp)?;
    let (method, k, model) = (req.method, req.num_speculative_tokens, req.model.as_deref());
    let draft = match (method, model) {
        (SpecMethod::Eagle | SpecMethod::Eagle3, Some(m)) => Some(Box::new(eagle_head(m)?)),
        (SpecMethod::DraftModel, Some(m)) => {
            Some(Box::new(crate::source::load_model(m, vram_core::ParseOptions { approximate_unknown: a.approximate_architecture })?))
        }
        _ => None,
    };
    Ok(Some(vram_core::serve_spec::Speculative { method, num_speculative_tokens: k, draft }))
}

/// An EAGLE head's config.json, from a directory, a file or the Hub.
fn eagle_head(spec: &str) -> Result<Model> {
    let path = std::path::Path::new(spec);
    let (file, bytes) = if path.is_file() {
        (spec.to_string(), crate::source::local::read_limited(path, crate::source::local::MAX_CONFIG)?)
    } else if path.is_dir() || crate::source::hub::is_hub_id(spec) {
        let (file, bytes) = crate::source::small_json(spec, "config.json")?;
        (file.clone(), bytes.ok_or_else(|| UsageError(format!("the EAGLE head {spec} has no config.json ({file})")))?)
    } else {
        return Err(UsageError(format!("the EAGLE head `{spec}`: not a directory, a config.json or a Hub id")).into());
    };
    Ok(vram_core::serve_spec::parse_head_config(&bytes, spec, &file)?)
}

/// vLLM `--limit-mm-per-prompt`: JSON (`{"image": 4, "video": 0}`) or the key=value form
/// (`image=4,video=0`) of vllm/engine/arg_utils.py; the image count, `None` when not given.
fn image_limit(s: &str) -> Result<Option<u64>> {
    let bad = |why: &str| UsageError(format!("--limit-mm-per-prompt `{s}`: {why} (e.g. '{{\"image\": 4}}' or image=4)"));
    let pairs: Vec<(String, serde_json::Value)> = if s.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(s).map_err(|e| bad(&format!("not JSON: {e}")))?;
        v.as_object().ok_or_else(|| bad("not a JSON object"))?.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    } else {
        s.split(',')
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), serde_json::Value::from(v.trim())))
                    .ok_or_else(|| bad("expected modality=count"))
            })
            .collect::<std::result::Result<_, _>>()?
    };
    let mut image = None;
    for (k, v) in pairs {
        let n = match &v {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(t) => t.parse().ok(),
            // vLLM ≥ 0.11 also takes {"image": {"count": N, …}}.
            serde_json::Value::Object(o) => o.get("count").and_then(serde_json::Value::as_u64),
            _ => None,
        }
        .filter(|&n| n <= 1_000_000)
        .ok_or_else(|| bad(&format!("`{k}` needs a count between 0 and 1000000")))?;
        match k.as_str() {
            "image" => image = Some(n),
            "video" | "audio" => {}
            other => return Err(bad(&format!("unknown modality `{other}`")).into()),
        }
    }
    Ok(image)
}

/// What vram reads from vLLM `--mm-processor-kwargs` JSON: `max_pixels` (the Qwen-VL processors'
/// cap) and `size: {"longest_edge": N}` (Idefics3/SmolVLM's split, as vLLM's idefics3 example
/// sets it); other keys that change the images are refused, not ignored.
#[derive(Default)]
struct ProcessorKwargs {
    max_pixels: Option<u64>,
    longest_edge: Option<u64>,
}

fn processor_kwargs(s: &str) -> Result<ProcessorKwargs> {
    let v: serde_json::Value = serde_json::from_str(s).map_err(|e| UsageError(format!("--mm-processor-kwargs `{s}`: not JSON: {e}")))?;
    let obj = v.as_object().ok_or_else(|| UsageError(format!("--mm-processor-kwargs `{s}`: not a JSON object")))?;
    let mut out = ProcessorKwargs::default();
    // min_pixels only bounds small images, and pan-and-scan off is Gemma-3's default.
    for (k, v) in obj {
        match k.as_str() {
            "min_pixels" => {}
            "do_pan_and_scan" if v == &serde_json::Value::Bool(false) => {}
            "max_pixels" => match v.as_u64().filter(|&p| (1..=1u64 << 40).contains(&p)) {
                Some(p) => out.max_pixels = Some(p),
                None => return Err(UsageError(format!("--mm-processor-kwargs: max_pixels {v} is not a pixel count between 1 and 2^40")).into()),
            },
            "size" => {
                let edge = v
                    .as_object()
                    .filter(|o| o.len() == 1)
                    .and_then(|o| o.get("longest_edge"))
                    .and_then(serde_json::Value::as_u64)
                    .filter(|&e| (1..=1 << 20).contains(&e));
                match edge {
                    Some(e) => out.longest_edge = Some(e),
                    None => {
                        return Err(UsageError(format!(
                            "--mm-processor-kwargs size {v}: vram reads only {{\"longest_edge\": N}} (Idefics3/SmolVLM's split), N between 1 and 2^20 pixels"
                        ))
                        .into())
                    }
                }
            }
            other => {
                return Err(UsageError(format!(
                    "--mm-processor-kwargs `{other}`: changes the processed images in a way vram does not model (it reads max_pixels and size.longest_edge; min_pixels and do_pan_and_scan false change nothing it sizes)"
                ))
                .into())
            }
        }
    }
    Ok(out)
}

/// `--cpu-offload-gb` (vLLM reads GiB, vllm/config/cache.py `cpu_offload_gb`) in bytes.
fn cpu_offload(gb: Option<f64>) -> Result<u64> {
    match gb {
        None => Ok(0),
        Some(g) if g.is_finite() && (0.0..=1.0e6).contains(&g) => Ok((g * GIB as f64) as u64),
        Some(g) => Err(UsageError(format!("--cpu-offload-gb {g}: a number of GiB between 0 and 1000000")).into()),
    }
}

/// `--enable-lora` and its slot flags (vLLM's defaults: 1 adapter, rank 16, CPU cache = max_loras);
/// slot flags without `--enable-lora` are refused, as they would be ignored.
fn serve_lora(a: &ServeArgs) -> Result<Option<ServeLora>> {
    if !a.enable_lora {
        if a.max_loras.is_some() || a.max_lora_rank.is_some() || a.max_cpu_loras.is_some() {
            return Err(UsageError("--max-loras/--max-lora-rank/--max-cpu-loras need --enable-lora".into()).into());
        }
        return Ok(None);
    }
    let max_loras = a.max_loras.unwrap_or(1);
    Ok(Some(ServeLora { max_loras, max_lora_rank: a.max_lora_rank.unwrap_or(16), max_cpu_loras: a.max_cpu_loras.unwrap_or(max_loras) }))
}

/// `--quantization`, defaulting to the checkpoint's own. vLLM refuses a method that contradicts
/// the checkpoint's `quantization_config` (config/model.py `_verify_quantization`: "Quantization
/// method specified in the model config (…) does not match the quantization method specified in
/// the `quantization` argument (…)"), so vram does too.
fn quantization(flag: Option<&str>, model: &Model) -> Result<Quantization> {
    Ok(Quantization::resolve(flag, model)?)
}

/// `--engine` for a non-GGUF model.
fn parse_engine(engine: &str) -> Result<Engine> {
    match engine.to_ascii_lowercase().as_str() {
        "vllm" => Ok(Engine::Vllm),
        "sglang" => Ok(Engine::Sglang),
        "tgi" => Err(UsageError("--engine tgi: TGI's accounting is not modelled (use --engine vllm or sglang)".into()).into()),
        "ollama" | "llama.cpp" => Err(UsageError(format!(
            "--engine {engine} plans a .gguf file: give the model's GGUF with --model (for Ollama, `ollama show --modelfile NAME` prints its FROM path, a blob under ~/.ollama/models/blobs)"
        ))
        .into()),
        other => Err(UsageError(format!("unknown --engine `{other}`: use vllm or sglang")).into()),
    }
}

/// Everything `vram serve --engine sglang` prints.
pub struct SglangServe {
    /// The model.
    pub model: Model,
    /// The GPU.
    pub gpu: Gpu,
    /// The settings as resolved.
    pub config: SglangConfig,
    /// SGLang's sizing.
    pub report: SglangReport,
    /// `--dp-size`: replicas of the TP group, each sized as `report` (SGLang 0.5.23
    /// `arg_groups/parallel_hook.py`: `dp_size` counts replicas; attention DP is `attn_dp_size`).
    pub dp: u64,
}

/// Resolve SGLang's flags and compute its start-up sizing.
pub fn sglang(a: &ServeArgs, model: Model) -> Result<SglangServe> {
    if a.language_only && model.multimodal.is_none() && model.vision_unloaded.is_none() {
        return Err(UsageError(format!("--language-only: {} has no vision tower to leave out", model.name)).into());
    }
    let g = resolve::gpu(&a.gpu)?;
    let dtype = match a.dtype.to_ascii_lowercase().as_str() {
        "float" => Some(DType::F32),
        other => vllm_dtype(other)?,
    };
    let (kv_cache_dtype, kv_cache_dtype_name) = match a.kv_cache_dtype.to_ascii_lowercase().as_str() {
        "auto" => (None, None),
        "fp8_e5m2" => (Some(DType::F8), Some("float8_e5m2".to_string())),
        "fp8_e4m3" => (Some(DType::F8), Some("float8_e4m3fn".to_string())),
        "bf16" | "bfloat16" => (Some(DType::BF16), None),
        other => {
            return Err(UsageError(format!("invalid --kv-cache-dtype `{other}` for SGLang: use auto, fp8_e5m2, fp8_e4m3 or bf16")).into())
        }
    };
    let quantization = quantization(a.quantization.as_deref(), &model)?;
    let cuda_context = match &a.cuda_context {
        Some(c) => resolve::size("--cuda-context", c)?,
        None => vram_core::serve::ENGINE_CUDA_CONTEXT,
    };
    // SGLang 0.5.23 (arg_groups/parallel_hook.py handle_deprecated_dp_attention): `--dp-size N
    // --enable-dp-attention` means `--attn-dp-size N` with one replica; replicas beside attention
    // DP are refused.
    let (attn_dp_size, dp) = match (a.attn_dp_size, a.enable_dp_attention) {
        (Some(n), _) => (n, replicas("--dp-size", a.data_parallel_size)?),
        (None, true) => (replicas("--dp-size", a.data_parallel_size)?, 1),
        (None, false) => (1, replicas("--dp-size", a.data_parallel_size)?),
    };
    if attn_dp_size > 1 && dp > 1 {
        return Err(UsageError(format!(
            "--dp-size {dp} with --attn-dp-size {attn_dp_size}: SGLang refuses data-parallel replicas combined with attention data parallelism"
        ))
        .into());
    }
    let mut config = SglangConfig {
        gpu_memory: cuda_total(&g),
        gpu_memory_smi_mib: g.memory >> 20,
        tp: a.tp,
        attn_dp_size,
        dp_lm_head: a.enable_dp_lm_head,
        ep_size: a.ep_size.unwrap_or(1),
        dtype,
        quantization,
        kv_cache_dtype,
        kv_cache_dtype_name,
        context_length: a.context_length,
        mem_fraction_static: a.mem_fraction_static,
        max_running_requests: a.max_running_requests,
        chunked_prefill_size: a.chunked_prefill_size,
        cuda_graph_max_bs: a.cuda_graph_max_bs,
        disable_cuda_graph: a.disable_cuda_graph,
        max_total_tokens: a.max_total_tokens,
        page_size: a.page_size.unwrap_or(1),
        max_mamba_cache_size: a.max_mamba_cache_size,
        mamba_ssm_dtype: match a.mamba_ssm_dtype.as_deref() {
            None => None,
            Some(d) => Some(
                DType::from_torch_name(&d.to_ascii_lowercase())
                    .filter(|d| matches!(d, DType::F32 | DType::BF16 | DType::F16))
                    .ok_or_else(|| UsageError(format!("invalid --mamba-ssm-dtype `{d}`: use float32, bfloat16 or float16")))?,
            ),
        },
        mamba_full_memory_ratio: a.mamba_full_memory_ratio,
        mamba_strategy: match a.mamba_radix_cache_strategy.as_deref() {
            None => None,
            Some(v) => vram_core::sglang::MambaStrategy::parse(v).ok_or_else(|| {
                UsageError(format!("invalid --mamba-radix-cache-strategy `{v}`: use auto, no_buffer, extra_buffer or extra_buffer_lazy"))
            })?,
        },
        disable_radix_cache: a.disable_radix_cache,
        disable_overlap_schedule: a.disable_overlap_schedule,
        language_only: a.language_only,
        lora: None,
        speculative: None,
        cuda_context,
        // NCCL and custom all-reduce buffers at TP ≥ 2: the TP share of vLLM's non-torch default
        // (serve.rs non_torch_default), the same libraries on the same GPUs; a stated assumption.
        distributed: vram_core::serve_advice::sglang_distributed(a.tp, vram_core::serve::nvswitch_gpu(&g.name)),
    };
    config.lora = sglang_lora(a)?;
    config.speculative = sglang_speculative(a, &model)?;
    let report = vram_core::sglang::sglang(&model, &config)?;
    Ok(SglangServe { model, gpu: g, config, report, dp })
}

/// SGLang's `--speculative-algorithm` (arg_groups/speculative_hook.py, 0.5.23): NEXTN is EAGLE
/// with the checkpoint's MTP layers drafting; EAGLE without a draft path (or with the model's own
/// path) drafts with them too where the checkpoint has them, as SGLang sets the path for the
/// DeepSeek/GLM family; EAGLE and EAGLE3 with a path load that head.
fn sglang_speculative(a: &ServeArgs, target: &Model) -> Result<Option<vram_core::sglang::SglangSpec>> {
    use vram_core::serve_spec::SpecMethod;
    let settings = [
        a.speculative_draft_model_path.is_some(),
        a.speculative_num_steps.is_some(),
        a.speculative_eagle_topk.is_some(),
        a.speculative_num_draft_tokens.is_some(),
    ];
    let Some(alg) = a.speculative_algorithm.as_deref() else {
        if settings.iter().any(|&s| s) {
            return Err(UsageError("the --speculative-* settings need --speculative-algorithm (EAGLE, EAGLE3 or NEXTN)".into()).into());
        }
        return Ok(None);
    };
    let own = |p: &str| a.model.as_deref() == Some(p);
    let path = a.speculative_draft_model_path.as_deref().filter(|p| !own(p));
    let (method, draft) = match (alg.to_ascii_uppercase().as_str(), path) {
        ("NEXTN", _) | ("EAGLE", None) => (SpecMethod::Mtp, None),
        ("EAGLE", Some(p)) => (SpecMethod::Eagle, Some(Box::new(eagle_head(p)?))),
        ("EAGLE3", Some(p)) => (SpecMethod::Eagle3, Some(Box::new(eagle_head(p)?))),
        ("EAGLE3", None) => return Err(UsageError("--speculative-algorithm EAGLE3 needs --speculative-draft-model-path (the EAGLE-3 head)".into()).into()),
        (other, _) => {
            return Err(UsageError(format!(
                "--speculative-algorithm {other} changes memory in a way vram does not model; it models SGLang's EAGLE family: EAGLE, EAGLE3 and NEXTN"
            ))
            .into())
        }
    };
    if method == SpecMethod::Mtp && target.mtp_layers == 0 {
        return Err(UsageError(format!(
            "--speculative-algorithm {alg} without a draft head drafts with the checkpoint's MTP layers, and {} has none: pass --speculative-draft-model-path",
            target.name
        ))
        .into());
    }
    Ok(Some(vram_core::sglang::SglangSpec {
        method,
        num_steps: a.speculative_num_steps,
        eagle_topk: a.speculative_eagle_topk,
        num_draft_tokens: a.speculative_num_draft_tokens,
        draft,
    }))
}

/// vLLM's `--enable-eplb` and `--eplb-config` (vllm/config/parallel.py `EPLBConfig`): redundant
/// experts without EPLB, or EPLB without expert parallelism, are refused as vLLM refuses them.
fn eplb(a: &ServeArgs) -> Result<Option<vram_core::serve::Eplb>> {
    let json: Option<serde_json::Value> = match &a.eplb_config {
        Some(t) => Some(serde_json::from_str(t).map_err(|e| UsageError(format!("--eplb-config is not JSON ({e}): {t}")))?),
        None => None,
    };
    let key = |k: &str| -> Result<Option<u64>> {
        match json.as_ref().and_then(|j| j.get(k)) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| UsageError(format!("--eplb-config: {k} must be a whole number, got {v}")).into()),
        }
    };
    let (redundant, window) = (key("num_redundant_experts")?.unwrap_or(0), key("window_size")?.unwrap_or(1000));
    if !a.enable_eplb {
        if redundant > 0 {
            return Err(UsageError(format!(
                "--eplb-config num_redundant_experts {redundant} without --enable-eplb: vLLM refuses it (parallel.py)"
            ))
            .into());
        }
        return Ok(None);
    }
    if !a.enable_expert_parallel {
        return Err(UsageError(
            "--enable-eplb needs --enable-expert-parallel, as vLLM says (enable_expert_parallel must be True to use EPLB)".into(),
        )
        .into());
    }
    if redundant > 1023 || window == 0 || window > 1_000_000 {
        return Err(UsageError(format!(
            "--eplb-config: num_redundant_experts {redundant} (at most 1023) or window_size {window} (1 to 1,000,000) out of range"
        ))
        .into());
    }
    Ok(Some(vram_core::serve::Eplb { redundant_experts: redundant, window_size: window }))
}

/// Data-parallel replicas (vLLM `--data-parallel-size`, SGLang `--dp-size`, spelt as `flag`):
/// 1 to 4096, a bound on absurd input rather than an engine limit.
fn replicas(flag: &str, dp: u64) -> Result<u64> {
    if !(1..=4096).contains(&dp) {
        return Err(UsageError(format!("{flag} {dp}: must be between 1 and 4096")).into());
    }
    Ok(dp)
}

/// A PEFT adapter's adapter_config.json, as the engines read it: a local directory's, or a Hub
/// id's (`org/name[@revision]`, from the Hugging Face cache or the Hub). (the file as named, its
/// JSON; `None` when there is no such file.)
fn adapter_config(flag: &str, path: &str) -> Result<(String, Option<serde_json::Value>)> {
    let (file, bytes) = crate::source::small_json(path, "adapter_config.json").with_context(|| flag.to_string())?;
    let json = match bytes {
        Some(b) => Some(serde_json::from_slice(&b).map_err(|e| UsageError(format!("{flag}: {file} is not valid JSON: {e}")))?),
        None => None,
    };
    Ok((file, json))
}

/// An adapter given as a JSON object (vLLM's `--lora-modules {"name", "path", …}`, SGLang's
/// `--lora-paths {"lora_name", "lora_path", "pinned"}`): (its name, its path, the object).
fn adapter_json(flag: &str, item: &str, name_key: &str, path_key: &str) -> Result<(String, String, serde_json::Value)> {
    let v: serde_json::Value =
        serde_json::from_str(item).map_err(|e| UsageError(format!("{flag} `{item}`: neither NAME=PATH nor a JSON object ({e})")))?;
    match (v[name_key].as_str(), v[path_key].as_str()) {
        (Some(n), Some(p)) => Ok((n.to_string(), p.to_string(), v.clone())),
        _ => Err(UsageError(format!("{flag} `{item}`: the JSON form needs \"{name_key}\" and \"{path_key}\" strings")).into()),
    }
}

/// An adapter's largest rank: `r` and any `rank_pattern` value (peft's per-module ranks; vLLM's
/// lora/peft_helper.py `validate_legal` takes their maximum).
fn adapter_rank(file: &str, v: &serde_json::Value) -> Result<u64> {
    let r = v["r"]
        .as_u64()
        .filter(|r| (1..=1024).contains(r))
        .ok_or_else(|| UsageError(format!("{file}: `r` is not a rank from 1 to 1024")))?;
    let mut rank = r;
    for (module, value) in v["rank_pattern"].as_object().into_iter().flatten() {
        let pr = value
            .as_u64()
            .filter(|r| (1..=1024).contains(r))
            .ok_or_else(|| UsageError(format!("{file}: rank_pattern `{module}` = {value} is not a rank from 1 to 1024")))?;
        rank = rank.max(pr);
    }
    Ok(rank)
}

/// vLLM's `--lora-modules` (`name=path` or a JSON object with `name` and `path`): vLLM loads each
/// at start-up and refuses to start when one cannot load (entrypoints/openai/models/serving.py
/// `init_static_loras`): LoRA off ("LoRA is not enabled. Use --enable-lora"), a rank above
/// `--max-lora-rank`, or a bias (lora/peft_helper.py `validate_legal`). The slots are sized by
/// `--max-lora-rank`, so the adapters change no memory; they are checked here.
fn check_vllm_lora_modules(a: &ServeArgs, lora: Option<&ServeLora>) -> Result<()> {
    if a.lora_modules.is_empty() {
        return Ok(());
    }
    let Some(lora) = lora else {
        return Err(UsageError(
            "--lora-modules needs --enable-lora: vLLM loads them at start-up and fails (\"LoRA is not enabled. Use --enable-lora to enable LoRA.\")".into(),
        )
        .into());
    };
    for item in &a.lora_modules {
        // vLLM's rule (entrypoints/openai/cli_args.py `LoRAParserAction`): name=path when the
        // item has a `=` and no `,`, else JSON.
        let (name, path) = match item.split_once('=') {
            Some((n, p)) if !item.contains(',') => (n.to_string(), p.to_string()),
            _ => {
                let (n, p, _) = adapter_json("--lora-modules", item, "name", "path")?;
                (n, p)
            }
        };
        let flag = format!("--lora-modules {name}");
        let (file, config) = adapter_config(&flag, &path)?;
        let Some(v) = config else {
            return Err(UsageError(format!("{flag}: no {file}: vLLM cannot load the adapter and would not start")).into());
        };
        let rank = adapter_rank(&file, &v)?;
        if rank > lora.max_lora_rank {
            return Err(UsageError(format!(
                "{flag}: LoRA rank {rank} is greater than max_lora_rank {}: vLLM would not start (lora/peft_helper.py); pass --max-lora-rank {rank}, which also sizes every slot",
                lora.max_lora_rank
            ))
            .into());
        }
        if v["bias"].as_str().is_some_and(|b| b != "none") {
            return Err(UsageError(format!(
                "{flag}: the adapter trains biases (bias = {}): vLLM does not support it and would not start",
                v["bias"]
            ))
            .into());
        }
    }
    Ok(())
}

/// SGLang's LoRA pool from `--enable-lora`, `--lora-paths`, `--max-lora-rank`,
/// `--max-loras-per-batch` and `--lora-target-modules`, as SGLang 0.5.23 resolves them
/// (arg_groups/lora_hook.py, lora/lora_manager.py `init_lora_shapes`): the rank and modules
/// given, else the adapters' largest `r` and their modules together, read from each adapter's
/// adapter_config.json ([`adapter_config`]: a local directory's or a Hub id's).
fn sglang_lora(a: &ServeArgs) -> Result<Option<vram_core::sglang::SglangLora>> {
    use vram_core::sglang::{normalize_lora_targets, SglangLora, MAX_LORAS_PER_BATCH};
    if !a.enable_lora && a.lora_paths.is_empty() {
        let stray = [
            (a.max_lora_rank.is_some(), "--max-lora-rank"),
            (a.max_loras_per_batch.is_some(), "--max-loras-per-batch"),
            (a.max_loaded_loras.is_some(), "--max-loaded-loras"),
            (a.lora_target_modules.is_some(), "--lora-target-modules"),
        ];
        if let Some((_, f)) = stray.iter().find(|(given, _)| *given) {
            return Err(UsageError(format!("{f} needs --enable-lora (or --lora-paths): SGLang allocates no LoRA pool without it")).into());
        }
        return Ok(None);
    }
    let per_batch = a.max_loras_per_batch.unwrap_or(MAX_LORAS_PER_BATCH);
    // arg_groups/lora_hook.py `check_lora_server_args`: SGLang asserts both before it starts.
    if let Some(loaded) = a.max_loaded_loras {
        if loaded < per_batch {
            return Err(UsageError(format!(
                "--max-loaded-loras {loaded} is below --max-loras-per-batch {per_batch}: SGLang refuses it at start-up"
            ))
            .into());
        }
        if (a.lora_paths.len() as u64) > loaded {
            return Err(UsageError(format!(
                "{} --lora-paths exceed --max-loaded-loras {loaded}: SGLang refuses it at start-up",
                a.lora_paths.len()
            ))
            .into());
        }
    }
    let given_targets = a.lora_target_modules.as_deref().map(normalize_lora_targets).transpose()?;
    let (mut rank, mut targets, mut pinned): (Option<u64>, Vec<String>, u64) = (None, Vec::new(), 0);
    for spec in &a.lora_paths {
        // SGLang's forms (0.5.23 arg_groups/argparse_actions.py `LoRAPathAction`, lora_hook.py):
        // a JSON object ({…} once stripped), NAME=PATH, or PATH alone.
        let trimmed = spec.trim();
        let path = if trimmed.starts_with('{') && trimmed.ends_with('}') {
            let (_, p, v) = adapter_json("--lora-paths", trimmed, "lora_name", "lora_path")?;
            pinned += u64::from(v["pinned"].as_bool().unwrap_or(false));
            p
        } else {
            trimmed.split_once('=').map_or(trimmed, |(_, p)| p).to_string()
        };
        let path = path.as_str();
        let (file, config) = adapter_config(&format!("--lora-paths {spec}"), path)?;
        // SGLang loads every --lora-paths adapter at start-up (lora_manager.py
        // `init_lora_adapters`, raising on a failure), whatever --max-lora-rank says.
        let Some(v) = config else {
            return Err(UsageError(format!(
                "--lora-paths {spec}: no {file}: SGLang loads each adapter at start-up and would not start (without --lora-paths, --max-lora-rank and --lora-target-modules size the pool)"
            ))
            .into());
        };
        let r = adapter_rank(&file, &v)?;
        let modules: Vec<String> = match &v["target_modules"] {
            serde_json::Value::String(s) => vec![s.clone()],
            serde_json::Value::Array(xs) => xs
                .iter()
                .map(|x| {
                    x.as_str().map(String::from).ok_or_else(|| UsageError(format!("{file}: target_modules entry {x} is not a module name")))
                })
                .collect::<std::result::Result<_, _>>()?,
            _ => return Err(UsageError(format!("{file}: no `target_modules` list; give --lora-target-modules")).into()),
        };
        let modules = normalize_lora_targets(&modules).with_context(|| format!("--lora-paths {spec}"))?;
        if let Some(max) = a.max_lora_rank.filter(|m| r > *m) {
            return Err(UsageError(format!(
                "--lora-paths {spec} has rank {r}, above --max-lora-rank {max}: SGLang cannot load it into the pool"
            ))
            .into());
        }
        if let Some(t) = &given_targets {
            if let Some(extra) = modules.iter().find(|m| !t.contains(m)) {
                return Err(UsageError(format!(
                    "--lora-paths {spec} targets {extra}, which --lora-target-modules leaves out: SGLang refuses it (add it, or use all)"
                ))
                .into());
            }
        }
        rank = Some(rank.map_or(r, |x: u64| x.max(r)));
        for m in modules {
            if !targets.contains(&m) {
                targets.push(m);
            }
        }
    }
    // lora_manager.py `validate_new_adapter`: pinning every slot would starve the rest, so the
    // pinned adapters (all loaded at start-up) must leave one free.
    if pinned >= per_batch {
        return Err(UsageError(format!(
            "{pinned} pinned --lora-paths adapters with --max-loras-per-batch {per_batch}: SGLang pins at most {} (one slot stays free) and would not start",
            per_batch.saturating_sub(1)
        ))
        .into());
    }
    let rank = a.max_lora_rank.or(rank);
    let targets = given_targets.unwrap_or(targets);
    let (Some(rank), false) = (rank, targets.is_empty()) else {
        return Err(UsageError(
            "--enable-lora without --lora-paths needs both --max-lora-rank and --lora-target-modules (SGLang asserts the same)".into(),
        )
        .into());
    };
    Ok(Some(SglangLora { max_loras_per_batch: per_batch, max_lora_rank: rank, target_modules: targets }))
}

/// vLLM `--kv-cache-memory-bytes`: vLLM's human-readable integer first (`20g` = 20·10^9, as
/// vLLM reads it), else a size with a unit (`20GiB`).
fn kv_cache_memory_bytes(s: &str) -> Result<u64> {
    match vram_core::units::parse_vllm_int(s) {
        Some(n) => Ok(n),
        None => Ok(vram_core::units::parse_bytes(s)?),
    }
}

/// vLLM `--dtype`.
fn vllm_dtype(s: &str) -> Result<Option<DType>> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "auto" => None,
        "half" => Some(DType::F16),
        other => Some(
            DType::from_torch_name(other)
                .filter(|d| matches!(d, DType::BF16 | DType::F16 | DType::F32))
                .ok_or_else(|| UsageError(format!("invalid --dtype `{other}`: use auto, bfloat16, float16 or float32")))?,
        ),
    })
}

/// vLLM `--mamba-cache-mode`.
fn mamba_cache_mode(s: &str) -> Result<vram_core::serve_ssm::MambaCacheMode> {
    Ok(vram_core::serve_ssm::MambaCacheMode::parse(&s.to_ascii_lowercase())
        .ok_or_else(|| UsageError(format!("invalid --mamba-cache-mode `{s}`: use none, align or all")))?)
}

/// vLLM `--kv-cache-dtype` (vllm/config/cache.py `CacheDType`): `auto` (the model's dtype), a
/// 2-byte float, or a 1-byte fp8 (`fp8_inc` is Intel Gaudi's fp8). vLLM's packed layouts (per
/// token-head scales, nvfp4, turboquant, the DeepSeek MLA records) are refused by name.
fn vllm_kv_dtype(s: &str) -> Result<Option<DType>> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "float16" | "half" => Ok(Some(DType::F16)),
        "bfloat16" => Ok(Some(DType::BF16)),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "fp8_inc" => Ok(Some(DType::F8)),
        other
            if ["nvfp4", "turboquant_", "octave_", "ultraquant_"].iter().any(|p| other.starts_with(p))
                || other.ends_with("_ds_mla")
                || other.ends_with("_per_token_head") =>
        {
            Err(UsageError(format!(
                "--kv-cache-dtype {other} is one of vLLM's packed KV layouts, which vram does not model yet: plan with fp8 (1 byte an element) or auto, and compare with the \"GPU KV cache size\" your log prints"
            ))
            .into())
        }
        other => Err(UsageError(format!("invalid --kv-cache-dtype `{other}`: use auto, float16, bfloat16, fp8, fp8_e4m3 or fp8_e5m2 (vLLM's values)")).into()),
    }
}

/// `--vllm-engine`.
fn vllm_engine(s: &str) -> Result<VllmEngine> {
    match s.to_ascii_lowercase().as_str() {
        "v1" | "1" => Ok(VllmEngine::V1),
        "v0" | "0" => Ok(VllmEngine::V0),
        other => Err(UsageError(format!("invalid --vllm-engine `{other}`: use v1 or v0")).into()),
    }
}

/// Everything `vram serve` prints for a GGUF model under llama.cpp.
pub struct LlamaCppServe {
    /// File name.
    pub file: String,
    /// The header.
    pub gguf: vram_core::gguf::Gguf,
    /// Its hyper-parameters.
    pub hparams: vram_core::gguf::HParams,
    /// The GPU.
    pub gpu: Gpu,
    /// The settings.
    pub config: vram_core::gguf::LlamaCppConfig,
    /// The tensor overrides (`-ot`, `--n-cpu-moe`, `--cpu-moe`).
    pub overrides: vram_core::gguf::Overrides,
    /// The plan at those settings.
    pub plan: vram_core::gguf::LlamaCppPlan,
    /// For each number of GPU layers, the longest context that fits the GPU.
    pub offload_table: Vec<OffloadRow>,
    /// For MoE files without `-ot`: for each `--n-cpu-moe`, the GPU total and the longest context.
    pub moe_table: Vec<MoeRow>,
    /// How a pasted command was read.
    pub notes: Vec<String>,
    /// With several GPUs (`--gpus`, `--tensor-split`, `--split-mode`, `--main-gpu`): the plan per
    /// GPU and the longest context at which every GPU fits.
    pub split: Option<(vram_core::llama_split::SplitPlan, Option<u64>)>,
    /// llama-server's `--fit` projection at the initial settings and the free memory, bytes.
    pub fit_projection: Option<(u64, u64)>,
    /// Mixed GPUs (`--gpu a,b`): each GPU, CUDA0 first; empty when they are all `gpu`.
    pub device_gpus: Vec<Gpu>,
}

/// Each GPU's memory, CUDA0 first: the mixed list's, else the one GPU's for every GPU (a list of
/// one, which [`vram_core::llama_split::budget_of`] repeats).
pub fn memories(gpu: &Gpu, device_gpus: &[Gpu]) -> Vec<u64> {
    if device_gpus.is_empty() {
        vec![gpu.memory]
    } else {
        device_gpus.iter().map(|g| g.memory).collect()
    }
}

/// One row of the `--n-cpu-moe` table, at the given `--n-gpu-layers` and `--ctx-size`.
#[derive(serde::Serialize)]
pub struct MoeRow {
    /// `--n-cpu-moe`.
    pub n_cpu_moe: u64,
    /// Expert weights kept in RAM.
    pub overridden_to_cpu_bytes: u64,
    /// Everything on the GPU at the given context.
    pub gpu_total_bytes: u64,
    /// The longest `--ctx-size` that fits, or `None`.
    pub max_ctx_size: Option<u64>,
}

/// One row of the offload table, under the given overrides.
#[derive(serde::Serialize)]
pub struct OffloadRow {
    /// `--n-gpu-layers`.
    pub n_gpu_layers: u64,
    /// The longest `--ctx-size` that fits, or `None`.
    pub max_ctx_size: Option<u64>,
    /// Weights the overrides keep in RAM that -ngl would have put on the GPU.
    pub overridden_to_cpu_bytes: u64,
}

/// Plan a llama.cpp launch of a GGUF file.
pub fn llama_cpp(a: &ServeArgs, path: &std::path::Path) -> Result<LlamaCppServe> {
    let gguf = crate::source::gguf::read_gguf(path)?;
    llama_cpp_gguf(a, path.display().to_string(), gguf, local_mmproj(a)?.as_ref())
}

/// A multimodal projector GGUF loaded beside the model: `--mmproj FILE`, or the one llama-server's
/// `-hf` downloads from the model's repository.
#[derive(Clone)]
pub struct MmprojFile {
    /// How the output names it: `--mmproj FILE`, or `-hf`'s `org/name/FILE`.
    pub name: String,
    /// Its header.
    pub gguf: vram_core::gguf::Gguf,
}

/// `--override-kv`s, applied to a model's header as llama.cpp's loader applies them; a note
/// for each key of the model's architecture that the header does not hold (a misspelt key
/// changes nothing, in llama.cpp as here).
pub(super) fn override_kv(a: &ServeArgs, gguf: &mut vram_core::gguf::Gguf) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for v in &a.override_kv {
        let added = gguf.override_kv(&vram_core::gguf::parse_kv_overrides(v)?)?;
        let prefix = gguf.architecture().map(|arch| format!("{arch}."));
        for k in added.iter().filter(|k| prefix.as_ref().is_some_and(|p| k.starts_with(p.as_str()))) {
            notes.push(format!(
                "--override-kv {k}: the file has no such key, so the override changes nothing unless llama.cpp reads that key for this model; check its spelling"
            ));
        }
    }
    Ok(notes)
}

/// `--lora FILE`s, read and checked against the model as llama.cpp checks them.
pub(super) fn lora_adapters(a: &ServeArgs, model: &vram_core::gguf::Gguf) -> Result<Vec<vram_core::llama_lora::LoraAdapter>> {
    a.lora
        .iter()
        .map(|p| {
            let what = || format!("--lora {}", p.display());
            let g = crate::source::gguf::read_gguf(p).with_context(what)?;
            vram_core::llama_lora::adapter(&g, &p.display().to_string(), model).with_context(what)
        })
        .collect()
}

/// `--mmproj FILE`, read.
pub fn local_mmproj(a: &ServeArgs) -> Result<Option<MmprojFile>> {
    let Some(p) = &a.mmproj else { return Ok(None) };
    let gguf = crate::source::gguf::read_gguf(p).with_context(|| format!("--mmproj {}", p.display()))?;
    Ok(Some(MmprojFile { name: format!("--mmproj {}", p.display()), gguf }))
}

/// The llama.cpp settings the flags give for a file with these hyper-parameters on a GPU of
/// `memory` bytes (Ollama's defaults depend on both), with Ollama's resolved launch if any.
pub fn llama_cpp_config(
    a: &ServeArgs,
    hparams: &vram_core::gguf::HParams,
    memory: u64,
    mm: Option<&MmprojFile>,
) -> Result<(vram_core::gguf::LlamaCppConfig, Option<vram_core::ollama::OllamaLaunch>)> {
    use vram_core::gguf::LlamaCppConfig;
    let ollama = ollama_launch(a, hparams, memory)?;
    // llama.cpp's default context: 0, the training context (common/common.h `n_ctx = 0`), per
    // stream when the KV cache is not unified (common/fit.cpp); `--fit` may reduce it afterwards.
    let parallel = ollama.as_ref().map_or(a.parallel.unwrap_or(LLAMA_SERVER_AUTO_SLOTS), |o| o.parallel);
    let unified = ollama.is_some() || (!a.no_kv_unified && (a.parallel.is_none() || a.kv_unified));
    let train = if hparams.context_length > 0 { hparams.context_length } else { vram_core::llama_fit::DEFAULT_MIN_CTX };
    let train_ctx = train.saturating_mul(if unified { 1 } else { parallel }).min(u32::MAX as u64);
    let ctx = match (a.ctx_size, a.max_model_len) {
        _ if ollama.is_some() => ollama.as_ref().map_or(0, |o| o.ctx_size),
        (Some(0), _) => train_ctx,
        (Some(c), _) => c,
        (None, Some(MaxModelLen::Tokens(n))) => n,
        (None, Some(MaxModelLen::Auto)) => {
            return Err(UsageError(
                "--max-model-len auto is vLLM's; for llama.cpp give --ctx-size/-c (0 = the model's trained context)".into(),
            )
            .into())
        }
        (None, None) => train_ctx,
    };
    // --cache-type-k/v: ggml types, bytes per element from their block layouts.
    let kv_name = ollama.as_ref().map_or_else(|| a.kv_cache_dtype.to_ascii_lowercase(), |o| o.kv_cache_type.clone());
    let kv_type = match kv_name.as_str() {
        "auto" | "f16" => 1,
        "f32" => 0,
        "q8_0" => 8,
        "q4_0" => 2,
        other => return Err(UsageError(format!("invalid --kv-cache-dtype `{other}` for llama.cpp: use f16, f32, q8_0 or q4_0")).into()),
    };
    let (_, block, block_bytes) = vram_core::gguf::ggml_type(kv_type).expect("catalogued ggml type");
    let kv_bytes = block_bytes as f64 / block as f64;
    let cuda_overhead = llama_cuda_context(a, Some(hparams))?;
    if a.batch_size == Some(0) {
        return Err(UsageError("--batch-size/-b 0: llama.cpp's logical batch is at least 1 token".into()).into());
    }
    let flash = ollama.as_ref().map_or(flash_attn(a.flash_attn.as_deref())?, |o| o.flash_attn);
    if a.mmproj.is_some() && ollama.is_some() {
        return Err(UsageError("--mmproj is llama-server's: Ollama loads a model's projector itself (not modelled)".into()).into());
    }
    let projector = mmproj(a, mm, flash)?;
    let config = LlamaCppConfig {
        n_gpu_layers: match a.n_gpu_layers {
            Some(crate::cli::GpuLayers::N(n)) => n,
            _ => hparams.layers + 1,
        },
        ctx,
        ubatch: LlamaCppConfig::micro_batch(a.ubatch_size, a.batch_size),
        // llama-server without -np: 4 slots, one unified KV cache (llama.cpp PR #16736); with -np,
        // unified only under --kv-unified. Ollama sizes one shared context.
        parallel,
        unified,
        flash_attn: flash,
        kv_bytes,
        cuda_overhead,
        projector_bytes: projector.weights,
        projector_compute_bytes: projector.device,
        projector_host_bytes: projector.host,
        mmap: !a.no_mmap,
        mlock: a.mlock,
        swa_full: a.swa_full,
        op_offload: !a.no_op_offload,
    };
    Ok((config, ollama))
}

/// What a projector (`--mmproj FILE`, or the one `-hf` picks) puts on the GPU and in RAM: its
/// weights (on the GPU unless `--no-mmproj-offload`) and the vision encoder's warm-up compute
/// buffer (`vram_core::clip_buffer`), with the line the report gives about it.
struct Projector {
    weights: u64,
    device: u64,
    host: u64,
    note: Option<String>,
}

fn mmproj(a: &ServeArgs, mm: Option<&MmprojFile>, flash: bool) -> Result<Projector> {
    let Some(MmprojFile { name, gguf: g }) = mm else { return Ok(Projector { weights: 0, device: 0, host: 0, note: None }) };
    let clip = vram_core::clip_buffer::clip_compute(g, flash, name)?;
    let offload = !a.no_mmproj_offload;
    let (device, host, note) = match &clip {
        Some(c) => {
            let (device, host) = if offload { (c.device_bytes, c.host_inputs_bytes) } else { (0, c.device_bytes) };
            let note = format!(
                "{name}: the vision encoder ({}) reserves {:.2} MiB of compute buffer {} at load for its warm-up image of {} px ({} patches, flash attention {}){}, plus {:.2} MiB of graph inputs in RAM (clip.cpp alloc_compute_meta, the lines llama-server logs); a larger image at run time can grow it{}",
                c.projector,
                c.device_bytes as f64 / (1u64 << 20) as f64,
                if offload { "on the GPU" } else { "in RAM (--no-mmproj-offload)" },
                c.warmup_side,
                c.patches,
                if c.flash_attn { "on" } else { "off: the attention scores dominate" },
                if c.approximate {
                    " — an approximation for this projector under flash attention (within 1% of the one log held)"
                } else if !vram_core::clip_buffer::LOG_CHECKED.contains(&c.projector.as_str()) {
                    " — from llama.cpp's graph builders, not yet checked against a load log for this projector type"
                } else {
                    ""
                },
                if offload { c.host_inputs_bytes as f64 / (1u64 << 20) as f64 } else { 0.0 },
                if c.projector.contains("merger") || c.projector == "pixtral" { " (a dynamic-resolution encoder: its buffer scales with the image's patches)" } else { "" }
            );
            (device, host, Some(note))
        }
        None => (
            0,
            0,
            Some(format!(
                "{name}: the vision encoder's compute buffer is not modelled for projector type {} (modelled: {}); the report counts its weights only",
                match g.metadata.get("clip.projector_type") {
                    Some(vram_core::gguf::MetaValue::Str(t)) => t.clone(),
                    _ => "(none named)".into(),
                },
                vram_core::clip_buffer::MODELLED.join(", ")
            )),
        ),
    };
    Ok(Projector { weights: if offload { g.tensor_bytes() } else { 0 }, device, host, note })
}

/// llama.cpp's `--fit` settings from the flags: `None` under `--fit off`.
fn fit_settings(a: &ServeArgs, overrides: &vram_core::gguf::Overrides) -> Result<Option<vram_core::llama_fit::FitSettings>> {
    use vram_core::llama_fit::{FitSettings, DEFAULT_MARGIN, DEFAULT_MIN_CTX};
    match a.fit.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("on") => {}
        Some("off") => return Ok(None),
        Some(other) => return Err(UsageError(format!("invalid --fit `{other}`: use on or off (llama.cpp's spelling)")).into()),
    }
    // llama.cpp reads MiB, one value for every GPU or a list split on `,` and `/`
    // (common/arg.cpp `--fit-target`); a size with a unit is taken as written.
    let margins = match &a.fit_target {
        None => vec![DEFAULT_MARGIN],
        Some(t) => t
            .split([',', '/'])
            .filter(|v| !v.trim().is_empty())
            .map(|v| match v.trim().parse::<u64>() {
                Ok(mib) => mib.checked_mul(1 << 20).ok_or_else(|| UsageError(format!("--fit-target {t}: too large")).into()),
                Err(_) => resolve::size("--fit-target", v.trim()),
            })
            .collect::<Result<Vec<u64>>>()?,
    };
    if margins.is_empty() || margins.len() as u64 > vram_core::llama_split::MAX_GPUS {
        return Err(UsageError(format!(
            "--fit-target `{}`: give MiB, one value or one per GPU (at most 16)",
            a.fit_target.as_deref().unwrap_or("")
        ))
        .into());
    }
    let ctx_given = a.ctx_size.is_some_and(|c| c > 0) || a.max_model_len.is_some();
    Ok(Some(FitSettings {
        margins,
        min_ctx: if a.ctx_size == Some(0) { None } else { Some(a.fit_ctx.unwrap_or(DEFAULT_MIN_CTX).max(1)) },
        ctx_auto: !ctx_given,
        layers_auto: matches!(a.n_gpu_layers, None | Some(crate::cli::GpuLayers::Auto))
            && overrides.tensor.is_empty()
            && overrides.cpu_moe == vram_core::gguf::CpuMoe::None
            && a.tensor_split.is_none(),
    }))
}

/// The settings after llama-server's `--fit`, what the report says of it, and its projection at
/// the initial settings against the free memory (bytes), when it ran.
pub struct FitApplied {
    /// The settings llama.cpp loads with.
    pub config: vram_core::gguf::LlamaCppConfig,
    /// The tensor overrides it loads with.
    pub overrides: vram_core::gguf::Overrides,
    /// The GPUs and split it loads with (several GPUs).
    pub multi: Option<vram_core::llama_split::MultiGpu>,
    /// The line the report gives.
    pub note: Option<String>,
    /// (projected use at the initial settings, free device memory), bytes, all GPUs together.
    pub projection: Option<(u64, u64)>,
}

/// llama-server's `--fit` applied to the settings on one GPU or the GPUs of `multi`: the
/// context and, where `layers`, the placement llama.cpp would load with.
#[allow(clippy::too_many_arguments)]
pub fn apply_fit(
    a: &ServeArgs,
    gguf: &vram_core::gguf::Gguf,
    hp: &vram_core::gguf::HParams,
    config: vram_core::gguf::LlamaCppConfig,
    overrides: vram_core::gguf::Overrides,
    gpu: &vram_core::gpu::Gpu,
    multi: Option<&vram_core::llama_split::MultiGpu>,
    layers: bool,
) -> Result<FitApplied> {
    use vram_core::llama_fit::FitAction;
    let Some(mut s) = fit_settings(a, &overrides)? else {
        return Ok(FitApplied { config, overrides, multi: multi.cloned(), note: None, projection: None });
    };
    s.layers_auto &= layers;
    let free = vram_core::gpu::cuda_total(gpu).0.saturating_sub(llama_context_at_load(a, config.cuda_overhead));
    // Mixed GPUs carry each one's free memory; identical ones share the one figure.
    let free = match multi {
        Some(m) if !m.free_memory.is_empty() => m.free_memory.clone(),
        _ => vec![free],
    };
    let f = vram_core::llama_fit::fit(gguf, hp, &config, &overrides, multi, &free, &s)?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let nd = f.layers.as_ref().map_or(multi.map_or(1, |m| m.gpus), |l| l.len() as u64);
    let margin = match s.margins.as_slice() {
        [one] if nd > 1 => format!("{:.0} MiB on each GPU", *one as f64 / (1u64 << 20) as f64),
        [one] => format!("{:.0} MiB", *one as f64 / (1u64 << 20) as f64),
        _ => format!("the --fit-target margins ({})", a.fit_target.as_deref().unwrap_or("")),
    };
    let head = format!(
        "llama-server's --fit (common/fit.cpp, on by default): model, context and compute buffers project to {:.2} GiB against {:.2} GiB free ({}the CUDA total less the CUDA context)",
        gib(f.projected_initial),
        gib(f.free),
        if nd > 1 { format!("{nd} GPUs together; each ") } else { String::new() }
    );
    // A file that names no training context: llama.cpp's own n_ctx_train would be 0; vram plans
    // --fit-ctx's default and says so rather than a number that looks read.
    let head = if s.ctx_auto && hp.context_length == 0 {
        format!("{head} (the file names no training context: {} tokens assumed, a guess)", vram_core::llama_fit::DEFAULT_MIN_CTX)
    } else {
        head
    };
    let note = match &f.action {
        FitAction::NoChange if s.ctx_auto => Some(format!(
            "{head} at the training context of {} tokens, leaving at least {margin}: no change",
            f.config.ctx
        )),
        FitAction::NoChange => None,
        FitAction::ContextReduced { from } => Some(format!(
            "{head} at the training context of {from} tokens; the context is reduced to {} to leave {margin} free (interpolated between it and --fit-ctx, rounded down to 256 as llama.cpp does{}){}; -c N or --fit off to choose",
            f.config.ctx,
            if nd > 1 { ", after setting aside (GPUs + 1) × half a layer for whole-layer waste" } else { "" },
            if f.layers.is_some() { format!("; then it places the layers again: {}", fit_placement(hp, &f)) } else { String::new() }
        )),
        FitAction::LayersPlaced => Some(format!(
            "{head}; {} and still {margin} is not left free, so {}: {}",
            if s.ctx_auto { format!("the context goes to --fit-ctx, {}", f.config.ctx) } else { format!("the context {} is yours", f.config.ctx) },
            if nd > 1 { "it places the layers again, the last GPU first" } else { "weights move to RAM" },
            fit_placement(hp, &f)
        )),
        FitAction::CannotFit { reason } => Some(format!(
            "{head}; it cannot leave {margin} free{}: {reason}",
            if s.ctx_auto { format!(" even at --fit-ctx ({} tokens)", f.config.ctx) } else { String::new() }
        )),
    };
    // llama.cpp's fit runs before the adapters load (common/common.cpp `common_init_from_params`):
    // they are not in its projection, and can take the margin it left.
    let adapters = f.overrides.lora.iter().fold(0u64, |t, l| t.saturating_add(l.bytes()));
    let note = match note {
        _ if adapters == 0 => note,
        Some(n) => Some(format!("{n}; the fit does not count the --lora adapters ({:.2} GiB, loaded after it)", gib(adapters))),
        None => Some(format!(
            "llama-server's --fit (common/fit.cpp, on by default) does not count the --lora adapters ({:.2} GiB, loaded after it)",
            gib(adapters)
        )),
    };
    Ok(FitApplied { config: f.config, overrides: f.overrides, multi: f.multi, note, projection: Some((f.projected_initial, f.free)) })
}

/// Where llama-server's `--fit` put the layers, in words (empty when it did not place them).
fn fit_placement(hp: &vram_core::gguf::HParams, f: &vram_core::llama_fit::Fitted) -> String {
    use vram_core::llama_fit::Fraction;
    let Some(layers) = &f.layers else { return String::new() };
    let ngl = f.config.n_gpu_layers;
    // llama.cpp counts the output as layer n_layer and offloads the last ngl of the n_layer + 1
    // (load_tensors, vram_core::gguf::first_gpu_layer), as fit.cpp's counts do.
    let (on_gpu, output) = (hp.layers - vram_core::gguf::first_gpu_layer(hp.layers, ngl), ngl >= 1);
    let parts = f.partial_layers(hp.layers);
    let mut out = if layers.len() > 1 {
        format!(
            "layers per GPU {} (as -ngl {ngl} --tensor-split {})",
            layers.iter().enumerate().map(|(i, d)| format!("CUDA{i} {}", d.n_layer)).collect::<Vec<_>>().join(", "),
            layers.iter().map(|d| d.n_layer.to_string()).collect::<Vec<_>>().join(",")
        )
    } else if ngl == 0 {
        "no layer on the GPU (as -ngl 0)".to_string()
    } else {
        format!("{on_gpu} of {} layers{} on the GPU (as -ngl {ngl})", hp.layers, if output { " and the output" } else { "" })
    };
    match (hp.layers - on_gpu, output) {
        (0, true) => {}
        (0, false) => out.push_str(", the output layer in RAM"),
        (n, _) if n == hp.layers => out.push_str(&format!(", all {n} layers and the output in RAM")),
        (1, o) => out.push_str(&format!(", the first layer{} in RAM", if o { "" } else { " and the output" })),
        (n, o) => out.push_str(&format!(", the first {n} layers{} in RAM", if o { "" } else { " and the output" })),
    }
    if parts > 0 {
        out.push_str(&format!(
            ", and {parts} of the GPU layers with their experts in RAM (fit.cpp's per-layer -ot patterns, the back layers first{})",
            layers
                .iter()
                .enumerate()
                .find(|(_, d)| d.n_part > 0 && d.overflow != Fraction::Moe)
                .map(|(i, d)| format!(
                    "; one layer on CUDA{i} keeps {} and sends the rest to {}",
                    match d.overflow {
                        Fraction::Attn => "attention only",
                        Fraction::Up => "attention and the up projections",
                        Fraction::Gate => "attention, up and gate",
                        Fraction::Moe => "all but its experts",
                    },
                    if d.overflow_to_next { format!("CUDA{}", i + 1) } else { "RAM".into() }
                ))
                .unwrap_or_default()
        ));
    }
    out
}

/// llama-server's slots when `-np` is not given ("setting n_parallel = 4 and kv_unified = true",
/// llama.cpp PR #16736, b6800 on).
const LLAMA_SERVER_AUTO_SLOTS: u64 = 4;

/// Plan a llama.cpp launch of a parsed GGUF header (`file` names it in the output).
pub fn llama_cpp_gguf(a: &ServeArgs, file: String, mut gguf: vram_core::gguf::Gguf, mm: Option<&MmprojFile>) -> Result<LlamaCppServe> {
    use vram_core::gguf::llama_cpp_with;
    let kv_notes = override_kv(a, &mut gguf)?;
    let hparams = gguf.hparams(&file)?;
    let device_gpus = resolve::gpu_list(&a.gpu)?;
    let g = device_gpus[0].clone();
    let device_gpus = if device_gpus.len() > 1 { device_gpus } else { Vec::new() };
    let (config, ollama) = llama_cpp_config(a, &hparams, g.memory, mm)?;
    let mut overrides = overrides(a)?;
    overrides.lora = lora_adapters(a, &gguf)?;
    let multi = multi_gpu(a)?;
    let FitApplied { config, overrides, multi, note: fit_note, projection: fit_projection } = if ollama.is_some() {
        FitApplied { config, overrides, multi, note: None, projection: None }
    } else {
        apply_fit(a, &gguf, &hparams, config, overrides, &g, multi.as_ref(), true)?
    };
    let mut plan = llama_cpp_with(&gguf, &hparams, &config, &overrides)?;
    // Ollama shares one KV cache among its parallel requests but holds each to num_ctx tokens.
    if let Some(o) = &ollama {
        plan.ctx_per_sequence = o.num_ctx;
    }
    let mut notes = ollama.map(|o| o.notes).unwrap_or_default();
    notes.extend(kv_notes);
    notes.extend(fit_note);
    notes.extend(mmproj(a, mm, config.flash_attn)?.note);
    let (split, offload_table, moe_table, device_gpus) = match multi {
        Some(m) => {
            let split = vram_core::llama_split::plan(&gguf, &hparams, &config, &overrides, &m)?;
            let limit = if hparams.context_length > 0 { hparams.context_length } else { 1 << 20 };
            let fit = vram_core::llama_split::max_ctx(&gguf, &hparams, &config, &overrides, &m, &memories(&g, &device_gpus), limit)?;
            (Some((split, fit)), Vec::new(), Vec::new(), device_gpus)
        }
        None => {
            let offload_table = offload_table(&gguf, &hparams, &config, &overrides, g.memory)?;
            let moe_table =
                if overrides.tensor.is_empty() { moe_table(&gguf, &hparams, &config, g.memory, &overrides)? } else { Vec::new() };
            (None, offload_table, moe_table, Vec::new())
        }
    };
    Ok(LlamaCppServe {
        file,
        gguf,
        hparams,
        gpu: g,
        config,
        overrides,
        plan,
        offload_table,
        moe_table,
        notes,
        split,
        fit_projection,
        device_gpus,
    })
}

/// The CUDA context and libraries llama.cpp's process holds on each GPU: `--cuda-context`, else
/// vram's engine default.
/// The memory a GPU has in use when llama.cpp measures its free memory before loading:
/// `--cuda-context` (`given`) when the user set it, else the measured CUDA context alone.
fn llama_context_at_load(a: &ServeArgs, given: u64) -> u64 {
    if a.cuda_context.is_some() {
        given
    } else {
        vram_core::gguf::LLAMA_CUDA_CONTEXT_AT_LOAD
    }
}

/// `--cuda-context`, else llama.cpp's measured overhead for the model (`None`: not yet known).
fn llama_cuda_context(a: &ServeArgs, hp: Option<&vram_core::gguf::HParams>) -> Result<u64> {
    match &a.cuda_context {
        Some(c) => resolve::size("--cuda-context", c),
        None => Ok(hp.map_or(vram_core::gguf::LLAMA_CUDA_OVERHEAD, vram_core::gguf::llama_cuda_overhead)),
    }
}

/// `--flash-attn`: on, off or auto (llama.cpp's default, on where the GPU supports it: planned on).
fn flash_attn(v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("auto") | Some("on") | Some("1") | Some("true") => Ok(true),
        Some("off") | Some("0") | Some("false") => Ok(false),
        Some(other) => Err(UsageError(format!("--flash-attn `{other}`: use on, off or auto (llama.cpp's values)")).into()),
    }
}

/// Under `--engine ollama`, Ollama's launch (context × parallel, flash attention, KV type);
/// `None` for llama.cpp. `--num-ctx` is Ollama's and `--ctx-size` llama.cpp's: each is refused
/// under the other engine.
fn ollama_launch(a: &ServeArgs, hp: &vram_core::gguf::HParams, vram: u64) -> Result<Option<vram_core::ollama::OllamaLaunch>> {
    use vram_core::ollama::{parse_bool, resolve, OllamaInput};
    if a.engine != "ollama" {
        if a.num_ctx.is_some() {
            return Err(UsageError("--num-ctx is Ollama's num_ctx: add --engine ollama, or give llama.cpp's --ctx-size".into()).into());
        }
        return Ok(None);
    }
    if hp.recurrent.is_some() {
        return Err(UsageError(format!(
            "`{}` is a state-space or hybrid model: Ollama runs such models in its own engine, whose recurrent cache vram does not model; drop --engine ollama to plan the same GGUF under llama.cpp",
            hp.architecture
        ))
        .into());
    }
    if a.ctx_size.is_some() || a.max_model_len.is_some() {
        return Err(UsageError(
            "under --engine ollama the context is --num-ctx (Ollama's num_ctx, per request); --ctx-size/--max-model-len are not Ollama's"
                .into(),
        )
        .into());
    }
    // Ollama takes its batch, mmap and mlock from the model's options (num_batch, use_mmap,
    // use_mlock in a Modelfile or request), which vram does not read: llama-server's flags for
    // them would be applied to a launch that never sees them.
    let llama_server_only: Vec<&str> = [
        (a.batch_size.is_some(), "--batch-size/-b"),
        (a.ubatch_size != 512, "--ubatch-size"),
        (a.no_mmap, "--no-mmap"),
        (a.mlock, "--mlock"),
        (a.kv_unified, "--kv-unified"),
        (a.no_kv_unified, "--no-kv-unified"),
        (a.swa_full, "--swa-full"),
        (a.no_op_offload, "--no-op-offload"),
    ]
    .into_iter()
    .filter_map(|(present, flag)| present.then_some(flag))
    .collect();
    if !llama_server_only.is_empty() {
        return Err(UsageError(format!(
            "{}: llama-server's, not Ollama's (Ollama reads num_batch, use_mmap and use_mlock from the model's options, which vram does not model; its KV cache is always one shared context); drop --engine ollama to plan llama-server",
            llama_server_only.join(", ")
        ))
        .into());
    }
    let kv = a.kv_cache_dtype.to_ascii_lowercase();
    let input = OllamaInput {
        num_ctx: a.num_ctx,
        context_length: None,
        num_parallel: a.parallel,
        flash_attention: a.flash_attn.as_deref().map(parse_bool),
        kv_cache_type: (kv != "auto").then_some(kv),
    };
    Ok(Some(resolve(&input, vram, hp.context_length)?))
}

/// The multi-GPU settings, or `None` for one GPU with none of the split flags. A
/// `--tensor-split` of N values means N GPUs unless `--gpus` says more.
pub(super) fn multi_gpu(a: &ServeArgs) -> Result<Option<vram_core::llama_split::MultiGpu>> {
    use vram_core::llama_split::{MultiGpu, SplitMode};
    let listed = a.gpu.split(',').count() as u64;
    if a.gpus.is_none() && a.tensor_split.is_none() && a.split_mode.is_none() && a.main_gpu.is_none() && listed == 1 {
        return Ok(None);
    }
    let tensor_split = match &a.tensor_split {
        None => Vec::new(),
        // llama.cpp's common/arg.cpp splits on `,` and `/`.
        Some(v) => v
            .split([',', '/'])
            .map(|x| {
                x.trim()
                    .parse::<f64>()
                    .map_err(|_| UsageError(format!("--tensor-split `{v}`: `{x}` is not a number (write proportions like 3,1)")))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?,
    };
    if listed > 1 && a.gpus.is_some_and(|n| n != listed) {
        return Err(
            UsageError(format!("--gpu lists {listed} GPUs but --gpus says {}: give one or make them agree", a.gpus.unwrap_or(0))).into()
        );
    }
    let gpus = a.llama_gpu_count();
    let mode = a.split_mode.as_deref().map(SplitMode::parse).transpose()?.unwrap_or_default();
    // Mixed GPUs: each one's free memory (the CUDA total less the CUDA context) sets the default
    // split, as llama.cpp measures it at load.
    let free_memory = if listed > 1 {
        let cuda_context = llama_context_at_load(a, llama_cuda_context(a, None)?);
        resolve::gpu_list(&a.gpu)?.iter().map(|g| vram_core::gpu::cuda_total(g).0.saturating_sub(cuda_context)).collect()
    } else {
        Vec::new()
    };
    let m = MultiGpu { gpus, tensor_split, mode, main_gpu: a.main_gpu.unwrap_or(0), free_memory };
    m.validate()?;
    Ok(Some(m))
}

/// `-ot` values in order, then `--cpu-moe` (all layers, so it wins over `--n-cpu-moe`).
pub(super) fn overrides(a: &ServeArgs) -> Result<vram_core::gguf::Overrides> {
    use vram_core::gguf::{parse_override_tensor, CpuMoe, Overrides};
    let mut tensor = Vec::new();
    for v in &a.override_tensor {
        tensor.extend(parse_override_tensor(v)?);
    }
    let cpu_moe = match (a.cpu_moe, a.n_cpu_moe) {
        (true, _) => CpuMoe::All,
        (false, Some(n)) if n > 0 => CpuMoe::FirstLayers(n),
        _ => CpuMoe::None,
    };
    let o = Overrides { tensor, cpu_moe, lora: Vec::new() };
    let gpus = multi_gpu(a)?.map_or(1, |m| m.gpus);
    if let Some(n) = o.highest_gpu().filter(|n| u64::from(*n) >= gpus) {
        return Err(UsageError(format!(
            "-ot …=CUDA{n} names GPU {n}, but {gpus} GPU{} planned: give --gpus {} (or a --tensor-split with a value per GPU)",
            if gpus == 1 { " is" } else { "s are" },
            n + 1
        ))
        .into());
    }
    Ok(o)
}

/// For each number of GPU layers (all + output, then down in eighths), the longest context that fits.
fn offload_table(
    gguf: &vram_core::gguf::Gguf,
    hparams: &vram_core::gguf::HParams,
    config: &vram_core::gguf::LlamaCppConfig,
    overrides: &vram_core::gguf::Overrides,
    memory: u64,
) -> Result<Vec<OffloadRow>> {
    use vram_core::gguf::{llama_cpp_with, max_ctx_with, LlamaCppConfig};
    let limit = if hparams.context_length > 0 { hparams.context_length } else { 1 << 20 };
    let mut offload_table = Vec::new();
    let mut ngl = hparams.layers + 1;
    loop {
        let c = LlamaCppConfig { n_gpu_layers: ngl, ..*config };
        offload_table.push(OffloadRow {
            n_gpu_layers: ngl,
            max_ctx_size: max_ctx_with(gguf, hparams, &c, overrides, memory, limit)?,
            overridden_to_cpu_bytes: llama_cpp_with(gguf, hparams, &c, overrides)?.overridden_to_cpu_bytes,
        });
        if ngl == 0 {
            break;
        }
        let step = (hparams.layers / 8).max(1);
        ngl = if ngl > hparams.layers { hparams.layers } else { ngl.saturating_sub(step) };
    }
    Ok(offload_table)
}

/// For a file with MoE expert tensors: `--n-cpu-moe` from 0 to all layers in eighths, each
/// planned as llama.cpp places it; empty when `--cpu-moe` matches no tensor (a dense model).
fn moe_table(
    gguf: &vram_core::gguf::Gguf,
    hparams: &vram_core::gguf::HParams,
    config: &vram_core::gguf::LlamaCppConfig,
    memory: u64,
    user: &vram_core::gguf::Overrides,
) -> Result<Vec<MoeRow>> {
    use vram_core::gguf::{llama_cpp_with, max_ctx_with, CpuMoe};
    let limit = if hparams.context_length > 0 { hparams.context_length } else { 1 << 20 };
    let all = user.moe_only(CpuMoe::All);
    if llama_cpp_with(gguf, hparams, config, &all)?.overridden_tensors == 0 {
        return Ok(Vec::new());
    }
    let step = (hparams.layers / 8).max(1);
    let mut rows = Vec::new();
    let mut n = 0;
    while n <= hparams.layers {
        let o = user.moe_only(if n == 0 { CpuMoe::None } else { CpuMoe::FirstLayers(n) });
        let p = llama_cpp_with(gguf, hparams, config, &o)?;
        let max_ctx_size = max_ctx_with(gguf, hparams, config, &o, memory, limit)?;
        rows.push(MoeRow {
            n_cpu_moe: n,
            overridden_to_cpu_bytes: p.overridden_to_cpu_bytes,
            gpu_total_bytes: p.gpu_total_bytes,
            max_ctx_size,
        });
        n = if n < hparams.layers { (n + step).min(hparams.layers) } else { n + 1 };
    }
    Ok(rows)
}
