//! Raw command-line flags (clap). Resolution into core types happens in `resolve.rs`.

use clap::{Args, Parser, Subcommand};

/// How much GPU memory will this job take? Component by component, before you launch.
#[derive(Debug, Parser)]
#[command(name = "vram", version, about, long_about = None, propagate_version = true, after_help = crate::errors::EXIT_HELP)]
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
    Serve(Box<ServeArgs>),
    /// Explain a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot): peaks, what was live, fragmentation.
    Explain(crate::explain::ExplainArgs),
    /// List the built-in model presets with their parameter counts.
    Models(ListArgs),
    /// List the GPU catalogue (memory, dense 16-bit TFLOP/s).
    Gpus(ListArgs),
    /// Serve the browser page (web/, built by scripts/build-web.sh) on 127.0.0.1.
    Web(crate::commands::web::WebArgs),
}

/// `--json` only.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Largest --global-batch-size accepted (2^24 sequences; the largest published runs use ~2^12).
pub const MAX_GLOBAL_BATCH: u64 = 1 << 24;

/// The job: model and how it is run. Flags that only one mode reads are `Option`s so that
/// resolution can tell "not given" from "given" and reject them in the other mode.
#[derive(Debug, Args, Clone)]
pub struct JobArgs {
    /// A preset (`vram models`), a config.json, a model directory (config.json + *.safetensors),
    /// or a Hugging Face Hub id (`org/name[@revision]`).
    #[arg(long, short = 'm', help_heading = "Model")]
    pub model: Option<String>,
    /// Estimate an unknown or unsupported architecture anyway (marked APPROXIMATE). An unknown
    /// model_type given as a model directory or Hub id is approximated from its safetensors
    /// headers without this flag; the flag is needed for recognised but unsupported families and
    /// for a config.json given alone (then read as a Llama-style decoder from its keys).
    #[arg(long)]
    pub approximate_architecture: bool,
    /// Encoders (BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA): the head to train or run, as Hugging
    /// Face pipelines name the task: fill-mask, text-classification, token-classification,
    /// feature-extraction (sentence embeddings), replaced-token-detection (ELECTRA's
    /// discriminator) [default: the config's class]
    #[arg(long)]
    pub task: Option<String>,
    /// Encoders: classes of a classification head [default: the config's id2label, else 2]
    #[arg(long, alias = "num_labels")]
    pub num_labels: Option<u64>,
    /// The batches are padded to their longest sample (HF DataCollatorWithPadding): SDPA gets an
    /// explicit attention mask, runs memory-efficient attention and keeps a float bias per layer
    #[arg(long, help_heading = "Job")]
    pub padded: bool,
    /// Vision encoders, Qwen2-VL/2.5-VL/3-VL, Qwen3.5, LLaVA-NeXT and LLaVA-OneVision: image side in pixels; Idefics3/SmolVLM: the processor's size["longest_edge"], which decides the tiles; Llama 4: the square images' side, which decides its 336-px tiles [default: the config's image_size; Qwen 448; LLaVA-NeXT/OneVision the largest square grid pinpoint; Idefics3 4 × the tile; Llama 4 one tile]
    #[arg(long, alias = "image_size")]
    pub image_size: Option<u64>,
    /// Text encoder-decoders (BART, T5): source tokens the encoder runs; --seq-len is the
    /// target [default: BART's position table, T5's n_positions (512)]
    #[arg(long, aliases = ["source_len", "max-source-length", "max_source_length"])]
    pub source_len: Option<u64>,
    /// Vision-language models (LLaVA, LLaVA-NeXT, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma-3, Idefics3/SmolVLM, Llama 4; Qwen3.5 loads its vision tower): images per sample; their tokens are part of --seq-len [default: 1]
    #[arg(long, alias = "images_per_sample")]
    pub images_per_sample: Option<u64>,
    /// Vision-language models: train the projector and language model only (LLaMA-Factory
    /// `freeze_vision_tower`)
    #[arg(long, alias = "freeze_vision_tower")]
    pub freeze_vision_tower: bool,
    /// `train` (one optimizer step) or `infer` (prefill + KV cache).
    #[arg(long, default_value = "train", help_heading = "Job")]
    pub mode: String,
    /// Micro-batch size per GPU (HF `per_device_train_batch_size`) [default: 1]; fit, plan and
    /// tune search it.
    #[arg(
        long,
        short = 'b',
        alias = "per-device-train-batch-size",
        alias = "per_device_train_batch_size",
        alias = "batch",
        help_heading = "Job"
    )]
    pub batch_size: Option<u64>,
    /// Sequence length in tokens (inference: the whole context, prompt + generated) [default: 2048;
    /// vision encoders: the image's patches; vision-language models whose images need more: their
    /// image tokens + 512, rounded up to 128]
    #[arg(long, short = 's', alias = "max-seq-length", alias = "context", alias = "max-model-len", help_heading = "Job")]
    pub seq_len: Option<u64>,
    /// Training: gradient accumulation steps (HF `gradient_accumulation_steps`) [default: 1].
    #[arg(long, alias = "gradient-accumulation-steps", alias = "gradient_accumulation_steps", help_heading = "Job")]
    pub grad_accum: Option<u64>,
    /// Training: activation checkpointing: none, full (every layer; HF gradient_checkpointing),
    /// selective (attention) [default: none].
    #[arg(
        long,
        alias = "gradient-checkpointing",
        alias = "gradient_checkpointing",
        num_args = 0..=1,
        default_missing_value = "full",
        help_heading = "Job"
    )]
    pub checkpointing: Option<String>,
    /// Training: fused/chunked cross-entropy that never materialises the logits (Liger; HF `use_liger_kernel`).
    #[arg(long, alias = "use-liger-kernel", alias = "use_liger_kernel", help_heading = "Job")]
    pub fused_cross_entropy: bool,
    /// Training: the forward builds a KV cache (HF `use_cache`) [default: the config's value, off
    /// with gradient checkpointing]. Many fine-tuning scripts set it false.
    #[arg(long, alias = "use_cache", help_heading = "Job")]
    pub use_cache: Option<String>,
    /// Inference: prompt length processed by the prefill [default: the whole --seq-len].
    #[arg(long, help_heading = "Job")]
    pub prompt_len: Option<u64>,
    /// sdpa (PyTorch picks the CUDA kernel), flash_attention_2, eager.
    #[arg(long, default_value = "sdpa", alias = "attn-implementation", alias = "attn_implementation", help_heading = "Job")]
    pub attention: String,
    /// fp32, bf16-mixed, fp16-mixed, bf16, fp16; inference also fp8, int8, int4
    /// [default: bf16-mixed for training, bf16 for inference].
    #[arg(long, short = 'p', alias = "dtype", help_heading = "Precision & optimizer")]
    pub precision: Option<String>,
    /// Training: adamw, adamw_torch_fused, adam, adamw-8bit, sgd, sgd-momentum, adafactor, lion
    /// (HF `optim` names work) [default: adamw].
    #[arg(long, alias = "optim", help_heading = "Precision & optimizer")]
    pub optimizer: Option<String>,
    /// Training: how torch runs the step: foreach, fused, for-loop [default: foreach, torch's on
    /// CUDA, or what the --optimizer name implies].
    #[arg(long, help_heading = "Precision & optimizer")]
    pub optimizer_impl: Option<String>,
    /// Inference: KV-cache dtype: auto (= compute dtype), fp8, bf16, fp16, fp32 [default: auto].
    #[arg(long, alias = "kv-cache-dtype", help_heading = "Precision & optimizer")]
    pub kv_dtype: Option<String>,
    /// Assumed CUDA context + library handles per process, with a unit (e.g. 512MiB) [default: 512MiB].
    #[arg(long, help_heading = "Device assumptions")]
    pub cuda_context: Option<String>,
    /// Assumed cuBLAS workspaces, with a unit [default: 64MiB].
    #[arg(long, help_heading = "Device assumptions")]
    pub cublas_workspace: Option<String>,
    /// A flat caching-allocator reserve as a fraction of peak allocated, instead of simulating
    /// PyTorch's caching allocator over the job's allocation sequence (the default; jobs without
    /// a sequence — sharded, QLoRA, accumulation — get 0.05).
    #[arg(long, help_heading = "Device assumptions")]
    pub allocator_reserve: Option<f64>,
    /// Accepted for compatibility: the allocator model is now the default.
    #[arg(long, hide = true, conflicts_with = "allocator_reserve")]
    pub allocator_model: bool,
    /// PYTORCH_CUDA_ALLOC_CONF for the allocator model (default: the environment's), e.g.
    /// `expandable_segments:True,max_split_size_mb:512`.
    #[arg(long, help_heading = "Device assumptions", conflicts_with = "allocator_reserve")]
    pub alloc_conf: Option<String>,
    /// LoRA/QLoRA fine-tuning.
    #[command(flatten)]
    pub peft: PeftArgs,
    /// Print JSON instead of a table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// LoRA / DoRA adapters and the frozen base's loading (peft, bitsandbytes). TRL's spellings
/// (`--use_peft`, `--lora_r`, `--load_in_4bit` …) are accepted so its arguments paste as they are.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "LoRA / QLoRA (training)")]
pub struct PeftArgs {
    /// Train adapters on a frozen base: lora or dora.
    #[arg(long)]
    pub peft: Option<String>,
    /// TRL `--use_peft`: LoRA (same as --peft lora).
    #[arg(long, alias = "use_peft", num_args = 0..=1, default_missing_value = "true")]
    pub use_peft: Option<String>,
    /// peft/TRL `use_dora`: DoRA (same as --peft dora).
    #[arg(long, alias = "use_dora", num_args = 0..=1, default_missing_value = "true")]
    pub use_dora: Option<String>,
    /// LoRA rank r [default: 8, as peft].
    #[arg(long, alias = "lora_r")]
    pub lora_r: Option<u64>,
    /// lora_alpha [default: 8, as peft]: scales the update, changes no memory.
    #[arg(long, alias = "lora_alpha")]
    pub lora_alpha: Option<f64>,
    /// lora_dropout [default: 0.0]: above 0 each adapted module keeps a dropout mask.
    #[arg(long, alias = "lora_dropout")]
    pub lora_dropout: Option<f64>,
    /// Modules to adapt: all-linear or names (q_proj,v_proj or q_proj v_proj)
    /// [default: peft's default for the architecture].
    #[arg(long, alias = "lora_target_modules", alias = "target-modules", alias = "target_modules", num_args = 1.., value_delimiter = ',')]
    pub lora_target_modules: Option<Vec<String>>,
    /// Modules trained in full beside the adapters: embed_tokens, lm_head.
    #[arg(long, alias = "lora_modules_to_save", alias = "modules-to-save", alias = "modules_to_save", num_args = 1.., value_delimiter = ',')]
    pub lora_modules_to_save: Option<Vec<String>>,
    /// dtype the frozen base is loaded in (`torch_dtype`): bf16, fp16, fp32 [default: bf16; fp32
    /// with --precision fp32].
    #[arg(long, alias = "torch-dtype", alias = "torch_dtype")]
    pub base_dtype: Option<String>,
    /// QLoRA: load the base in 4 bits with bitsandbytes (`BitsAndBytesConfig(load_in_4bit=True)`).
    #[arg(long, alias = "load_in_4bit", num_args = 0..=1, default_missing_value = "true")]
    pub load_in_4bit: Option<String>,
    /// Load the base in 8 bits with bitsandbytes (LLM.int8).
    #[arg(long, alias = "load_in_8bit", num_args = 0..=1, default_missing_value = "true")]
    pub load_in_8bit: Option<String>,
    /// 4-bit data type: nf4 or fp4 [default: nf4, as TRL].
    #[arg(long, alias = "bnb_4bit_quant_type")]
    pub bnb_4bit_quant_type: Option<String>,
    /// Double quantization of the 4-bit block scales (`bnb_4bit_use_double_quant`).
    #[arg(
        long,
        alias = "use_bnb_nested_quant",
        alias = "bnb-4bit-use-double-quant",
        alias = "bnb_4bit_use_double_quant",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub use_bnb_nested_quant: Option<String>,
    /// dtype 4-bit weights are dequantized to for their matmuls [default: bf16].
    #[arg(long, alias = "bnb_4bit_compute_dtype")]
    pub bnb_4bit_compute_dtype: Option<String>,
    /// Storage dtype of packed 4-bit weights: uint8, or bf16 for FSDP-QLoRA (same bytes) [default: uint8].
    #[arg(long, alias = "bnb_4bit_quant_storage")]
    pub bnb_4bit_quant_storage: Option<String>,
    /// What the script does to a 4/8-bit base's unquantized rest: trl (SFTTrainer with bf16:
    /// embeddings and LM head bf16, norms fp32) or peft (prepare_model_for_kbit_training alone:
    /// all fp32) [default: trl].
    #[arg(long)]
    pub kbit_prepare: Option<String>,
    /// torchtune `optimizer_in_bwd`: step each parameter during backward and free its gradient.
    #[arg(long, alias = "optimizer_in_bwd")]
    pub optimizer_in_bwd: bool,
}

/// Distributed layout flags (per-GPU estimate of the most loaded rank).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Parallelism")]
pub struct ParallelArgs {
    /// Total GPUs [default: --nodes × --gpus-per-node; required for any layout].
    #[arg(long)]
    pub gpus: Option<u64>,
    /// Nodes (with --gpus-per-node).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// GPUs per node: sets which traffic crosses nodes [default with --gpus: 8, an HGX/DGX node; required with --nodes].
    #[arg(long)]
    pub gpus_per_node: Option<u64>,
    /// DeepSpeed ZeRO stage: 0, 1, 2 or 3 (training).
    #[arg(long)]
    pub zero: Option<u8>,
    /// Offload to the CPU: optimizer, params (implies optimizer). Needs --zero or --fsdp.
    #[arg(long)]
    pub offload: Option<String>,
    /// FSDP sharding: full_shard, shard_grad_op, hybrid_shard, no_shard (training).
    #[arg(long)]
    pub fsdp: Option<String>,
    /// Tensor parallel size (Megatron; `-tp` also reads).
    #[arg(long, alias = "tensor-parallel-size", default_value_t = 1)]
    pub tp: u64,
    /// Pipeline parallel size (Megatron; `-pp` also reads).
    #[arg(long, alias = "pipeline-parallel-size", default_value_t = 1)]
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
    /// Megatron distributed optimizer (training).
    #[arg(long)]
    pub distributed_optimizer: bool,
    /// Assumed NCCL buffers per communicator, with a unit [default: 256MiB].
    #[arg(long)]
    pub nccl_buffer: Option<String>,
}

/// `vram estimate`.
#[derive(Debug, Args)]
#[command(after_help = crate::errors::EXIT_HELP)]
pub struct EstimateArgs {
    /// The job.
    #[command(flatten)]
    pub job: JobArgs,
    /// Distributed layout.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// A GPU (`h100`, `a100-40gb`, `rtx-4090`) or a size with a unit (`24GiB`, `80GB`): show the share and whether it fits.
    #[arg(long, short = 'g', help_heading = "Device assumptions")]
    pub gpu: Option<String>,
    /// Exit with code 3 when the job does not fit the --gpu.
    #[arg(long, requires = "gpu", help_heading = "Output")]
    pub fail_if_oom: bool,
    /// A measurement written by the Python package (`vram.measure(module, inputs).save(FILE)`:
    /// any nn.Module under FakeTensorMode) instead of --model: its allocated peak plus the
    /// device-level terms (allocator reserve, CUDA context, cuBLAS workspace) per GPU.
    #[arg(long, value_name = "FILE", conflicts_with = "model", help_heading = "Model")]
    pub measurement: Option<String>,
}

/// `vram fit`.
#[derive(Debug, Args)]
#[command(after_help = crate::errors::EXIT_HELP)]
pub struct FitArgs {
    /// The job (its --batch-size is ignored: it is what is searched).
    #[command(flatten)]
    pub job: JobArgs,
    /// A GPU (`h20`, `h100`, `a100-40gb`) or a size with a unit (`24GiB`, `80GB`).
    #[arg(long, short = 'g', help_heading = "Device assumptions")]
    pub gpu: String,
    /// Share of the GPU the total may use (0.85–0.95 is the sweet spot; one default for fit, plan and tune).
    #[arg(long, default_value_t = vram_core::fit::DEFAULT_TARGET_UTILIZATION, help_heading = "Job")]
    pub target_utilization: f64,
    /// Global batch size (1 to 2^24): the micro-batch must divide it; the rest is gradient accumulation.
    #[arg(long, value_parser = global_batch, help_heading = "Job")]
    pub global_batch_size: Option<u64>,
    /// Model FLOPs utilisation assumed for the tokens/s and s/step columns of --json.
    #[arg(long, default_value_t = 0.40, help_heading = "Job")]
    pub mfu: f64,
    /// Exit with code 3 when batch 1 does not fit.
    #[arg(long, help_heading = "Output")]
    pub fail_if_oom: bool,
}

/// `vram plan`.
#[derive(Debug, Args)]
#[command(after_help = crate::errors::EXIT_HELP)]
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
    /// Global batch in sequences, 1 to 2^24 (default: the smallest multiple of the GPU count with ≥ 4M tokens).
    #[arg(long, value_parser = global_batch)]
    pub global_batch_size: Option<u64>,
    /// Share of GPU memory a plan may use.
    #[arg(long, default_value_t = vram_core::fit::DEFAULT_TARGET_UTILIZATION)]
    pub target_utilization: f64,
    /// Model FLOPs utilisation of compute.
    #[arg(long, default_value_t = 0.40)]
    pub mfu: f64,
    /// Network bandwidth per GPU between nodes, GB/s.
    #[arg(long)]
    pub inter_node_gbps: Option<f64>,
    /// How many plans to show (1 to 100).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub top: u16,
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
    /// Export each GPU process's full command line as a metrics label (it can carry paths and
    /// secrets; default: the process name only).
    #[arg(long)]
    pub metrics_command_label: bool,
    /// With --model, also estimate this job (same flags as `vram estimate`) and compare.
    #[command(flatten)]
    pub job: JobArgs,
    /// Record a PyTorch memory snapshot of the command into this file (a startup hook turns on
    /// torch.cuda.memory._record_memory_history and dumps at exit and on OOM), then explain it.
    #[arg(long)]
    pub snapshot: Option<std::path::PathBuf>,
    /// Overwrite existing --out/--svg/--timeline/--snapshot files.
    #[arg(long)]
    pub force: bool,
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
    /// Export each GPU process's full command line as a metrics label (it can carry paths and
    /// secrets; default: the process name only).
    #[arg(long)]
    pub metrics_command_label: bool,
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
    #[arg(long, default_value_t = vram_core::fit::DEFAULT_TARGET_UTILIZATION)]
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
    /// Global batch size (1 to 2^24): the micro-batch divides it and {grad_accum} makes up the rest.
    #[arg(long, value_parser = global_batch)]
    pub global_batch_size: Option<u64>,
    /// The training command with {batch} (and optionally {grad_accum}), after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `vram serve`: flags keep vLLM's (and llama.cpp's) own spelling.
#[derive(Debug, Clone, Args)]
#[command(after_help = crate::errors::EXIT_HELP)]
pub struct ServeArgs {
    /// A preset, a config.json, a model directory, a Hub id (`org/name`) or a `.gguf` file
    /// (or name it inside a pasted command after `--`).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Estimate an unknown or unsupported architecture as a Llama-style decoder (marked APPROXIMATE).
    #[arg(long)]
    pub approximate_architecture: bool,
    /// A GPU (`h100`, `a100-40gb`, `rtx-4090`) or a size (`24GiB`, `80GB`).
    #[arg(long, short = 'g')]
    pub gpu: String,
    /// Serving engine: vllm or sglang; for a .gguf file llama.cpp (default) or ollama.
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// vLLM `--tensor-parallel-size`, SGLang `--tp-size` / `--tp`.
    #[arg(long, aliases = ["tensor-parallel-size", "tp-size"], default_value_t = 1)]
    pub tp: u64,
    /// SGLang `--mem-fraction-static`: weights + KV pool as a fraction of GPU memory [default:
    /// SGLang's, from the GPU size].
    #[arg(long)]
    pub mem_fraction_static: Option<f64>,
    /// SGLang `--context-length` [default: the model's].
    #[arg(long)]
    pub context_length: Option<u64>,
    /// SGLang `--max-running-requests` [default: derived from the token pool].
    #[arg(long)]
    pub max_running_requests: Option<u64>,
    /// SGLang `--chunked-prefill-size` (-1 disables) [default: SGLang's for the GPU].
    #[arg(long, allow_negative_numbers = true)]
    pub chunked_prefill_size: Option<i64>,
    /// SGLang `--cuda-graph-max-bs` (also `--cuda-graph-max-bs-decode`) [default: SGLang's for the GPU].
    #[arg(long, alias = "cuda-graph-max-bs-decode")]
    pub cuda_graph_max_bs: Option<u64>,
    /// SGLang `--disable-cuda-graph`.
    #[arg(long)]
    pub disable_cuda_graph: bool,
    /// SGLang `--max-total-tokens`: an upper bound on the KV token pool.
    #[arg(long)]
    pub max_total_tokens: Option<u64>,
    /// SGLang `--page-size` [default: 1].
    #[arg(long)]
    pub page_size: Option<u64>,
    /// SGLang `--max-mamba-cache-size`: a hybrid model's state slots [default: from
    /// --mamba-full-memory-ratio].
    #[arg(long)]
    pub max_mamba_cache_size: Option<u64>,
    /// SGLang `--mamba-ssm-dtype`: float32, bfloat16 or float16 [default: the config's
    /// `mamba_ssm_dtype` (Qwen3.5), else float32].
    #[arg(long)]
    pub mamba_ssm_dtype: Option<String>,
    /// SGLang `--mamba-full-memory-ratio`: a hybrid model's state pool ÷ token pool [default: 0.9].
    #[arg(long)]
    pub mamba_full_memory_ratio: Option<f64>,
    /// SGLang `--mamba-radix-cache-strategy`: auto, no_buffer, extra_buffer or extra_buffer_lazy
    /// [default: auto].
    #[arg(long)]
    pub mamba_radix_cache_strategy: Option<String>,
    /// SGLang `--disable-radix-cache` (a hybrid model's running requests then take one state slot).
    #[arg(long)]
    pub disable_radix_cache: bool,
    /// SGLang `--disable-overlap-schedule`.
    #[arg(long)]
    pub disable_overlap_schedule: bool,
    /// SGLang `--speculative-algorithm`: EAGLE, EAGLE3 or NEXTN (EAGLE's alias; the checkpoint's
    /// MTP layers draft).
    #[arg(long)]
    pub speculative_algorithm: Option<String>,
    /// SGLang `--speculative-draft-model-path`: the EAGLE head (a Hub id, a directory or its
    /// config.json).
    #[arg(long)]
    pub speculative_draft_model_path: Option<String>,
    /// SGLang `--speculative-num-steps` [default: SGLang's choice for the architecture].
    #[arg(long)]
    pub speculative_num_steps: Option<u64>,
    /// SGLang `--speculative-eagle-topk` [default: SGLang's choice].
    #[arg(long)]
    pub speculative_eagle_topk: Option<u64>,
    /// SGLang `--speculative-num-draft-tokens` [default: steps + 1 at top-k 1].
    #[arg(long)]
    pub speculative_num_draft_tokens: Option<u64>,
    /// SGLang `--attn-dp-size N`: attention data parallelism within the TP group (MoE models): N
    /// groups of tp/N GPUs, each with its own attention split, token pool and batch.
    #[arg(long)]
    pub attn_dp_size: Option<u64>,
    /// SGLang's older spelling of attention DP: `--dp-size N --enable-dp-attention` is
    /// `--attn-dp-size N`.
    #[arg(long)]
    pub enable_dp_attention: bool,
    /// SGLang `--enable-dp-lm-head`: the LM head split over an attention-DP group's GPUs only.
    #[arg(long)]
    pub enable_dp_lm_head: bool,
    /// SGLang `--ep-size` / `--ep`: expert parallelism over the TP group (it must equal
    /// --tp-size): whole experts per GPU.
    #[arg(long)]
    pub ep_size: Option<u64>,
    /// SGLang `--language-only`: a vision-language checkpoint's language model alone.
    #[arg(long)]
    pub language_only: bool,
    /// vLLM `--pipeline-parallel-size` / `-pp`: layers split over stages as vLLM splits them; the
    /// stage with the fewest KV blocks is reported.
    #[arg(long, alias = "pp", default_value_t = 1)]
    pub pipeline_parallel_size: u64,
    /// vLLM `--data-parallel-size` / `-dp` (typed here `--dp`): replicas of the TP×PP group, each with its own
    /// attention weights and KV cache; a MoE model's experts are spread over all TP×DP GPUs.
    /// GPUs and concurrency multiply. SGLang `--dp-size` (0.5.23: replicas of the TP group, each
    /// a whole model; with `--enable-dp-attention` it counts attention-DP groups instead, as --attn-dp-size).
    #[arg(long, alias = "dp", alias = "dp-size", default_value_t = 1)]
    pub data_parallel_size: u64,
    /// vLLM `--enable-expert-parallel` / `-ep` (typed here `--ep`): each of the TP×DP GPUs holds
    /// whole experts of a MoE model instead of a slice of every expert.
    #[arg(long, alias = "ep")]
    pub enable_expert_parallel: bool,
    /// vLLM `--cpu-offload-gb`: GiB of weights per GPU moved to pinned host memory (whole
    /// decoder layers, as vLLM moves them).
    #[arg(long)]
    pub cpu_offload_gb: Option<f64>,
    /// vLLM `--limit-mm-per-prompt` for a vision-language model: images per prompt, as vLLM
    /// takes it (`'{"image": 4}'` or `image=4`) [default: 999, vLLM V1's].
    #[arg(long, value_name = "LIMITS")]
    pub limit_mm_per_prompt: Option<String>,
    /// vLLM `--mm-processor-kwargs`: `'{"max_pixels": N}'` caps the largest image a Qwen VLM's
    /// profile run encodes [default: the processor's, 12845056 for Qwen2-VL/2.5-VL, 16777216 for
    /// Qwen3-VL/Qwen3.5]; `'{"size": {"longest_edge": N}}'` sets Idefics3/SmolVLM's split edge (a
    /// multiple of the tile); keys that change images in other ways are refused.
    #[arg(long, value_name = "JSON")]
    pub mm_processor_kwargs: Option<String>,
    /// vLLM release whose start-up accounting to follow (e.g. 0.10, 0.17, 0.21, 0.33) [default:
    /// 0.33, the newest modelled].
    #[arg(long)]
    pub vllm_version: Option<String>,
    /// CUDA-graph memory vLLM ≥ 0.20 estimates and subtracts from the KV budget, with a unit
    /// (e.g. 1.2GiB) [default: an assumption, stated].
    #[arg(long)]
    pub cuda_graph_memory: Option<String>,
    /// vLLM `--max-cudagraph-capture-size`: the largest batch captured as a CUDA graph [default:
    /// vLLM's, min(2 × max-num-seqs, 512)].
    #[arg(long)]
    pub max_cudagraph_capture_size: Option<u64>,
    /// vLLM `--cudagraph-capture-sizes`: the batch sizes captured as CUDA graphs, instead of
    /// vLLM's list (space- or comma-separated).
    #[arg(long, num_args = 1.., value_delimiter = ',')]
    pub cudagraph_capture_sizes: Vec<u64>,
    /// vLLM's `compilation_config.cudagraph_mode` (`-cc.cudagraph_mode`): NONE, PIECEWISE, FULL,
    /// FULL_DECODE_ONLY or FULL_AND_PIECEWISE [default: FULL_AND_PIECEWISE, vLLM's].
    #[arg(long)]
    pub cudagraph_mode: Option<String>,
    /// vLLM `--max-model-len`: tokens, or `auto` (also -1): the longest that fits, as vLLM picks it
    /// (default: the model's max_position_embeddings).
    #[arg(long, value_parser = max_model_len, allow_negative_numbers = true)]
    pub max_model_len: Option<MaxModelLen>,
    /// vLLM `--gpu-memory-utilization` [default: vLLM's for --vllm-version: 0.92 from 0.25, 0.9 before].
    #[arg(long)]
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM `--dtype`: auto, bfloat16, float16, float32.
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// vLLM `--quantization` (awq, gptq, fp8, bnb-4bit, …) [default: the checkpoint's own
    /// `quantization_config`: fp8, compressed-tensors, gptq, awq, mxfp4, bitsandbytes].
    #[arg(long)]
    pub quantization: Option<String>,
    /// vLLM `--kv-cache-dtype`: auto or fp8.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: String,
    /// llama.cpp `--cache-type-k` / `-ctk` (f16, q8_0, q4_0, …): planned as the KV type, with
    /// `-ctv` the same.
    #[arg(long)]
    pub cache_type_k: Option<String>,
    /// llama.cpp `--cache-type-v` / `-ctv`.
    #[arg(long)]
    pub cache_type_v: Option<String>,
    /// vLLM `--block-size`.
    #[arg(long, default_value_t = 16)]
    pub block_size: u64,
    /// vLLM `--max-num-batched-tokens`, also as vLLM writes it (`8k` = 8,000, `8K` = 8,192)
    /// (default: vLLM's for this GPU: 8192 on ≥70 GiB non-A100, else 2048).
    #[arg(long, value_parser = vllm_int)]
    pub max_num_batched_tokens: Option<u64>,
    /// vLLM `--max-num-seqs` (default: 1024 on ≥70 GiB non-A100, else 256).
    #[arg(long)]
    pub max_num_seqs: Option<u64>,
    /// vLLM engine generation whose profile run to reproduce: v1 (default), or v0 (VLLM_USE_V1=0).
    #[arg(long, default_value = "v1")]
    pub vllm_engine: String,
    /// vLLM's GPU model runner: v1 (gpu_model_runner.py) or v2 (Model Runner V2), as
    /// VLLM_USE_V2_MODEL_RUNNER=0/1 sets it [default: vLLM's choice: v2 for dense models from 0.25].
    #[arg(long)]
    pub model_runner: Option<String>,
    /// vLLM `--enforce-eager` (no CUDA graphs).
    #[arg(long)]
    pub enforce_eager: bool,
    /// vLLM `--language-model-only`: serve a vision-language checkpoint (Qwen3.5, Qwen3-VL, …) as
    /// its language model, without the vision tower or its encoder profile.
    #[arg(long)]
    pub language_model_only: bool,
    /// vLLM `--enable-prefix-caching` [default: vLLM's: on, but off for state-space and hybrid
    /// models before 0.27]; for those models it keeps two recurrent states per request.
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    /// vLLM `--no-enable-prefix-caching`.
    #[arg(long)]
    pub no_enable_prefix_caching: bool,
    /// vLLM `--no-enable-chunked-prefill`: every batch holds a whole prompt, so the default
    /// --max-num-batched-tokens grows to --max-model-len (and a smaller one is refused, as vLLM
    /// refuses it).
    #[arg(long)]
    pub no_enable_chunked_prefill: bool,
    /// vLLM `--disable-sliding-window`: every layer caches the whole context; the derived
    /// max-model-len is capped to the model's window.
    #[arg(long)]
    pub disable_sliding_window: bool,
    /// vLLM `--num-gpu-blocks-override N`: the KV pool is N blocks, whatever the profile left.
    #[arg(long)]
    pub num_gpu_blocks_override: Option<u64>,
    /// vLLM `--enable-eplb` (with --enable-expert-parallel): expert-parallel load balancing, its
    /// tables on every GPU.
    #[arg(long)]
    pub enable_eplb: bool,
    /// vLLM `--speculative-config JSON`: speculative decoding — `method` (ngram, suffix, eagle,
    /// eagle3, mtp or a family's *_mtp, draft_model), `num_speculative_tokens`, and `model` (the
    /// EAGLE head or draft model: a Hub id, a local directory or a preset).
    #[arg(long, value_name = "JSON")]
    pub speculative_config: Option<String>,
    /// vLLM `--eplb-config JSON`: `num_redundant_experts` (physical experts beyond the model's,
    /// default 0) and `window_size` (default 1000); other keys change no memory.
    #[arg(long, value_name = "JSON")]
    pub eplb_config: Option<String>,
    /// vLLM `--performance-mode` (≥ 0.19): balanced, interactivity (CUDA graphs at every batch size
    /// up to 32) or throughput (twice the default batch tokens and sequences).
    #[arg(long)]
    pub performance_mode: Option<String>,
    /// vLLM's VLLM_USE_FLASHINFER_SAMPLER: `on` or `off` [default: vLLM's as installed with pip:
    /// PyTorch's sort before 0.17, Triton's kernel from 0.17].
    #[arg(long)]
    pub flashinfer_sampler: Option<String>,
    /// vLLM `--mamba-cache-mode` for state-space and hybrid models: none, align or all (not modelled)
    /// [default: vLLM's: none without prefix caching, else align].
    #[arg(long)]
    pub mamba_cache_mode: Option<String>,
    /// vLLM `--mamba-ssm-cache-dtype`: auto, float32, bfloat16 or float16 [default: auto: the model's
    /// own rule (Qwen3.5's config, float32 for Nemotron-H), else the model's dtype].
    #[arg(long, default_value = "auto")]
    pub mamba_ssm_cache_dtype: String,
    /// Non-torch memory the profile run adds, as vLLM logs it, with a unit (e.g. 300MiB) [default: an assumption, stated].
    #[arg(long)]
    pub non_torch_memory: Option<String>,
    /// CUDA context per process, outside vLLM's budget, with a unit [default: 512MiB].
    #[arg(long)]
    pub cuda_context: Option<String>,
    /// llama.cpp `--n-gpu-layers` / `-ngl` (also `--ngl`) for a .gguf model: N, `auto` (-1,
    /// llama.cpp's default: every layer, and --fit may move them) or `all` (-2: every layer, set
    /// by you, so --fit leaves them) [default: auto].
    #[arg(long, alias = "ngl", value_parser = gpu_layers, allow_negative_numbers = true)]
    pub n_gpu_layers: Option<GpuLayers>,
    /// vLLM `--kv-cache-memory-bytes`: the KV-cache pool, in bytes, read as vLLM reads it
    /// (`20g` = 20·10^9, `20G` = 20·2^30; `20GiB` and `20GB` also accepted); replaces
    /// --gpu-memory-utilization for sizing it.
    #[arg(long)]
    pub kv_cache_memory_bytes: Option<String>,
    /// vLLM / SGLang `--enable-lora`: reserve GPU slots for LoRA adapters.
    #[arg(long, alias = "enable_lora")]
    pub enable_lora: bool,
    /// SGLang `--lora-paths NAME=PATH …` (or PATH, or JSON with lora_name, lora_path, pinned):
    /// adapters to serve; each one's adapter_config.json (a local directory's, or a Hub id's)
    /// gives the rank and target modules (turns on --enable-lora).
    #[arg(long, alias = "lora_paths", num_args = 1..)]
    pub lora_paths: Vec<String>,
    /// SGLang `--max-loras-per-batch`: adapter slots in the GPU pool [default: 8].
    #[arg(long, alias = "max_loras_per_batch")]
    pub max_loras_per_batch: Option<u64>,
    /// SGLang `--max-loaded-loras`: adapters kept in host memory (no GPU memory); checked as
    /// SGLang checks it at start-up (at least --max-loras-per-batch, at least the --lora-paths).
    #[arg(long, alias = "max_loaded_loras")]
    pub max_loaded_loras: Option<u64>,
    /// SGLang `--lora-target-modules`: q_proj k_proj … or all [default: the adapters'].
    #[arg(long, alias = "lora_target_modules", num_args = 1..)]
    pub lora_target_modules: Option<Vec<String>>,
    /// vLLM `--lora-modules name=path …` (or JSON objects with "name" and "path"): adapters vLLM
    /// loads at start-up; each adapter_config.json (a local directory's or a Hub id's) is checked
    /// as vLLM checks it (rank within --max-lora-rank, no bias), since vLLM will not start otherwise.
    #[arg(long, alias = "lora_modules", num_args = 1..)]
    pub lora_modules: Vec<String>,
    /// vLLM `--max-loras`: adapters on the GPU at once [default: 1].
    #[arg(long, alias = "max_loras")]
    pub max_loras: Option<u64>,
    /// vLLM / SGLang `--max-lora-rank`: the rank every slot is allocated at [default: vLLM 16;
    /// SGLang the largest of the --lora-paths adapters].
    #[arg(long, alias = "max_lora_rank")]
    pub max_lora_rank: Option<u64>,
    /// vLLM `--max-cpu-loras`: adapters cached in host memory [default: --max-loras].
    #[arg(long, alias = "max_cpu_loras")]
    pub max_cpu_loras: Option<u64>,
    /// llama.cpp `--ctx-size` / `-c` for a .gguf model [default: --max-model-len, else
    /// llama.cpp's own default, 0: the model's training context, which --fit reduces until
    /// --fit-target stays free, not below --fit-ctx; `-c 0` asks for the training context with no
    /// reduction].
    #[arg(long, short = 'c')]
    pub ctx_size: Option<u64>,
    /// llama.cpp `--fit` / `-fit on|off`: fit the context and layers left unset to the free GPU
    /// memory (common/fit.cpp; on by default since ggml-org/llama.cpp#16653).
    #[arg(long, value_name = "on|off")]
    pub fit: Option<String>,
    /// llama.cpp `--fit-target` / `-fitt`: memory --fit leaves free on each GPU, in MiB as
    /// llama.cpp reads it (or with a unit, `2GiB`): one value for every GPU, or one per GPU
    /// (`1024,2048`) [default: 1024 MiB].
    #[arg(long)]
    pub fit_target: Option<String>,
    /// llama.cpp `--fit-ctx` / `-fitc`: the smallest context --fit reduces to [default: 4096].
    #[arg(long)]
    pub fit_ctx: Option<u64>,
    /// llama.cpp `--ubatch-size` / `-ub` (default 512).
    #[arg(long, default_value_t = 512)]
    pub ubatch_size: u64,
    /// llama.cpp `--no-mmap`: read the weights kept in RAM into allocated memory instead of
    /// mapping the file.
    #[arg(long)]
    pub no_mmap: bool,
    /// llama.cpp `--mlock`: lock the weights kept in RAM there.
    #[arg(long)]
    pub mlock: bool,
    /// llama.cpp `--swa-full`: a sliding-window model (Gemma 2/3, gpt-oss, …) caches the whole
    /// context in its sliding-window layers too.
    #[arg(long)]
    pub swa_full: bool,
    /// llama.cpp `--no-op-offload`: weights kept in RAM are multiplied there, with no copy in the
    /// GPU's compute buffer.
    #[arg(long)]
    pub no_op_offload: bool,
    /// llama.cpp `--batch-size` / `-b`, the logical batch [default: 2048]: llama.cpp runs
    /// min(--ctx-size, -b, -ub) tokens a micro-batch, which sizes the compute buffers.
    #[arg(long, short = 'b')]
    pub batch_size: Option<u64>,
    /// llama.cpp `--parallel` / `-np` (also `--np`): sequences sharing the one --ctx-size (each gets
    /// ctx / N unless --kv-unified) [default: llama-server's auto, 4 slots sharing one unified KV
    /// cache, each able to fill the whole context; give -np 1 for llama-cli or a server before
    /// b6800]
    #[arg(long, alias = "np")]
    pub parallel: Option<u64>,
    /// llama.cpp `--kv-unified` / `-kvu`: one KV cache shared by the --parallel sequences (on by
    /// default when --parallel is not given, as llama-server does).
    #[arg(long, alias = "kvu", conflicts_with = "no_kv_unified")]
    pub kv_unified: bool,
    /// llama.cpp `--no-kv-unified` / `-no-kvu`: one KV stream per sequence, each of
    /// --ctx-size / --parallel cells, even with llama-server's automatic slots.
    #[arg(long)]
    pub no_kv_unified: bool,
    /// llama-server `--mmproj FILE` / `-mm`: a multimodal projector GGUF loaded beside the model
    /// (its weights on the GPU, read exactly from its header, and the vision encoder's warm-up
    /// compute buffer for the projector types vram models). With a Hub repository of GGUF files,
    /// the projector llama-server's `-hf` picks is counted unless --no-mmproj.
    #[arg(long, alias = "mm", value_name = "FILE")]
    pub mmproj: Option<std::path::PathBuf>,
    /// llama-server `--no-mmproj`: load no projector, not even the one `-hf` picks from the
    /// model's repository.
    #[arg(long)]
    pub no_mmproj: bool,
    /// llama-server `--no-mmproj-offload`: keep the projector in RAM.
    #[arg(long)]
    pub no_mmproj_offload: bool,
    /// llama.cpp `--lora FILE` (repeatable; a pasted `--lora a,b` or `--lora-scaled FILE:SCALE` too): a LoRA
    /// adapter GGUF loaded beside the model, each matrix pair on the device of the tensor it
    /// adapts (read exactly from its header, and checked as llama.cpp checks it).
    #[arg(long, value_name = "FILE")]
    pub lora: Vec<std::path::PathBuf>,
    /// llama.cpp `--n-cpu-moe` / `-ncmoe`: keep the MoE expert weights of the first N layers in RAM.
    #[arg(long)]
    pub n_cpu_moe: Option<u64>,
    /// llama.cpp `--cpu-moe` / `-cmoe`: keep every layer's MoE expert weights in RAM.
    #[arg(long)]
    pub cpu_moe: bool,
    /// llama.cpp `--override-kv KEY=TYPE:VALUE[,…]` (repeatable): model metadata overrides, read
    /// as llama.cpp's loader reads them (e.g. `qwen3moe.expert_used_count=int:4` sizes the
    /// compute buffer for 4 experts, `llama.context_length=int:8192` the context --fit starts from).
    #[arg(long)]
    pub override_kv: Vec<String>,
    /// llama.cpp `--override-tensor` / `-ot PATTERN=BUFTYPE[,…]` (repeatable): tensors whose name
    /// matches the regex go to CPU (RAM) or CUDA0 (the GPU); the first match wins.
    #[arg(long)]
    pub override_tensor: Vec<String>,
    /// GPUs of the --gpu kind llama.cpp spreads a .gguf model over (CUDA0 …) [default: the number
    /// of --tensor-split values, else 1].
    #[arg(long)]
    pub gpus: Option<u64>,
    /// llama.cpp `--tensor-split` / `-ts`: proportions per GPU, comma-separated (e.g. 3,1)
    /// [default: by free memory, planned as equal].
    #[arg(long)]
    pub tensor_split: Option<String>,
    /// llama.cpp `--split-mode` / `-sm`: none, layer or row [default: layer].
    #[arg(long)]
    pub split_mode: Option<String>,
    /// llama.cpp `--main-gpu` / `-mg`: the GPU of `--split-mode none` [default: 0].
    #[arg(long)]
    pub main_gpu: Option<u64>,
    /// llama.cpp `--flash-attn` / `-fa`: on, off or auto [default: auto, on where the GPU has it].
    #[arg(long)]
    pub flash_attn: Option<String>,
    /// Ollama's `num_ctx` (`/set parameter num_ctx N`) for a .gguf under `--engine ollama`: tokens
    /// per request; Ollama runs llama.cpp with num_ctx × --parallel [default: Ollama's, by VRAM].
    #[arg(long)]
    pub num_ctx: Option<u64>,
    /// A vLLM, SGLang or llama.cpp start-up log to compare the estimate with (only read).
    #[arg(long, value_name = "FILE")]
    pub log: Option<std::path::PathBuf>,
    /// Write the launch: vllm or sglang (the command), docker (a compose service), k8s (a
    /// Deployment and Service). To stdout instead of the report, unless --emit-file.
    #[arg(long, value_name = "FORMAT")]
    pub emit: Option<String>,
    /// With --emit: apply ranked alternative N (as `vram serve` lists them, 1 = first) to the launch.
    #[arg(long, value_name = "N", requires = "emit")]
    pub emit_alternative: Option<usize>,
    /// With --emit: write the launch to this file (the report still goes to stdout); an existing
    /// file is refused unless --force.
    #[arg(long, short = 'o', value_name = "PATH", requires = "emit")]
    pub emit_file: Option<std::path::PathBuf>,
    /// Overwrite an existing --emit-file.
    #[arg(long, requires = "emit_file")]
    pub force: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A real launch command pasted after `--`, read as its engine reads it: `vllm serve MODEL …`,
    /// `python -m vllm.entrypoints.openai.api_server --model MODEL …`, `python -m sglang.launch_server --model-path MODEL …`, `sglang serve MODEL …`, `llama-server -m FILE …`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Parses `vram serve` arguments on their own (a pasted command translated into them).
#[derive(Debug, clap::Parser)]
// A flag given twice takes its last value, as the engines' own parsers do (argparse, llama.cpp's
// common/arg.cpp); `-ot` still collects every occurrence.
#[command(name = "vram serve", args_override_self = true)]
pub struct ServeOnly {
    /// The arguments.
    #[command(flatten)]
    pub args: ServeArgs,
}

/// vLLM's `--max-model-len`: a length, or `auto` / `-1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxModelLen {
    /// This many tokens.
    Tokens(u64),
    /// The longest that fits the KV pool.
    Auto,
}

fn max_model_len(s: &str) -> Result<MaxModelLen, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" | "-1" => Ok(MaxModelLen::Auto),
        _ => vram_core::units::parse_vllm_int(&s.replace('_', "")).map(MaxModelLen::Tokens).ok_or_else(|| {
            format!("`{s}` is not a number of tokens (`32768`, or as vLLM writes it, `32k` = 32,000, `32K` = 32,768) or `auto`")
        }),
    }
}

/// A count vLLM reads with its human-readable integers (`8k`, `8K`; [`vram_core::units::parse_vllm_int`]).
fn vllm_int(s: &str) -> Result<u64, String> {
    vram_core::units::parse_vllm_int(&s.replace('_', ""))
        .ok_or_else(|| format!("`{s}` is not a count (`8192`, or as vLLM writes it, `8k` = 8,000, `8K` = 8,192)"))
}

impl ServeArgs {
    /// GPUs a llama.cpp launch uses: `--gpus`, else the `--gpu` list's length, else one per
    /// `--tensor-split` value (split on `,` and `/`, as common/arg.cpp splits it), else one.
    pub fn llama_gpu_count(&self) -> u64 {
        let listed = self.gpu.split(',').count() as u64;
        let split = self.tensor_split.as_deref().map_or(1, |t| t.split([',', '/']).count() as u64);
        // `--gpus 0` stays 0, for the split's validation to refuse.
        self.gpus.unwrap_or(if listed > 1 { listed } else { split })
    }
}

/// llama.cpp's `-ngl` value (common/arg.cpp: a number, `auto` = -1, `all` = -2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuLayers {
    /// `auto` / -1: llama.cpp's default, every layer unless --fit moves some.
    Auto,
    /// `all` / -2: every layer and the output, set by the user.
    All,
    /// That many of the layers and the output, the last ones (llama.cpp counts the output as the
    /// last layer: any N ≥ 1 offloads it).
    N(u64),
}

impl std::fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuLayers::Auto => f.write_str("auto"),
            GpuLayers::All => f.write_str("all"),
            GpuLayers::N(n) => write!(f, "{n}"),
        }
    }
}

fn gpu_layers(s: &str) -> Result<GpuLayers, String> {
    match s.trim() {
        "auto" | "-1" => Ok(GpuLayers::Auto),
        "all" | "-2" => Ok(GpuLayers::All),
        n => n.parse::<u64>().map(GpuLayers::N).map_err(|_| format!("`{s}`: a number of layers, auto or all (llama.cpp's values)")),
    }
}

/// `--global-batch-size`: a positive number of sequences, at most [`MAX_GLOBAL_BATCH`].
fn global_batch(s: &str) -> Result<u64, String> {
    let n: u64 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number of sequences"))?;
    if n == 0 || n > MAX_GLOBAL_BATCH {
        return Err(format!("{n} is outside 1 to {MAX_GLOBAL_BATCH} (2^24) sequences"));
    }
    Ok(n)
}

/// llama.cpp and vLLM spell some flags with a multi-letter single dash (`-ngl 99`, `-np 4`,
/// `-tp 2`), which clap cannot parse as shorts (`-mg 1` would even read as `-m g1`): rewrite them
/// to their long forms, before any `--` separator.
pub fn llama_cpp_spellings(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut after_separator = false;
    args.into_iter()
        .map(|a| {
            if a == "--" {
                after_separator = true;
            }
            let Some(s) = a.to_str().filter(|_| !after_separator) else { return a };
            for (short, long) in [
                ("-ngl", "--n-gpu-layers"),
                ("-np", "--parallel"),
                ("-ncmoe", "--n-cpu-moe"),
                ("-cmoe", "--cpu-moe"),
                ("-ot", "--override-tensor"),
                ("-pp", "--pipeline-parallel-size"),
                ("-dp", "--data-parallel-size"),
                ("-tp", "--tensor-parallel-size"),
                ("-ts", "--tensor-split"),
                ("-sm", "--split-mode"),
                ("-mg", "--main-gpu"),
                ("-fit", "--fit"),
                ("-fitt", "--fit-target"),
                ("-fitc", "--fit-ctx"),
                ("-ub", "--ubatch-size"),
                ("-fa", "--flash-attn"),
                ("-mm", "--mmproj"),
                ("-kvu", "--kv-unified"),
                ("-ctk", "--cache-type-k"),
                ("-ctv", "--cache-type-v"),
            ] {
                if s == short {
                    return long.into();
                }
                if let Some(v) = s.strip_prefix(short).and_then(|r| r.strip_prefix('=')) {
                    return format!("{long}={v}").into();
                }
            }
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::llama_cpp_spellings;

    fn rewrite(args: &[&str]) -> Vec<String> {
        llama_cpp_spellings(args.iter().map(std::ffi::OsString::from)).into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn llama_cpp_short_spellings_become_long_flags_before_the_separator() {
        assert_eq!(rewrite(&["vram", "serve", "-ngl", "9", "-np=2"]), ["vram", "serve", "--n-gpu-layers", "9", "--parallel=2"]);
        assert_eq!(rewrite(&["vram", "run", "--", "llama-server", "-ngl", "99"]), ["vram", "run", "--", "llama-server", "-ngl", "99"]);
    }

    #[test]
    fn multi_letter_spellings_never_split_into_shorts() {
        // `-mg 1` would otherwise parse as `-m g1`, `-tp 2` as an unknown `-t`.
        assert_eq!(
            rewrite(&["vram", "serve", "-mg", "1", "-tp=2", "-ctk", "q8_0", "-mm", "p.gguf", "-m", "x"]),
            ["vram", "serve", "--main-gpu", "1", "--tensor-parallel-size=2", "--cache-type-k", "q8_0", "--mmproj", "p.gguf", "-m", "x"]
        );
    }

    #[test]
    fn llama_cpp_moe_spellings_become_long_flags() {
        assert_eq!(
            rewrite(&["vram", "serve", "-ncmoe", "3", "-cmoe", "-ot", "exps=CPU", "-ot=a=CUDA0"]),
            ["vram", "serve", "--n-cpu-moe", "3", "--cpu-moe", "--override-tensor", "exps=CPU", "--override-tensor=a=CUDA0"]
        );
    }
}
