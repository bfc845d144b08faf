//! Pre-quantized checkpoints on the command line: `serve` and `estimate --mode infer` use the
//! checkpoint's own quantization by default; a contradicting flag is refused (serve, as vLLM
//! does) or honoured and said (estimate); training keeps its loud warning.

mod util;

mod awq_dir;
use serde_json::{json, Value};
use util::{fails, json};

fn write_config(dir: &tempfile::TempDir, cfg: &Value) -> String {
    let p = dir.path().join("config.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p.display().to_string()
}

fn deepseek_v3(quantized: bool) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/configs/deepseek-v3.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    if quantized {
        // As deepseek-ai/DeepSeek-V3's config.json ships it.
        cfg["quantization_config"] = json!({"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128]});
    }
    cfg
}

fn notes(v: &Value) -> String {
    v["notes"].to_string()
}

#[test]
fn deepseek_v3_fp8_serves_on_8_h200_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let args =
        |p: &str| vec!["serve".to_string(), "-m".into(), p.into(), "-g".into(), "h200".into(), "--tensor-parallel-size".into(), "8".into()];
    let run = |p: &str, extra: &[&str]| {
        let mut a = args(p);
        a.extend(extra.iter().map(|s| s.to_string()));
        json(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    // Before: the same model read as bf16 does not fit.
    let bf16 = run(&write_config(&dir, &deepseek_v3(false)), &[]);
    assert_eq!(bf16["gpus"][0]["fits"], false, "{bf16}");
    let p = write_config(&dir, &deepseek_v3(true));
    let v = run(&p, &[]);
    let g = &v["gpus"][0];
    assert_eq!(g["fits"], true, "{v}");
    let gb = g["weights_bytes"].as_f64().unwrap() / 1e9;
    assert!((84.0..86.5).contains(&gb), "{gb} GB per rank");
    assert!(g["notes"].to_string().contains("fp8 block-quantized [128, 128] as stored (quantization_config)"), "{g}");
    // Naming the checkpoint's own method changes nothing; another method is refused as vLLM refuses it.
    assert_eq!(run(&p, &["--quantization", "fp8"])["gpus"][0]["weights_bytes"], g["weights_bytes"]);
    let err = fails(&["serve", "-m", &p, "-g", "h200", "--tensor-parallel-size", "8", "--quantization", "awq"], 2);
    assert!(err.contains("already quantized") && err.contains("drop --quantization"), "{err}");
}

#[test]
fn estimate_infers_with_the_stored_quantization_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_config(&dir, &deepseek_v3(true));
    let v = json(&["estimate", "-m", &p, "--mode", "infer", "-s", "4096"]);
    assert_eq!(v["job"]["precision"], "fp8");
    assert!(notes(&v).contains("weights: fp8 block-quantized [128, 128] as stored (quantization_config)"), "{v}");
    let stored = v["components"].as_array().unwrap().iter().find(|c| c["name"] == "weights").unwrap()["bytes"].as_u64().unwrap();
    // An explicit --precision bf16 is honoured: dequantized at load, twice the bytes of the fp8 parts.
    let b = json(&["estimate", "-m", &p, "--mode", "infer", "-s", "4096", "--precision", "bf16"]);
    assert!(notes(&b).contains("dequantized to bf16 at load"), "{b}");
    let deq = b["components"].as_array().unwrap().iter().find(|c| c["name"] == "weights").unwrap()["bytes"].as_u64().unwrap();
    assert!(deq > stored * 19 / 10, "{deq} vs {stored}");
}

#[test]
fn training_a_quantized_checkpoint_keeps_the_loud_warning() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_config(&dir, &deepseek_v3(true));
    let v = json(&["estimate", "-m", &p, "--mode", "train", "-s", "512"]);
    assert!(v["model"]["warnings"].to_string().contains("UNQUANTIZED"), "{v}");
    assert_eq!(v["job"]["precision"], "bf16-mixed");
}

#[test]
fn an_unknown_quantization_method_is_an_error_unless_a_precision_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = json!({"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,
        "vocab_size":1000,"max_position_embeddings":512,"quantization_config":{"quant_method":"hqq","nbits":4}});
    let p = write_config(&dir, &cfg);
    let err = fails(&["estimate", "-m", &p, "--mode", "infer", "-s", "64"], 2);
    assert!(err.contains("hqq") && err.contains("--precision"), "{err}");
    json(&["estimate", "-m", &p, "--mode", "infer", "-s", "64", "--precision", "bf16"]);
    assert!(fails(&["serve", "-m", &p, "-g", "h100"], 2).contains("not modelled"));
}

#[test]
fn a_model_directory_uses_the_header_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let data = awq_dir::write(dir.path());
    let v = json(&["estimate", "-m", dir.path().to_str().unwrap(), "--mode", "infer", "-s", "64"]);
    let weights = v["components"].as_array().unwrap().iter().find(|c| c["name"] == "weights").unwrap();
    assert_eq!(weights["bytes"].as_u64().unwrap(), data, "{v}");
    assert!(weights["detail"].as_str().unwrap().contains("safetensors headers"), "{weights}");
    // The formula agrees with the headers, so no disagreement is reported.
    assert!(!notes(&v).contains("formula gives"), "{v}");
    assert_eq!(v["job"]["precision"], "int4");
}

/// An NVFP4 checkpoint (ModelOpt's export, as nvidia/*-NVFP4 ship it) serves as stored, and the
/// engine's own name for its method (`--quantization modelopt_fp4`, pasted or typed) changes
/// nothing; another method is refused.
#[test]
fn an_nvfp4_checkpoint_serves_as_stored_under_vllms_method_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/vllm/qwen3-14b.config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let bf16 = json(&["serve", "-m", &write_config(&dir, &cfg), "-g", "b200", "--max-model-len", "8192"]);
    cfg["quantization_config"] = json!({"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head"]});
    let p = write_config(&dir, &cfg);
    let plain = json(&["serve", "-m", &p, "-g", "b200", "--max-model-len", "8192"]);
    let named = json(&["serve", "-m", &p, "-g", "b200", "--max-model-len", "8192", "--quantization", "modelopt_fp4"]);
    let out = util::vram()
        .args(["serve", "-g", "b200", "--json", "--", "vllm", "serve", &p, "--max-model-len", "8192", "--quantization", "modelopt_fp4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pasted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = |v: &Value| v["gpus"][0]["weights_bytes"].as_u64().unwrap();
    assert_eq!((w(&named), w(&pasted)), (w(&plain), w(&plain)));
    // The decoder's linears drop to 4.5 bits (a byte per 16 weights of FP8 scales); the
    // embedding and the excluded head stay 16-bit: 9.8 GiB against 27.5.
    assert!(w(&plain) * 5 / 2 < w(&bf16), "{} vs {}", w(&plain), w(&bf16));
    assert!(plain["gpus"][0]["notes"].to_string().contains("NVFP4"), "{}", plain["gpus"][0]["notes"]);
    let e = fails(&["serve", "-m", &p, "-g", "b200", "--quantization", "awq"], 2);
    assert!(e.contains("already quantized"), "{e}");
}
