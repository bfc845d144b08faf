//! `vram serve --log`: the estimate beside a real start-up log (fixtures in validation/logs/,
//! built only from lines posted in the issue threads named in validation/logs/README.md).

mod util;

use serde_json::Value;

const VLLM_LOG: &str = "validation/logs/vllm-10517-llama-3.1-8b-rtx3090.log";
const SGLANG_LOG: &str = "validation/logs/sglang-vllm-21348-qwen3-235b-a22b-fp8-h100-tp4.log";
const VLLM_FLAGS: [&str; 11] =
    ["serve", "-m", "llama-3.1-8b", "-g", "rtx-3090", "--max-model-len", "20000", "--vllm-engine", "v0", "--vllm-version", "0.6"];

fn run(args: &[&str]) -> std::process::Output {
    util::vram().current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).args(args).output().expect("runs")
}

fn json(args: &[&str]) -> Value {
    let out = run(&[args, &["--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn row<'a>(c: &'a Value, quantity: &str) -> &'a Value {
    c["rows"].as_array().unwrap().iter().find(|r| r["quantity"] == quantity).unwrap_or_else(|| panic!("no row {quantity}"))
}

const GIB: f64 = (1u64 << 30) as f64;

#[test]
fn vllm_log_rows_hold_the_estimate_and_the_logged_figures() {
    let plain = json(&VLLM_FLAGS);
    let g = &plain["gpus"][0];
    let with = json(&[&VLLM_FLAGS[..], &["--log", VLLM_LOG]].concat());
    assert_eq!(with["estimate"], plain, "the estimate is unchanged by --log");
    let c = &with["comparison"];
    assert_eq!(c["engine"], "vllm");
    assert_eq!(c["contradictions"].as_array().unwrap().len(), 0, "{c}");
    // (row, estimate field, bytes?, the log's figure as printed in vllm-project/vllm#10517)
    let cases: [(&str, &str, bool, Option<f64>); 8] = [
        ("weights per GPU", "weights_bytes", true, Some(14.9888)),
        ("non-torch memory", "non_torch_bytes", true, Some(0.35)),
        ("activation peak", "activation_peak_bytes", true, None),
        ("CUDA graphs", "cuda_graph_estimate_bytes", true, None),
        ("KV cache", "kv_cache_bytes", true, Some(3.81)),
        ("KV cache tokens", "kv_tokens", false, None),
        ("KV cache blocks", "num_kv_blocks", false, Some(1952.0)),
        ("max concurrency", "max_concurrency", false, Some(1.56)),
    ];
    for (q, field, bytes, logged) in cases {
        let r = row(c, q);
        let est = g[field].as_f64().unwrap() / if bytes { GIB } else { 1.0 };
        assert!((r["estimate"].as_f64().unwrap() - est).abs() < 1e-9, "{q}: {r}");
        assert_eq!(r["log"].as_f64(), logged, "{q}");
        if let Some(l) = logged {
            assert!((r["difference"].as_f64().unwrap() - (l - est)).abs() < 1e-9, "{q}");
        }
    }
    // The text names every quantity, with the figures of the estimate and the log.
    let out = run(&[&VLLM_FLAGS[..], &["--log", VLLM_LOG]].concat());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let table = text.split("Start-up log").nth(1).expect("a comparison section");
    for (q, ..) in cases {
        assert!(table.contains(q), "{q} missing:\n{table}");
    }
    let weights = format!("{:.2} GiB", g["weights_bytes"].as_f64().unwrap() / GIB);
    assert!(table.lines().any(|l| l.contains("weights per GPU") && l.matches(&weights).count() == 2), "{table}");
    assert!(table.lines().any(|l| l.contains("non-torch memory") && l.contains("0.35 GiB")), "{table}");
    assert!(table.lines().any(|l| l.contains("KV cache blocks") && l.contains("1952")), "{table}");
    assert!(table.contains("non-torch memory: vram assumes 0.15 GiB at TP 1"), "{table}");
}

#[test]
fn contradicting_flags_are_called_out() {
    let c = json(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-3090", "--gpu-memory-utilization", "0.8", "--log", VLLM_LOG]);
    let said = c["comparison"]["contradictions"].to_string();
    for x in ["gpu_memory_utilization 0.90", "max model len is 20000", "V0 engine"] {
        assert!(said.contains(x), "{x}: {said}");
    }
    let out = run(&["serve", "-m", "llama-3.1-8b", "-g", "a100-40gb", "--log", VLLM_LOG]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("WARNING: the log's GPU has total_gpu_memory 23.58 GiB"), "{text}");
    // An SGLang log under a vLLM plan.
    let c = json(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-3090", "--log", SGLANG_LOG]);
    assert!(c["comparison"]["contradictions"][0].as_str().unwrap().contains("the log is from sglang"));
}

#[test]
fn sglang_log_rows() {
    let flags = [
        "serve",
        "--engine",
        "sglang",
        "-m",
        "validation/sglang/qwen3-235b-a22b-fp8.config.json",
        "-g",
        "h100-80gb",
        "--tp",
        "4",
        "--mem-fraction-static",
        "0.93",
    ];
    let plain = json(&flags);
    let c = json(&[&flags[..], &["--log", SGLANG_LOG]].concat())["comparison"].clone();
    let t = row(&c, "KV cache tokens");
    assert_eq!(t["log"].as_f64(), Some(367_404.0));
    assert_eq!(t["estimate"], plain["gpus"][0]["max_total_num_tokens"].as_f64().unwrap());
    assert_eq!(row(&c, "K size")["log_printed"], "8.23 GB");
}

#[test]
fn bad_log_files_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let err = util::fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--log", d], 2);
    assert!(err.contains("not a regular file"), "{err}");
    let big = dir.path().join("big.log");
    std::fs::File::create(&big).unwrap().set_len((64 << 20) + 1).unwrap();
    let err = util::fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--log", big.to_str().unwrap()], 2);
    assert!(err.contains("64 MiB"), "{err}");
    let none = dir.path().join("none.log");
    std::fs::write(&none, "INFO starting\nhello\n").unwrap();
    let err = util::fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--log", none.to_str().unwrap()], 2);
    assert!(err.contains("Model loading took") && err.contains("Load weight end"), "{err}");
    let err = util::fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--log", dir.path().join("absent.log").to_str().unwrap()], 2);
    assert!(err.contains("cannot open"), "{err}");
}

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

/// llama.cpp: the rows hold the plan's figures and the log's (lines from a real llama.cpp log, see
/// `startup_log::tests::llama_cpp_new_spellings`; the tiny GGUF is not that model, so only the
/// wiring is checked, and the n_ctx contradiction is called out).
#[test]
fn llama_cpp_log_rows() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("dense.gguf");
    std::fs::write(&gguf, gguf_writer::tiny_llama().bytes()).unwrap();
    // Pad (sparse) so the tensor data the header promises is in the file.
    std::fs::File::options().write(true).open(&gguf).unwrap().set_len(16 << 20).unwrap();
    let log = dir.path().join("llama.log");
    std::fs::write(
        &log,
        "0.00.329.203 I load_tensors:        CUDA0 model buffer size =    40.73 MiB
0.00.319.984 I llama_context: n_ctx         = 512
0.01.218.542 I llama_kv_cache:      CUDA0 KV buffer size =     8.00 MiB
0.01.231.094 I sched_reserve:      CUDA0 compute buffer size =    82.07 MiB
",
    )
    .unwrap();
    let g = gguf.to_str().unwrap();
    let plain = json(&["serve", "-m", g, "-g", "rtx-4090", "-c", "4096"]);
    let with = json(&["serve", "-m", g, "-g", "rtx-4090", "-c", "4096", "--log", log.to_str().unwrap()]);
    let c = &with["comparison"];
    assert_eq!(c["engine"], "llama.cpp");
    const MIB: f64 = (1u64 << 20) as f64;
    for (q, field, logged) in [
        ("model buffer per device", "gpu_weights_bytes", 40.73),
        ("KV buffer", "gpu_kv_bytes", 8.0),
        ("compute buffer", "gpu_compute_bytes", 82.07),
    ] {
        let r = row(c, q);
        assert_eq!(r["estimate"].as_f64().unwrap(), plain["plan"][field].as_f64().unwrap() / MIB, "{q}");
        assert!((r["log"].as_f64().unwrap() - logged).abs() < 1e-9, "{q}");
    }
    assert!(c["contradictions"][0].as_str().unwrap().contains("n_ctx is 512"), "{c}");
}

/// vLLM 0.31's one-line summary from Model Runner V2: read, held beside the estimate, and the
/// runner named when the flags plan the other one.
#[test]
fn vllm_031_summary_line_and_model_runner() {
    const LOG: &str = "validation/logs/vllm-0.31-llama-3.1-8b-a100-mrv2.log";
    let flags = ["serve", "-m", "llama-3.1-8b", "-g", "a100-80gb", "--gpu-memory-utilization", "0.92", "--log", LOG];
    let c = json(&flags);
    assert_eq!(c["estimate"]["gpus"][0]["model_runner"], "v2", "vLLM 0.31 runs a dense Llama on Model Runner V2");
    let cmp = &c["comparison"];
    assert_eq!(cmp["contradictions"].as_array().unwrap().len(), 0, "{cmp}");
    assert_eq!(row(cmp, "weights + non-torch")["log"].as_f64(), Some(15.26));
    assert_eq!(row(cmp, "activation peak")["log"].as_f64(), Some(1.44));
    assert_eq!(row(cmp, "KV cache")["log"].as_f64(), Some(56.21));
    assert_eq!(row(cmp, "KV cache tokens")["log"].as_f64(), Some(460_496.0));
    // Model Runner V2 adds its graph estimate from 0.29: on an A100 (256 sequences, 2048
    // tokens) 51 piecewise graphs of 33 pieces and 35 full graphs of 32 layers, 251 KiB a
    // layer-graph.
    let graphs = row(cmp, "CUDA graphs")["estimate"].as_f64().unwrap();
    assert!((graphs - (51 * 33 + 35 * 32) as f64 * 251.0 / 1024.0 / 1024.0).abs() < 0.001, "{cmp}");
    let v1 = json(&[&flags[..], &["--model-runner", "v1"]].concat());
    let said = v1["comparison"]["contradictions"].to_string();
    assert!(said.contains("Model Runner V2 (model_runner.py)") && said.contains("--model-runner v2"), "{said}");
}

/// A vLLM ≤ 0.16 log says which sampler ran; the comparison says when the estimate assumed the
/// other (PyTorch's top-k/top-p sort against FlashInfer's), and how to follow the log.
#[test]
fn the_logs_sampler_is_compared_with_the_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("vllm.log");
    std::fs::write(
        &log,
        "(EngineCore_0 pid=1812) INFO 09-04 01:02:57 [topk_topp_sampler.py:50] Using FlashInfer for top-p & top-k sampling.\n(EngineCore_0 pid=1812) INFO 09-04 01:03:03 [gpu_model_runner.py:2007] Model loading took 14.2488 GiB and 4.422213 seconds\n(EngineCore_0 pid=1812) INFO 09-04 01:04:29 [gpu_worker.py:276] Available KV cache memory: 5.01 GiB\n",
    )
    .unwrap();
    let p = log.to_str().unwrap();
    let flags = [
        "serve",
        "-m",
        "qwen2.5-7b",
        "-g",
        "a100-80gb",
        "--max-model-len",
        "16384",
        "--gpu-memory-utilization",
        "0.25",
        "--vllm-version",
        "0.10",
        "--log",
        p,
    ];
    let said = json(&flags)["comparison"]["contradictions"].to_string();
    assert!(said.contains("--flashinfer-sampler on"), "{said}");
    let followed = json(&[&flags[..], &["--flashinfer-sampler", "on"]].concat());
    assert_eq!(followed["comparison"]["contradictions"].as_array().unwrap().len(), 0, "{followed}");
}

/// The release a vLLM log names ("vLLM API server version …") against the rules the estimate
/// follows: a difference is said, with the flag that follows the log.
#[test]
fn the_logs_release_is_compared_with_the_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("vllm.log");
    std::fs::write(
        &log,
        "(APIServer pid=1671) INFO 09-04 01:02:21 [api_server.py:1805] vLLM API server version 0.10.1.1\n(EngineCore_0 pid=1812) INFO 09-04 01:03:03 [gpu_model_runner.py:2007] Model loading took 14.2488 GiB and 4.422213 seconds\n",
    )
    .unwrap();
    let base = ["serve", "-m", "qwen2.5-7b", "-g", "a100-80gb", "--max-model-len", "16384", "--log", log.to_str().unwrap()];
    let said = json(&base)["comparison"]["contradictions"].to_string();
    assert!(said.contains("vLLM 0.10.1.1") && said.contains("--vllm-version 0.10"), "{said}");
    let followed = json(&[&base[..], &["--vllm-version", "0.10.1.1"]].concat());
    assert!(!followed["comparison"]["contradictions"].to_string().contains("--vllm-version"), "{followed}");
}

/// A log that loads a drafter ("Loading drafter model...", lines of the public Qwen3.6-27B MTP
/// start-up in validation/vllm/spec_logs.jsonl) against an estimate without one, and the reverse.
#[test]
fn the_logs_drafter_is_compared_with_the_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("vllm.log");
    std::fs::write(
        &log,
        "(EngineCore pid=182) INFO 07-02 22:01:01 [gpu_model_runner.py:5184] Loading drafter model...\n(EngineCore pid=182) INFO 07-02 22:01:13 [gpu_model_runner.py:5255] Model loading took 20.57 GiB memory and 139.645153 seconds\n(EngineCore pid=182) INFO 07-02 22:04:55 [gpu_worker.py:515] Available KV cache memory: 48.6 GiB\n",
    )
    .unwrap();
    let p = log.to_str().unwrap();
    let flags = ["serve", "-m", "qwen3-8b", "-g", "h100", "--max-model-len", "16384", "--vllm-version", "0.23", "--log", p];
    let said = json(&flags)["comparison"]["contradictions"].to_string();
    assert!(said.contains("loads a drafter") && said.contains("--speculative-config"), "{said}");
    let with = json(&[&flags[..], &["--speculative-config", r#"{"method": "ngram", "num_speculative_tokens": 2}"#]].concat());
    // n-gram drafting loads no drafter either: the log still differs.
    assert!(with["comparison"]["contradictions"].to_string().contains("loads a drafter"), "{with}");
    // An estimate with a drafter against a log without one.
    let plain = dir.path().join("plain.log");
    std::fs::write(&plain, "INFO [gpu_model_runner.py:2007] Model loading took 15.2 GiB and 4.4 seconds\n").unwrap();
    let head = util::repo_file("validation/vllm/spec_heads/qwen3-32b-eagle3.config.json");
    let spec = format!(r#"{{"method": "eagle3", "model": "{head}", "num_speculative_tokens": 3}}"#);
    let v = json(&[
        "serve",
        "-m",
        "qwen3-8b",
        "-g",
        "h100",
        "--max-model-len",
        "16384",
        "--speculative-config",
        &spec,
        "--log",
        plain.to_str().unwrap(),
    ]);
    assert!(v["comparison"]["contradictions"].to_string().contains("shows none"), "{v}");
}

/// An SGLang log with a speculative draft (validation/sglang/spec_logs.jsonl, SGLang's docs
/// notebook of 2025-05-04: Llama-3.1-8B-Instruct with an EAGLE-3 head): the draft's own
/// "Load weight end" is read as the draft's, not the target's, and held to vram's draft.
#[test]
fn an_sglang_draft_load_is_compared_as_the_drafts() {
    let logs = std::fs::read_to_string(util::repo_file("validation/sglang/spec_logs.jsonl")).unwrap();
    let case: Value = logs
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["id"] == "docs-ci-2025-05-04-llama31-8b-eagle3")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sglang.log");
    let lines: Vec<&str> = case["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    std::fs::write(&log, lines.join("\n")).unwrap();
    let head = util::repo_file("validation/vllm/spec_heads/llama3-8b-eagle3.config.json");
    let base = ["serve", "--engine", "sglang", "-m", "llama-3.1-8b", "-g", "h100", "--dtype", "float16", "--context-length", "131072"];
    let spec = [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        head.as_str(),
        "--speculative-num-steps",
        "5",
        "--speculative-eagle-topk",
        "8",
        "--speculative-num-draft-tokens",
        "32",
    ];
    let c = json(&[&base[..], &spec[..], &["--log", log.to_str().unwrap()]].concat())["comparison"].clone();
    let d = row(&c, "draft weights");
    assert_eq!(d["log_printed"], "1.77 GB", "{c}");
    assert!((d["estimate"].as_f64().unwrap() - 1.77).abs() < 0.005, "{c}");
    // The target's own load: 16.84 GB logged (a shared CI GPU; Llama-3.1-8B in float16 is 14.96).
    assert_eq!(row(&c, "weights per GPU")["log_printed"], "16.84 GB", "{c}");
    // Without the speculative flags the draft load is called out.
    let plain = json(&[&base[..], &["--log", log.to_str().unwrap()]].concat())["comparison"]["contradictions"].to_string();
    assert!(plain.contains("speculative draft"), "{plain}");
}
