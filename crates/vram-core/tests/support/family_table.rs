//! The README table of a model family's accuracy: per model, points, median and worst |error|
//! of peak allocated, then the held-out and development totals.
#![allow(dead_code)]

use std::collections::BTreeMap;

#[path = "gpu_points.rs"]
pub mod gpu_points;

/// (median, worst) of |errors|.
pub fn stats(v: &[f64]) -> (f64, f64) {
    let mut a: Vec<f64> = v.iter().map(|x| x.abs()).collect();
    a.sort_by(|x, y| x.partial_cmp(y).unwrap());
    (a[(a.len() - 1) / 2], a[a.len() - 1])
}

/// `rows`: (model, held out, signed relative error).
pub fn table(rows: &[(String, bool, f64)]) -> String {
    let mut by: BTreeMap<(bool, &str), Vec<f64>> = BTreeMap::new();
    for (m, held, e) in rows {
        by.entry((!*held, m.as_str())).or_default().push(*e);
    }
    let mut out = String::from("| model | set | points | median \\|error\\| | worst |\n|---|---|---|---|---|\n");
    for ((dev, m), v) in &by {
        let (med, worst) = stats(v);
        let set = if *dev { "development" } else { "held-out" };
        out.push_str(&format!("| {m} | {set} | {} | {:.1}% | {:.1}% |\n", v.len(), med * 100.0, worst * 100.0));
    }
    for (label, held) in [("**all held-out**", true), ("**all development**", false)] {
        let v: Vec<f64> = rows.iter().filter(|r| r.1 == held).map(|r| r.2).collect();
        if !v.is_empty() {
            let (med, worst) = stats(&v);
            out.push_str(&format!("| {label} | | {} | {:.1}% | {:.1}% |\n", v.len(), med * 100.0, worst * 100.0));
        }
    }
    out
}

/// Print and hold each set (development, held-out) of `rows` to issue 15's bound: median
/// |error| ≤ 3%, worst ≤ 15%; both sets must have points.
pub fn check(rows: &[(String, bool, f64)]) {
    for (label, held) in [("development", false), ("held-out", true)] {
        let v: Vec<f64> = rows.iter().filter(|r| r.1 == held).map(|r| r.2).collect();
        assert!(!v.is_empty(), "no {label} points");
        let (median, worst) = stats(&v);
        println!("{label}: {} points, median |error| {:.2}%, worst {:.2}%", v.len(), median * 100.0, worst * 100.0);
        assert!(median <= 0.03 && worst <= 0.15, "{label}: median {median:.4}, worst {worst:.4}");
    }
}

/// The job a fixture point ran (mode, precision, checkpointing, the attention implementation it
/// names — sdpa when it names none —, a padded batch when it says so) at `batch` × `seq`, and the signed relative error of vram's
/// peak allocated against its measured one.
/// `module`: the oracle that wrote the point (validation/<module>.py), whose H100 recording of the
/// same job, if any, the estimate is held to as well (support/gpu_points.rs).
pub fn error_of(module: &str, model: &vram_core::Model, r: &serde_json::Value, batch: u64, seq: u64) -> f64 {
    use vram_core::{AttentionImpl, Checkpointing, Job, Precision};
    let base = if r["mode"] == "train" { Job::train(batch, seq) } else { Job::infer(batch, seq) };
    let job = Job {
        precision: Precision::parse(r["precision"].as_str().unwrap()).unwrap(),
        checkpointing: if r["checkpointing"] == true { Checkpointing::Full } else { Checkpointing::None },
        attention: match r["attention"].as_str() {
            Some("eager") => AttentionImpl::Eager,
            Some("flash_attention_2") => AttentionImpl::Flash,
            _ => AttentionImpl::Sdpa,
        },
        padded: r["padded"] == true,
        ..base
    };
    let est = vram_core::estimate(model, &job).unwrap().peak_allocated;
    gpu_points::hold(module, r, est);
    let measured = r["peak_allocated"].as_u64().unwrap() as f64;
    (est as f64 - measured) / measured
}

/// A LoRA fixture point (validation/*_lora.py, bf16 base under bf16 autocast, sdpa): checks the
/// trainable parameter count against peft's (adapters plus modules_to_save copies) and returns
/// the signed relative error of vram's peak allocated.
pub fn lora_error(module: &str, model: &vram_core::Model, lora: vram_core::peft::Lora, r: &serde_json::Value, batch: u64, seq: u64) -> f64 {
    lora_error_on(module, model, lora, None, r, batch, seq)
}

/// As `lora_error`, on a given base (a bitsandbytes one for QLoRA).
pub fn lora_error_on(
    module: &str,
    model: &vram_core::Model,
    lora: vram_core::peft::Lora,
    base: Option<vram_core::peft::BaseWeights>,
    r: &serde_json::Value,
    batch: u64,
    seq: u64,
) -> f64 {
    use vram_core::{Checkpointing, Job};
    let resolved = vram_core::peft::resolve(model, &lora).unwrap();
    assert_eq!(resolved.adapter_parameters + resolved.saved_module_parameters, r["trainable_parameters"].as_u64().unwrap(), "{r}");
    let job = Job {
        checkpointing: if r["checkpointing"] == true { Checkpointing::Full } else { Checkpointing::None },
        lora: Some(lora),
        base,
        ..Job::train(batch, seq)
    };
    let est = vram_core::estimate(model, &job).unwrap().peak_allocated;
    gpu_points::hold(module, r, est);
    let measured = r["peak_allocated"].as_u64().unwrap() as f64;
    (est as f64 - measured) / measured
}
