//! Built-in model presets: the real published `config.json` of each model, embedded in the
//! binary so `vram` works offline. Names are lowercase, Hugging Face style; the Hub id is an alias.

use crate::config::parse_config;
use crate::error::{nearest, Error, Result};
use crate::model::Model;

/// One embedded preset.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// Name users type (`llama-3.1-8b`).
    pub name: &'static str,
    /// The Hugging Face repository the config was published in.
    pub hf_id: &'static str,
    /// The config.json contents.
    pub config: &'static str,
}

/// Every preset, sorted by name. Most files live in `presets/`; four are the real configs the
/// validation already reads (`validation/configs/`: gpt-oss-20b/120b, Qwen3-30B-A3B,
/// DeepSeek-V3), embedded from there so there is one copy.
pub const PRESETS: &[Preset] = &[
    Preset { name: "deepseek-v3", hf_id: "deepseek-ai/DeepSeek-V3", config: include_str!("../../../validation/configs/deepseek-v3.json") },
    Preset { name: "gemma-2-9b", hf_id: "google/gemma-2-9b", config: include_str!("../presets/gemma-2-9b.json") },
    Preset { name: "gpt-oss-120b", hf_id: "openai/gpt-oss-120b", config: include_str!("../../../validation/configs/gpt-oss-120b.json") },
    Preset { name: "gpt-oss-20b", hf_id: "openai/gpt-oss-20b", config: include_str!("../../../validation/configs/gpt-oss-20b.json") },
    Preset { name: "gpt2", hf_id: "openai-community/gpt2", config: include_str!("../presets/gpt2.json") },
    Preset { name: "gpt2-large", hf_id: "openai-community/gpt2-large", config: include_str!("../presets/gpt2-large.json") },
    Preset { name: "gpt2-medium", hf_id: "openai-community/gpt2-medium", config: include_str!("../presets/gpt2-medium.json") },
    Preset { name: "gpt2-xl", hf_id: "openai-community/gpt2-xl", config: include_str!("../presets/gpt2-xl.json") },
    Preset { name: "llama-2-13b", hf_id: "meta-llama/Llama-2-13b-hf", config: include_str!("../presets/llama-2-13b.json") },
    Preset { name: "llama-2-70b", hf_id: "meta-llama/Llama-2-70b-hf", config: include_str!("../presets/llama-2-70b.json") },
    Preset { name: "llama-2-7b", hf_id: "meta-llama/Llama-2-7b-hf", config: include_str!("../presets/llama-2-7b.json") },
    Preset { name: "llama-3-70b", hf_id: "meta-llama/Meta-Llama-3-70B", config: include_str!("../presets/llama-3-70b.json") },
    Preset { name: "llama-3-8b", hf_id: "meta-llama/Meta-Llama-3-8B", config: include_str!("../presets/llama-3-8b.json") },
    Preset { name: "llama-3.1-405b", hf_id: "meta-llama/Llama-3.1-405B", config: include_str!("../presets/llama-3.1-405b.json") },
    Preset { name: "llama-3.1-70b", hf_id: "meta-llama/Llama-3.1-70B", config: include_str!("../presets/llama-3.1-70b.json") },
    Preset { name: "llama-3.1-8b", hf_id: "meta-llama/Llama-3.1-8B", config: include_str!("../presets/llama-3.1-8b.json") },
    Preset { name: "llama-3.2-1b", hf_id: "meta-llama/Llama-3.2-1B", config: include_str!("../presets/llama-3.2-1b.json") },
    Preset { name: "llama-3.2-3b", hf_id: "meta-llama/Llama-3.2-3B", config: include_str!("../presets/llama-3.2-3b.json") },
    Preset { name: "mistral-7b", hf_id: "mistralai/Mistral-7B-v0.1", config: include_str!("../presets/mistral-7b.json") },
    Preset { name: "mixtral-8x7b", hf_id: "mistralai/Mixtral-8x7B-v0.1", config: include_str!("../presets/mixtral-8x7b.json") },
    Preset { name: "phi-3-mini", hf_id: "microsoft/Phi-3-mini-4k-instruct", config: include_str!("../presets/phi-3-mini.json") },
    Preset { name: "qwen2.5-0.5b", hf_id: "Qwen/Qwen2.5-0.5B", config: include_str!("../presets/qwen2.5-0.5b.json") },
    Preset { name: "qwen2.5-1.5b", hf_id: "Qwen/Qwen2.5-1.5B", config: include_str!("../presets/qwen2.5-1.5b.json") },
    Preset { name: "qwen2.5-14b", hf_id: "Qwen/Qwen2.5-14B", config: include_str!("../presets/qwen2.5-14b.json") },
    Preset { name: "qwen2.5-32b", hf_id: "Qwen/Qwen2.5-32B", config: include_str!("../presets/qwen2.5-32b.json") },
    Preset { name: "qwen2.5-72b", hf_id: "Qwen/Qwen2.5-72B", config: include_str!("../presets/qwen2.5-72b.json") },
    Preset { name: "qwen2.5-7b", hf_id: "Qwen/Qwen2.5-7B", config: include_str!("../presets/qwen2.5-7b.json") },
    Preset { name: "qwen3-30b-a3b", hf_id: "Qwen/Qwen3-30B-A3B", config: include_str!("../../../validation/configs/qwen3-30b-a3b.json") },
    Preset { name: "qwen3-8b", hf_id: "Qwen/Qwen3-8B", config: include_str!("../presets/qwen3-8b.json") },
];

/// Find a preset by name or Hub id, case-insensitively (`Llama-3.1-8B`, `meta-llama/Llama-3.1-8B`).
pub fn find(name: &str) -> Option<&'static Preset> {
    let n = name.trim().to_ascii_lowercase();
    PRESETS.iter().find(|p| {
        p.name == n || p.hf_id.to_ascii_lowercase() == n || p.hf_id.rsplit('/').next().is_some_and(|s| s.to_ascii_lowercase() == n)
    })
}

/// Load a preset as a normalised [`Model`], or say which names are closest.
pub fn load(name: &str) -> Result<Model> {
    let p = find(name).ok_or_else(|| Error::Unknown {
        what: "model preset".into(),
        name: name.into(),
        suggestions: nearest(name, PRESETS.iter().map(|p| p.name)),
    })?;
    parse_config(p.config.as_bytes(), p.name, &format!("preset {}", p.name))
}
