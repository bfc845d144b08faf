//! `vram serve` of a .gguf model with llama.cpp LoRA adapters: `--lora FILE`, typed or pasted in
//! a llama-server command (`--lora a,b`, `--lora-scaled FILE:SCALE`, the 2024 `FILE SCALE` form).

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

use gguf_writer::F16;
use util::{fails, json, vram};

/// A rank-8 f16 adapter of the test file's attn_q ([256, 256]) and attn_v ([256, 64]) in each of
/// its 4 layers, for `arch`: per layer 8 × (256 + 256) × 2 + 8 × (256 + 64) × 2 = 13,312 bytes.
fn adapter(dir: &tempfile::TempDir, name: &str, arch: &str) -> String {
    let mut w = gguf_writer::lora_header(arch, "adapter");
    for i in 0..4 {
        for (t, out) in [("attn_q", 256), ("attn_v", 64)] {
            w.tensor(&format!("blk.{i}.{t}.weight.lora_a"), &[256, 8], F16);
            w.tensor(&format!("blk.{i}.{t}.weight.lora_b"), &[8, out], F16);
        }
    }
    gguf_writer::write_padded(dir.path(), name, &w)
}

const ADAPTER_BYTES: u64 = 4 * 13_312;

fn plan(v: &serde_json::Value) -> &serde_json::Value {
    &v["plan"]
}

#[test]
fn an_adapter_sits_beside_its_layers() {
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_writer::write_tiny_llama(dir.path());
    let a = adapter(&dir, "a.gguf", "llama");
    let bare = json(&["serve", "-m", &m, "-g", "rtx-4090"]);
    let v = json(&["serve", "-m", &m, "-g", "rtx-4090", "--lora", &a]);
    let (p, b) = (plan(&v), plan(&bare));
    assert_eq!(p["gpu_lora_bytes"], ADAPTER_BYTES, "{p}");
    assert_eq!(p["host"]["lora_bytes"], 0);
    let bound = p["gpu_lora_compute_bytes"].as_u64().unwrap();
    assert!(bound > 0);
    assert_eq!(p["gpu_total_bytes"].as_u64().unwrap(), b["gpu_total_bytes"].as_u64().unwrap() + ADAPTER_BYTES + bound);
    // -ngl 2: layers 0–2 in RAM (the output counts as a layer), their pairs with them.
    let v = json(&["serve", "-m", &m, "-g", "rtx-4090", "--lora", &a, "-ngl", "2"]);
    assert_eq!(plan(&v)["gpu_lora_bytes"], 13_312);
    assert_eq!(plan(&v)["host"]["lora_bytes"], 3 * 13_312);
    let out = vram().args(["serve", "-m", &m, "-g", "rtx-4090", "--lora", &a]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("LoRA adapters (--lora") && text.contains("8 adapted matrices, rank 8"), "{text}");
    assert!(text.contains("is a bound"), "{text}");
    assert!(text.contains("does not count the --lora adapters"), "llama.cpp's --fit runs before they load: {text}");
    // Over two GPUs each device holds its layers' pairs.
    let v = json(&["serve", "-m", &m, "-g", "rtx-4090", "--gpus", "2", "--lora", &a]);
    let per: Vec<u64> = v["split"]["plan"]["devices"].as_array().unwrap().iter().map(|d| d["lora_bytes"].as_u64().unwrap()).collect();
    assert_eq!(per, [3 * 13_312, 13_312]);
}

#[test]
fn pasted_lora_flags_are_read_in_llama_cpps_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_writer::write_tiny_llama(dir.path());
    let (a, b, c) = (adapter(&dir, "a.gguf", "llama"), adapter(&dir, "b.gguf", "llama"), adapter(&dir, "c.gguf", "llama"));
    let pasted = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["serve", "-g", "rtx-4090", "--json", "--", "llama-server", "-m", &m];
        args.extend(extra);
        let out = vram().args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let ab = format!("{a},{b}");
    let c_half = format!("{c}:0.5");
    let v = pasted(&["--lora", &ab, "--lora-scaled", &c_half, "--lora-init-without-apply"]);
    assert_eq!(plan(&v)["gpu_lora_bytes"], 3 * ADAPTER_BYTES);
    // The 2024 form: FILE SCALE as two arguments.
    let v = pasted(&["--lora-scaled", &a, "0.5"]);
    assert_eq!(plan(&v)["gpu_lora_bytes"], ADAPTER_BYTES);
    let e = fails(&["serve", "-g", "rtx-4090", "--", "llama-server", "-m", &m, "--lora-scaled", &a], 2);
    assert!(e.contains("FNAME:SCALE"), "{e}");
}

#[test]
fn adapters_llama_cpp_would_not_load_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_writer::write_tiny_llama(dir.path());
    let q = adapter(&dir, "q.gguf", "qwen2");
    let e = fails(&["serve", "-m", &m, "-g", "rtx-4090", "--lora", &q], 2);
    assert!(e.contains("--lora") && e.contains("mismatch"), "{e}");
    let e = fails(&["serve", "-m", &m, "-g", "rtx-4090", "--lora", "/nonexistent/a.gguf"], 2);
    assert!(e.contains("/nonexistent/a.gguf"), "{e}");
    // The model itself is not an adapter.
    let e = fails(&["serve", "-m", &m, "-g", "rtx-4090", "--lora", &m], 2);
    assert!(e.contains("not a LoRA adapter"), "{e}");
    // A vLLM model: --lora is llama.cpp's (vLLM takes --enable-lora).
    let e = fails(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--lora", &m], 2);
    assert!(e.contains("--lora"), "{e}");
    let a = adapter(&dir, "a.gguf", "llama");
    let e = fails(&["serve", "-m", &m, "-g", "rtx-4090", "--gpus", "2", "-sm", "row", "--lora", &a], 2);
    assert!(e.contains("-sm layer"), "{e}");
}

/// `--log` with ngxson/llama.cpp#9's lines: the LoRA buffers compared per device (the 2024
/// build's `-ngl 30` is today's `-ngl 31` with the output kept in RAM; see
/// validation/logs/llama.cpp/SOURCES.md).
#[test]
fn the_logged_lora_buffers_are_compared_per_device() {
    let dir = tempfile::tempdir().unwrap();
    let m = gguf_writer::write_padded(dir.path(), "llama3-8b-f16.gguf", &gguf_writer::llama3_8b_f16());
    let a = gguf_writer::write_padded(dir.path(), "ggml-lora-f16.gguf", &gguf_writer::llama3_8b_lora_r32());
    let log = format!("{}/../../validation/logs/llama.cpp/ngxson-llama.cpp-9-llama3-8b-lora-2gpu.log", env!("CARGO_MANIFEST_DIR"));
    let args =
        ["serve", "-m", &m, "-g", "rtx-4090", "-ngl", "31", "-ot", "^output\\.weight$=CPU", "-ts", "22,9", "--lora", &a, "--log", &log];
    let out = vram().args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let lora_lines: Vec<&str> = text.lines().filter(|l| l.contains("LoRA") && l.contains("110.00")).collect();
    assert!(!lora_lines.is_empty(), "{text}");
    assert!(text.lines().any(|l| l.contains("CUDA1") && l.contains("LoRA") && l.matches("40.00").count() == 2), "{text}");
}
