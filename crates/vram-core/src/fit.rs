//! The largest micro-batch whose total memory stays within a target share of a GPU.
//!
//! Memory is non-decreasing in batch size (every term is a non-negative multiple of the batch,
//! or constant), so the search doubles to bracket the answer, then bisects: O(log n)
//! estimates. `tests` hold it equal to a linear scan.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::memory::estimate;
use crate::model::Model;

/// Largest micro-batch the search will consider.
pub const MAX_BATCH: u64 = 1 << 20;

/// The one default share of GPU memory that `fit`, `plan` and `tune` aim for.
///
/// 0.9 because the total it is compared with already carries the modelled overheads (CUDA
/// context, cuBLAS workspaces, the caching allocator's reserve: see [`crate::job::Overheads`]),
/// so the remaining 10% is headroom for what is not modelled (longer samples, fragmentation);
/// it is also the default of vLLM's `--gpu-memory-utilization` (vLLM's own flag, which
/// `vram serve` defaults to separately, as vLLM does). `fit`
/// used 0.85 while `plan` and `tune` used 0.9, so the same job got two answers.
pub const DEFAULT_TARGET_UTILIZATION: f64 = 0.9;

/// Above this share of the GPU a job is likely to OOM on longer samples or fragmentation.
pub const TIGHT_UTILIZATION: f64 = 0.95;
/// Below this share the card is underused.
pub const UNDERUSED_UTILIZATION: f64 = 0.70;
/// The low end of the sweet spot (its high end is [`TIGHT_UTILIZATION`]).
pub const SWEET_SPOT_LOW: f64 = 0.85;

/// How a total compares with the GPU, decided once here so every command says the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// More than the GPU: out of memory.
    OutOfMemory,
    /// Above 95%: fits, but likely to OOM on longer samples or fragmentation.
    Tight,
    /// 85–95%.
    SweetSpot,
    /// 70–85%, and a larger batch could still fit.
    BelowSweetSpot,
    /// Under 70%, and a larger batch could still fit: raise the batch.
    Underused,
    /// Batch 1 fits the GPU but not the target share of it.
    OverTarget,
    /// Chosen by `fit` as the largest batch within the target: the next size would pass the
    /// target, so the low share is the step between batch sizes, not an unused card.
    LargestWithinTarget,
    /// Chosen by `fit` at the largest size it may choose (every divisor of the global batch, or
    /// the search limit) and still under the sweet spot: only a larger global batch uses more.
    BatchLimit,
}

impl Verdict {
    /// The verdict for a total at `utilization` (total / GPU memory) whose batch is the user's.
    pub fn of_utilization(utilization: f64) -> Verdict {
        if utilization > 1.0 {
            Verdict::OutOfMemory
        } else if utilization > TIGHT_UTILIZATION {
            Verdict::Tight
        } else if utilization >= SWEET_SPOT_LOW {
            Verdict::SweetSpot
        } else if utilization >= UNDERUSED_UTILIZATION {
            Verdict::BelowSweetSpot
        } else {
            Verdict::Underused
        }
    }

    /// The verdict for the batch `fit` chose: never "raise the batch", since the next size
    /// exceeds the target (`next_exceeds_target`) or there is no larger size to choose.
    pub fn of_chosen(utilization: f64, next_exceeds_target: bool) -> Verdict {
        match Verdict::of_utilization(utilization) {
            Verdict::BelowSweetSpot | Verdict::Underused if next_exceeds_target => Verdict::LargestWithinTarget,
            Verdict::BelowSweetSpot | Verdict::Underused => Verdict::BatchLimit,
            v => v,
        }
    }

    /// One line for a terminal.
    pub fn describe(self) -> &'static str {
        match self {
            Verdict::OutOfMemory => "does NOT fit: out of memory",
            Verdict::Tight => "fits, but above 95%: likely to OOM on longer samples or fragmentation",
            Verdict::SweetSpot => "fits, in the 85–95% sweet spot",
            Verdict::BelowSweetSpot => "fits, below the 85% sweet spot",
            Verdict::Underused => "fits, under 70%: the card is underused (raise the batch)",
            Verdict::OverTarget => "batch 1 fits the GPU but not the target utilisation",
            Verdict::LargestWithinTarget => {
                "fits; the largest batch within the target: the next size would pass it (the alternatives say what would allow a larger one)"
            }
            Verdict::BatchLimit => "fits; the largest batch allowed (global batch or search limit): a larger global batch would use more of the card",
        }
    }
}

/// One row of the utilisation table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitRow {
    /// Micro-batch size.
    pub batch: u64,
    /// Gradient accumulation steps at this batch (with a global batch size).
    pub grad_accum: u64,
    /// Peak allocated bytes.
    pub peak_allocated: u64,
    /// Total bytes (what nvidia-smi would show).
    pub total: u64,
    /// total / GPU memory.
    pub utilization: f64,
}

/// The answer of `vram fit`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// GPU memory in bytes.
    pub gpu_memory: u64,
    /// Target utilisation (0–1].
    pub target_utilization: f64,
    /// target × GPU memory.
    pub budget: u64,
    /// Largest micro-batch within the budget (`None`: batch 1 does not fit).
    pub max_batch: Option<u64>,
    /// The chosen batch's row.
    pub chosen: Option<FitRow>,
    /// The next larger candidate, which exceeds the budget.
    pub next: Option<FitRow>,
    /// Utilisation table over a ladder of batch sizes.
    pub rows: Vec<FitRow>,
    /// The verdict on the chosen batch (`OverTarget` or `OutOfMemory` when batch 1 does not fit the target).
    pub verdict: Verdict,
}

fn row(model: &Model, job: &Job, batch: u64, accum: u64, gpu_memory: u64) -> Result<FitRow> {
    let j = Job { batch, grad_accum: accum, ..job.clone() };
    let e = estimate(model, &j)?;
    Ok(FitRow {
        batch,
        grad_accum: accum,
        peak_allocated: e.peak_allocated,
        total: e.total,
        utilization: e.total as f64 / gpu_memory as f64,
    })
}

/// Largest batch in `1..=limit` with total ≤ budget, by doubling then bisection.
pub fn max_batch(model: &Model, job: &Job, budget: u64, limit: u64) -> Result<Option<u64>> {
    largest(limit, |b| Ok(estimate(model, &job.with_batch(b))?.total <= budget))
}

/// Largest `x` in `1..=limit` with `fits(x)`, for a `fits` that is true up to some point and
/// false after it (memory grows with the batch): doubling, then bisection.
pub fn largest(limit: u64, mut fits: impl FnMut(u64) -> Result<bool>) -> Result<Option<u64>> {
    if limit == 0 || !fits(1)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, 2u64); // lo fits; hi unknown
    while hi <= limit && fits(hi)? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let mut hi = hi.min(limit.saturating_add(1)); // first size known (or assumed past limit) not to fit
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// Reference implementation for tests: scan 1, 2, 3 … up to `limit`.
pub fn max_batch_linear(model: &Model, job: &Job, budget: u64, limit: u64) -> Result<Option<u64>> {
    let mut best = None;
    for b in 1..=limit {
        if estimate(model, &job.with_batch(b))?.total <= budget {
            best = Some(b);
        } else {
            break;
        }
    }
    Ok(best)
}

/// Find the largest micro-batch within `target` × `gpu_memory`. With `global_batch`, only
/// divisors of it are candidates and gradient accumulation makes up the rest.
pub fn fit(model: &Model, job: &Job, gpu_memory: u64, target: f64, global_batch: Option<u64>) -> Result<Fit> {
    if !(target > 0.0 && target <= 1.0) {
        return Err(Error::InvalidValue {
            what: "target utilization".into(),
            value: target.to_string(),
            hint: format!("must be in (0, 1], e.g. {DEFAULT_TARGET_UTILIZATION}"),
        });
    }
    let budget = (gpu_memory as f64 * target).floor() as u64;
    let (max, rows, next) = match global_batch {
        None => {
            let max = max_batch(model, job, budget, MAX_BATCH)?;
            let mut ladder: Vec<u64> = vec![1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024];
            if let Some(m) = max {
                ladder.extend([m, m + 1]);
            }
            ladder.sort_unstable();
            ladder.dedup();
            let mut rows = Vec::new();
            for b in ladder {
                let r = row(model, job, b, job.grad_accum, gpu_memory)?;
                let over = r.total > gpu_memory;
                rows.push(r);
                if over || (max.is_some_and(|m| b > m) && rows.len() >= 4) {
                    break;
                }
            }
            let next = match max {
                Some(m) if m < MAX_BATCH => Some(row(model, job, m + 1, job.grad_accum, gpu_memory)?),
                None => Some(row(model, job, 1, job.grad_accum, gpu_memory)?),
                _ => None,
            };
            (max, rows, next)
        }
        Some(g) => {
            if g == 0 || g > MAX_BATCH {
                return Err(Error::InvalidValue {
                    what: "global batch size".into(),
                    value: g.to_string(),
                    hint: format!("must be between 1 and {MAX_BATCH}"),
                });
            }
            let divisors: Vec<u64> = (1..=g).filter(|d| g % d == 0).collect();
            let mut rows = Vec::new();
            let mut max = None;
            let mut next = None;
            for &b in &divisors {
                let r = row(model, job, b, g / b, gpu_memory)?;
                if r.total <= budget {
                    max = Some(b);
                } else if next.is_none() {
                    next = Some(r.clone());
                }
                let over = r.total > gpu_memory;
                rows.push(r);
                if over {
                    break;
                }
            }
            (max, rows, next)
        }
    };
    let chosen = match max {
        Some(b) => Some(row(model, job, b, global_batch.map_or(job.grad_accum, |g| g / b), gpu_memory)?),
        None => None,
    };
    let verdict = match &chosen {
        Some(c) => Verdict::of_chosen(c.utilization, next.as_ref().is_some_and(|n| n.total > budget)),
        None if next.as_ref().is_some_and(|n| n.total <= gpu_memory) => Verdict::OverTarget,
        None => Verdict::OutOfMemory,
    };
    Ok(Fit { gpu_memory, target_utilization: target, budget, max_batch: max, chosen, next, rows, verdict })
}
