//! What the user is running: mode, precision, optimizer, batch shape, kernels.
//! Parsed from the names users type (`bf16-mixed`, `adamw_torch_fused`, `sdpa`) into enums.

use serde::Serialize;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::peft::{BaseWeights, Lora};
use crate::units::MIB;

/// Training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One optimizer step (steady state: the second step, optimizer states alive).
    Train,
    /// Prefill plus KV cache for generation.
    Infer,
}

/// Numeric precision of weights and compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// Everything in float32.
    Fp32,
    /// fp32 weights, `torch.autocast(dtype=bfloat16)` (PyTorch AMP; HF Trainer `--bf16`).
    Bf16Mixed,
    /// fp32 weights, autocast float16 + GradScaler (HF Trainer `--fp16`).
    Fp16Mixed,
    /// `model.to(torch.bfloat16)`: weights, grads and optimizer states in bf16.
    Bf16,
    /// `model.to(torch.float16)`.
    Fp16,
    /// Inference: fp8 weights (per-channel scales).
    Fp8,
    /// Inference: int8 weights (per-channel scales).
    Int8,
    /// Inference: int4 weights, group size 128 (AWQ/GPTQ layout).
    Int4,
}

impl Precision {
    /// Parse a user-typed precision.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "fp32" | "float32" | "32" | "32-true" => Precision::Fp32,
            "bf16-mixed" | "amp-bf16" | "mixed-bf16" => Precision::Bf16Mixed,
            "fp16-mixed" | "16-mixed" | "amp" | "amp-fp16" | "mixed-fp16" => Precision::Fp16Mixed,
            "bf16" | "bfloat16" | "bf16-true" => Precision::Bf16,
            "fp16" | "float16" | "half" | "16-true" => Precision::Fp16,
            "fp8" | "float8" => Precision::Fp8,
            "int8" | "8bit" => Precision::Int8,
            "int4" | "4bit" | "awq" | "gptq" => Precision::Int4,
            _ => return Err(bad("precision", s, "use fp32, bf16-mixed, fp16-mixed, bf16, fp16 (and for inference fp8, int8, int4)")),
        })
    }

    /// The name as the CLI prints it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::Fp16Mixed => "fp16-mixed",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
            Precision::Int4 => "int4",
        }
    }

    /// Autocast (AMP): fp32 master parameters, half-precision matmuls.
    pub fn is_mixed(self) -> bool {
        matches!(self, Precision::Bf16Mixed | Precision::Fp16Mixed)
    }

    /// Dtype parameters are stored in during training.
    pub fn param_dtype(self) -> DType {
        match self {
            Precision::Bf16 => DType::BF16,
            Precision::Fp16 => DType::F16,
            _ => DType::F32,
        }
    }

    /// Dtype matmuls and activations run in.
    pub fn compute_dtype(self) -> DType {
        match self {
            Precision::Fp32 => DType::F32,
            Precision::Bf16Mixed | Precision::Bf16 => DType::BF16,
            _ => DType::F16,
        }
    }
}

/// Optimizer algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// `torch.optim.AdamW`: exp_avg + exp_avg_sq.
    Adamw,
    /// `torch.optim.Adam`.
    Adam,
    /// bitsandbytes `AdamW8bit`: blockwise-quantised 8-bit states.
    Adamw8bit,
    /// bitsandbytes `PagedAdamW8bit`: 8-bit states in CUDA unified memory (`cudaMallocManaged`),
    /// outside PyTorch's allocator and evictable to the host under pressure.
    PagedAdamw8bit,
    /// bitsandbytes `PagedAdamW32bit`: fp32 states in unified memory.
    PagedAdamw32bit,
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one buffer.
    SgdMomentum,
    /// transformers `Adafactor`: factored second moments.
    Adafactor,
    /// Lion: one momentum buffer.
    Lion,
}

/// How a torch optimizer runs its step (which decides its temporaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerImpl {
    /// Multi-tensor `_foreach_*` ops: torch's default for CUDA parameters.
    Foreach,
    /// One fused CUDA kernel (`fused=True`; HF `adamw_torch_fused`, the Trainer default on torch ≥ 2.8).
    Fused,
    /// Per-parameter Python loop (`foreach=False`).
    ForLoop,
}

impl Optimizer {
    /// Parse a user-typed optimizer, accepting HF Trainer `optim` names. Returns the
    /// implementation too when the name implies one (`adamw_torch_fused`).
    pub fn parse(s: &str) -> Result<(Self, Option<OptimizerImpl>)> {
        let k = s.to_ascii_lowercase().replace('_', "-");
        Ok(match k.as_str() {
            "adamw" | "adamw-torch" => (Optimizer::Adamw, None),
            "adamw-torch-fused" | "adamw-fused" => (Optimizer::Adamw, Some(OptimizerImpl::Fused)),
            "adam" => (Optimizer::Adam, None),
            "adamw-8bit" | "adamw8bit" | "adamw-bnb-8bit" | "adam8bit" | "adamw-torch-8bit" => (Optimizer::Adamw8bit, None),
            "paged-adamw-8bit" | "paged-adamw8bit" => (Optimizer::PagedAdamw8bit, None),
            "paged-adamw-32bit" | "paged-adamw" | "paged-adamw32bit" => (Optimizer::PagedAdamw32bit, None),
            "sgd" => (Optimizer::Sgd, None),
            "sgd-momentum" | "momentum" => (Optimizer::SgdMomentum, None),
            "adafactor" => (Optimizer::Adafactor, None),
            "lion" | "lion-32bit" => (Optimizer::Lion, None),
            _ => return Err(bad("optimizer", s, "use adamw, adamw_torch_fused, adam, adamw-8bit, sgd, sgd-momentum, adafactor or lion")),
        })
    }

    /// The name as the CLI prints it.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::Adam => "adam",
            Optimizer::Adamw8bit => "adamw-8bit",
            Optimizer::PagedAdamw8bit => "paged-adamw-8bit",
            Optimizer::PagedAdamw32bit => "paged-adamw-32bit",
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Adafactor => "adafactor",
            Optimizer::Lion => "lion",
        }
    }
}

impl OptimizerImpl {
    /// Parse `foreach`, `fused` or `for-loop`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "foreach" => OptimizerImpl::Foreach,
            "fused" => OptimizerImpl::Fused,
            "for-loop" | "forloop" | "single-tensor" => OptimizerImpl::ForLoop,
            _ => return Err(bad("optimizer implementation", s, "use foreach, fused or for-loop")),
        })
    }
}

/// Activation checkpointing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpointing {
    /// Save everything autograd needs.
    None,
    /// Checkpoint every decoder layer (HF `gradient_checkpointing=True`): keep layer inputs, recompute.
    Full,
    /// Recompute the attention core only (Megatron "selective"): drop its seq² tensors.
    Selective,
}

impl Checkpointing {
    /// Parse `none`, `full`, `selective`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" | "off" | "false" | "no" => Checkpointing::None,
            "full" | "on" | "true" | "yes" => Checkpointing::Full,
            "selective" | "attention" => Checkpointing::Selective,
            _ => return Err(bad("checkpointing", s, "use none, full or selective")),
        })
    }
}

/// Attention implementation requested (transformers `attn_implementation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionImpl {
    /// `torch.nn.functional.scaled_dot_product_attention`; the kernel is chosen as on CUDA.
    Sdpa,
    /// `flash_attention_2` (half precision only).
    Flash,
    /// transformers eager attention: materialises the batch × heads × seq² scores.
    Eager,
}

impl AttentionImpl {
    /// Parse `sdpa`, `flash` / `flash_attention_2`, `eager`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "sdpa" => AttentionImpl::Sdpa,
            "flash" | "flash_attention_2" | "flash_attention_3" | "fa2" => AttentionImpl::Flash,
            "eager" | "math" => AttentionImpl::Eager,
            _ => return Err(bad("attention", s, "use sdpa, flash_attention_2 or eager")),
        })
    }
}

/// Device-level overheads outside PyTorch's allocated bytes. Each is a stated assumption the
/// user can override; none is a hidden multiplier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Overheads {
    /// CUDA context + kernel images + library handles outside PyTorch's allocator, per process;
    /// None: the measured default for the job's mode ([`Overheads::context_for`]).
    pub cuda_context: Option<u64>,
    /// cuBLAS workspaces (allocated through PyTorch's caching allocator); None: one per cuBLAS
    /// handle the job uses ([`Overheads::cublas_for`]).
    pub cublas_workspace: Option<u64>,
    /// Caching-allocator reserve beyond the allocated peak, as a fraction of it: used where the
    /// allocator is not simulated (`allocator` None, or a job without a tensor-level sequence).
    pub allocator_reserve: f64,
    /// Simulate PyTorch's caching allocator with these `PYTORCH_CUDA_ALLOC_CONF` settings over the
    /// job's allocation sequence (memory/sequence.rs); None: the flat `allocator_reserve`.
    pub allocator: Option<crate::allocator::AllocConf>,
}

impl Default for Overheads {
    fn default() -> Self {
        Overheads {
            cuda_context: None,
            cublas_workspace: None,
            // Caching allocator: simulated over the job's allocation sequence (allocator.rs,
            // memory/sequence.rs) with PyTorch's default settings. Where a job has no sequence
            // (sharded, QLoRA, accumulation...), 5% of the allocated peak is the stated assumption.
            allocator_reserve: 0.05,
            allocator: Some(crate::allocator::AllocConf::default()),
        }
    }
}

/// The CUDA context outside PyTorch's allocator of a process that ran a transformers training
/// step (forward, backward, AdamW: their kernel images loaded lazily, cuBLAS/cuDNN handles), as
/// NVML's per-process used memory minus torch's reserved memory: 758 MiB at every bf16 and LoRA
/// point, 742 MiB in fp32, on an H100 80GB HBM3 with driver 580.159.04, CUDA 13.0 and torch 2.11
/// (CUDA_MODULE_LOADING=LAZY, the default; validation/gpu/h100/recordings.jsonl, kit.py).
pub const TRAIN_CUDA_CONTEXT: u64 = 758 * MIB;
/// The same for a generation (forward kernels only): 688 MiB at every inference point there.
pub const INFER_CUDA_CONTEXT: u64 = 688 * MIB;
/// One cuBLAS workspace: 32 MiB on Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp
/// getChosenWorkspaceSize), allocated through the caching allocator, so max_memory_allocated
/// holds it. Measured: the H100 runs sit 64 MiB above the FakeTensorMode oracle in training
/// (the forward thread's handle and autograd's backward thread's), 32-45 MiB in generation.
pub const CUBLAS_WORKSPACE: u64 = 32 * MIB;

impl Overheads {
    /// The CUDA context for a job of `mode`: `--cuda-context`, else the measured default.
    pub fn context_for(&self, mode: Mode) -> u64 {
        by_mode(self.cuda_context, mode, TRAIN_CUDA_CONTEXT, INFER_CUDA_CONTEXT)
    }

    /// The cuBLAS workspaces of a job of `mode`: `--cublas-workspace`, else one per handle
    /// (training: the forward thread and autograd's device thread; generation: one).
    pub fn cublas_for(&self, mode: Mode) -> u64 {
        by_mode(self.cublas_workspace, mode, 2 * CUBLAS_WORKSPACE, CUBLAS_WORKSPACE)
    }

    /// The context component's detail.
    pub fn context_detail(&self, mode: Mode) -> String {
        let what = if mode == Mode::Train { "a training step's" } else { "a generation's" };
        source(
            self.cuda_context.is_some(),
            &format!("measured on an H100 (driver 580, CUDA 13.0, torch 2.11, lazy loading): driver context, {what} kernel images, library handles; other GPUs, drivers and CUDA versions are not measured"),
            "--cuda-context",
        )
    }

    /// The cuBLAS component's detail.
    pub fn cublas_detail(&self, mode: Mode) -> String {
        let n = if mode == Mode::Train { "2 handles (forward thread, autograd's backward thread)" } else { "1 handle" };
        source(
            self.cublas_workspace.is_some(),
            &format!("{n} × 32 MiB through PyTorch's caching allocator: torch.cuda.max_memory_allocated() reports it on top of the peak allocated above (measured on an H100)"),
            "--cublas-workspace",
        )
    }
}

/// A device term: the value given, else the default for the job's mode.
fn by_mode(given: Option<u64>, mode: Mode, train: u64, infer: u64) -> u64 {
    given.unwrap_or(match mode {
        Mode::Train => train,
        Mode::Infer => infer,
    })
}

/// Where a device term comes from, for its component's detail.
fn source(given: bool, measured: &str, flag: &str) -> String {
    if given {
        format!("given ({flag})")
    } else {
        format!("{measured} ({flag} to change)")
    }
}

/// A complete job description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// Train or infer.
    pub mode: Mode,
    /// Micro-batch size per GPU (`per_device_train_batch_size`).
    pub batch: u64,
    /// Sequence length (training) or total context (inference: prompt + generated tokens).
    pub seq: u64,
    /// Precision.
    pub precision: Precision,
    /// Optimizer (training).
    pub optimizer: Optimizer,
    /// Optimizer step implementation (training).
    pub optimizer_impl: OptimizerImpl,
    /// Activation checkpointing (training).
    pub checkpointing: Checkpointing,
    /// Attention implementation.
    pub attention: AttentionImpl,
    /// Gradient accumulation steps (> 1 keeps gradients alive through forward and backward).
    pub grad_accum: u64,
    /// Fused / chunked cross-entropy (Liger-style): logits never materialised.
    pub fused_cross_entropy: bool,
    /// KV-cache dtype (inference); `None` = the compute dtype.
    pub kv_dtype: Option<DType>,
    /// Prompt length processed in the prefill (inference); `None` = the whole context.
    pub prompt_len: Option<u64>,
    /// Training forward with `use_cache` (None: the config's value). transformers 5 builds a
    /// DynamicCache in training unless gradient checkpointing is on (utils/generic.py).
    pub use_cache: Option<bool>,
    /// First-order ZeRO-3 / FSDP `full_shard`: parameters, gradients, optimizer states and step
    /// temporaries divided over this many GPUs (1 = a single GPU). Gathered layers, buckets and
    /// the other parallelisms are not modelled yet.
    pub model_state_shards: u64,
    /// Device overheads.
    pub overheads: Overheads,
    /// LoRA/DoRA adapters on a frozen base (training); `None` = full fine-tuning.
    pub lora: Option<Lora>,
    /// How the frozen base of a LoRA job is held (`None`: bf16, as `torch_dtype=bfloat16`;
    /// fp32 weights under `--precision fp32`).
    pub base: Option<BaseWeights>,
    /// torchtune `optimizer_in_bwd`: each parameter is stepped and its gradient freed during
    /// backward, so gradients never all exist at once.
    pub optimizer_in_bwd: bool,
    /// The batch is padded to its longest sample: transformers passes SDPA an explicit
    /// (B, 1, S, S) mask, so CUDA runs the memory-efficient kernel (flash takes no mask) and each
    /// layer keeps the float bias it made from the mask for backward.
    pub padded: bool,
}

impl Job {
    /// A default training job: batch 1, sequence 2048, bf16-mixed, AdamW (foreach), sdpa.
    pub fn train(batch: u64, seq: u64) -> Job {
        Job {
            mode: Mode::Train,
            batch,
            seq,
            precision: Precision::Bf16Mixed,
            optimizer: Optimizer::Adamw,
            optimizer_impl: OptimizerImpl::Foreach,
            checkpointing: Checkpointing::None,
            attention: AttentionImpl::Sdpa,
            grad_accum: 1,
            fused_cross_entropy: false,
            kv_dtype: None,
            prompt_len: None,
            use_cache: None,
            model_state_shards: 1,
            overheads: Overheads::default(),
            lora: None,
            base: None,
            optimizer_in_bwd: false,
            padded: false,
        }
    }

    /// A default inference job: bf16 weights, KV cache in bf16.
    pub fn infer(batch: u64, seq: u64) -> Job {
        Job { mode: Mode::Infer, precision: Precision::Bf16, ..Job::train(batch, seq) }
    }

    /// The same job with another micro-batch size.
    pub fn with_batch(&self, batch: u64) -> Job {
        Job { batch, ..self.clone() }
    }

    /// Whether a training forward builds a KV cache: the config's `use_cache` unless overridden,
    /// and never under gradient checkpointing (transformers forces it off there).
    pub fn training_cache(&self, model_use_cache: bool) -> bool {
        self.mode == Mode::Train && self.checkpointing != Checkpointing::Full && self.use_cache.unwrap_or(model_use_cache)
    }

    /// Check the numbers are usable; say what is wrong otherwise.
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.batch > 1 << 20 {
            return Err(bad("batch size", &self.batch.to_string(), "must be between 1 and 1048576"));
        }
        if self.seq == 0 || self.seq > 1 << 24 {
            return Err(bad("sequence length", &self.seq.to_string(), "must be between 1 and 16777216 tokens"));
        }
        if self.grad_accum == 0 || self.grad_accum > 1 << 20 {
            return Err(bad("gradient accumulation steps", &self.grad_accum.to_string(), "must be between 1 and 1048576"));
        }
        if self.model_state_shards == 0 || self.model_state_shards > 1 << 20 {
            return Err(bad("number of GPUs", &self.model_state_shards.to_string(), "must be between 1 and 1048576"));
        }
        if let Some(p) = self.prompt_len {
            if p == 0 || p > self.seq {
                return Err(bad("prompt length", &p.to_string(), &format!("must be between 1 and the context length ({})", self.seq)));
            }
        }
        let r = self.overheads.allocator_reserve;
        if !(0.0..=1.0).contains(&r) || !r.is_finite() {
            return Err(bad("allocator reserve", &r.to_string(), "must be a fraction between 0 and 1"));
        }
        if self.mode == Mode::Train && matches!(self.precision, Precision::Fp8 | Precision::Int8 | Precision::Int4) {
            return Err(bad(
                "precision",
                self.precision.name(),
                "quantised weights are for --mode infer; train with fp32, bf16-mixed, fp16-mixed, bf16 or fp16",
            ));
        }
        self.validate_peft()?;
        if self.attention == AttentionImpl::Flash && self.precision == Precision::Fp32 {
            return Err(bad("attention", "flash_attention_2", "flash attention needs fp16/bf16; use sdpa or eager with fp32"));
        }
        Ok(())
    }
}

impl Job {
    /// LoRA / quantized-base / optimizer_in_bwd combinations that no framework runs.
    fn validate_peft(&self) -> Result<()> {
        if let Some(b) = self.base {
            if b.is_bnb() && self.lora.is_none() {
                return Err(bad(
                    "base weights",
                    &b.describe(),
                    "bitsandbytes-quantized weights are frozen: full fine-tuning cannot update them; add --peft lora (QLoRA) or drop --load-in-4bit/--load-in-8bit",
                ));
            }
            if b.is_bnb() && self.model_state_shards > 1 {
                return Err(bad(
                    "base weights",
                    &b.describe(),
                    "sharding a bitsandbytes base (FSDP-QLoRA) is not modelled yet; estimate one GPU",
                ));
            }
        }
        if self.lora.is_some() && self.mode == Mode::Infer {
            return Err(bad(
                "peft",
                "lora",
                "LoRA adapters are a training job here; for inference estimate the merged model (drop --peft)",
            ));
        }
        if self.optimizer_in_bwd && self.grad_accum > 1 {
            return Err(bad(
                "optimizer_in_bwd",
                "true",
                "stepping in backward cannot accumulate gradients (torchtune refuses it too); use --grad-accum 1",
            ));
        }
        if self.optimizer_in_bwd && self.lora.is_none() && self.model_state_shards > 1 {
            return Err(bad("optimizer_in_bwd", "true", "optimizer-in-backward is modelled on one GPU"));
        }
        Ok(())
    }
}

fn bad(what: &str, value: &str, hint: &str) -> Error {
    Error::InvalidValue { what: what.into(), value: value.into(), hint: hint.into() }
}
