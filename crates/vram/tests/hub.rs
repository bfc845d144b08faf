//! `--model org/name` against a real HTTP server on loopback that serves the Hub's URL layout
//! (`/{repo}/resolve/{revision}/{file}`, Range requests, 302 redirects, 401 for a gated repo,
//! 404), and against the standard cache offline.

mod util;

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::json;
use util::{err_text, ok_json, read_request, respond, vram};

const CONFIG: &[u8] = include_bytes!("../../vram-core/presets/qwen2.5-0.5b.json");

/// A safetensors file: header JSON describing `tensors` (name, shape) in bf16, padded, then
/// `data_bytes` bytes standing in for the data.
fn safetensors(tensors: &[(String, Vec<u64>)], data_bytes: usize) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut off = 0u64;
    for (name, shape) in tensors {
        let n: u64 = shape.iter().product::<u64>() * 2;
        header.insert(name.clone(), json!({"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}));
        off += n;
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(vec![0u8; data_bytes]);
    out
}

/// Every request seen: (path, range header).
type RequestLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

struct Hub {
    port: u16,
    /// Every request seen: (path, range header).
    log: RequestLog,
}

fn serve_hub(files: HashMap<String, Vec<u8>>) -> Hub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let Some((path, range, auth)) = read_request(&stream) else { continue };
            seen.lock().unwrap().push((path.clone(), range.clone()));
            if path.starts_with("/gated/") && auth.as_deref() != Some("Bearer hf_secret") {
                respond(stream, "401 Unauthorized", &[], b"gated");
                continue;
            }
            // A renamed repository redirects to its new name, like the Hub does.
            if let Some(rest) = path.strip_prefix("/old-org/") {
                respond(stream, "302 Found", &[("Location", format!("/org/{rest}"))], b"");
                continue;
            }
            let key = path.replace("/resolve/main/", "/");
            match files.get(key.trim_start_matches('/')) {
                None => respond(stream, "404 Not Found", &[], b"Entry not found"),
                Some(body) => match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
                    Some(r) => {
                        let (a, b) = r.split_once('-').unwrap();
                        let a: usize = a.parse().unwrap();
                        let b: usize = b.parse::<usize>().unwrap().min(body.len().saturating_sub(1));
                        let part = if a < body.len() { &body[a..=b] } else { &[][..] };
                        respond(stream, "206 Partial Content", &[("Content-Range", format!("bytes {a}-{b}/{}", body.len()))], part);
                    }
                    None => respond(stream, "200 OK", &[], body),
                },
            }
        }
    });
    Hub { port, log }
}

fn qwen_tensors() -> Vec<(String, Vec<u64>)> {
    let mut t = vec![("model.embed_tokens.weight".to_string(), vec![151_936, 896])];
    for i in 0..24 {
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![896, 896]),
            ("self_attn.q_proj.bias", vec![896]),
            ("self_attn.k_proj.weight", vec![128, 896]),
            ("self_attn.k_proj.bias", vec![128]),
            ("self_attn.v_proj.weight", vec![128, 896]),
            ("self_attn.v_proj.bias", vec![128]),
            ("self_attn.o_proj.weight", vec![896, 896]),
            ("mlp.gate_proj.weight", vec![4864, 896]),
            ("mlp.up_proj.weight", vec![4864, 896]),
            ("mlp.down_proj.weight", vec![896, 4864]),
            ("input_layernorm.weight", vec![896]),
            ("post_attention_layernorm.weight", vec![896]),
        ] {
            t.push((format!("model.layers.{i}.{n}"), s));
        }
    }
    t.push(("model.norm.weight".into(), vec![896]));
    t
}

fn files() -> HashMap<String, Vec<u8>> {
    let tensors = qwen_tensors();
    let mut f = HashMap::new();
    // A single-file model.
    f.insert("org/qwen/config.json".into(), CONFIG.to_vec());
    f.insert("org/qwen/model.safetensors".into(), safetensors(&tensors, 4096));
    // The same model in two shards with an index; the second shard's header is padded past
    // 100 KB so it needs a second range request.
    let (a, b) = tensors.split_at(150);
    let mut b = b.to_vec();
    for i in 0..3000 {
        b.push((format!("padding.extra_tensor_with_a_long_name_{i:05}"), vec![1]));
    }
    let mut map = serde_json::Map::new();
    for (n, _) in a {
        map.insert(n.clone(), json!("model-00001-of-00002.safetensors"));
    }
    for (n, _) in &b {
        map.insert(n.clone(), json!("model-00002-of-00002.safetensors"));
    }
    f.insert("org/sharded/config.json".into(), CONFIG.to_vec());
    f.insert("org/sharded/model.safetensors.index.json".into(), serde_json::to_vec(&json!({"weight_map": map})).unwrap());
    f.insert("org/sharded/model-00001-of-00002.safetensors".into(), safetensors(a, 64));
    f.insert("org/sharded/model-00002-of-00002.safetensors".into(), safetensors(&b, 64));
    // Only .bin weights: the config alone.
    f.insert("org/binonly/config.json".into(), CONFIG.to_vec());
    // Gated.
    f.insert("gated/qwen/config.json".into(), CONFIG.to_vec());
    f.insert("gated/qwen/model.safetensors".into(), safetensors(&tensors, 64));
    // Hostile: a header length of 200 MB; a header cut short.
    f.insert("bad/huge/config.json".into(), CONFIG.to_vec());
    let mut huge = (200_000_000u64).to_le_bytes().to_vec();
    huge.extend(b"{}");
    f.insert("bad/huge/model.safetensors".into(), huge);
    f.insert("bad/cut/config.json".into(), CONFIG.to_vec());
    let mut cut = (500_000u64).to_le_bytes().to_vec();
    cut.extend(vec![b' '; 1000]);
    f.insert("bad/cut/model.safetensors".into(), cut);
    f
}

fn run(hub: &Hub, cache: &std::path::Path, extra_env: &[(&str, &str)], model: &str) -> std::process::Output {
    let mut c = vram();
    c.args(["estimate", "--json", "-m", model])
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{}", hub.port))
        .env("HF_HOME", cache)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HUB_OFFLINE");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn fetches_config_and_only_the_headers() {
    let hub = serve_hub(files());
    let home = tempfile::tempdir().unwrap();
    let v = ok_json(&run(&hub, home.path(), &[], "org/qwen"));
    assert_eq!(v["model"]["parameters"], 494_032_768);
    assert_eq!(v["model"]["checkpoint_parameters"], 494_032_768);
    assert_eq!(v["model"]["stored_dtype"], "bfloat16");
    let log = hub.log.lock().unwrap().clone();
    // The weights file was only ever asked for its first 100 KB.
    let reqs: Vec<_> = log.iter().filter(|(p, _)| p.ends_with("model.safetensors")).collect();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].1.as_deref(), Some("bytes=0-99999"));
}

#[test]
fn sharded_index_and_a_header_past_100_kb() {
    let hub = serve_hub(files());
    let home = tempfile::tempdir().unwrap();
    let v = ok_json(&run(&hub, home.path(), &[], "org/sharded"));
    let log = hub.log.lock().unwrap().clone();
    // The config's count plus the 3000 one-element padding tensors.
    assert_eq!(v["model"]["checkpoint_parameters"], 494_032_768u64 + 3000);
    let second: Vec<_> = log.iter().filter(|(p, _)| p.ends_with("model-00002-of-00002.safetensors")).collect();
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(second[1].1.as_deref().unwrap().starts_with("bytes=8-"));
}

#[test]
fn a_repository_without_safetensors_uses_the_config() {
    let hub = serve_hub(files());
    let home = tempfile::tempdir().unwrap();
    let v = ok_json(&run(&hub, home.path(), &[], "org/binonly"));
    assert_eq!(v["model"]["parameters"], 494_032_768);
    assert!(v["model"]["checkpoint_parameters"].is_null());
    assert!(v["model"]["warnings"][0].as_str().unwrap().contains("no model.safetensors"));
}

#[test]
fn redirects_are_followed() {
    let hub = serve_hub(files());
    let home = tempfile::tempdir().unwrap();
    let v = ok_json(&run(&hub, home.path(), &[], "old-org/qwen"));
    assert_eq!(v["model"]["checkpoint_parameters"], 494_032_768);
}

#[test]
fn gated_needs_a_token_and_404_is_clear() {
    let hub = serve_hub(files());
    let home = tempfile::tempdir().unwrap();
    let e = err_text(&run(&hub, home.path(), &[], "gated/qwen"));
    assert!(e.contains("gated or private") && e.contains("HF_TOKEN"), "{e}");
    ok_json(&run(&hub, home.path(), &[("HF_TOKEN", "hf_secret")], "gated/qwen"));
    // The token file under HF_HOME works too.
    std::fs::write(home.path().join("token"), "hf_secret\n").unwrap();
    ok_json(&run(&hub, home.path(), &[], "gated/qwen"));
    let e = err_text(&run(&hub, home.path(), &[], "org/does-not-exist"));
    assert!(e.contains("not found") && e.contains("404"), "{e}");
}

#[test]
fn oversized_and_truncated_headers_are_refused() {
    let hub = serve_hub(files());
    let home = tempfile::tempdir().unwrap();
    let e = err_text(&run(&hub, home.path(), &[], "bad/huge"));
    assert!(e.contains("100 MB"), "{e}");
    let e = err_text(&run(&hub, home.path(), &[], "bad/cut"));
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn the_standard_cache_is_used_offline() {
    let home = tempfile::tempdir().unwrap();
    let snap = home.path().join("hub/models--org--cached/snapshots/0123abcd");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(home.path().join("hub/models--org--cached/refs")).unwrap();
    std::fs::write(home.path().join("hub/models--org--cached/refs/main"), "0123abcd").unwrap();
    std::fs::write(snap.join("config.json"), CONFIG).unwrap();
    // A cached file is whole: header, then exactly the data it promises (a sparse tail here).
    let st = safetensors(&qwen_tensors(), 0);
    let data: u64 = qwen_tensors().iter().map(|(_, s)| s.iter().product::<u64>() * 2).sum();
    std::fs::write(snap.join("model.safetensors"), &st).unwrap();
    std::fs::File::options().write(true).open(snap.join("model.safetensors")).unwrap().set_len(st.len() as u64 + data).unwrap();
    // No server at all: port 9 on loopback refuses; offline mode must not even try.
    let hub = Hub { port: 9, log: Arc::default() };
    let v = ok_json(&run(&hub, home.path(), &[("HF_HUB_OFFLINE", "1")], "org/cached"));
    assert_eq!(v["model"]["checkpoint_parameters"], 494_032_768);
    let e = err_text(&run(&hub, home.path(), &[("HF_HUB_OFFLINE", "1")], "org/missing"));
    assert!(e.contains("HF_HUB_OFFLINE") && e.contains("not in the cache"), "{e}");
    // HF_HUB_CACHE points elsewhere.
    let other = tempfile::tempdir().unwrap();
    let e = err_text(&run(&hub, home.path(), &[("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", other.path().to_str().unwrap())], "org/cached"));
    assert!(e.contains(other.path().to_str().unwrap()), "{e}");
}
