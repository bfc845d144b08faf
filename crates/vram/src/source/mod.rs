//! Where a model comes from, in one direction: a source (local file or directory, a built-in
//! preset, the Hugging Face Hub or its cache) gives raw bytes, the core parses them into a raw
//! config, and the core folds the safetensors headers into the normalised [`Model`].
//!
//! `mod` dispatches; `local` reads files; `hub` fetches (and reuses `local` for cache snapshots);
//! nothing here calls back up into the dispatcher.

pub mod approx;
pub mod gguf;
pub mod hub;
pub mod hub_gguf;
pub mod local;

use std::path::Path;

use anyhow::Result;
use vram_core::{presets, Model, ParseOptions};

use crate::errors::usage;

/// Load a model from a path, a preset name or a Hub id. `opts` carries the
/// approximate-architecture opt-in; presets are always exact.
pub fn load_model(spec: &str, opts: ParseOptions) -> Result<Model> {
    let path = Path::new(spec);
    if path.is_dir() {
        return local::load_dir(path, opts);
    }
    if path.exists() {
        return local::load_config_file(path, opts);
    }
    if presets::find(spec).is_some() {
        return Ok(presets::load(spec)?);
    }
    if hub::is_hub_id(spec) {
        return match hub::load(spec, opts) {
            Err(e) if hub::HubEnv::from_env().offline => base_preset(spec)?.ok_or(e),
            other => other,
        };
    }
    if spec.contains('/') || spec.ends_with(".json") {
        return Err(usage(format!("`{spec}` is neither a file, a directory nor a preset; give a path to a config.json or a model directory, or a preset name (`vram models` lists them)")));
    }
    Ok(presets::load(spec)?)
}

/// A small JSON file (`adapter_config.json`, an EAGLE head's `config.json`) of a Hub repository
/// (cached or fetched) or a local directory: where it is, and its bytes (`None` when the
/// repository or directory has none). A local file is read as a regular file within the config
/// limit (`local::read_limited`: a FIFO or a huge file is refused, not read).
pub fn small_json(spec: &str, name: &str) -> Result<(String, Option<Vec<u8>>)> {
    if hub::is_hub_id(spec) {
        return Ok((format!("{spec}/{name}"), hub::small_file(spec, name)?));
    }
    let local = Path::new(spec).join(name);
    let bytes = local.exists().then(|| local::read_limited(&local, local::MAX_CONFIG)).transpose()?;
    Ok((local.display().to_string(), bytes))
}

/// Suffixes of fine-tuned variants that keep the base model's architecture and size.
const VARIANT_SUFFIXES: [&str; 3] = ["-instruct", "-chat", "-it"];

/// Offline, `org/Name-Instruct` (or `-Chat`, `-it`) is its base preset: the same architecture
/// and size, so the same memory. Says so in a warning on the model.
fn base_preset(spec: &str) -> Result<Option<Model>> {
    let id = spec.split('@').next().unwrap_or(spec);
    let lower = id.to_ascii_lowercase();
    let Some(base) = VARIANT_SUFFIXES.iter().find_map(|s| lower.strip_suffix(s).map(|_| &id[..id.len() - s.len()])) else {
        return Ok(None);
    };
    let Some(p) = presets::find(base) else { return Ok(None) };
    let mut model = presets::load(p.name)?;
    model.name = id.to_string();
    model.warnings.push(format!(
        "using preset {} (same architecture and size as {id}, so the same memory): HF_HUB_OFFLINE is set and {id} is not in the cache",
        p.name
    ));
    Ok(Some(model))
}
