//! Regression tests for the CLI defects of issue 11: each runs the real binary on input the old
//! code answered wrongly or silently (exit 0), and checks the clear error or right answer now.

mod util;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use util::{fails, json, vram};

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

const CONFIG: &[u8] = include_bytes!("../../vram-core/presets/qwen2.5-0.5b.json");

/// `--gpu 80` was 80 bytes ("does not fit", exit 0); every size flag refuses a bare number.
#[test]
fn bare_numbers_are_not_sizes() {
    let e = fails(&["estimate", "-m", "gpt2", "--gpu", "80"], 2);
    assert!(e.contains("80GB") && e.contains("80GiB") && e.contains("vram gpus"), "{e}");
    fails(&["fit", "-m", "gpt2", "--gpu", "24"], 2);
    for flag in ["--cuda-context", "--cublas-workspace"] {
        assert!(fails(&["estimate", "-m", "gpt2", flag, "512"], 2).contains("512MiB"), "{flag}");
    }
    fails(&["serve", "-m", "gpt2", "-g", "h100", "--non-torch-memory", "300"], 2);
    fails(&["estimate", "-m", "gpt2", "--gpus", "2", "--nccl-buffer", "256"], 2);
    // With a unit it still works.
    assert_eq!(json(&["estimate", "-m", "gpt2", "--gpu", "80GB"])["gpu"]["memory_bytes"], 80_000_000_000u64);
}

/// Training-only flags under --mode infer (and the reverse) were silently ignored.
#[test]
fn flags_of_the_other_mode_are_refused() {
    for flag in [
        &["--optimizer", "sgd"][..],
        &["--optimizer-impl", "fused"],
        &["--grad-accum", "4"],
        &["--checkpointing", "full"],
        &["--fused-cross-entropy"],
        &["--use-cache", "false"],
    ] {
        let mut args = vec!["estimate", "-m", "gpt2", "--mode", "infer"];
        args.extend_from_slice(flag);
        let e = fails(&args, 2);
        assert!(e.contains(flag[0]) && e.contains("training"), "{e}");
    }
    for flag in [&["--kv-dtype", "fp8"][..], &["--prompt-len", "100"]] {
        let mut args = vec!["estimate", "-m", "gpt2"];
        args.extend_from_slice(flag);
        assert!(fails(&args, 2).contains(flag[0]));
    }
    for flag in [&["--zero", "3"][..], &["--fsdp", "full_shard"]] {
        let mut args = vec!["estimate", "-m", "gpt2", "--mode", "infer", "--gpus", "8"];
        args.extend_from_slice(flag);
        assert!(fails(&args, 2).contains(flag[0]));
    }
}

/// `--offload optimizer` alone became "Ddp on 8 GPUs … CPU offload".
#[test]
fn offload_needs_an_engine_and_the_gpu_count_is_never_invented() {
    let e = fails(&["estimate", "-m", "gpt2", "--gpus", "8", "--offload", "optimizer"], 2);
    assert!(e.contains("--zero") && e.contains("--fsdp"), "{e}");
    let e = fails(&["estimate", "-m", "gpt2", "--zero", "2"], 2);
    assert!(e.contains("--gpus"), "{e}");
    fails(&["estimate", "-m", "gpt2", "--nodes", "2"], 2);
    let v = json(&["estimate", "-m", "gpt2", "--nodes", "2", "--gpus-per-node", "4", "--zero", "2"]);
    assert_eq!(v["parallel"]["gpus"], 8);
}

/// `--nodes 4611686018427387905 --gpus-per-node 4` wrapped to 4 GPUs; `--global-batch-size 0`
/// said "add GPUs".
#[test]
fn gpu_counts_and_global_batches_are_bounded() {
    let e = fails(&["estimate", "-m", "gpt2", "--nodes", "4611686018427387905", "--gpus-per-node", "4", "--zero", "2"], 2);
    assert!(e.contains("overflows"), "{e}");
    for cmd in [&["fit", "-m", "gpt2", "-g", "h100"][..], &["plan", "-m", "gpt2", "-g", "h100", "--gpus", "8"]] {
        for n in ["0", "16777217"] {
            let mut args = cmd.to_vec();
            args.extend_from_slice(&["--global-batch-size", n]);
            assert!(fails(&args, 2).contains("2^24"), "{args:?}");
        }
    }
}

/// Exit codes were not scriptable: "does not fit" exited 0.
#[test]
fn fail_if_oom_exits_3() {
    let out = vram().args(["estimate", "-m", "llama-3.1-70b", "--gpu", "24GiB", "--fail-if-oom"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("does NOT fit"), "the report is still printed");
    vram().args(["estimate", "-m", "gpt2", "--gpu", "h100", "--fail-if-oom"]).assert().code(0);
    vram().args(["fit", "-m", "llama-3.1-70b", "--gpu", "24GiB", "--fail-if-oom"]).assert().code(3);
    vram().args(["fit", "-m", "gpt2", "--gpu", "h100", "--fail-if-oom"]).assert().code(0);
    fails(&["estimate", "-m", "gpt2", "--fail-if-oom"], 2);
    let help = vram().arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("3 does not fit"));
}

/// `estimate --help` was 75 ungrouped lines; defaults were missing.
#[test]
fn estimate_help_is_grouped() {
    let out = vram().args(["estimate", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for heading in ["Model:", "Job:", "Precision & optimizer:", "Parallelism:", "Device assumptions:", "Output:"] {
        assert!(help.contains(heading), "missing {heading}");
    }
    for default in ["[default: adamw]", "[default: none]", "[default: 512MiB]", "[default: train]"] {
        assert!(help.contains(default), "missing {default}");
    }
}

/// `serve --help` claimed the model's context for --ctx-size; `-ngl`/`-c` were rejected.
#[test]
fn llama_cpp_spellings_and_ctx_default() {
    let help = vram().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("training context") && help.contains("--fit-target") && !help.contains("default: the model's context length"),
        "{help}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    std::fs::write(&path, gguf_writer::tiny_llama().bytes()).unwrap();
    // The writer emits the header only; the tensor data it promises is a sparse tail.
    std::fs::File::options().write(true).open(&path).unwrap().set_len(4 << 20).unwrap();
    let p = path.to_str().unwrap();
    let v = json(&["serve", "-m", p, "-g", "24GiB", "-ngl", "1", "-c", "1024", "-np", "2"]);
    assert_eq!(v["config"]["n_gpu_layers"], 1);
    assert_eq!(v["config"]["ctx"], 1024);
    assert_eq!(v["config"]["parallel"], 2);
    let v = json(&["serve", "-m", p, "-g", "24GiB", "--ngl", "2"]);
    assert_eq!(v["config"]["n_gpu_layers"], 2);
    // Current llama.cpp's default: the training context (`n_ctx = 0`), which fits here.
    let train = json(&["serve", "-m", p, "-g", "24GiB"]);
    assert_eq!(train["config"]["ctx"], train["hparams"]["context_length"], "{train}");
}

/// A .gguf (or a text file) under estimate said "not valid JSON".
#[test]
fn weight_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    std::fs::write(&gguf, gguf_writer::tiny_llama().bytes()).unwrap();
    let e = fails(&["estimate", "-m", gguf.to_str().unwrap()], 2);
    assert!(e.contains("GGUF") && e.contains("vram serve"), "{e}");
    let cases: [(&str, &[u8], &str); 4] = [
        ("w.safetensors", b"\x10\0\0\0\0\0\0\0{\"a\":1}        ", "safetensors"),
        ("pytorch_model.bin", b"PK\x03\x04rest", "zip"),
        ("old.pt", b"\x80\x02}q\0.", "pickle"),
        ("notes.txt", b"hello world", "not JSON"),
    ];
    for (name, bytes, what) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let e = fails(&["fit", "-m", p.to_str().unwrap(), "-g", "h100"], 2);
        assert!(e.contains(what), "{name}: {e}");
    }
}

/// A FIFO as a weight file hung forever.
#[cfg(unix)]
#[test]
fn fifos_are_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), CONFIG).unwrap();
    let mkfifo = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    mkfifo(&dir.path().join("model.safetensors"));
    let gguf = dir.path().join("x.gguf");
    mkfifo(&gguf);
    let t = Instant::now();
    let e = fails(&["estimate", "-m", dir.path().to_str().unwrap()], 2);
    assert!(e.contains("not a regular file"), "{e}");
    let e = fails(&["serve", "-m", gguf.to_str().unwrap(), "-g", "h100"], 2);
    assert!(e.contains("not a regular file"), "{e}");
    // Opening a FIFO for reading blocks until a writer comes, which never happens here.
    assert!(t.elapsed() < Duration::from_secs(60));
}

/// A crafted refs/main pointing outside the cache was followed.
#[test]
fn cached_refs_stay_inside_the_cache() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("hub/models--org--name");
    std::fs::create_dir_all(root.join("refs")).unwrap();
    let outside = home.path().join("evil");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("config.json"), CONFIG).unwrap();
    std::fs::create_dir_all(root.join("snapshots")).unwrap();
    std::fs::write(root.join("refs/main"), "../../../evil").unwrap();
    let out = vram().args(["estimate", "-m", "org/name"]).env("HF_HOME", home.path()).env("HF_HUB_OFFLINE", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a commit hash"));
}

/// A model from the cache was named by its snapshot hash; -Instruct ids found no preset offline.
#[test]
fn cache_names_and_instruct_presets() {
    let home = tempfile::tempdir().unwrap();
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let root = home.path().join("hub/models--org--tiny-qwen");
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::create_dir_all(root.join("snapshots").join(commit)).unwrap();
    std::fs::write(root.join("snapshots").join(commit).join("config.json"), CONFIG).unwrap();
    std::fs::write(root.join("refs/main"), commit).unwrap();
    let run = |id: &str| {
        let out = vram().args(["estimate", "-m", id, "--json"]).env("HF_HOME", home.path()).env("HF_HUB_OFFLINE", "1").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(run("org/tiny-qwen")["model"]["name"], "org/tiny-qwen@0123456789ab");
    let v = run("meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(v["model"]["parameters"], json(&["estimate", "-m", "llama-3.1-8b"])["model"]["parameters"]);
    assert!(v["model"]["warnings"][0].as_str().unwrap().contains("using preset llama-3.1-8b"));
}

/// A Hub server trickling one byte every few seconds stalled the fetch forever.
#[test]
fn hub_fetches_have_a_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = stream;
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{");
                for _ in 0..100 {
                    std::thread::sleep(Duration::from_millis(700));
                    if s.write_all(b" ").is_err() {
                        return;
                    }
                }
            });
        }
    });
    let home = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let out = vram()
        .args(["estimate", "-m", "org/slow-model"])
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", format!("http://{addr}"))
        .env("VRAM_HUB_TIMEOUT", "2")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(t.elapsed() < Duration::from_secs(30), "took {:?}", t.elapsed());
    assert!(!out.status.success());
    assert!(err.contains("VRAM_HUB_TIMEOUT"), "{err}");
}

/// One engine's flags given for a model the other engine serves were silently ignored.
#[test]
fn serve_refuses_the_other_engines_flags() {
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "-ngl", "10"], 2);
    assert!(e.contains("-ngl") && e.contains("llama.cpp flag") && e.contains("--max-model-len"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    std::fs::write(&path, gguf_writer::tiny_llama().bytes()).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(4 << 20).unwrap();
    let e = fails(&["serve", "-m", path.to_str().unwrap(), "-g", "h100", "--tensor-parallel-size", "2"], 2);
    assert!(e.contains("--tensor-parallel-size") && e.contains("vLLM flag"), "{e}");
}

/// Flags a searching command decides itself were accepted and silently overridden.
#[test]
fn searched_flags_are_refused_not_overridden() {
    let e = fails(&["fit", "-m", "qwen2.5-0.5b", "-g", "h100", "-b", "4"], 2);
    assert!(e.contains("--batch-size") && e.contains("vram fit"), "{e}");
    let e = fails(&["fit", "-m", "qwen2.5-0.5b", "-g", "h100", "--global-batch-size", "64", "--grad-accum", "4"], 2);
    assert!(e.contains("--grad-accum"), "{e}");
    let e = fails(&["plan", "-m", "llama-3.1-8b", "-g", "h100", "--gpus", "8", "--checkpointing", "full", "--grad-accum", "2"], 2);
    assert!(e.contains("--grad-accum") && e.contains("--checkpointing"), "{e}");
    let e = fails(&["plan", "-m", "llama-3.1-8b", "-g", "h100", "--gpus", "8", "--top", "0"], 2);
    assert!(e.contains("--top"), "{e}");
    // Gradient accumulation without a global batch is the job's own: fit keeps it.
    json(&["fit", "-m", "qwen2.5-0.5b", "-g", "h100", "--grad-accum", "4"]);
}

/// vLLM-only and llama.cpp-only flags with defaults were ignored by the other engine.
#[test]
fn serve_refuses_more_of_the_other_engines_flags() {
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--ubatch-size", "256"], 2);
    assert!(e.contains("--ubatch-size"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    std::fs::write(&path, gguf_writer::tiny_llama().bytes()).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(4 << 20).unwrap();
    let e = fails(&["serve", "-m", path.to_str().unwrap(), "-g", "h100", "--gpu-memory-utilization", "0.8"], 2);
    assert!(e.contains("--gpu-memory-utilization"), "{e}");
}

/// `vram run` read neither `--json` nor, without `--model`, any job flag: both are refused.
#[test]
fn run_refuses_flags_it_would_ignore() {
    let e = fails(&["run", "--json", "--", "true"], 2);
    assert!(e.contains("--out"), "{e}");
    let e = fails(&["run", "-b", "8", "--", "true"], 2);
    assert!(e.contains("--model"), "{e}");
}

#[test]
fn freeze_vision_tower_is_a_training_flag() {
    // Regression: accepted under --mode infer, where it changes nothing.
    let cfg = format!("{}/../../validation/configs/families/llava-1.5-7b-hf.json", env!("CARGO_MANIFEST_DIR"));
    let err = fails(&["estimate", "-m", &cfg, "--mode", "infer", "--freeze-vision-tower"], 2);
    assert!(err.contains("--freeze-vision-tower") && err.contains("only for training"), "{err}");
}

/// A learned position table cannot embed more tokens than it has: GPT-2 at 2,048 tokens stopped
/// with a CUDA index assertion when the GPU kit ran it (validation/gpu/h100/README.md), where
/// vram had given a number with exit 0. Now refused with the longest length that runs; the
/// default sequence stays within the table; OPT's and RoBERTa's offset rows are not tokens.
#[test]
fn sequences_past_a_learned_position_table_are_refused() {
    let err = fails(&["estimate", "--model", "gpt2", "--seq-len", "2048"], 2);
    assert!(err.contains("1024 positions") && err.contains("--seq-len 1024 or less"), "{err}");
    assert_eq!(json(&["estimate", "--model", "gpt2", "--seq-len", "1024"])["job"]["seq"], 1024);
    assert_eq!(json(&["estimate", "--model", "gpt2"])["job"]["seq"], 1024);
    let opt = "../../validation/configs/opt-125m.json";
    assert!(fails(&["estimate", "--model", opt, "--seq-len", "2049"], 2).contains("2048 positions"));
    assert_eq!(json(&["estimate", "--model", opt, "--seq-len", "2048"])["job"]["seq"], 2048);
    let fit = fails(&["fit", "--model", "gpt2", "--seq-len", "4096", "--gpu", "h100-80gb"], 2);
    assert!(fit.contains("learned position table"), "{fit}");
    // rotary models have no table: long contexts are estimated (with a note past the trained one)
    assert_eq!(json(&["estimate", "--model", "llama-3.2-1b", "--seq-len", "200000"])["job"]["seq"], 200000);
}

/// `job.overheads` in JSON keeps numbers (fields are only ever added): the context and cuBLAS
/// workspaces this job's estimate uses — the H100-measured defaults per mode, or the flags.
#[test]
fn json_overheads_are_the_bytes_used() {
    let train = json(&["estimate", "--model", "gpt2"]);
    assert_eq!(train["job"]["overheads"]["cuda_context"], 758u64 << 20);
    assert_eq!(train["job"]["overheads"]["cublas_workspace"], 64u64 << 20);
    let infer = json(&["estimate", "--model", "gpt2", "--mode", "infer", "--cuda-context", "1GiB"]);
    assert_eq!(infer["job"]["overheads"]["cuda_context"], 1u64 << 30);
    assert_eq!(infer["job"]["overheads"]["cublas_workspace"], 32u64 << 20);
    let ctx = infer["components"].as_array().unwrap().iter().find(|c| c["name"] == "CUDA context").unwrap();
    assert_eq!(ctx["bytes"], 1u64 << 30);
    assert!(ctx["detail"].as_str().unwrap().starts_with("given"), "{ctx}");
}
