//! `vram tune`'s search: the best micro-batch in the fewest real runs.
//!
//! The first trial is the estimator's answer. Every measurement calibrates a line
//! `measured = a + b·batch` (one point: the estimate's slope through it; two or more: least
//! squares), out-of-memory runs and runs above the target bound the answer from above, and the
//! next trial is the calibrated line's largest batch within `target × (1 − margin)`. The search
//! stops when the line says the next batch would not fit, when the batches on either side are
//! known, or after the trial budget. Only a batch *measured* within the target is ever chosen.

use serde::Serialize;

/// One real run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observation {
    /// Micro-batch tried.
    pub batch: u64,
    /// Measured peak (bytes) when known; an OOM may leave none.
    pub peak: Option<u64>,
    /// It ran out of memory (or failed).
    pub failed: bool,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Step {
    /// Run this batch.
    Try(u64),
    /// Stop: the chosen batch (None: not even batch 1 fits) and why.
    Done {
        /// Chosen micro-batch.
        batch: Option<u64>,
        /// Why the search stopped here.
        reason: String,
    },
}

/// The search's fixed inputs.
pub struct Tuner<'a> {
    /// target × GPU memory: the most a chosen batch may measure.
    pub budget: u64,
    /// Safety margin for sequence-length variance: aim at budget × (1 − margin).
    pub margin: f64,
    /// Largest batch considered.
    pub max_batch: u64,
    /// Trial budget.
    pub max_trials: usize,
    /// The estimator: predicted peak at a batch.
    pub estimate: &'a dyn Fn(u64) -> u64,
}

/// How far a trial's measurement may stray from the estimate before it is questioned: a factor 3
/// either way. The estimator's worst error on peak allocated memory is 7.1% (README accuracy
/// table, `crates/vram-core/tests/validation.rs`), so a reading 3x off says the measurement is
/// wrong (a child reporting 0, NVML missing the job's processes), not the model.
pub const QUESTION_FACTOR: u64 = 3;

/// Whether `measured` is too far from `estimated` to be trusted (see [`QUESTION_FACTOR`]). An
/// estimate of `u64::MAX` (the estimator failed) questions nothing.
pub fn questioned(measured: u64, estimated: u64) -> bool {
    estimated != u64::MAX && (measured.saturating_mul(QUESTION_FACTOR) < estimated || measured > estimated.saturating_mul(QUESTION_FACTOR))
}

/// What a trial at `batch` should measure, to question its reading by: the estimate, scaled by
/// the measured/estimated ratio of the nearest earlier trial with a trusted peak (so a consistently
/// low or high estimate, which the search calibrates away, does not make later readings suspect).
pub fn expected(estimate: &dyn Fn(u64) -> u64, batch: u64, trusted: &[Observation]) -> u64 {
    let est = estimate(batch);
    let nearest = trusted.iter().filter(|o| !o.failed).filter_map(|o| o.peak.map(|p| (o.batch, p))).min_by_key(|(b, _)| b.abs_diff(batch));
    match nearest {
        Some((b, p)) if est != u64::MAX && estimate(b) != u64::MAX && estimate(b) > 0 => {
            (est as f64 * (p as f64 / estimate(b) as f64)).min(u64::MAX as f64 / 2.0) as u64
        }
        _ => est,
    }
}

impl Tuner<'_> {
    fn aim(&self) -> f64 {
        self.budget as f64 * (1.0 - self.margin)
    }

    /// Largest batch in 1..=max whose prediction is within `limit` (0 if none), for a monotone predictor.
    fn largest_within(&self, limit: f64, predict: &dyn Fn(u64) -> f64) -> u64 {
        if predict(1) > limit {
            return 0;
        }
        let (mut lo, mut hi) = (1u64, self.max_batch.max(1));
        if predict(hi) <= limit {
            return hi;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if predict(mid) <= limit {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The next step given the runs so far.
    pub fn next(&self, obs: &[Observation]) -> Step {
        let fits = |o: &&Observation| !o.failed && o.peak.is_some_and(|p| p <= self.budget);
        let lo = obs.iter().filter(fits).map(|o| o.batch).max();
        let hi = obs.iter().filter(|o| !fits(o)).map(|o| o.batch).min();
        if obs.is_empty() {
            let b = self.largest_within(self.aim(), &|b| (self.estimate)(b) as f64).max(1);
            return Step::Try(b);
        }
        if hi == Some(1) {
            return Step::Done { batch: None, reason: "batch 1 does not fit the target".into() };
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if h <= l + 1 {
                return Step::Done { batch: Some(l), reason: format!("batch {l} fits and batch {h} does not") };
            }
        }
        if obs.len() >= self.max_trials {
            return Step::Done { batch: lo, reason: format!("trial budget ({}) spent", self.max_trials) };
        }
        // Calibrate measured = a + s·batch on the runs with a peak.
        let pts: Vec<(f64, f64)> = obs.iter().filter_map(|o| o.peak.map(|p| (o.batch as f64, p as f64))).collect();
        let est = |b: u64| (self.estimate)(b) as f64;
        let est_slope = (est(2) - est(1)).max(1.0);
        // Bracketed by measured runs on both sides of the budget: the secant through the nearest
        // two (robust to a step in the curve, e.g. a kernel switch, between them).
        let below = obs.iter().filter(fits).filter_map(|o| o.peak.map(|p| (o.batch, p))).max_by_key(|x| x.0);
        let above = obs.iter().filter(|o| !fits(o)).filter_map(|o| o.peak.map(|p| (o.batch, p))).min_by_key(|x| x.0);
        let secant = match (below, above) {
            (Some((bl, pl)), Some((bh, ph))) if bh > bl && ph > pl => {
                let s = (ph - pl) as f64 / (bh - bl) as f64;
                Some((pl as f64 - s * bl as f64, s))
            }
            _ => None,
        };
        let (a, s) = match pts.len() {
            _ if secant.is_some() => secant.expect("checked"),
            0 => {
                // Only failures: the estimate is low. Scale it so the smallest failure would
                // have reached the whole GPU (budget is target × memory, so ≥ 1/target more).
                let h = hi.unwrap_or(1);
                let k = (self.budget as f64 / est(h)).max(1.0) * 1.25;
                (est(0).max(0.0) * k, est_slope * k)
            }
            1 => {
                let (b, p) = pts[0];
                (p - est_slope * b, est_slope)
            }
            _ => {
                let n = pts.len() as f64;
                let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
                let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
                let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
                let s = if sxx > 0.0 { (sxy / sxx).max(est_slope * 0.25) } else { est_slope };
                (my - s * mx, s)
            }
        };
        // Runs that crossed the budget also bound the line from below at their batch.
        let predict = |b: u64| a + s * b as f64;
        let mut want = self.largest_within(self.aim(), &predict);
        if let Some(h) = hi {
            want = want.min(h - 1);
        }
        match lo {
            // Under 1% more batch is within run-to-run noise: not worth a run.
            Some(l) if want > l && want <= l + l / 100 => {
                Step::Done { batch: Some(l), reason: format!("batch {l} fits; the next candidate ({want}) would add under 1%") }
            }
            Some(l) if want <= l => Step::Done {
                batch: Some(l),
                reason: format!(
                    "batch {l} fits; the calibrated line ({:.2} GiB + {:.3} GiB per sample) puts {} above the target",
                    a / 1073741824.0,
                    s / 1073741824.0,
                    l + 1
                ),
            },
            _ if want == 0 => {
                if hi.is_some_and(|h| h > 1) {
                    Step::Try(1)
                } else {
                    Step::Done { batch: None, reason: "batch 1 does not fit the target".into() }
                }
            }
            _ => {
                if obs.iter().any(|o| o.batch == want) {
                    return Step::Done { batch: lo, reason: format!("the calibrated line returns to batch {want}, already tried") };
                }
                Step::Try(want)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(truth: &dyn Fn(u64) -> u64, estimate: &dyn Fn(u64) -> u64, gpu: u64, budget: u64) -> (Option<u64>, usize) {
        let t = Tuner { budget, margin: 0.0, max_batch: 1024, max_trials: 8, estimate };
        let mut obs = Vec::new();
        loop {
            match t.next(&obs) {
                Step::Try(b) => {
                    let p = truth(b);
                    obs.push(Observation { batch: b, peak: (p <= gpu).then_some(p), failed: p > gpu });
                }
                Step::Done { batch, .. } => return (batch, obs.len()),
            }
        }
    }

    #[test]
    fn exact_estimate_takes_one_or_two_trials() {
        let f = |b: u64| (10u64 << 30) + b * (1 << 30);
        let (b, n) = run(&f, &f, 80 << 30, 72 << 30);
        assert_eq!(b, Some(62));
        assert!(n <= 2, "{n}");
    }

    #[test]
    fn estimate_30_percent_low_never_exceeds_the_target() {
        let est = |b: u64| (10u64 << 30) + b * (1 << 30);
        let truth = |b: u64| est(b) * 13 / 10;
        let budget = 72u64 << 30;
        let (b, n) = run(&truth, &est, 80 << 30, budget);
        let b = b.unwrap();
        assert!(truth(b) <= budget);
        assert!(truth(b + 1) > budget, "optimal: {b}");
        assert!(n <= 4, "{n}");
    }

    #[test]
    fn readings_far_from_the_estimate_are_questioned() {
        let est = 1_089_000_000_000;
        assert!(questioned(0, est), "a child reporting 0 bytes");
        assert!(questioned(est * 4, est));
        assert!(!questioned(est / 2, est));
        assert!(!questioned(est * 2, est));
        assert!(!questioned(0, u64::MAX), "no estimate, nothing to question");
        // An estimate 2.5x high throughout: calibrated by the first trusted trial, not suspect.
        let est = |b: u64| 25 * b;
        let trial_1 = Observation { batch: 10, peak: Some(100), failed: false };
        assert_eq!(expected(&est, 62, &[trial_1]), 620);
        assert!(!questioned(620, expected(&est, 62, &[trial_1])));
        assert_eq!(expected(&est, 62, &[]), 1550, "no trusted trial: the estimate itself");
    }

    #[test]
    fn batch_one_too_big() {
        let f = |b: u64| (90u64 << 30) + b;
        let (b, _) = run(&f, &f, 80 << 30, 72 << 30);
        assert_eq!(b, None);
    }
}
