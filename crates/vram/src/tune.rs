//! `vram tune -- CMD {batch}`: find the best micro-batch in the fewest real runs. The search is
//! `vram_core::tune`; this module runs the trials: substitutes `{batch}` / `{grad_accum}`, measures
//! each run's peak (NVML, or the child's own report), detects OOM, enforces a timeout, and never
//! leaves a child running.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use vram_core::tune::{Observation, Step, Tuner};

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
    /// Seconds.
    pub seconds: f64,
    /// What the estimator predicted, bytes.
    pub estimated: u64,
}

static CURRENT: AtomicI32 = AtomicI32::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

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
    seconds: f64,
}

fn run_trial(cmd: &[String], measure: Measure, reader: &mut Option<nvml::Nvml>, timeout: Duration, interval: Duration) -> Result<Outcome> {
    let (program, args) = cmd.split_first().expect("non-empty");
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start `{program}`"))?;
    let pid = child.id();
    CURRENT.store(pid as i32, Ordering::SeqCst);
    let reported: Arc<Mutex<Option<u64>>> = Arc::default();
    let oom_seen = Arc::new(AtomicBool::new(false));
    let (r2, o2) = (reported.clone(), oom_seen.clone());
    let out = child.stdout.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(v) = parse_report(&line) {
                let mut g = r2.lock().expect("lock");
                *g = Some(g.map_or(v, |x| x.max(v)));
            }
            eprintln!("  | {line}");
        }
    });
    let err = child.stderr.take().expect("piped");
    let t_err = std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if oom::detect(&line).is_some() {
                o2.store(true, Ordering::SeqCst);
            }
            eprintln!("  ! {line}");
        }
    });
    let start = Instant::now();
    let mut peak_nvml: Option<u64> = None;
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if measure == Measure::Nvml {
            if let Some(r) = reader.as_mut() {
                let tree: std::collections::HashSet<u32> = procs::job_tree(pid).iter().map(|p| p.pid).collect();
                for (_, _, mine) in crate::measure::job_memory(&r.read().unwrap_or_default(), &tree) {
                    if let Some(m) = mine.filter(|m| *m > 0) {
                        peak_nvml = Some(peak_nvml.map_or(m, |x: u64| x.max(m)));
                    }
                }
            }
        }
        if start.elapsed() > timeout || STOP.load(Ordering::SeqCst) {
            timed_out = !STOP.load(Ordering::SeqCst);
            // Never leave a child running: kill its whole process group.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            break child.wait()?;
        }
        std::thread::sleep(interval);
    };
    CURRENT.store(0, Ordering::SeqCst);
    let _ = t_out.join();
    let _ = t_err.join();
    let oom = oom_seen.load(Ordering::SeqCst);
    let peak = match measure {
        Measure::ChildReport => *reported.lock().expect("lock"),
        Measure::Nvml => peak_nvml,
    };
    Ok(Outcome { peak, oom, timed_out, code: status.code(), seconds: start.elapsed().as_secs_f64() })
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
    // Ctrl-C / SIGTERM: kill the running trial's process group and stop.
    let mut sig = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP])?;
    std::thread::spawn(move || {
        for _ in sig.forever() {
            STOP.store(true, Ordering::SeqCst);
            let c = CURRENT.load(Ordering::SeqCst);
            if c > 0 {
                unsafe { libc::kill(-c, libc::SIGKILL) };
            }
        }
    });
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
    let (batch, reason) = loop {
        if STOP.load(Ordering::SeqCst) {
            break (
                obs.iter().filter(|x| !x.failed && x.peak.is_some_and(|p| p <= budget)).map(|x| x.batch).max(),
                "interrupted".to_string(),
            );
        }
        match tuner.next(&obs) {
            Step::Done { batch, reason } => break (batch, reason),
            Step::Try(b) => {
                let b = snap(b);
                if obs.iter().any(|x| x.batch == b) {
                    let best = obs.iter().filter(|x| !x.failed && x.peak.is_some_and(|p| p <= budget)).map(|x| x.batch).max();
                    break (best, format!("the next candidate rounds to batch {b}, already tried"));
                }
                let cmd = substitute(&o.command, b, accum_for(b));
                eprintln!("vram tune: trial {} — batch {b}: {}", obs.len() + 1, cmd.join(" "));
                let Outcome { peak, oom, timed_out, code, seconds: secs } = run_trial(&cmd, o.measure, &mut reader, o.timeout, o.interval)?;
                let failed = oom || timed_out || code != Some(0);
                if code != Some(0) && !oom && !timed_out && !STOP.load(Ordering::SeqCst) {
                    eprintln!("vram tune: batch {b} exited with {code:?} without an out-of-memory message; counted as not fitting");
                }
                trials.push(TrialReport {
                    batch: b,
                    grad_accum: accum_for(b),
                    peak,
                    utilization: peak.map(|p| p as f64 / o.gpu_memory as f64),
                    oom,
                    timed_out,
                    exit_code: code,
                    seconds: secs,
                    estimated: (o.estimate)(b),
                });
                obs.push(Observation { batch: b, peak: if failed { None } else { peak }, failed: failed || peak.is_none() });
            }
        }
    };
    let command = batch.map(|b| substitute(&o.command, b, accum_for(b)));
    Ok(TuneReport { trials, batch, grad_accum: batch.and_then(accum_for), reason, command, budget })
}

/// The report as a table.
pub fn text(r: &TuneReport, gpu_memory: u64) -> String {
    use vram_core::units::gib;
    let mut o =
        format!("  {:>5} {:>6} {:>11} {:>11} {:>6} {:>5} {:>8}\n", "trial", "batch", "estimated", "measured", "util", "OOM", "seconds");
    for (i, t) in r.trials.iter().enumerate() {
        o += &format!(
            "  {:>5} {:>6} {:>9.2} G {:>9} {:>6} {:>5} {:>8.1}\n",
            i + 1,
            t.batch,
            gib(t.estimated),
            t.peak.map_or("-".into(), |p| format!("{:.2} G", gib(p))),
            t.utilization.map_or("-".into(), |u| format!("{:.1}%", u * 100.0)),
            if t.oom {
                "yes"
            } else if t.timed_out {
                "t/o"
            } else {
                ""
            },
            t.seconds
        );
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
