//! `vram serve -g GPU -- <a real launch command>`: read a pasted `vllm serve …`,
//! `python -m vllm.entrypoints.openai.api_server …`, `python -m sglang.launch_server …`,
//! `sglang serve …` or `llama-server …` command line as the
//! engine reads it, so nobody translates flags. Every flag is accounted for: read, ignored
//! because it changes no memory (listed), or refused because it changes memory in a way vram
//! does not model. Flags nobody knows are listed too, never dropped silently.

use anyhow::Result;
use clap::Parser;

use crate::cli::{ServeArgs, ServeOnly};
use crate::errors::UsageError;

/// A pasted command translated to `vram serve` arguments, with what was set aside.
pub struct Pasted {
    /// The arguments `vram serve` runs with.
    pub args: ServeArgs,
    /// Notes for the output: the engine read, flags ignored, flags not understood.
    pub notes: Vec<String>,
}

/// vLLM flags vram reads, as `vram serve` spells them (its own spelling is vLLM's).
const VLLM_VALUE: &[(&str, &str)] = &[
    ("--tensor-parallel-size", "--tensor-parallel-size"),
    ("-tp", "--tensor-parallel-size"),
    ("--max-model-len", "--max-model-len"),
    ("--gpu-memory-utilization", "--gpu-memory-utilization"),
    ("--max-cudagraph-capture-size", "--max-cudagraph-capture-size"),
    ("--performance-mode", "--performance-mode"),
    ("--num-gpu-blocks-override", "--num-gpu-blocks-override"),
    ("--eplb-config", "--eplb-config"),
    ("--device-memory-utilization", "--gpu-memory-utilization"),
    ("--dtype", "--dtype"),
    ("--quantization", "--quantization"),
    ("-q", "--quantization"),
    ("--kv-cache-dtype", "--kv-cache-dtype"),
    ("--block-size", "--block-size"),
    ("--max-num-batched-tokens", "--max-num-batched-tokens"),
    ("--max-num-seqs", "--max-num-seqs"),
    ("--max-loras", "--max-loras"),
    ("--max-lora-rank", "--max-lora-rank"),
    ("--max-cpu-loras", "--max-cpu-loras"),
    ("--kv-cache-memory-bytes", "--kv-cache-memory-bytes"),
    ("--pipeline-parallel-size", "--pipeline-parallel-size"),
    ("-pp", "--pipeline-parallel-size"),
    ("--cpu-offload-gb", "--cpu-offload-gb"),
    ("--data-parallel-size", "--data-parallel-size"),
    ("-dp", "--data-parallel-size"),
    ("--limit-mm-per-prompt", "--limit-mm-per-prompt"),
    ("--mm-processor-kwargs", "--mm-processor-kwargs"),
    ("--mamba-cache-mode", "--mamba-cache-mode"),
    ("--mamba-ssm-cache-dtype", "--mamba-ssm-cache-dtype"),
];
const VLLM_FLAG: &[&str] = &[
    "--enforce-eager",
    "--enable-lora",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--no-enable-chunked-prefill",
    "--disable-sliding-window",
    "--enable-eplb",
    "--language-model-only",
    "--enable-expert-parallel",
];
/// vLLM flags that change no GPU memory vram accounts (network, logging, tokenizer, templates,
/// loading sources; CUDA graphs are outside vLLM's budget and said in every report).
const VLLM_NO_MEMORY: &[&str] = &[
    "--host",
    "--port",
    "--served-model-name",
    "--api-key",
    "--tokenizer",
    "--tokenizer-mode",
    "--revision",
    "--code-revision",
    "--tokenizer-revision",
    "--download-dir",
    "--load-format",
    "--seed",
    "--chat-template",
    "--response-role",
    "--uvicorn-log-level",
    "--tool-call-parser",
    "--reasoning-parser",
    "--generation-config",
    "--root-path",
    "--ssl-keyfile",
    "--ssl-certfile",
    "--max-log-len",
    "--swap-space",
    "--max-seq-len-to-capture",
    "--hf-overrides",
    "--distributed-executor-backend",
    // vLLM 0.33's engine and server arguments (vllm/engine/arg_utils.py,
    // vllm/entrypoints/openai/cli_args.py): logging, scheduling order, loading, multi-node
    // addresses, host-memory caches, the HTTP front end.
    "--log-level",
    "--max-logprobs",
    "--logprobs-mode",
    "--scheduling-policy",
    "--stream-interval",
    "--config-format",
    "--hf-token",
    "--ignore-patterns",
    "--structured-outputs-config",
    "--reasoning-config",
    "--reasoning-parser-plugin",
    "--tool-parser-plugin",
    "--max-num-queued-reqs",
    "--max-num-queued-tokens",
    "--long-prefill-token-threshold",
    "--otlp-traces-endpoint",
    "--collect-detailed-traces",
    "--master-addr",
    "--master-port",
    "--nnodes",
    "--node-rank",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-rank",
    "--data-parallel-size-local",
    "--data-parallel-start-rank",
    "--data-parallel-backend",
    "--distributed-timeout-seconds",
    "--safetensors-load-strategy",
    "--pt-load-map-location",
    "--max-parallel-loading-workers",
    "--model-loader-extra-config",
    "--shutdown-timeout",
    "--allowed-local-media-path",
    "--allowed-media-domains",
    "--media-io-kwargs",
    "--mm-processor-cache-gb",
    "--mm-processor-cache-type",
    "--allowed-origins",
    "--allowed-methods",
    "--allowed-headers",
    "--chat-template-content-format",
    "--log-config-file",
    "--api-server-count",
    "--middleware",
    "--override-generation-config",
    "--kv-events-config",
    "--prefix-caching-hash-algo",
    // Older releases' flags (0.5–0.10) that change no GPU memory.
    "--guided-decoding-backend",
    "--num-scheduler-steps",
    "--preemption-mode",
    "--scheduler-delay-factor",
    "--max-context-len-to-capture",
    "--quantization-param-path",
    "--ssl-ca-certs",
    "--ssl-cert-reqs",
];
const VLLM_NO_MEMORY_FLAG: &[&str] = &[
    "--async-scheduling",
    "--no-async-scheduling",
    "--enable-log-requests",
    "--enable-log-outputs",
    "--disable-uvicorn-access-log",
    "--disable-cascade-attn",
    "--use-tqdm-on-load",
    "--kv-cache-metrics",
    "--cudagraph-metrics",
    "--enable-mfu-metrics",
    "--interleave-mm-strings",
    "--allow-credentials",
    "--return-tokens-as-token-ids",
    "--enable-request-id-headers",
    "--disable-fastapi-docs",
    "--enable-prompt-tokens-details",
    "--enable-server-load-tracking",
    "--enable-force-include-usage",
    "--enable-tokenizer-info-endpoint",
    "--headless",
    "--data-parallel-hybrid-lb",
    "--data-parallel-external-lb",
    "--skip-tokenizer-init",
    "--enable-reasoning",
    "--use-v2-block-manager",
    "--worker-use-ray",
    "--disable-async-output-proc",
    "--trust-remote-code",
    "--disable-log-requests",
    "--disable-log-stats",
    "--enable-auto-tool-choice",
    // On by default in V1: restating it changes nothing (turning it off does: VLLM_FLAG).
    "--enable-chunked-prefill",
    "--disable-frontend-multiprocessing",
    "--disable-custom-all-reduce",
];
/// vLLM flags that change memory in ways vram does not model yet: refused by name.
const VLLM_UNMODELLED: &[&str] = &[
    "--speculative-model",
    "--num-speculative-tokens",
    "--spec-method",
    "--spec-model",
    "--spec-tokens",
    "--max-model-len-auto",
    "--disable-hybrid-kv-cache-manager",
    "--decode-context-parallel-size",
    "--prefill-context-parallel-size",
    "--offload-backend",
    "--offload-group-size",
    "--offload-num-in-group",
    "--offload-params",
    "--offload-prefetch-step",
];
/// vLLM flags that take one value or more (argparse `nargs="+"`).
const VLLM_MANY_VALUES: &[&str] = &["--served-model-name", "--cudagraph-capture-sizes", "--lora-modules"];
/// Of those, the ones vram reads (the others change no memory).
const VLLM_MANY_VALUES_READ: &[&str] = &["--lora-modules", "--cudagraph-capture-sizes"];

/// llama.cpp (`llama-server`, `llama-cli`) flags vram reads.
const LLAMA_VALUE: &[(&str, &str)] = &[
    ("-m", "-m"),
    ("--model", "-m"),
    ("-ngl", "--n-gpu-layers"),
    ("--n-gpu-layers", "--n-gpu-layers"),
    ("--gpu-layers", "--n-gpu-layers"),
    ("-c", "--ctx-size"),
    ("--ctx-size", "--ctx-size"),
    ("-np", "--parallel"),
    ("--parallel", "--parallel"),
    ("-ub", "--ubatch-size"),
    ("--ubatch-size", "--ubatch-size"),
    ("-b", "--batch-size"),
    ("--batch-size", "--batch-size"),
    ("--n-cpu-moe", "--n-cpu-moe"),
    ("-ncmoe", "--n-cpu-moe"),
    ("-ot", "--override-tensor"),
    ("--override-kv", "--override-kv"),
    ("--override-tensor", "--override-tensor"),
    ("-ts", "--tensor-split"),
    ("--tensor-split", "--tensor-split"),
    ("-sm", "--split-mode"),
    ("--split-mode", "--split-mode"),
    ("-mg", "--main-gpu"),
    ("--main-gpu", "--main-gpu"),
    ("-mm", "--mmproj"),
    ("--mmproj", "--mmproj"),
    ("-fit", "--fit"),
    ("--fit", "--fit"),
    ("-fitt", "--fit-target"),
    ("--fit-target", "--fit-target"),
    ("-fitc", "--fit-ctx"),
    ("--fit-ctx", "--fit-ctx"),
];
const LLAMA_FLAG: &[(&str, &str)] = &[
    ("--no-mmap", "--no-mmap"),
    ("--mlock", "--mlock"),
    ("--cpu-moe", "--cpu-moe"),
    ("-cmoe", "--cpu-moe"),
    ("--kv-unified", "--kv-unified"),
    ("-kvu", "--kv-unified"),
    ("--no-kv-unified", "--no-kv-unified"),
    ("-no-kvu", "--no-kv-unified"),
    ("--no-mmproj-offload", "--no-mmproj-offload"),
    ("--no-mmproj", "--no-mmproj"),
    ("--no-mmproj-auto", "--no-mmproj"),
    ("--swa-full", "--swa-full"),
    ("--no-op-offload", "--no-op-offload"),
];
/// llama.cpp flags with a value that change no GPU memory: threads and CPU placement, sampling,
/// prompts, RoPE scaling (the context stays -c), the server's network, templates, reasoning and
/// logging, and host-RAM prompt caches (common/arg.cpp at 0c1e570).
const LLAMA_NO_MEMORY: &[&str] = &[
    "--host",
    "--port",
    "--path",
    "--api-prefix",
    "--cors-origins",
    "--cors-methods",
    "--cors-headers",
    "-t",
    "--threads",
    "-tb",
    "--threads-batch",
    "-C",
    "--cpu-mask",
    "-Cr",
    "--cpu-range",
    "-Cb",
    "--cpu-mask-batch",
    "-Crb",
    "--cpu-range-batch",
    "--cpu-strict",
    "--cpu-strict-batch",
    "--prio",
    "--prio-batch",
    "--poll",
    "--poll-batch",
    "--numa",
    "--threads-http",
    "-a",
    "--alias",
    "--tags",
    "--api-key",
    "--api-key-file",
    "--ssl-key-file",
    "--ssl-cert-file",
    "--chat-template",
    "--chat-template-file",
    "--chat-template-kwargs",
    "--reasoning-format",
    "-rea",
    "--reasoning",
    "--reasoning-effort",
    "--reasoning-budget",
    "--reasoning-budget-message",
    "-s",
    "--seed",
    "--temp",
    "--temperature",
    "--top-k",
    "--top-p",
    "--min-p",
    "--top-nsigma",
    "--top-n-sigma",
    "--typical",
    "--typical-p",
    "--xtc-probability",
    "--xtc-threshold",
    "--repeat-last-n",
    "--repeat-penalty",
    "--presence-penalty",
    "--frequency-penalty",
    "--dry-multiplier",
    "--dry-base",
    "--dry-allowed-length",
    "--dry-penalty-last-n",
    "--dry-sequence-breaker",
    "--dynatemp-range",
    "--dynatemp-exp",
    "--mirostat",
    "--mirostat-lr",
    "--mirostat-ent",
    "--samplers",
    "--sampler-seq",
    "--sampling-seq",
    "-l",
    "--logit-bias",
    "--grammar",
    "--grammar-file",
    "-j",
    "--json-schema",
    "-jf",
    "--json-schema-file",
    "-n",
    "--predict",
    "--n-predict",
    "--keep",
    "-p",
    "--prompt",
    "-f",
    "--file",
    "-r",
    "--reverse-prompt",
    "--rope-scaling",
    "--rope-scale",
    "--rope-freq-base",
    "--rope-freq-scale",
    "--yarn-orig-ctx",
    "--yarn-ext-factor",
    "--yarn-attn-factor",
    "--yarn-beta-slow",
    "--yarn-beta-fast",
    "-dt",
    "--defrag-thold",
    "-to",
    "--timeout",
    "--sse-ping-interval",
    "--cache-reuse",
    "-sps",
    "--slot-prompt-similarity",
    "--slot-save-path",
    "--sleep-idle-seconds",
    "-cram",
    "--cache-ram",
    "-ctxcp",
    "--ctx-checkpoints",
    "--swa-checkpoints",
    "-cms",
    "--checkpoint-min-step",
    "--log-file",
    "--log-colors",
    "-lv",
    "--verbosity",
    "--log-verbosity",
    "-hft",
    "--hf-token",
    "--media-path",
];
/// llama.cpp switches that change no GPU memory (or restate a default: `--mmap`,
/// `--op-offload`, `--kv-offload`, `--mmproj-offload`).
const LLAMA_NO_MEMORY_FLAG: &[&str] = &[
    "--jinja",
    // Loads the adapters (counted) but leaves their scale at 0 until a request sets it.
    "--lora-init-without-apply",
    "--no-jinja",
    "-v",
    "--verbose",
    "--log-verbose",
    "--log-disable",
    "--log-jsonl",
    "--log-prefix",
    "--log-timestamps",
    "--metrics",
    "--props",
    "--slots",
    "--no-slots",
    "-cb",
    "--cont-batching",
    "-nocb",
    "--no-cont-batching",
    "--webui",
    "--no-webui",
    "--ui",
    "--no-ui",
    "--warmup",
    "--no-warmup",
    "--context-shift",
    "--no-context-shift",
    "--cache-prompt",
    "--no-cache-prompt",
    "--cache-idle-slots",
    "--no-cache-idle-slots",
    "-e",
    "--escape",
    "--no-escape",
    "-sp",
    "--special",
    "--perf",
    "--no-perf",
    "--ignore-eos",
    "--check-tensors",
    "--repack",
    "--no-repack",
    "--no-host",
    "--offline",
    "--reuse-port",
    "--cors-credentials",
    "--prefill-assistant",
    "--no-prefill-assistant",
    "--skip-chat-parsing",
    "--reasoning-preserve",
    "--mmap",
    "--op-offload",
    "-kvo",
    "--kv-offload",
    "--mmproj-offload",
    "--mmproj-auto",
];
/// llama.cpp flags that change GPU memory in ways vram does not model yet: refused by name.
const LLAMA_UNMODELLED: &[&str] = &[
    "-nkvo",
    "--no-kv-offload",
    "-md",
    "--model-draft",
    "--spec-draft-model",
    "-hfd",
    "-hfrd",
    "--hf-repo-draft",
    "--spec-draft-hf",
    "--control-vector",
    "--control-vector-scaled",
    "--rpc",
    "-ncffn",
    "--n-cpu-ffn",
    "--image-min-tokens",
    "--image-max-tokens",
    "--embedding",
    "--embeddings",
    "--rerank",
    "--reranking",
    "--pooling",
    "-mu",
    "--model-url",
    "-dr",
    "--docker-repo",
];

/// SGLang flags vram reads (`python -m sglang.launch_server`, `sglang serve`), as `vram serve`
/// spells them (arg_groups/fields/*.py of SGLang 0.5.23).
const SGLANG_VALUE: &[(&str, &str)] = &[
    ("--tp-size", "--tp-size"),
    ("--tp", "--tp-size"),
    // Replicas of the TP group (0.5.23 `dp_size`), or with --enable-dp-attention the attention-DP
    // groups.
    ("--dp-size", "--dp-size"),
    ("--dp", "--dp-size"),
    ("--attn-dp-size", "--attn-dp-size"),
    ("--ep-size", "--ep-size"),
    ("--ep", "--ep-size"),
    ("--tensor-parallel-size", "--tp-size"),
    ("--mem-fraction-static", "--mem-fraction-static"),
    ("--context-length", "--context-length"),
    ("--max-running-requests", "--max-running-requests"),
    ("--chunked-prefill-size", "--chunked-prefill-size"),
    ("--cuda-graph-max-bs", "--cuda-graph-max-bs"),
    ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
    ("--kv-cache-dtype", "--kv-cache-dtype"),
    ("--dtype", "--dtype"),
    ("--quantization", "--quantization"),
    ("--max-total-tokens", "--max-total-tokens"),
    ("--page-size", "--page-size"),
    ("--max-mamba-cache-size", "--max-mamba-cache-size"),
    ("--mamba-ssm-dtype", "--mamba-ssm-dtype"),
    ("--mamba-full-memory-ratio", "--mamba-full-memory-ratio"),
    ("--mamba-radix-cache-strategy", "--mamba-radix-cache-strategy"),
    ("--max-lora-rank", "--max-lora-rank"),
    ("--max-loras-per-batch", "--max-loras-per-batch"),
    ("--max-loaded-loras", "--max-loaded-loras"),
    ("--speculative-algorithm", "--speculative-algorithm"),
    ("--speculative-draft-model-path", "--speculative-draft-model-path"),
    ("--speculative-draft", "--speculative-draft-model-path"),
    ("--speculative-num-steps", "--speculative-num-steps"),
    ("--speculative-eagle-topk", "--speculative-eagle-topk"),
    ("--speculative-num-draft-tokens", "--speculative-num-draft-tokens"),
];
const SGLANG_FLAG: &[&str] = &[
    "--disable-cuda-graph",
    "--disable-radix-cache",
    "--disable-overlap-schedule",
    "--language-only",
    "--enable-lora",
    "--enable-dp-attention",
    "--enable-dp-lm-head",
];
/// SGLang flags that take one value or more (argparse `nargs="*"`/`"+"`), read.
const SGLANG_MANY_VALUES: &[&str] = &["--lora-paths", "--lora-target-modules"];
/// SGLang flags that change no GPU memory vram accounts.
const SGLANG_NO_MEMORY: &[&str] = &[
    // LoRA settings that size no GPU buffer: the kernel backend and its chunk, the eviction
    // order (the workspace is activation memory).
    "--lora-backend",
    "--max-lora-chunk-size",
    "--lora-eviction-policy",
    // Speculative settings that size nothing: the draft's revision and load format, the
    // acceptance thresholds, the draft attention backend.
    "--speculative-draft-model-revision",
    "--speculative-draft-load-format",
    "--speculative-accept-threshold-single",
    "--speculative-accept-threshold-acc",
    "--speculative-attention-mode",
    "--speculative-draft-attention-backend",
    "--host",
    "--port",
    "--served-model-name",
    "--api-key",
    "--tokenizer-path",
    "--tokenizer-mode",
    "--revision",
    "--download-dir",
    "--load-format",
    "--random-seed",
    "--chat-template",
    "--tool-call-parser",
    "--reasoning-parser",
    "--log-level",
    "--log-requests-level",
    "--grammar-backend",
    "--dist-init-addr",
    "--nnodes",
    "--node-rank",
    "--sampling-backend",
    "--mm-attention-backend",
    "--prefill-attention-backend",
    "--decode-attention-backend",
    "--watchdog-timeout",
    "--decode-log-interval",
    "--tokenizer-worker-num",
    "--crash-dump-folder",
    "--attention-backend",
    "--max-prefill-tokens",
    "--schedule-policy",
    "--schedule-conservativeness",
    "--stream-interval",
];
const SGLANG_NO_MEMORY_FLAG: &[&str] = &[
    "--trust-remote-code",
    "--enable-metrics",
    "--log-requests",
    "--skip-server-warmup",
    "--enable-torch-compile",
    "--enable-mixed-chunk",
    "--disable-cuda-graph-padding",
    "--stream-output",
    "--enable-cache-report",
    "--skip-tokenizer-init",
    "--show-time-cost",
    "--enable-p2p-check",
    "--disable-custom-all-reduce",
    "--allow-auto-truncate",
    "--enable-tokenizer-batch-encode",
    "--disable-fast-image-processor",
    "--enable-request-time-stats-logging",
];
/// SGLang flags that change memory in ways vram does not model yet: refused by name.
const SGLANG_UNMODELLED: &[&str] = &[
    // MoE data parallelism (attention DP and `--dp-size` replicas are read).
    "--moe-dp-size",
    "--pp-size",
    "--pipeline-parallel-size",
    "--moe-a2a-backend",
    // A token map shrinks an EAGLE head's vocabulary; several draft layers run as one.
    "--speculative-token-map",
    "--enable-multi-layer-eagle",
    "--cpu-offload-gb",
    "--enable-hierarchical-cache",
    "--disaggregation-mode",
];

enum Engine {
    Vllm,
    Sglang,
    LlamaCpp,
}

/// Beside a pasted command only vram's own settings may be typed (the GPU, output, log and the
/// assumptions no engine flag carries); an engine flag typed there would be dropped for the
/// pasted one, so it is refused by name of the rule, not ignored.
fn typed_beside_paste(a: &ServeArgs, ollama: bool) -> Result<()> {
    let parsed = crate::cli::Cli::try_parse_from(["vram", "serve", "-g", a.gpu.as_str()]).expect("the bare serve command parses");
    let crate::cli::Command::Serve(defaults) = parsed.command else { unreachable!("parsed as serve") };
    // vram's own settings, reset to compare the rest.
    let own = |x: &ServeArgs| ServeArgs {
        command: Vec::new(),
        json: false,
        log: None,
        emit: None,
        emit_alternative: None,
        emit_file: None,
        force: false,
        non_torch_memory: None,
        cuda_context: None,
        vllm_version: None,
        cuda_graph_memory: None,
        // How many GPUs the machine has (llama.cpp uses every visible one).
        gpus: None,
        approximate_architecture: false,
        // Ollama names its model by tag: the GGUF file comes with --model.
        model: if ollama { None } else { x.model.clone() },
        ..x.clone()
    };
    if format!("{:?}", own(a)) != format!("{:?}", own(&defaults)) {
        return Err(UsageError(
            "beside a pasted command (after `--`) give only vram's own flags (--gpu, --gpus, --approximate-architecture, --json, --log, --emit…, --non-torch-memory, --cuda-context, --vllm-version, --cuda-graph-memory; --model for `ollama run`); the engine's flags, --model included, go inside the pasted command, where vram reads them as the engine does"
                .into(),
        )
        .into());
    }
    Ok(())
}

/// Translate `a.command` (the tokens after `--`) into `vram serve` arguments.
pub fn translate(a: &ServeArgs) -> Result<Pasted> {
    let (env, cmd) = split_env(&a.command);
    let is_ollama = cmd.first().is_some_and(|p| p.rsplit('/').next() == Some("ollama"));
    typed_beside_paste(a, is_ollama)?;
    if is_ollama {
        return ollama(a, env, &cmd[1..]);
    }
    let (engine, rest, mut model) = recognise(cmd)?;
    let (rest, config_note) = match engine {
        Engine::Vllm => with_config_file(rest)?,
        _ => (rest, None),
    };
    // llama.cpp reads its LLAMA_ARG_* variables first, so the command line's flags win.
    let (env, rest) = match engine {
        Engine::LlamaCpp => {
            let mut from_env = Vec::new();
            let mut kept = Vec::new();
            for e in env {
                let (k, v) = e.split_once('=').expect("split_env keeps NAME=value only");
                match super::llama_env::flags(k, v) {
                    Some(f) => from_env.extend(f),
                    None => kept.push(e.clone()),
                }
            }
            from_env.extend(rest);
            (kept, from_env)
        }
        _ => (env.to_vec(), rest),
    };
    let mut out: Vec<String> = Vec::new();
    let (mut ignored, mut unknown) = (Vec::new(), Vec::new());
    let mut kv: [Option<String>; 2] = [None, None];
    // vLLM settings that capture no CUDA graphs (`-O0`, `cudagraph_mode: NONE`), read as
    // `--enforce-eager`.
    let mut eager: Vec<String> = Vec::new();
    // vLLM settings that keep CUDA graphs (their memory stays vram's stated estimate).
    let mut graphs: Vec<String> = Vec::new();
    // What `--compilation-config` and `-O` set of the CUDA graphs.
    let mut compilation = Compilation::default();
    // `--speculative-config` as a JSON object and its dotted keys (`--speculative-config.method
    // ngram`), merged as vLLM merges them (vllm/utils/argparse_utils.py): a dotted value is read
    // as JSON when it parses, else as text.
    let mut speculative = serde_json::Map::new();
    // llama.cpp's `-hf REPO[:QUANT]` and `-hff FILE` (common/arg.cpp).
    let (mut hf, mut hf_file) = (None::<String>, None::<String>);
    // llama.cpp's `-dev CUDA0,CUDA1`: the GPUs it offloads to.
    let mut devices = None::<String>;
    let mut i = 0;
    while i < rest.len() {
        let tok = rest[i].as_str();
        let (flag, inline) = match tok.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f.to_string(), Some(v.to_string())),
            _ => (tok.to_string(), None),
        };
        // vLLM reads `--max_model_len` as `--max-model-len`: underscores become dashes between
        // the `--` and the first `.` (vllm/utils/argparse_utils.py `parse_args`).
        let flag = match engine {
            Engine::Vllm if flag.starts_with("--") => match flag.split_once('.') {
                Some((head, tail)) => format!("{}.{tail}", head.replace('_', "-")),
                None => flag.replace('_', "-"),
            },
            _ => flag,
        };
        let flag = flag.as_str();
        let next = |i: &mut usize| -> Result<String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            *i += 1;
            rest.get(*i).cloned().ok_or_else(|| UsageError(format!("{flag} in the pasted command has no value")).into())
        };
        // An argparse `nargs="+"` flag: its first value, then every following word that is not
        // a flag.
        let many = |i: &mut usize| -> Result<Vec<String>> {
            let mut v = vec![next(i)?];
            while inline.is_none() && rest.get(*i + 1).is_some_and(|t| !t.starts_with('-')) {
                *i += 1;
                v.push(rest[*i].clone());
            }
            Ok(v)
        };
        if !flag.starts_with('-') {
            if model.is_none() && matches!(engine, Engine::Vllm | Engine::Sglang) {
                model = Some(flag.to_string());
            } else {
                unknown.push(flag.to_string());
            }
            i += 1;
            continue;
        }
        match engine {
            Engine::Vllm => {
                if flag == "--model" {
                    model = Some(next(&mut i)?);
                } else if let Some(level) = optimization_level(flag, inline.as_deref(), &rest, &mut i) {
                    let level = level?;
                    if level.starts_with('{') {
                        // An older vLLM's `-O '{json}'` is a compilation config.
                        compilation.read(&format!("-O {level}"), &level)?;
                    } else if level == "0" {
                        eager.push(format!("-O {level}"));
                    } else if level == "1" {
                        // OPTIMIZATION_LEVEL_01 (vllm/config/vllm.py): piecewise graphs only.
                        compilation.level_mode = Some("PIECEWISE".into());
                    }
                } else if flag == "--speculative-config" {
                    let v = next(&mut i)?;
                    match serde_json::from_str::<serde_json::Value>(&v) {
                        Ok(serde_json::Value::Object(obj)) => speculative.extend(obj),
                        _ => return Err(UsageError(format!("--speculative-config in the pasted command is not a JSON object: {v}")).into()),
                    }
                } else if let Some(key) = flag.strip_prefix("--speculative-config.").filter(|k| !k.is_empty()) {
                    let v = next(&mut i)?;
                    let value = serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v));
                    speculative.insert(key.replace('-', "_"), value);
                } else if let Some(key) = compilation_config_key(flag) {
                    let v = next(&mut i)?;
                    match key {
                        "" => compilation.read(&format!("{flag} {v}"), &v)?,
                        key => compilation.key(&format!("{flag} {v}"), key, &serde_json::Value::String(v.clone()))?,
                    }
                } else if let Some((_, ours)) = VLLM_VALUE.iter().find(|(f, _)| *f == flag) {
                    let v = next(&mut i)?;
                    // vLLM's human-readable integers (`32k` = 32,000, `32K` = 32,768).
                    let v = match *ours {
                        "--max-model-len" | "--max-num-batched-tokens" | "--kv-cache-memory-bytes" => {
                            vram_core::units::parse_vllm_int(&v).map_or(v, |n| n.to_string())
                        }
                        _ => v,
                    };
                    out.extend([ours.to_string(), v]);
                } else if VLLM_FLAG.contains(&flag) {
                    out.push(flag.to_string());
                } else if flag == "-ep" {
                    out.push("--enable-expert-parallel".into());
                } else if VLLM_MANY_VALUES.contains(&flag) {
                    let v = many(&mut i)?;
                    let read = format!("{flag} {}", v.join(" "));
                    if VLLM_MANY_VALUES_READ.contains(&flag) {
                        out.push(flag.to_string());
                        out.extend(v);
                    } else {
                        ignored.push(read);
                    }
                } else if VLLM_NO_MEMORY.contains(&flag) {
                    ignored.push(format!("{flag} {}", next(&mut i)?));
                } else if VLLM_NO_MEMORY_FLAG.contains(&flag) {
                    ignored.push(flag.to_string());
                } else if flag.strip_prefix("--no-").is_some_and(|f| {
                    ["--enforce-eager", "--enable-lora", "--language-model-only", "--trust-remote-code"]
                        .contains(&format!("--{f}").as_str())
                }) {
                    // The `--no-` form of a switch that is off by default (a config file's `false`).
                    ignored.push(flag.to_string());
                } else if VLLM_UNMODELLED.contains(&flag) {
                    // Some take a value, some are switches: name it with what follows, if anything.
                    let set = with_value(flag, inline.as_deref(), &rest, &mut i);
                    return Err(UsageError(format!(
                        "the pasted vLLM command sets {set}, which changes memory in a way vram does not model yet; drop it to see the rest"
                    ))
                    .into());
                } else {
                    unknown.push(with_value(flag, inline.as_deref(), &rest, &mut i));
                }
            }
            Engine::Sglang => {
                if flag == "--model-path" || flag == "--model" {
                    model = Some(next(&mut i)?);
                } else if let Some((_, ours)) = SGLANG_VALUE.iter().find(|(f, _)| *f == flag) {
                    out.extend([ours.to_string(), next(&mut i)?]);
                } else if SGLANG_FLAG.contains(&flag) {
                    out.push(flag.to_string());
                } else if SGLANG_MANY_VALUES.contains(&flag) {
                    let v = many(&mut i)?;
                    out.push(flag.to_string());
                    out.extend(v);
                } else if SGLANG_NO_MEMORY.contains(&flag) {
                    ignored.push(format!("{flag} {}", next(&mut i)?));
                } else if SGLANG_NO_MEMORY_FLAG.contains(&flag) {
                    ignored.push(flag.to_string());
                } else if SGLANG_UNMODELLED.contains(&flag) {
                    return Err(UsageError(format!(
                        "the pasted SGLang command sets {flag}, which changes memory in a way vram does not model yet; drop it to see the rest"
                    ))
                    .into());
                } else {
                    unknown.push(with_value(flag, inline.as_deref(), &rest, &mut i));
                }
            }
            Engine::LlamaCpp => {
                if flag == "-fa" || flag == "--flash-attn" {
                    // `-fa` alone (older llama.cpp) is on; newer ones take on|off|auto.
                    let v = match (&inline, rest.get(i + 1).map(String::as_str)) {
                        (Some(v), _) => v.clone(),
                        (None, Some(v @ ("on" | "off" | "auto"))) => {
                            i += 1;
                            v.to_string()
                        }
                        _ => "on".into(),
                    };
                    out.extend(["--flash-attn".into(), v]);
                } else if let Some(kind) = kv_flag(flag) {
                    kv[kind] = Some(next(&mut i)?);
                } else if matches!(flag, "-hf" | "-hfr" | "--hf-repo") {
                    hf = Some(next(&mut i)?);
                } else if matches!(flag, "-hff" | "--hf-file") {
                    hf_file = Some(next(&mut i)?);
                } else if let Some((_, ours)) = LLAMA_VALUE.iter().find(|(f, _)| *f == flag) {
                    let v = next(&mut i)?;
                    if *ours == "-m" {
                        model = Some(v);
                    } else {
                        out.extend([ours.to_string(), v]);
                    }
                } else if let Some((_, ours)) = LLAMA_FLAG.iter().find(|(f, _)| *f == flag) {
                    out.push(ours.to_string());
                } else if LLAMA_NO_MEMORY.contains(&flag) {
                    ignored.push(format!("{flag} {}", next(&mut i)?));
                } else if LLAMA_NO_MEMORY_FLAG.contains(&flag) {
                    ignored.push(flag.to_string());
                } else if flag == "--lora" {
                    // Comma-separated files (common/arg.cpp), each loaded.
                    for f in next(&mut i)?.split(',').filter(|f| !f.is_empty()) {
                        out.extend(["--lora".into(), f.to_string()]);
                    }
                } else if flag == "--lora-scaled" {
                    // FNAME:SCALE[,…] (common/arg.cpp); 2024 builds took FNAME SCALE as two
                    // arguments. The scale changes no memory.
                    let v = next(&mut i)?;
                    let old_form = !v.contains(':') && rest.get(i + 1).is_some_and(|s| s.parse::<f32>().is_ok());
                    if old_form {
                        i += 1;
                        out.extend(["--lora".into(), v]);
                    } else {
                        for item in v.split(',') {
                            match item.rsplit_once(':') {
                                Some((f, s)) if !f.is_empty() && s.parse::<f32>().is_ok() => out.extend(["--lora".into(), f.to_string()]),
                                _ => {
                                    return Err(UsageError(format!(
                                        "the pasted llama.cpp command gives --lora-scaled `{item}`: llama.cpp takes FNAME:SCALE (comma-separated for several)"
                                    ))
                                    .into())
                                }
                            }
                        }
                    }
                } else if matches!(flag, "-dev" | "--device") {
                    devices = Some(next(&mut i)?);
                } else if LLAMA_UNMODELLED.contains(&flag) {
                    return Err(UsageError(format!(
                        "the pasted llama.cpp command sets {flag}, which changes memory in a way vram does not model yet; drop it to see the rest"
                    ))
                    .into());
                } else {
                    unknown.push(with_value(flag, inline.as_deref(), &rest, &mut i));
                }
            }
        }
        i += 1;
    }
    if let Some(t) = kv_type(&kv)? {
        out.extend(["--kv-cache-dtype".into(), t]);
    }
    if !speculative.is_empty() {
        out.extend(["--speculative-config".to_string(), serde_json::Value::Object(speculative).to_string()]);
    }
    let (graph_args, none, other) = compilation.finish();
    eager.extend(none);
    graphs.extend(other);
    if eager.is_empty() {
        out.extend(graph_args);
    }
    if !eager.is_empty() && !out.iter().any(|f| f == "--enforce-eager") {
        out.push("--enforce-eager".into());
    }
    let mut hf_note = None;
    if let Some(spec) = hf {
        if model.is_some() {
            return Err(UsageError("the pasted llama.cpp command gives both -m and -hf: keep one".into()).into());
        }
        let (repo, quant) = match spec.rsplit_once(':') {
            Some((r, q)) if !q.is_empty() && !q.contains('/') => (r.to_string(), Some(q.to_string())),
            _ => (spec.clone(), None),
        };
        // -hff names the file; else the quant after ':', else Q4_K_M, llama.cpp's default.
        let quant = match (hf_file, quant) {
            (Some(f), _) => crate::source::hub_gguf::quant_label(&f),
            (None, Some(q)) => q,
            (None, None) => {
                hf_note = Some(format!(
                    "-hf {repo} names no quant: llama.cpp takes Q4_K_M (or, failing that, the repository's first file); planned as {repo}:Q4_K_M"
                ));
                "Q4_K_M".to_string()
            }
        };
        model = Some(format!("{repo}:{quant}"));
        out.extend(["--engine".into(), "llama.cpp".into()]);
    } else if hf_file.is_some() {
        return Err(
            UsageError("the pasted llama.cpp command gives -hff without -hf: -hff names a file of the -hf repository".into()).into()
        );
    }
    let model = model.ok_or_else(|| {
        UsageError(
            "the pasted command names no model (vllm serve MODEL, --model, --model-path, llama-server -m FILE or -hf REPO[:QUANT])".into(),
        )
    })?;
    let mut argv: Vec<String> = vec!["serve".into(), "--model".into(), model, "--gpu".into(), a.gpu.clone()];
    if matches!(engine, Engine::Sglang) {
        argv.extend(["--engine".into(), "sglang".into()]);
    }
    if a.json {
        argv.push("--json".into());
    }
    // vram's own settings, which no engine flag carries, stay beside the pasted command.
    for (flag, v) in [
        ("--non-torch-memory", &a.non_torch_memory),
        ("--cuda-context", &a.cuda_context),
        ("--vllm-version", &a.vllm_version),
        ("--cuda-graph-memory", &a.cuda_graph_memory),
    ] {
        if let Some(v) = v {
            argv.extend([flag.to_string(), v.clone()]);
        }
    }
    if a.approximate_architecture {
        argv.push("--approximate-architecture".into());
    }
    // vLLM's own environment switches that change its profile run: the model runner and, on
    // releases that still have it, the V0 engine (vllm/envs.py).
    let mut env: Vec<String> = env;
    if matches!(engine, Engine::Vllm) {
        env.retain(|e| {
            let (k, v) = e.split_once('=').expect("split_env keeps NAME=value only");
            let on = matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true");
            let off = matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false");
            match k {
                "VLLM_USE_V2_MODEL_RUNNER" if on || off => {
                    out.extend(["--model-runner".into(), if on { "v2" } else { "v1" }.into()]);
                    false
                }
                "VLLM_USE_V1" if on || off => {
                    out.extend(["--vllm-engine".into(), if on { "v1" } else { "v0" }.into()]);
                    false
                }
                // gpu_worker.py: the CUDA-graph estimate is taken off the KV budget only while
                // this is set (default 1).
                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" if off => {
                    out.extend(["--cuda-graph-memory".into(), "0".into()]);
                    false
                }
                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" if on => false,
                // topk_topp_sampler.py: FlashInfer's top-k/top-p sampling instead of PyTorch's sort.
                "VLLM_USE_FLASHINFER_SAMPLER" if on || off => {
                    out.extend(["--flashinfer-sampler".into(), if on { "on" } else { "off" }.into()]);
                    false
                }
                _ => true,
            }
        });
    }
    // Environment that changes no GPU memory: which GPUs (CUDA_VISIBLE_DEVICES; for llama.cpp
    // also how many, as -dev), NCCL and Ray transport, Hub access, logging, CPU threads.
    let mut visible = None::<u64>;
    env.retain(|e| {
        let (k, v) = e.split_once('=').expect("split_env keeps NAME=value only");
        if k == "CUDA_VISIBLE_DEVICES" {
            if matches!(engine, Engine::LlamaCpp) && !v.trim().is_empty() {
                visible = Some(v.split(',').count() as u64);
            } else {
                ignored.push(e.clone());
            }
            return false;
        }
        let quiet = ["NCCL_", "RAY_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "OMP_", "MKL_", "TOKENIZERS_", "VLLM_LOGGING_"]
            .iter()
            .any(|p| k.starts_with(p))
            || ["CUDA_DEVICE_ORDER", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_HOST_IP", "VLLM_PORT", "VLLM_CONFIGURE_LOGGING"].contains(&k);
        if quiet {
            ignored.push(e.clone());
        }
        !quiet
    });
    // How many GPUs the machine has is vram's own flag, not the engine's: keep it, unless
    // llama.cpp's `-dev` (or CUDA_VISIBLE_DEVICES) names the GPUs it uses.
    let from_env = || visible.filter(|_| devices.is_none()).map(Ok);
    match (devices.as_deref().map(device_count).or_else(from_env).transpose()?, a.gpus) {
        (Some(d), Some(n)) if d != n => {
            return Err(UsageError(format!(
                "--gpus {n} but the pasted command's {} names {d} GPU(s): llama.cpp uses the devices it lists; drop --gpus",
                devices.map_or_else(|| "CUDA_VISIBLE_DEVICES".to_string(), |d| format!("-dev {d}"))
            ))
            .into())
        }
        (Some(n), _) | (None, Some(n)) => argv.extend(["--gpus".into(), n.to_string()]),
        (None, None) => {}
    }
    argv.extend(out);
    let args = ServeOnly::try_parse_from(&argv).map_err(|e| UsageError(format!("the pasted command does not translate: {e}")))?.args;
    let mut notes = vec![format!(
        "read from the pasted {} command: {}",
        match engine {
            Engine::Vllm => "vLLM",
            Engine::Sglang => "SGLang",
            Engine::LlamaCpp => "llama.cpp",
        },
        argv[1..].iter().filter(|s| *s != "--json").cloned().collect::<Vec<_>>().join(" ")
    )];
    notes.extend(hf_note);
    notes.extend(config_note);
    if !eager.is_empty() {
        notes.push(format!(
            "{} captures no CUDA graphs (vllm/config/vllm.py: -O0 compiles nothing and sets cudagraph_mode NONE): planned as --enforce-eager",
            eager.join(", ")
        ));
    }
    if !graphs.is_empty() {
        notes.push(format!(
            "read, CUDA graphs kept (their memory is the estimate stated below, not derived from these settings): {}",
            graphs.join(", ")
        ));
    }
    if !ignored.is_empty() {
        notes.push(format!("ignored (no effect on GPU memory): {}", ignored.join(", ")));
    }
    unknown.extend(env.iter().cloned());
    if !unknown.is_empty() {
        notes.push(format!("NOT UNDERSTOOD, so not modelled (check they change no memory): {}", unknown.join(", ")));
    }
    Ok(Pasted { args, notes })
}

/// The GPUs llama.cpp's `-dev`/`--device` list names (common/arg.cpp `parse_device_list`:
/// comma-separated backend devices; `none` offloads nothing).
fn device_count(list: &str) -> Result<u64> {
    if list.trim() == "none" {
        return Err(UsageError(
            "the pasted llama.cpp command has -dev none: it offloads nothing and uses no GPU memory; drop -dev none to plan the GPUs"
                .into(),
        )
        .into());
    }
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(bad) = names.iter().find(|n| !n.starts_with("CUDA") && !n.starts_with("ROCm") && !n.starts_with("Vulkan")) {
        return Err(UsageError(format!(
            "-dev {list}: `{bad}` is not a GPU device vram plans (CUDA0, CUDA1, …, as `llama-server --list-devices` prints them)"
        ))
        .into());
    }
    Ok(names.len() as u64)
}

/// `-ctk`/`--cache-type-k` → 0, `-ctv`/`--cache-type-v` → 1.
fn kv_flag(flag: &str) -> Option<usize> {
    match flag {
        "-ctk" | "--cache-type-k" => Some(0),
        "-ctv" | "--cache-type-v" => Some(1),
        _ => None,
    }
}

/// The one KV type vram plans from llama.cpp's `-ctk`/`-ctv` (each defaults to f16); different
/// K and V types are refused rather than averaged.
pub(super) fn kv_type(kv: &[Option<String>; 2]) -> Result<Option<String>> {
    if kv.iter().all(Option::is_none) {
        return Ok(None);
    }
    let (k, v) = (kv[0].as_deref().unwrap_or("f16"), kv[1].as_deref().unwrap_or("f16"));
    if k != v {
        return Err(UsageError(format!(
            "the command caches K as {k} and V as {v}; vram plans one KV type: give -ctk and -ctv the same type"
        ))
        .into());
    }
    Ok(Some(k.to_string()))
}

/// Leading `NAME=value` environment assignments (after an `env` that runs them, if any), and
/// the command after them.
fn split_env(cmd: &[String]) -> (&[String], &[String]) {
    let cmd = match cmd.first() {
        Some(e) if e.rsplit('/').next() == Some("env") => &cmd[1..],
        _ => cmd,
    };
    let is_env = |t: &String| {
        t.split_once('=')
            .is_some_and(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'))
    };
    let n = cmd.iter().take_while(|t| is_env(t)).count();
    cmd.split_at(n)
}

/// Ollama environment variables that change no GPU memory vram accounts.
const OLLAMA_NO_MEMORY: &[&str] = &[
    "OLLAMA_HOST",
    "OLLAMA_KEEP_ALIVE",
    "OLLAMA_MAX_KEEP_ALIVE",
    "OLLAMA_MODELS",
    "OLLAMA_ORIGINS",
    "OLLAMA_DEBUG",
    "OLLAMA_MAX_QUEUE",
    "OLLAMA_MAX_LOADED_MODELS",
    "OLLAMA_NOPRUNE",
    "OLLAMA_NOHISTORY",
    "OLLAMA_LOAD_TIMEOUT",
];

/// `[ENV=…] ollama serve` / `ollama run NAME [/set parameter num_ctx N]`, read as Ollama reads it
/// (vram_core::ollama has the sources). An Ollama model name cannot be resolved offline, so the
/// model's GGUF comes from `--model`.
fn ollama(a: &ServeArgs, env: &[String], rest: &[String]) -> Result<Pasted> {
    let (mut out, mut ignored, mut unknown) = (Vec::<String>::new(), Vec::new(), Vec::new());
    let name = match rest.first().map(String::as_str) {
        Some("serve") => None,
        Some("run") => Some(rest.get(1).ok_or_else(|| UsageError("`ollama run` needs a model name".into()))?.clone()),
        other => {
            return Err(UsageError(format!(
                "`ollama {}` starts no model: paste `ollama serve` or `ollama run NAME` (with its OLLAMA_* variables in front)",
                other.unwrap_or("")
            ))
            .into())
        }
    };
    // `ollama run hf.co/org/name[:QUANT]` pulls a GGUF from the Hub: Q4_K_M unless named
    // (Ollama's docs/huggingface.md), planned from the repository's headers.
    let hub = name.as_deref().filter(|n| n.starts_with("hf.co/") || n.starts_with("huggingface.co/")).map(|n| {
        let n = n.trim_start_matches("hf.co/").trim_start_matches("huggingface.co/");
        match n.rsplit_once(':') {
            Some((r, q)) if !q.is_empty() && !q.eq_ignore_ascii_case("latest") => format!("{r}:{q}"),
            Some((r, _)) => format!("{r}:Q4_K_M"),
            None => format!("{n}:Q4_K_M"),
        }
    });
    let path = hub.clone().filter(|_| a.model.is_none()).or_else(|| a.model.clone().filter(|m| m.to_ascii_lowercase().ends_with(".gguf"))).ok_or_else(|| {
        UsageError(format!(
            "Ollama model names{} cannot be resolved offline: give the model's GGUF with --model FILE.gguf (`ollama show --modelfile NAME` prints its FROM path, a blob under ~/.ollama/models/blobs; name the copy or link *.gguf)",
            name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default()
        ))
    })?;
    let tail = if name.is_some() { &rest[2.min(rest.len())..] } else { &rest[1.min(rest.len())..] };
    let mut num_ctx = None;
    let mut i = 0;
    while i < tail.len() {
        if tail[i] == "/set"
            && tail.get(i + 1).map(String::as_str) == Some("parameter")
            && tail.get(i + 2).map(String::as_str) == Some("num_ctx")
        {
            num_ctx = Some(tail.get(i + 3).ok_or_else(|| UsageError("`/set parameter num_ctx` has no value".into()))?.clone());
            i += 4;
        } else {
            unknown.push(tail[i].clone());
            i += 1;
        }
    }
    for e in env {
        let (k, v) = e.split_once('=').expect("split_env keeps NAME=value only");
        match k {
            "OLLAMA_NUM_PARALLEL" => out.extend(["--parallel".into(), v.into()]),
            "OLLAMA_FLASH_ATTENTION" => out.extend(["--flash-attn".into(), v.into()]),
            "OLLAMA_KV_CACHE_TYPE" => out.extend(["--kv-cache-dtype".into(), v.into()]),
            "OLLAMA_CONTEXT_LENGTH" => {
                num_ctx.get_or_insert_with(|| v.to_string());
            }
            k if OLLAMA_NO_MEMORY.contains(&k) => ignored.push(e.clone()),
            _ => unknown.push(e.clone()),
        }
    }
    let mut argv: Vec<String> =
        vec!["serve".into(), "--model".into(), path, "--gpu".into(), a.gpu.clone(), "--engine".into(), "ollama".into()];
    if let Some(n) = a.num_ctx.map(|n| n.to_string()).or(num_ctx) {
        argv.extend(["--num-ctx".into(), n]);
    }
    if let Some(n) = a.gpus {
        argv.extend(["--gpus".into(), n.to_string()]);
    }
    if a.json {
        argv.push("--json".into());
    }
    argv.extend(out);
    let args = ServeOnly::try_parse_from(&argv).map_err(|e| UsageError(format!("the pasted Ollama command does not translate: {e}")))?.args;
    let mut notes = vec![format!(
        "read from the pasted Ollama command: {}",
        argv[1..].iter().filter(|s| *s != "--json").cloned().collect::<Vec<_>>().join(" ")
    )];
    if !ignored.is_empty() {
        notes.push(format!("ignored (no effect on GPU memory): {}", ignored.join(", ")));
    }
    if !unknown.is_empty() {
        notes.push(format!("NOT UNDERSTOOD, so not modelled (check they change no memory): {}", unknown.join(", ")));
    }
    Ok(Pasted { args, notes })
}

/// vLLM's `--config FILE.yaml` spliced in as vLLM splices it (vllm/utils/argparse_utils.py
/// `_pull_args_from_config`): after a positional model, before the other flags, so that a flag
/// on the command line overrides the file's.
fn with_config_file(rest: Vec<String>) -> Result<(Vec<String>, Option<String>)> {
    let at = rest.iter().position(|t| t == "--config" || t.starts_with("--config="));
    let Some(at) = at else { return Ok((rest, None)) };
    let (path, len) = match rest[at].strip_prefix("--config=") {
        Some(p) => (p.to_string(), 1),
        None => (rest.get(at + 1).cloned().ok_or_else(|| UsageError("--config in the pasted command names no file".into()))?, 2),
    };
    if rest.iter().skip(at + len).any(|t| t == "--config" || t.starts_with("--config=")) {
        return Err(UsageError("the pasted command gives --config twice; vLLM takes one config file".into()).into());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| UsageError(format!("--config {path}: cannot read it ({e})")))?;
    let file = super::vllm_config::args(&path, &text)?;
    let note = format!("--config {path}: its settings read as flags before the command line's ({})", file.join(" "));
    let positional = usize::from(rest.first().is_some_and(|t| !t.starts_with('-')));
    let mut out: Vec<String> = rest[..positional].to_vec();
    out.extend(file);
    out.extend(rest[positional..at].iter().cloned());
    out.extend(rest[at + len..].iter().cloned());
    Ok((out, Some(note)))
}

/// vLLM's optimization level: `-O3`, `-O=3`, `-O 3` or `--optimization-level 3`
/// (vllm/utils/argparse_utils.py turns the short forms into the long one). `None` when `flag` is
/// none of them; an error for a level other than 0–3.
fn optimization_level(flag: &str, inline: Option<&str>, rest: &[String], i: &mut usize) -> Option<Result<String>> {
    let level = if flag == "--optimization-level" || flag == "-O" {
        match inline {
            Some(v) => v.to_string(),
            None => {
                *i += 1;
                match rest.get(*i) {
                    Some(v) => v.clone(),
                    None => return Some(Err(UsageError(format!("{flag} in the pasted command has no value")).into())),
                }
            }
        }
    } else if let Some(v) = flag.strip_prefix("-O").filter(|v| !v.is_empty() && !flag.starts_with("--")) {
        v.to_string()
    } else {
        return None;
    };
    Some(match level.as_str() {
        "0" | "1" | "2" | "3" => Ok(level),
        l if l.starts_with('{') => Ok(level),
        other => Err(UsageError(format!(
            "-O {other} in the pasted command: vLLM's optimization levels are 0–3, or an older vLLM's compilation config as JSON"
        ))
        .into()),
    })
}

/// `--compilation-config` / `-cc` (`Some("")`, a JSON object follows) or one of its keys,
/// `--compilation-config.KEY` / `-cc.KEY` (`Some("KEY")`).
fn compilation_config_key(flag: &str) -> Option<&str> {
    ["--compilation-config", "-cc"].iter().find_map(|p| match flag.strip_prefix(p)? {
        "" => Some(""),
        rest => rest.strip_prefix('.'),
    })
}

/// What a pasted command's `--compilation-config` (a JSON object, or its dotted keys) and `-O`
/// set of the CUDA graphs: vram's flags for the keys it models, the settings that turn graphs
/// off, and the keys it does not read.
#[derive(Default)]
struct Compilation {
    mode: Option<String>,
    /// `-O1`'s mode, which a given `cudagraph_mode` overrides.
    level_mode: Option<String>,
    sizes: Option<Vec<u64>>,
    max: Option<u64>,
    /// The settings that set `cudagraph_mode` NONE, as written.
    none: Vec<String>,
    /// Keys vram does not model, as written.
    other: Vec<String>,
}

impl Compilation {
    /// A JSON object: each key in turn.
    fn read(&mut self, written: &str, json: &str) -> Result<()> {
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| UsageError(format!("--compilation-config in the pasted command is not a JSON object ({e}): {json}")))?;
        let Some(obj) = v.as_object() else {
            return Err(UsageError(format!("--compilation-config in the pasted command is not a JSON object: {json}")).into());
        };
        for (k, v) in obj {
            self.key(written, k, v)?;
        }
        Ok(())
    }

    /// One key (`cudagraph_mode`, or `-cc.cudagraph_mode`'s dotted form).
    fn key(&mut self, written: &str, key: &str, v: &serde_json::Value) -> Result<()> {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let bad = |what: &str| UsageError(format!("{written}: {key} must be {what}, as vLLM reads it"));
        match key.replace('-', "_").as_str() {
            "cudagraph_mode" => {
                if text.eq_ignore_ascii_case("none") {
                    self.none.push(written.to_string());
                }
                self.mode = Some(text);
            }
            "max_cudagraph_capture_size" => self.max = Some(text.trim().parse().map_err(|_| bad("a number of tokens"))?),
            "cudagraph_capture_sizes" => {
                let list: serde_json::Value = match v {
                    serde_json::Value::String(s) => serde_json::from_str(s).map_err(|_| bad("a list of numbers"))?,
                    other => other.clone(),
                };
                let sizes = list.as_array().and_then(|a| a.iter().map(serde_json::Value::as_u64).collect::<Option<Vec<u64>>>());
                self.sizes = Some(sizes.ok_or_else(|| bad("a list of numbers"))?);
            }
            _ => self.other.push(format!("{written} ({key})")),
        }
        Ok(())
    }

    /// vram's flags, the settings that turn graphs off, and the keys not read.
    fn finish(self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let mut args = Vec::new();
        if let Some(m) = self.mode.or(self.level_mode) {
            args.extend(["--cudagraph-mode".to_string(), m]);
        }
        if let Some(m) = self.max {
            args.extend(["--max-cudagraph-capture-size".to_string(), m.to_string()]);
        }
        if let Some(s) = self.sizes {
            args.push("--cudagraph-capture-sizes".into());
            args.extend(s.iter().map(u64::to_string));
        }
        let mut other = self.other;
        other.dedup();
        (args, self.none, other)
    }
}

/// An unknown flag with the value that follows it, if one does (`--foo 3`, `--foo=3`).
fn with_value(flag: &str, inline: Option<&str>, rest: &[String], i: &mut usize) -> String {
    if let Some(v) = inline {
        return format!("{flag}={v}");
    }
    match rest.get(*i + 1) {
        Some(v) if !v.starts_with('-') => {
            *i += 1;
            format!("{flag} {v}")
        }
        _ => flag.to_string(),
    }
}

/// Which engine the command launches, the tokens after the program, and a model given positionally.
fn recognise(cmd: &[String]) -> Result<(Engine, Vec<String>, Option<String>)> {
    let prog = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let first = cmd.first().map(|s| prog(s)).unwrap_or_default();
    match first.as_str() {
        "vllm" if cmd.get(1).map(String::as_str) == Some("serve") => Ok((Engine::Vllm, cmd[2..].to_vec(), None)),
        "python" | "python3" if cmd.get(1).map(String::as_str) == Some("-m") => match cmd.get(2).map(String::as_str) {
            Some("vllm.entrypoints.openai.api_server") => Ok((Engine::Vllm, cmd[3..].to_vec(), None)),
            Some("sglang.launch_server") => Ok((Engine::Sglang, cmd[3..].to_vec(), None)),
            Some(m) => Err(UsageError(format!(
                "`python -m {m}` is not a serving command vram knows (vllm.entrypoints.openai.api_server, sglang.launch_server)"
            ))
            .into()),
            None => Err(UsageError("the pasted command stops after `python -m`".into()).into()),
        },
        // `sglang serve MODEL …` (sglang/cli/serve.py: a leading positional is the model path).
        "sglang" if cmd.get(1).map(String::as_str) == Some("serve") => Ok((Engine::Sglang, cmd[2..].to_vec(), None)),
        "llama-server" => Ok((Engine::LlamaCpp, cmd[1..].to_vec(), None)),
        // llama-cli runs one sequence unless told otherwise (llama-server's 4 auto slots are the
        // server's own default).
        "llama-cli" => {
            let mut rest = cmd[1..].to_vec();
            if !rest.iter().any(|f| ["-np", "--parallel"].contains(&f.as_str()) || f.starts_with("--parallel=")) {
                rest.splice(0..0, ["-np".to_string(), "1".to_string()]);
            }
            Ok((Engine::LlamaCpp, rest, None))
        }
        other => Err(UsageError(format!(
            "`{other}` is not a serving command vram knows: paste `vllm serve MODEL …`, `python -m vllm.entrypoints.openai.api_server --model MODEL …`, `python -m sglang.launch_server --model-path MODEL …`, `sglang serve MODEL …` , `llama-server -m FILE …` or `[OLLAMA_…=…] ollama serve|run NAME` (with --model FILE.gguf)"
        ))
        .into()),
    }
}
