//! "Which quant fits?": `vram serve --model org/name-GGUF` against a real HTTP server on loopback
//! that serves the Hub's file listing (`/api/models/{repo}/tree/{rev}`, paginated by a `Link`
//! header) and its files by Range request; llama-server's `-hf` and `ollama run hf.co/…` pasted;
//! and the Hugging Face cache offline. Every quant of one model (8B-like, 32 layers, a 5 MB
//! header that needs two range requests) in four ggml types, F16 split over two files.

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use gguf_writer::Writer;
use serde_json::{json, Value};
use util::{err_text, ok_json, read_request, respond, vram};

const REPO: &str = "org/m-GGUF";
const LAYERS: u32 = 32;

/// The model's header in one ggml type: metadata, then `layers` of tensors (a split's second
/// shard: only those layers, no metadata but the split keys).
fn header(ggml_type: u32, layers: std::ops::Range<u32>, with_meta: bool, split: Option<(u32, u32)>) -> Writer {
    let mut w = Writer::default();
    if with_meta {
        w.str("general.architecture", "llama")
            .str("general.name", "m")
            .u32("llama.block_count", LAYERS)
            .u32("llama.context_length", 131_072)
            .u32("llama.embedding_length", 4096)
            .u32("llama.feed_forward_length", 14_336)
            .u32("llama.attention.head_count", 32)
            .u32("llama.attention.head_count_kv", 8)
            .f32("llama.rope.freq_base", 500_000.0)
            .tokens(300_000);
    }
    if let Some((no, count)) = split {
        w.u32("split.no", no).u32("split.count", count);
    }
    if with_meta {
        w.tensor("token_embd.weight", &[4096, 300_000], ggml_type);
    }
    for i in layers.clone() {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[4096], gguf_writer::F32)
            .tensor(&format!("blk.{i}.attn_q.weight"), &[4096, 4096], ggml_type)
            .tensor(&format!("blk.{i}.attn_k.weight"), &[4096, 1024], ggml_type)
            .tensor(&format!("blk.{i}.attn_v.weight"), &[4096, 1024], ggml_type)
            .tensor(&format!("blk.{i}.attn_output.weight"), &[4096, 4096], ggml_type)
            .tensor(&format!("blk.{i}.ffn_gate.weight"), &[4096, 14_336], ggml_type)
            .tensor(&format!("blk.{i}.ffn_up.weight"), &[4096, 14_336], ggml_type)
            .tensor(&format!("blk.{i}.ffn_down.weight"), &[14_336, 4096], ggml_type)
            .tensor(&format!("blk.{i}.ffn_norm.weight"), &[4096], gguf_writer::F32);
    }
    if layers.end == LAYERS {
        w.tensor("output_norm.weight", &[4096], gguf_writer::F32).tensor("output.weight", &[4096, 300_000], ggml_type);
    }
    w
}

/// A file: its header bytes and the length the tensor data makes it (the rest reads as zeros).
struct File {
    head: Vec<u8>,
    len: u64,
}

fn file(w: &Writer) -> File {
    let head = w.bytes();
    let g = match vram_core::gguf::parse_with(&head, "t", None).unwrap() {
        vram_core::gguf::Parsed::Complete(g) => g,
        vram_core::gguf::Parsed::NeedMore(_) => panic!("header incomplete"),
    };
    let start = g.header_bytes.next_multiple_of(g.alignment);
    let end = g.tensors.last().map_or(0, |t| t.offset + t.bytes);
    File { head, len: start + end }
}

fn repo_files() -> Vec<(String, File)> {
    vec![
        ("m-Q4_K_M.gguf".into(), file(&header(gguf_writer::Q4_K, 0..LAYERS, true, None))),
        ("m-Q6_K.gguf".into(), file(&header(gguf_writer::Q6_K, 0..LAYERS, true, None))),
        ("m-Q8_0.gguf".into(), file(&header(gguf_writer::Q8_0, 0..LAYERS, true, None))),
        ("F16/m-F16-00001-of-00002.gguf".into(), file(&header(gguf_writer::F16, 0..16, true, Some((0, 2))))),
        ("F16/m-F16-00002-of-00002.gguf".into(), file(&header(gguf_writer::F16, 16..LAYERS, false, Some((1, 2))))),
        ("mmproj-m-F16.gguf".into(), file(&projector())),
    ]
}

/// A Gemma 3 vision projector with a second tensor.
fn projector() -> Writer {
    let mut w = gguf_writer::gemma3_projector();
    w.tensor("mm.input_projection.weight", &[1152, 2560], gguf_writer::F16);
    w
}

/// The projector's weights, bytes.
const PROJECTOR_WEIGHTS: u64 = 2 * (14 * 14 * 3 * 1152 + 1152 * 2560);

/// Every request seen: (path, range header).
type RequestLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// The Hub on loopback: `repos` maps a repository to its files. The tree listing comes in two
/// pages (the second named by a relative `Link` URL, as the Hub sends it).
fn serve_hub(repos: HashMap<String, Vec<(String, File)>>) -> (u16, RequestLog) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let log: RequestLog = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let Some((path, range, _)) = read_request(&stream) else { continue };
            seen.lock().unwrap().push((path.clone(), range.clone()));
            if let Some(rest) = path.strip_prefix("/api/models/") {
                let (repo, query) = rest.split_once("/tree/main").unwrap_or((rest, ""));
                let Some(files) = repos.get(repo) else {
                    respond(stream, "404 Not Found", &[], b"{\"error\":\"Repository not found\"}");
                    continue;
                };
                let mut items: Vec<Value> = files.iter().map(|(p, f)| json!({"type": "file", "path": p, "size": f.len})).collect();
                items.push(json!({"type": "directory", "path": "F16", "size": 0}));
                items.push(json!({"type": "file", "path": "README.md", "size": 1234}));
                let half = items.len() / 2;
                if query.contains("cursor=2") {
                    respond(stream, "200 OK", &[], &serde_json::to_vec(&items[half..]).unwrap());
                } else {
                    let next = format!("</api/models/{repo}/tree/main?recursive=true&cursor=2>; rel=\"next\"");
                    respond(stream, "200 OK", &[("Link", next)], &serde_json::to_vec(&items[..half]).unwrap());
                }
                continue;
            }
            let Some((repo, name)) = path.trim_start_matches('/').split_once("/resolve/main/") else {
                respond(stream, "404 Not Found", &[], b"");
                continue;
            };
            let Some(f) = repos.get(repo).and_then(|fs| fs.iter().find(|(p, _)| p == name)).map(|(_, f)| f) else {
                respond(stream, "404 Not Found", &[], b"Entry not found");
                continue;
            };
            let Some(r) = range.as_deref().and_then(|r| r.strip_prefix("bytes=")) else {
                respond(stream, "500 Internal Server Error", &[], b"the test server serves ranges only");
                continue;
            };
            let (a, b) = r.split_once('-').unwrap();
            let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse::<u64>().unwrap().min(f.len - 1));
            let body: Vec<u8> = (a..=b).map(|i| f.head.get(i as usize).copied().unwrap_or(0)).collect();
            respond(stream, "206 Partial Content", &[("Content-Range", format!("bytes {a}-{b}/{}", f.len))], &body);
        }
    });
    (port, log)
}

fn hub() -> (u16, RequestLog) {
    let mut repos = HashMap::new();
    repos.insert(REPO.to_string(), repo_files());
    repos.insert("org/empty".to_string(), Vec::new());
    serve_hub(repos)
}

fn run(port: u16, cache: &std::path::Path, args: &[&str]) -> std::process::Output {
    vram()
        .args(args)
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("HF_HOME", cache)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap()
}

/// A sparse local copy of a file: its header, then the length the tensor data makes it.
fn write_sparse(path: &std::path::Path, f: &File) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, &f.head).unwrap();
    std::fs::File::options().write(true).open(path).unwrap().set_len(f.len).unwrap();
}

#[test]
fn every_quant_is_listed_with_its_plan_and_the_largest_that_fits_is_named() {
    let (port, log) = hub();
    let cache = tempfile::tempdir().unwrap();
    let v = ok_json(&run(port, cache.path(), &["serve", "--model", REPO, "--gpu", "12GiB", "--json"]));
    let quants = v["quants"].as_array().unwrap();
    let names: Vec<&str> = quants.iter().map(|q| q["quant"].as_str().unwrap()).collect();
    // Smallest first; the projector is left out and said so; the split F16 is one quant.
    assert_eq!(names, ["Q4_K_M", "Q6_K", "Q8_0", "F16"]);
    let files = repo_files();
    let len = |n: &str| files.iter().find(|(p, _)| p == n).unwrap().1.len;
    assert_eq!(quants[3]["file_bytes"].as_u64().unwrap(), len("F16/m-F16-00001-of-00002.gguf") + len("F16/m-F16-00002-of-00002.gguf"));
    assert!(v["notes"].to_string().contains("mmproj-m-F16.gguf"), "{}", v["notes"]);
    for q in &quants[..3] {
        assert_eq!(q["fits"], true, "{q}");
        assert!(q["max_n_gpu_layers"].is_null());
    }
    // 15 GiB of F16 weights do not fit 12 GiB: some layers do.
    let f16 = &quants[3];
    assert_eq!(f16["fits"], false);
    let ngl = f16["max_n_gpu_layers"].as_u64().unwrap();
    assert!((10..LAYERS as u64).contains(&ngl), "{f16}");
    assert_eq!(v["best"], "Q8_0");
    // No -c: each row at the context llama-server's --fit picks for the file (the 131,072-token
    // training context cut to leave 1 GiB free), smaller for larger files.
    assert_eq!(v["ctx_fitted"], true);
    let fitted: Vec<u64> = quants[..3].iter().map(|q| q["ctx"].as_u64().unwrap()).collect();
    assert!(fitted.iter().all(|c| c % 256 == 0 && *c >= 4096 && *c < 131_072), "{fitted:?}");
    assert!(fitted.windows(2).all(|w| w[0] >= w[1]), "{fitted:?}");
    assert!(v["notes"].to_string().contains("--fit picks"), "{}", v["notes"]);
    // At the contexts --fit picks, each quant that fits fills the 12 GiB GPU up to the fit's
    // margin; the F16 file is larger than any of them. Larger files leave shorter contexts.
    let gpu: Vec<u64> = quants.iter().map(|q| q["gpu_total_bytes"].as_u64().unwrap()).collect();
    assert!(gpu[..3].iter().all(|&g| g <= 12 << 30 && g > 10 << 30), "{gpu:?}");
    assert!(gpu[3] > *gpu[..3].iter().max().unwrap(), "{gpu:?}");
    let ctx: Vec<u64> = quants[..3].iter().map(|q| q["max_ctx_size"].as_u64().unwrap()).collect();
    assert!(ctx.windows(2).all(|w| w[0] > w[1]), "{ctx:?}");
    // Headers only: every file request is a range of at most 16 MiB; the listing took two pages;
    // the 5 MB header took a second, longer range.
    let reqs = log.lock().unwrap().clone();
    let tree: Vec<_> = reqs.iter().filter(|(p, _)| p.starts_with("/api/models/")).collect();
    assert_eq!(tree.len(), 2, "{tree:?}");
    let q8: Vec<_> = reqs.iter().filter(|(p, _)| p.ends_with("m-Q8_0.gguf")).collect();
    assert_eq!(q8.len(), 2, "{q8:?}");
    for (p, r) in reqs.iter().filter(|(p, _)| p.contains("/resolve/")) {
        let r = r.as_deref().unwrap_or_else(|| panic!("{p} fetched whole"));
        let (a, b) = r.trim_start_matches("bytes=").split_once('-').unwrap();
        assert!(b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() < 16 << 20, "{p} {r}");
    }
    // The projector -hf loads beside every quant: its header read once, by range.
    let mm: Vec<_> = reqs.iter().filter(|(p, _)| p.contains("mmproj")).collect();
    assert_eq!(mm.len(), 1, "{mm:?}");
    assert!(v["notes"].to_string().contains("find_best_mmproj"), "{}", v["notes"]);

    // Without it (--no-mmproj), each row is lighter by its weights and the vision encoder's
    // warm-up buffer, and is the plan `serve` makes of the file itself.
    let bare = ok_json(&run(port, cache.path(), &["serve", "--model", REPO, "--gpu", "12GiB", "--json", "--no-mmproj"]));
    assert!(bare["notes"].to_string().contains("--no-mmproj: the repository's multimodal projector"), "{}", bare["notes"]);
    for (q, b) in quants.iter().zip(bare["quants"].as_array().unwrap()) {
        let extra = q["gpu_total_bytes"].as_u64().unwrap() - b["gpu_total_bytes"].as_u64().unwrap() - PROJECTOR_WEIGHTS;
        assert!((extra as f64 / (1u64 << 20) as f64 - 121.25).abs() < 0.05, "{} MiB", extra >> 20);
    }
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("m-Q8_0.gguf");
    write_sparse(&local, &files[2].1);
    let whole = ok_json(&run(port, cache.path(), &["serve", "--model", local.to_str().unwrap(), "--gpu", "12GiB", "--json"]));
    assert_eq!(whole["plan"]["gpu_total_bytes"], bare["quants"][2]["gpu_total_bytes"]);
    // One quant by name: the plan of the file with the projector beside it (`--mmproj FILE`).
    let local_mm = dir.path().join("mmproj-m-F16.gguf");
    write_sparse(&local_mm, &files[5].1);
    let with_mm = ok_json(&run(
        port,
        cache.path(),
        &["serve", "--model", local.to_str().unwrap(), "--gpu", "12GiB", "--json", "--mmproj", local_mm.to_str().unwrap()],
    ));
    let one = ok_json(&run(port, cache.path(), &["serve", "--model", &format!("{REPO}:q8_0"), "--gpu", "12GiB", "--json"]));
    assert_eq!(one["plan"], with_mm["plan"]);
    assert_eq!(one["plan"]["gpu_total_bytes"], quants[2]["gpu_total_bytes"]);
    assert_eq!(one["file"], format!("{REPO}:Q8_0"));
    assert!(one["notes"].to_string().contains("org/m-GGUF/mmproj-m-F16.gguf (the projector -hf loads"), "{}", one["notes"]);
    // A pasted llama-server -hf … --no-mmproj loads none.
    let pasted = ok_json(&run(
        port,
        cache.path(),
        &["serve", "--gpu", "12GiB", "--json", "--", "llama-server", "-hf", &format!("{REPO}:Q8_0"), "--no-mmproj"],
    ));
    assert_eq!(pasted["plan"], whole["plan"]);

    // The text names the best and how to see its plan.
    let out = run(port, cache.path(), &["serve", "--model", REPO, "--gpu", "12GiB", "-c", "8192"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("best that fits: Q8_0"), "{text}");
    assert!(text.contains("--ctx-size 8192"), "{text}");
    assert!(text.contains("GiB = 2^30"), "{text}");
}

#[test]
fn a_quant_that_does_not_fit_is_offered_the_largest_smaller_one_that_does() {
    let (port, _) = hub();
    let cache = tempfile::tempdir().unwrap();
    // By default llama-server's --fit moves layers to RAM until it fits (said so); with -ngl 99,
    // as launch guides write it, it does not fit.
    let fitted = ok_json(&run(port, cache.path(), &["serve", "--model", &format!("{REPO}:F16"), "--gpu", "12GiB", "--json"]));
    assert_eq!(fitted["fits"], true);
    assert!(fitted["plan"]["cpu_weights_bytes"].as_u64().unwrap() > 0);
    assert!(fitted["notes"].to_string().contains("weights move to RAM"), "{}", fitted["notes"]);
    let v = ok_json(&run(port, cache.path(), &["serve", "--model", &format!("{REPO}:F16"), "--gpu", "12GiB", "--json", "-ngl", "99"]));
    assert_eq!(v["fits"], false);
    let alts = v["advice"]["alternatives"].as_array().unwrap_or_else(|| panic!("{}", v["advice"]));
    let quant = alts.iter().find(|a| a["change"] == "quantized-weights").unwrap_or_else(|| panic!("{alts:?}"));
    assert_eq!(quant["flags"][0]["name"], "-hf");
    assert_eq!(quant["flags"][0]["value"], format!("{REPO}:Q8_0"));
    assert_eq!(quant["fits"], true);
    // It ranks before the alternatives that shorten the context or offload layers.
    assert_eq!(alts[0]["change"], "quantized-weights", "{alts:?}");
    let out = run(port, cache.path(), &["serve", "--model", &format!("{REPO}:F16"), "--gpu", "12GiB", "-ngl", "99"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("-hf {REPO}:Q8_0")), "{}", String::from_utf8_lossy(&out.stdout));
    // A quant that fits gets no such advice.
    let v = ok_json(&run(port, cache.path(), &["serve", "--model", &format!("{REPO}:Q4_K_M"), "--gpu", "12GiB", "--json"]));
    assert!(!v["advice"].to_string().contains("quantized-weights"), "{}", v["advice"]);
}

#[test]
fn a_split_quant_is_planned_over_all_its_shards() {
    let (port, _) = hub();
    let cache = tempfile::tempdir().unwrap();
    let v = ok_json(&run(port, cache.path(), &["serve", "--model", &format!("{REPO}:F16"), "--gpu", "80GiB", "--json"]));
    // Every layer's tensors, from both shards: 32 layers × 9 + embeddings, norm and output.
    assert_eq!(v["gguf"]["tensors"], 32 * 9 + 3);
    assert_eq!(v["fits"], true);
    assert!(v["notes"].to_string().contains("m-F16-00001-of-00002.gguf + F16/m-F16-00002-of-00002.gguf"), "{}", v["notes"]);
}

#[test]
fn llama_server_hf_and_ollama_hf_co_are_read_from_the_hub() {
    let (port, _) = hub();
    let cache = tempfile::tempdir().unwrap();
    // -hf with no quant: llama.cpp's default, Q4_K_M, said so.
    let v = ok_json(&run(
        port,
        cache.path(),
        &["serve", "--gpu", "24GiB", "--json", "--", "llama-server", "-hf", REPO, "-c", "8192", "-ngl", "99"],
    ));
    assert_eq!(v["file"], format!("{REPO}:Q4_K_M"));
    assert_eq!(v["config"]["ctx"], 8192);
    assert!(v["notes"].to_string().contains("names no quant"), "{}", v["notes"]);
    let v = ok_json(&run(port, cache.path(), &["serve", "--gpu", "24GiB", "--json", "--", "llama-server", "-hf", &format!("{REPO}:Q6_K")]));
    assert_eq!(v["file"], format!("{REPO}:Q6_K"));
    let v =
        ok_json(&run(port, cache.path(), &["serve", "--gpu", "24GiB", "--json", "--", "llama-server", "-hf", REPO, "-hff", "m-Q8_0.gguf"]));
    assert_eq!(v["file"], format!("{REPO}:Q8_0"));
    let v = ok_json(&run(port, cache.path(), &["serve", "--gpu", "24GiB", "--json", "--", "ollama", "run", &format!("hf.co/{REPO}:Q6_K")]));
    assert_eq!(v["file"], format!("{REPO}:Q6_K"));
    assert_eq!(v["engine"], "llama.cpp");
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let (port, _) = hub();
    let cache = tempfile::tempdir().unwrap();
    let e = err_text(&run(port, cache.path(), &["serve", "--model", &format!("{REPO}:Q3_K_S"), "--gpu", "24GiB"]));
    assert!(e.contains("no quant `Q3_K_S`") && e.contains("Q4_K_M, Q6_K, Q8_0, F16"), "{e}");
    let e = err_text(&run(port, cache.path(), &["serve", "--model", "org/empty", "--engine", "llama.cpp", "--gpu", "24GiB"]));
    assert!(e.contains("has no .gguf file"), "{e}");
    let e = err_text(&run(port, cache.path(), &["serve", "--model", "org/missing-GGUF", "--gpu", "24GiB"]));
    assert!(e.contains("org/missing-GGUF"), "{e}");
    let log = cache.path().join("startup.log");
    std::fs::write(&log, "load_tensors:        CUDA0 model buffer size =  4403.49 MiB\n").unwrap();
    let e = err_text(&run(port, cache.path(), &["serve", "--model", REPO, "--gpu", "24GiB", "--log", log.to_str().unwrap()]));
    assert!(e.contains("name the quant"), "{e}");
    let e = err_text(&run(port, cache.path(), &["serve", "--model", REPO, "--gpu", "24GiB", "--engine", "sglang"]));
    assert!(e.contains("llama.cpp"), "{e}");
}

#[test]
fn offline_the_cache_is_listed_and_read_without_a_request() {
    let (port, log) = hub();
    let cache = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let root = cache.path().join("hub").join("models--org--m-GGUF");
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs").join("main"), commit).unwrap();
    let files = repo_files();
    for i in [0, 2] {
        write_sparse(&root.join("snapshots").join(commit).join(&files[i].0), &files[i].1);
    }
    let out = vram()
        .args(["serve", "--model", REPO, "--gpu", "12GiB", "--json"])
        .env("HF_ENDPOINT", format!("http://127.0.0.1:{port}"))
        .env("HF_HOME", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_HUB_CACHE")
        .output()
        .unwrap();
    let v = ok_json(&out);
    let names: Vec<&str> = v["quants"].as_array().unwrap().iter().map(|q| q["quant"].as_str().unwrap()).collect();
    assert_eq!(names, ["Q4_K_M", "Q8_0"]);
    assert_eq!(v["best"], "Q8_0");
    assert!(log.lock().unwrap().is_empty(), "offline made requests: {:?}", log.lock().unwrap());
    // Not cached, offline: a clear error.
    let out = vram()
        .args(["serve", "--model", "org/other-GGUF", "--gpu", "12GiB"])
        .env("HF_HOME", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_HUB_CACHE")
        .output()
        .unwrap();
    assert!(err_text(&out).contains("HF_HUB_OFFLINE"));
}

#[test]
fn llama_server_launches_are_emitted_for_files_and_hub_quants() {
    let (port, _) = hub();
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("m-Q8_0.gguf");
    write_sparse(&local, &repo_files()[2].1);
    let local = local.to_str().unwrap();
    let text = |args: &[&str]| {
        let out = run(port, cache.path(), args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The command, in llama.cpp's spelling, with the flags the estimate used.
    let cmd = text(&[
        "serve",
        "--model",
        local,
        "--gpu",
        "12GiB",
        "-c",
        "8192",
        "--ngl",
        "99",
        "-b",
        "1024",
        "--mlock",
        "--emit",
        "llama-server",
    ]);
    assert!(cmd.contains(&format!("llama-server -m {local}")) && cmd.contains("-c 8192") && cmd.contains("-ngl 99"), "{cmd}");
    assert!(cmd.contains("-b 1024") && cmd.contains("--mlock"), "the host-memory and batch flags the plan read: {cmd}");
    assert!(!cmd.contains("WARNING"), "{cmd}");
    // Docker: ggml-org's server image, the file's directory mounted read-only at /models.
    let compose = text(&["serve", "--model", local, "--gpu", "12GiB", "--emit", "docker"]);
    assert!(compose.contains("ghcr.io/ggml-org/llama.cpp:server-cuda"), "{compose}");
    assert!(compose.contains(":/models:ro") && compose.contains("\"/models/m-Q8_0.gguf\""), "{compose}");
    assert!(compose.contains("\"--port\", \"8080\""), "{compose}");
    // Kubernetes needs a model the pod can download.
    let e = err_text(&run(port, cache.path(), &["serve", "--model", local, "--gpu", "12GiB", "--emit", "k8s"]));
    assert!(e.contains("org/name:QUANT"), "{e}");
    let k8s = text(&["serve", "--model", &format!("{REPO}:Q4_K_M"), "--gpu", "12GiB", "--emit", "k8s"]);
    assert!(k8s.contains(&format!("\"-hf\", \"{REPO}:Q4_K_M\"")) && k8s.contains("nvidia.com/gpu: 1"), "{k8s}");
    // A quant that does not fit is written with a warning; the first alternative swaps the quant.
    let f16 = text(&["serve", "--model", &format!("{REPO}:F16"), "--gpu", "12GiB", "-ngl", "99", "--emit", "llama-server"]);
    assert!(f16.contains("WARNING") && f16.contains(&format!("-hf {REPO}:F16")), "{f16}");
    let alt = text(&[
        "serve",
        "--model",
        &format!("{REPO}:F16"),
        "--gpu",
        "12GiB",
        "-ngl",
        "99",
        "--emit",
        "llama-server",
        "--emit-alternative",
        "1",
    ]);
    assert!(!alt.contains("WARNING") && alt.contains(&format!("-hf {REPO}:Q8_0")), "{alt}");
    // vLLM and SGLang launches are not written for GGUF; a table is not one launch.
    let e = err_text(&run(port, cache.path(), &["serve", "--model", local, "--gpu", "12GiB", "--emit", "vllm"]));
    assert!(e.contains("llama-server"), "{e}");
    let e = err_text(&run(port, cache.path(), &["serve", "--model", REPO, "--gpu", "12GiB", "--emit", "llama-server"]));
    assert!(e.contains("name the quant"), "{e}");
}

/// A qwen3moe-style file in one ggml type: 24 layers, 64 experts of 768 (about 4 GiB of experts
/// in Q4_K), attention and embeddings small beside them.
fn moe_header(ggml_type: u32) -> Writer {
    let mut w = Writer::default();
    w.str("general.architecture", "qwen3moe")
        .str("general.name", "moe")
        .u32("qwen3moe.block_count", 24)
        .u32("qwen3moe.context_length", 32768)
        .u32("qwen3moe.embedding_length", 2048)
        .u32("qwen3moe.feed_forward_length", 6144)
        .u32("qwen3moe.expert_feed_forward_length", 768)
        .u32("qwen3moe.expert_count", 64)
        .u32("qwen3moe.expert_used_count", 8)
        .u32("qwen3moe.attention.head_count", 16)
        .u32("qwen3moe.attention.head_count_kv", 4)
        .tokens(1024);
    w.tensor("token_embd.weight", &[2048, 1024], ggml_type);
    for i in 0..24 {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[2048], gguf_writer::F32)
            .tensor(&format!("blk.{i}.attn_q.weight"), &[2048, 2048], ggml_type)
            .tensor(&format!("blk.{i}.attn_k.weight"), &[2048, 512], ggml_type)
            .tensor(&format!("blk.{i}.attn_v.weight"), &[2048, 512], ggml_type)
            .tensor(&format!("blk.{i}.attn_output.weight"), &[2048, 2048], ggml_type)
            .tensor(&format!("blk.{i}.ffn_norm.weight"), &[2048], gguf_writer::F32)
            .tensor(&format!("blk.{i}.ffn_gate_inp.weight"), &[2048, 64], gguf_writer::F32)
            .tensor(&format!("blk.{i}.ffn_gate_exps.weight"), &[2048, 768, 64], ggml_type)
            .tensor(&format!("blk.{i}.ffn_up_exps.weight"), &[2048, 768, 64], ggml_type)
            .tensor(&format!("blk.{i}.ffn_down_exps.weight"), &[768, 2048, 64], ggml_type);
    }
    w.tensor("output_norm.weight", &[2048], gguf_writer::F32).tensor("output.weight", &[2048, 1024], ggml_type);
    w
}

#[test]
fn a_moe_quant_that_does_not_fit_gets_the_fewest_expert_layers_to_keep_in_ram() {
    let mut repos = HashMap::new();
    repos.insert(
        "org/moe-GGUF".to_string(),
        vec![
            ("moe-Q4_K_M.gguf".to_string(), file(&moe_header(gguf_writer::Q4_K))),
            ("moe-Q8_0.gguf".to_string(), file(&moe_header(gguf_writer::Q8_0))),
        ],
    );
    let (port, _) = serve_hub(repos);
    let cache = tempfile::tempdir().unwrap();
    let v = ok_json(&run(port, cache.path(), &["serve", "--model", "org/moe-GGUF", "--gpu", "4GiB", "--json"]));
    let q = v["quants"].as_array().unwrap();
    let q8 = q.iter().find(|r| r["quant"] == "Q8_0").unwrap();
    assert_eq!(q8["fits"], false);
    let n = q8["min_n_cpu_moe"].as_u64().unwrap_or_else(|| panic!("{q8}"));
    assert!((1..=24).contains(&n), "{q8}");
    // The file's own plan agrees: n fits, n − 1 does not.
    let plan = |k: u64| {
        ok_json(&run(
            port,
            cache.path(),
            &["serve", "--model", "org/moe-GGUF:Q8_0", "--gpu", "4GiB", "--n-cpu-moe", &k.to_string(), "--json"],
        ))["fits"]
            .clone()
    };
    assert_eq!(plan(n), true);
    assert_eq!(plan(n - 1), false);
    let out = run(port, cache.path(), &["serve", "--model", "org/moe-GGUF", "--gpu", "4GiB"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("min --n-cpu-moe"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// `--lora` with the quant table: every quant carries the adapter (checked against its own
/// header), so each row's GPU total grows by the adapter's pairs and their products' bound.
#[test]
fn the_quant_table_carries_the_lora_adapters() {
    let (port, _) = hub();
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Rank 16 f16 on every layer's attn_q: 16 × (4096 + 4096) × 2 bytes a layer.
    let mut w = gguf_writer::lora_header("llama", "adapter");
    for i in 0..LAYERS {
        w.tensor(&format!("blk.{i}.attn_q.weight.lora_a"), &[4096, 16], gguf_writer::F16);
        w.tensor(&format!("blk.{i}.attn_q.weight.lora_b"), &[16, 4096], gguf_writer::F16);
    }
    let adapter = gguf_writer::write_padded(dir.path(), "a.gguf", &w);
    let table = |extra: &[&str]| {
        let mut args = vec!["serve", "--model", REPO, "--gpu", "80GiB", "-c", "8192", "--json"];
        args.extend(extra);
        ok_json(&run(port, cache.path(), &args))
    };
    let (bare, with) = (table(&[]), table(&["--lora", &adapter]));
    let pairs = u64::from(LAYERS) * 16 * 8192 * 2;
    for (b, l) in bare["quants"].as_array().unwrap().iter().zip(with["quants"].as_array().unwrap()) {
        let grew = l["gpu_total_bytes"].as_u64().unwrap() - b["gpu_total_bytes"].as_u64().unwrap();
        // The products' bound: (2 × 4096 + 16) rows × 512 tokens × 4 bytes.
        assert_eq!(grew, pairs + (2 * 4096 + 16) * 512 * 4, "{}", l["quant"]);
    }
}
