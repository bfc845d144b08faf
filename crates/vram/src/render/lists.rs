//! `vram models` and `vram gpus`: the catalogues, as text or JSON.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::gpu::{Gpu, MemorySource};
use vram_core::units::{gb, gib};

use super::common::{gpu_json, thousands};

/// One row of `vram models`.
pub struct PresetRow {
    /// Preset name.
    pub name: &'static str,
    /// The config's `model_type`.
    pub model_type: String,
    /// The Hugging Face repository it came from.
    pub hf_id: &'static str,
    /// Parameters.
    pub parameters: u64,
}

/// `vram models`.
pub fn models_text(rows: &[PresetRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<16} {:<12} {:>18}  Hugging Face config", "preset", "model_type", "parameters");
    for r in rows {
        let _ = writeln!(out, "{:<16} {:<12} {:>18}  {}", r.name, r.model_type, thousands(r.parameters), r.hf_id);
    }
    out
}

/// `vram models --json`.
pub fn models_json(rows: &[PresetRow]) -> Value {
    Value::Array(
        rows.iter().map(|r| json!({"name": r.name, "model_type": r.model_type, "hf_id": r.hf_id, "parameters": r.parameters})).collect(),
    )
}

/// `vram gpus`.
pub fn gpus_text(list: &[Gpu]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<11} {:>10} {:>9}  {:<17} {:>8}  name", "gpu", "GiB", "GB", "memory source", "TFLOP/s");
    for g in list {
        let src = match g.memory_source {
            MemorySource::NvidiaSmi => "nvidia-smi total",
            MemorySource::Nominal => "nominal",
            MemorySource::User => "as given",
        };
        let _ = writeln!(
            out,
            "{:<11} {:>10.2} {:>9.2}  {:<17} {:>8.0}  {}",
            g.name,
            gib(g.memory),
            gb(g.memory),
            src,
            g.tflops_16bit,
            g.display
        );
    }
    let _ = writeln!(
        out,
        "TFLOP/s: dense bf16/fp16 tensor throughput from the datasheet, no sparsity. `--gpu` also takes a size: 24GiB, 80GB."
    );
    out
}

/// `vram gpus --json`.
pub fn gpus_json(list: &[Gpu]) -> Value {
    Value::Array(list.iter().map(gpu_json).collect())
}
