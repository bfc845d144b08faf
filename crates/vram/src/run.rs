//! `vram run -- CMD`: run a command, sample the GPU memory of its whole process tree, forward
//! signals, write the timeline as it goes, and report the peak per GPU and when it happened.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use vram_core::units::gib;

use crate::measure::child::{self, Leftovers, Pump};
use crate::measure::oom::{self, Oom};
use crate::measure::timeline::{self, GpuPeak, GpuSample, Sample};
use crate::measure::{nvml, procs, GpuReader, GpuReading};
use crate::resolve::UsageError;

/// What `vram run` was asked.
pub struct RunOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Sampling interval.
    pub interval: Duration,
    /// JSON report path.
    pub out: Option<PathBuf>,
    /// Timeline path (.csv or .jsonl).
    pub timeline: Option<PathBuf>,
    /// SVG chart path.
    pub svg: Option<PathBuf>,
    /// Prometheus endpoint address.
    pub metrics: Option<String>,
    /// Estimate to compare with: (model name, estimated allocated, estimated total, its CUDA context assumption).
    pub estimate: Option<(String, u64, u64, u64)>,
    /// Where a PyTorch child dumps its memory snapshot (`--snapshot`), explained after the run.
    pub snapshot: Option<PathBuf>,
}

/// Parse `50ms`, `1s`, `0.5s`, `2m` as a sampling interval (5 ms to 1 h).
pub fn parse_interval(s: &str) -> Result<Duration> {
    parse_duration(s, 0.005, 3600.0)
}

/// Parse a duration within [min, max] seconds.
pub fn parse_duration(s: &str, min: f64, max: f64) -> Result<Duration> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| crate::resolve::UsageError(format!("invalid interval `{s}`: use e.g. 50ms, 1s")))?;
    let secs = v * mult;
    if !(min..=max).contains(&secs) {
        return Err(crate::resolve::UsageError(format!("duration `{s}` must be between {min} s and {max} s")).into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Options of `vram run` beyond [`RunOptions`] (flags the CLI may not offer yet).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunExtras {
    /// Overwrite existing --out/--svg/--timeline files (`--force`).
    pub force: bool,
    /// Export each GPU process's full command line as a metrics label (`--metrics-command-label`).
    pub metrics_command_label: bool,
}

/// Run it with the extra options. Returns the child's exit code, or 128 + the signal that killed it.
pub fn run_with(opts: RunOptions, extras: RunExtras) -> Result<i32> {
    if opts.command.is_empty() {
        return Err(UsageError("vram run needs a command after `--`".into()).into());
    }
    // Refuse up front, not after a long run, what cannot be written.
    for path in [&opts.out, &opts.timeline, &opts.svg, &opts.snapshot].into_iter().flatten() {
        check_output(path, extras.force)?;
    }
    // The hook (a sitecustomize.py on PYTHONPATH) turns on torch's memory history in the child and
    // dumps the snapshot at exit and on OOM; nothing is installed anywhere else.
    let hook_dir = std::env::temp_dir().join(format!("vram-snapshot-hook-{}", std::process::id()));
    let env = match &opts.snapshot {
        Some(p) => crate::explain::snapshot_env(&hook_dir, p)?,
        None => Vec::new(),
    };
    let mut gpu = Gpu::open()?;
    let mut timeline = opts.timeline.as_deref().map(|p| timeline::Writer::create_with(p, extras.force)).transpose()?;
    let latest = start_metrics(opts.metrics.as_deref())?;
    let mut job = Job::start(&opts.command, &env)?;
    if let Some(e) = &gpu.absent {
        eprintln!("vram: {e:#}");
        eprintln!("vram: running the command anyway; the timeline records host memory only");
    }
    let metrics = latest.map(|l| (l, extras.metrics_command_label));
    let rec = sample_until_exit(&mut job, &mut gpu, &mut timeline, metrics.as_ref(), opts.interval)?;
    let (oom, leftovers) = job.finish();
    let report = Report::new(rec, &gpu, oom, leftovers);
    eprint!("{}", report.text(&opts));
    if let Some(p) = &opts.snapshot {
        let _ = std::fs::remove_dir_all(&hook_dir);
        eprint!("\n{}", crate::explain::explain_after_run(p));
    }
    write_outputs(&opts, &report, extras.force);
    Ok(child::shell_code(&report.rec.status))
}

/// Check before the command runs that `path` can be written: its directory exists and takes a
/// new file (one is created and removed), it is not a dangling symbolic link, and it does not
/// exist unless `force`.
pub fn check_output(path: &Path, force: bool) -> Result<()> {
    let usage = |m: String| -> anyhow::Error { UsageError(m).into() };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() && std::fs::metadata(path).is_err() => {
            return Err(usage(format!("{} is a symbolic link to nothing; remove it or choose another path", path.display())));
        }
        Ok(_) if !force => {
            return Err(usage(format!(
                "{} exists; vram never overwrites files unless given --force (choose another path)",
                path.display()
            )));
        }
        Ok(_) if path.is_dir() => return Err(usage(format!("{} is a directory; give a file path", path.display()))),
        Ok(_) => {
            std::fs::OpenOptions::new().append(true).open(path).map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(usage(format!("cannot check {}: {e}", path.display()))),
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(usage(format!("directory {} does not exist (for {}); create it first", dir.display(), path.display())));
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let probe = dir.join(format!(".vram-write-check-{}-{nanos}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| usage(format!("cannot write in directory {} (for {}): {e}", dir.display(), path.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// NVML if there is a driver, and the memory each GPU used before the job.
struct Gpu {
    reader: Option<nvml::Nvml>,
    absent: Option<anyhow::Error>,
    baselines: Vec<(u32, u64)>,
}

impl Gpu {
    fn open() -> Result<Gpu> {
        let (mut reader, absent) = match nvml::open() {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e)),
        };
        let baselines = match reader.as_mut() {
            Some(r) => r.read()?.iter().map(|g| (g.index, g.memory_used)).collect(),
            None => Vec::new(),
        };
        Ok(Gpu { reader, absent, baselines })
    }

    fn read(&mut self) -> Vec<GpuReading> {
        self.reader.as_mut().map(|r| r.read().unwrap_or_default()).unwrap_or_default()
    }
}

fn start_metrics(addr: Option<&str>) -> Result<Option<crate::metrics::Latest>> {
    let Some(addr) = addr else { return Ok(None) };
    let latest: crate::metrics::Latest = Arc::new(Mutex::new(String::new()));
    let bound = crate::metrics::serve(addr, latest.clone())?;
    eprintln!("vram: Prometheus metrics on http://{bound}/metrics");
    Ok(Some(latest))
}

/// The running command's process group, for the signal thread (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that came before the command's group existed (0: none); whichever of the signal
/// thread and `Job::start` swaps it out first delivers it, so it is delivered exactly once.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// After forwarding a terminating signal, how long the command gets before its group is killed.
const KILL_AFTER: Duration = Duration::from_secs(10);

/// The command, its stderr tee and the signal forwarding.
struct Job {
    child: Child,
    pgid: i32,
    tee: Pump,
    oom: Arc<Mutex<oom::Scanner>>,
    signals: signal_hook::iterator::Handle,
}

impl Job {
    fn start(command: &[String], env: &[(String, String)]) -> Result<Job> {
        // Forwarding first: a signal in the window before the command exists is held (PENDING)
        // and delivered once its group does, rather than ending vram and orphaning the command.
        let signals = forward_signals()?;
        let spawned = child::spawn_env(command, env, Stdio::inherit(), Stdio::inherit(), Stdio::piped());
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                signals.close();
                return Err(e);
            }
        };
        let pgid = child.id() as i32;
        CHILD.store(pgid, Ordering::SeqCst);
        let held = PENDING.swap(0, Ordering::SeqCst);
        if held != 0 {
            child::signal_group(pgid, held);
        }
        // Tee the child's stderr byte for byte as it comes (a `\r` progress bar shows live) and
        // watch it for an out-of-memory message.
        let oom: Arc<Mutex<oom::Scanner>> = Arc::default();
        let scan = oom.clone();
        let stderr = child.stderr.take().context("the command's stderr")?;
        let tee = child::pump(stderr, move |chunk| {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(chunk);
            let _ = err.flush();
            if let Ok(mut s) = scan.lock() {
                s.feed(chunk);
            }
        });
        Ok(Job { child, pgid, tee, oom, signals })
    }

    /// After the command exited: end its group's leftovers and take the stderr tee's verdict,
    /// never waiting on a pipe a straggler holds.
    fn finish(self) -> (Option<Oom>, Leftovers) {
        let left = child::end_group(self.pgid, child::GRACE);
        CHILD.store(0, Ordering::SeqCst);
        self.signals.close();
        self.tee.finish(Instant::now() + child::PIPE_WAIT);
        let oom = self.oom.lock().ok().and_then(|s| s.found());
        (oom, left)
    }
}

/// Forward the usual signals to the command's whole group; a second SIGINT/SIGTERM/SIGHUP/SIGQUIT,
/// or KILL_AFTER after the first, kills the group, so vram always ends.
fn forward_signals() -> Result<signal_hook::iterator::Handle> {
    let terminating = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
    let mut sig = signal_hook::iterator::Signals::new(terminating.iter().chain(&[libc::SIGUSR1, libc::SIGUSR2]))?;
    let handle = sig.handle();
    std::thread::spawn(move || {
        let mut asked = false;
        for s in sig.forever() {
            let name = child::signal_name(s).unwrap_or("a signal");
            let send = if terminating.contains(&s) && asked { libc::SIGKILL } else { s };
            // Held for the command if it is not started yet (see PENDING), else sent now.
            PENDING.store(send, Ordering::SeqCst);
            let group = CHILD.load(Ordering::SeqCst);
            if group != 0 && PENDING.swap(0, Ordering::SeqCst) != 0 {
                child::signal_group(group, send);
            }
            if !terminating.contains(&s) {
                continue;
            }
            if asked {
                eprintln!("vram: a second {name}: killing the command's process group (SIGKILL)");
                continue;
            }
            asked = true;
            eprintln!("vram: {name} passed on to the command; a second one, or {} s without an exit, kills it", KILL_AFTER.as_secs());
            std::thread::spawn(move || {
                std::thread::sleep(KILL_AFTER);
                let group = CHILD.load(Ordering::SeqCst);
                if group != 0 {
                    eprintln!("vram: the command did not end {} s after {name}: killing its process group (SIGKILL)", KILL_AFTER.as_secs());
                    child::signal_group(group, libc::SIGKILL);
                }
            });
        }
    });
    Ok(handle)
}

/// What sampling recorded.
struct Recording {
    samples: Vec<Sample>,
    first_job_memory: Vec<(u32, u64)>,
    status: ExitStatus,
    elapsed: Duration,
}

/// Sample until the command itself exits (not until its pipes close).
fn sample_until_exit(
    job: &mut Job,
    gpu: &mut Gpu,
    timeline: &mut Option<timeline::Writer>,
    metrics: Option<&(crate::metrics::Latest, bool)>,
    interval: Duration,
) -> Result<Recording> {
    let start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut first_job_memory: Vec<(u32, u64)> = Vec::new();
    loop {
        let done = job.child.try_wait()?;
        let elapsed = start.elapsed();
        let gpus = gpu.read();
        let sample = take_sample(job.pgid as u32, &gpus, elapsed);
        for g in &sample.gpus {
            if let Some(u) = g.job_used.filter(|u| *u > 0) {
                if !first_job_memory.iter().any(|f| f.0 == g.gpu) {
                    first_job_memory.push((g.gpu, u));
                }
            }
        }
        if let Some((latest, command_label)) = metrics {
            *latest.lock().unwrap_or_else(|e| e.into_inner()) = crate::metrics::render(&gpus, *command_label);
        }
        if let Some(Err(e)) = timeline.as_mut().map(|w| w.write(&sample)) {
            eprintln!("vram: cannot write the timeline any more ({e:#}); the run goes on without it");
            *timeline = None;
        }
        samples.push(sample);
        if let Some(status) = done {
            return Ok(Recording { samples, first_job_memory, status, elapsed });
        }
        std::thread::sleep(interval);
    }
}

fn take_sample(root: u32, gpus: &[GpuReading], elapsed: Duration) -> Sample {
    let members = procs::job_tree(root);
    let tree: std::collections::HashSet<u32> = members.iter().map(|p| p.pid).collect();
    Sample {
        t_ms: elapsed.as_millis() as u64,
        host_rss: members.iter().map(|p| p.rss).sum(),
        processes: tree.len() as u32,
        gpus: crate::measure::job_memory(gpus, &tree)
            .into_iter()
            .map(|(gpu, device_used, job_used)| GpuSample { gpu, device_used, job_used })
            .collect(),
    }
}

/// Everything the report says.
struct Report {
    rec: Recording,
    gpu_available: bool,
    oom: Option<Oom>,
    leftovers: Leftovers,
    peaks: Vec<GpuPeak>,
    host_peak: u64,
}

impl Report {
    fn new(rec: Recording, gpu: &Gpu, oom: Option<Oom>, leftovers: Leftovers) -> Report {
        let (peaks, host_peak) = timeline::peaks(&rec.samples, &gpu.baselines);
        Report { rec, gpu_available: gpu.reader.is_some(), oom, leftovers, peaks, host_peak }
    }

    /// The report for stderr (stdout is the child's).
    fn text(&self, opts: &RunOptions) -> String {
        let mut r = format!(
            "\nvram: `{}` exited with {} after {:.1} s\n",
            opts.command.join(" "),
            child::describe_status(&self.rec.status),
            self.rec.elapsed.as_secs_f64()
        );
        if let Some(l) = self.leftovers.describe() {
            r += &format!("vram: {l}\n");
        }
        if let Some(o) = self.oom {
            r += &format!("vram: OUT OF MEMORY — {}\n", o.describe());
        }
        if self.peaks.is_empty() {
            r += &format!(
                "vram: no GPU sampled; host memory peak of the process tree {:.1} MiB\n",
                self.host_peak as f64 / (1u64 << 20) as f64
            );
        }
        for p in &self.peaks {
            r += &self.peak_text(p, opts);
        }
        r
    }

    fn peak_text(&self, p: &GpuPeak, opts: &RunOptions) -> String {
        let mut r = format!(
            "vram: GPU {} peak {:.2} GiB at {:.1} s ({})\n",
            p.gpu,
            gib(p.peak),
            p.at_ms as f64 / 1000.0,
            if p.per_process { "the job's processes" } else { "device memory over the baseline: per-process memory was not readable" }
        );
        let Some((name, alloc, total, ctx)) = &opts.estimate else { return r };
        let context = self.rec.first_job_memory.iter().find(|f| f.0 == p.gpu).map(|f| f.1);
        r += &format!(
            "vram:   estimate for {name}: {:.2} GiB allocated, {:.2} GiB total → measured − estimate = {:+.2} GiB\n",
            gib(*alloc),
            gib(*total),
            (p.peak as f64 - *total as f64) / (1u64 << 30) as f64
        );
        if let Some(c) = context {
            r += &format!("vram:   CUDA context, measured as the job's first GPU reading: {:.2} GiB (assumed {:.2})\n", gib(c), gib(*ctx));
        }
        r += &format!(
            "vram:   the rest beyond allocated + context (allocator reserve, fragmentation, workspaces): {:.2} GiB\n",
            (p.peak as f64 - *alloc as f64 - context.unwrap_or(*ctx) as f64) / (1u64 << 30) as f64
        );
        r
    }

    fn json(&self, opts: &RunOptions) -> serde_json::Value {
        json!({
            "command": opts.command,
            "exit_code": self.rec.status.code(),
            "signal": self.rec.status.signal(),
            "seconds": self.rec.elapsed.as_secs_f64(),
            "oom": self.oom,
            "gpu_available": self.gpu_available,
            "peaks": self.peaks,
            "host_rss_peak_bytes": self.host_peak,
            "samples": self.rec.samples.len(),
            "interval_ms": opts.interval.as_millis() as u64,
            "estimate": opts.estimate.as_ref().map(|(n, a, t, _)| json!({"model": n, "peak_allocated_bytes": a, "total_bytes": t})),
            "first_job_memory_bytes": self.rec.first_job_memory,
            "leftover_processes_ended": self.leftovers.describe().is_some(),
        })
    }
}

/// Write --out and --svg. A failure here (the disk filled, the directory went away) must not
/// lose the report or replace the command's exit code: the report goes to stderr instead.
fn write_outputs(opts: &RunOptions, report: &Report, force: bool) {
    if let Some(path) = &opts.out {
        let text = serde_json::to_string_pretty(&report.json(opts)).unwrap_or_default();
        if let Err(e) = write_file(path, text.as_bytes(), force) {
            eprintln!("vram: {e:#}; the JSON report follows here instead:\n{text}");
        }
    }
    if let Some(path) = &opts.svg {
        let limit = opts.estimate.as_ref().map(|(_, _, t, _)| (*t, "estimate"));
        let svg = crate::render::svg::chart(&opts.command.join(" "), &report.rec.samples, &report.peaks, limit);
        if let Err(e) = write_file(path, svg.as_bytes(), force) {
            eprintln!("vram: {e:#}; no chart was written");
        }
    }
}

/// Write a file: a new one, or (with `force`) over an existing one.
fn write_file(path: &Path, bytes: &[u8], force: bool) -> Result<()> {
    let mut o = std::fs::OpenOptions::new();
    if force {
        o.write(true).create(true).truncate(true);
    } else {
        o.write(true).create_new(true);
    }
    let mut f = o.open(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_checked_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("r.json");
        check_output(&fresh, false).unwrap();
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "the probe file is removed");
        let e = check_output(&dir.path().join("missing/r.json"), false).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        let link = dir.path().join("dangling.json");
        std::os::unix::fs::symlink(dir.path().join("nowhere/x"), &link).unwrap();
        let e = check_output(&link, true).unwrap_err().to_string();
        assert!(e.contains("symbolic link to nothing"), "{e}");
        std::fs::write(&fresh, b"mine").unwrap();
        assert!(check_output(&fresh, false).unwrap_err().to_string().contains("--force"));
        check_output(&fresh, true).unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"mine", "the check writes nothing");
        write_file(&fresh, b"new", true).unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"new");
        assert!(write_file(&fresh, b"again", false).is_err());
    }
}
