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
    let fits = |b: u64| -> Result<bool> { Ok(estimate(model, &job.with_batch(b))?.total <= budget) };
    if limit == 0 || !fits(1)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, 2u64); // lo fits; hi unknown
    while hi <= limit && fits(hi)? {
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    let mut hi = hi.min(limit + 1); // first size known (or assumed past limit) not to fit
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
            hint: "must be in (0, 1], e.g. 0.85 or 0.9".into(),
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
    Ok(Fit { gpu_memory, target_utilization: target, budget, max_batch: max, chosen, next, rows })
}
