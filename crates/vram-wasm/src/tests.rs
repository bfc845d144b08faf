//! Request handling, natively: every answer equals the core's, every bad input is a message.

use serde_json::{json, Value};
use vram_core::{estimate, fit, presets, Job, Precision};

use super::*;

fn call(req: Value) -> Value {
    handle(&req.to_string())
}

fn error(req: Value) -> String {
    let v = call(req.clone());
    match v.get("error").and_then(Value::as_str) {
        Some(e) => e.to_string(),
        None => panic!("expected an error for {req}, got {v}"),
    }
}

fn qwen_job() -> Job {
    Job { precision: Precision::Fp16Mixed, ..Job::train(3, 4096) }
}

#[test]
fn estimate_is_the_cores() {
    let v =
        call(json!({"op": "estimate", "model": "qwen2.5-1.5b", "gpu": "h20", "seq_len": 4096, "batch_size": 3, "precision": "fp16-mixed"}));
    let e = estimate(&presets::load("qwen2.5-1.5b").unwrap(), &qwen_job()).unwrap();
    assert_eq!(v["total_bytes"], json!(e.total), "{v}");
    assert_eq!(v["peak_allocated_bytes"], json!(e.peak_allocated));
    assert_eq!(v["components"].as_array().unwrap().len(), e.components.len());
    let sum: u64 = v["components"].as_array().unwrap().iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, e.total, "components sum to the total");
    assert_eq!(v["gpu"]["name"], "h20");
    assert_eq!(v["model"]["parameters"], json!(1_543_714_304u64));
    assert_eq!(v["job"]["precision"], "fp16-mixed");
    assert!(v["gpu"]["verdict_text"].is_string());
}

#[test]
fn url_strings_read_as_numbers_and_empty_means_default() {
    let as_numbers = call(json!({"op": "estimate", "model": "qwen2.5-1.5b", "seq_len": 4096, "batch_size": 3, "precision": "fp16-mixed"}));
    let as_text = call(
        json!({"op": "estimate", "model": "qwen2.5-1.5b", "seq_len": "4096", "batch_size": "3", "precision": "fp16-mixed", "optimizer": ""}),
    );
    assert_eq!(as_numbers, as_text);
    let defaults = call(json!({"op": "estimate", "model": "qwen2.5-1.5b"}));
    let e = estimate(&presets::load("qwen2.5-1.5b").unwrap(), &Job::train(1, 2048)).unwrap();
    assert_eq!(defaults["total_bytes"], json!(e.total));
}

#[test]
fn config_text_is_the_same_model_as_its_preset() {
    let text = presets::find("qwen2.5-1.5b").unwrap().config;
    let from_text = call(
        json!({"op": "estimate", "config": text, "config_name": "config.json", "seq_len": 4096, "batch_size": 3, "precision": "fp16-mixed"}),
    );
    let from_preset = call(json!({"op": "estimate", "model": "qwen2.5-1.5b", "seq_len": 4096, "batch_size": 3, "precision": "fp16-mixed"}));
    assert_eq!(from_text["total_bytes"], from_preset["total_bytes"]);
    assert_eq!(from_text["model"]["name"], "config.json");
}

#[test]
fn fit_is_the_cores() {
    let v = call(
        json!({"op": "fit", "model": "qwen2.5-1.5b", "gpu": "h20", "seq_len": 4096, "precision": "fp16-mixed", "target_utilization": 0.9}),
    );
    let g = vram_core::gpu::lookup("h20").unwrap();
    let f = fit::fit(&presets::load("qwen2.5-1.5b").unwrap(), &qwen_job().with_batch(1), g.memory, 0.9, None).unwrap();
    assert_eq!(v["max_batch_size"], json!(f.max_batch), "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), f.rows.len());
    assert_eq!(v["budget_bytes"], json!(f.budget));
    assert!(v["estimate"]["total_bytes"].as_u64().unwrap() <= f.budget);
    assert!(v["alternatives"].is_array());
    assert_eq!(v["throughput"].as_array().unwrap().len(), f.rows.len());
}

#[test]
fn lora_fields_reach_the_job() {
    let v = call(
        json!({"op": "estimate", "model": "llama-3.1-8b", "peft": "lora", "lora_r": "16", "lora_target_modules": "all-linear", "load_in_4bit": "true", "gpu": "rtx-4090"}),
    );
    assert_eq!(v["job"]["lora"]["r"], 16, "{v}");
    assert_eq!(v["job"]["lora"]["targets"], "all_linear");
    assert_eq!(v["job"]["base"]["kind"], "bnb4");
    let full = call(json!({"op": "estimate", "model": "llama-3.1-8b"}));
    assert!(v["total_bytes"].as_u64() < full["total_bytes"].as_u64());
}

#[test]
fn serve_reports_the_kv_pool() {
    let v = call(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "8192"}));
    assert_eq!(v["engine"], "vllm", "{v}");
    let g = &v["gpus"][0];
    assert_eq!(g["max_model_len"], 8192);
    assert!(g["kv_cache_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        call(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "auto"}))["config"]["max_model_len_auto"],
        true
    );
    // Chunked prefill off, a performance mode and the graph settings reach the core, as the CLI's
    // flags do.
    let off =
        call(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "32768", "enable_chunked_prefill": false}));
    assert_eq!(off["gpus"][0]["max_num_batched_tokens"], 32768, "{off}");
    let thr =
        call(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "8192", "performance_mode": "throughput"}));
    assert_eq!(thr["gpus"][0]["max_num_seqs"], 2048, "{thr}");
    let pw = call(
        json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "8192", "cudagraph_mode": "PIECEWISE", "max_cudagraph_capture_size": "64"}),
    );
    assert_eq!(
        (pw["gpus"][0]["cuda_graphs"]["piecewise"].as_u64(), pw["gpus"][0]["cuda_graphs"]["full"].as_u64()),
        (Some(11), Some(0)),
        "{pw}"
    );
    assert!(error(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "cudagraph_mode": "half"})).contains("FULL_DECODE_ONLY"));
    // Speculative decoding: an object or its text; a drafter from a preset or its config.json text.
    let ngram = call(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "8192",
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}));
    assert!(ngram["gpus"][0]["notes"].to_string().contains("method ngram"), "{ngram}");
    let draft = call(json!({"op": "serve", "model": "llama-3.1-70b", "gpu": "h100", "tensor_parallel_size": "4", "max_model_len": "8192",
        "speculative_config": r#"{"model": "llama-3.2-1b", "num_speculative_tokens": 5}"#}));
    assert!(draft["gpus"][0]["draft_weights_bytes"].as_u64().unwrap() > 0, "{draft}");
    let head = include_str!("../../../validation/vllm/spec_heads/qwen3-32b-eagle3.config.json");
    let eagle = call(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "max_model_len": "8192",
        "speculative_config": {"method": "eagle3", "model": "org/head", "num_speculative_tokens": 3}, "draft_config": head}));
    assert!(eagle["gpus"][0]["notes"].to_string().contains("EAGLE-3 head"), "{eagle}");
    assert!(error(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100",
        "speculative_config": {"method": "eagle3", "model": "org/head", "num_speculative_tokens": 3}}))
    .contains("draft_config"));
    assert!(error(json!({"op": "serve", "model": "llama-3.1-8b", "gpu": "h100", "speculative_config": "not json"})).contains("JSON object"));
}

#[test]
fn catalogues() {
    let p = call(json!({"op": "presets"}));
    let q = p.as_array().unwrap().iter().find(|r| r["name"] == "qwen2.5-1.5b").unwrap();
    assert_eq!(q["parameters"], json!(1_543_714_304u64));
    let g = call(json!({"op": "gpus"}));
    assert!(g.as_array().unwrap().iter().any(|r| r["name"] == "h20" && r["memory_bytes"].as_u64().is_some()));
}

#[test]
fn bad_input_is_a_message() {
    assert!(handle("not json").get("error").is_some());
    assert!(error(json!([1, 2])).contains("JSON object"));
    assert!(error(json!({"model": "gpt2"})).contains("op"));
    assert!(error(json!({"op": "launch"})).contains("unknown op"));
    assert!(error(json!({"op": "estimate"})).contains("no model"));
    assert!(error(json!({"op": "estimate", "model": "llama-9"})).contains("llama"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "config": "{}"})).contains("not both"));
    assert!(error(json!({"op": "estimate", "model": "org/some-model"})).contains("config.json"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "bach_size": 2})).contains("`bach_size`"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "batch_size": "two"})).contains("whole number"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "batch_size": -1})).contains("whole number"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "batch_size": 0})).contains("batch size"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "precision": "fp7"})).contains("precision"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "gpu": "80"})).contains("ambiguous"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "gpu": "h1000"})).contains("h1000"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "mode": "infer", "optimizer": "sgd"})).contains("only for training"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "kv_dtype": "fp8"})).contains("only for inference"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "lora_r": 16})).contains("peft"));
    assert!(error(json!({"op": "estimate", "model": "gpt2", "cuda_context": "512"})).contains("ambiguous"));
    assert!(error(json!({"op": "fit", "model": "gpt2", "gpu": "h100", "batch_size": 4})).contains("chosen by fit"));
    assert!(error(json!({"op": "fit", "model": "gpt2"})).contains("gpu"));
    assert!(error(json!({"op": "fit", "model": "gpt2", "gpu": "h100", "target_utilization": 1.5})).contains("target"));
    assert!(error(json!({"op": "serve", "model": "gpt2", "gpu": "h100", "kv_cache_dtype": "int3"})).contains("kv_cache_dtype"));
    assert!(error(json!({"op": "presets", "model": "gpt2"})).contains("not read by `presets`"));
}

#[test]
fn bad_configs_are_messages() {
    assert!(error(json!({"op": "estimate", "config": "{\"model_type\": "})).contains("not valid JSON"));
    assert!(error(json!({"op": "estimate", "config": "{\"model_type\": \"llama\"}"})).contains("hidden_size"));
    assert!(error(json!({"op": "estimate", "config": "{\"model_type\": \"albert\", \"hidden_size\": 768}"})).contains("not supported"));
    assert!(error(json!({"op": "estimate", "config": "GGUF\u{3}\u{0}\u{0}\u{0}"})).contains("not a config.json"));
    assert!(error(json!({"op": "estimate", "config": "<!DOCTYPE html><html>"})).contains("not a config.json"));
    let big = "x".repeat(resolve::MAX_CONFIG + 1);
    assert!(error(json!({"op": "estimate", "config": big})).contains("limit"));
}

#[test]
fn ffi_round_trip() {
    let req = json!({"op": "estimate", "model": "gpt2", "gpu": "24GiB"}).to_string();
    let p = vram_alloc(req.len());
    // SAFETY: p holds req.len() bytes from vram_alloc; every buffer is freed once with its length.
    unsafe {
        std::ptr::copy_nonoverlapping(req.as_ptr(), p, req.len());
        let r = vram_call(p, req.len());
        vram_free(p, req.len());
        let len = u32::from_le_bytes(std::slice::from_raw_parts(r, 4).try_into().unwrap()) as usize;
        let text = std::str::from_utf8(std::slice::from_raw_parts(r.add(4), len)).unwrap().to_string();
        vram_free(r, 4 + len);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["total_bytes"].as_u64().unwrap() > 0, "{v}");
        assert_eq!(v["gpu"]["memory_source"], "user");
        let bad = [0xffu8, 0xfe];
        let r = vram_call(bad.as_ptr(), bad.len());
        let len = u32::from_le_bytes(std::slice::from_raw_parts(r, 4).try_into().unwrap()) as usize;
        let text = std::str::from_utf8(std::slice::from_raw_parts(r.add(4), len)).unwrap().to_string();
        vram_free(r, 4 + len);
        assert!(text.contains("not UTF-8"));
        let e = vram_call(std::ptr::null(), 0);
        let len = u32::from_le_bytes(std::slice::from_raw_parts(e, 4).try_into().unwrap()) as usize;
        vram_free(e, 4 + len);
        vram_free(vram_alloc(0), 0);
    }
}
