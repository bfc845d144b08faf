//! Raw command-line flags (clap). Resolution into core types happens in `resolve.rs`.

use clap::{Args, Parser, Subcommand};

/// How much GPU memory will this job take? Component by component, before you launch.
#[derive(Debug, Parser)]
#[command(name = "vram", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Estimate the peak GPU memory of a training or inference job, component by component.
    Estimate(EstimateArgs),
    /// Find the largest micro-batch that fits a GPU at a target utilization.
    Fit(FitArgs),
    /// Search distributed layouts (ZeRO/FSDP/TP/PP/CP) that fit, ranked by estimated step time.
    Plan(PlanArgs),
    /// Run a command and measure its GPU memory: peak per GPU, when, a timeline, an OOM verdict.
    Run(RunArgs),
    /// Every GPU and every process on it, live (q quits, s sorts), or `--once`.
    Watch(WatchArgs),
    /// Find the best batch size in the fewest real runs: `-- python train.py --bs {batch}`.
    Tune(TuneArgs),
    /// Serving capacity as vLLM computes it (KV blocks, tokens, concurrency), or llama.cpp for a .gguf.
    Serve(ServeArgs),
    /// Explain a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot): peaks, what was live, fragmentation.
    Explain(crate::explain::ExplainArgs),
    /// List the built-in model presets with their parameter counts.
    Models(ListArgs),
    /// List the GPU catalogue (memory, dense 16-bit TFLOP/s).
    Gpus(ListArgs),
}

/// `--json` only.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The job: model and how it is run.
#[derive(Debug, Args, Clone)]
pub struct JobArgs {
    /// A preset (`vram models`), a config.json, or a model directory (config.json + *.safetensors).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// `train` (one optimizer step) or `infer` (prefill + KV cache).
    #[arg(long, default_value = "train")]
    pub mode: String,
    /// Micro-batch size per GPU (HF `per_device_train_batch_size`).
    #[arg(
        long,
        short = 'b',
        default_value_t = 1,
        alias = "per-device-train-batch-size",
        alias = "per_device_train_batch_size",
        alias = "batch"
    )]
    pub batch_size: u64,
    /// Sequence length in tokens (inference: the whole context, prompt + generated).
    #[arg(long, short = 's', default_value_t = 2048, alias = "max-seq-length", alias = "context", alias = "max-model-len")]
    pub seq_len: u64,
    /// fp32, bf16-mixed, fp16-mixed, bf16, fp16; inference also fp8, int8, int4.
    /// Default: bf16-mixed for training, bf16 for inference.
    #[arg(long, short = 'p', alias = "dtype")]
    pub precision: Option<String>,
    /// adamw, adamw_torch_fused, adam, adamw-8bit, sgd, sgd-momentum, adafactor, lion (HF `optim` names work).
    #[arg(long, default_value = "adamw", alias = "optim")]
    pub optimizer: String,
    /// How torch runs the step: foreach (torch default on CUDA), fused, for-loop.
    #[arg(long)]
    pub optimizer_impl: Option<String>,
    /// Activation checkpointing: none, full (every layer; HF gradient_checkpointing), selective (attention).
    #[arg(long, default_value = "none", alias = "gradient-checkpointing")]
    pub checkpointing: String,
    /// sdpa (PyTorch picks the CUDA kernel), flash_attention_2, eager.
    #[arg(long, default_value = "sdpa", alias = "attn-implementation", alias = "attn_implementation")]
    pub attention: String,
    /// Gradient accumulation steps (HF `gradient_accumulation_steps`).
    #[arg(long, default_value_t = 1, alias = "gradient-accumulation-steps", alias = "gradient_accumulation_steps")]
    pub grad_accum: u64,
    /// Fused/chunked cross-entropy that never materialises the logits (Liger; HF `use_liger_kernel`).
    #[arg(long, alias = "use-liger-kernel", alias = "use_liger_kernel")]
    pub fused_cross_entropy: bool,
    /// Inference KV-cache dtype: auto (= compute dtype), fp8, bf16, fp16, fp32.
    #[arg(long, default_value = "auto", alias = "kv-cache-dtype")]
    pub kv_dtype: String,
    /// Inference prompt length processed by the prefill (default: the whole --seq-len).
    #[arg(long)]
    pub prompt_len: Option<u64>,
    /// Training forward builds a KV cache (HF `use_cache`; default: the config's value, off with
    /// gradient checkpointing). Many fine-tuning scripts set it false.
    #[arg(long, alias = "use_cache")]
    pub use_cache: Option<String>,
    /// Assumed CUDA context + library handles per process (e.g. 512MiB).
    #[arg(long)]
    pub cuda_context: Option<String>,
    /// Assumed cuBLAS workspaces (e.g. 64MiB).
    #[arg(long)]
    pub cublas_workspace: Option<String>,
    /// Assumed caching-allocator reserve as a fraction of peak allocated (e.g. 0.05).
    #[arg(long)]
    pub allocator_reserve: Option<f64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Distributed layout flags (per-GPU estimate of the most loaded rank).
#[derive(Debug, Args, Clone, Default)]
pub struct ParallelArgs {
    /// Total GPUs (default: nodes × gpus-per-node, or 1).
    #[arg(long)]
    pub gpus: Option<u64>,
    /// Nodes.
    #[arg(long)]
    pub nodes: Option<u64>,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u64,
    /// DeepSpeed ZeRO stage: 0, 1, 2 or 3.
    #[arg(long)]
    pub zero: Option<u8>,
    /// Offload to the CPU: optimizer, params (implies optimizer) — DeepSpeed ZeRO / FSDP.
    #[arg(long)]
    pub offload: Option<String>,
    /// FSDP sharding: full_shard, shard_grad_op, hybrid_shard, no_shard.
    #[arg(long)]
    pub fsdp: Option<String>,
    /// Tensor parallel size (Megatron).
    #[arg(long, default_value_t = 1)]
    pub tp: u64,
    /// Pipeline parallel size (Megatron).
    #[arg(long, default_value_t = 1)]
    pub pp: u64,
    /// Megatron sequence parallelism (with --tp).
    #[arg(long)]
    pub sp: bool,
    /// Context parallel size.
    #[arg(long, default_value_t = 1)]
    pub cp: u64,
    /// Expert parallel size (MoE).
    #[arg(long, default_value_t = 1)]
    pub ep: u64,
    /// Virtual pipeline stages per GPU (interleaved 1F1B).
    #[arg(long, default_value_t = 1)]
    pub virtual_stages: u64,
    /// Megatron distributed optimizer.
    #[arg(long)]
    pub distributed_optimizer: bool,
    /// Assumed NCCL buffers per communicator (e.g. 256MiB).
    #[arg(long)]
    pub nccl_buffer: Option<String>,
}

/// `vram estimate`.
#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// The job.
    #[command(flatten)]
    pub job: JobArgs,
    /// Distributed layout.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// A GPU (`h100`, `a100-40gb`, `rtx-4090`) or a size (`24GiB`, `80GB`): show the share and whether it fits.
    #[arg(long, short = 'g')]
    pub gpu: Option<String>,
}

/// `vram fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// The job (its --batch-size is ignored: it is what is searched).
    #[command(flatten)]
    pub job: JobArgs,
    /// A GPU (`h20`, `h100`, `a100-40gb`) or a size (`24GiB`, `80GB`).
    #[arg(long, short = 'g')]
    pub gpu: String,
    /// Share of the GPU the total may use (0.85–0.95 is the sweet spot).
    #[arg(long, default_value_t = 0.85)]
    pub target_utilization: f64,
    /// Global batch size: the micro-batch must divide it; the rest is gradient accumulation.
    #[arg(long)]
    pub global_batch_size: Option<u64>,
    /// Model FLOPs utilisation assumed for the tokens/s column.
    #[arg(long, default_value_t = 0.40)]
    pub mfu: f64,
}

/// `vram plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The job (batch size and checkpointing are searched).
    #[command(flatten)]
    pub job: JobArgs,
    /// A GPU (`h100`, `a100-80gb`, …).
    #[arg(long, short = 'g')]
    pub gpu: String,
    /// Total GPUs.
    #[arg(long)]
    pub gpus: u64,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u64,
    /// Global batch in sequences (default: the smallest multiple of the GPU count with ≥ 4M tokens).
    #[arg(long)]
    pub global_batch_size: Option<u64>,
    /// Share of GPU memory a plan may use.
    #[arg(long, default_value_t = 0.90)]
    pub target_utilization: f64,
    /// Model FLOPs utilisation of compute.
    #[arg(long, default_value_t = 0.40)]
    pub mfu: f64,
    /// Network bandwidth per GPU between nodes, GB/s.
    #[arg(long)]
    pub inter_node_gbps: Option<f64>,
    /// How many plans to show.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Write the best plan for an engine: deepspeed (JSON), accelerate (YAML), torchrun (command).
    #[arg(long)]
    pub emit: Option<String>,
}

/// `vram run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Sampling interval (e.g. 50ms, 1s).
    #[arg(long, default_value = "100ms")]
    pub interval: String,
    /// Write a JSON report here.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Write the timeline here as it is sampled (.csv, or .jsonl).
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
    /// Write an SVG chart of memory over time here.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9400).
    #[arg(long)]
    pub metrics: Option<String>,
    /// With --model, also estimate this job (same flags as `vram estimate`) and compare.
    #[command(flatten)]
    pub job: JobArgs,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `vram watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Print one snapshot and exit.
    #[arg(long)]
    pub once: bool,
    /// JSON (with --once).
    #[arg(long)]
    pub json: bool,
    /// Refresh interval.
    #[arg(long, default_value = "1s")]
    pub interval: String,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9400).
    #[arg(long)]
    pub metrics: Option<String>,
}

/// `vram tune`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The job (its --batch-size is what is searched); the estimate seeds the search.
    #[command(flatten)]
    pub job: JobArgs,
    /// The GPU (`h100`, `24GiB`, …).
    #[arg(long, short = 'g')]
    pub gpu: String,
    /// Share of the GPU the chosen batch may use.
    #[arg(long, default_value_t = 0.9)]
    pub target_utilization: f64,
    /// Safety margin for sequence-length variance (--seq-len is the longest sample).
    #[arg(long, default_value_t = 0.02)]
    pub margin: f64,
    /// Most real runs.
    #[arg(long, default_value_t = 4)]
    pub max_trials: usize,
    /// Per-trial time limit (e.g. 10m); a trial past it is killed.
    #[arg(long, default_value = "30m")]
    pub timeout: String,
    /// NVML sampling interval.
    #[arg(long, default_value = "100ms")]
    pub interval: String,
    /// How a trial's peak is measured: nvml, or child-report (the child prints VRAM_PEAK_BYTES=<n>).
    #[arg(long, default_value = "nvml")]
    pub measure: String,
    /// Global batch size: the micro-batch divides it and {grad_accum} makes up the rest.
    #[arg(long)]
    pub global_batch_size: Option<u64>,
    /// The training command with {batch} (and optionally {grad_accum}), after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `vram serve`: flags keep vLLM's (and llama.cpp's) own spelling.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A preset, a config.json, a model directory, a Hub id (`org/name`) or a `.gguf` file.
    #[arg(long, short = 'm')]
    pub model: String,
    /// A GPU (`h100`, `a100-40gb`, `rtx-4090`) or a size (`24GiB`, `80GB`).
    #[arg(long, short = 'g')]
    pub gpu: String,
    /// Serving engine: vllm (llama.cpp is used for .gguf files).
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// vLLM `--tensor-parallel-size`.
    #[arg(long, alias = "tensor-parallel-size", default_value_t = 1)]
    pub tp: u64,
    /// vLLM `--max-model-len` (default: the model's max_position_embeddings).
    #[arg(long)]
    pub max_model_len: Option<u64>,
    /// vLLM `--gpu-memory-utilization`.
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// vLLM `--dtype`: auto, bfloat16, float16, float32.
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// vLLM `--quantization`: awq, gptq, fp8, bnb-4bit.
    #[arg(long)]
    pub quantization: Option<String>,
    /// vLLM `--kv-cache-dtype`: auto or fp8.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: String,
    /// vLLM `--block-size`.
    #[arg(long, default_value_t = 16)]
    pub block_size: u64,
    /// vLLM `--max-num-batched-tokens` (default: vLLM's for this GPU: 8192 on ≥70 GiB non-A100, else 2048).
    #[arg(long)]
    pub max_num_batched_tokens: Option<u64>,
    /// vLLM `--max-num-seqs` (default: 1024 on ≥70 GiB non-A100, else 256).
    #[arg(long)]
    pub max_num_seqs: Option<u64>,
    /// vLLM engine generation whose profile run to reproduce: v1 (default), or v0 (VLLM_USE_V1=0).
    #[arg(long, default_value = "v1")]
    pub vllm_engine: String,
    /// vLLM `--enforce-eager` (no CUDA graphs).
    #[arg(long)]
    pub enforce_eager: bool,
    /// Non-torch memory the profile run adds, as vLLM logs it (default: an assumption, stated).
    #[arg(long)]
    pub non_torch_memory: Option<String>,
    /// CUDA context per process, outside vLLM's budget (default 512MiB).
    #[arg(long)]
    pub cuda_context: Option<String>,
    /// llama.cpp `--n-gpu-layers` / `-ngl` for a .gguf model (default: all).
    #[arg(long, alias = "ngl")]
    pub n_gpu_layers: Option<u64>,
    /// llama.cpp `--ctx-size` / `-c` for a .gguf model (default: the model's context length).
    #[arg(long, alias = "ctx-size")]
    pub ctx_size: Option<u64>,
    /// llama.cpp `--ubatch-size` (default 512).
    #[arg(long, default_value_t = 512)]
    pub ubatch_size: u64,
    /// llama.cpp `--parallel` / `-np`: sequences sharing the one --ctx-size (each gets ctx / N).
    #[arg(long, default_value_t = 1)]
    pub parallel: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
