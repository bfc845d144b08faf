//! Measuring real jobs: GPU readings (NVML), processes (/proc), timelines, OOM detection.
//! Everything but `nvml.rs` and the `/proc` readers is pure and tested on recorded inputs.

pub mod child;
pub mod nvml;
pub mod oom;
pub mod procs;
pub mod timeline;

use serde::Serialize;

/// How a process uses a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcKind {
    /// CUDA compute context.
    Compute,
    /// Graphics context.
    Graphics,
    /// Both (NVML lists the PID twice).
    Both,
}

/// One process on one GPU, as NVML reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcReading {
    /// Host PID (NVML reports PIDs of the host namespace).
    pub pid: u32,
    /// GPU memory in bytes; `None` where NVML cannot read it (WDDM, MIG without permission) — never 0.
    pub used: Option<u64>,
    /// Compute, graphics or both.
    pub kind: ProcKind,
}

/// One GPU at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuReading {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// Total memory, bytes.
    pub memory_total: u64,
    /// Used memory, bytes (what nvidia-smi shows).
    pub memory_used: u64,
    /// GPU utilisation, percent.
    pub utilization: Option<u32>,
    /// Temperature, °C.
    pub temperature: Option<u32>,
    /// Power draw, milliwatts.
    pub power_mw: Option<u32>,
    /// Processes on it.
    pub processes: Vec<ProcReading>,
}

/// A reader of GPU state: NVML in real use. Tests use recorded readings, never a fake reader.
pub trait GpuReader {
    /// Read every GPU now.
    fn read(&mut self) -> anyhow::Result<Vec<GpuReading>>;
}

/// The job's memory on each GPU: (gpu, device used, the sum over the job's processes). The
/// job's share is `None` when any of its processes is unreadable, or none is visible (NVML's host
/// PIDs do not match /proc from inside a container).
pub fn job_memory(gpus: &[GpuReading], tree: &std::collections::HashSet<u32>) -> Vec<(u32, u64, Option<u64>)> {
    gpus.iter()
        .map(|g| {
            let mine: Vec<Option<u64>> = g.processes.iter().filter(|p| tree.contains(&p.pid)).map(|p| p.used).collect();
            let job = if mine.is_empty() || mine.iter().any(Option::is_none) { None } else { Some(mine.iter().flatten().sum()) };
            (g.index, g.memory_used, job)
        })
        .collect()
}

/// Merge NVML's compute and graphics lists: one PID can appear in both; memory counted once
/// (the larger reading), `None` only when neither list could read it.
pub fn merge_processes(compute: &[(u32, Option<u64>)], graphics: &[(u32, Option<u64>)]) -> Vec<ProcReading> {
    let mut out: Vec<ProcReading> =
        compute.iter().map(|(pid, used)| ProcReading { pid: *pid, used: *used, kind: ProcKind::Compute }).collect();
    for (pid, used) in graphics {
        match out.iter_mut().find(|p| p.pid == *pid) {
            Some(p) => {
                p.kind = ProcKind::Both;
                p.used = match (p.used, *used) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            None => out.push(ProcReading { pid: *pid, used: *used, kind: ProcKind::Graphics }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_in_both_lists_counts_once() {
        let merged = merge_processes(&[(10, Some(100)), (11, None)], &[(10, Some(40)), (12, None)]);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged[0], ProcReading { pid: 10, used: Some(100), kind: ProcKind::Both });
        assert_eq!(merged[1].used, None, "unreadable stays N/A, never 0");
        assert_eq!(merged[2].kind, ProcKind::Graphics);
    }
}
