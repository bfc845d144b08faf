//! Qwen2-VL / Qwen2.5-VL through the real binary: the config read (both releases), `--image-size`
//! rounded as the processor rounds it and turned into image tokens, the frozen tower, errors.

mod util;

use util::{fails, json};

fn cfg(file: &str) -> String {
    format!("{}/../../validation/configs/vlm/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// Parameters are transformers' count (validation/fixtures/vlm.jsonl); the default image
/// (448 px, 256 tokens) is stated; `--image-size 672` gives 576 tokens per image.
#[test]
fn qwen2_vl_estimate_reads_the_vision_tower() {
    let c = cfg("Qwen2-VL-2B-Instruct.json");
    let v = json(&["estimate", "-m", &c, "-b", "1", "-s", "2048"]);
    let text = v.to_string();
    assert!(text.contains("2208985600"), "{text}");
    assert!(text.contains("images assumed 448×448") && text.contains("--image-size"), "{text}");
    let big = json(&["estimate", "-m", &c, "-b", "1", "-s", "2048", "--image-size", "672", "--images-per-sample", "2"]);
    assert!(big.to_string().contains("576"), "{big}");
    // The assumption is dropped once the size is given.
    assert!(!big.to_string().contains("images assumed"), "{big}");
    // Frozen tower: no tower gradients, states or saved activations.
    let frozen = json(&["estimate", "-m", &c, "-b", "1", "-s", "2048", "--freeze-vision-tower"]);
    let peak = |v: &serde_json::Value| v["peak_allocated_bytes"].as_u64().unwrap();
    assert!(peak(&frozen) < peak(&v), "{} vs {}", peak(&frozen), peak(&v));
}

/// Qwen2.5-VL (window attention, RMSNorm, SwiGLU tower): 3,754,622,976 parameters.
#[test]
fn qwen2_5_vl_estimate_counts_exact_parameters() {
    let v = json(&["estimate", "-m", &cfg("Qwen2.5-VL-3B-Instruct.json"), "-b", "1", "-s", "2048"]);
    assert!(v.to_string().contains("3754622976"), "{v}");
}

/// Image tokens that do not fit the sequence, and a zero image size, are usage errors (exit 2).
#[test]
fn qwen2_vl_bad_image_jobs_are_refused() {
    let c = cfg("Qwen2-VL-2B-Instruct.json");
    let e = fails(&["estimate", "-m", &c, "-s", "512", "--image-size", "1008"], 2);
    assert!(e.contains("image tokens") && e.contains("512"), "{e}");
    let e = fails(&["estimate", "-m", &c, "--image-size", "0"], 2);
    assert!(e.contains("--image-size"), "{e}");
}
