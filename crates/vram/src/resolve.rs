//! Raw flags → validated core types, once. Every bad value becomes a clear error, and a flag
//! the chosen mode does not read is refused rather than ignored.

use anyhow::Result;
use vram_core::gpu::Gpu;
use vram_core::parallel::{Engine, FsdpStrategy, Parallel};
use vram_core::peft::{BaseWeights, KbitPrepare, Lora, Method, QuantType, Targets};
use vram_core::units::parse_size;
use vram_core::{AttentionImpl, Checkpointing, DType, Job, Mode, Model, Optimizer, OptimizerImpl, Overheads, ParseOptions, Precision};

use crate::cli::{JobArgs, ParallelArgs, PeftArgs};
use crate::errors::usage;
pub use crate::errors::UsageError;
use crate::source::load_model;

/// GPUs per node when --gpus-per-node is not given: an HGX/DGX node.
const DEFAULT_GPUS_PER_NODE: u64 = 8;

/// Resolve the model and the job.
pub fn resolve(a: &JobArgs) -> Result<(Model, Job)> {
    let spec =
        a.model.as_deref().ok_or_else(|| usage("--model is required: a preset (`vram models`), a config.json or a model directory"))?;
    let mode = mode(&a.mode)?;
    check_mode_flags(a, mode)?;
    let mut model = load_model(spec, ParseOptions { approximate_unknown: a.approximate_architecture })?;
    model.apply_task(a.task.as_deref(), a.num_labels).map_err(usage)?;
    if let Some(side) = a.image_size {
        model.set_image_size(side).map_err(usage)?;
    }
    if let Some(n) = a.source_len {
        model.set_source_len(n).map_err(usage)?;
    }
    model.set_vision_inputs(a.images_per_sample, a.freeze_vision_tower).map_err(usage)?;
    let job = job(a, mode, &model)?;
    // Past the trained context (or its RoPE scaling's reach) the number is still given, with why.
    let context = model.context_warnings(job.seq);
    model.warnings.extend(context);
    Ok((model, job))
}

fn mode(s: &str) -> Result<Mode> {
    match s.to_ascii_lowercase().as_str() {
        "train" | "training" => Ok(Mode::Train),
        "infer" | "inference" | "serve" => Ok(Mode::Infer),
        other => Err(usage(format!("invalid mode `{other}`: use train or infer"))),
    }
}

/// The flags given on the command line that the other mode alone reads.
fn foreign_flags(a: &JobArgs, mode: Mode) -> Vec<&'static str> {
    let given = |present: bool, flag: &'static str| present.then_some(flag);
    let flags = match mode {
        Mode::Infer => vec![
            given(a.optimizer.is_some(), "--optimizer"),
            given(a.optimizer_impl.is_some(), "--optimizer-impl"),
            given(a.grad_accum.is_some(), "--grad-accum"),
            given(a.checkpointing.is_some(), "--checkpointing"),
            given(a.fused_cross_entropy, "--fused-cross-entropy"),
            given(a.use_cache.is_some(), "--use-cache"),
            given(a.peft.given(), "LoRA/QLoRA flags (--peft, --lora-*, --load-in-4bit …)"),
            given(a.peft.optimizer_in_bwd, "--optimizer-in-bwd"),
            given(a.freeze_vision_tower, "--freeze-vision-tower"),
        ],
        Mode::Train => vec![given(a.kv_dtype.is_some(), "--kv-dtype"), given(a.prompt_len.is_some(), "--prompt-len")],
    };
    flags.into_iter().flatten().collect()
}

/// Refuse training-only flags under `--mode infer` and inference-only ones under training.
fn check_mode_flags(a: &JobArgs, mode: Mode) -> Result<()> {
    let foreign = foreign_flags(a, mode);
    if foreign.is_empty() {
        return Ok(());
    }
    let (only, here) = match mode {
        Mode::Infer => ("training", "--mode infer has no backward pass or optimizer step"),
        Mode::Train => ("inference", "pass --mode infer to estimate inference"),
    };
    Err(usage(format!(
        "{} {} only for {only}: {here}; drop {}",
        foreign.join(", "),
        if foreign.len() == 1 { "is" } else { "are" },
        if foreign.len() == 1 { "it" } else { "them" }
    )))
}

fn job(a: &JobArgs, mode: Mode, model: &Model) -> Result<Job> {
    let precision = match &a.precision {
        Some(p) => Precision::parse(p)?,
        None if mode == Mode::Train => Precision::Bf16Mixed,
        // A pre-quantized checkpoint is run as stored (its class; the exact layout is quant.rs).
        None => match &model.quantization {
            Some(q) => vram_core::quant::Plan::new(q)?.precision(),
            None => Precision::Bf16,
        },
    };
    let (optimizer, optimizer_impl) = optimizer(a)?;
    let job = Job {
        mode,
        batch: a.batch_size.unwrap_or(1),
        seq: model.sequence(a.seq_len, 2048).map_err(usage)?,
        precision,
        optimizer,
        optimizer_impl,
        checkpointing: Checkpointing::parse(a.checkpointing.as_deref().unwrap_or("none"))?,
        attention: AttentionImpl::parse(&a.attention)?,
        grad_accum: a.grad_accum.unwrap_or(1),
        fused_cross_entropy: a.fused_cross_entropy,
        kv_dtype: kv_dtype(a.kv_dtype.as_deref().unwrap_or("auto"))?,
        prompt_len: a.prompt_len,
        use_cache: a.use_cache.as_deref().map(parse_bool).transpose()?,
        model_state_shards: 1,
        overheads: overheads(a)?,
        lora: lora(&a.peft)?,
        base: base_weights(&a.peft)?,
        optimizer_in_bwd: a.peft.optimizer_in_bwd,
        padded: a.padded,
    };
    job.validate()?;
    Ok(job)
}

impl PeftArgs {
    /// Whether any LoRA/QLoRA flag was given.
    pub fn given(&self) -> bool {
        self.peft.is_some()
            || self.use_peft.is_some()
            || self.use_dora.is_some()
            || self.lora_r.is_some()
            || self.lora_alpha.is_some()
            || self.lora_dropout.is_some()
            || self.lora_target_modules.is_some()
            || self.lora_modules_to_save.is_some()
            || self.base_dtype.is_some()
            || self.load_in_4bit.is_some()
            || self.load_in_8bit.is_some()
            || self.kbit_prepare.is_some()
            || self.bnb_given()
    }

    fn bnb_given(&self) -> bool {
        self.bnb_4bit_quant_type.is_some()
            || self.use_bnb_nested_quant.is_some()
            || self.bnb_4bit_compute_dtype.is_some()
            || self.bnb_4bit_quant_storage.is_some()
    }
}

/// The adapter configuration, or `None` for full fine-tuning. Adapter flags without an adapter
/// method are refused, never ignored.
fn lora(p: &PeftArgs) -> Result<Option<Lora>> {
    let flag = |v: &Option<String>| v.as_deref().map(parse_bool).transpose().map(|b| b.unwrap_or(false));
    let method = match (&p.peft, flag(&p.use_peft)?, flag(&p.use_dora)?) {
        (Some(m), _, dora) => {
            let m = Method::parse(m)?;
            if dora && m == Method::Lora {
                return Err(usage("--peft lora and --use-dora disagree: use --peft dora"));
            }
            Some(m)
        }
        (None, _, true) => Some(Method::Dora),
        (None, true, false) => Some(Method::Lora),
        (None, false, false) => None,
    };
    let Some(method) = method else {
        let stray: Vec<&str> = [
            (p.lora_r.is_some(), "--lora-r"),
            (p.lora_alpha.is_some(), "--lora-alpha"),
            (p.lora_dropout.is_some(), "--lora-dropout"),
            (p.lora_target_modules.is_some(), "--lora-target-modules"),
            (p.lora_modules_to_save.is_some(), "--lora-modules-to-save"),
            (p.base_dtype.is_some(), "--base-dtype"),
        ]
        .into_iter()
        .filter_map(|(g, f)| g.then_some(f))
        .collect();
        if !stray.is_empty() {
            return Err(usage(format!(
                "{} describe LoRA adapters, but no adapter method was given: add --peft lora (or TRL's --use_peft), or drop them for full fine-tuning",
                stray.join(", ")
            )));
        }
        return Ok(None);
    };
    let d = Lora::default();
    let targets = match &p.lora_target_modules {
        Some(v) => Targets::parse(&v.join(","))?,
        None => Targets::Default,
    };
    Ok(Some(Lora {
        method,
        r: p.lora_r.unwrap_or(d.r),
        alpha: p.lora_alpha.unwrap_or(d.alpha),
        dropout: p.lora_dropout.unwrap_or(d.dropout),
        targets,
        modules_to_save: p.lora_modules_to_save.clone().unwrap_or_default().into_iter().map(|s| s.trim().to_string()).collect(),
    }))
}

fn kbit_prepare(p: &PeftArgs) -> Result<KbitPrepare> {
    match p.kbit_prepare.as_deref().unwrap_or("trl").to_ascii_lowercase().as_str() {
        "trl" => Ok(KbitPrepare::Trl),
        "peft" => Ok(KbitPrepare::Peft),
        other => Err(usage(format!("invalid --kbit-prepare `{other}`: use trl or peft"))),
    }
}

/// How the frozen base is loaded: a dtype, or bitsandbytes 4/8 bits.
fn base_weights(p: &PeftArgs) -> Result<Option<BaseWeights>> {
    let on = |v: &Option<String>| v.as_deref().map(parse_bool).transpose().map(|b| b.unwrap_or(false));
    let dtype = |flag: &str, v: &str| -> Result<DType> {
        match DType::from_torch_name(v) {
            Some(d @ (DType::BF16 | DType::F16 | DType::F32)) => Ok(d),
            _ => Err(usage(format!("invalid {flag} `{v}`: use bf16, fp16 or fp32"))),
        }
    };
    let (four, eight) = (on(&p.load_in_4bit)?, on(&p.load_in_8bit)?);
    if four && eight {
        return Err(usage("--load-in-4bit and --load-in-8bit exclude each other: pick one"));
    }
    if !four && !eight && p.kbit_prepare.is_some() {
        return Err(usage("--kbit-prepare describes a 4/8-bit base: add --load-in-4bit or --load-in-8bit, or drop it"));
    }
    if !four && p.bnb_given() {
        return Err(usage("--bnb-4bit-* options describe a 4-bit base: add --load-in-4bit, or drop them"));
    }
    if (four || eight) && p.base_dtype.is_some() {
        return Err(usage(
            "--base-dtype sets an unquantized base; with --load-in-4bit/8bit the unquantized rest is fp32 after prepare_model_for_kbit_training: drop --base-dtype",
        ));
    }
    if four {
        let quant_type = match p.bnb_4bit_quant_type.as_deref().unwrap_or("nf4").to_ascii_lowercase().as_str() {
            "nf4" => QuantType::Nf4,
            "fp4" => QuantType::Fp4,
            other => return Err(usage(format!("invalid --bnb-4bit-quant-type `{other}`: use nf4 or fp4"))),
        };
        let storage = match p.bnb_4bit_quant_storage.as_deref() {
            None | Some("uint8") | Some("torch.uint8") => DType::I8,
            Some(v) => dtype("--bnb-4bit-quant-storage", v)?,
        };
        return Ok(Some(BaseWeights::Bnb4 {
            quant_type,
            nested: on(&p.use_bnb_nested_quant)?,
            compute: dtype("--bnb-4bit-compute-dtype", p.bnb_4bit_compute_dtype.as_deref().unwrap_or("bf16"))?,
            storage,
            prepare: kbit_prepare(p)?,
        }));
    }
    if eight {
        return Ok(Some(BaseWeights::Bnb8 { prepare: kbit_prepare(p)? }));
    }
    Ok(p.base_dtype.as_deref().map(|v| dtype("--base-dtype", v)).transpose()?.map(|dtype| BaseWeights::Dtype { dtype }))
}

fn optimizer(a: &JobArgs) -> Result<(Optimizer, OptimizerImpl)> {
    let (optimizer, implied) = Optimizer::parse(a.optimizer.as_deref().unwrap_or("adamw"))?;
    let optimizer_impl = match (&a.optimizer_impl, implied) {
        (Some(s), _) => OptimizerImpl::parse(s)?,
        (None, Some(i)) => i,
        (None, None) => OptimizerImpl::Foreach,
    };
    Ok((optimizer, optimizer_impl))
}

fn kv_dtype(s: &str) -> Result<Option<DType>> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8" => Ok(Some(DType::F8)),
        other => Ok(Some(
            DType::from_torch_name(other)
                .ok_or_else(|| usage(format!("invalid KV-cache dtype `{other}`: use auto, fp8, bf16, fp16 or fp32")))?,
        )),
    }
}

/// `--alloc-conf` where the reserve is never simulated (sharded estimates, plan) would be
/// ignored: an error naming where it works.
pub fn reject_alloc_conf(a: &JobArgs, command: &str) -> Result<()> {
    if a.alloc_conf.is_some() {
        return Err(usage(format!(
            "--alloc-conf is read where the caching allocator is simulated (a single-GPU estimate, fit, tune, run), not by {command}, which assumes a flat reserve: drop it, or use --allocator-reserve"
        )));
    }
    Ok(())
}

pub fn overheads(a: &JobArgs) -> Result<Overheads> {
    let mut o = Overheads::default();
    if let Some(s) = &a.cuda_context {
        o.cuda_context = Some(size("--cuda-context", s)?);
    }
    if let Some(s) = &a.cublas_workspace {
        o.cublas_workspace = Some(size("--cublas-workspace", s)?);
    }
    if let Some(r) = a.allocator_reserve {
        o.allocator_reserve = r;
        o.allocator = None;
    } else {
        o.allocator = Some(crate::explain::alloc_conf(a.alloc_conf.as_deref())?);
    }
    Ok(o)
}

fn parse_bool(s: &str) -> Result<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        other => Err(usage(format!("invalid boolean `{other}`: use true or false"))),
    }
}

/// Whether a value is a bare number (no unit): `80`, `80.5`, `1_000`.
fn is_bare_number(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '_')
}

/// A memory size for `flag`. A bare number is refused: `80` could mean bytes, GB or GiB.
pub fn size(flag: &str, s: &str) -> Result<u64> {
    if is_bare_number(s) {
        let n = s.trim();
        return Err(usage(format!("{flag} {n}: a bare number is ambiguous; write {n}GB (10^9 bytes), {n}GiB (2^30 bytes) or {n}MiB")));
    }
    Ok(parse_size(s)?)
}

/// A size that may be nothing (`--cuda-graph-memory 0`): zero, bare or with a unit, is the same
/// in every unit; anything else is [`size`].
pub fn size_or_zero(flag: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let unit = t.trim_start_matches(['0', '.', '_']);
    // The stripped prefix must hold a 0: "." or "_" alone is not a number.
    let zero = t[..t.len() - unit.len()].contains('0')
        && !unit.starts_with(|c: char| c.is_ascii_digit())
        && (unit.is_empty() || parse_size(&format!("1{unit}")).is_ok());
    if zero {
        return Ok(0);
    }
    size(flag, s)
}

/// `--gpu`: a catalogue name, or a size with its unit.
pub fn gpu(s: &str) -> Result<Gpu> {
    if s.contains(',') {
        return Err(usage(format!(
            "--gpu {s}: a list of GPUs plans llama.cpp over mixed GPUs (a .gguf file with llama.cpp's layer split); this plan takes one GPU type (--gpus N of it)"
        )));
    }
    if is_bare_number(s) {
        let n = s.trim();
        return Err(usage(format!(
            "--gpu {n}: a bare number is ambiguous; write {n}GB (10^9 bytes), {n}GiB (2^30 bytes), or a GPU name such as h100 (`vram gpus` lists them)"
        )));
    }
    Ok(vram_core::gpu::lookup(s)?)
}

/// `--gpu a,b,…`: one GPU per entry, CUDA0 first (llama.cpp over mixed GPUs); a single name is
/// a list of one.
pub fn gpu_list(s: &str) -> Result<Vec<Gpu>> {
    s.split(',').map(|g| gpu(g.trim())).collect()
}

/// Whether any layout flag asks for more than one plain GPU.
fn wants_layout(a: &ParallelArgs) -> bool {
    a.gpus.is_some_and(|g| g > 1)
        || a.nodes.is_some_and(|n| n > 1)
        || a.zero.is_some()
        || a.fsdp.is_some()
        || a.offload.is_some()
        || a.tp > 1
        || a.pp > 1
        || a.cp > 1
        || a.ep > 1
        || a.sp
        || a.distributed_optimizer
}

/// Total GPUs: --gpus, or --nodes × --gpus-per-node; never assumed.
fn gpu_count(a: &ParallelArgs) -> Result<(u64, u64)> {
    let per_node = a.gpus_per_node.unwrap_or(DEFAULT_GPUS_PER_NODE);
    if per_node == 0 {
        return Err(usage("--gpus-per-node 0: a node has at least one GPU"));
    }
    let from_nodes = match a.nodes {
        Some(n) if a.gpus.is_none() && a.gpus_per_node.is_none() => {
            return Err(usage(format!("--nodes {n} needs --gpus-per-node (or give --gpus): the GPU count is never assumed")))
        }
        Some(n) => Some(
            n.checked_mul(per_node)
                .ok_or_else(|| usage(format!("--nodes {n} × --gpus-per-node {per_node} overflows: give the real number of nodes")))?,
        ),
        None => None,
    };
    match (a.gpus, from_nodes) {
        (Some(g), Some(f)) if g != f => {
            Err(usage(format!("--nodes {} × --gpus-per-node {per_node} = {f} is not --gpus {g}", a.nodes.unwrap_or(0))))
        }
        (Some(g), _) | (None, Some(g)) => Ok((g, per_node)),
        (None, None) => {
            Err(usage("a distributed layout needs the GPU count: give --gpus N (or --nodes N with --gpus-per-node M); it is never assumed"))
        }
    }
}

/// The engine the flags name; `--offload` needs one that offloads.
fn engine(a: &ParallelArgs, p: &mut Parallel) -> Result<()> {
    match (&a.zero, &a.fsdp) {
        (Some(_), Some(_)) => return Err(usage("--zero (DeepSpeed) and --fsdp are two engines: pick one")),
        (Some(z), None) => {
            p.engine = Engine::DeepSpeed;
            p.zero = *z;
        }
        (None, Some(f)) => {
            p.engine = Engine::Fsdp;
            p.fsdp = FsdpStrategy::parse(f)?;
        }
        (None, None) if a.offload.is_some() => {
            return Err(usage("--offload needs an engine that offloads: add --zero 2 or --zero 3 (DeepSpeed), or --fsdp full_shard"))
        }
        (None, None) => {
            let megatron = a.tp > 1 || a.pp > 1 || a.cp > 1 || a.ep > 1 || a.sp || a.distributed_optimizer;
            p.engine = if megatron { Engine::Megatron } else { Engine::Ddp };
        }
    }
    Ok(())
}

fn offload(a: &ParallelArgs, p: &mut Parallel) -> Result<()> {
    match a.offload.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("none") => {}
        Some("optimizer") | Some("cpu") => p.offload_optimizer = true,
        Some("params") | Some("param") | Some("all") => {
            p.offload_optimizer = true;
            p.offload_params = true;
        }
        Some(other) => return Err(usage(format!("invalid --offload `{other}`: use optimizer or params"))),
    }
    Ok(())
}

/// Resolve the distributed layout flags; `None` when the job is a plain single-GPU one.
pub fn resolve_parallel(a: &ParallelArgs, mode: Mode) -> Result<Option<Parallel>> {
    if !wants_layout(a) {
        return Ok(None);
    }
    if mode == Mode::Infer {
        let training = [
            (a.zero.is_some(), "--zero"),
            (a.fsdp.is_some(), "--fsdp"),
            (a.offload.is_some(), "--offload"),
            (a.distributed_optimizer, "--distributed-optimizer"),
        ];
        if let Some((_, flag)) = training.iter().find(|(given, _)| *given) {
            return Err(usage(format!("{flag} shards or offloads training state; --mode infer has none: drop it")));
        }
    }
    let (gpus, gpus_per_node) = gpu_count(a)?;
    let mut p = Parallel {
        gpus,
        gpus_per_node,
        tp: a.tp,
        pp: a.pp,
        cp: a.cp,
        ep: a.ep,
        sp: a.sp,
        virtual_stages: a.virtual_stages,
        distributed_optimizer: a.distributed_optimizer,
        ..Parallel::single()
    };
    if let Some(s) = &a.nccl_buffer {
        p.nccl_buffer = size("--nccl-buffer", s)?;
    }
    engine(a, &mut p)?;
    offload(a, &mut p)?;
    Ok(Some(p))
}

/// Flags a searching command decides itself would be silently overridden: refuse them by name.
/// `fit` and `tune` search the micro-batch (and derive accumulation from `--global-batch-size`);
/// `plan` also searches accumulation and recomputation.
pub fn reject_searched_flags(a: &JobArgs, command: &str, global_batch: Option<u64>) -> Result<()> {
    let plan = command.contains("plan");
    let given = |present: bool, flag: &'static str| present.then_some(flag);
    let searched: Vec<&str> = [
        given(a.batch_size.is_some(), "--batch-size"),
        given(a.grad_accum.is_some() && (plan || global_batch.is_some()), "--grad-accum"),
        given(a.checkpointing.is_some() && plan, "--checkpointing"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if searched.is_empty() {
        return Ok(());
    }
    Err(usage(format!(
        "{} {} chosen by {command} itself (it searches {}); drop {}",
        searched.join(", "),
        if searched.len() == 1 { "is" } else { "are" },
        if plan { "micro-batch, accumulation and recomputation" } else { "the micro-batch; --global-batch-size sets the accumulation" },
        if searched.len() == 1 { "it" } else { "them" }
    )))
}

/// Whether any job flag without a default was given (they only matter together with --model).
pub fn job_flags_given(a: &JobArgs) -> bool {
    a.batch_size.is_some()
        || a.grad_accum.is_some()
        || a.checkpointing.is_some()
        || a.use_cache.is_some()
        || a.prompt_len.is_some()
        || a.precision.is_some()
        || a.optimizer.is_some()
        || a.optimizer_impl.is_some()
        || a.kv_dtype.is_some()
        || a.cuda_context.is_some()
        || a.cublas_workspace.is_some()
        || a.allocator_reserve.is_some()
        || a.alloc_conf.is_some()
        || a.fused_cross_entropy
}
