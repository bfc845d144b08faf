//! Resolve `--model`: a preset name, a config.json file, or a model directory whose
//! safetensors headers (never tensor data) give the exact parameter count and stored dtypes.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use vram_core::safetensors::{header_len, index_files, parse_header, CheckpointSummary};
use vram_core::{parse_config, presets, Model};

use crate::resolve::UsageError;

/// Fail with an input error (exit code 2).
macro_rules! input {
    ($($t:tt)*) => { return Err(UsageError(format!($($t)*)).into()) };
}

/// Largest config.json accepted (real ones are a few KB).
const MAX_CONFIG: u64 = 16 << 20;

/// Load a model from a preset name or a path.
pub fn load_model(spec: &str) -> Result<Model> {
    let path = Path::new(spec);
    if path.is_dir() {
        return load_dir(path);
    }
    if path.is_file() {
        if is_gguf(path) {
            input!("{spec} is a GGUF file: `vram serve --model {spec} --gpu G` plans it under llama.cpp");
        }
        let bytes = read_limited(path, MAX_CONFIG)?;
        return Ok(parse_config(&bytes, spec, spec)?);
    }
    if presets::find(spec).is_some() {
        return Ok(presets::load(spec)?);
    }
    if crate::hub::is_hub_id(spec) {
        return crate::hub::load(spec);
    }
    if spec.contains('/') || spec.ends_with(".json") {
        // Looks like a path (or a Hub id, which the Hub issue will fetch); say which.
        match presets::load(spec) {
            Ok(m) => Ok(m),
            Err(_) => input!("`{spec}` is neither a file, a directory nor a preset; give a path to a config.json or a model directory, or a preset name (`vram models` lists them)"),
        }
    } else {
        Ok(presets::load(spec)?)
    }
}

fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > limit {
        input!("{} is {} bytes; a config.json is a few KB (limit {limit}): is this the right file?", path.display(), len);
    }
    let mut buf = Vec::new();
    f.take(limit).read_to_end(&mut buf).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(buf)
}

pub fn load_dir(dir: &Path) -> Result<Model> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        input!("{} has no config.json; a model directory needs the Hugging Face config.json next to its weights", dir.display());
    }
    let bytes = read_limited(&cfg_path, MAX_CONFIG)?;
    let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut model = parse_config(&bytes, &name, &cfg_path.display().to_string())?;
    let index = dir.join("model.safetensors.index.json");
    let shards: Vec<String> = if index.is_file() {
        index_files(&read_limited(&index, 64 << 20)?, &index.display().to_string())?
    } else {
        let mut v: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".safetensors"))
            .collect();
        v.sort();
        v
    };
    if shards.is_empty() {
        return Ok(model);
    }
    let mut summary = CheckpointSummary::default();
    for shard in &shards {
        let p = dir.join(shard);
        let shown = p.display().to_string();
        let mut f = File::open(&p).with_context(|| format!("cannot open shard {shown} listed by the index"))?;
        let mut first8 = [0u8; 8];
        f.read_exact(&mut first8).with_context(|| format!("{shown}: file shorter than the 8-byte header length"))?;
        let n = header_len(&first8, &shown)?;
        let file_len = f.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        if n + 8 > file_len {
            input!("{shown}: header length {n} runs past the end of the file ({file_len} bytes): truncated download?");
        }
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header).with_context(|| format!("{shown}: cannot read the {n}-byte header"))?;
        summary.add(&parse_header(&header, &shown)?)?;
    }
    apply_summary(&mut model, &summary);
    Ok(model)
}

/// Record what the safetensors headers say: exact element count and stored dtype.
pub fn apply_summary(model: &mut Model, summary: &CheckpointSummary) {
    let from_config = model.parameters();
    model.checkpoint_parameters = Some(summary.parameters);
    if let Some(d) = summary.main_dtype() {
        model.stored_dtype = Some(d);
    }
    if summary.parameters != from_config {
        model.warnings.push(format!(
            "the safetensors headers hold {} elements, the config implies {} parameters (a duplicated tied lm_head, packed quantised weights, or extra tensors); the memory model uses the config's",
            summary.parameters, from_config
        ));
    }
}

/// Whether a file starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}
