//! Local sources: a config.json file, or a model directory whose safetensors headers (never
//! tensor data) give the exact parameter count and stored dtypes.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use vram_core::arch_infer::MAX_TENSORS;
use vram_core::safetensors::{header_len, index_files, parse_header_with, CheckpointSummary, TensorInfo};
use vram_core::{parse_config_with, sniff, FileKind, Model, ParseOptions};

use super::approx;
use crate::errors::usage;

/// Largest config.json (or adapter_config.json) accepted (real ones are a few KB).
pub(crate) const MAX_CONFIG: u64 = 16 << 20;
/// Largest model.safetensors.index.json accepted.
const MAX_INDEX: u64 = 64 << 20;

/// A config.json given as a file.
pub fn load_config_file(path: &Path, opts: ParseOptions) -> Result<Model> {
    let spec = path.display().to_string();
    // Say what a weights file, a GGUF or a saved web page is before any size check.
    let kind = sniff(&read_prefix(path, 512)?);
    if !matches!(kind, FileKind::Json | FileKind::Empty) {
        return Err(usage(format!("{spec} is {}, not a config.json: {}", kind.describe(), kind.hint())));
    }
    let bytes = read_limited(path, MAX_CONFIG)?;
    match parse_config_with(&bytes, &spec, &spec, strict(opts)) {
        Err(e @ vram_core::Error::UnsupportedArchitecture { .. }) => approx::config_only(e, &bytes, &spec, &spec, opts),
        other => Ok(other?),
    }
}

/// `opts` without the approximate-architecture opt-in: the headers, when there are any, give
/// a better approximation than the config's keys.
pub(crate) fn strict(mut opts: ParseOptions) -> ParseOptions {
    opts.approximate_unknown = false;
    opts
}

/// The first `n` bytes of a regular file (fewer if it is shorter).
fn read_prefix(path: &Path, n: u64) -> Result<Vec<u8>> {
    let f = open_regular(path)?;
    let mut buf = Vec::new();
    f.take(n).read_to_end(&mut buf).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(buf)
}

/// Open a file only if it is a regular file: a FIFO, socket or device would block or never end.
pub fn open_regular(path: &Path) -> Result<File> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
    if !meta.is_file() {
        return Err(usage(format!(
            "{} is not a regular file (a FIFO, socket, device or directory): give a config.json, a model directory or a preset",
            path.display()
        )));
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

/// A model directory: config.json, then the safetensors headers when there are any. An
/// architecture vram does not model is approximated from the headers (see `approx`).
pub fn load_dir(dir: &Path, opts: ParseOptions) -> Result<Model> {
    let cfg_path = dir.join("config.json");
    let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    let shards = shard_names(dir)?;
    if !cfg_path.is_file() {
        if shards.is_empty() {
            return Err(usage(format!(
                "{} has no config.json and no *.safetensors; a model directory needs the Hugging Face config.json next to its weights",
                dir.display()
            )));
        }
        return approx::without_config(&name, &dir_tensors(dir, &shards)?);
    }
    let bytes = read_limited(&cfg_path, MAX_CONFIG)?;
    let cfg_file = cfg_path.display().to_string();
    let mut model = match parse_config_with(&bytes, &name, &cfg_file, strict(opts)) {
        Ok(m) => m,
        Err(e @ vram_core::Error::UnsupportedArchitecture { .. }) if shards.is_empty() => {
            return approx::config_only(e, &bytes, &name, &cfg_file, opts);
        }
        Err(e @ vram_core::Error::UnsupportedArchitecture { .. }) => {
            return approx::from_headers(e, &bytes, &dir_tensors(dir, &shards)?, &name, opts);
        }
        Err(e) => return Err(e.into()),
    };
    if shards.is_empty() {
        return Ok(model);
    }
    let mut summary = CheckpointSummary::default();
    for shard in &shards {
        let p = dir.join(shard);
        let (header, file_len) = read_header(&p)?;
        summary.add_header(&header, &p.display().to_string(), Some(file_len))?;
    }
    summary.apply(&mut model);
    Ok(model)
}

/// Every shard's tensors, names and shapes kept (for `arch_infer`), at most
/// [`MAX_TENSORS`] in all.
fn dir_tensors(dir: &Path, shards: &[String]) -> Result<Vec<TensorInfo>> {
    let mut all = Vec::new();
    for shard in shards {
        let p = dir.join(shard);
        let (header, file_len) = read_header(&p)?;
        all.extend(parse_header_with(&header, &p.display().to_string(), Some(file_len))?);
        if all.len() > MAX_TENSORS {
            return Err(usage(format!(
                "{}: more than {MAX_TENSORS} tensors in the safetensors headers, beyond any real checkpoint",
                dir.display()
            )));
        }
    }
    Ok(all)
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

/// One shard's safetensors header (8 bytes of length, then that much JSON) and the file's length.
fn read_header(p: &Path) -> Result<(Vec<u8>, u64)> {
    let shown = p.display().to_string();
    let mut f = open_regular(p).with_context(|| format!("cannot open shard {shown} listed by the index"))?;
    let mut first8 = [0u8; 8];
    f.read_exact(&mut first8).with_context(|| format!("{shown}: file shorter than the 8-byte header length"))?;
    let n = header_len(&first8, &shown)?;
    let file_len = f.metadata().with_context(|| format!("cannot stat {shown}"))?.len();
    if n + 8 > file_len {
        return Err(usage(format!("{shown}: header length {n} runs past the end of the file ({file_len} bytes): truncated download?")));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).with_context(|| format!("{shown}: cannot read the {n}-byte header"))?;
    Ok((header, file_len))
}

/// Whether a file starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    read_prefix(path, 4).is_ok_and(|m| sniff(&m) == FileKind::Gguf)
}
