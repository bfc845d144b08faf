//! The integration tests as one test binary: each file below is a module, as it was a
//! test crate of its own (one link instead of 31).
//! Run one file's tests with `cargo test -p vram --test all serve_paste::`.

// The files still include their shared helpers (support/, util.rs) as they did as crates of
// their own, so a helper is compiled once per file that uses it.
#![allow(clippy::duplicate_mod)]

#[path = "cli.rs"]
pub mod cli;
#[path = "cli_defects.rs"]
pub mod cli_defects;
#[path = "dual_cli.rs"]
pub mod dual_cli;
#[path = "encdec_cli.rs"]
pub mod encdec_cli;
#[path = "explain.rs"]
pub mod explain;
#[path = "fit_advice.rs"]
pub mod fit_advice;
#[path = "gpt_oss.rs"]
pub mod gpt_oss;
#[path = "hub.rs"]
pub mod hub;
#[path = "hub_gguf.rs"]
pub mod hub_gguf;
#[path = "llamacpp_h200.rs"]
pub mod llamacpp_h200;
#[path = "llamacpp_lora.rs"]
pub mod llamacpp_lora;
#[path = "llamacpp_moe.rs"]
pub mod llamacpp_moe;
#[path = "llamacpp_recurrent.rs"]
pub mod llamacpp_recurrent;
#[path = "llamacpp_split.rs"]
pub mod llamacpp_split;
#[path = "lora.rs"]
pub mod lora;
#[path = "lora_vlm_cli.rs"]
pub mod lora_vlm_cli;
#[path = "measurement.rs"]
pub mod measurement;
#[path = "metrics.rs"]
pub mod metrics;
#[path = "model_inputs.rs"]
pub mod model_inputs;
#[path = "ollama.rs"]
pub mod ollama;
#[path = "prequant.rs"]
pub mod prequant;
#[path = "processes.rs"]
pub mod processes;
#[path = "qwen2vl.rs"]
pub mod qwen2vl;
#[path = "readme.rs"]
pub mod readme;
#[path = "serve_advice.rs"]
pub mod serve_advice;
#[path = "serve_log.rs"]
pub mod serve_log;
#[path = "serve_paste.rs"]
pub mod serve_paste;
#[path = "serve_pp.rs"]
pub mod serve_pp;
#[path = "serve_vlm_cli.rs"]
pub mod serve_vlm_cli;
#[path = "sglang_logs.rs"]
pub mod sglang_logs;
#[path = "ssm_cli.rs"]
pub mod ssm_cli;
#[path = "unknown_arch.rs"]
pub mod unknown_arch;
