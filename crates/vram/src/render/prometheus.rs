//! Prometheus exposition format (text 0.0.4) for GPU and per-process readings.

use std::fmt::Write;

use crate::measure::GpuReading;

/// A label value escaped as the text format requires: backslash, double quote and line feed
/// (Prometheus "Exposition formats", text format: label_value escaping).
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Names a process for a label.
pub type Namer<'a> = &'a dyn Fn(u32) -> Option<String>;

/// The readings as Prometheus metrics. Each process is labelled with its name (`process`);
/// its full command line (`command`: arguments, paths, perhaps tokens) only when `command` is given.
pub fn render(gpus: &[GpuReading], name: Namer, command: Option<Namer>) -> String {
    let mut o = String::new();
    let metric = |o: &mut String, name: &str, help: &str, kind: &str| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    metric(&mut o, "vram_gpu_memory_total_bytes", "Total GPU memory.", "gauge");
    for g in gpus {
        let _ = writeln!(
            o,
            "vram_gpu_memory_total_bytes{{gpu=\"{}\",uuid=\"{}\",name=\"{}\"}} {}",
            g.index,
            esc(&g.uuid),
            esc(&g.name),
            g.memory_total
        );
    }
    metric(&mut o, "vram_gpu_memory_used_bytes", "Used GPU memory (as nvidia-smi shows).", "gauge");
    for g in gpus {
        let _ = writeln!(o, "vram_gpu_memory_used_bytes{{gpu=\"{}\",uuid=\"{}\"}} {}", g.index, esc(&g.uuid), g.memory_used);
    }
    metric(&mut o, "vram_gpu_utilization_ratio", "GPU utilisation (0-1).", "gauge");
    for g in gpus.iter().filter(|g| g.utilization.is_some()) {
        let _ = writeln!(o, "vram_gpu_utilization_ratio{{gpu=\"{}\"}} {}", g.index, g.utilization.unwrap_or(0) as f64 / 100.0);
    }
    metric(&mut o, "vram_gpu_temperature_celsius", "GPU temperature.", "gauge");
    for g in gpus.iter().filter(|g| g.temperature.is_some()) {
        let _ = writeln!(o, "vram_gpu_temperature_celsius{{gpu=\"{}\"}} {}", g.index, g.temperature.unwrap_or(0));
    }
    metric(&mut o, "vram_gpu_power_watts", "GPU power draw.", "gauge");
    for g in gpus.iter().filter(|g| g.power_mw.is_some()) {
        let _ = writeln!(o, "vram_gpu_power_watts{{gpu=\"{}\"}} {}", g.index, g.power_mw.unwrap_or(0) as f64 / 1000.0);
    }
    metric(&mut o, "vram_process_gpu_memory_bytes", "GPU memory of a process (absent where NVML cannot read it).", "gauge");
    for g in gpus {
        for p in g.processes.iter().filter(|p| p.used.is_some()) {
            let cmd = command.map(|c| format!(",command=\"{}\"", esc(&c(p.pid).unwrap_or_default()))).unwrap_or_default();
            let _ = writeln!(
                o,
                "vram_process_gpu_memory_bytes{{gpu=\"{}\",pid=\"{}\",process=\"{}\"{cmd}}} {}",
                g.index,
                p.pid,
                esc(&name(p.pid).unwrap_or_default()),
                p.used.unwrap_or(0)
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{ProcKind, ProcReading};

    #[test]
    fn exposition_format() {
        let g = GpuReading {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-1".into(),
            memory_total: 85_520_809_984,
            memory_used: 1_000,
            utilization: Some(50),
            temperature: None,
            power_mw: Some(300_500),
            processes: vec![
                ProcReading { pid: 7, used: Some(900), kind: ProcKind::Compute },
                ProcReading { pid: 8, used: None, kind: ProcKind::Compute },
            ],
        };
        let t =
            render(std::slice::from_ref(&g), &|_| Some("python3".into()), Some(&|pid| Some(format!("python \"train{pid}.py\" \\x\ny"))));
        assert!(t.contains("vram_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-1\",name=\"NVIDIA H100 80GB HBM3\"} 85520809984\n"));
        assert!(t.contains("vram_gpu_utilization_ratio{gpu=\"0\"} 0.5\n"));
        assert!(t.contains("vram_gpu_power_watts{gpu=\"0\"} 300.5\n"));
        assert!(t.contains("process=\"python3\",command=\"python \\\"train7.py\\\" \\\\x\\ny\"} 900\n"), "{t}");
        assert!(!t.contains("pid=\"8\""), "unreadable memory is absent, not 0");
        assert!(!t.contains("vram_gpu_temperature_celsius{"));
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.rsplit(' ').next().unwrap().parse::<f64>().is_ok(), "{line}");
        }
        // By default a process is named, its command line (arguments, paths) not exported.
        let t = render(&[g], &|_| Some("python3".into()), None);
        assert!(t.contains("vram_process_gpu_memory_bytes{gpu=\"0\",pid=\"7\",process=\"python3\"} 900\n"), "{t}");
        assert!(!t.contains("command="), "{t}");
    }
}
