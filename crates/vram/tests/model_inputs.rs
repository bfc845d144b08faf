//! What the CLI does with model inputs it cannot take at face value: unknown architectures,
//! files that are not a config.json, non-regular files, pre-quantized checkpoints, contexts past
//! the trained length. Each case used to give a number with exit 0 (or hang).

mod util;

use util::{fails, json, vram};

/// gpt-oss-20b's config.json (MXFP4 experts), abridged, under a model_type vram does not know
/// (gpt_oss itself is read natively: tests/gpt_oss.rs).
const GPT_OSS: &str = r#"{"model_type":"gpt_oss_unknown","architectures":["GptOssForCausalLM"],"hidden_size":2880,
"num_hidden_layers":24,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"intermediate_size":2880,
"vocab_size":201088,"num_local_experts":32,"num_experts_per_tok":4,"max_position_embeddings":131072,
"quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.embed_tokens","lm_head"]}}"#;

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p.display().to_string()
}

#[test]
fn unknown_architecture_is_an_error_unless_approximation_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(&dir, "config.json", GPT_OSS.as_bytes());
    let err = fails(&["estimate", "-m", &cfg], 2);
    assert!(err.contains("gpt_oss") && err.contains("--approximate-architecture"), "{err}");
    // Opted in: a number, marked as a guess in text and JSON.
    let out = vram().args(["estimate", "-m", &cfg, "--approximate-architecture"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("APPROXIMATE: "), "{text}");
    let v = json(&["estimate", "-m", &cfg, "--approximate-architecture"]);
    assert!(v["model"]["approximation"].is_string(), "{v}");
    assert_eq!(v["model"]["quantization"]["method"], "mxfp4", "{v}");
}

#[test]
fn serve_refuses_unknown_architectures_too() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(&dir, "config.json", GPT_OSS.as_bytes());
    let err = fails(&["serve", "-m", &cfg, "-g", "h100"], 2);
    assert!(err.contains("--approximate-architecture"), "{err}");
}

#[test]
fn a_gguf_or_weights_file_given_as_config_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let g = write(&dir, "model.bin", b"GGUF\x03\x00\x00\x00rest of a header");
    let err = fails(&["estimate", "-m", &g], 2);
    assert!(err.contains("GGUF") && err.contains("vram serve"), "{err}");
    // A large safetensors file is named as weights, not refused for its size.
    let mut st = 16u64.to_le_bytes().to_vec();
    st.extend_from_slice(br#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
    st.resize(20 << 20, 0);
    let s = write(&dir, "model.safetensors", &st);
    let err = fails(&["fit", "-m", &s, "-g", "h100"], 2);
    assert!(err.contains("safetensors") && err.contains("model directory"), "{err}");
    let t = write(&dir, "notes.txt", b"hello: world\n");
    let err = fails(&["estimate", "-m", &t], 2);
    assert!(!err.contains("panicked"), "{err}");
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.json");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = vram().args(["estimate", "-m", &fifo.display().to_string()]).timeout(std::time::Duration::from_secs(20)).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
    // A FIFO shard beside a good config.json: the directory load must not hang either.
    let model = tempfile::tempdir().unwrap();
    std::fs::copy(env!("CARGO_MANIFEST_DIR").to_string() + "/../../validation/configs/opt-125m.json", model.path().join("config.json"))
        .unwrap();
    let shard = std::ffi::CString::new(model.path().join("model.safetensors").display().to_string()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(shard.as_ptr(), 0o600) }, 0);
    let out =
        vram().args(["estimate", "-m", &model.path().display().to_string()]).timeout(std::time::Duration::from_secs(20)).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn pre_quantized_checkpoints_are_flagged_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = std::fs::read_to_string(env!("CARGO_MANIFEST_DIR").to_string() + "/../../validation/configs/deepseek-v3.json").unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    // The block as deepseek-ai/DeepSeek-V3's config.json ships it (the fixture keeps dimensions only).
    cfg["quantization_config"] =
        serde_json::json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]});
    let p = write(&dir, "config.json", cfg.to_string().as_bytes());
    let out = vram().args(["estimate", "-m", &p, "--mode", "infer", "-s", "4096"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("UNQUANTIZED"), "{text}");
}

#[test]
fn a_context_past_the_trained_length_is_warned() {
    let v = json(&["estimate", "-m", "qwen2.5-0.5b", "-s", "1000000"]);
    let w = v["model"]["warnings"].to_string();
    assert!(w.contains("max_position_embeddings") || w.contains("trained"), "{w}");
    let v = json(&["estimate", "-m", "qwen2.5-0.5b", "-s", "2048"]);
    assert_eq!(v["model"]["warnings"].as_array().map(|a| a.len()), Some(0), "{v}");
}
