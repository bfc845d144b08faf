//! A job's memory over time: samples, per-GPU peaks and when they happened, and incremental
//! CSV / JSONL writers (each sample is flushed, so a crash loses nothing).

use std::io::Write;

use serde::Serialize;

/// One GPU in one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSample {
    /// NVML index.
    pub gpu: u32,
    /// Device memory used (what nvidia-smi shows), bytes.
    pub device_used: u64,
    /// Memory of the job's process tree on this GPU, bytes; `None` when NVML cannot say.
    pub job_used: Option<u64>,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Milliseconds since the job started.
    pub t_ms: u64,
    /// Resident host memory of the job's process tree, bytes.
    pub host_rss: u64,
    /// Processes in the tree.
    pub processes: u32,
    /// Per GPU.
    pub gpus: Vec<GpuSample>,
}

/// Peak of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuPeak {
    /// NVML index.
    pub gpu: u32,
    /// Highest job memory (or device memory where the job's share is unreadable), bytes.
    pub peak: u64,
    /// Whether `peak` is the job's own memory (true) or the whole device's (false).
    pub per_process: bool,
    /// When, in ms since start.
    pub at_ms: u64,
    /// Device memory used before the job started, bytes.
    pub baseline: u64,
}

/// Peaks of a timeline: per GPU, and of host RSS.
pub fn peaks(samples: &[Sample], baselines: &[(u32, u64)]) -> (Vec<GpuPeak>, u64) {
    let mut out: Vec<GpuPeak> = Vec::new();
    let mut host = 0;
    for s in samples {
        host = host.max(s.host_rss);
        for g in &s.gpus {
            let (value, per_process) = match g.job_used {
                Some(v) => (v, true),
                None => (g.device_used.saturating_sub(baselines.iter().find(|b| b.0 == g.gpu).map_or(0, |b| b.1)), false),
            };
            match out.iter_mut().find(|p| p.gpu == g.gpu) {
                Some(p) if value > p.peak => {
                    p.peak = value;
                    p.at_ms = s.t_ms;
                    p.per_process = per_process;
                }
                Some(_) => {}
                None => out.push(GpuPeak {
                    gpu: g.gpu,
                    peak: value,
                    per_process,
                    at_ms: s.t_ms,
                    baseline: baselines.iter().find(|b| b.0 == g.gpu).map_or(0, |b| b.1),
                }),
            }
        }
    }
    (out, host)
}

/// Timeline file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One row per sample and GPU.
    Csv,
    /// One JSON object per sample.
    Jsonl,
}

/// The CSV header.
pub const CSV_HEADER: &str = "t_ms,gpu,device_used_bytes,job_used_bytes,host_rss_bytes,processes";

/// A sample as timeline text (CSV rows or one JSON line), newline-terminated.
pub fn encode(s: &Sample, format: Format) -> String {
    match format {
        Format::Jsonl => format!("{}\n", serde_json::to_string(s).unwrap_or_default()),
        Format::Csv if s.gpus.is_empty() => format!("{},,,,{},{}\n", s.t_ms, s.host_rss, s.processes),
        Format::Csv => s
            .gpus
            .iter()
            .map(|g| {
                format!(
                    "{},{},{},{},{},{}\n",
                    s.t_ms,
                    g.gpu,
                    g.device_used,
                    g.job_used.map_or(String::new(), |v| v.to_string()),
                    s.host_rss,
                    s.processes
                )
            })
            .collect(),
    }
}

/// Writes samples as they come, flushing each.
pub struct Writer {
    out: std::io::BufWriter<std::fs::File>,
    format: Format,
}

impl Writer {
    /// Create the file; with `overwrite`, replacing an existing one (`--force`).
    pub fn create_with(path: &std::path::Path, overwrite: bool) -> anyhow::Result<Writer> {
        let format = if path.extension().is_some_and(|e| e == "jsonl" || e == "json") { Format::Jsonl } else { Format::Csv };
        let mut options = std::fs::OpenOptions::new();
        if overwrite {
            options.write(true).create(true).truncate(true);
        } else {
            options.write(true).create_new(true);
        }
        let file = options
            .open(path)
            .map_err(|e| anyhow::anyhow!("cannot create timeline {}: {e} (it must not exist already)", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        if format == Format::Csv {
            writeln!(out, "{CSV_HEADER}")?;
        }
        out.flush()?;
        Ok(Writer { out, format })
    }

    /// Append one sample and flush.
    pub fn write(&mut self, s: &Sample) -> anyhow::Result<()> {
        self.out.write_all(encode(s, self.format).as_bytes())?;
        self.out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: u64, used: u64, job: Option<u64>) -> Sample {
        Sample { t_ms: t, host_rss: t * 10, processes: 1, gpus: vec![GpuSample { gpu: 0, device_used: used, job_used: job }] }
    }

    #[test]
    fn peak_and_when() {
        let samples = vec![s(0, 100, Some(0)), s(50, 900, Some(700)), s(100, 800, Some(600))];
        let (p, host) = peaks(&samples, &[(0, 100)]);
        assert_eq!(p[0].peak, 700);
        assert_eq!(p[0].at_ms, 50);
        assert!(p[0].per_process);
        assert_eq!(host, 1000);
        // Without per-process readings the device delta over the baseline is used.
        let (p, _) = peaks(&[s(0, 100, None), s(50, 900, None)], &[(0, 100)]);
        assert_eq!((p[0].peak, p[0].per_process), (800, false));
    }

    #[test]
    fn encodings() {
        assert_eq!(encode(&s(50, 900, Some(700)), Format::Csv), "50,0,900,700,500,1\n");
        assert_eq!(encode(&s(50, 900, None), Format::Csv), "50,0,900,,500,1\n");
        let j: serde_json::Value = serde_json::from_str(encode(&s(5, 9, None), Format::Jsonl).trim()).unwrap();
        assert_eq!(j["gpus"][0]["job_used"], serde_json::Value::Null);
    }
}
