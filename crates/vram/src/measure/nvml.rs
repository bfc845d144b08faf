//! NVML through nvml-wrapper. The library is loaded at run time (`libnvidia-ml.so.1`), so vram
//! builds and runs on machines without a GPU; there every GPU command says so and exits 2.

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use super::{merge_processes, GpuReader, GpuReading};
use crate::resolve::UsageError;

/// An open NVML session.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
}

/// Open NVML, or explain why there is no GPU to read.
pub fn open() -> anyhow::Result<Nvml> {
    match nvml_wrapper::Nvml::init() {
        Ok(nvml) => Ok(Nvml { nvml }),
        Err(NvmlError::LibloadingError(e)) => Err(UsageError(format!(
            "no NVIDIA driver found: libnvidia-ml.so could not be loaded ({e}); GPU measurement needs an NVIDIA GPU and its driver (nvidia-smi must work)"
        ))
        .into()),
        Err(NvmlError::DriverNotLoaded) => Err(UsageError("no NVIDIA driver found: the NVIDIA kernel driver is not loaded (nvidia-smi must work)".into()).into()),
        Err(e) => Err(UsageError(format!("NVML failed to start: {e}")).into()),
    }
}

fn used(p: &ProcessInfo) -> (u32, Option<u64>) {
    // NVML_VALUE_NOT_AVAILABLE (WDDM, MIG without permission) is N/A, never 0.
    (
        p.pid,
        match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        },
    )
}

impl GpuReader for Nvml {
    fn read(&mut self) -> anyhow::Result<Vec<GpuReading>> {
        let n = self.nvml.device_count()?;
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            let d = self.nvml.device_by_index(i)?;
            let mem = d.memory_info()?;
            // Process-info struct versions differ across drivers: v3 first, then v2.
            let compute = d.running_compute_processes().or_else(|_| d.running_compute_processes_v2()).unwrap_or_default();
            let graphics = d.running_graphics_processes().or_else(|_| d.running_graphics_processes_v2()).unwrap_or_default();
            let c: Vec<(u32, Option<u64>)> = compute.iter().map(used).collect();
            let g: Vec<(u32, Option<u64>)> = graphics.iter().map(used).collect();
            out.push(GpuReading {
                index: i,
                name: d.name().unwrap_or_default(),
                uuid: d.uuid().unwrap_or_default(),
                memory_total: mem.total,
                memory_used: mem.used,
                utilization: d.utilization_rates().ok().map(|u| u.gpu),
                temperature: d.temperature(TemperatureSensor::Gpu).ok(),
                power_mw: d.power_usage().ok(),
                processes: merge_processes(&c, &g),
            });
        }
        Ok(out)
    }
}
