//! `vram tune -- CMD {batch}`: find the best micro-batch in the fewest real runs. The search is
//! `vram_core::tune`; this module runs the trials: substitutes `{batch}` / `{grad_accum}`, measures
//! each run's peak (NVML, or the child's own report), detects OOM, enforces a timeout, and never
//! leaves a child running.

use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStderr, ChildStdout, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use vram_core::tune::{Observation, Step, Tuner};

use crate::measure::child::{self, Leftovers};
use crate::measure::{nvml, oom, procs, GpuReader};
use crate::resolve::UsageError;

/// The line a child prints in `--measure child-report` mode: `VRAM_PEAK_BYTES=<integer>`.
pub const REPORT_PREFIX: &str = "VRAM_PEAK_BYTES=";

/// How trials are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// The peak GPU memory of the trial's process tree, through NVML.
    Nvml,
    /// The largest `VRAM_PEAK_BYTES=<n>` line the child prints on stdout.
    ChildReport,
}

/// One trial as reported.
#[derive(Debug, Clone, Serialize)]
pub struct TrialReport {
    /// Micro-batch.
    pub batch: u64,
    /// Gradient accumulation (with a global batch).
    pub grad_accum: Option<u64>,
    /// Measured peak, bytes.
    pub peak: Option<u64>,
    /// peak / GPU memory.
    pub utilization: Option<f64>,
    /// Out of memory.
    pub oom: bool,
    /// Timed out (killed).
    pub timed_out: bool,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Its measurement was too far from the estimate to be trusted (see `vram_core::tune::questioned`).
    pub questioned: bool,
    /// Seconds.
    pub seconds: f64,
    /// What the estimator predicted, bytes.
    pub estimated: u64,
}

/// The running trial's process group (0: none).
static CURRENT: AtomicI32 = AtomicI32::new(0);
/// The signal that asked vram to stop (0: none).
static STOP: AtomicI32 = AtomicI32::new(0);

/// Replace `{batch}` and `{grad_accum}` in the command.
pub fn substitute(cmd: &[String], batch: u64, accum: Option<u64>) -> Vec<String> {
    cmd.iter().map(|a| a.replace("{batch}", &batch.to_string()).replace("{grad_accum}", &accum.unwrap_or(1).to_string())).collect()
}

/// The largest `VRAM_PEAK_BYTES=` value in a child's output.
pub fn parse_report(line: &str) -> Option<u64> {
    line.trim().strip_prefix(REPORT_PREFIX)?.trim().parse().ok()
}

/// What one trial did.
struct Outcome {
    peak: Option<u64>,
    oom: bool,
    timed_out: bool,
    code: Option<i32>,
    signal: Option<i32>,
    seconds: f64,
    leftovers: Leftovers,
}

/// Longest line of a trial's output held whole; longer ones are shown in pieces.
const MAX_LINE: usize = 64 * 1024;

/// Run one trial. Its output is read as bytes and decoded lossily (a stray non-UTF-8 byte must
/// not stop the reader and kill the child with SIGPIPE); the wait ends when the child exits, its
/// time is up or vram is asked to stop, never on a pipe a background process holds open.
fn run_trial(cmd: &[String], measure: Measure, reader: &mut Option<nvml::Nvml>, timeout: Duration, interval: Duration) -> Result<Outcome> {
    let mut child = child::spawn(cmd, Stdio::null(), Stdio::piped(), Stdio::piped())?;
    let pgid = child.id() as i32;
    CURRENT.store(pgid, Ordering::SeqCst);
    let reported: Arc<Mutex<Option<u64>>> = Arc::default();
    let oom_seen: Arc<Mutex<oom::Scanner>> = Arc::default();
    let pumps = [
        echo(child.stdout.take().context("the trial's stdout")?, "|", reported.clone()),
        scan(child.stderr.take().context("the trial's stderr")?, oom_seen.clone()),
    ];
    let start = Instant::now();
    let waited = wait_trial(&mut child, pgid, measure, reader, timeout, interval);
    let seconds = start.elapsed().as_secs_f64();
    let leftovers = child::end_group(pgid, child::GRACE);
    CURRENT.store(0, Ordering::SeqCst);
    let (status, peak_nvml, timed_out) = waited?;
    let deadline = Instant::now() + child::PIPE_WAIT;
    for p in &pumps {
        p.finish(deadline);
    }
    let oom = oom_seen.lock().map(|s| s.found().is_some()).unwrap_or(false);
    let peak = match measure {
        Measure::ChildReport => *reported.lock().unwrap_or_else(|e| e.into_inner()),
        Measure::Nvml => peak_nvml,
    };
    Ok(Outcome { peak, oom, timed_out, code: status.code(), signal: status.signal(), seconds, leftovers })
}

/// Echo a trial's stdout line by line, keeping the largest `VRAM_PEAK_BYTES=` it reports.
fn echo(from: ChildStdout, mark: &'static str, reported: Arc<Mutex<Option<u64>>>) -> child::Pump {
    let mut lines = child::Lines::new(MAX_LINE);
    child::pump(from, move |chunk| {
        lines.feed(chunk, &mut |line| {
            if let Some(v) = parse_report(line) {
                let mut g = reported.lock().unwrap_or_else(|e| e.into_inner());
                *g = Some(g.map_or(v, |x| x.max(v)));
            }
            eprintln!("  {mark} {line}");
        })
    })
}

/// Echo a trial's stderr line by line, watching it for an out-of-memory message.
fn scan(from: ChildStderr, seen: Arc<Mutex<oom::Scanner>>) -> child::Pump {
    let mut lines = child::Lines::new(MAX_LINE);
    child::pump(from, move |chunk| {
        if let Ok(mut s) = seen.lock() {
            s.feed(chunk);
        }
        lines.feed(chunk, &mut |line| eprintln!("  ! {line}"));
    })
}

/// Wait for the trial's exit, sampling NVML meanwhile; past the timeout or on a stop request
/// kill its whole process group. Returns (status, NVML peak, timed out).
fn wait_trial(
    child: &mut std::process::Child,
    pgid: i32,
    measure: Measure,
    reader: &mut Option<nvml::Nvml>,
    timeout: Duration,
    interval: Duration,
) -> Result<(ExitStatus, Option<u64>, bool)> {
    let start = Instant::now();
    let mut peak: Option<u64> = None;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok((s, peak, false));
        }
        if let (Measure::Nvml, Some(r)) = (measure, reader.as_mut()) {
            let tree: std::collections::HashSet<u32> = procs::job_tree(pgid as u32).iter().map(|p| p.pid).collect();
            for (_, _, mine) in crate::measure::job_memory(&r.read().unwrap_or_default(), &tree) {
                if let Some(m) = mine.filter(|m| *m > 0) {
                    peak = Some(peak.map_or(m, |x: u64| x.max(m)));
                }
            }
        }
        let stop = STOP.load(Ordering::SeqCst) != 0;
        if start.elapsed() > timeout || stop {
            // Never leave a child running: kill its whole process group.
            child::signal_group(pgid, libc::SIGKILL);
            return Ok((child.wait()?, peak, !stop));
        }
        std::thread::sleep(interval);
    }
}

/// Tuning inputs.
pub struct TuneOptions<'a> {
    /// The command with `{batch}`.
    pub command: Vec<String>,
    /// GPU memory, bytes.
    pub gpu_memory: u64,
    /// Target utilisation.
    pub target: f64,
    /// Safety margin.
    pub margin: f64,
    /// Trial budget.
    pub max_trials: usize,
    /// Per-trial timeout.
    pub timeout: Duration,
    /// Sampling interval.
    pub interval: Duration,
    /// How trials are measured.
    pub measure: Measure,
    /// Global batch (then the micro-batch divides it).
    pub global_batch: Option<u64>,
    /// The estimator's predicted total at a batch.
    pub estimate: &'a dyn Fn(u64) -> u64,
}

/// The outcome.
#[derive(Debug, Clone, Serialize)]
pub struct TuneReport {
    /// Every trial.
    pub trials: Vec<TrialReport>,
    /// Chosen micro-batch.
    pub batch: Option<u64>,
    /// Gradient accumulation for it.
    pub grad_accum: Option<u64>,
    /// Why.
    pub reason: String,
    /// The command line to run.
    pub command: Option<Vec<String>>,
    /// target × GPU memory.
    pub budget: u64,
    /// The signal (SIGINT, SIGTERM, SIGHUP) that stopped the search, if one did.
    pub interrupted_by: Option<i32>,
}

impl TuneReport {
    /// What vram should exit with: 128 + the signal that stopped it, else 0 when a batch was
    /// chosen, 1 when none was.
    pub fn exit_code(&self) -> u8 {
        match (self.interrupted_by, self.batch) {
            (Some(s), _) => (128 + s).clamp(0, 255) as u8,
            (None, Some(_)) => 0,
            (None, None) => 1,
        }
    }
}

/// Run the search.
pub fn tune(o: TuneOptions) -> Result<TuneReport> {
    if !o.command.iter().any(|a| a.contains("{batch}")) {
        return Err(
            UsageError("the command must contain {batch}, e.g. `-- python train.py --per_device_train_batch_size {batch}`".into()).into()
        );
    }
    let valid = o.target > 0.0 && o.target <= 1.0 && (0.0..0.5).contains(&o.margin) && (1..=64).contains(&o.max_trials);
    if !valid {
        return Err(UsageError("--target-utilization must be in (0, 1], --margin in [0, 0.5), --max-trials in 1..=64".into()).into());
    }
    let mut reader = match o.measure {
        Measure::Nvml => Some(nvml::open()?),
        Measure::ChildReport => None,
    };
    let signals = stop_on_signals()?;
    let budget = (o.gpu_memory as f64 * o.target) as u64;
    let max_batch = o.global_batch.unwrap_or(vram_core::fit::MAX_BATCH).min(vram_core::fit::MAX_BATCH);
    let tuner = Tuner { budget, margin: o.margin, max_batch, max_trials: o.max_trials, estimate: o.estimate };
    let accum_for = |b: u64| o.global_batch.map(|g| g / b);
    let snap = |b: u64| match o.global_batch {
        // the micro-batch must divide the global batch: the largest divisor not above b
        Some(g) => (1..=b.min(g)).rev().find(|d| g % d == 0).unwrap_or(1),
        None => b,
    };
    let mut obs: Vec<Observation> = Vec::new();
    let mut trials = Vec::new();
    let best = |obs: &[Observation]| obs.iter().filter(|x| !x.failed && x.peak.is_some_and(|p| p <= budget)).map(|x| x.batch).max();
    let (batch, reason) = loop {
        if STOP.load(Ordering::SeqCst) != 0 {
            break (best(&obs), "interrupted".to_string());
        }
        let b = match tuner.next(&obs) {
            Step::Done { batch, reason } => break (batch, reason),
            Step::Try(b) => snap(b),
        };
        if obs.iter().any(|x| x.batch == b) {
            break (best(&obs), format!("the next candidate rounds to batch {b}, already tried"));
        }
        let cmd = substitute(&o.command, b, accum_for(b));
        eprintln!("vram tune: trial {} — batch {b}: {}", obs.len() + 1, cmd.join(" "));
        let expected = vram_core::tune::expected(o.estimate, b, &obs);
        let t = trial(&cmd, b, accum_for(b), expected, &o, &mut reader)?;
        let questioned = t.questioned;
        let failed = t.oom || t.timed_out || t.exit_code != Some(0);
        obs.push(Observation { batch: b, peak: if failed { None } else { t.peak }, failed: failed || t.peak.is_none() });
        trials.push(t);
        if questioned {
            // Extrapolating from a reading that cannot be right would choose a batch that cannot fit.
            obs.pop();
            break (best(&obs), format!("the measurement at batch {b} is more than {}x off what the estimate expects and is not trusted; check how the trial measures its peak", vram_core::tune::QUESTION_FACTOR));
        }
    };
    signals.close();
    let command = batch.map(|b| substitute(&o.command, b, accum_for(b)));
    let stopped = STOP.load(Ordering::SeqCst);
    let interrupted_by = (stopped != 0).then_some(stopped);
    Ok(TuneReport { trials, batch, grad_accum: batch.and_then(accum_for), reason, command, budget, interrupted_by })
}

/// Ctrl-C / SIGTERM / SIGHUP: kill the running trial's process group and stop the search.
fn stop_on_signals() -> Result<signal_hook::iterator::Handle> {
    let mut sig = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    let handle = sig.handle();
    std::thread::spawn(move || {
        for s in sig.forever() {
            STOP.store(s, Ordering::SeqCst);
            child::signal_group(CURRENT.load(Ordering::SeqCst), libc::SIGKILL);
        }
    });
    Ok(handle)
}

/// Run batch `b` and say what happened.
/// `expected`: what its reading should be near (see `vram_core::tune::expected`).
fn trial(
    cmd: &[String],
    b: u64,
    accum: Option<u64>,
    expected: u64,
    o: &TuneOptions,
    reader: &mut Option<nvml::Nvml>,
) -> Result<TrialReport> {
    let out = run_trial(cmd, o.measure, reader, o.timeout, o.interval)?;
    let stopped = STOP.load(Ordering::SeqCst) != 0;
    if let Some(l) = out.leftovers.describe() {
        eprintln!("vram tune: batch {b}: {l}");
    }
    if out.code != Some(0) && !out.oom && !out.timed_out && !stopped {
        eprintln!(
            "vram tune: batch {b} exited with {} without an out-of-memory message; counted as not fitting",
            child::describe_exit(out.code, out.signal)
        );
    }
    let estimated = (o.estimate)(b);
    let questioned = out.code == Some(0) && out.peak.is_some_and(|p| vram_core::tune::questioned(p, expected));
    if let (true, Some(p)) = (questioned, out.peak) {
        eprintln!(
            "vram tune: warning: batch {b} measured {p} bytes where about {expected} bytes were expected ({:.2} GB vs {:.2} GB, GB = 10^9 bytes; \
             the estimate, calibrated by earlier trials): more than {}x off, so the measurement is questioned and not extrapolated from",
            p as f64 / 1e9,
            expected as f64 / 1e9,
            vram_core::tune::QUESTION_FACTOR
        );
    }
    Ok(TrialReport {
        batch: b,
        grad_accum: accum,
        peak: out.peak,
        utilization: out.peak.map(|p| p as f64 / o.gpu_memory as f64),
        oom: out.oom,
        timed_out: out.timed_out,
        exit_code: out.code,
        signal: out.signal,
        questioned,
        seconds: out.seconds,
        estimated,
    })
}

/// The report as a table.
pub fn text(r: &TuneReport, gpu_memory: u64) -> String {
    use vram_core::units::gib;
    let mut o =
        format!("  {:>5} {:>6} {:>13} {:>13} {:>6} {:>5} {:>8}\n", "trial", "batch", "estimated", "measured", "util", "OOM", "seconds");
    for (i, t) in r.trials.iter().enumerate() {
        o += &format!(
            "  {:>5} {:>6} {:>9.2} GiB {:>13} {:>6} {:>5} {:>8.1}\n",
            i + 1,
            t.batch,
            gib(t.estimated),
            t.peak.map_or("-".into(), |p| format!("{:.2} GiB", gib(p))),
            t.utilization.map_or("-".into(), |u| format!("{:.1}%", u * 100.0)),
            if t.oom {
                "yes"
            } else if t.timed_out {
                "t/o"
            } else if t.questioned {
                "?"
            } else {
                ""
            },
            t.seconds
        );
    }
    if r.trials.iter().any(|t| t.questioned) {
        o += &format!("  ? measured more than {}x off the estimate: questioned, not used\n", vram_core::tune::QUESTION_FACTOR);
    }
    o += &format!("\ntarget {:.2} GiB of {:.2} GiB (GiB = 2^30 bytes)\n", gib(r.budget), gib(gpu_memory));
    match (&r.batch, &r.command) {
        (Some(b), Some(cmd)) => {
            o += &format!(
                "chosen batch {b}{}: {}\nrun: {}\n",
                r.grad_accum.map_or(String::new(), |a| format!(" (gradient accumulation {a})")),
                r.reason,
                cmd.join(" ")
            )
        }
        _ => o += &format!("no batch fits the target: {}\n", r.reason),
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitution_and_report_lines() {
        let cmd: Vec<String> = ["python", "t.py", "--bs={batch}", "--ga", "{grad_accum}"].iter().map(|s| s.to_string()).collect();
        assert_eq!(substitute(&cmd, 8, Some(4)), ["python", "t.py", "--bs=8", "--ga", "4"]);
        assert_eq!(parse_report("VRAM_PEAK_BYTES=123"), Some(123));
        assert_eq!(parse_report("  VRAM_PEAK_BYTES= 7 "), Some(7));
        assert_eq!(parse_report("loss=1.2"), None);
        assert_eq!(parse_report("VRAM_PEAK_BYTES=lots"), None);
    }
}
