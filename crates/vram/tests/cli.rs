//! Integration tests: the real `vram` binary, its output and its errors.

mod util;

use util::{fails, json, vram};

#[test]
fn estimate_json_schema() {
    let v = json(&[
        "estimate",
        "--model",
        "qwen2.5-1.5b",
        "--seq-len",
        "4096",
        "--batch-size",
        "2",
        "--precision",
        "fp16-mixed",
        "--gpu",
        "h20",
    ]);
    assert_eq!(v["model"]["parameters"], 1_543_714_304u64);
    let comps = v["components"].as_array().unwrap();
    assert!(comps
        .iter()
        .all(|c| c["name"].is_string() && c["bytes"].is_u64() && c["kind"].is_string()));
    let sum: u64 = comps.iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(
        sum,
        v["total_bytes"].as_u64().unwrap(),
        "components sum to the total"
    );
    let allocated: u64 = comps
        .iter()
        .filter(|c| c["kind"] == "allocated")
        .map(|c| c["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(allocated, v["peak_allocated_bytes"].as_u64().unwrap());
    assert!(v["peak_phase"].is_string());
    assert!(v["gpu"]["utilization"].as_f64().unwrap() > 0.0);
    assert_eq!(v["gpu"]["name"], "h20");
}
