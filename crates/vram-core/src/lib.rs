//! # vram-core
//!
//! Pure computation behind `vram`: read a model's config (and safetensors headers), count its
//! parameters exactly as PyTorch does, and compute the peak GPU memory of a training or
//! inference job component by component; search the largest batch that fits a GPU.
//!
//! No I/O, no printing: parsers take bytes and return [`Result`]s. Builds for `wasm32`.
//!
//! ```
//! use vram_core::{presets, Job, estimate};
//! let model = presets::load("qwen2.5-1.5b").unwrap();
//! assert_eq!(model.parameters(), 1_543_714_304);
//! let est = estimate(&model, &Job::train(4, 4096)).unwrap();
//! assert!(est.total > est.peak_allocated);
//! ```
#![deny(missing_docs)]

pub mod advice;
pub mod allocator;
pub mod arch_infer;
pub mod clip_buffer;
pub mod config;
pub mod dtype;
pub mod error;
pub mod fit;
pub mod gguf;
pub mod gpu;
pub mod job;
pub mod llama_fit;
pub mod llama_lora;
pub mod llama_recurrent;
pub mod llama_split;
pub mod measurement;
pub mod memory;
pub mod model;
pub mod ollama;
pub mod parallel;
pub mod peft;
pub mod pickle;
pub mod plan;
pub mod presets;
pub mod quant;
pub mod report;
pub mod safetensors;
pub mod serve;
pub mod serve_advice;
pub mod serve_encdec;
pub mod serve_graphs;
pub mod serve_mm;
pub mod serve_spec;
pub mod serve_ssm;
pub mod sglang;
pub mod snapshot;
pub mod sniff;
pub mod startup_log;
pub mod tune;
pub mod units;

pub use allocator::AllocConf;
pub use config::{parse_config, parse_config_with, ParseOptions};
pub use dtype::DType;
pub use error::{Error, Result};
pub use job::{AttentionImpl, Checkpointing, Job, Mode, Optimizer, OptimizerImpl, Overheads, Precision};
pub use memory::{allocation_sequence, estimate, estimate_with, Component, Estimate, Kind, Phase};
pub use model::{Encoder, EncoderHead, Frontend, Model, Multimodal, QuantizationConfig, RopeScaling, Seq2Seq, Vision, VisionFamily};
pub use sniff::{sniff, FileKind};
