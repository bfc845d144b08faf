//! `vram estimate --measurement FILE`: a `vram.measure` measurement with the device-level terms.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::gpu::Gpu;
use vram_core::measurement::Measurement;
use vram_core::units::gib;
use vram_core::{Component, Kind};

use super::common::{component_table, gpu_json, thousands};

/// What is shown: the measurement, its components with the device terms, the GPU.
pub struct MeasuredReport<'a> {
    /// Where it was read from.
    pub file: &'a str,
    /// The measurement.
    pub m: &'a Measurement,
    /// Measured categories, then the device-level terms.
    pub components: &'a [Component],
    /// Sum of the components.
    pub total: u64,
    /// The GPU to compare with.
    pub gpu: Option<&'a Gpu>,
}

/// As a table.
pub fn text(r: &MeasuredReport) -> String {
    let mut out = String::new();
    let m = r.m;
    let _ = writeln!(
        out,
        "{} — {} parameters ({} trainable), measured by {}",
        r.file,
        thousands(m.parameters),
        thousands(m.trainable_parameters),
        m.method
    );
    let _ = writeln!(out, "peak at: {} (the measurement's phase)", m.peak_phase);
    let _ = writeln!(out);
    let labels = ("peak allocated (measured)", "total (what nvidia-smi would show)");
    component_table(&mut out, r.components, labels, m.peak_bytes, r.total, r.gpu);
    let _ = writeln!(out);
    let phases: Vec<String> = m.phase_peaks.iter().map(|(p, b)| format!("{p} {:.2}", gib(*b))).collect();
    if !phases.is_empty() {
        let _ = writeln!(out, "allocated by phase (GiB): {}", phases.join(" · "));
    }
    for c in r.components.iter().filter(|c| c.kind == Kind::Overhead) {
        let _ = writeln!(out, "{}: {}", c.name, c.detail);
    }
    for n in &m.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// As JSON, in the shape of `vram estimate --json` where the two share fields.
pub fn json(r: &MeasuredReport) -> Value {
    let m = r.m;
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "measurement": {
            "file": r.file,
            "method": m.method,
            "parameters": m.parameters,
            "trainable_parameters": m.trainable_parameters,
            "peak_phase": m.peak_phase,
            "phase_peaks": m.phase_peaks.iter().map(|(p, b)| json!({"phase": p, "allocated_bytes": b})).collect::<Vec<_>>(),
            "notes": m.notes,
        },
        "peak_allocated_bytes": m.peak_bytes,
        "total_bytes": r.total,
        "components": r.components.iter().map(|c| json!({"name": c.name, "bytes": c.bytes, "kind": c.kind, "detail": c.detail})).collect::<Vec<_>>(),
        "gpu": r.gpu.map(|g| {
            let mut v = gpu_json(g);
            v["utilization"] = json!(r.total as f64 / g.memory as f64);
            v["fits"] = json!(r.total <= g.memory);
            v
        }),
    })
}
