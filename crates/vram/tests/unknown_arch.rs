//! Unknown architectures, honestly: a model directory (or Hub cache snapshot) whose config has
//! an unknown `model_type` is estimated from its safetensors headers and marked APPROXIMATE,
//! with the exact parameter count; recognised-but-unsupported families are refused naming that
//! count; a config alone says what is missing; hostile headers are errors, never panics.

mod util;

#[path = "../../vram-core/tests/support/safetensors_writer.rs"]
mod safetensors_writer;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;

use serde_json::{json, Value};
use util::{fails, json, vram};

type Tensors = Vec<(String, &'static str, Vec<u64>)>;

/// A small decoder of a made-up architecture: names no vram reader knows, untied head.
fn my_new_arch() -> Tensors {
    let mut t: Tensors = vec![("model.embed.weight".into(), "BF16", vec![1000, 64])];
    for i in 0..4 {
        for (n, s) in [
            ("norm1.weight", vec![64]),
            ("attn.wqkv.weight", vec![192, 64]),
            ("attn.wo.weight", vec![64, 64]),
            ("norm2.weight", vec![64]),
            ("ffn.w1.weight", vec![256, 64]),
            ("ffn.w2.weight", vec![64, 256]),
        ] {
            t.push((format!("model.blocks.{i}.{n}"), "BF16", s));
        }
    }
    t.push(("model.final_norm.weight".into(), "BF16", vec![64]));
    t.push(("head.weight".into(), "BF16", vec![1000, 64]));
    t
}

/// A two-layer BERT encoder's tensors, as transformers names them.
fn bert() -> Tensors {
    let mut t: Tensors = vec![
        ("bert.embeddings.word_embeddings.weight".into(), "F32", vec![1000, 64]),
        ("bert.embeddings.position_embeddings.weight".into(), "F32", vec![128, 64]),
    ];
    for i in 0..2 {
        for (n, s) in [
            ("attention.self.query.weight", vec![64, 64]),
            ("attention.self.key.weight", vec![64, 64]),
            ("attention.self.value.weight", vec![64, 64]),
            ("attention.output.dense.weight", vec![64, 64]),
            ("intermediate.dense.weight", vec![256, 64]),
            ("output.dense.weight", vec![64, 256]),
            ("output.LayerNorm.weight", vec![64]),
        ] {
            t.push((format!("bert.encoder.layer.{i}.{n}"), "F32", s));
        }
    }
    t
}

fn total(t: &Tensors) -> u64 {
    t.iter().map(|(_, _, s)| s.iter().product::<u64>()).sum()
}

fn write_dir(dir: &Path, config: Option<Value>, tensors: &Tensors) {
    if let Some(c) = config {
        std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
    }
    if !tensors.is_empty() {
        std::fs::write(dir.join("model.safetensors"), safetensors_writer::file(tensors).0).unwrap();
    }
}

#[test]
fn unknown_type_with_headers_is_estimated_approximately_with_exact_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let t = my_new_arch();
    write_dir(dir.path(), Some(json!({"model_type": "my_new_arch", "vocab_size": 1000})), &t);
    let p = dir.path().to_str().unwrap();
    let out = vram().args(["estimate", "-m", p]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("APPROXIMATE: "), "{text}");
    let exact = total(&t);
    let v = json(&["estimate", "-m", p, "--precision", "fp32"]);
    assert_eq!(v["model"]["checkpoint_parameters"], exact, "{v}");
    assert_eq!(v["model"]["parameters"], exact, "{v}");
    let why = v["model"]["approximation"].as_str().unwrap();
    assert!(why.contains("my_new_arch") && why.contains(&format!("{exact} parameters")) && why.contains("`model.blocks` ×4"), "{why}");
    // fp32 training: 4 bytes of weights per exact parameter.
    let params = v["components"].as_array().unwrap().iter().find(|c| c["name"] == "parameters").unwrap();
    assert_eq!(params["bytes"], 4 * exact, "{params}");
}

#[test]
fn a_directory_without_config_uses_the_headers_alone() {
    let dir = tempfile::tempdir().unwrap();
    let t = my_new_arch();
    write_dir(dir.path(), None, &t);
    let v = json(&["estimate", "-m", dir.path().to_str().unwrap()]);
    assert_eq!(v["model"]["checkpoint_parameters"], total(&t));
    assert_eq!(v["model"]["model_type"], "unknown");
    assert!(v["model"]["approximation"].as_str().unwrap().contains("no config.json"), "{v}");
}

#[test]
fn a_hub_cache_snapshot_of_an_unknown_type_is_approximated_too() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--acme--newlm");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    let t = my_new_arch();
    write_dir(&snap, Some(json!({"model_type": "my_new_arch", "vocab_size": 1000})), &t);
    let out = vram()
        .args(["estimate", "-m", "acme/newlm", "--json"])
        .env("HF_HUB_CACHE", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"]["checkpoint_parameters"], total(&t));
    assert!(v["model"]["approximation"].is_string());
}

#[test]
fn a_recognised_family_is_refused_naming_the_exact_count_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let t = bert();
    // BERT and DeBERTa-v2 are read natively now; ALBERT is a recognised encoder family vram refuses.
    let cfg = json!({"model_type": "albert", "architectures": ["AlbertModel"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 1, "intermediate_size": 256, "vocab_size": 1000});
    write_dir(dir.path(), Some(cfg), &t);
    let p = dir.path().to_str().unwrap();
    let err = fails(&["estimate", "-m", p], 2);
    assert!(err.contains(&format!("exactly {} parameters", total(&t))) && err.contains("encoder"), "{err}");
    // Asked for: the header-based stand-in, not the key-based Llama guess.
    let v = json(&["estimate", "-m", p, "--approximate-architecture"]);
    assert_eq!(v["model"]["checkpoint_parameters"], total(&t));
    assert_eq!(v["model"]["parameters"], total(&t));
    let why = v["model"]["approximation"].as_str().unwrap();
    assert!(why.contains("albert") && why.contains("`bert.encoder.layer` ×2"), "{why}");
}

#[test]
fn without_headers_the_error_lists_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    write_dir(dir.path(), Some(json!({"model_type": "my_new_arch", "vocab_size": 1000})), &vec![]);
    let cfg = dir.path().join("config.json");
    for m in [cfg.to_str().unwrap(), dir.path().to_str().unwrap()] {
        let err = fails(&["estimate", "-m", m], 2);
        assert!(err.contains("my_new_arch") && err.contains("hidden_size, num_hidden_layers"), "{err}");
        assert!(err.contains("model directory") && err.contains("Hub id"), "{err}");
    }
}

#[test]
fn hostile_headers_are_errors_not_panics() {
    let cases: Vec<Vec<u8>> = vec![
        u64::MAX.to_le_bytes().to_vec(),
        {
            // Data offsets promising far more than the file holds.
            let h = br#"{"a.0.w":{"dtype":"F32","shape":[1099511627776,4],"data_offsets":[0,17592186044416]}}"#;
            let mut f = (h.len() as u64).to_le_bytes().to_vec();
            f.extend_from_slice(h);
            f
        },
        {
            let h = br#"{"a.0.w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}"#;
            let mut f = (h.len() as u64).to_le_bytes().to_vec();
            f.extend_from_slice(h);
            f
        },
        {
            // Layers but no vocabulary anywhere: too little to go on.
            let t: Tensors = (0..3).map(|i| (format!("blocks.{i}.w"), "F32", vec![8, 8])).collect();
            safetensors_writer::file(&t).0
        },
    ];
    for (i, bytes) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), json!({"model_type": "my_new_arch"}).to_string()).unwrap();
        std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
        let err = fails(&["estimate", "-m", dir.path().to_str().unwrap()], 2);
        assert!(err.contains("safetensors") || err.contains("missing"), "case {i}: {err}");
    }
}

/// A loopback server with the Hub's URL layout (`/{repo}/resolve/main/{file}`), Range
/// requests and 404s; returns its endpoint.
fn serve_hub(files: HashMap<String, Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line.split_whitespace().nth(1).unwrap_or("/").replace("/resolve/main/", "/");
            let mut range = None;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("range: bytes=") {
                    let (a, b) = v.trim().split_once('-').unwrap();
                    range = Some((a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()));
                }
            }
            let (status, body) = match files.get(path.trim_start_matches('/')) {
                None => ("404 Not Found", b"Entry not found".to_vec()),
                Some(f) => match range {
                    Some((a, b)) => ("206 Partial Content", f.get(a..=b.min(f.len().saturating_sub(1))).unwrap_or(&[]).to_vec()),
                    None => ("200 OK", f.clone()),
                },
            };
            let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = stream.write_all(&body);
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn from_the_hub_an_unknown_type_is_approximated_from_range_read_headers() {
    let t = my_new_arch();
    let cfg = json!({"model_type": "my_new_arch", "vocab_size": 1000}).to_string().into_bytes();
    let mut files = HashMap::new();
    files.insert("acme/newlm/config.json".to_string(), cfg.clone());
    files.insert("acme/newlm/model.safetensors".to_string(), safetensors_writer::file(&t).0);
    files.insert("acme/binonly/config.json".to_string(), cfg);
    let endpoint = serve_hub(files);
    let home = tempfile::tempdir().unwrap();
    let run = |model: &str| {
        vram()
            .args(["estimate", "--json", "-m", model])
            .env("HF_ENDPOINT", &endpoint)
            .env("HF_HOME", home.path())
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HUB_OFFLINE")
            .output()
            .unwrap()
    };
    let out = run("acme/newlm");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"]["checkpoint_parameters"], total(&t));
    assert!(v["model"]["approximation"].as_str().unwrap().contains("my_new_arch"), "{v}");
    // No safetensors on the Hub: the refusal says what is missing.
    let out = run("acme/binonly");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hidden_size") && !err.contains("panicked"), "{err}");
}

#[test]
fn serving_an_unknown_type_loads_the_exact_parameter_count() {
    let dir = tempfile::tempdir().unwrap();
    let t = my_new_arch();
    write_dir(dir.path(), Some(json!({"model_type": "my_new_arch", "vocab_size": 1000})), &t);
    let v = json(&["serve", "-m", dir.path().to_str().unwrap(), "-g", "h100", "--max-model-len", "4096"]);
    assert!(v["model"]["approximation"].is_string(), "{v}");
    // bf16 weights of every checkpoint parameter, plus vLLM's padding of the embedding and the
    // untied head to a multiple of 64 rows (VocabParallelEmbedding, serve.rs VOCAB_PAD): 1000 → 1024.
    let padding = 2 * (1024 - 1000) * 64 * 2;
    assert_eq!(v["gpus"][0]["weights_bytes"], 2 * total(&t) + padding, "{}", v["gpus"][0]);
}
