//! The launch `vram serve --emit` writes: the engine, the model, the flags the estimate used
//! (the user's, or with one ranked alternative applied), and the GPUs it needs. Pure.

use vram_core::serve_advice::{Alternative, Flag};

use crate::cli::{MaxModelLen, ServeArgs};

/// Which engine the launch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchEngine {
    /// `vllm serve`.
    Vllm,
    /// `python -m sglang.launch_server`.
    Sglang,
    /// llama.cpp's `llama-server`.
    LlamaServer,
}

/// A serving launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The engine.
    pub engine: LaunchEngine,
    /// The model as the engine loads it (a Hub id or a path).
    pub model: String,
    /// The engine's flags, in its own spelling.
    pub flags: Vec<Flag>,
    /// GPUs the launch needs (vLLM: TP × PP × DP; SGLang: TP).
    pub gpus: u64,
    /// Container image tag: the release asked for with `--vllm-version X.Y.Z`, else `latest`.
    pub image_tag: String,
    /// Whose accounting vram followed (`vLLM 0.21 rules`), said in the emitted comment.
    pub modelled: String,
    /// Set when vram estimates that this launch does not fit: why.
    pub warning: Option<String>,
    /// Environment the engine reads that the estimate depends on (vLLM's
    /// `VLLM_USE_V2_MODEL_RUNNER`, `VLLM_USE_V1`), as (name, value).
    pub env: Vec<(String, String)>,
}

impl Launch {
    /// The engine's port (vLLM's `--port` default 8000, SGLang's 30000, llama-server's 8080).
    pub fn port(&self) -> u16 {
        match self.engine {
            LaunchEngine::Vllm => 8000,
            LaunchEngine::Sglang => 30000,
            LaunchEngine::LlamaServer => 8080,
        }
    }

    /// llama-server: whether the model is a Hub repository (`-hf org/name:QUANT`) rather than
    /// a local file (`-m FILE`).
    pub fn is_hub_model(&self) -> bool {
        self.engine == LaunchEngine::LlamaServer && !self.model.to_ascii_lowercase().ends_with(".gguf")
    }

    /// Set a flag, replacing one of the same name.
    pub fn set(&mut self, flag: Flag) {
        match self.flags.iter_mut().find(|f| f.name == flag.name) {
            Some(f) => *f = flag,
            None => self.flags.push(flag),
        }
    }

    /// Apply one alternative's flags; a suggestion (a checkpoint vram cannot name) is refused.
    pub fn apply(&mut self, alt: &Alternative) -> Result<(), String> {
        if alt.suggestion {
            return Err(format!(
                "that alternative is a suggestion ({}): vram cannot name the checkpoint; find one and pass it as --model",
                alt.description
            ));
        }
        for f in &alt.flags {
            // A smaller quant of the same repository replaces the model, not a flag.
            if f.name == "-hf" && self.engine == LaunchEngine::LlamaServer {
                self.model = f.value.clone().unwrap_or_default();
                continue;
            }
            self.set(f.clone());
        }
        if let Some(f) = alt.flags.iter().find(|f| f.name == "--tensor-parallel-size" || f.name == "--tp-size") {
            let tp: u64 = f.value.as_deref().and_then(|v| v.parse().ok()).unwrap_or(1);
            let rest = self.flag_u64("--pipeline-parallel-size") * self.flag_u64("--data-parallel-size") * self.flag_u64("--dp-size");
            self.gpus = tp.saturating_mul(rest);
        }
        Ok(())
    }

    /// A numeric flag's value, 1 when absent.
    fn flag_u64(&self, name: &str) -> u64 {
        self.flags.iter().find(|f| f.name == name).and_then(|f| f.value.as_deref()?.parse().ok()).unwrap_or(1)
    }
}

/// The model as an engine loads it: a built-in preset's Hub repository, else as given.
pub fn model_id(given: &str) -> String {
    vram_core::presets::find(given).map_or_else(|| given.to_string(), |p| p.hf_id.to_string())
}

fn push(flags: &mut Vec<Flag>, cond: bool, name: &str, value: impl ToString) {
    if cond {
        flags.push(Flag::new(name, value));
    }
}

fn switch(flags: &mut Vec<Flag>, cond: bool, name: &str) {
    if cond {
        flags.push(Flag { name: name.into(), value: None });
    }
}

/// A vLLM launch from the `vram serve` flags as given (defaults left out, as vLLM has them).
pub fn vllm(a: &ServeArgs, model: &str) -> Launch {
    let mut f = Vec::new();
    push(&mut f, a.tp != 1, "--tensor-parallel-size", a.tp);
    push(&mut f, a.pipeline_parallel_size != 1, "--pipeline-parallel-size", a.pipeline_parallel_size);
    push(&mut f, a.data_parallel_size != 1, "--data-parallel-size", a.data_parallel_size);
    switch(&mut f, a.enable_expert_parallel, "--enable-expert-parallel");
    match a.max_model_len {
        Some(MaxModelLen::Tokens(n)) => f.push(Flag::new("--max-model-len", n)),
        Some(MaxModelLen::Auto) => f.push(Flag::new("--max-model-len", "auto")),
        None => {}
    }
    push(&mut f, a.gpu_memory_utilization.is_some(), "--gpu-memory-utilization", a.gpu_memory_utilization.unwrap_or_default());
    for (name, v) in [("--kv-cache-memory-bytes", &a.kv_cache_memory_bytes), ("--quantization", &a.quantization)] {
        push(&mut f, v.is_some(), name, v.clone().unwrap_or_default());
    }
    push(&mut f, a.dtype != "auto", "--dtype", &a.dtype);
    push(&mut f, a.kv_cache_dtype != "auto", "--kv-cache-dtype", &a.kv_cache_dtype);
    push(&mut f, a.block_size != 16, "--block-size", a.block_size);
    push(&mut f, a.max_num_batched_tokens.is_some(), "--max-num-batched-tokens", a.max_num_batched_tokens.unwrap_or(0));
    push(&mut f, a.max_num_seqs.is_some(), "--max-num-seqs", a.max_num_seqs.unwrap_or(0));
    push(&mut f, a.cpu_offload_gb.is_some(), "--cpu-offload-gb", a.cpu_offload_gb.unwrap_or(0.0));
    switch(&mut f, a.enforce_eager, "--enforce-eager");
    push(&mut f, a.max_cudagraph_capture_size.is_some(), "--max-cudagraph-capture-size", a.max_cudagraph_capture_size.unwrap_or(0));
    let sizes: Vec<String> = a.cudagraph_capture_sizes.iter().map(u64::to_string).collect();
    push(&mut f, !sizes.is_empty(), "--cudagraph-capture-sizes", sizes.join(MANY_SEP));
    push(&mut f, a.cudagraph_mode.is_some(), "--compilation-config.cudagraph_mode", a.cudagraph_mode.clone().unwrap_or_default());
    switch(&mut f, a.enable_lora, "--enable-lora");
    push(&mut f, a.max_loras.is_some(), "--max-loras", a.max_loras.unwrap_or(0));
    push(&mut f, a.max_lora_rank.is_some(), "--max-lora-rank", a.max_lora_rank.unwrap_or(0));
    push(&mut f, !a.lora_modules.is_empty(), "--lora-modules", a.lora_modules.join(MANY_SEP));
    push(&mut f, a.max_cpu_loras.is_some(), "--max-cpu-loras", a.max_cpu_loras.unwrap_or(0));
    switch(&mut f, a.enable_prefix_caching, "--enable-prefix-caching");
    switch(&mut f, a.no_enable_prefix_caching, "--no-enable-prefix-caching");
    switch(&mut f, a.no_enable_chunked_prefill, "--no-enable-chunked-prefill");
    switch(&mut f, a.disable_sliding_window, "--disable-sliding-window");
    push(&mut f, a.num_gpu_blocks_override.is_some(), "--num-gpu-blocks-override", a.num_gpu_blocks_override.unwrap_or(0));
    switch(&mut f, a.enable_eplb, "--enable-eplb");
    push(&mut f, a.eplb_config.is_some(), "--eplb-config", a.eplb_config.clone().unwrap_or_default());
    push(&mut f, a.speculative_config.is_some(), "--speculative-config", a.speculative_config.clone().unwrap_or_default());
    push(&mut f, a.performance_mode.is_some(), "--performance-mode", a.performance_mode.clone().unwrap_or_default());
    push(&mut f, a.mamba_cache_mode.is_some(), "--mamba-cache-mode", a.mamba_cache_mode.clone().unwrap_or_default());
    push(&mut f, a.mamba_ssm_cache_dtype != "auto", "--mamba-ssm-cache-dtype", &a.mamba_ssm_cache_dtype);
    push(&mut f, a.limit_mm_per_prompt.is_some(), "--limit-mm-per-prompt", a.limit_mm_per_prompt.clone().unwrap_or_default());
    push(&mut f, a.mm_processor_kwargs.is_some(), "--mm-processor-kwargs", a.mm_processor_kwargs.clone().unwrap_or_default());
    switch(&mut f, a.language_model_only, "--language-model-only");
    let version = a.vllm_version.as_deref().map(|v| v.trim().trim_start_matches('v'));
    // Only a full release (0.10.2) names an image tag; vram's rules are by major.minor.
    let image_tag = match version {
        Some(v) if v.split('.').count() == 3 && v.chars().all(|c| c.is_ascii_digit() || c == '.') => format!("v{v}"),
        _ => "latest".into(),
    };
    Launch {
        engine: LaunchEngine::Vllm,
        model: model_id(model),
        flags: f,
        gpus: a.tp.saturating_mul(a.pipeline_parallel_size).saturating_mul(a.data_parallel_size),
        image_tag,
        modelled: format!("vLLM {} rules", version.map_or_else(|| vram_core::serve::VllmVersion::NEWEST.to_string(), str::to_string)),
        warning: None,
        env: vllm_env(a),
    }
}

/// vLLM's environment switches the estimate followed (vllm/envs.py): the model runner when
/// `--model-runner` was given, the V0 engine with `--vllm-engine v0`.
fn vllm_env(a: &ServeArgs) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Some(r) = a.model_runner.as_deref().and_then(|r| vram_core::serve::ModelRunner::parse(r).ok()) {
        env.push(("VLLM_USE_V2_MODEL_RUNNER".to_string(), r.flag_and_env().1.to_string()));
    }
    if a.vllm_engine == "v0" {
        env.push(("VLLM_USE_V1".to_string(), "0".to_string()));
    }
    if let Some(v) = a.flashinfer_sampler.as_deref() {
        let on = matches!(v.to_ascii_lowercase().as_str(), "on" | "1" | "true");
        env.push(("VLLM_USE_FLASHINFER_SAMPLER".to_string(), if on { "1" } else { "0" }.to_string()));
    }
    env
}

/// An SGLang launch from the `vram serve --engine sglang` flags as given.
pub fn sglang(a: &ServeArgs, model: &str) -> Launch {
    let mut f = Vec::new();
    push(&mut f, a.tp != 1, "--tp-size", a.tp);
    // Attention DP, written as SGLang 0.5.23 spells it (`--dp-size N --enable-dp-attention` is its
    // deprecated form): within the TP group, so no more GPUs.
    let attn_dp = a.attn_dp_size.or(a.enable_dp_attention.then_some(a.data_parallel_size)).filter(|&n| n > 1);
    push(&mut f, a.data_parallel_size != 1 && !a.enable_dp_attention, "--dp-size", a.data_parallel_size);
    push(&mut f, attn_dp.is_some(), "--attn-dp-size", attn_dp.unwrap_or(1));
    switch(&mut f, a.enable_dp_lm_head, "--enable-dp-lm-head");
    push(&mut f, a.ep_size.is_some_and(|e| e > 1), "--ep-size", a.ep_size.unwrap_or(1));
    push(&mut f, a.context_length.is_some(), "--context-length", a.context_length.unwrap_or(0));
    push(&mut f, a.mem_fraction_static.is_some(), "--mem-fraction-static", a.mem_fraction_static.unwrap_or(0.0));
    push(&mut f, a.max_running_requests.is_some(), "--max-running-requests", a.max_running_requests.unwrap_or(0));
    push(&mut f, a.chunked_prefill_size.is_some(), "--chunked-prefill-size", a.chunked_prefill_size.unwrap_or(0));
    push(&mut f, a.cuda_graph_max_bs.is_some(), "--cuda-graph-max-bs", a.cuda_graph_max_bs.unwrap_or(0));
    switch(&mut f, a.disable_cuda_graph, "--disable-cuda-graph");
    push(&mut f, a.max_total_tokens.is_some(), "--max-total-tokens", a.max_total_tokens.unwrap_or(0));
    push(&mut f, a.page_size.is_some(), "--page-size", a.page_size.unwrap_or(1));
    push(&mut f, a.quantization.is_some(), "--quantization", a.quantization.clone().unwrap_or_default());
    push(&mut f, a.dtype != "auto", "--dtype", &a.dtype);
    push(&mut f, a.kv_cache_dtype != "auto", "--kv-cache-dtype", &a.kv_cache_dtype);
    // A hybrid model's state-pool flags (refused by `vram serve` on a model without mixers).
    push(&mut f, a.max_mamba_cache_size.is_some(), "--max-mamba-cache-size", a.max_mamba_cache_size.unwrap_or(0));
    push(&mut f, a.mamba_ssm_dtype.is_some(), "--mamba-ssm-dtype", a.mamba_ssm_dtype.clone().unwrap_or_default());
    push(&mut f, a.mamba_full_memory_ratio.is_some(), "--mamba-full-memory-ratio", a.mamba_full_memory_ratio.unwrap_or(0.0));
    push(
        &mut f,
        a.mamba_radix_cache_strategy.is_some(),
        "--mamba-radix-cache-strategy",
        a.mamba_radix_cache_strategy.clone().unwrap_or_default(),
    );
    switch(&mut f, a.disable_radix_cache, "--disable-radix-cache");
    switch(&mut f, a.disable_overlap_schedule, "--disable-overlap-schedule");
    switch(&mut f, a.language_only, "--language-only");
    switch(&mut f, a.enable_lora && a.lora_paths.is_empty(), "--enable-lora");
    push(&mut f, a.max_lora_rank.is_some(), "--max-lora-rank", a.max_lora_rank.unwrap_or(0));
    push(&mut f, a.max_loras_per_batch.is_some(), "--max-loras-per-batch", a.max_loras_per_batch.unwrap_or(0));
    push(&mut f, a.max_loaded_loras.is_some(), "--max-loaded-loras", a.max_loaded_loras.unwrap_or(0));
    if let Some(t) = &a.lora_target_modules {
        push(&mut f, true, "--lora-target-modules", t.join(MANY_SEP));
    }
    push(&mut f, !a.lora_paths.is_empty(), "--lora-paths", a.lora_paths.join(MANY_SEP));
    Launch {
        engine: LaunchEngine::Sglang,
        model: model_id(model),
        flags: f,
        gpus: a.tp.saturating_mul(a.data_parallel_size),
        image_tag: "latest".into(),
        modelled: format!("SGLang {} rules", vram_core::sglang::SGLANG_VERSION),
        warning: None,
        env: Vec::new(),
    }
}

/// A llama-server launch from the `vram serve` flags as given, in llama.cpp's own spelling
/// (defaults left out, as llama-server has them): `model` is the GGUF file or `org/name:QUANT`.
pub fn llama_server(a: &ServeArgs, model: &str) -> Launch {
    let mut f = Vec::new();
    push(&mut f, a.n_gpu_layers.is_some(), "-ngl", a.n_gpu_layers.map(|n| n.to_string()).unwrap_or_default());
    push(&mut f, a.ctx_size.is_some(), "-c", a.ctx_size.unwrap_or(0));
    push(&mut f, a.fit.is_some(), "-fit", a.fit.clone().unwrap_or_default());
    // llama.cpp reads MiB: a size given with a unit is written in MiB.
    let fitt = a.fit_target.as_deref().map(|t| match t.trim().parse::<u64>() {
        Ok(mib) => mib.to_string(),
        Err(_) => crate::resolve::size("--fit-target", t).map_or_else(|_| t.to_string(), |b| (b >> 20).to_string()),
    });
    push(&mut f, fitt.is_some(), "-fitt", fitt.unwrap_or_default());
    push(&mut f, a.fit_ctx.is_some(), "-fitc", a.fit_ctx.unwrap_or(0));
    push(&mut f, a.parallel.is_some(), "-np", a.parallel.unwrap_or(0));
    switch(&mut f, a.kv_unified, "--kv-unified");
    switch(&mut f, a.no_kv_unified, "--no-kv-unified");
    switch(&mut f, a.swa_full, "--swa-full");
    switch(&mut f, a.no_op_offload, "--no-op-offload");
    push(&mut f, a.batch_size.is_some(), "-b", a.batch_size.unwrap_or(0));
    push(&mut f, a.ubatch_size != 512, "-ub", a.ubatch_size);
    switch(&mut f, a.no_mmap, "--no-mmap");
    switch(&mut f, a.mlock, "--mlock");
    push(&mut f, a.mmproj.is_some(), "--mmproj", a.mmproj.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
    switch(&mut f, a.no_mmproj, "--no-mmproj");
    switch(&mut f, a.no_mmproj_offload, "--no-mmproj-offload");
    for kv in &a.override_kv {
        f.push(Flag::new("--override-kv", kv));
    }
    for l in &a.lora {
        f.push(Flag::new("--lora", l.display()));
    }
    push(&mut f, a.flash_attn.is_some(), "-fa", a.flash_attn.clone().unwrap_or_default());
    let kv = a.kv_cache_dtype.to_ascii_lowercase();
    push(&mut f, kv != "auto", "-ctk", &kv);
    push(&mut f, kv != "auto", "-ctv", &kv);
    push(&mut f, a.n_cpu_moe.is_some(), "--n-cpu-moe", a.n_cpu_moe.unwrap_or(0));
    switch(&mut f, a.cpu_moe, "--cpu-moe");
    for o in &a.override_tensor {
        f.push(Flag::new("-ot", o));
    }
    push(&mut f, a.tensor_split.is_some(), "-ts", a.tensor_split.clone().unwrap_or_default());
    push(&mut f, a.split_mode.is_some(), "-sm", a.split_mode.clone().unwrap_or_default());
    push(&mut f, a.main_gpu.is_some(), "-mg", a.main_gpu.unwrap_or(0));
    let gpus = a.llama_gpu_count();
    Launch {
        engine: LaunchEngine::LlamaServer,
        model: model.to_string(),
        flags: f,
        gpus,
        image_tag: "server-cuda".into(),
        modelled: "llama.cpp's buffers as load_tensors and llama_context size them".into(),
        // The model file is mounted into a container; the projector is passed as given.
        warning: {
            let files: Vec<String> = a
                .mmproj
                .iter()
                .map(|p| format!("--mmproj {}", p.display()))
                .chain(a.lora.iter().map(|p| format!("--lora {}", p.display())))
                .collect();
            (!files.is_empty()).then(|| {
                format!("{} written as given: in a container, mount their directories and use the mounted paths", files.join(", "))
            })
        },
        env: Vec::new(),
    }
}

/// The engine's arguments after the program: the model, then the flags, split for an argv.
pub fn argv(l: &Launch, with_model_flag: bool) -> Vec<String> {
    let mut v = Vec::new();
    if l.engine == LaunchEngine::LlamaServer {
        // llama-server always names its model: `-m FILE` or `-hf org/name:QUANT`.
        v.push(if l.is_hub_model() { "-hf" } else { "-m" }.to_string());
    } else if with_model_flag {
        v.push(match l.engine {
            LaunchEngine::Vllm => "--model".to_string(),
            _ => "--model-path".to_string(),
        });
    }
    v.push(l.model.clone());
    for f in &l.flags {
        v.push(f.name.clone());
        match &f.value {
            // argparse `nargs` flags: one flag, its values as separate words (a repeated flag
            // would keep only its last value).
            Some(value) if MANY_VALUED.contains(&f.name.as_str()) => v.extend(value.split(MANY_SEP).map(String::from)),
            value => v.extend(value.clone()),
        }
    }
    v
}

/// Flags written once with several values (joined by [`MANY_SEP`] in their [`Flag`]): SGLang's
/// and vLLM's `nargs` flags.
const MANY_VALUED: [&str; 4] = ["--lora-paths", "--lora-target-modules", "--lora-modules", "--cudagraph-capture-sizes"];
/// What joins those values: the ASCII unit separator, which no path or JSON value holds.
const MANY_SEP: &str = "\u{1f}";

/// The comment lines every format starts with (`#` comments in shell and YAML alike).
pub fn header(l: &Launch) -> String {
    let mut s = format!(
        "# written by vram {} from its estimate ({}); flags vram does not model are not carried over\n",
        env!("CARGO_PKG_VERSION"),
        l.modelled
    );
    if let Some(w) = &l.warning {
        s.push_str(&format!("# WARNING: {w}\n"));
    }
    s
}

/// The header of a container format: with `latest`, a reminder to pin the image.
pub fn image_header(l: &Launch) -> String {
    let mut s = header(l);
    if l.image_tag == "latest" {
        s.push_str("# the image tag is `latest`: pin the release you run (vLLM: give --vllm-version X.Y.Z and vram writes that tag)\n");
    }
    if l.engine == LaunchEngine::LlamaServer {
        s.push_str("# the image tag `server-cuda` follows llama.cpp's master: pin a build (server-cuda-bNNNN) you have tested\n");
    }
    s
}

/// A shell word: as is when safe, else single-quoted.
pub fn shell_word(w: &str) -> String {
    let safe = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if safe {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// A YAML scalar that is also a JSON string (double-quoted, JSON escapes are YAML escapes).
pub fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A Kubernetes / compose name: lowercase letters, digits and `-`, at most 63, from the model.
pub fn service_name(l: &Launch) -> String {
    let last = l.model.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let mut n: String = last.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    n = n.trim_matches('-').to_string();
    n.truncate(63);
    let n = n.trim_end_matches('-');
    if n.is_empty() {
        "vram-serve".into()
    } else {
        n.into()
    }
}

/// What `--emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The `vllm serve` command.
    Vllm,
    /// The `python -m sglang.launch_server` command.
    Sglang,
    /// A Docker Compose service.
    Docker,
    /// A Kubernetes Deployment and Service.
    K8s,
    /// The `llama-server` command.
    LlamaServer,
}

impl Format {
    /// Parse `--emit`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "vllm" => Ok(Format::Vllm),
            "sglang" => Ok(Format::Sglang),
            "docker" | "compose" | "docker-compose" => Ok(Format::Docker),
            "k8s" | "kubernetes" => Ok(Format::K8s),
            "llama-server" | "llama.cpp" | "llamacpp" => Ok(Format::LlamaServer),
            other => Err(format!("invalid --emit `{other}`: use vllm, sglang, llama-server, docker or k8s")),
        }
    }
}

/// The launch in the chosen format.
pub fn render(format: Format, l: &Launch) -> String {
    match format {
        Format::Vllm => super::vllm::command(l),
        Format::Sglang => super::sglang::command(l),
        Format::Docker => super::docker::compose(l),
        Format::K8s => super::k8s::manifest(l),
        Format::LlamaServer => super::llama_server::command(l),
    }
}
