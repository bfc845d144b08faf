//! `vram models` and `vram gpus`: the built-in catalogues.

use anyhow::Result;
use vram_core::{gpu, presets};

use super::show;
use crate::cli::ListArgs;
use crate::render::lists::{self, PresetRow};

/// `vram models`.
pub fn models(a: &ListArgs) -> Result<()> {
    let rows = presets::PRESETS
        .iter()
        .map(|p| {
            let m = presets::load(p.name)?;
            Ok(PresetRow { name: p.name, model_type: m.model_type.clone(), hf_id: p.hf_id, parameters: m.parameters() })
        })
        .collect::<Result<Vec<_>>>()?;
    show(a.json, || lists::models_json(&rows), || lists::models_text(&rows))
}

/// `vram gpus`.
pub fn gpus(a: &ListArgs) -> Result<()> {
    let list = gpu::catalogue();
    show(a.json, || lists::gpus_json(&list), || lists::gpus_text(&list))
}
