//! Plain-language advice: which choice dominates the peak and what changing it would save, and
//! what would make a job fit when batch 1 does not. Every number comes from re-running the
//! estimate with the change applied.

use serde::Serialize;

use crate::error::Result;
use crate::job::{Checkpointing, Job, Mode, Optimizer, OptimizerImpl, Precision};
use crate::memory::{estimate, Estimate, Phase};
use crate::model::Model;
use crate::units::gib;

/// One alternative configuration and its total.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// What changes, in the user's flags.
    pub change: String,
    /// Total bytes per GPU with the change.
    pub total: u64,
    /// Whether it fits the budget.
    pub fits: bool,
}

/// Notes on the dominant components of `est` ("logits take 31%: fused cross-entropy would save 9.4 GiB").
pub fn notes(model: &Model, job: &Job, est: &Estimate) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if job.mode != Mode::Train {
        return Ok(out);
    }
    let share = |name: &str| est.component(name) as f64 / est.total.max(1) as f64;
    let saving = |alt: Job| -> Result<u64> { Ok(est.total.saturating_sub(estimate(model, &alt)?.total)) };
    let logits = share("logits & loss");
    if logits > 0.15 && !job.fused_cross_entropy {
        let s = saving(Job { fused_cross_entropy: true, ..job.clone() })?;
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
        let s = saving(Job { checkpointing: Checkpointing::Full, ..job.clone() })?;
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
        let s = saving(Job { optimizer: Optimizer::Adamw8bit, ..job.clone() })?;
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
        let s = saving(Job { optimizer_impl: OptimizerImpl::Fused, ..job.clone() })?;
        if s > 0 {
            out.push(format!(
                "the peak is in the foreach AdamW step (one state-sized temporary): fused AdamW (--optimizer adamw_torch_fused, HF Trainer's default on torch >= 2.8) would save {:.2} GiB",
                gib(s)
            ));
        }
    }
    Ok(out)
}

/// When a job does not fit `budget`: the estimate under each single change, then all combined.
pub fn alternatives(model: &Model, job: &Job, budget: u64) -> Result<Vec<Alternative>> {
    let mut cands: Vec<(String, Job)> = Vec::new();
    if job.mode == Mode::Train {
        if job.checkpointing != Checkpointing::Full {
            cands.push(("--checkpointing full".into(), Job { checkpointing: Checkpointing::Full, ..job.clone() }));
        }
        if !job.fused_cross_entropy {
            cands.push(("--fused-cross-entropy".into(), Job { fused_cross_entropy: true, ..job.clone() }));
        }
        if matches!(job.optimizer, Optimizer::Adamw | Optimizer::Adam) {
            cands.push(("--optimizer adamw-8bit".into(), Job { optimizer: Optimizer::Adamw8bit, ..job.clone() }));
        }
        if matches!(job.precision, Precision::Fp32 | Precision::Bf16Mixed | Precision::Fp16Mixed) {
            cands.push(("--precision bf16 (pure bf16 weights and states)".into(), Job { precision: Precision::Bf16, ..job.clone() }));
        }
        let all = Job {
            checkpointing: Checkpointing::Full,
            fused_cross_entropy: true,
            optimizer: if matches!(job.optimizer, Optimizer::Adamw | Optimizer::Adam) { Optimizer::Adamw8bit } else { job.optimizer },
            precision: if job.precision == Precision::Fp32 { Precision::Bf16Mixed } else { job.precision },
            ..job.clone()
        };
        if cands.len() > 1 {
            cands.push(("all of: --checkpointing full --fused-cross-entropy --optimizer adamw-8bit".into(), all));
        }
    } else {
        for (flag, p) in [("--precision int8", Precision::Int8), ("--precision int4", Precision::Int4)] {
            if job.precision != p {
                cands.push((flag.into(), Job { precision: p, ..job.clone() }));
            }
        }
        if job.kv_dtype != Some(crate::DType::F8) {
            cands.push(("--kv-dtype fp8".into(), Job { kv_dtype: Some(crate::DType::F8), ..job.clone() }));
        }
    }
    let mut out = Vec::new();
    for (change, j) in cands {
        let e = estimate(model, &j)?;
        out.push(Alternative { change, total: e.total, fits: e.total <= budget });
    }
    // First-order multi-GPU answer: ZeRO-3 / FSDP full_shard divides parameters, gradients and
    // optimizer states by N; activations, logits and overheads stay per GPU. Memory falls with N,
    // so bisect for the smallest N that fits.
    if job.mode == Mode::Train && job.model_state_shards == 1 {
        const MAX_GPUS: u64 = 4096;
        let with_ckpt = Job { checkpointing: Checkpointing::Full, ..job.clone() };
        for (extra, base) in [("", job), (" and --checkpointing full", &with_ckpt)] {
            let total = |n: u64| -> Result<u64> { Ok(estimate(model, &Job { model_state_shards: n, ..base.clone() })?.total) };
            if total(MAX_GPUS)? > budget {
                continue;
            }
            let (mut lo, mut hi) = (1u64, MAX_GPUS); // lo does not fit, hi fits
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if total(mid)? <= budget {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            out.push(Alternative {
                change: format!(
                    "{hi} GPUs with ZeRO-3 / FSDP full_shard{extra} (first order: model states split {hi} ways; activations, logits and overheads per GPU)"
                ),
                total: total(hi)?,
                fits: true,
            });
            break;
        }
    }
    Ok(out)
}
