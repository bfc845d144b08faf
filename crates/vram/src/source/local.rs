//! Local sources: a config.json file, or a model directory whose safetensors headers (never
//! tensor data) give the exact parameter count and stored dtypes.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use vram_core::safetensors::{header_len, index_files, parse_header, CheckpointSummary, TensorInfo};
use vram_core::{parse_config, Model};

use super::checkpoint::apply_summary;
use crate::errors::usage;

/// Largest config.json accepted (real ones are a few KB).
const MAX_CONFIG: u64 = 16 << 20;
/// Largest model.safetensors.index.json accepted.
const MAX_INDEX: u64 = 64 << 20;

/// A config.json given as a file; weight files and other non-JSON files are named, not parsed.
pub fn load_config_file(path: &Path) -> Result<Model> {
    let spec = path.display().to_string();
    let mut head = Vec::new();
    open_regular(path)?.take(16).read_to_end(&mut head).with_context(|| format!("cannot read {spec}"))?;
    if let Some(what) = sniff(&head) {
        return Err(usage(format!("{spec} {what}")));
    }
    let bytes = read_limited(path, MAX_CONFIG)?;
    if let Some(c) = bytes.iter().find(|c| !c.is_ascii_whitespace()).filter(|c| **c != b'{') {
        return Err(usage(format!(
            "{spec} is not a JSON config (it starts with {:?}): --model takes a config.json, a model directory, a preset or a Hub id",
            char::from(*c)
        )));
    }
    Ok(parse_config(&bytes, &spec, &spec)?)
}

/// What a weights file is, from its first bytes, and which command reads it.
fn sniff(head: &[u8]) -> Option<String> {
    if head.starts_with(b"GGUF") {
        return Some("is a GGUF file (llama.cpp weights): `vram serve --model FILE.gguf --gpu G` plans it under llama.cpp".into());
    }
    // safetensors: an 8-byte little-endian header length, then the JSON header.
    if head.len() >= 9 && head[8] == b'{' {
        return Some("is a safetensors weights file: give its directory (config.json + *.safetensors) as --model".into());
    }
    // torch.save since PyTorch 1.6 writes a zip archive; older checkpoints are raw pickles (protocol ≥ 2 starts with 0x80).
    if head.starts_with(b"PK\x03\x04") {
        return Some(
            "is a zip archive (a PyTorch .bin/.pt checkpoint from torch.save): give the model directory with its config.json".into(),
        );
    }
    if head.first() == Some(&0x80) {
        return Some("is a Python pickle (a PyTorch checkpoint): give the model directory with its config.json".into());
    }
    None
}

/// Open a file only if it is a regular file: a FIFO, socket or device would block or never end.
pub fn open_regular(path: &Path) -> Result<File> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
    if !meta.is_file() {
        return Err(usage(format!("{} is not a regular file (a FIFO, socket or device?): vram reads only regular files", path.display())));
    }
    File::open(path).with_context(|| format!("cannot open {}", path.display()))
}

/// Read at most `limit` bytes of a file, refusing larger ones.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = open_regular(path)?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > limit {
        return Err(usage(format!(
            "{} is {} bytes; a config.json is a few KB (limit {limit}): is this the right file?",
            path.display(),
            len
        )));
    }
    let mut buf = Vec::new();
    f.take(limit).read_to_end(&mut buf).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(buf)
}

/// A model directory: config.json, then the safetensors headers when there are any.
pub fn load_dir(dir: &Path) -> Result<Model> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        return Err(usage(format!(
            "{} has no config.json; a model directory needs the Hugging Face config.json next to its weights",
            dir.display()
        )));
    }
    let bytes = read_limited(&cfg_path, MAX_CONFIG)?;
    let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut model = parse_config(&bytes, &name, &cfg_path.display().to_string())?;
    let shards = shard_names(dir)?;
    if shards.is_empty() {
        return Ok(model);
    }
    let mut summary = CheckpointSummary::default();
    for shard in &shards {
        summary.add(&read_header(&dir.join(shard))?)?;
    }
    apply_summary(&mut model, &summary);
    Ok(model)
}

/// The shards the index lists, else every `*.safetensors` in the directory, sorted.
fn shard_names(dir: &Path) -> Result<Vec<String>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        return Ok(index_files(&read_limited(&index, MAX_INDEX)?, &index.display().to_string())?);
    }
    let mut v: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    v.sort();
    Ok(v)
}

/// One shard's safetensors header: 8 bytes of length, then that much JSON.
fn read_header(p: &Path) -> Result<Vec<TensorInfo>> {
    let shown = p.display().to_string();
    let mut f = open_regular(p).with_context(|| format!("cannot open shard {shown} listed by the index"))?;
    let mut first8 = [0u8; 8];
    f.read_exact(&mut first8).with_context(|| format!("{shown}: file shorter than the 8-byte header length"))?;
    let n = header_len(&first8, &shown)?;
    let file_len = f.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
    if n + 8 > file_len {
        return Err(usage(format!("{shown}: header length {n} runs past the end of the file ({file_len} bytes): truncated download?")));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).with_context(|| format!("{shown}: cannot read the {n}-byte header"))?;
    Ok(parse_header(&header, &shown)?)
}

/// Whether a file starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    open_regular(path).is_ok_and(|mut f| f.read_exact(&mut magic).is_ok()) && &magic == b"GGUF"
}
