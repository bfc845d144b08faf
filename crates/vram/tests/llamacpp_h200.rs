//! `vram serve` held to llama-server on a real GPU: the 19 launches recorded on an H200 by
//! validation/llamacpp/run.sh (validation/llamacpp/h200: each start-up log at -lv 4 and
//! nvidia-smi's figure for the process). Each launch's GGUF is rebuilt here from the same
//! writer (crates/vram-core/examples/synthetic_gguf.rs: zero weights, sparse, so the 4–18 GB
//! files take no disk), and `vram serve --log` plans the launch as pasted and compares.

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "../../vram-core/tests/support/synthetic_models.rs"]
mod synthetic_models;

use std::path::{Path, PathBuf};

fn recordings() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation/llamacpp/h200")
}

struct Launch {
    name: String,
    model: String,
    args: Vec<String>,
    /// nvidia-smi's used memory of the process after a 2,004-token prompt, MiB.
    smi_after_prompt: f64,
}

fn launches() -> Vec<Launch> {
    let text = std::fs::read_to_string(recordings().join("runs.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["listening"], true, "{l}");
            Launch {
                name: v["name"].as_str().unwrap().into(),
                model: v["model"].as_str().unwrap().into(),
                args: v["args"].as_str().unwrap().split_whitespace().map(String::from).collect(),
                smi_after_prompt: v["smi_process_after_prompt_mib"].as_f64().unwrap(),
            }
        })
        .collect()
}

/// The comparison of one launch: (quantity → (estimate, log)) in MiB, and vram's GPU total.
fn compare(dir: &Path, l: &Launch) -> (std::collections::BTreeMap<String, (f64, f64)>, f64) {
    let gguf = dir.join(format!("{}.gguf", l.model));
    if !gguf.exists() {
        synthetic_models::by_name(&l.model).unwrap().write_file(&gguf).unwrap();
    }
    let log = recordings().join("logs").join(format!("{}.log", l.name));
    let mut args: Vec<String> = ["serve", "--gpu", "h200", "--json", "--log", log.to_str().unwrap(), "--", "llama-server", "-m"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(gguf.to_str().unwrap().into());
    args.extend(l.args.iter().cloned());
    let out = util::vram().args(&args).output().unwrap();
    assert!(out.status.success(), "{}: {}", l.name, String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["comparison"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["quantity"].as_str()?.to_string(), (r["estimate"].as_f64()?, r["log"].as_f64()?))))
        .collect();
    let plan = &v["estimate"]["plan"];
    let total = plan["gpu_total_bytes"].as_f64().unwrap_or_else(|| panic!("{}: {plan}", l.name)) / (1u64 << 20) as f64;
    (rows, total)
}

/// Weights and KV cache per GPU equal the log's buffers in every launch (dense, routed experts
/// in VRAM or RAM by `-ot`/`--n-cpu-moe`, sliding-window layers, q8_0 KV, partial `-ngl`).
/// Compute buffers: within 10 MiB, except the dense partial offload (`-ngl 20`), whose
/// op-offload copy of a RAM layer's weights is not modelled (37 MiB low, bounded here).
#[test]
fn every_h200_launch_matches_its_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let all = launches();
    assert_eq!(all.len(), 19);
    for l in &all {
        let (rows, _) = compare(dir.path(), l);
        let get = |q: &str| *rows.get(q).unwrap_or_else(|| panic!("{}: no row {q} in {rows:?}", l.name));
        for q in ["model buffer per device", "KV buffer"] {
            let (e, g) = get(q);
            assert!((e - g).abs() <= 0.1, "{}: {q} vram {e} MiB, the log {g} MiB", l.name);
        }
        let (e, g) = get("compute buffer");
        let bound = if l.name == "llama-ngl20" { 40.0 } else { 10.0 };
        assert!((e - g).abs() <= bound, "{}: compute buffer vram {e} MiB, the log {g} MiB", l.name);
        let (e, g) = get("model buffer in RAM");
        assert!((e - g).abs() <= 0.1, "{}: model buffer in RAM vram {e} MiB, the log {g} MiB", l.name);
    }
}

/// vram's GPU total (buffers and the measured CUDA context, cuBLAS and pool) against what
/// nvidia-smi gave the process after a 2,004-token prompt: within 2% in every launch. The
/// overhead constants (gguf::LLAMA_CUDA_OVERHEAD, _MOE) were read off these same runs, so this
/// holds the buffers and the constants together, not an accuracy on unseen launches.
#[test]
fn every_h200_launch_matches_nvidia_smi() {
    let dir = tempfile::tempdir().unwrap();
    for l in launches() {
        let (_, total) = compare(dir.path(), &l);
        let err = (total - l.smi_after_prompt) / l.smi_after_prompt;
        assert!(err.abs() <= 0.02, "{}: vram {total:.0} MiB, nvidia-smi {:.0} MiB ({:+.1}%)", l.name, l.smi_after_prompt, err * 100.0);
    }
}

/// A log whose compute buffer exceeds vram's by about a whole ubatch of logits (what llama.cpp
/// builds before llama-server's one-row-per-slot `n_outputs_max` reserved) gets that reason; the
/// H200's own log does not.
#[test]
fn an_older_builds_logits_reserve_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("llama-3.1-8b.gguf");
    synthetic_models::by_name("llama-3.1-8b").unwrap().write_file(&gguf).unwrap();
    let reasons = |log: &Path| {
        let out = util::vram()
            .args(["serve", "--gpu", "h200", "--json", "--log", log.to_str().unwrap(), "--", "llama-server", "-m", gguf.to_str().unwrap()])
            .args(["-ngl", "99", "-c", "8192"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["comparison"]["reasons"].to_string()
    };
    // 116.01 MiB measured + 508 of 512 rows × 128,256 × 4 bytes = 364.51 MiB.
    let older = dir.path().join("older.log");
    std::fs::write(&older, "llama_context:      CUDA0 compute buffer size =   364.51 MiB\n").unwrap();
    assert!(reasons(&older).contains("older llama.cpp builds"), "{}", reasons(&older));
    assert!(!reasons(&recordings().join("logs/llama-c8k.log")).contains("older llama.cpp builds"));
}
