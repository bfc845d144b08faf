//! `vram run -- CMD`: run a command, sample the GPU memory of its whole process tree, forward
//! signals, write the timeline as it goes, and report the peak per GPU and when it happened.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use vram_core::units::gib;

use crate::measure::oom::{self, Oom};
use crate::measure::timeline::{self, GpuSample, Sample};
use crate::measure::{nvml, procs, GpuReader, GpuReading};

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

static CHILD: AtomicI32 = AtomicI32::new(0);

/// Run it. Returns the exit code vram should exit with (the child's).
pub fn run(opts: RunOptions) -> Result<i32> {
    let (program, args) =
        opts.command.split_first().ok_or_else(|| crate::resolve::UsageError("vram run needs a command after `--`".into()))?;
    // Refuse up front, not after a long run, to overwrite anything the user has.
    for path in [&opts.out, &opts.timeline, &opts.svg].into_iter().flatten() {
        if path.exists() {
            return Err(crate::resolve::UsageError(format!(
                "{} exists; vram never overwrites files (choose another path)",
                path.display()
            ))
            .into());
        }
    }
    let (mut reader, no_gpu) = match nvml::open() {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    let mut timeline = opts.timeline.as_deref().map(timeline::Writer::create).transpose()?;
    let baselines: Vec<(u32, u64)> = match reader.as_mut() {
        Some(r) => r.read()?.iter().map(|g| (g.index, g.memory_used)).collect(),
        None => Vec::new(),
    };
    let latest: crate::metrics::Latest = Arc::new(Mutex::new(String::new()));
    if let Some(addr) = &opts.metrics {
        let bound = crate::metrics::serve(addr, latest.clone())?;
        eprintln!("vram: Prometheus metrics on http://{bound}/metrics");
    }

    // The child gets its own process group, so a terminal Ctrl-C reaches vram only and is
    // forwarded exactly once.
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start `{program}`"))?;
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::SeqCst);
    if let Some(e) = no_gpu {
        eprintln!("vram: {e:#}");
        eprintln!("vram: running the command anyway; the timeline records host memory only");
    }
    let signals = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];
    let mut sig = signal_hook::iterator::Signals::new(signals)?;
    std::thread::spawn(move || {
        for s in sig.forever() {
            let child = CHILD.load(Ordering::SeqCst);
            if child > 0 {
                // Forward to the child's whole process group.
                unsafe { libc::kill(-child, s) };
            }
        }
    });
    // Tee the child's stderr and watch it for an out-of-memory death.
    let oom_seen: Arc<Mutex<Option<Oom>>> = Arc::new(Mutex::new(None));
    let stderr = child.stderr.take().expect("piped");
    let oom_w = oom_seen.clone();
    let tee = std::thread::spawn(move || {
        let mut err = std::io::stderr();
        for line in BufReader::new(stderr).split(b'\n').map_while(|l| l.ok()) {
            let text = String::from_utf8_lossy(&line);
            if let Some(o) = oom::detect(&text) {
                oom_w.lock().expect("lock").get_or_insert(o);
            }
            let _ = err.write_all(&line);
            let _ = err.write_all(b"\n");
        }
    });

    let start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut first_job_memory: Vec<(u32, u64)> = Vec::new();
    let status = loop {
        let done = child.try_wait()?;
        let members = procs::job_tree(pid);
        let tree: std::collections::HashSet<u32> = members.iter().map(|p| p.pid).collect();
        let host_rss = members.iter().map(|p| p.rss).sum();
        let gpus: Vec<GpuReading> = match reader.as_mut() {
            Some(r) => r.read().unwrap_or_default(),
            None => Vec::new(),
        };
        let sample = Sample {
            t_ms: start.elapsed().as_millis() as u64,
            host_rss,
            processes: tree.len() as u32,
            gpus: crate::measure::job_memory(&gpus, &tree)
                .into_iter()
                .map(|(gpu, device_used, job_used)| GpuSample { gpu, device_used, job_used })
                .collect(),
        };
        for g in &sample.gpus {
            if let Some(u) = g.job_used.filter(|u| *u > 0) {
                if !first_job_memory.iter().any(|f| f.0 == g.gpu) {
                    first_job_memory.push((g.gpu, u));
                }
            }
        }
        if opts.metrics.is_some() {
            *latest.lock().expect("lock") = crate::render::prometheus::render(&gpus, &|p| procs::cmdline(p));
        }
        if let Some(w) = timeline.as_mut() {
            w.write(&sample)?;
        }
        samples.push(sample);
        if let Some(s) = done {
            break s;
        }
        std::thread::sleep(opts.interval);
    };
    CHILD.store(0, Ordering::SeqCst);
    let _ = tee.join();
    let elapsed = start.elapsed();
    let oom = *oom_seen.lock().expect("lock");
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let (peaks, host_peak) = timeline::peaks(&samples, &baselines);

    // Report on stderr (stdout is the child's).
    let mut r = String::new();
    r += &format!("\nvram: `{}` exited with {} after {:.1} s\n", opts.command.join(" "), describe_status(&status), elapsed.as_secs_f64());
    if let Some(o) = oom {
        r += &format!("vram: OUT OF MEMORY — {}\n", o.describe());
    }
    if peaks.is_empty() {
        r += &format!("vram: no GPU sampled; host memory peak of the process tree {:.1} MiB\n", host_peak as f64 / (1u64 << 20) as f64);
    }
    for p in &peaks {
        r += &format!(
            "vram: GPU {} peak {:.2} GiB at {:.1} s ({})\n",
            p.gpu,
            gib(p.peak),
            p.at_ms as f64 / 1000.0,
            if p.per_process { "the job's processes" } else { "device memory over the baseline: per-process memory was not readable" }
        );
        if let Some((name, alloc, total, ctx)) = &opts.estimate {
            let context = first_job_memory.iter().find(|f| f.0 == p.gpu).map(|f| f.1);
            r += &format!(
                "vram:   estimate for {name}: {:.2} GiB allocated, {:.2} GiB total → measured − estimate = {:+.2} GiB\n",
                gib(*alloc),
                gib(*total),
                (p.peak as f64 - *total as f64) / (1u64 << 30) as f64
            );
            if let Some(c) = context {
                r += &format!(
                    "vram:   CUDA context, measured as the job's first GPU reading: {:.2} GiB (assumed {:.2})\n",
                    gib(c),
                    gib(*ctx)
                );
            }
            r += &format!(
                "vram:   the rest beyond allocated + context (allocator reserve, fragmentation, workspaces): {:.2} GiB\n",
                (p.peak as f64 - *alloc as f64 - context.unwrap_or(*ctx) as f64) / (1u64 << 30) as f64
            );
        }
    }
    eprint!("{r}");
    if let Some(path) = &opts.out {
        let report = json!({
            "command": opts.command,
            "exit_code": status.code(),
            "signal": status.signal(),
            "seconds": elapsed.as_secs_f64(),
            "oom": oom,
            "gpu_available": reader.is_some(),
            "peaks": peaks,
            "host_rss_peak_bytes": host_peak,
            "samples": samples.len(),
            "interval_ms": opts.interval.as_millis() as u64,
            "estimate": opts.estimate.as_ref().map(|(n, a, t, _)| json!({"model": n, "peak_allocated_bytes": a, "total_bytes": t})),
            "first_job_memory_bytes": first_job_memory,
        });
        write_new(path, serde_json::to_string_pretty(&report)?.as_bytes())?;
    }
    if let Some(path) = &opts.svg {
        let limit = opts.estimate.as_ref().map(|(_, _, t, _)| (*t, "estimate"));
        write_new(path, crate::render::svg::chart(&opts.command.join(" "), &samples, &peaks, limit).as_bytes())?;
    }
    Ok(code)
}

fn describe_status(s: &std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// Write a new file; never overwrite what the user has.
fn write_new(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {} (it must not exist already)", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}
