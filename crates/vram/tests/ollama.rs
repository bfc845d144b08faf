//! `vram serve` of Ollama: a pasted `OLLAMA_…=… ollama serve` / `ollama run NAME` with the
//! model's GGUF given by `--model`, and `--engine ollama --num-ctx N`.

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

use util::{fails, json, vram};

/// The 4-layer test file (trained context 8192), padded so its promised tensor data is there.
fn tiny(dir: &tempfile::TempDir) -> String {
    gguf_writer::write_tiny_llama(dir.path())
}

fn pasted(args: &[&str]) -> serde_json::Value {
    let out = vram().args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn ollama_serve_with_its_environment_is_llama_cpp_at_num_ctx_times_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let v = pasted(&[
        "serve",
        "-m",
        &p,
        "-g",
        "rtx-4090",
        "--json",
        "--",
        "OLLAMA_NUM_PARALLEL=4",
        "OLLAMA_FLASH_ATTENTION=1",
        "OLLAMA_KV_CACHE_TYPE=q8_0",
        "OLLAMA_CONTEXT_LENGTH=2048",
        "OLLAMA_HOST=0.0.0.0",
        "ollama",
        "serve",
    ]);
    assert_eq!(v["config"]["ctx"], 8192, "2048 × 4 parallel");
    assert_eq!(v["config"]["parallel"], 4);
    // One shared KV cache, each request held to num_ctx.
    assert_eq!(v["plan"]["ctx_per_sequence"], 2048);
    assert_eq!(v["config"]["flash_attn"], true);
    assert!((v["config"]["kv_bytes"].as_f64().unwrap() - 34.0 / 32.0).abs() < 1e-9, "q8_0");
    let notes = v["notes"].to_string();
    assert!(notes.contains("OLLAMA_HOST=0.0.0.0") && notes.contains("num_ctx 2048 × 4 parallel"), "{notes}");
    // The same as typed.
    let typed = json(&[
        "serve",
        "-m",
        &p,
        "-g",
        "rtx-4090",
        "--engine",
        "ollama",
        "--num-ctx",
        "2048",
        "--parallel",
        "4",
        "--flash-attn",
        "1",
        "--kv-cache-dtype",
        "q8_0",
    ]);
    assert_eq!(v["plan"], typed["plan"]);
}

#[test]
fn ollama_run_reads_set_parameter_num_ctx_and_caps_it_at_the_trained_context() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let v =
        pasted(&["serve", "-m", &p, "-g", "rtx-4090", "--json", "--", "ollama", "run", "tiny:4l", "/set", "parameter", "num_ctx", "4096"]);
    assert_eq!((v["config"]["ctx"].as_u64(), v["config"]["flash_attn"].as_bool()), (Some(4096), Some(false)));
    // Above the trained 8192 Ollama lowers it; without flash attention q8_0 KV is f16.
    let v = pasted(&[
        "serve",
        "-m",
        &p,
        "-g",
        "h100",
        "--json",
        "--",
        "OLLAMA_KV_CACHE_TYPE=q8_0",
        "ollama",
        "run",
        "tiny:4l",
        "/set",
        "parameter",
        "num_ctx",
        "100000",
    ]);
    assert_eq!(v["config"]["ctx"], 8192);
    assert_eq!(v["config"]["kv_bytes"], 2.0);
    assert!(v["notes"].to_string().contains("needs flash attention"), "{}", v["notes"]);
}

#[test]
fn ollama_defaults_follow_the_gpu_size() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    // Below 24 GiB Ollama's default num_ctx is 4096 (the 32k tier would be capped at the 8192 trained).
    let v = json(&["serve", "-m", &p, "-g", "16GiB", "--engine", "ollama"]);
    assert_eq!(v["config"]["ctx"], 4096);
    assert!(v["notes"].to_string().contains("Ollama's default for a 16 GiB GPU"), "{}", v["notes"]);
}

#[test]
fn ollama_mistakes_exit_2_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let e = fails(&["serve", "-g", "h100", "--", "ollama", "run", "llama3.1:8b"], 2);
    assert!(e.contains("cannot be resolved offline") && e.contains("llama3.1:8b") && e.contains("ollama show --modelfile"), "{e}");
    assert!(fails(&["serve", "-m", &p, "-g", "h100", "--", "ollama", "pull", "x"], 2).contains("starts no model"));
    assert!(fails(&["serve", "-m", &p, "-g", "h100", "--engine", "ollama", "-c", "4096"], 2).contains("--num-ctx"));
    // llama-server's batch, mmap and mlock flags are not Ollama's: refused, not applied.
    for flag in [&["-b", "1024"][..], &["--ubatch-size", "256"], &["--no-mmap"], &["--mlock"], &["--kv-unified"]] {
        let mut args = vec!["serve", "-m", &p, "-g", "h100", "--engine", "ollama"];
        args.extend_from_slice(flag);
        let e = fails(&args, 2);
        assert!(e.contains("not Ollama's") && e.contains("num_batch"), "{flag:?}: {e}");
    }
    assert!(fails(&["serve", "-m", &p, "-g", "h100", "--num-ctx", "4096"], 2).contains("--engine ollama"));
    assert!(
        fails(&["serve", "-m", &p, "-g", "h100", "--", "OLLAMA_KV_CACHE_TYPE=q5_1", "ollama", "serve"], 2).contains("f16, q8_0 or q4_0")
    );
    assert!(fails(&["serve", "-m", "llama-3-8b", "-g", "h100", "--engine", "ollama"], 2).contains(".gguf"));
}
