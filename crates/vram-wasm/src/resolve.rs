//! Request fields → the core's `Model`, `Job` and `Gpu`, with the CLI's flag names, defaults
//! and refusals (crates/vram/src/resolve.rs): a field the chosen mode does not read is refused,
//! never ignored, so the page and `vram estimate` give the same answer or the same complaint.

use vram_core::gpu::Gpu;
use vram_core::peft::{BaseWeights, KbitPrepare, Lora, Method, QuantType, Targets};
use vram_core::units::parse_size;
use vram_core::{
    parse_config_with, presets, sniff, AttentionImpl, Checkpointing, DType, FileKind, Job, Mode, Model, Optimizer, OptimizerImpl,
    Overheads, ParseOptions, Precision,
};

use crate::fields::Fields;
use crate::RequestError;

type R<T> = Result<T, RequestError>;

/// Largest config.json text accepted (the CLI's limit; real ones are a few KB).
pub const MAX_CONFIG: usize = 16 << 20;

/// Keys naming the model.
pub const MODEL_KEYS: &[&str] = &[
    "model",
    "config",
    "config_name",
    "approximate_architecture",
    "task",
    "num_labels",
    "image_size",
    "source_len",
    "images_per_sample",
    "freeze_vision_tower",
];

/// Keys of the job, as the CLI's job flags (underscores for dashes).
pub const JOB_KEYS: &[&str] = &[
    "mode",
    "batch_size",
    "seq_len",
    "precision",
    "optimizer",
    "optimizer_impl",
    "checkpointing",
    "attention",
    "grad_accum",
    "fused_cross_entropy",
    "use_cache",
    "kv_dtype",
    "prompt_len",
    "cuda_context",
    "cublas_workspace",
    "allocator_reserve",
    "optimizer_in_bwd",
    "padded",
];

/// LoRA/QLoRA keys (`--peft lora --lora-r 16 --load-in-4bit …`).
pub const PEFT_KEYS: &[&str] = &[
    "peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_modules_to_save",
    "base_dtype",
    "load_in_4bit",
    "load_in_8bit",
    "bnb_4bit_quant_type",
    "use_bnb_nested_quant",
    "bnb_4bit_compute_dtype",
    "kbit_prepare",
];

/// The model: a preset (`"model": "llama-3.1-8b"`, also by Hub id) or config.json text
/// (`"config": "{…}"`, named by `config_name`).
pub fn model(f: &mut Fields) -> R<Model> {
    let (task, labels) = (f.str("task")?, f.u64("num_labels")?);
    let mut m = model_only(f)?;
    m.apply_task(task.as_deref(), labels).map_err(RequestError::new)?;
    if let Some(side) = f.u64("image_size")? {
        m.set_image_size(side).map_err(RequestError::new)?;
    }
    if let Some(n) = f.u64("source_len")? {
        m.set_source_len(n).map_err(RequestError::new)?;
    }
    let freeze = f.bool("freeze_vision_tower")?.unwrap_or(false);
    m.set_vision_inputs(f.u64("images_per_sample")?, freeze).map_err(RequestError::new)?;
    Ok(m)
}

fn model_only(f: &mut Fields) -> R<Model> {
    let approximate = f.bool("approximate_architecture")?.unwrap_or(false);
    let name = f.str("config_name")?;
    match (f.str("model")?, f.str("config")?) {
        (Some(_), Some(_)) => Err(RequestError::new("give either `model` (a preset) or `config` (config.json text), not both")),
        (None, None) => Err(RequestError::new(
            "no model: give `model` (a preset, see the `presets` operation) or `config` (the text of a Hugging Face config.json)",
        )),
        (Some(m), None) => {
            if name.is_some() || approximate {
                return Err(RequestError::new("`config_name` and `approximate_architecture` describe a `config`; a preset needs neither"));
            }
            if presets::find(&m).is_none() && (m.contains('/') || m.ends_with(".json")) {
                return Err(RequestError::new(format!(
                    "`{m}` is not a built-in preset, and the page cannot read files or the Hub: drop the model's config.json on the page (or pass it as `config`)"
                )));
            }
            Ok(presets::load(&m)?)
        }
        (None, Some(text)) => {
            let file = name.unwrap_or_else(|| "config.json".to_string());
            if text.len() > MAX_CONFIG {
                return Err(RequestError::new(format!(
                    "{file} is {} bytes; a config.json is a few KB (limit {MAX_CONFIG}): is this the right file?",
                    text.len()
                )));
            }
            // Say what a weights file, a GGUF or a saved web page is, as the CLI does.
            let kind = sniff(text.as_bytes());
            if !matches!(kind, FileKind::Json | FileKind::Empty) {
                return Err(RequestError::new(format!("{file} is {}, not a config.json: {}", kind.describe(), kind.hint())));
            }
            Ok(parse_config_with(text.as_bytes(), &file, &file, ParseOptions { approximate_unknown: approximate })?)
        }
    }
}

/// `gpu`: a catalogue name or a size with its unit; a bare number is ambiguous and refused.
pub fn gpu(s: &str) -> R<Gpu> {
    if is_bare_number(s) {
        let n = s.trim();
        return Err(RequestError::new(format!(
            "gpu {n}: a bare number is ambiguous; write {n}GB (10^9 bytes), {n}GiB (2^30 bytes), or a GPU name such as h100 (the `gpus` operation lists them)"
        )));
    }
    Ok(vram_core::gpu::lookup(s)?)
}

/// A memory size; a bare number is refused, as on the command line.
pub fn size(key: &str, s: &str) -> R<u64> {
    if is_bare_number(s) {
        let n = s.trim();
        return Err(RequestError::new(format!(
            "{key} {n}: a bare number is ambiguous; write {n}GB (10^9 bytes), {n}GiB (2^30 bytes) or {n}MiB"
        )));
    }
    Ok(parse_size(s)?)
}

fn is_bare_number(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '_')
}

/// The job, read from the job and LoRA keys; the model's context warnings are added to it.
pub fn job(f: &mut Fields, model: &mut Model) -> R<Job> {
    let mode = match f.str("mode")?.unwrap_or_else(|| "train".into()).to_ascii_lowercase().as_str() {
        "train" | "training" => Mode::Train,
        "infer" | "inference" | "serve" => Mode::Infer,
        other => return Err(RequestError::new(format!("invalid mode `{other}`: use train or infer"))),
    };
    check_mode_keys(f, mode)?;
    let precision = match f.str("precision")? {
        Some(p) => Precision::parse(&p)?,
        None if mode == Mode::Train => Precision::Bf16Mixed,
        // A pre-quantized checkpoint is run as stored (its class; the exact layout is quant.rs).
        None => match &model.quantization {
            Some(q) => vram_core::quant::Plan::new(q)?.precision(),
            None => Precision::Bf16,
        },
    };
    let (optimizer, implied) = Optimizer::parse(&f.str("optimizer")?.unwrap_or_else(|| "adamw".into()))?;
    let optimizer_impl = match (f.str("optimizer_impl")?, implied) {
        (Some(s), _) => OptimizerImpl::parse(&s)?,
        (None, Some(i)) => i,
        (None, None) => OptimizerImpl::Foreach,
    };
    let mut overheads = Overheads::default();
    if let Some(s) = f.str("cuda_context")? {
        overheads.cuda_context = Some(size("cuda_context", &s)?);
    }
    if let Some(s) = f.str("cublas_workspace")? {
        overheads.cublas_workspace = Some(size("cublas_workspace", &s)?);
    }
    if let Some(r) = f.f64("allocator_reserve")? {
        overheads.allocator_reserve = r;
        overheads.allocator = None;
    }
    let job = Job {
        mode,
        batch: f.u64("batch_size")?.unwrap_or(1),
        seq: model.sequence(f.u64("seq_len")?, 2048).map_err(RequestError::new)?,
        precision,
        optimizer,
        optimizer_impl,
        checkpointing: Checkpointing::parse(&f.str("checkpointing")?.unwrap_or_else(|| "none".into()))?,
        attention: AttentionImpl::parse(&f.str("attention")?.unwrap_or_else(|| "sdpa".into()))?,
        grad_accum: f.u64("grad_accum")?.unwrap_or(1),
        fused_cross_entropy: f.bool("fused_cross_entropy")?.unwrap_or(false),
        kv_dtype: kv_dtype(&f.str("kv_dtype")?.unwrap_or_else(|| "auto".into()))?,
        prompt_len: f.u64("prompt_len")?,
        use_cache: f.bool("use_cache")?,
        model_state_shards: 1,
        overheads,
        lora: lora(f)?,
        base: base_weights(f)?,
        optimizer_in_bwd: f.bool("optimizer_in_bwd")?.unwrap_or(false),
        padded: f.bool("padded")?.unwrap_or(false),
    };
    job.validate()?;
    // Past the trained context (or its RoPE scaling's reach) the number is still given, with why.
    let context = model.context_warnings(job.seq);
    model.warnings.extend(context);
    Ok(job)
}

/// Refuse training-only keys under `mode: infer` and inference-only ones under training.
fn check_mode_keys(f: &Fields, mode: Mode) -> R<()> {
    let foreign: Vec<&str> = match mode {
        Mode::Infer => {
            ["optimizer", "optimizer_impl", "grad_accum", "checkpointing", "fused_cross_entropy", "use_cache", "optimizer_in_bwd"]
                .into_iter()
                .chain(PEFT_KEYS.iter().copied())
                .filter(|k| f.has(k))
                .collect()
        }
        Mode::Train => ["kv_dtype", "prompt_len"].into_iter().filter(|k| f.has(k)).collect(),
    };
    if foreign.is_empty() {
        return Ok(());
    }
    let (only, here) = match mode {
        Mode::Infer => ("training", "mode infer has no backward pass or optimizer step"),
        Mode::Train => ("inference", "set mode to infer to estimate inference"),
    };
    Err(RequestError::new(format!(
        "{} {} only for {only}: {here}; drop {}",
        foreign.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
        if foreign.len() == 1 { "is" } else { "are" },
        if foreign.len() == 1 { "it" } else { "them" }
    )))
}

fn kv_dtype(s: &str) -> R<Option<DType>> {
    match s.to_ascii_lowercase().as_str() {
        "auto" => Ok(None),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8" => Ok(Some(DType::F8)),
        other => Ok(Some(
            DType::from_torch_name(other)
                .ok_or_else(|| RequestError::new(format!("invalid KV-cache dtype `{other}`: use auto, fp8, bf16, fp16 or fp32")))?,
        )),
    }
}

/// The adapter configuration, or `None` for full fine-tuning; adapter keys without `peft` are
/// refused, never ignored.
fn lora(f: &mut Fields) -> R<Option<Lora>> {
    let Some(method) = f.str("peft")? else {
        let stray: Vec<&str> = ["lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save", "base_dtype"]
            .into_iter()
            .filter(|k| f.has(k))
            .collect();
        if !stray.is_empty() {
            return Err(RequestError::new(format!(
                "{} describe LoRA adapters, but no adapter method was given: set `peft` to lora, or drop them for full fine-tuning",
                stray.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            )));
        }
        return Ok(None);
    };
    let d = Lora::default();
    let targets = match f.str("lora_target_modules")? {
        Some(v) => Targets::parse(&v)?,
        None => Targets::Default,
    };
    let modules_to_save = f
        .str("lora_modules_to_save")?
        .map(|s| s.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect())
        .unwrap_or_default();
    Ok(Some(Lora {
        method: Method::parse(&method)?,
        r: f.u64("lora_r")?.unwrap_or(d.r),
        alpha: f.f64("lora_alpha")?.unwrap_or(d.alpha),
        dropout: f.f64("lora_dropout")?.unwrap_or(d.dropout),
        targets,
        modules_to_save,
    }))
}

/// How the frozen base is loaded: a dtype, or bitsandbytes 4/8 bits (the CLI's rules).
fn base_weights(f: &mut Fields) -> R<Option<BaseWeights>> {
    let dtype = |key: &str, v: &str| -> R<DType> {
        match DType::from_torch_name(v) {
            Some(d @ (DType::BF16 | DType::F16 | DType::F32)) => Ok(d),
            _ => Err(RequestError::new(format!("invalid {key} `{v}`: use bf16, fp16 or fp32"))),
        }
    };
    let four = f.bool("load_in_4bit")?.unwrap_or(false);
    let eight = f.bool("load_in_8bit")?.unwrap_or(false);
    let bnb_given = ["bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_compute_dtype"].iter().any(|k| f.has(k));
    if four && eight {
        return Err(RequestError::new("`load_in_4bit` and `load_in_8bit` exclude each other: pick one"));
    }
    if !four && !eight && f.has("kbit_prepare") {
        return Err(RequestError::new("`kbit_prepare` describes a 4/8-bit base: set `load_in_4bit` or `load_in_8bit`, or drop it"));
    }
    if !four && bnb_given {
        return Err(RequestError::new("the `bnb_4bit_*` options describe a 4-bit base: set `load_in_4bit`, or drop them"));
    }
    if (four || eight) && f.has("base_dtype") {
        return Err(RequestError::new(
            "`base_dtype` sets an unquantized base; with load_in_4bit/8bit the unquantized rest is fp32 after prepare_model_for_kbit_training: drop `base_dtype`",
        ));
    }
    let prepare = |f: &mut Fields| -> R<KbitPrepare> {
        match f.str("kbit_prepare")?.unwrap_or_else(|| "trl".into()).to_ascii_lowercase().as_str() {
            "trl" => Ok(KbitPrepare::Trl),
            "peft" => Ok(KbitPrepare::Peft),
            other => Err(RequestError::new(format!("invalid kbit_prepare `{other}`: use trl or peft"))),
        }
    };
    if four {
        let quant_type = match f.str("bnb_4bit_quant_type")?.unwrap_or_else(|| "nf4".into()).to_ascii_lowercase().as_str() {
            "nf4" => QuantType::Nf4,
            "fp4" => QuantType::Fp4,
            other => return Err(RequestError::new(format!("invalid bnb_4bit_quant_type `{other}`: use nf4 or fp4"))),
        };
        return Ok(Some(BaseWeights::Bnb4 {
            quant_type,
            nested: f.bool("use_bnb_nested_quant")?.unwrap_or(false),
            compute: dtype("bnb_4bit_compute_dtype", &f.str("bnb_4bit_compute_dtype")?.unwrap_or_else(|| "bf16".into()))?,
            storage: DType::I8,
            prepare: prepare(f)?,
        }));
    }
    if eight {
        return Ok(Some(BaseWeights::Bnb8 { prepare: prepare(f)? }));
    }
    f.str("base_dtype")?.map(|v| dtype("base_dtype", &v).map(|dtype| BaseWeights::Dtype { dtype })).transpose()
}
