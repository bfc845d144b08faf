//! gpt-oss through the CLI: the real gpt-oss-20b config (validation/configs/gpt-oss-20b.json)
//! estimated for transformers inference and vLLM serving with its MXFP4 experts as stored,
//! training on the eager attention transformers really runs, and a config missing its experts.

mod util;

use util::{fails, json};

/// The real config, relative to this crate.
const CFG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/configs/gpt-oss-20b.json");

/// Bytes of gpt-oss-20b's checkpoint: model.safetensors.index.json "total_size" on the Hub, and
/// the meta-device inventory with experts at 0.5 B + 1/32 B per value, the rest bf16.
const STORED: u64 = 13_761_264_768;

fn component(v: &serde_json::Value, name: &str) -> u64 {
    v["components"].as_array().unwrap().iter().find(|c| c["name"] == name).and_then(|c| c["bytes"].as_u64()).unwrap_or(0)
}

#[test]
fn inference_counts_the_mxfp4_checkpoint_as_stored() {
    let v = json(&["estimate", "-m", CFG, "--mode", "infer"]);
    assert_eq!(v["model"]["parameters"].as_u64(), Some(20_914_757_184), "{}", v["model"]);
    assert_eq!(component(&v, "weights") + component(&v, "quantization scales"), STORED);
    assert_eq!(v["attention_kernel"], "eager");
    let notes = v["notes"].to_string();
    assert!(notes.contains("_supports_sdpa = False") && notes.contains("dequantizes them to bf16"), "{notes}");
    // Dequantized on request: every parameter in bf16.
    let bf16 = json(&["estimate", "-m", CFG, "--mode", "infer", "--precision", "bf16"]);
    assert_eq!(component(&bf16, "weights"), 2 * 20_914_757_184);
}

#[test]
fn vllm_serving_loads_the_stored_weights_and_windows_the_sliding_layers() {
    let v = json(&["serve", "-m", CFG, "-g", "h100"]);
    let g = &v["gpus"][0];
    assert_eq!(g["fits"], true);
    // Weights as stored plus vLLM's rotary cos/sin cache.
    assert_eq!(g["weights_bytes"].as_u64().unwrap() - g["rotary_cache_bytes"].as_u64().unwrap(), STORED);
    // 24 layers × (K + V: 8 heads × 64) × 2 B.
    assert_eq!(g["kv_bytes_per_token"].as_u64(), Some(24 * 1024 * 2));
    let groups = g["groups"].as_array().unwrap();
    let sliding = groups.iter().find(|x| x["kind"] == "sliding").expect("a sliding group");
    assert_eq!((sliding["layers"].as_u64(), sliding["window"].as_u64()), (Some(12), Some(128)));
    // Sliding layers hold window − 1 + max_num_batched_tokens (8192) tokens, in 16-token blocks
    // plus one; full layers the whole 131,072-token context (serve.rs, vLLM's hybrid allocator).
    assert_eq!(sliding["blocks_per_request"].as_u64(), Some((127u64 + 8192).div_ceil(16) + 1));
    let full = groups.iter().find(|x| x["kind"] == "full").expect("a full group");
    assert_eq!(full["blocks_per_request"].as_u64(), Some(131_072 / 16));
}

#[test]
fn training_runs_eager_attention_unless_flash_is_asked_for() {
    let v = json(&["estimate", "-m", CFG, "--seq-len", "2048", "--checkpointing", "full"]);
    assert_eq!(v["attention_kernel"], "eager");
    let f = json(&["estimate", "-m", CFG, "--seq-len", "2048", "--checkpointing", "full", "--attention", "flash"]);
    assert_eq!(f["attention_kernel"], "flash");
    assert!(f["notes"].to_string().contains("vllm-flash-attn3"));
}

#[test]
fn a_config_without_its_experts_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(CFG).unwrap()).unwrap();
    cfg.as_object_mut().unwrap().remove("num_local_experts");
    let p = dir.path().join("config.json");
    std::fs::write(&p, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let err = fails(&["estimate", "-m", p.to_str().unwrap()], 2);
    assert!(err.contains("num_local_experts"), "{err}");
}
