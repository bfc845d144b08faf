//! Text encoder-decoders on the command line (issue 15): `--source-len` sizes the encoder,
//! `--seq-len` the decoder; what cannot be estimated is refused with exit 2.

mod util;

use util::{fails, json, vram};

const BART: &str = "../../validation/configs/encdec/bart-large.json";
const T5: &str = "../../validation/configs/encdec/t5-small.json";
const WHISPER: &str = "../../validation/configs/encdec/whisper-small.json";

fn peak(args: &[&str]) -> u64 {
    json(args)["peak_allocated_bytes"].as_u64().unwrap()
}

#[test]
fn the_source_length_sizes_the_encoder() {
    let base = ["estimate", "--model", BART, "--seq-len", "128", "--batch", "4"];
    let short = peak(&[&base[..], &["--source-len", "256"]].concat());
    let long = peak(&[&base[..], &["--max_source_length", "1024"]].concat());
    assert!(long > short, "a longer source must cost more: {short} vs {long}");
    let v = json(&[&base[..], &["--source-len", "512"]].concat());
    assert_eq!(v["model"]["kind"], "encoder-decoder");
    assert_eq!(v["model"]["seq2seq_encoder"]["source_positions"], 512);
    let text = vram().args(base).args(["--source-len", "512"]).output().unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("encoder: 512 source tokens (--source-len) · decoder: 128 target tokens"), "{out}");
}

#[test]
fn defaults_follow_the_position_tables() {
    // BART: 1024 learned positions for both; T5: its n_positions (512) for both.
    let bart = json(&["estimate", "--model", BART]);
    assert_eq!(bart["job"]["seq"], 1024);
    assert_eq!(bart["model"]["seq2seq_encoder"]["source_positions"], 1024);
    let t5 = json(&["estimate", "--model", T5]);
    assert_eq!(t5["job"]["seq"], 512);
    // Whisper's decoder has 448 positions.
    assert_eq!(json(&["estimate", "--model", WHISPER])["job"]["seq"], 448);
}

#[test]
fn lengths_past_a_learned_table_are_refused() {
    let err = fails(&["estimate", "--model", BART, "--seq-len", "2048"], 2);
    assert!(err.contains("1024 positions"), "{err}");
    let err = fails(&["estimate", "--model", BART, "--source-len", "4096"], 2);
    assert!(err.contains("between 1 and 1024"), "{err}");
    let err = fails(&["estimate", "--model", WHISPER, "--source-len", "512"], 2);
    assert!(err.contains("30 s of audio"), "{err}");
    let err = fails(&["estimate", "--model", "llama-3.1-8b", "--source-len", "512"], 2);
    assert!(err.contains("encoder-decoder"), "{err}");
}

#[test]
fn what_is_not_modelled_is_refused() {
    let err = fails(&["estimate", "--model", T5, "--padded"], 2);
    assert!(err.contains("padded batches on T5"), "{err}");
    let err = fails(&["estimate", "--model", BART, "--peft", "qlora"], 2);
    assert!(err.contains("QLoRA"), "{err}");
    let err = fails(&["estimate", "--model", T5, "--peft", "dora"], 2);
    assert!(err.contains("DoRA"), "{err}");
    let err = fails(&["serve", "--model", T5, "--gpu", "h100-80gb"], 2);
    assert!(err.contains("vLLM's V1 engine has no model"), "{err}");
    let err = fails(&["serve", "--model", BART, "--gpu", "h100-80gb"], 2);
    assert!(err.contains("plugin"), "{err}");
    let err = fails(&["serve", "--engine", "sglang", "--model", T5, "--gpu", "h100-80gb"], 2);
    assert!(err.contains("serving with SGLang"), "{err}");
}

#[test]
fn a_padded_bart_batch_costs_its_masks() {
    let base = ["estimate", "--model", BART, "--seq-len", "128", "--source-len", "512", "--batch", "8"];
    let plain = json(&base);
    let padded = json(&[&base[..], &["--padded"]].concat());
    assert!(padded["peak_allocated_bytes"].as_u64() > plain["peak_allocated_bytes"].as_u64());
    let names: Vec<String> = padded["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
    assert!(names.iter().any(|n| n == "activations: cross-attention masks"), "{names:?}");
}

#[test]
fn transformers_5_ties_t5_v1_1_heads_and_says_so() {
    let v = json(&["estimate", "--model", "../../validation/configs/encdec/t5-small-ssm.json"]);
    let warnings = v["model"]["warnings"].to_string();
    assert!(warnings.contains("transformers ≥ 5 ties it"), "{warnings}");
}

#[test]
fn lora_adapts_self_and_cross_attention_with_peft_defaults() {
    // peft's defaults: q and v for T5 (self-attention and EncDecAttention), q_proj and v_proj for
    // BART and Whisper — 4 modules per decoder layer, 2 per encoder layer.
    let t5 = json(&["estimate", "--model", T5, "--peft", "lora", "--lora-r", "16", "--seq-len", "128"]);
    let full = json(&["estimate", "--model", T5, "--seq-len", "128"]);
    assert!(t5["peak_allocated_bytes"].as_u64() < full["peak_allocated_bytes"].as_u64());
    let text = vram().args(["estimate", "--model", BART, "--peft", "lora", "--seq-len", "128"]).output().unwrap();
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("q_proj") && out.contains("v_proj"), "{out}");
}

/// `vram serve` on Whisper: vLLM's encoder-decoder defaults and the two KV groups, in the JSON
/// and in the human report, and a pasted `vllm serve` command read the same way.
#[test]
fn whisper_serves_with_two_kv_groups() {
    let r = json(&["serve", "--model", WHISPER, "--gpu", "l4"]);
    let g = &r["gpus"][0];
    assert_eq!(g["max_model_len"], 448);
    assert_eq!(g["max_num_batched_tokens"], 2048);
    let kinds: Vec<&str> = g["groups"].as_array().unwrap().iter().map(|x| x["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["full", "cross"]);
    let out = vram().args(["serve", "--gpu", "l4", "--json", "--", "vllm", "serve", WHISPER, "--max-num-seqs", "64"]).output().unwrap();
    let pasted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pasted["gpus"][0]["max_num_seqs"], 64);
    let out = vram().args(["serve", "--model", WHISPER, "--gpu", "l4"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("2 groups of 12 layers") && text.contains("requests of 448 tokens fit at once"), "{text}");
}
