//! Models straight from the Hugging Face Hub: `config.json` plus only the safetensors headers,
//! fetched with HTTP range requests the way huggingface_hub's `get_safetensors_metadata` does
//! (the first 100 KB, a second request when the header is longer, nothing past 100 MB), and
//! reused from the standard cache (`models--org--name/snapshots/<commit>/`) when present.
//!
//! Environment, as huggingface_hub reads it: `HF_ENDPOINT`, `HF_TOKEN` (or the token file under
//! `HF_HOME`), `HF_HUB_OFFLINE`, `HF_HUB_CACHE` / `HF_HOME` / `XDG_CACHE_HOME`.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use vram_core::arch_infer::MAX_TENSORS;
use vram_core::safetensors::{header_len, index_files, parse_header_with, CheckpointSummary};
use vram_core::{parse_config_with, Model, ParseOptions};

use super::approx;
use super::local::{load_dir, strict};
use crate::errors::UsageError;

/// First bytes requested of each safetensors file (huggingface_hub: 100_000).
const FIRST_RANGE: u64 = 100_000;
/// Largest safetensors header accepted (huggingface_hub SAFETENSORS_MAX_HEADER_LENGTH: 100 MB).
const MAX_HEADER: u64 = 100_000_000;
/// Largest config.json / index accepted.
const MAX_JSON: u64 = 64 << 20;

/// Whether `spec` looks like a Hub repository id (`org/name`, optionally `@revision`).
pub fn is_hub_id(spec: &str) -> bool {
    let id = spec.split('@').next().unwrap_or(spec);
    let mut parts = id.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.len() <= 96
                && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
    };
    let file_like = [".json", ".gguf", ".safetensors", ".bin"].iter().any(|x| id.to_ascii_lowercase().ends_with(x));
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none() && !file_like && !Path::new(spec).exists()
}

#[cfg(test)]
mod tests {
    use super::is_hub_id;

    #[test]
    fn hub_ids_and_paths() {
        assert!(is_hub_id("Qwen/Qwen2.5-7B-Instruct"));
        assert!(is_hub_id("meta-llama/Llama-3.1-8B@main"));
        assert!(!is_hub_id("./config.json"));
        assert!(!is_hub_id("models/config.json"));
        assert!(!is_hub_id("a/b/c"));
        assert!(!is_hub_id("llama-3.1-8b"));
        assert!(!is_hub_id("org/../etc"));
    }
}

/// Where and how to reach the Hub.
#[derive(Debug, Clone)]
pub struct HubEnv {
    /// `HF_ENDPOINT` (default `https://huggingface.co`).
    pub endpoint: String,
    /// `HF_TOKEN`, or the token file.
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE`.
    pub offline: bool,
    /// The hub cache directory.
    pub cache: PathBuf,
}

impl HubEnv {
    /// Read the environment like huggingface_hub/constants.py.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let xdg = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(var("HOME").unwrap_or_else(|| ".".into())).join(".cache"));
            xdg.join("huggingface")
        });
        let cache = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")).map(PathBuf::from).unwrap_or_else(|| home.join("hub"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| std::fs::read_to_string(var("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| home.join("token"))).ok())
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"));
        let endpoint = var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()).trim_end_matches('/').to_string();
        HubEnv { endpoint, token, offline, cache }
    }
}

/// `org/name[@revision]` → (repository, revision; `main` when none is given). A revision is a
/// branch, tag or commit: letters, digits, `- _ . /`, never `..` or a leading `/`.
fn repo_rev(spec: &str) -> Result<(&str, &str)> {
    let (repo, rev) = match spec.split_once('@') {
        Some((r, v)) if !v.is_empty() => (r, v),
        _ => (spec, "main"),
    };
    if rev.contains("..") || rev.starts_with('/') || !rev.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')) {
        return Err(UsageError(format!("invalid revision `{rev}`: a branch, tag or commit hash (letters, digits, - _ . /)")).into());
    }
    Ok((repo, rev))
}

/// Load `org/name[@revision]`: from the cache when it has the config, else from the Hub.
pub fn load(spec: &str, opts: ParseOptions) -> Result<Model> {
    let env = HubEnv::from_env();
    let (repo, rev) = repo_rev(spec)?;
    if let Some((dir, commit)) = cached_snapshot(&env.cache, repo, rev)? {
        let mut model = load_dir(&dir, opts)?;
        // Name it as the user knows it, with the short commit, not by the snapshot hash.
        model.name = format!("{repo}@{}", &commit[..commit.len().min(12)]);
        return Ok(model);
    }
    if env.offline {
        return Err(UsageError(format!(
            "HF_HUB_OFFLINE is set and {repo} (revision {rev}) is not in the cache at {}: download it once online, or unset HF_HUB_OFFLINE",
            env.cache.display()
        ))
        .into());
    }
    fetch(&env, repo, rev, opts)
}

/// One small file (`adapter_config.json`, …) of `org/name[@revision]`: from the cache when its
/// snapshot has it, else from the Hub (`None` when the repository has no such file).
pub fn small_file(spec: &str, file: &str) -> Result<Option<Vec<u8>>> {
    let env = HubEnv::from_env();
    let (repo, rev) = repo_rev(spec)?;
    if let Some(dir) = cached_dir(&env.cache, repo, rev)? {
        let cached = dir.join(file);
        // A regular file of at most MAX_JSON bytes, as the Hub's answer is bounded below.
        if cached.exists() {
            return super::local::read_limited(&cached, MAX_JSON).map(Some);
        }
    }
    if env.offline {
        return Err(UsageError(format!(
            "HF_HUB_OFFLINE is set and {repo}/{file} (revision {rev}) is not in the cache at {}: download it once online, or unset HF_HUB_OFFLINE",
            env.cache.display()
        ))
        .into());
    }
    Client::new(&env, repo, rev)?.get(file, None)
}

/// `models--org--name/snapshots/<commit>` holding a config.json, resolving `refs/<rev>`, with the
/// commit it names. A ref that is not a plain snapshot name (a crafted `../../etc`) is refused.
fn cached_snapshot(cache: &Path, repo: &str, rev: &str) -> Result<Option<(PathBuf, String)>> {
    let root = cache.join(format!("models--{}", repo.replace('/', "--")));
    let ref_file = root.join("refs").join(rev);
    let commit = match std::fs::read_to_string(&ref_file) {
        Ok(s) => s.trim().to_string(),
        Err(_) => rev.to_string(),
    };
    if !is_snapshot_name(&commit) {
        return Err(UsageError(format!(
            "{} holds `{}`, not a commit hash: the Hugging Face cache is corrupt or tampered with; delete {}",
            ref_file.display(),
            commit.escape_debug(),
            root.display()
        ))
        .into());
    }
    let dir = root.join("snapshots").join(&commit);
    Ok(dir.join("config.json").is_file().then_some((dir, commit)))
}

/// The cached snapshot directory of `repo` at `rev` whatever it holds (a GGUF repository has no
/// config.json), if the cache has one.
pub(super) fn cached_dir(cache: &Path, repo: &str, rev: &str) -> Result<Option<PathBuf>> {
    let root = cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = match std::fs::read_to_string(root.join("refs").join(rev)) {
        Ok(s) => s.trim().to_string(),
        Err(_) => rev.to_string(),
    };
    if !is_snapshot_name(&commit) {
        return Err(
            UsageError(format!("the Hugging Face cache's ref for {repo}@{rev} is not a commit hash: delete {}", root.display())).into()
        );
    }
    let dir = root.join("snapshots").join(commit);
    Ok(dir.is_dir().then_some(dir))
}

/// A snapshot directory name: a 40-hex commit, or a plain name with no path separators or `..`.
fn is_snapshot_name(s: &str) -> bool {
    let hex = s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit());
    let plain = !s.is_empty()
        && s.len() <= 128
        && !s.contains("..")
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    hex || plain
}

/// The overall deadline for one file from the Hub: `VRAM_HUB_TIMEOUT` seconds, default 120.
fn hub_timeout() -> Result<Duration> {
    match std::env::var("VRAM_HUB_TIMEOUT") {
        Err(_) => Ok(Duration::from_secs(120)),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(s) if (1..=86_400).contains(&s) => Ok(Duration::from_secs(s)),
            _ => Err(UsageError(format!("VRAM_HUB_TIMEOUT={v}: a whole number of seconds from 1 to 86400")).into()),
        },
    }
}

pub(super) struct Client<'a> {
    agent: ureq::Agent,
    env: &'a HubEnv,
    repo: &'a str,
    rev: &'a str,
    progress: bool,
    timeout: Duration,
}

/// A failed fetch, in the user's terms.
fn http_error(repo: &str, file: &str, e: ureq::Error, has_token: bool) -> anyhow::Error {
    match e {
        ureq::Error::Status(401 | 403, _) => UsageError(format!(
            "{repo} is gated or private (HTTP 401/403 for {file}): accept its licence on the Hub and {}",
            if has_token { "check that HF_TOKEN has access to it" } else { "set HF_TOKEN to a token with access" }
        ))
        .into(),
        ureq::Error::Status(404, _) => {
            UsageError(format!(
                "{repo}: {file} not found on the Hub (HTTP 404), and no local file or directory has that name: check the repository id, the revision, or the path"
            ))
            .into()
        }
        ureq::Error::Status(code, r) => anyhow::anyhow!("{repo}: fetching {file} failed with HTTP {code} {}", r.status_text()),
        ureq::Error::Transport(t) => anyhow::anyhow!(
            "cannot reach the Hub for {repo}/{file}: {t} (set HF_HUB_OFFLINE=1 to use only the local cache, or HF_ENDPOINT for a mirror)"
        ),
    }
}

impl Client<'_> {
    fn url(&self, file: &str) -> String {
        format!("{}/{}/resolve/{}/{}", self.env.endpoint, self.repo, self.rev, file)
    }

    /// A client for `repo` at `rev`, with the deadlines `fetch` uses.
    pub(super) fn new<'a>(env: &'a HubEnv, repo: &'a str, rev: &'a str) -> Result<Client<'a>> {
        let timeout = hub_timeout()?;
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .timeout_read(Duration::from_secs(60))
            .timeout(timeout)
            .redirects(5)
            .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
            .build();
        Ok(Client { agent, env, repo, rev, progress: std::io::stderr().is_terminal(), timeout })
    }

    /// Every file of the repository at the revision, with its size: the Hub API's tree listing
    /// (huggingface_hub hf_api.py `list_repo_tree`: GET /api/models/{repo}/tree/{rev}?recursive=true,
    /// a JSON array of {"type", "path", "size", …}, further pages named by a `Link: <…>; rel="next"`
    /// header), at most 100 pages.
    pub(super) fn tree(&self) -> Result<Vec<(String, u64)>> {
        let mut url = format!("{}/api/models/{}/tree/{}?recursive=true", self.env.endpoint, self.repo, self.rev);
        let mut files = Vec::new();
        for _ in 0..100 {
            let mut req = self.agent.get(&url).set("User-Agent", concat!("vram/", env!("CARGO_PKG_VERSION")));
            if let Some(t) = &self.env.token {
                req = req.set("Authorization", &format!("Bearer {t}"));
            }
            let resp = req.call().map_err(|e| http_error(self.repo, "the file list", e, self.env.token.is_some()))?;
            let next =
                resp.header("Link").and_then(next_link).map(|n| if n.starts_with('/') { format!("{}{n}", self.env.endpoint) } else { n });
            let mut buf = Vec::new();
            resp.into_reader().take(MAX_JSON).read_to_end(&mut buf).map_err(|e| self.read_error("the file list", e))?;
            let page: serde_json::Value =
                serde_json::from_slice(&buf).map_err(|e| UsageError(format!("{}: the Hub's file list is not JSON ({e})", self.repo)))?;
            let items = page.as_array().ok_or_else(|| UsageError(format!("{}: the Hub's file list is not a JSON array", self.repo)))?;
            for it in items.iter().filter(|it| it["type"] == "file") {
                if let (Some(p), Some(n)) = (it["path"].as_str(), it["size"].as_u64()) {
                    files.push((p.to_string(), n));
                }
            }
            match next {
                Some(n) => url = n,
                None => return Ok(files),
            }
        }
        Err(UsageError(format!("{}: the Hub's file list runs past 100 pages; refusing", self.repo)).into())
    }

    pub(super) fn get(&self, file: &str, range: Option<(u64, u64)>) -> Result<Option<Vec<u8>>, anyhow::Error> {
        let mut req = self.agent.get(&self.url(file)).set("User-Agent", concat!("vram/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = &self.env.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let limit = match range {
            Some((a, b)) => {
                req = req.set("Range", &format!("bytes={a}-{b}"));
                b - a + 1
            }
            None => MAX_JSON,
        };
        match req.call() {
            Ok(resp) => {
                let mut buf = Vec::new();
                // Never read past what was asked, even from a server that ignores Range.
                resp.into_reader().take(limit).read_to_end(&mut buf).map_err(|e| self.read_error(file, e))?;
                Ok(Some(buf))
            }
            Err(ureq::Error::Status(404, _)) if file != "config.json" => Ok(None),
            Err(e) => Err(http_error(self.repo, file, e, self.env.token.is_some())),
        }
    }

    /// A body that stopped arriving (or arrived too slowly for the deadline), in the user's terms.
    fn read_error(&self, file: &str, e: std::io::Error) -> anyhow::Error {
        if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) {
            return anyhow::anyhow!(
                "{}/{file}: the Hub did not finish sending it within {} s ({e}); retry, raise VRAM_HUB_TIMEOUT (seconds), or set HF_HUB_OFFLINE=1 to use the cache",
                self.repo,
                self.timeout.as_secs()
            );
        }
        anyhow::anyhow!("{}/{file}: reading the response failed: {e}", self.repo)
    }

    fn tick(&self, done: usize, total: usize, file: &str) {
        if self.progress {
            let width = 24;
            let filled = done * width / total.max(1);
            eprint!("\r\x1b[2Kfetching {} headers [{}{}] {done}/{total} {file}", self.repo, "#".repeat(filled), ".".repeat(width - filled));
            let _ = std::io::stderr().flush();
        }
    }

    /// The raw safetensors header JSON of `file` (`None` when the Hub has no such file): the first 100 KB,
    /// then the rest if the header is longer.
    fn header(&self, file: &str) -> Result<Option<Vec<u8>>> {
        let shown = format!("{}/{file}", self.repo);
        let Some(first) = self.get(file, Some((0, FIRST_RANGE - 1)))? else { return Ok(None) };
        if first.len() < 8 {
            return Err(UsageError(format!("{shown}: the server sent {} bytes, fewer than the 8-byte header length", first.len())).into());
        }
        let n = header_len(&first[..8], &shown)?;
        if n > MAX_HEADER {
            return Err(UsageError(format!(
                "{shown}: header length {n} bytes exceeds the 100 MB limit; refusing (a hostile or corrupt file)"
            ))
            .into());
        }
        let header = if 8 + n <= first.len() as u64 {
            first[8..8 + n as usize].to_vec()
        } else {
            let rest = self.get(file, Some((8, 8 + n - 1)))?.unwrap_or_default();
            if rest.len() as u64 != n {
                return Err(UsageError(format!(
                    "{shown}: the header is {n} bytes but the server sent {}: truncated file or a server that ignores Range",
                    rest.len()
                ))
                .into());
            }
            rest
        };
        Ok(Some(header))
    }
}

/// The URL of a `Link` header's `rel="next"` entry (RFC 8288), if any.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find(|part| part.contains("rel=\"next\"")).and_then(|part| {
        let (a, b) = (part.find('<')?, part.find('>')?);
        (a < b).then(|| part[a + 1..b].trim().to_string())
    })
}

fn fetch(env: &HubEnv, repo: &str, rev: &str, opts: ParseOptions) -> Result<Model> {
    // An overall deadline per request, body included: a server trickling a byte every few
    // seconds never trips the read timeout (Client::new).
    let c = Client::new(env, repo, rev)?;
    let cfg = c.get("config.json", None)?.unwrap_or_default();
    let file = format!("{repo}/config.json");
    let refused = match parse_config_with(&cfg, repo, &file, strict(opts)) {
        Ok(mut model) => {
            let mut summary = CheckpointSummary::default();
            // Range reads give no file length to check against: headers only.
            let found = each_header(&c, |shard, header| Ok(summary.add_header(header, &format!("{repo}/{shard}"), None)?))?;
            if !found {
                // A repository without safetensors (only .bin or GGUF): the config alone is used.
                model.warnings.push(format!("{repo} has no model.safetensors: parameters counted from config.json alone"));
            } else if summary.tensors > 0 {
                summary.apply(&mut model);
            }
            return Ok(model);
        }
        Err(e @ vram_core::Error::UnsupportedArchitecture { .. }) => e,
        Err(e) => return Err(e.into()),
    };
    // An architecture vram does not model: keep the tensors' names and shapes for `arch_infer`.
    let mut tensors = Vec::new();
    let found = each_header(&c, |shard, header| {
        tensors.extend(parse_header_with(header, &format!("{repo}/{shard}"), None)?);
        if tensors.len() > MAX_TENSORS {
            return Err(UsageError(format!(
                "{repo}: more than {MAX_TENSORS} tensors in the safetensors headers, beyond any real checkpoint"
            ))
            .into());
        }
        Ok(())
    })?;
    if !found || tensors.is_empty() {
        return approx::config_only(refused, &cfg, repo, &file, opts);
    }
    approx::from_headers(refused, &cfg, &tensors, repo, opts)
}

/// Fetch every shard's safetensors header (the index's shards, else `model.safetensors`) and
/// hand each to `f`; `false` when the repository has no `model.safetensors` at all.
fn each_header(c: &Client, mut f: impl FnMut(&str, &[u8]) -> Result<()>) -> Result<bool> {
    let repo = c.repo;
    let shards = match c.get("model.safetensors.index.json", None)? {
        Some(index) => index_files(&index, &format!("{repo}/model.safetensors.index.json"))?,
        None => vec!["model.safetensors".to_string()],
    };
    let mut found = true;
    for (i, shard) in shards.iter().enumerate() {
        c.tick(i, shards.len(), shard);
        let result = c.header(shard);
        if result.is_err() && c.progress {
            eprintln!();
        }
        match result? {
            Some(header) => f(shard, &header)?,
            None if shards.len() == 1 && shard == "model.safetensors" => {
                found = false;
                break;
            }
            None => {
                return Err(UsageError(format!("{repo}: shard {shard} listed by the index is not on the Hub (HTTP 404)")).into());
            }
        }
    }
    c.tick(shards.len(), shards.len(), "");
    if c.progress {
        eprintln!();
    }
    Ok(found)
}
