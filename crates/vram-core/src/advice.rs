//! Plain-language advice: which choice dominates the peak and what changing it would save, and
//! a search for what would make a job fit (batch 1 does not) or raise its largest batch. Every
//! number comes from re-running the estimator (single GPU: `memory::estimate`; more GPUs:
//! `parallel::estimate_parallel` with FSDP full_shard) with the change applied.
//!
//! The search tries each option alone and every combination of at most one option per
//! dimension (checkpointing, fused cross-entropy, pure bf16, optimizer, optimizer step
//! implementation): at most 3·2·2·3·3 jobs, each bisected for its largest batch. It lists a
//! combination only if every change in it buys batch (dropping any one lowers the largest
//! batch) and nothing else matches or beats it on batch, bytes saved, compute cost and accuracy
//! risk. Its time is benchmarked by `cargo bench -p vram-core --bench plan` (`fit-search/*`).

use serde::Serialize;

use crate::dtype::DType;
use crate::error::Result;
use crate::fit::{largest, max_batch, MAX_BATCH};
use crate::job::{Checkpointing, Job, Mode, Optimizer, OptimizerImpl, Precision};
use crate::memory::{estimate, Estimate, Phase};
use crate::model::Model;
use crate::parallel::{estimate_parallel, Engine, FsdpStrategy, Parallel};
use crate::peft::{BaseWeights, KbitPrepare, Lora, QuantType, Targets};
use crate::units::gib;

/// Notes on the dominant components of `est` ("logits take 31%: fused cross-entropy would save 9.4 GiB").
pub fn notes(model: &Model, job: &Job, est: &Estimate) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if job.mode != Mode::Train {
        return Ok(out);
    }
    let share = |name: &str| est.component(name) as f64 / est.total.max(1) as f64;
    // An alternative vram cannot estimate for this model (fused cross-entropy on a state-space
    // model, say) is not offered: it saves nothing that can be stated.
    let saving = |alt: Job| -> u64 { estimate(model, &alt).map_or(0, |e| est.total.saturating_sub(e.total)) };
    let logits = share("logits & loss");
    if logits > 0.15 && !job.fused_cross_entropy && model.is_plain_decoder() {
        let s = saving(Job { fused_cross_entropy: true, ..job.clone() });
        if s > 0 {
            out.push(format!(
                "logits take {:.0}% of the peak: fused cross-entropy (--fused-cross-entropy, e.g. Liger) would save {:.2} GiB",
                logits * 100.0,
                gib(s)
            ));
        }
    }
    let acts: f64 =
        est.components.iter().filter(|c| c.name.starts_with("activations")).map(|c| c.bytes as f64).sum::<f64>() / est.total.max(1) as f64;
    if acts > 0.3 && job.checkpointing == Checkpointing::None {
        let s = saving(Job { checkpointing: Checkpointing::Full, ..job.clone() });
        if s > 0 {
            out.push(format!(
                "activations take {:.0}%: gradient checkpointing (--checkpointing full) would save {:.2} GiB for ~33% more compute",
                acts * 100.0,
                gib(s)
            ));
        }
    }
    let states = share("optimizer states");
    if states > 0.25 && matches!(job.optimizer, Optimizer::Adamw | Optimizer::Adam) {
        let s = saving(Job { optimizer: Optimizer::Adamw8bit, ..job.clone() });
        if s > 0 {
            out.push(format!(
                "optimizer states take {:.0}%: 8-bit AdamW (--optimizer adamw-8bit) would save {:.2} GiB",
                states * 100.0,
                gib(s)
            ));
        }
    }
    if est.peak_phase == Phase::OptimizerStep
        && job.optimizer_impl == OptimizerImpl::Foreach
        && matches!(job.optimizer, Optimizer::Adamw | Optimizer::Adam)
    {
        let s = saving(Job { optimizer_impl: OptimizerImpl::Fused, ..job.clone() });
        if s > 0 {
            out.push(format!(
                "the peak is in the foreach AdamW step (one state-sized temporary): fused AdamW (--optimizer adamw_torch_fused, HF Trainer's default on torch >= 2.8) would save {:.2} GiB",
                gib(s)
            ));
        }
    }
    Ok(out)
}

/// One change to the job that the search for alternatives tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Change {
    /// Activation checkpointing, full or selective.
    Checkpointing(Checkpointing),
    /// Fused / chunked cross-entropy (Liger).
    FusedCrossEntropy,
    /// Pure bf16 weights, gradients and optimizer states instead of mixed precision.
    PureBf16,
    /// Another optimizer (8-bit AdamW, Adafactor).
    Optimizer(Optimizer),
    /// Another optimizer step implementation (fused, for-loop).
    OptimizerImpl(OptimizerImpl),
    /// Inference: quantised weights.
    Precision(Precision),
    /// Inference: fp8 KV cache.
    KvFp8,
    /// ZeRO-3 / FSDP `full_shard` over this many GPUs.
    Gpus(u64),
    /// A shorter sequence: changes the job.
    Sequence(u64),
    /// Train LoRA adapters (peft defaults) on the frozen base instead of every weight.
    Lora,
    /// QLoRA: LoRA on a base loaded in 4 bits (bitsandbytes nf4).
    Qlora,
    /// A smaller LoRA rank.
    LoraRank(u64),
    /// peft's default target modules instead of more.
    LoraDefaultTargets,
    /// A smaller micro-batch with more gradient accumulation: the same effective batch.
    MicroBatch {
        /// Micro-batch per GPU.
        batch: u64,
        /// Gradient accumulation steps.
        grad_accum: u64,
    },
}

impl Change {
    fn apply(self, job: &Job) -> Job {
        let mut j = job.clone();
        match self {
            Change::Checkpointing(c) => j.checkpointing = c,
            Change::FusedCrossEntropy => j.fused_cross_entropy = true,
            Change::PureBf16 => j.precision = Precision::Bf16,
            Change::Optimizer(o) => j.optimizer = o,
            Change::OptimizerImpl(i) => j.optimizer_impl = i,
            Change::Precision(p) => j.precision = p,
            Change::KvFp8 => j.kv_dtype = Some(DType::F8),
            Change::Sequence(s) => j.seq = s,
            Change::MicroBatch { batch, grad_accum } => {
                j.batch = batch;
                j.grad_accum = grad_accum;
            }
            Change::Lora => {
                j.lora = Some(Lora::default());
                j.base = None;
            }
            Change::Qlora => {
                j.lora = j.lora.or_else(|| Some(Lora::default()));
                j.base = Some(BaseWeights::Bnb4 {
                    quant_type: QuantType::Nf4,
                    nested: false,
                    compute: DType::BF16,
                    storage: DType::I8,
                    prepare: KbitPrepare::Trl,
                });
            }
            Change::LoraRank(r) => {
                if let Some(l) = j.lora.as_mut() {
                    l.r = r;
                }
            }
            Change::LoraDefaultTargets => {
                if let Some(l) = j.lora.as_mut() {
                    l.targets = Targets::Default;
                }
            }
            Change::Gpus(_) => {}
        }
        j
    }

    /// What changes, in words.
    pub fn describe(self) -> String {
        match self {
            Change::Checkpointing(Checkpointing::Selective) => "selective checkpointing (recompute attention)".into(),
            Change::Checkpointing(_) => "gradient checkpointing".into(),
            Change::FusedCrossEntropy => "fused cross-entropy".into(),
            Change::PureBf16 => "pure bf16 (no fp32 master weights)".into(),
            Change::Optimizer(Optimizer::Adamw8bit) => "8-bit AdamW".into(),
            Change::Optimizer(o) => o.name().into(),
            Change::OptimizerImpl(OptimizerImpl::Fused) => "fused AdamW step".into(),
            Change::OptimizerImpl(_) => "for-loop AdamW step (no foreach temporaries)".into(),
            Change::Precision(p) => format!("{} weights", p.name()),
            Change::KvFp8 => "fp8 KV cache".into(),
            Change::Gpus(n) => format!("{n} GPUs with ZeRO-3 / FSDP full_shard"),
            Change::Sequence(s) => format!("sequence length {s} (changes the job)"),
            Change::Lora => "LoRA adapters on a frozen bf16 base (peft defaults)".into(),
            Change::Qlora => "QLoRA: LoRA on a 4-bit nf4 base".into(),
            Change::LoraRank(r) => format!("LoRA rank {r}"),
            Change::LoraDefaultTargets => "peft's default target modules".into(),
            Change::MicroBatch { batch, grad_accum } => {
                format!("micro-batch {batch} × {grad_accum} accumulation steps (same effective batch)")
            }
        }
    }

    /// The `vram` flags that apply it.
    pub fn flags(self) -> String {
        match self {
            Change::Checkpointing(Checkpointing::Selective) => "--checkpointing selective".into(),
            Change::Checkpointing(_) => "--checkpointing full".into(),
            Change::FusedCrossEntropy => "--fused-cross-entropy".into(),
            Change::PureBf16 => "--precision bf16".into(),
            Change::Optimizer(o) => format!("--optimizer {}", o.name()),
            Change::OptimizerImpl(OptimizerImpl::Fused) => "--optimizer-impl fused".into(),
            Change::OptimizerImpl(_) => "--optimizer-impl for-loop".into(),
            Change::Precision(p) => format!("--precision {}", p.name()),
            Change::KvFp8 => "--kv-dtype fp8".into(),
            Change::Gpus(n) => format!("--gpus {n} --fsdp full_shard"),
            Change::Sequence(s) => format!("--seq-len {s}"),
            Change::Lora => "--peft lora".into(),
            Change::Qlora => "--peft lora --load-in-4bit".into(),
            Change::LoraRank(r) => format!("--lora-r {r}"),
            Change::LoraDefaultTargets => "(drop --lora-target-modules)".into(),
            Change::MicroBatch { batch, grad_accum } => format!("--batch-size {batch} --grad-accum {grad_accum}"),
        }
    }

    /// The Hugging Face Trainer / TRL (or vLLM, for inference) spelling.
    pub fn hf_flags(self) -> String {
        match self {
            // Selective recomputation is Megatron's (`--recompute-activations`); HF has no switch.
            Change::Checkpointing(Checkpointing::Selective) => "(no HF Trainer flag; Megatron --recompute-activations)".into(),
            Change::Checkpointing(_) => "--gradient_checkpointing".into(),
            Change::FusedCrossEntropy => "--use_liger_kernel".into(),
            // TRL ModelConfig loads the model in bf16; without --bf16 the Trainer adds no autocast.
            Change::PureBf16 => "--torch_dtype bfloat16 (TRL), without --bf16".into(),
            Change::Optimizer(Optimizer::Adamw8bit) => "--optim adamw_bnb_8bit".into(),
            Change::Optimizer(o) => format!("--optim {}", o.name()),
            Change::OptimizerImpl(OptimizerImpl::Fused) => "--optim adamw_torch_fused".into(),
            Change::OptimizerImpl(_) => "(no HF Trainer flag; torch.optim.AdamW(..., foreach=False))".into(),
            Change::Precision(Precision::Int4) => "an AWQ/GPTQ int4 checkpoint".into(),
            Change::Precision(p) => format!("vLLM --quantization for {} weights", p.name()),
            Change::KvFp8 => "vLLM --kv-cache-dtype fp8".into(),
            Change::Gpus(n) => format!("accelerate launch --num_processes {n} with --fsdp \"full_shard auto_wrap\""),
            Change::Sequence(s) => format!("--max_seq_length {s} (TRL max_length)"),
            Change::Lora => "--use_peft (TRL)".into(),
            Change::Qlora => "--use_peft --load_in_4bit (TRL)".into(),
            Change::LoraRank(r) => format!("--lora_r {r}"),
            Change::LoraDefaultTargets => "(drop --lora_target_modules)".into(),
            Change::MicroBatch { batch, grad_accum } => {
                format!("--per_device_train_batch_size {batch} --gradient_accumulation_steps {grad_accum}")
            }
        }
    }

    /// Ordinal costs (compute overhead, accuracy risk; 0 = none) and what it costs. The ranks
    /// are a judgement, not a measurement; the notes cite where each cost is described. More
    /// GPUs and a shorter sequence cost hardware and the job itself, said in the note.
    pub fn cost(self) -> (u32, u32, &'static str) {
        match self {
            Change::FusedCrossEntropy => (0, 0, "no cost: Liger's fused linear cross-entropy is not slower (Liger-Kernel README)"),
            Change::OptimizerImpl(OptimizerImpl::Fused) => (0, 0, "no cost: one fused CUDA kernel, faster than foreach (torch.optim docs)"),
            Change::Checkpointing(Checkpointing::Selective) => {
                (1, 0, "a few % more compute (Korthikanti et al. 2022, selective recomputation)")
            }
            Change::OptimizerImpl(_) => (1, 0, "a slower optimizer step: one kernel launch per tensor (torch.optim docs)"),
            Change::Checkpointing(_) => (2, 0, "~33% more compute: one extra forward per step (Chen et al. 2016)"),
            Change::KvFp8 => (0, 1, "small accuracy risk of an fp8 KV cache (vLLM docs)"),
            Change::Optimizer(Optimizer::Adamw8bit) => {
                (0, 2, "small accuracy risk: 8-bit states matched 32-bit Adam in Dettmers et al. 2022; needs bitsandbytes")
            }
            Change::Precision(Precision::Int8 | Precision::Fp8) => (0, 2, "accuracy risk of 8-bit weights"),
            Change::Optimizer(_) => {
                (0, 3, "another optimizer: factored second moments need their own learning rate (Shazeer & Stern 2018)")
            }
            Change::PureBf16 => (0, 3, "accuracy risk: no fp32 master weights, small updates round away in bf16"),
            Change::Precision(_) => (0, 3, "accuracy risk of 4-bit weights"),
            Change::Gpus(_) => (0, 0, "more GPUs, and all-gather / reduce-scatter traffic every layer"),
            Change::Sequence(_) => (0, 0, "changes the job: longer samples are truncated"),
            Change::Lora => (0, 3, "trains adapters only: LoRA can trail full fine-tuning on hard targets (Biderman et al. 2024, \"LoRA Learns Less and Forgets Less\")"),
            Change::Qlora => (
                1,
                3,
                "4-bit base: weights dequantized per matmul (slower step); QLoRA matched 16-bit LoRA in Dettmers et al. 2023; needs bitsandbytes",
            ),
            Change::LoraRank(_) => (0, 1, "fewer adapter parameters: a smaller rank can learn less (Hu et al. 2021 found low ranks sufficient)"),
            Change::LoraDefaultTargets => {
                (0, 2, "fewer adapted modules: all-linear usually learns more (Dettmers et al. 2023, QLoRA §4)")
            }
            Change::MicroBatch { .. } => (1, 0, "more, smaller steps: small micro-batches use the GPU less efficiently"),
        }
    }
}

/// One alternative that raises the largest batch, re-estimated with the change applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// What changes, in words and `vram` flags (`pure bf16 + 8-bit AdamW (--precision bf16 --optimizer adamw-8bit)`).
    pub change: String,
    /// The changes, structured.
    pub changes: Vec<Change>,
    /// The `vram` flags.
    pub flags: String,
    /// The Hugging Face Trainer / TRL spellings.
    pub hf_flags: String,
    /// GPUs the job runs on (1 unless the change adds GPUs).
    pub gpus: u64,
    /// Largest micro-batch per GPU within the budget with the change.
    pub max_batch: u64,
    /// Total bytes per GPU at the reference batch (the first size the job did not fit).
    pub total: u64,
    /// Bytes saved per GPU at the reference batch.
    pub saving: u64,
    /// Whether the reference batch fits the budget with the change (always true when listed).
    pub fits: bool,
    /// What it costs, per change.
    pub cost: String,
    /// Ordinal compute overhead (sum over the changes; 0 = none).
    pub compute_cost: u32,
    /// Ordinal accuracy risk (sum over the changes; 0 = none).
    pub accuracy_cost: u32,
    /// The change alters the job itself (a shorter sequence), not just how it runs.
    pub changes_job: bool,
    /// The change switches a full fine-tune to another training method (LoRA, QLoRA).
    pub changes_method: bool,
}

/// The answer of [`search`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Search {
    /// Largest micro-batch without any change (`None`: batch 1 does not fit).
    pub baseline_max_batch: Option<u64>,
    /// The batch every alternative is measured at: one more than the baseline can fit.
    pub reference_batch: u64,
    /// Total bytes at the reference batch without any change.
    pub baseline_total: u64,
    /// Alternatives, best first: single-GPU ones by largest batch, then saving, then cost; then
    /// more GPUs; a shorter sequence only when nothing else works.
    pub alternatives: Vec<Alternative>,
}

/// Most alternatives listed.
pub const MAX_LISTED: usize = 10;

/// Largest GPU count the multi-GPU search considers (512 nodes of 8).
pub const MAX_GPUS: u64 = 4096;

#[derive(Clone, Copy)]
struct Eval {
    total: u64,
    max_batch: Option<u64>,
}

/// Search what would raise the largest micro-batch of `job` within `budget` (or make batch 1
/// fit): every single change and every combination in which each change adds something, each
/// re-estimated; options that save nothing or raise no batch are never listed.
pub fn search(model: &Model, job: &Job, budget: u64) -> Result<Search> {
    job.validate()?;
    let baseline_max_batch = max_batch(model, job, budget, MAX_BATCH)?;
    let reference_batch = match baseline_max_batch {
        Some(b) if b >= MAX_BATCH => {
            let baseline_total = estimate(model, &job.with_batch(b))?.total;
            return Ok(Search { baseline_max_batch, reference_batch: b, baseline_total, alternatives: vec![] });
        }
        Some(b) => b + 1,
        None => 1,
    };
    let base = job.with_batch(reference_batch);
    let baseline = Eval { total: estimate(model, &base)?.total, max_batch: baseline_max_batch };
    let mut alternatives = single_gpu(model, &base, budget, baseline)?;
    // Encoders: LoRA, sharding and fused cross-entropy are not modelled for them (check_encoder).
    // LoRA and multi-GPU answers are modelled for attention decoders, not state-space models.
    let decoder = model.is_plain_decoder() && model.ssm.is_none();
    if job.mode == Mode::Train && decoder {
        let peft = peft_alternatives(model, &base, budget, baseline)?;
        if job.lora.is_some() {
            // Within LoRA: a 4-bit base, rank and targets compete with the other options.
            alternatives.extend(peft);
            alternatives = ranked(alternatives);
        } else {
            // Switching a full fine-tune to LoRA changes the training method: listed after the
            // answers that keep it, never crowding them out.
            alternatives.extend(ranked(peft).into_iter().map(|a| Alternative { changes_method: true, ..a }));
        }
    }
    // More GPUs are searched with the parallel estimator, which models device-resident optimizer
    // states only: a paged optimizer's job gets single-GPU answers.
    if job.mode == Mode::Train && decoder && job.model_state_shards == 1 && !crate::memory::optimizer::paged(job) {
        alternatives.extend(more_gpus(model, &base, budget, baseline.total)?);
    }
    if alternatives.iter().all(|a| a.gpus > 1 || a.changes_method) {
        alternatives.extend(shorter_sequence(model, &base, budget, baseline.total)?);
    }
    Ok(Search { baseline_max_batch, reference_batch, baseline_total: baseline.total, alternatives })
}

/// The options per dimension; a combination takes at most one from each.
fn dimensions(model: &Model, job: &Job) -> Vec<Vec<Change>> {
    let adam = matches!(job.optimizer, Optimizer::Adamw | Optimizer::Adam);
    let mut dims = Vec::new();
    if job.mode == Mode::Infer && model.encoder.is_some() {
        dims.push([Precision::Int8, Precision::Int4].into_iter().filter(|p| *p != job.precision).map(Change::Precision).collect());
        return dims;
    }
    if job.mode == Mode::Infer {
        dims.push([Precision::Int8, Precision::Int4].into_iter().filter(|p| *p != job.precision).map(Change::Precision).collect());
        if job.kv_dtype != Some(DType::F8) {
            dims.push(vec![Change::KvFp8]);
        }
        return dims;
    }
    let ckpt = match job.checkpointing {
        Checkpointing::None => vec![Checkpointing::Selective, Checkpointing::Full],
        Checkpointing::Selective => vec![Checkpointing::Full],
        Checkpointing::Full => vec![],
    };
    dims.push(ckpt.into_iter().map(Change::Checkpointing).collect());
    if !job.fused_cross_entropy && model.is_plain_decoder() {
        dims.push(vec![Change::FusedCrossEntropy]);
    }
    if job.lora.is_none() && matches!(job.precision, Precision::Fp32 | Precision::Bf16Mixed | Precision::Fp16Mixed) {
        dims.push(vec![Change::PureBf16]);
    }
    if adam {
        dims.push(vec![Change::Optimizer(Optimizer::Adamw8bit), Change::Optimizer(Optimizer::Adafactor)]);
        let imps = match job.optimizer_impl {
            OptimizerImpl::Foreach => vec![OptimizerImpl::Fused, OptimizerImpl::ForLoop],
            OptimizerImpl::ForLoop => vec![OptimizerImpl::Fused],
            OptimizerImpl::Fused => vec![],
        };
        dims.push(imps.into_iter().map(Change::OptimizerImpl).collect());
    }
    dims.retain(|d| !d.is_empty());
    dims
}

/// Every combination taking at most one option per dimension, the empty one excluded. An
/// optimizer swap and an AdamW step implementation are not combined (the swap has its own step).
fn combinations(dims: &[Vec<Change>]) -> Vec<Vec<Change>> {
    let mut out: Vec<Vec<Change>> = vec![vec![]];
    for d in dims {
        let mut next = Vec::with_capacity(out.len() * (d.len() + 1));
        for c in &out {
            next.push(c.clone());
            for &o in d {
                let swap = c.iter().any(|x| matches!(x, Change::Optimizer(_)));
                if swap && matches!(o, Change::OptimizerImpl(_)) {
                    continue;
                }
                let mut n = c.clone();
                n.push(o);
                next.push(n);
            }
        }
        out = next;
    }
    out.retain(|c| !c.is_empty());
    out
}

fn evaluate(model: &Model, base: &Job, changes: &[Change], budget: u64) -> Result<Eval> {
    let job = changes.iter().fold(base.clone(), |j, c| c.apply(&j));
    let total = estimate(model, &job)?.total;
    // Memory is monotone in batch: a change that misses the reference batch raises nothing.
    let max_batch = if total <= budget { max_batch(model, &job, budget, MAX_BATCH)? } else { None };
    Ok(Eval { total, max_batch })
}

fn single_gpu(model: &Model, base: &Job, budget: u64, baseline: Eval) -> Result<Vec<Alternative>> {
    // A change vram cannot estimate for this model (pure bf16 for a state-space model, say) is
    // not offered.
    let dims: Vec<Vec<Change>> = dimensions(model, base)
        .into_iter()
        .map(|d| d.into_iter().filter(|c| estimate(model, &c.apply(base)).is_ok()).collect::<Vec<_>>())
        .filter(|d| !d.is_empty())
        .collect();
    let combos = combinations(&dims);
    let mut evals = Vec::with_capacity(combos.len());
    for c in &combos {
        evals.push(evaluate(model, base, c, budget)?);
    }
    let lookup = |c: &[Change]| -> Eval {
        if c.is_empty() {
            return baseline;
        }
        combos.iter().position(|x| x == c).map_or(baseline, |i| evals[i])
    };
    let mut out = Vec::new();
    for (c, e) in combos.iter().zip(&evals) {
        let raises = e.max_batch > baseline.max_batch && e.total < baseline.total;
        // Each change must buy batch: dropping any one of them lowers the largest batch.
        let each_needed = (0..c.len()).all(|i| {
            let sub: Vec<Change> = c.iter().enumerate().filter(|(k, _)| *k != i).map(|(_, x)| *x).collect();
            lookup(&sub).max_batch < e.max_batch
        });
        if raises && each_needed {
            out.push(alternative(c, 1, e, baseline.total, budget));
        }
    }
    Ok(ranked(out))
}

/// Pareto-filter, then order by batch, saving and cost; at most [`MAX_LISTED`].
fn ranked(list: Vec<Alternative>) -> Vec<Alternative> {
    let mut out = pareto(list);
    let cost = |a: &Alternative| a.compute_cost.saturating_add(a.accuracy_cost);
    out.sort_by(|a, b| b.max_batch.cmp(&a.max_batch).then(b.saving.cmp(&a.saving)).then(cost(a).cmp(&cost(b))));
    out.truncate(MAX_LISTED);
    out
}

fn alternative(changes: &[Change], gpus: u64, e: &Eval, baseline_total: u64, budget: u64) -> Alternative {
    let join = |f: &dyn Fn(Change) -> String, sep: &str| changes.iter().map(|c| f(*c)).collect::<Vec<_>>().join(sep);
    let compute_cost = changes.iter().map(|c| c.cost().0).sum();
    let accuracy_cost = changes.iter().map(|c| c.cost().1).sum();
    let cost = changes.iter().map(|c| c.cost().2).collect::<Vec<_>>().join("; ");
    let flags = join(&|c| c.flags(), " ");
    Alternative {
        change: format!("{} ({flags})", join(&|c| c.describe(), " + ")),
        changes: changes.to_vec(),
        flags,
        hf_flags: join(&|c| c.hf_flags(), " "),
        gpus,
        max_batch: e.max_batch.unwrap_or(0),
        total: e.total,
        saving: baseline_total.saturating_sub(e.total),
        fits: e.total <= budget,
        cost,
        compute_cost,
        accuracy_cost,
        changes_job: changes.iter().any(|c| matches!(c, Change::Sequence(_))),
        changes_method: false,
    }
}

/// Drop every alternative another matches or beats on batch, saving, compute and accuracy
/// cost (of equals, the first stays).
fn pareto(list: Vec<Alternative>) -> Vec<Alternative> {
    let key = |a: &Alternative| (a.max_batch, a.saving, a.compute_cost, a.accuracy_cost);
    let dominated = |i: usize| {
        let (b, s, c, r) = key(&list[i]);
        list.iter().enumerate().any(|(k, o)| {
            let (ob, os, oc, or) = key(o);
            k != i && ob >= b && os >= s && oc <= c && or <= r && ((ob, os, oc, or) != (b, s, c, r) || k < i)
        })
    };
    let keep: Vec<bool> = (0..list.len()).map(|i| !dominated(i)).collect();
    list.into_iter().zip(keep).filter(|(_, k)| *k).map(|(a, _)| a).collect()
}

/// Training-method changes, each alone and with gradient checkpointing: LoRA and QLoRA for a full
/// fine-tune; for a LoRA job a 4-bit base, a smaller rank, fewer target modules. Listed only
/// when they raise the largest batch.
fn peft_alternatives(model: &Model, base: &Job, budget: u64, baseline: Eval) -> Result<Vec<Alternative>> {
    let mut options: Vec<Change> = Vec::new();
    match &base.lora {
        None => options.extend([Change::Lora, Change::Qlora]),
        Some(l) => {
            if !base.base.is_some_and(BaseWeights::is_bnb) {
                options.push(Change::Qlora);
            }
            if l.r > 8 {
                options.push(Change::LoraRank(8));
            }
            if l.targets != Targets::Default {
                options.push(Change::LoraDefaultTargets);
            }
        }
    }
    let ckpt_alone = match base.checkpointing {
        Checkpointing::Full => None,
        _ => evaluate(model, base, &[Change::Checkpointing(Checkpointing::Full)], budget)?.max_batch,
    };
    let mut out = Vec::new();
    for o in options {
        // An option peft itself would refuse on this model (no default targets) is not offered.
        if o.apply(base).lora.as_ref().is_some_and(|l| crate::peft::resolve(model, l).is_err()) {
            continue;
        }
        let mut sets = vec![vec![o]];
        if base.checkpointing != Checkpointing::Full {
            sets.push(vec![o, Change::Checkpointing(Checkpointing::Full)]);
        }
        let mut best: Option<Eval> = None;
        for c in sets {
            let e = evaluate(model, base, &c, budget)?;
            // With checkpointing only when both buy batch: more than the change alone, and more
            // than checkpointing alone.
            let needed = c.len() == 1 || e.max_batch > ckpt_alone;
            if needed && e.max_batch > baseline.max_batch && e.total < baseline.total && best.is_none_or(|b| e.max_batch > b.max_batch) {
                best = Some(e);
                out.push(alternative(&c, 1, &e, baseline.total, budget));
            }
        }
    }
    Ok(out)
}

/// GPU counts tried: 2–8 on one node, then whole nodes of 8.
fn gpu_ladder() -> Vec<u64> {
    (2..=8).chain((2..=MAX_GPUS / 8).map(|n| n * 8)).collect()
}

/// The smallest GPU count (FSDP full_shard, the real parallel estimator) that fits the
/// reference batch: without checkpointing, and with it when that needs fewer GPUs.
fn more_gpus(model: &Model, base: &Job, budget: u64, baseline_total: u64) -> Result<Vec<Alternative>> {
    let mut out: Vec<Alternative> = Vec::new();
    let mut extras = vec![vec![]];
    if base.checkpointing != Checkpointing::Full {
        extras.push(vec![Change::Checkpointing(Checkpointing::Full)]);
    }
    let ladder = gpu_ladder();
    for extra in extras {
        let job = extra.iter().fold(base.clone(), |j, c| c.apply(&j));
        let total = |n: u64, batch: u64| -> Result<u64> {
            let par = Parallel { gpus: n, engine: Engine::Fsdp, fsdp: FsdpStrategy::FullShard, ..Parallel::single() };
            Ok(estimate_parallel(model, &job.with_batch(batch), &par, job.grad_accum)?.total)
        };
        // Per-GPU memory falls as the shards shrink: bisect the ladder for the first count that fits.
        let (mut lo, mut hi) = (0usize, ladder.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if total(ladder[mid], base.batch)? <= budget {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let Some(&n) = ladder.get(lo) else { continue };
        if out.first().is_some_and(|a| a.gpus <= n) {
            continue;
        }
        let max_batch = largest(MAX_BATCH, |b| Ok(total(n, b)? <= budget))?;
        let mut changes = vec![Change::Gpus(n)];
        changes.extend(extra);
        let e = Eval { total: total(n, base.batch)?, max_batch };
        out.push(alternative(&changes, n, &e, baseline_total, budget));
    }
    Ok(out)
}

/// Last resort: the longest sequence at which the reference batch fits, unchanged otherwise.
fn shorter_sequence(model: &Model, base: &Job, budget: u64, baseline_total: u64) -> Result<Vec<Alternative>> {
    let limit = base.seq.saturating_sub(1);
    let fits = |s: u64| -> Result<bool> { Ok(estimate(model, &Job { seq: s, ..base.clone() })?.total <= budget) };
    let Some(seq) = largest(limit, fits)? else { return Ok(vec![]) };
    let job = Job { seq, ..base.clone() };
    let e = Eval { total: estimate(model, &job)?.total, max_batch: max_batch(model, &job, budget, MAX_BATCH)? };
    Ok(vec![alternative(&[Change::Sequence(seq)], 1, &e, baseline_total, budget)])
}

/// For a job whose micro-batch does not fit `budget` (`vram estimate -b N`): the largest smaller
/// micro-batch, with the gradient accumulation that keeps `batch × grad_accum` (only divisors of
/// it are exact). Accumulation keeps the gradients alive through forward and backward, which the
/// estimator counts. `None` when the job fits, is not training, or no smaller micro-batch fits.
pub fn micro_batch(model: &Model, job: &Job, budget: u64) -> Result<Option<Alternative>> {
    job.validate()?;
    let baseline_total = estimate(model, job)?.total;
    if job.mode != Mode::Train || baseline_total <= budget {
        return Ok(None);
    }
    // Both are validated to ≤ 2^20, so the product cannot overflow; checked all the same.
    let Some(effective) = job.batch.checked_mul(job.grad_accum) else { return Ok(None) };
    // Divisors of the effective batch below the current micro-batch, largest first; bounded by
    // the validated batch (≤ 2^20).
    for batch in (1..job.batch).rev().filter(|b| effective % b == 0) {
        let change = Change::MicroBatch { batch, grad_accum: effective / batch };
        let total = estimate(model, &change.apply(job))?.total;
        if total <= budget {
            let e = Eval { total, max_batch: Some(batch) };
            return Ok(Some(alternative(&[change], 1, &e, baseline_total, budget)));
        }
    }
    Ok(None)
}
