//! The memory model: what a job holds on one GPU at its peak, component by component.
//!
//! Training is modelled as PyTorch reaches its peak on the steady-state (second) step, phase by
//! phase — the forward pass up to the loss, the start of backward, each layer's backward, the
//! end of backward and the optimizer step — and the peak is the largest phase, not a sum of
//! maxima. Every component is a separately named number with the formula that produced it.

pub mod activations;
mod dual;
mod infer;
mod lora;
mod multimodal;
pub mod optimizer;
mod seq2seq;
mod sequence;
mod train;

pub use train::{activation_profile, ActivationProfile};

use serde::Serialize;

use crate::allocator::{self, AllocConf};
use crate::error::{Error, Result};
use crate::job::{Job, Mode};
use crate::model::{Model, Role, TensorGroup};

pub use activations::Kernel;

/// Whether a component is memory PyTorch allocates (counted by `torch.cuda.max_memory_allocated`)
/// or device-level overhead outside it (seen only by `nvidia-smi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Tensor storage allocated through PyTorch's caching allocator.
    Allocated,
    /// CUDA context, library workspaces, allocator reserve.
    Overhead,
}

/// One named share of the peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Component {
    /// Stable name (the JSON key users script against).
    pub name: String,
    /// Exact bytes.
    pub bytes: u64,
    /// Allocated tensor storage or device overhead.
    pub kind: Kind,
    /// How the number was obtained (formula or stated assumption).
    pub detail: String,
}

/// A moment of the step at which memory is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward pass, inside the widest attention op of the last layer.
    ForwardAttention,
    /// Inside the last decoder layer's forward (DoRA rebuilding a weight norm).
    ForwardLayer,
    /// Loss computed: all activations, the autocast weight cache and the logits alive.
    ForwardEnd,
    /// First backward ops (cross-entropy gradient) with every activation still saved.
    BackwardStart,
    /// Backward through a decoder layer (the worst one).
    Backward,
    /// Backward finished: every gradient exists.
    BackwardEnd,
    /// `optimizer.step()`: parameters, gradients, states and the step's temporaries.
    OptimizerStep,
    /// Inference prefill of the prompt.
    Prefill,
    /// Inference at the end of generation: the KV cache at full context.
    Decode,
}

impl Phase {
    /// Human-readable phase name.
    pub fn describe(self) -> &'static str {
        match self {
            Phase::ForwardAttention => "forward, attention of the last layer",
            Phase::ForwardLayer => "forward, inside the last layer (DoRA weight norm, Mamba's scan)",
            Phase::ForwardEnd => "end of forward (loss computed)",
            Phase::BackwardStart => "start of backward (cross-entropy gradient)",
            Phase::Backward => "backward through the layers",
            Phase::BackwardEnd => "end of backward (all gradients)",
            Phase::OptimizerStep => "optimizer step",
            Phase::Prefill => "prefill",
            Phase::Decode => "end of generation (full KV cache)",
        }
    }
}

/// Allocated bytes at one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PhaseTotal {
    /// Which phase.
    pub phase: Phase,
    /// Allocated bytes there.
    pub allocated: u64,
}

/// The answer: the peak and what it is made of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Components at the peak phase (allocated ones, then overheads), summing to `total`.
    pub components: Vec<Component>,
    /// What `torch.cuda.max_memory_allocated()` would report.
    pub peak_allocated: u64,
    /// What `nvidia-smi` would show for the process: peak allocated + overheads.
    pub total: u64,
    /// The phase holding the peak.
    pub peak_phase: Phase,
    /// Allocated bytes at every phase evaluated.
    pub phases: Vec<PhaseTotal>,
    /// The attention kernel that runs.
    pub attention_kernel: Kernel,
    /// Facts about how the estimate was made (kernel fallbacks, assumptions).
    pub notes: Vec<String>,
}

impl Estimate {
    /// Bytes of the named component (0 when absent).
    pub fn component(&self, name: &str) -> u64 {
        self.components.iter().filter(|c| c.name == name).map(|c| c.bytes).sum()
    }
}

/// A phase under construction: named byte counts in u128 (no overflow for any validated job).
#[derive(Debug, Clone)]
pub(crate) struct Breakdown {
    pub phase: Phase,
    pub parts: Vec<(&'static str, u128, String)>,
}

impl Breakdown {
    pub fn new(phase: Phase) -> Self {
        Breakdown { phase, parts: Vec::new() }
    }
    /// Add `bytes` under `name`; a second part of the same name is summed into the first.
    pub fn add(&mut self, name: &'static str, bytes: u128, detail: impl Into<String>) {
        if bytes == 0 {
            return;
        }
        match self.parts.iter_mut().find(|p| p.0 == name) {
            Some(p) => p.1 += bytes,
            None => self.parts.push((name, bytes, detail.into())),
        }
    }
    pub fn total(&self) -> u128 {
        self.parts.iter().map(|p| p.1).sum()
    }
    /// Bytes under `name` (0 when absent).
    pub fn get(&self, name: &str) -> u128 {
        self.parts.iter().filter(|p| p.0 == name).map(|p| p.1).sum()
    }
}

/// The name of the trainable-parameters component of a LoRA estimate.
pub const ADAPTERS_COMPONENT: &str = train::ADAPTERS;

/// Model-state bytes of a LoRA job on one GPU, for engines that shard them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoraStates {
    /// The frozen base as loaded (quantized storage included).
    pub base: u128,
    /// Trainable parameters (fp32 adapters, modules_to_save copies).
    pub trainable: u128,
    /// Optimizer states of the trainable parameters (device-resident).
    pub states: u128,
}

/// [`LoraStates`] of `job` (all zero when it has no LoRA).
pub fn lora_states(m: &Model, job: &Job) -> LoraStates {
    if job.lora.is_none() {
        return LoraStates { base: 0, trainable: 0, states: 0 };
    }
    let ms = lora::model_states(m, job, &activations::Bytes::of(m, job));
    LoraStates { base: ms.weights, trainable: ms.adapters, states: ms.states }
}

/// The dtype name of a LoRA job's unquantized frozen base (`bf16` unless set).
pub fn base_dtype_name(job: &Job) -> &'static str {
    lora::base_dtype(job).short_name()
}

/// Estimate the peak GPU memory of `job` on `model` (single GPU). The caching-allocator reserve
/// follows `job.overheads.allocator` (simulated by default).
pub fn estimate(model: &Model, job: &Job) -> Result<Estimate> {
    estimate_inner(model, job)
}

/// The tensor-level allocation sequence `estimate` runs through the caching-allocator model
/// (memory/sequence.rs), or why the job gets the flat reserve instead.
pub fn allocation_sequence(model: &Model, job: &Job) -> std::result::Result<Vec<allocator::Op>, &'static str> {
    if model.encoder.is_some() {
        return Err("encoder models are not sequenced yet");
    }
    if model.multimodal.is_some() {
        return Err("vision-language models are not sequenced yet");
    }
    if model.seq2seq.is_some() {
        return Err("encoder-decoder models are not sequenced yet");
    }
    if model.ssm.is_some() {
        return Err("state-space models are not sequenced yet");
    }
    match job.mode {
        Mode::Train => sequence::training(model, job),
        Mode::Infer => {
            let (phases, _, _) = infer::phases(model, job);
            let w: u128 =
                phases.iter().take(1).flat_map(|p| &p.parts).filter(|p| p.0 == infer::WEIGHTS || p.0 == infer::SCALES).map(|p| p.1).sum();
            sequence::inference(model, job, w)
        }
    }
}

/// The caching-allocator reserve: PyTorch's caching allocator (crate::allocator, held to the
/// recorded segments of real GPU snapshots) run over the job's tensor-level allocation sequence
/// (memory/sequence.rs, held to recorded real sequences), minus the sequence's own allocated
/// peak. Where the job has no sequence, or `--allocator-reserve` is given, the flat fraction.
fn reserve(model: &Model, job: &Job, peak_allocated: u64) -> (u64, String) {
    let f = job.overheads.allocator_reserve;
    let flat = |why: &str| {
        (
            (peak_allocated as f64 * f).ceil() as u64,
            format!(
                "assumed {:.0}% of peak allocated ({why}): freed blocks PyTorch keeps cached, segment rounding, fragmentation",
                f * 100.0
            ),
        )
    };
    let Some(conf) = job.overheads.allocator else { return flat("--allocator-reserve") };
    let ops = match allocation_sequence(model, job) {
        Ok(ops) => ops,
        Err(why) => {
            let ignored = if conf == AllocConf::default() { "" } else { "; its PYTORCH_CUDA_ALLOC_CONF settings are not applied" };
            return flat(&format!("{why}{ignored}"));
        }
    };
    match allocator::simulate(&ops, conf, None) {
        Ok(r) => {
            let what = if job.mode == Mode::Train { "two training steps" } else { "a generation" };
            let live = allocator::peak_requested(&ops);
            let detail =
                format!("{}; tensor-level sequence of {what}, allocated peak {:.2} GiB", r.reason(), live as f64 / (1u64 << 30) as f64);
            (r.peak_reserved.saturating_sub(live), detail)
        }
        Err(_) => flat("the allocator model refused the sequence"),
    }
}

/// The per-process device terms outside PyTorch's allocator, as every single-GPU total states
/// them: the CUDA context and the cuBLAS workspaces (their sizes: `Overheads::default`).
pub fn device_overheads(o: &crate::job::Overheads, mode: Mode) -> [Component; 2] {
    [
        Component { name: "CUDA context".into(), bytes: o.context_for(mode), kind: Kind::Overhead, detail: o.context_detail(mode) },
        Component { name: "cuBLAS workspace".into(), bytes: o.cublas_for(mode), kind: Kind::Overhead, detail: o.cublas_detail(mode) },
    ]
}

/// [`estimate`] with the reserve simulated under the given `PYTORCH_CUDA_ALLOC_CONF` settings.
pub fn estimate_with(model: &Model, job: &Job, conf: &AllocConf) -> Result<Estimate> {
    let mut job = job.clone();
    job.overheads.allocator = Some(*conf);
    estimate_inner(model, &job)
}

/// A LoRA job's configuration against its model: targets peft would resolve, a base that is
/// not quantized twice, a readable pre-quantized layout. Every path that estimates a LoRA job
/// (one GPU, DDP, FSDP, plan) calls it first, so a bad configuration is an error, never a number.
pub fn check_lora(model: &Model, job: &Job) -> Result<()> {
    // Qwen3-VL-MoE's and Qwen3.5-MoE's experts are not converted by peft as Qwen3-MoE's are
    // (transformers conversion_mapping.py has its own entry for qwen3_vl_moe), and LoRA on them
    // with images was not measured: refused rather than counted as the text model's.
    let qwen3_vl_tower = model.multimodal.as_ref().and_then(|mm| mm.tower.encoder).and_then(|e| e.vision).map(|v| v.family)
        == Some(crate::model::VisionFamily::Qwen3Vl);
    if job.lora.is_some() && model.moe.is_some() && qwen3_vl_tower {
        return Err(Error::InvalidValue {
            what: "LoRA".into(),
            value: "a Qwen3-VL-MoE or Qwen3.5-MoE vision-language model".into(),
            hint: "LoRA/QLoRA on the MoE Qwen3-VL and Qwen3.5 vision-language models is not measured (peft adapts their experts differently from the text Qwen3-MoE's); the dense ones (Qwen3-VL-2B/4B, Qwen3.5) are modelled, and full fine-tuning of the MoE ones".into(),
        });
    }
    // LoRA on Llama 4's text model is measured (validation/llama4.py); with images (the vision
    // model's linears, quantized or not, beside it) it was not.
    if job.lora.is_some() && model.multimodal.as_ref().is_some_and(|mm| mm.llama4.is_some()) {
        return Err(Error::InvalidValue {
            what: "LoRA".into(),
            value: "Llama 4 with images".into(),
            hint: "LoRA/QLoRA on Llama 4 is measured for its text model: give the text_config alone (model_type llama4_text, as a text-only fine-tune saves it); with the vision model it is not modelled yet (full fine-tuning with images is)".into(),
        });
    }
    // peft's all-linear wraps Llama4Router too (an nn.Linear subclass returning a tuple), and the
    // LoRA layer's forward then fails on the tuple (peft 0.21.2 under transformers 5.23:
    // "'tuple' object has no attribute 'dtype'", validation/llama4.py's set-up).
    if job.lora.as_ref().is_some_and(|l| l.targets == crate::peft::Targets::AllLinear)
        && model.moe.as_ref().is_some_and(|m| m.dense_dispatch)
    {
        return Err(Error::InvalidValue {
            what: "--lora-target-modules".into(),
            value: "all-linear".into(),
            hint: "on Llama 4 peft's all-linear also wraps the MoE router (Llama4Router, an nn.Linear returning a tuple) and the forward fails; name the linears instead, e.g. --lora-target-modules q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj".into(),
        });
    }
    if let Some(l) = &job.lora {
        crate::peft::resolve(model, l)?;
        if let Some(q) = model.quantization.as_ref().filter(|q| q.method != "mxfp4") {
            if job.base.is_some() {
                return Err(Error::InvalidValue {
                    what: "base weights".into(),
                    value: job.base.map(|b| b.describe()).unwrap_or_default(),
                    hint: format!("the checkpoint is already quantized ({}); it is the frozen base as stored: drop --load-in-4bit/--load-in-8bit/--base-dtype", q.method),
                });
            }
            crate::quant::Plan::new(q)?;
        }
    }
    Ok(())
}

/// Refuse `what` (serving, multi-GPU plans) for an encoder, which vram estimates on one GPU only.
pub fn require_decoder(model: &Model, what: &str) -> Result<()> {
    if model.ssm.is_some() {
        return Err(Error::InvalidValue {
            what: "model".into(),
            value: model.model_type.clone(),
            hint: format!(
                "{} is a state-space or linear-attention model: {what} is not modelled for it yet; `vram estimate` gives its single-GPU training and its prefill (`--mode infer`), and `vram serve` (the vLLM engine) its serving",
                model.model_type
            ),
        });
    }
    if model.multimodal.is_some() || model.seq2seq.is_some() || model.dual.is_some() {
        return Err(Error::InvalidValue {
            what: "model".into(),
            value: model.model_type.clone(),
            hint: format!(
                "{} is {} {} model: {what} is modelled for decoder language models only; `vram estimate` gives its single-GPU training and inference",
                model.model_type,
                if model.kind().starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" },
                model.kind()
            ),
        });
    }
    match model.encoder {
        None => Ok(()),
        Some(enc) => Err(Error::InvalidValue {
            what: "model".into(),
            value: model.model_type.clone(),
            hint: format!(
                "{} is an encoder ({}): {what} is modelled for decoder language models only; `vram estimate` gives its single-GPU training and inference",
                model.model_type,
                enc.head.task()
            ),
        }),
    }
}

/// What an encoder job may ask for: single-GPU full fine-tuning or a forward pass. LoRA,
/// sharding, fused cross-entropy and generation settings are refused, not estimated as a decoder.
pub fn check_encoder(model: &Model, job: &Job) -> Result<()> {
    if model.seq2seq.is_some() {
        let what = if job.base.is_some_and(crate::peft::BaseWeights::is_bnb) {
            Some("QLoRA (a bitsandbytes base)")
        } else if job.lora.as_ref().is_some_and(|l| l.method != crate::peft::Method::Lora || !l.modules_to_save.is_empty()) {
            Some("DoRA and modules_to_save")
        } else if job.model_state_shards > 1 {
            Some("sharded training (ZeRO/FSDP)")
        } else if job.fused_cross_entropy {
            Some("fused linear cross-entropy")
        } else if job.prompt_len.is_some() || job.kv_dtype.is_some() {
            Some("generation settings (prompt length, KV-cache dtype)")
        } else if job.padded && model.relative_buckets > 0 && job.attention == crate::job::AttentionImpl::Sdpa {
            // integrations/sdpa_attention.py create_position_bias_mask: torch.where(mask, bias, min)
            // makes a batch × heads × q × k tensor per layer, not modelled yet.
            Some("padded batches on T5 (each layer's position bias becomes a batch×heads×seq² mask)")
        } else {
            None
        };
        return match what {
            Some(what) => Err(Error::InvalidValue {
                what: "encoder-decoder job".into(),
                value: what.into(),
                hint: format!("vram estimates encoder-decoder models' (Whisper, BART, T5) full fine-tuning, LoRA on a bf16/fp16/fp32 base and a forward pass on one GPU; {what} is not modelled for encoder-decoder models yet"),
            }),
            None => Ok(()),
        };
    }
    if let Some(mm) = &model.multimodal {
        let what = if matches!(job.base, Some(crate::peft::BaseWeights::Bnb8 { .. })) {
            Some("8-bit (LLM.int8) QLoRA")
        } else if job.lora.as_ref().is_some_and(|l| l.method != crate::peft::Method::Lora || !l.modules_to_save.is_empty()) {
            Some("DoRA and modules_to_save")
        } else if job.lora.is_some() && model.quantization.is_some() {
            Some("LoRA on a pre-quantized checkpoint")
        } else if job.model_state_shards > 1 {
            Some("sharded training (ZeRO/FSDP)")
        } else if job.fused_cross_entropy {
            Some("fused linear cross-entropy")
        } else {
            None
        };
        let image_tokens = mm.images.saturating_mul(mm.image_tokens);
        if image_tokens > job.seq {
            return Err(Error::InvalidValue {
                what: "sequence length".into(),
                value: job.seq.to_string(),
                hint: format!(
                    "{} image(s) × {} tokens = {image_tokens} image tokens do not fit a {}-token sequence: the sequence counts text and image tokens together; raise --seq-len{}",
                    mm.images,
                    mm.image_tokens,
                    job.seq,
                    match (&mm.anyres, mm.merger, mm.shuffle) {
                        (Some(a), _, _) => format!(", or pass a smaller --image-size (now {} px, {} tiles per image)", a.side, a.tiles),
                        (None, Some(_), _) => ", or pass a smaller --image-size".to_string(),
                        (None, None, Some(s)) => format!(
                            ", or pass a smaller --image-size (the processor's longest edge, now {} px: {} tiles per image)",
                            s.longest_edge, s.tiles
                        ),
                        _ => String::new(),
                    }
                ),
            });
        }
        if let Some(what) = what {
            return Err(Error::InvalidValue {
                what: "vision-language job".into(),
                value: what.into(),
                hint: format!("vram estimates LLaVA, Qwen2-VL, Gemma-3 and Idefics3/SmolVLM full fine-tuning (vision tower trained or frozen), LoRA and 4-bit QLoRA on the language model and inference on one GPU; {what} is not modelled for vision-language models yet"),
            });
        }
        return Ok(());
    }
    let Some(enc) = model.encoder else { return Ok(()) };
    let refuse = |what: &str| {
        Err(Error::InvalidValue {
            what: "encoder job".into(),
            value: what.into(),
            hint: format!(
                "{} ({}) is an encoder: vram estimates its full fine-tuning and inference on one GPU; {what} is not modelled for encoders yet",
                model.model_type,
                enc.head.task()
            ),
        })
    };
    // LoRA on a text encoder (peft's SEQ_CLS / TOKEN_CLS / FEATURE_EXTRACTION task types);
    // vision towers, DoRA, a quantized base and extra modules_to_save are not modelled.
    if let Some(l) = &job.lora {
        if model.dual.is_some() {
            return refuse("LoRA on a dual encoder");
        }
        if enc.modern.is_some() && l.targets == crate::peft::Targets::AllLinear {
            // all-linear also adapts the prediction head's dense (and, on a classifier, which
            // output layer peft leaves out is not checked yet): explicit names only.
            return refuse("LoRA all-linear on ModernBERT (name the modules: Wqkv,Wo,Wi)");
        }
        if job.base.is_some_and(crate::peft::BaseWeights::is_bnb) {
            return refuse("QLoRA (a bitsandbytes base)");
        }
        if l.method != crate::peft::Method::Lora || l.modules_to_save.iter().any(|s| s != "classifier") {
            return refuse("DoRA and modules_to_save other than the classifier");
        }
    }
    if job.model_state_shards > 1 {
        return refuse("sharded training (ZeRO/FSDP)");
    }
    if job.fused_cross_entropy {
        return refuse("fused linear cross-entropy");
    }
    if job.prompt_len.is_some() || job.kv_dtype.is_some() {
        return refuse("generation (prompt length, KV-cache dtype)");
    }
    Ok(())
}

/// Parameters an approximate model's checkpoint holds beyond its Llama-style stand-in
/// (`arch_infer::approximate_model`): the headers' exact count minus the stand-in's. Zero for
/// every recognised architecture, whose count comes from its config.
pub fn unmodelled_parameters(m: &Model) -> u64 {
    match (&m.approximation, m.checkpoint_parameters) {
        (Some(_), Some(exact)) => exact.saturating_sub(m.parameters()),
        _ => 0,
    }
}

/// The parameter tensors weights, gradients and optimizer states are counted over: the model's
/// inventory, plus, for an approximate model, one group holding the checkpoint's parameters
/// the stand-in lacks, so those figures follow the exact count read from the headers.
pub(crate) fn inventory(m: &Model) -> Vec<TensorGroup> {
    let mut v = m.tensors();
    let extra = unmodelled_parameters(m);
    if extra > 0 {
        // Counted as linear weights: most of an unknown layer's parameters are matrices.
        v.push(TensorGroup {
            name: "unmodelled tensors (safetensors headers)".into(),
            numel: extra,
            count: 1,
            role: Role::Linear,
            rows: extra,
            cols: 1,
        });
    }
    v
}

/// What a Mamba job may ask for: single-GPU full fine-tuning under autocast or in fp32, and a
/// prefill. LoRA, sharding, pure half precision (not measured) and KV-cache settings are refused.
fn check_ssm(model: &Model, job: &Job) -> Result<()> {
    if model.ssm.is_none() {
        return Ok(());
    }
    let pure_half = job.mode == Mode::Train && !job.precision.is_mixed() && job.precision.compute_dtype().bytes() == 2;
    let delta = model.delta_net().is_some();
    let what = if job.lora.is_some() && !delta {
        Some("LoRA/QLoRA")
    } else if job.lora.is_some() && (matches!(job.base, Some(crate::peft::BaseWeights::Bnb8 { .. })) || model.quantization.is_some()) {
        Some("8-bit QLoRA or LoRA on a pre-quantized checkpoint (LoRA on the bf16 model and 4-bit QLoRA are measured)")
    } else if job.model_state_shards > 1 {
        Some("sharded training (ZeRO/FSDP)")
    } else if pure_half {
        Some("pure bf16/fp16 training (measured under autocast and in fp32 only)")
    } else if job.mode == Mode::Infer && job.prompt_len.is_some_and(|p| p < job.seq) {
        Some("a generation past the prompt (--prompt-len below --seq-len): the prefill of --seq-len tokens is what is measured; the decode steps are not")
    } else if job.padded && !(delta && job.mode == Mode::Train) {
        Some("a padded batch (the attention mask and the mixers' padding mask were not measured; Gated DeltaNet training is)")
    } else if delta
        && job.mode == Mode::Infer
        && job.precision != crate::job::Precision::Bf16
        && job.precision != crate::job::Precision::Fp16
    {
        Some("a Gated DeltaNet prefill outside bf16/fp16 (measured in bf16 only)")
    } else if model.is_hybrid() && job.mode == Mode::Infer && job.attention != crate::job::AttentionImpl::Sdpa {
        Some("hybrid inference with eager or flash-attention-2 attention (measured under SDPA, transformers' default)")
    } else if model.ssm.is_some_and(|s| s.mamba2.is_some()) && job.mode == Mode::Train && !job.precision.is_mixed() {
        Some("Mamba-2 training without autocast (measured under bf16 autocast only)")
    } else if model.is_hybrid() && job.mode == Mode::Train && !job.precision.is_mixed() {
        Some("hybrid training without autocast (measured under bf16 autocast only)")
    } else if job.fused_cross_entropy && !delta {
        // Liger patches Qwen3-Next and Qwen3.5 (apply_liger_kernel_to_qwen3_5); its fused loss
        // replaces the LM head and loss after the layers, as on any decoder.
        Some("fused linear cross-entropy")
    } else if job.kv_dtype.is_some() {
        Some("a KV-cache dtype (a state-space layer's cache is its conv and recurrent state)")
    } else {
        None
    };
    match what {
        Some(what) => Err(Error::InvalidValue {
            what: "state-space job".into(),
            value: what.into(),
            hint: format!("vram estimates Mamba's full fine-tuning (bf16-mixed or fp32; Mamba-2 and the hybrids — Bamba, Granite-4.0-H, Falcon-H1, Jamba, Nemotron-H, Zamba, Zamba2, Qwen3-Next, Qwen3.5 — bf16-mixed) and a prefill (hybrids under SDPA) on one GPU; {what} is not modelled for state-space and linear-attention models yet"),
        }),
        None => Ok(()),
    }
}

fn estimate_inner(model: &Model, job: &Job) -> Result<Estimate> {
    job.validate()?;
    check_encoder(model, job)?;
    check_ssm(model, job)?;
    check_lora(model, job)?;
    let (phases, kernel, notes) = match job.mode {
        _ if model.dual.is_some() => dual::phases(model, job),
        _ if model.multimodal.is_some() => multimodal::phases(model, job),
        _ if model.seq2seq.is_some() => seq2seq::phases(model, job),
        Mode::Train => train::phases(model, job),
        Mode::Infer => infer::phases(model, job),
    };
    let peak = phases.iter().max_by_key(|p| p.total()).expect("at least one phase").clone();
    let to_u64 = |v: u128, what: &str| u64::try_from(v).map_err(|_| Error::Overflow { what: what.into() });
    let peak_allocated = to_u64(peak.total(), "peak allocated memory")?;
    let mut components = Vec::new();
    for (name, bytes, detail) in &peak.parts {
        components.push(Component { name: (*name).into(), bytes: to_u64(*bytes, name)?, kind: Kind::Allocated, detail: detail.clone() });
    }
    let o = job.overheads;
    let (reserve, detail) = reserve(model, job, peak_allocated);
    components.push(Component { name: "caching allocator reserve".into(), bytes: reserve, kind: Kind::Overhead, detail });
    if job.mode == Mode::Train && optimizer::paged(job) {
        components.push(Component {
            name: "paged optimizer states".into(),
            bytes: u64::try_from(optimizer::states(model, job)).map_err(|_| Error::Overflow { what: "optimizer states".into() })?,
            kind: Kind::Overhead,
            detail: format!(
                "{} states in CUDA unified memory (bitsandbytes paged optimizer): outside torch's allocator, evicted to host RAM when the GPU runs short",
                job.optimizer.name()
            ),
        });
    }
    components.extend(device_overheads(&o, job.mode));
    let total = components
        .iter()
        .try_fold(0u64, |acc, c| acc.checked_add(c.bytes))
        .ok_or_else(|| Error::Overflow { what: "total memory".into() })?;
    let phases = phases
        .iter()
        .map(|p| Ok(PhaseTotal { phase: p.phase, allocated: to_u64(p.total(), "phase memory")? }))
        .collect::<Result<Vec<_>>>()?;
    Ok(Estimate { components, peak_allocated, total, peak_phase: peak.phase, phases, attention_kernel: kernel, notes })
}
