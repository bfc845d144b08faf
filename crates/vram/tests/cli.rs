//! Integration tests: the real `vram` binary, its output and its errors.

mod util;

use util::{fails, json, vram};

#[test]
fn estimate_json_schema() {
    let v = json(&[
        "estimate",
        "--model",
        "qwen2.5-1.5b",
        "--seq-len",
        "4096",
        "--batch-size",
        "2",
        "--precision",
        "fp16-mixed",
        "--gpu",
        "h20",
    ]);
    assert_eq!(v["model"]["parameters"], 1_543_714_304u64);
    let comps = v["components"].as_array().unwrap();
    assert!(comps.iter().all(|c| c["name"].is_string() && c["bytes"].is_u64() && c["kind"].is_string()));
    let sum: u64 = comps.iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, v["total_bytes"].as_u64().unwrap(), "components sum to the total");
    let allocated: u64 = comps.iter().filter(|c| c["kind"] == "allocated").map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(allocated, v["peak_allocated_bytes"].as_u64().unwrap());
    assert!(v["peak_phase"].is_string());
    assert!(v["gpu"]["utilization"].as_f64().unwrap() > 0.0);
    assert_eq!(v["gpu"]["name"], "h20");
}

#[test]
fn fit_json_has_max_batch_and_matches_estimate() {
    let v = json(&[
        "fit",
        "--model",
        "qwen2.5-1.5b",
        "--gpu",
        "h20",
        "--seq-len",
        "4096",
        "--precision",
        "fp16-mixed",
        "--target-utilization",
        "0.9",
    ]);
    let b = v["max_batch_size"].as_u64().expect("fits");
    assert!(v["utilization"].as_f64().unwrap() <= 0.9);
    // The estimate at that batch agrees with fit's total.
    let e =
        json(&["estimate", "--model", "qwen2.5-1.5b", "--seq-len", "4096", "--precision", "fp16-mixed", "--batch-size", &b.to_string()]);
    assert_eq!(e["total_bytes"], v["chosen"]["total"]);
    let next = v["next"]["total"].as_u64().unwrap();
    assert!(next > v["budget_bytes"].as_u64().unwrap());
}

#[test]
fn fit_with_global_batch_reports_accumulation() {
    let v = json(&["fit", "-m", "qwen2.5-0.5b", "-g", "24GiB", "--global-batch-size", "32", "-s", "2048"]);
    let b = v["max_batch_size"].as_u64().unwrap();
    assert_eq!(32 % b, 0);
    assert_eq!(v["grad_accum"].as_u64().unwrap(), 32 / b);
}

#[test]
fn fit_when_batch_one_does_not_fit_says_what_would() {
    let out = vram().args(["fit", "-m", "llama-3.1-70b", "-g", "h100", "-s", "4096"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("batch 1 does not fit"), "{text}");
    assert!(text.contains("--checkpointing full"), "{text}");
    assert!(text.contains("ZeRO-3"), "{text}");
    let v = json(&["fit", "-m", "llama-3.1-70b", "-g", "h100", "-s", "4096"]);
    assert!(v["max_batch_size"].is_null());
    assert!(!v["alternatives"].as_array().unwrap().is_empty());
}

#[test]
fn estimate_table_is_readable() {
    let out = vram().args(["estimate", "-m", "llama-3.1-8b", "-b", "2", "-s", "4096", "--gpu", "H100"]).output().unwrap();
    assert!(out.status.success());
    let t = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "parameters",
        "optimizer states",
        "logits & loss",
        "peak allocated",
        "CUDA context",
        "total (what nvidia-smi shows)",
        "GiB",
        "GB",
        "h100-80gb",
        "peak at:",
    ] {
        assert!(t.contains(needle), "missing {needle}:\n{t}");
    }
}

#[test]
fn inference_estimate() {
    let v =
        json(&["estimate", "-m", "llama-3.1-8b", "--mode", "infer", "-b", "4", "-s", "8192", "--prompt-len", "1024", "--kv-dtype", "fp8"]);
    let kv = v["components"].as_array().unwrap().iter().find(|c| c["name"] == "KV cache").unwrap()["bytes"].as_u64().unwrap();
    assert_eq!(kv, 4 * 8192 * 64 * 1024); // fp8: 64 KiB per token for Llama-3-8B
    assert_eq!(v["peak_phase"], "decode");
}

#[test]
fn models_and_gpus_list() {
    let v = json(&["models"]);
    let arr = v.as_array().unwrap();
    assert!(arr.len() >= 25);
    assert!(arr.iter().any(|m| m["name"] == "llama-2-7b" && m["parameters"] == 6_738_415_616u64));
    let g = json(&["gpus"]);
    assert!(g.as_array().unwrap().len() >= 20);
    let out = vram().arg("models").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("6,738,415,616"));
}

#[test]
fn config_file_and_model_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = r#"{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":1000,"tie_word_embeddings":false,"torch_dtype":"float32"}"#;
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, cfg).unwrap();
    let v = json(&["estimate", "-m", cfg_path.to_str().unwrap(), "-s", "64"]);
    let params = v["model"]["parameters"].as_u64().unwrap();
    // embed + lm_head 2·1000·64, per layer q 64·64, k,v 2·64·32, o 64·64, mlp 3·64·128, 2 norms; final norm.
    assert_eq!(params, 2 * 1000 * 64 + 2 * (64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64);
    // A real safetensors file next to it: header read, tensor data never touched.
    let header =
        r#"{"__metadata__":{"format":"pt"},"model.embed_tokens.weight":{"dtype":"BF16","shape":[1000,64],"data_offsets":[0,128000]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(std::iter::repeat_n(0u8, 128000));
    std::fs::write(dir.path().join("model.safetensors"), &bytes).unwrap();
    let v = json(&["estimate", "-m", dir.path().to_str().unwrap(), "-s", "64"]);
    assert_eq!(v["model"]["checkpoint_parameters"], 64000);
    assert_eq!(v["model"]["stored_dtype"], "bfloat16");
    assert!(v["model"]["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("safetensors headers hold 64000")));
}

#[test]
fn error_paths_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str, content: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.to_str().unwrap().to_string()
    };
    let e = fails(&["estimate", "-m", "llama-3.1-8"], 2);
    assert!(e.contains("unknown model preset") && e.contains("llama-3.1-8b"), "{e}");
    let e = fails(&["estimate", "-m", "/no/such/config.json"], 2);
    assert!(e.contains("neither a file"), "{e}");
    let bad_json = p("bad.json", b"{\"model_type\": ");
    assert!(fails(&["estimate", "-m", &bad_json], 2).contains("not valid JSON"));
    let missing =
        p("missing.json", br#"{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"vocab_size":10,"intermediate_size":128}"#);
    assert!(fails(&["estimate", "-m", &missing], 2).contains("num_hidden_layers"));
    let e = fails(&["estimate", "-m", "gpt2", "--gpu", "h1000"], 2);
    assert!(e.contains("unknown GPU") && e.contains("did you mean"), "{e}");
    assert!(fails(&["estimate", "-m", "gpt2", "-b", "0"], 2).contains("batch size"));
    assert!(fails(&["estimate", "-m", "gpt2", "-s", "0"], 2).contains("sequence length"));
    assert!(fails(&["estimate", "-m", "gpt2", "-b", "99999999999"], 2).contains("batch size"));
    fails(&["estimate", "-m", "gpt2", "-b", "-3"], 2);
    assert!(fails(&["estimate", "-m", "gpt2", "--precision", "fp12"], 2).contains("precision"));
    assert!(fails(&["estimate", "-m", "gpt2", "--optimizer", "adamq"], 2).contains("optimizer"));
    assert!(fails(&["estimate", "-m", "gpt2", "--mode", "fly"], 2).contains("mode"));
    assert!(fails(&["estimate", "-m", "gpt2", "--precision", "int4"], 2).contains("--mode infer"));
    assert!(fails(&["estimate", "-m", "gpt2", "--precision", "fp32", "--attention", "flash_attention_2"], 2).contains("flash"));
    assert!(fails(&["estimate", "-m", "gpt2", "--allocator-reserve", "7"], 2).contains("allocator reserve"));
    assert!(fails(&["estimate", "-m", "gpt2", "--cuda-context", "lots"], 2).contains("memory size"));
    assert!(fails(&["fit", "-m", "gpt2", "-g", "h100", "--target-utilization", "1.5"], 2).contains("target utilization"));
    assert!(fails(&["fit", "-m", "gpt2", "-g", "0GB"], 2).contains("GPU"));
    // A directory with a hostile safetensors header (length 2^63).
    let d = dir.path().join("model");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("config.json"), br#"{"model_type":"gpt2","n_embd":64,"n_layer":1,"n_head":4,"vocab_size":10}"#).unwrap();
    std::fs::write(d.join("model.safetensors"), (1u64 << 63).to_le_bytes()).unwrap();
    assert!(fails(&["estimate", "-m", d.to_str().unwrap()], 2).contains("header length"));
    std::fs::write(d.join("model.safetensors"), [200u8, 0, 0, 0, 0, 0, 0, 0, b'{']).unwrap();
    assert!(fails(&["estimate", "-m", d.to_str().unwrap()], 2).contains("past the end"));
    // A directory without config.json.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(fails(&["estimate", "-m", empty.to_str().unwrap()], 2).contains("config.json"));
    // The user's files are untouched.
    assert_eq!(std::fs::read(&bad_json).unwrap(), b"{\"model_type\": ");
}

#[test]
fn broken_pipe_is_not_an_error() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child =
        Command::new(assert_cmd::cargo::cargo_bin("vram")).args(["gpus"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take()); // the reader goes away before vram writes
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(status.success(), "exit {status:?}: {err}");
}

#[test]
fn parallel_estimate_names_the_rank_and_offload_cpu() {
    let v = json(&[
        "estimate",
        "-m",
        "llama-3.1-70b",
        "-s",
        "4096",
        "--gpus",
        "64",
        "--zero",
        "3",
        "--offload",
        "optimizer",
        "--checkpointing",
        "full",
        "--gpu",
        "h100",
    ]);
    assert_eq!(v["parallel"]["engine"], "deep_speed");
    assert!(v["rank"].as_str().unwrap().contains("rank"));
    assert!(v["cpu_per_node_bytes"].as_u64().unwrap() > 0);
    let sum: u64 = v["components"].as_array().unwrap().iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, v["total_bytes"].as_u64().unwrap());
    let m = json(&[
        "estimate",
        "-m",
        "llama-3.1-70b",
        "-s",
        "4096",
        "--gpus",
        "64",
        "--tp",
        "8",
        "--pp",
        "4",
        "--sp",
        "--distributed-optimizer",
        "--grad-accum",
        "16",
    ]);
    assert_eq!(m["parallel"]["engine"], "megatron");
    assert!(m["rank"].as_str().unwrap().contains("stage"), "{}", m["rank"]);
    fails(&["estimate", "-m", "llama-3.1-8b", "--gpus", "8", "--tp", "3"], 2);
    fails(&["estimate", "-m", "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--fsdp", "full_shard"], 2);
    fails(&["estimate", "-m", "llama-3.1-8b", "--gpus", "8", "--offload", "disk"], 2);
}

#[test]
fn plan_ranks_layouts_that_fit() {
    let v = json(&["plan", "-m", "llama-3.1-70b", "-g", "h100", "--gpus", "64", "-s", "4096", "--global-batch-size", "512", "--top", "3"]);
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 3);
    assert!(v["evaluated"].as_u64().unwrap() > 1000);
    let budget = 0.9 * v["gpu"]["memory_bytes"].as_f64().unwrap();
    let mut last = f64::INFINITY;
    for p in plans {
        assert!(p["per_gpu_bytes"].as_f64().unwrap() <= budget);
        let tps = p["tokens_per_second"].as_f64().unwrap();
        assert!(tps <= last, "ranked by throughput");
        last = tps;
        // global batch = micro-batch × accumulation × data parallel
        let dp = p["parallel"]["gpus"].as_u64().unwrap()
            / (p["parallel"]["tp"].as_u64().unwrap() * p["parallel"]["pp"].as_u64().unwrap() * p["parallel"]["cp"].as_u64().unwrap());
        assert_eq!(p["micro_batch"].as_u64().unwrap() * p["grad_accum"].as_u64().unwrap() * dp, 512);
    }
    let e = fails(&["plan", "-m", "llama-3.1-405b", "-g", "rtx-4090", "--gpus", "2", "-s", "4096"], 1);
    assert!(e.contains("no layout"), "{e}");
}

#[test]
fn emit_deepspeed_is_a_valid_config() {
    // Keys of deepspeed/runtime/constants.py and runtime/zero/config.py (DeepSpeed config schema).
    const TOP: &[&str] = &[
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "zero_optimization",
        "bf16",
        "fp16",
        "steps_per_print",
        "wall_clock_breakdown",
        "optimizer",
        "scheduler",
        "activation_checkpointing",
    ];
    const ZERO: &[&str] = &[
        "stage",
        "overlap_comm",
        "contiguous_gradients",
        "reduce_bucket_size",
        "allgather_bucket_size",
        "allgather_partitions",
        "reduce_scatter",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_max_live_parameters",
        "stage3_max_reuse_distance",
        "stage3_gather_16bit_weights_on_model_save",
        "offload_optimizer",
        "offload_param",
        "sub_group_size",
    ];
    const OFFLOAD: &[&str] = &["device", "pin_memory", "nvme_path", "buffer_count", "ratio"];
    let out = vram()
        .args([
            "plan",
            "-m",
            "llama-3.1-8b",
            "-g",
            "a100-40gb",
            "--gpus",
            "16",
            "-s",
            "4096",
            "--global-batch-size",
            "256",
            "--emit",
            "deepspeed",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in v.as_object().unwrap().keys() {
        assert!(TOP.contains(&k.as_str()), "unknown DeepSpeed key {k}");
    }
    let z = v["zero_optimization"].as_object().unwrap();
    for (k, val) in z {
        assert!(ZERO.contains(&k.as_str()), "unknown zero_optimization key {k}");
        if k.starts_with("offload") {
            for ok in val.as_object().unwrap().keys() {
                assert!(OFFLOAD.contains(&ok.as_str()), "unknown offload key {ok}");
            }
        }
    }
    assert!((0..=3).contains(&z["stage"].as_u64().unwrap()));
    assert_eq!(v["bf16"]["enabled"], true);
    // DeepSpeed requires train_batch_size = micro × accumulation × world size (16 GPUs).
    assert_eq!(
        v["train_batch_size"].as_u64().unwrap(),
        v["train_micro_batch_size_per_gpu"].as_u64().unwrap() * v["gradient_accumulation_steps"].as_u64().unwrap() * 16
    );
}

#[test]
fn emit_accelerate_and_torchrun() {
    let run = |emit: &str| {
        let out = vram()
            .args(["plan", "-m", "llama-3.1-70b", "-g", "h100", "--gpus", "64", "-s", "4096", "--global-batch-size", "512", "--emit", emit])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let yaml = run("accelerate");
    for key in ["distributed_type:", "num_machines: 8", "num_processes: 64", "mixed_precision: bf16"] {
        assert!(yaml.contains(key), "{key} missing:\n{yaml}");
    }
    let cmd = run("torchrun");
    assert!(cmd.starts_with("torchrun --nnodes 8 --nproc-per-node 8"), "{cmd}");
    assert!(cmd.contains("--micro-batch-size") || cmd.contains("--per_device_train_batch_size"), "{cmd}");
    fails(&["plan", "-m", "gpt2", "-g", "h100", "--gpus", "8", "--emit", "yaml"], 2);
}

#[test]
fn fit_reports_throughput() {
    let v = json(&["fit", "-m", "qwen2.5-0.5b", "-g", "h100", "-s", "2048"]);
    let t = v["throughput"].as_array().unwrap();
    assert!(!t.is_empty());
    assert!(t.iter().all(|r| r["tokens_per_second"].as_f64().unwrap() > 0.0));
}

#[test]
fn run_passes_exit_codes_detects_oom_and_writes_files() {
    let dir = tempfile::tempdir().unwrap();
    let (out, tl, svg) = (dir.path().join("r.json"), dir.path().join("t.csv"), dir.path().join("c.svg"));
    let res = vram()
        .args([
            "run",
            "--interval",
            "20ms",
            "--out",
            out.to_str().unwrap(),
            "--timeline",
            tl.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
            "--",
        ])
        .args([
            "sh",
            "-c",
            "echo on-stdout; echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.' >&2; sleep 0.2; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(res.status.code(), Some(3), "the child's exit code");
    assert_eq!(String::from_utf8_lossy(&res.stdout), "on-stdout\n", "stdout belongs to the child");
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(err.contains("no NVIDIA driver found"), "{err}");
    assert!(err.contains("OUT OF MEMORY"), "{err}");
    assert!(err.contains("torch.OutOfMemoryError"), "the child's stderr is passed through");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["oom"], "pytorch");
    assert_eq!(r["gpu_available"], false);
    let csv = std::fs::read_to_string(&tl).unwrap();
    assert!(csv.starts_with("t_ms,gpu,device_used_bytes,job_used_bytes,host_rss_bytes,processes\n"));
    assert!(csv.lines().count() >= 3, "{csv}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // Nothing the user has is overwritten: the same paths again are refused before running.
    let again = vram().args(["run", "--out", out.to_str().unwrap(), "--", "true"]).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwrites"));
    // A command that cannot start.
    fails(&["run", "--", "/no/such/program"], 2);
    fails(&["run", "--interval", "0ms", "--", "true"], 2);
}

#[test]
fn run_forwards_signals_and_still_reports() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let ready = dir.path().join("ready");
    // The command says when its trap is set (a file); a fixed sleep was too short on a loaded machine.
    let script = format!("trap 'exit 42' TERM; touch '{}'; sleep 30 & wait $!", ready.display());
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("vram"))
        .args(["run", "--interval", "20ms", "--out", out.to_str().unwrap(), "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !ready.exists() {
        assert!(waited.elapsed() < std::time::Duration::from_secs(60), "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // vram installs its forwarding right after the spawn; give it a moment past the child's start.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(42), "SIGTERM reached the child, whose exit code vram returns");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(r["exit_code"], 42);
}

#[test]
fn run_serves_prometheus_metrics() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Command, Stdio};
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("vram"))
        .args(["run", "--interval", "20ms", "--metrics", "127.0.0.1:0", "--", "sleep", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split("http://").nth(1).map(|s| s.trim_end_matches("/metrics").to_string()))
        .expect("metrics address printed");
    let mut conn = std::net::TcpStream::connect(&url).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut resp = String::new();
    conn.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert!(resp.contains("text/plain; version=0.0.4"));
    let status = child.wait().unwrap();
    assert!(status.success());
}

#[test]
fn watch_without_a_gpu_says_so() {
    let e = fails(&["watch", "--once"], 2);
    assert!(e.contains("no NVIDIA driver found"), "{e}");
    fails(&["watch", "--once", "--json"], 2);
}

#[test]
fn tune_finds_the_batch_with_a_real_child() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stand_in_train.sh");
    let gib: u64 = 1 << 30;
    let budget = 72 * gib; // 90% of 80 GiB
    let out = vram()
        .args([
            "tune",
            "-m",
            "qwen2.5-0.5b",
            "-s",
            "1024",
            "-g",
            "80GiB",
            "--measure",
            "child-report",
            "--margin",
            "0",
            "--max-trials",
            "6",
            "--json",
            "--",
        ])
        .arg(&script)
        .arg("{batch}")
        .env("BASE", (10 * gib).to_string())
        .env("PER_SAMPLE", gib.to_string())
        .env("LIMIT", (80 * gib).to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let b = v["batch"].as_u64().expect("a batch");
    assert!(10 * gib + b * gib <= budget, "never above the target");
    assert!(b >= 55, "close to the optimum 62: {b}");
    let trials = v["trials"].as_array().unwrap();
    assert!(trials.len() <= 6);
    assert!(trials.iter().all(|t| t["peak"].is_null() || t["peak"].as_u64().unwrap() == 10 * gib + t["batch"].as_u64().unwrap() * gib));
    assert!(v["command"].as_array().unwrap().iter().any(|a| a == &serde_json::json!(b.to_string())));
    // The OOM trials are recognised as such.
    assert!(trials.iter().filter(|t| t["oom"] == true).all(|t| 10 * gib + t["batch"].as_u64().unwrap() * gib > 80 * gib));
}

#[test]
fn tune_kills_a_trial_past_its_timeout_and_checks_its_command() {
    let out = vram()
        .args([
            "tune",
            "-m",
            "gpt2",
            "-g",
            "24GiB",
            "--measure",
            "child-report",
            "--timeout",
            "1s",
            "--max-trials",
            "1",
            "--json",
            "--",
            "sh",
            "-c",
            "sleep 30 # {batch}",
        ])
        .timeout(std::time::Duration::from_secs(120)) // a guard against a hang; the trial's own time is checked below
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "no batch chosen: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["trials"][0]["timed_out"], true);
    assert!(v["trials"][0]["seconds"].as_f64().unwrap() < 10.0, "killed, not waited for");
    let e = fails(&["tune", "-m", "gpt2", "-g", "24GiB", "--", "python", "train.py"], 2);
    assert!(e.contains("{batch}"), "{e}");
    let e = fails(&["tune", "-m", "gpt2", "-g", "24GiB", "--", "train.py", "{batch}"], 2);
    assert!(e.contains("no NVIDIA driver found"), "nvml measurement needs a driver: {e}");
}

#[test]
fn serve_reports_vllm_accounting_per_gpu() {
    let v = json(&["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tensor-parallel-size", "4", "--max-model-len", "16384"]);
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    let g = &gpus[0];
    for k in ["weights_bytes", "activation_peak_bytes", "non_torch_bytes", "non_kv_bytes", "kv_cache_bytes", "num_kv_blocks", "kv_tokens"] {
        assert!(g[k].as_u64().unwrap() > 0, "{k}");
    }
    let sum = ["weights_bytes", "activation_peak_bytes", "non_torch_bytes", "runner_buffers_bytes"]
        .iter()
        .map(|k| g[k].as_u64().unwrap())
        .sum::<u64>();
    // Model Runner V2's request state (the newest vLLM's runner for a dense model).
    assert!(g["runner_buffers_bytes"].as_u64().unwrap() > 500 << 20);
    assert_eq!(g["non_kv_bytes"].as_u64().unwrap(), sum);
    assert_eq!(g["kv_cache_bytes"].as_u64().unwrap(), g["requested_bytes"].as_u64().unwrap() - g["non_kv_bytes"].as_u64().unwrap());
    assert!(g["max_concurrency"].as_f64().unwrap() > 1.0);
    // fp8 KV cache: twice the tokens.
    let f = json(&["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tp", "4", "--max-model-len", "16384", "--kv-cache-dtype", "fp8"]);
    let ratio = f["gpus"][0]["kv_tokens"].as_f64().unwrap() / g["kv_tokens"].as_f64().unwrap();
    assert!((ratio - 2.0).abs() < 0.01, "{ratio}");

    let text = vram().args(["serve", "-m", "llama-3.1-70b", "-g", "h100"]).output().unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("does NOT fit"), "{out}");
    assert!(out.contains("Total non KV cache memory"), "{out}");
}

#[test]
fn serve_rejects_bad_settings_clearly() {
    assert!(fails(&["serve", "-m", "qwen2.5-1.5b", "-g", "h100", "--tp", "5"], 2).contains("divide the 12 attention heads"));
    assert!(fails(&["serve", "-m", "qwen2.5-1.5b", "-g", "h100", "--gpu-memory-utilization", "1.5"], 2).contains("gpu-memory-utilization"));
    assert!(fails(&["serve", "-m", "qwen2.5-1.5b", "-g", "h100", "--engine", "tgi"], 2).contains("not modelled"));
    assert!(fails(&["serve", "-m", "qwen2.5-1.5b", "-g", "h100", "--engine", "sglang", "--mem-fraction-static", "1.5"], 2)
        .contains("mem-fraction-static"));
    assert!(fails(&["serve", "-m", "qwen2.5-1.5b", "-g", "h100", "--kv-cache-dtype", "int3"], 2).contains("kv-cache-dtype"));
    assert!(fails(&["serve", "-m", "qwen2.5-1.5b", "-g", "h100", "--quantization", "magic"], 2).contains("quantization"));
}

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

#[test]
fn serve_plans_a_gguf_file_under_llama_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-Q4_K_M.gguf");
    std::fs::write(&path, gguf_writer::tiny_llama().bytes()).unwrap();
    // The writer emits the header only; the tensor data it promises (2.3 MB) is a sparse tail.
    std::fs::File::options().write(true).open(&path).unwrap().set_len(4 << 20).unwrap();
    let p = path.to_str().unwrap();
    let v = json(&["serve", "-m", p, "-g", "24GiB", "--ctx-size", "8192"]);
    assert_eq!(v["engine"], "llama.cpp");
    assert_eq!(v["gguf"]["file_type"], "Q4_K_M");
    assert_eq!(v["plan"]["ctx"], 8192);
    assert_eq!(v["plan"]["gpu_kv_bytes"], 4 * 8192 * 2 * 64 * 2);
    assert!(v["offload_table"].as_array().unwrap().len() >= 5);
    let none = json(&["serve", "-m", p, "-g", "24GiB", "--n-gpu-layers", "0"]);
    assert_eq!(none["plan"]["gpu_weights_bytes"], 0);
    let text = vram().args(["serve", "-m", p, "-g", "rtx-4090"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("--n-gpu-layers → longest --ctx-size"));
    // Truncated inside the header: a clear error, exit 2.
    let bytes = gguf_writer::tiny_llama().bytes();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(fails(&["serve", "-m", cut.to_str().unwrap(), "-g", "h100"], 2).contains("truncated"));
    // Other commands point to `serve`.
    assert!(fails(&["estimate", "-m", p], 2).contains("vram serve"));
}
