//! "Which quant fits?": a Hub repository of GGUF files (`org/name`, as llama-server's `-hf`
//! takes it, optionally `:QUANT`). The file list comes from the Hub API; each quant's header is
//! read by range requests (a growing prefix, never the tensor data), or from the Hugging Face
//! cache when the file is there. Split files (`-00001-of-00003.gguf`) count as one quant: their
//! sizes add up and every shard's header is read, as llama.cpp's loader reads them all.

use anyhow::Result;
use vram_core::gguf::{parse_with, Gguf, Parsed};

use super::hub::{cached_dir, is_hub_id, Client, HubEnv};
use crate::errors::UsageError;

/// Largest GGUF header read (tokenizer vocabularies and merges reach tens of MB).
const MAX_GGUF_HEADER: u64 = 256 << 20;
/// The first range asked for; doubled until the tensor infos end.
const FIRST_RANGE: u64 = 4 << 20;

/// `org/name[:QUANT]` (also `hf.co/org/name:QUANT`, Ollama's spelling) → (repo, quant).
pub fn parse_spec(spec: &str) -> Option<(String, Option<String>)> {
    let s = spec.trim().trim_start_matches("https://").trim_start_matches("huggingface.co/").trim_start_matches("hf.co/");
    let (repo, quant) = match s.rsplit_once(':') {
        Some((r, q)) if !q.is_empty() && !q.contains('/') => (r, Some(q.to_string())),
        _ => (s, None),
    };
    is_hub_id(repo).then(|| (repo.to_string(), quant))
}

/// One quant of the repository: its label, its files (shards in order) and their total bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantFile {
    /// The quant as the file name spells it (`Q4_K_M`, `UD-IQ2_XXS`, `BF16`), else the file's stem.
    pub quant: String,
    /// The files, shards in order.
    pub files: Vec<String>,
    /// Sizes of the files, bytes.
    pub sizes: Vec<u64>,
}

impl QuantFile {
    /// Bytes of all its files.
    pub fn bytes(&self) -> u64 {
        self.sizes.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// The quant label of a GGUF file name: the last `-`/`.`/`_`-separated token that names a ggml
/// file type (Q4_K_M, IQ4_XS, Q8_0, F16, BF16, MXFP4 …), with Unsloth's `UD-` prefix kept.
pub fn quant_label(file: &str) -> String {
    let base = file.rsplit('/').next().unwrap_or(file);
    let stem = base.trim_end_matches(".gguf");
    let stem = split_part(stem).map_or(stem, |(s, _, _)| s);
    let is_type = |t: &str| {
        let u = t.to_ascii_uppercase();
        let q = u.strip_prefix("I").unwrap_or(&u);
        (q.starts_with('Q') && q[1..].chars().next().is_some_and(|c| c.is_ascii_digit()))
            || matches!(u.as_str(), "F16" | "BF16" | "F32")
            || u.starts_with("MXFP4")
            || u.starts_with("TQ")
    };
    // Tokens are '-'/'.'-separated; a type keeps its '_' parts (Q4_K_M).
    let tokens: Vec<&str> = stem.split(['-', '.']).collect();
    for (i, t) in tokens.iter().enumerate().rev() {
        if is_type(t) {
            let ud = i > 0 && tokens[i - 1].eq_ignore_ascii_case("UD");
            return if ud { format!("UD-{}", t.to_ascii_uppercase()) } else { t.to_ascii_uppercase() };
        }
    }
    stem.to_string()
}

/// `name-00001-of-00003` → (name, 1, 3).
fn split_part(stem: &str) -> Option<(&str, u32, u32)> {
    let (head, total) = stem.rsplit_once("-of-")?;
    let (name, part) = head.rsplit_once('-')?;
    let (p, t) = (part.parse().ok()?, total.parse().ok()?);
    (part.len() == 5 && total.len() == 5 && p >= 1 && p <= t).then_some((name, p, t))
}

/// Whether a `.gguf` path is a model rather than a sidecar: llama.cpp's
/// common/download.cpp `gguf_filename_is_model` (the file name, case-sensitively, names no
/// `mmproj`, `imatrix`, `mtp-`, `eagle3-`, `dflash-` or `dspark-`).
pub fn is_model_file(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.ends_with(".gguf") && !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"].iter().any(|k| base.contains(k))
}

/// The bits a GGUF file name's quant tag names: llama.cpp's common/download.cpp
/// `extract_quant_bits` (the tag after the last `-`/`.` of the stem without its split suffix;
/// its first run of digits: Q4_K_M → 4, BF16 → 16, MXFP4 → 4; 0 without digits).
fn quant_bits(path: &str) -> i64 {
    let Some(stem) = path.strip_suffix(".gguf") else { return 0 };
    let stem = split_part(stem).map_or(stem, |(s, _, _)| s);
    let tag = stem.rsplit(['-', '.']).next().filter(|t| t.len() < stem.len() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    let Some(tag) = tag else { return 0 };
    let digits: String = tag.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

/// The projector llama-server's `-hf` downloads beside `model` (a path in the listing):
/// llama.cpp's common/download.cpp `find_best_sibling(files, model, "mmproj")` — among `.gguf`
/// files whose path contains `mmproj` in a directory on the model's own path, the deepest, then
/// the one whose quant bits are nearest the model's, the first listed on a tie.
pub fn best_mmproj<'a>(files: &'a [(String, u64)], model: &str) -> Option<&'a (String, u64)> {
    let model_dirs: Vec<&str> = model.split('/').collect();
    let model_dirs = &model_dirs[..model_dirs.len() - 1];
    let model_bits = quant_bits(model);
    let mut best: Option<(&(String, u64), usize, i64)> = None;
    for f in files {
        if !f.0.ends_with(".gguf") || !f.0.contains("mmproj") {
            continue;
        }
        let parts: Vec<&str> = f.0.split('/').collect();
        let dirs = &parts[..parts.len() - 1];
        // Its directories must all lie on the model's path.
        if dirs.len() > model_dirs.len() || dirs.iter().zip(model_dirs).any(|(a, b)| a != b) {
            continue;
        }
        let (depth, diff) = (dirs.len(), (quant_bits(&f.0) - model_bits).abs());
        if best.is_none_or(|(_, d, x)| depth > d || (depth == d && diff < x)) {
            best = Some((f, depth, diff));
        }
    }
    best.map(|(f, _, _)| f)
}

/// Group a repository's files into quants: model `.gguf` files only (multimodal projectors and
/// the other sidecars left out, [`is_model_file`]), shards of one split file together and in
/// order. Sorted by size. The projectors are returned beside them.
pub fn group(files: &[(String, u64)]) -> (Vec<QuantFile>, Vec<String>) {
    // (split key, its shards as (part number, path, size)).
    type Shards = Vec<(u32, String, u64)>;
    let mut groups: Vec<(String, Shards)> = Vec::new();
    let mut skipped = Vec::new();
    for (path, size) in files {
        let base = path.rsplit('/').next().unwrap_or(path);
        if !base.to_ascii_lowercase().ends_with(".gguf") {
            continue;
        }
        if base.contains("mmproj") {
            skipped.push(path.clone());
            continue;
        }
        if !is_model_file(path) {
            continue;
        }
        let stem = base.trim_end_matches(".gguf");
        let (key, part) = match split_part(stem) {
            Some((name, p, t)) => (format!("{}/{name}-of-{t}", path.rsplit_once('/').map_or("", |(d, _)| d)), p),
            None => (path.clone(), 1),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push((part, path.clone(), *size)),
            None => groups.push((key, vec![(part, path.clone(), *size)])),
        }
    }
    let mut out = Vec::new();
    for (_, mut shards) in groups {
        shards.sort();
        out.push(QuantFile {
            quant: quant_label(&shards[0].1),
            files: shards.iter().map(|s| s.1.clone()).collect(),
            sizes: shards.iter().map(|s| s.2).collect(),
        });
    }
    out.sort_by_key(|q| q.bytes());
    (out, skipped)
}

/// The repository's files: from the Hub, or under HF_HUB_OFFLINE from the cached snapshot.
pub fn list(env: &HubEnv, repo: &str, rev: &str) -> Result<Vec<(String, u64)>> {
    if env.offline {
        let Some(dir) = cached_dir(&env.cache, repo, rev)? else {
            return Err(UsageError(format!(
                "HF_HUB_OFFLINE is set and {repo} (revision {rev}) is not in the cache at {}: download its GGUF once online, or unset HF_HUB_OFFLINE",
                env.cache.display()
            ))
            .into());
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| UsageError(format!("cannot read {}: {e}", dir.display())))?.flatten() {
            let size = std::fs::metadata(entry.path()).map(|m| m.len()).unwrap_or(0);
            files.push((entry.file_name().to_string_lossy().to_string(), size));
        }
        return Ok(files);
    }
    Client::new(env, repo, rev)?.tree()
}

/// A quant's header (the first shard's; every shard's tensors for a split file), from the cache
/// when the file is there, else by range requests.
pub fn header(env: &HubEnv, repo: &str, rev: &str, q: &QuantFile) -> Result<Gguf> {
    let cached = cached_dir(&env.cache, repo, rev)?;
    let client = if env.offline { None } else { Some(Client::new(env, repo, rev)?) };
    let mut merged: Option<Gguf> = None;
    for (file, size) in q.files.iter().zip(&q.sizes) {
        let local = cached.as_ref().map(|d| d.join(file)).filter(|p| p.is_file());
        let g = match (local, &client) {
            (Some(p), _) => super::gguf::read_gguf(&p)?,
            (None, Some(c)) => remote_header(c, repo, file, *size)?,
            (None, None) => {
                return Err(UsageError(format!("HF_HUB_OFFLINE is set and {repo}/{file} is not in the cache")).into());
            }
        };
        merged = Some(match merged {
            None => g,
            Some(mut m) => {
                m.tensors.extend(g.tensors);
                m
            }
        });
    }
    merged.ok_or_else(|| UsageError(format!("{repo}: quant {} has no file", q.quant)).into())
}

/// A GGUF header over HTTP: growing range requests until the parser has the tensor infos.
fn remote_header(c: &Client, repo: &str, file: &str, size: u64) -> Result<Gguf> {
    let shown = format!("{repo}/{file}");
    let mut want = FIRST_RANGE.min(size.max(1));
    loop {
        let buf = c.get(file, Some((0, want - 1)))?.ok_or_else(|| UsageError(format!("{shown}: not found on the Hub (HTTP 404)")))?;
        match parse_with(&buf, &shown, Some(size))? {
            Parsed::Complete(g) => return Ok(*g),
            Parsed::NeedMore(n) => {
                if (buf.len() as u64) < want || n > size {
                    return Err(UsageError(format!(
                        "{shown}: the GGUF header needs {n} bytes but the server sent {} of a {size}-byte file: truncated, or a server that ignores Range",
                        buf.len()
                    ))
                    .into());
                }
                if n > MAX_GGUF_HEADER {
                    return Err(
                        UsageError(format!("{shown}: the GGUF header claims more than {} MiB; refusing", MAX_GGUF_HEADER >> 20)).into()
                    );
                }
                want = n.max(want.saturating_mul(2)).min(MAX_GGUF_HEADER).min(size);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quant_labels_follow_the_file_names() {
        assert_eq!(quant_label("Qwen3-8B-Q4_K_M.gguf"), "Q4_K_M");
        assert_eq!(quant_label("gemma-3-4b-it-UD-IQ2_XXS.gguf"), "UD-IQ2_XXS");
        assert_eq!(quant_label("Llama-3.1-8B-Instruct.Q8_0.gguf"), "Q8_0");
        assert_eq!(quant_label("BF16/Qwen3-235B-BF16-00001-of-00010.gguf"), "BF16");
        assert_eq!(quant_label("gpt-oss-20b-mxfp4.gguf"), "MXFP4");
        assert_eq!(quant_label("model.gguf"), "model");
    }

    #[test]
    fn specs_are_repos_with_an_optional_quant() {
        assert_eq!(parse_spec("unsloth/Qwen3-8B-GGUF:Q4_K_M"), Some(("unsloth/Qwen3-8B-GGUF".into(), Some("Q4_K_M".into()))));
        assert_eq!(parse_spec("hf.co/bartowski/gemma-GGUF"), Some(("bartowski/gemma-GGUF".into(), None)));
        assert_eq!(parse_spec("./model.gguf"), None);
        assert_eq!(parse_spec("llama-3.1-8b"), None);
    }

    fn listing(paths: &[&str]) -> Vec<(String, u64)> {
        paths.iter().map(|p| (p.to_string(), 1)).collect()
    }

    /// The projector -hf picks, on the repository layouts of llama.cpp's own
    /// tests/test-model-resolution.cpp: a flat repository (ggml-org/gemma-4-31B-it-GGUF's
    /// style), quants in subdirectories with the projector at the root
    /// (stepfun-ai/Step-3.7-Flash-GGUF's), and Unsloth's single BF16 projector.
    #[test]
    fn the_projector_is_the_one_llama_cpp_picks() {
        let flat = listing(&[
            "README.md",
            "model-BF16.gguf",
            "model-Q4_K_M.gguf",
            "model-Q8_0.gguf",
            "mmproj-model-BF16.gguf",
            "mmproj-model-Q8_0.gguf",
            "mtp-model-BF16.gguf",
        ]);
        let pick = |files: &[(String, u64)], m: &str| best_mmproj(files, m).map(|f| f.0.clone());
        assert_eq!(pick(&flat, "model-Q8_0.gguf").as_deref(), Some("mmproj-model-Q8_0.gguf"));
        assert_eq!(pick(&flat, "model-Q4_K_M.gguf").as_deref(), Some("mmproj-model-Q8_0.gguf"));
        assert_eq!(pick(&flat, "model-BF16.gguf").as_deref(), Some("mmproj-model-BF16.gguf"));
        // The pick does not depend on the listing's order where the bits differ.
        let mut rev = flat.clone();
        rev.reverse();
        assert_eq!(pick(&rev, "model-Q8_0.gguf").as_deref(), Some("mmproj-model-Q8_0.gguf"));
        let subdir = listing(&["mmproj-model-f16.gguf", "model-mtp-BF16.gguf", "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf"]);
        assert_eq!(pick(&subdir, "Q3_K_M/model-Q3_K_M-00001-of-00003.gguf").as_deref(), Some("mmproj-model-f16.gguf"));
        // A projector in a subdirectory off the model's path is never picked.
        let off = listing(&["vision/mmproj-F16.gguf", "model-Q4_K_M.gguf"]);
        assert_eq!(pick(&off, "model-Q4_K_M.gguf"), None);
        let unsloth = listing(&["model-UD-Q8_K_XL.gguf", "mmproj-BF16.gguf", "model-MTP-BF16.gguf"]);
        assert_eq!(pick(&unsloth, "model-UD-Q8_K_XL.gguf").as_deref(), Some("mmproj-BF16.gguf"));
        // The case-sensitive sidecar rule: a suffix -MTP file is a model, mtp- is not.
        assert!(is_model_file("model-MTP-BF16.gguf") && !is_model_file("mtp-model-Q8_0.gguf"));
        assert_eq!((quant_bits("model-UD-Q4_K_XL.gguf"), quant_bits("mmproj-F32.gguf"), quant_bits("m-MXFP4.gguf")), (4, 32, 4));
        assert_eq!(quant_bits("Q8_0/m-Q8_0-00001-of-00002.gguf"), 8);
    }

    #[test]
    fn split_files_are_one_quant_and_projectors_are_left_out() {
        let files = vec![
            ("Q8_0/m-Q8_0-00002-of-00002.gguf".to_string(), 10),
            ("Q8_0/m-Q8_0-00001-of-00002.gguf".to_string(), 20),
            ("m-Q4_K_M.gguf".to_string(), 15),
            ("mmproj-m-F16.gguf".to_string(), 5),
            ("README.md".to_string(), 1),
        ];
        let (g, skipped) = group(&files);
        assert_eq!(skipped, vec!["mmproj-m-F16.gguf".to_string()]);
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].quant.as_str(), g[0].bytes()), ("Q4_K_M", 15));
        assert_eq!(g[1].files, vec!["Q8_0/m-Q8_0-00001-of-00002.gguf".to_string(), "Q8_0/m-Q8_0-00002-of-00002.gguf".to_string()]);
        assert_eq!((g[1].quant.as_str(), g[1].bytes()), ("Q8_0", 30));
    }
}
