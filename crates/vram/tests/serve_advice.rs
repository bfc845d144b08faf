//! `vram serve`'s ranked alternatives and `--emit`: every alternative's numbers equal `vram serve`
//! re-run with that alternative's flags; the emitted launches carry the GPU count and the flags;
//! an existing `--emit-file` is not overwritten without `--force`.

mod util;

use serde_json::Value;
use util::{fails, json, vram};

/// `vram serve` with `base` and an alternative's flags ("--max-model-len 40272" split in words),
/// replacing the same flag in `base`.
fn rerun(base: &[&str], flag: &str) -> Value {
    let words: Vec<&str> = flag.split_whitespace().collect();
    let mut args: Vec<&str> = base.to_vec();
    if let Some(i) = args.iter().position(|a| *a == words[0]) {
        args.drain(i..i + 2);
    }
    args.extend(words);
    json(&args)
}

fn stdout(args: &[&str]) -> String {
    let out = vram().args(args).output().expect("runs");
    assert!(out.status.success(), "vram {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Checks every non-suggestion alternative against a re-run; `kv` and `conc` read the re-run.
fn check_reruns(base: &[&str], kv: &dyn Fn(&Value) -> u64, conc: &dyn Fn(&Value) -> f64) -> Vec<Value> {
    let v = json(base);
    let adv = &v["advice"];
    assert_eq!(adv["needed"], true, "{base:?} should need advice");
    let alts = adv["alternatives"].as_array().expect("alternatives").clone();
    assert!(alts.len() >= 3, "{alts:?}");
    for a in alts.iter().filter(|a| a["suggestion"] == false) {
        let r = rerun(base, a["flag"].as_str().unwrap());
        assert_eq!(a["kv_tokens"].as_u64().unwrap(), kv(&r), "{}", a["flag"]);
        let (x, y) = (a["max_concurrency"].as_f64().unwrap(), conc(&r));
        assert!((x - y).abs() <= 1e-9 * y.max(1.0), "{}: {x} vs {y}", a["flag"]);
    }
    // Fits first.
    let fits: Vec<bool> = alts.iter().map(|a| a["fits"].as_bool().unwrap()).collect();
    assert!(fits.windows(2).all(|w| w[0] >= w[1]), "{fits:?}");
    alts
}

#[test]
fn vllm_alternatives_equal_a_rerun_with_their_flag() {
    let base = ["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--max-model-len", "131072"];
    let g = |r: &Value| r["gpus"][0].clone();
    let alts = check_reruns(&base, &|r| g(r)["kv_tokens"].as_u64().unwrap(), &|r| g(r)["max_concurrency"].as_f64().unwrap());
    let kinds: Vec<&str> = alts.iter().map(|a| a["change"].as_str().unwrap()).collect();
    for k in ["kv-fp8", "memory-fraction", "tensor-parallel", "quantized-weights", "max-model-len", "cpu-offload"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    // The shorter length is the longest that fits: one token more does not.
    let len = alts.iter().find(|a| a["change"] == "max-model-len").unwrap();
    let n = len["max_model_len"].as_u64().unwrap();
    let more = json(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--max-model-len", &(n + 1).to_string()]);
    assert_eq!(more["gpus"][0]["fits"], false);
    // The AWQ checkpoint is a suggestion and names no repository.
    let awq = alts.iter().find(|a| a["suggestion"] == true).expect("a suggestion");
    assert!(awq["flag"].as_str().unwrap().contains("<an AWQ"), "{awq}");
    // The text lists the same ranking.
    let text = stdout(&base);
    assert!(text.contains("alternatives (each one change") && text.contains("--tensor-parallel-size 2"), "{text}");
}

#[test]
fn sglang_alternatives_equal_a_rerun_with_their_flag() {
    let base = ["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--engine", "sglang"];
    let g = |r: &Value| r["gpus"][0].clone();
    let conc = |r: &Value| g(r)["max_total_num_tokens"].as_f64().unwrap() / g(r)["context_len"].as_f64().unwrap();
    let alts = check_reruns(&base, &|r| g(r)["max_total_num_tokens"].as_u64().unwrap(), &conc);
    assert!(alts.iter().any(|a| a["flag"] == "--kv-cache-dtype fp8_e5m2"), "{alts:?}");
    assert!(alts.iter().any(|a| a["change"] == "max-model-len" && a["flag"].as_str().unwrap().starts_with("--context-length")));
}

#[test]
fn a_launch_that_fits_lists_at_most_two_that_raise_concurrency() {
    let v = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"]);
    assert_eq!(v["advice"]["needed"], false);
    let alts = v["advice"]["alternatives"].as_array().unwrap();
    assert!(alts.len() <= 2);
    let now = v["gpus"][0]["max_concurrency"].as_f64().unwrap();
    assert!(alts.iter().all(|a| a["fits"] == true && a["max_concurrency"].as_f64().unwrap() > now));
    // The text shows the concurrency the length buys, and no alternatives.
    let text = stdout(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"]);
    assert!(text.contains("maximum concurrency for 8,192 tokens per request") && !text.contains("alternatives ("), "{text}");
}

/// The JSON-style flow list after `key: ` on one line, parsed as JSON.
fn flow_list(text: &str, key: &str) -> Vec<String> {
    let line = text.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_else(|| panic!("no {key} in {text}"));
    serde_json::from_str(line.trim_start().trim_start_matches(key).trim()).expect("a JSON-compatible YAML list")
}

#[test]
fn emitted_launches_carry_the_gpu_count_and_the_flags() {
    let base =
        ["serve", "-m", "llama-3.1-8b", "-g", "h100", "--tp", "2", "-pp", "2", "--data-parallel-size", "2", "--max-model-len", "16384"];
    let with = |f: &str| {
        let mut a = base.to_vec();
        a.extend(["--emit", f]);
        stdout(&a)
    };
    let cmd = with("vllm");
    assert!(cmd.contains("vllm serve meta-llama/Llama-3.1-8B"), "{cmd}");
    for f in ["--tensor-parallel-size 2", "--pipeline-parallel-size 2", "--data-parallel-size 2", "--max-model-len 16384"] {
        assert!(cmd.contains(f), "{f} in {cmd}");
    }
    let compose = with("docker");
    assert!(compose.contains("count: 8") && compose.contains("ipc: host") && compose.contains("- HF_TOKEN"), "{compose}");
    let argv = flow_list(&compose, "command:");
    assert_eq!(&argv[..2], ["--model", "meta-llama/Llama-3.1-8B"]);
    assert!(argv.windows(2).any(|w| w == ["--tensor-parallel-size", "2"]));
    let k8s = with("k8s");
    assert!(k8s.contains("nvidia.com/gpu: 8") && k8s.contains("medium: Memory") && k8s.contains("path: /health"), "{k8s}");
    assert!(k8s.contains("kind: Deployment") && k8s.contains("kind: Service"));
    let args = flow_list(&k8s, "args:");
    assert!(args.windows(2).any(|w| w == ["--max-model-len", "16384"]));
    // SGLang: its own command and port.
    let sg = stdout(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--engine", "sglang", "--tp", "4", "--emit", "k8s"]);
    assert!(sg.contains("nvidia.com/gpu: 4") && sg.contains("sglang.launch_server") && sg.contains("containerPort: 30000"), "{sg}");
    assert!(flow_list(&sg, "args:").windows(2).any(|w| w == ["--tp-size", "4"]));
}

/// A runner chosen with `--model-runner` is an environment switch in vLLM: the emitted launch
/// sets it, so the engine runs what was estimated; left to vLLM, nothing is set.
#[test]
fn emitted_launches_set_the_model_runner_the_estimate_followed() {
    let base = ["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"];
    let with = |extra: &[&str]| stdout(&[&base[..], extra].concat());
    let cmd = with(&["--model-runner", "v1", "--emit", "vllm"]);
    assert!(cmd.contains("VLLM_USE_V2_MODEL_RUNNER=0 vllm serve meta-llama/Llama-3.1-8B"), "{cmd}");
    assert!(!with(&["--emit", "vllm"]).contains("VLLM_USE_V2_MODEL_RUNNER"));
    let compose = with(&["--model-runner", "v2", "--emit", "docker"]);
    assert!(compose.contains("- \"VLLM_USE_V2_MODEL_RUNNER=1\""), "{compose}");
    let k8s = with(&["--model-runner", "v1", "--emit", "k8s"]);
    assert!(k8s.contains("- name: VLLM_USE_V2_MODEL_RUNNER\n              value: \"0\""), "{k8s}");
}

#[test]
fn emit_alternative_applies_the_ranked_change() {
    let base = ["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--max-model-len", "131072"];
    let v = json(&base);
    let first = &v["advice"]["alternatives"][0];
    let mut a = base.to_vec();
    a.extend(["--emit", "docker", "--emit-alternative", "1"]);
    let out = stdout(&a);
    let argv = flow_list(&out, "command:");
    let flag: Vec<&str> = first["flag"].as_str().unwrap().split_whitespace().collect();
    assert!(argv.windows(flag.len()).any(|w| w == flag.as_slice()), "{flag:?} in {argv:?}");
    assert!(out.contains(&format!("count: {}", first["gpus"])), "{out}");
    assert!(!out.contains("does NOT fit"), "alternative 1 fits: {out}");
    // As given, the launch does not fit: the emitted file says so.
    let mut a = base.to_vec();
    a.extend(["--emit", "vllm"]);
    assert!(stdout(&a).contains("# WARNING: vram estimates that this launch does NOT fit"));
    // Out of range, and a suggestion (the AWQ checkpoint vram cannot name): exit 2.
    let mut a = base.to_vec();
    a.extend(["--emit", "vllm", "--emit-alternative", "99"]);
    assert!(fails(&a, 2).contains("ranked alternatives"));
    let n = v["advice"]["alternatives"].as_array().unwrap().iter().position(|a| a["suggestion"] == true).unwrap() + 1;
    let mut a = base.to_vec();
    let n = n.to_string();
    a.extend(["--emit", "vllm", "--emit-alternative", &n]);
    assert!(fails(&a, 2).contains("suggestion"));
}

#[test]
fn emit_refuses_a_format_of_another_engine_and_unknown_formats() {
    let e = fails(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--engine", "sglang", "--emit", "vllm"], 2);
    assert!(e.contains("--emit sglang"), "{e}");
    let e = fails(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--emit", "sglang"], 2);
    assert!(e.contains("--engine sglang"), "{e}");
    let e = fails(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--emit", "helm"], 2);
    assert!(e.contains("vllm, sglang, llama-server, docker or k8s"), "{e}");
}

#[test]
fn emit_file_is_not_overwritten_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("compose.yaml");
    let p = path.to_str().unwrap();
    let args = ["serve", "-m", "qwen2.5-7b", "-g", "h100", "--max-model-len", "8192", "--emit", "docker", "--emit-file", p];
    // A new file: the launch goes there, the report to stdout.
    let report = stdout(&args);
    assert!(report.contains("GPU KV cache size"), "{report}");
    assert!(std::fs::read_to_string(&path).unwrap().contains("vllm/vllm-openai"));
    std::fs::write(&path, "mine").unwrap();
    let e = fails(&args, 2);
    assert!(e.contains("exists") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "mine");
    let mut forced = args.to_vec();
    forced.push("--force");
    stdout(&forced);
    assert!(std::fs::read_to_string(&path).unwrap().contains("services:"));
}

#[test]
fn a_pasted_command_keeps_its_flags_in_the_emitted_launch() {
    let out = vram()
        .args([
            "serve",
            "-g",
            "h100",
            "--emit",
            "vllm",
            "--",
            "vllm",
            "serve",
            "qwen2.5-7b",
            "--tensor-parallel-size",
            "2",
            "--max-model-len",
            "16384",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("vllm serve Qwen/Qwen2.5-7B") && s.contains("--tensor-parallel-size 2") && s.contains("--max-model-len 16384"),
        "{s}"
    );
}

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "../../vram-core/tests/support/moe_gguf.rs"]
mod moe_gguf;

#[test]
fn llama_cpp_alternatives_equal_a_replan_with_their_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-moe.gguf");
    std::fs::write(&path, moe_gguf::tiny_moe().bytes()).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(16 << 20).unwrap();
    let p = path.to_str().unwrap();
    // --fit off: the plan as set, which the alternatives change one flag at a time.
    let full = json(&["serve", "-m", p, "-g", "24GiB", "--cuda-context", "1B", "--fit", "off", "-c", "4096"]);
    assert_eq!(full["advice"]["needed"], false);
    let total = full["plan"]["gpu_total_bytes"].as_u64().unwrap();
    let gpu = format!("{}B", total - total / 10);
    let base = ["serve", "-m", p, "-g", &gpu, "--cuda-context", "1B", "--fit", "off", "-c", "4096"];
    let v = json(&base);
    assert_eq!(v["advice"]["needed"], true);
    let alts = v["advice"]["alternatives"].as_array().unwrap();
    // --n-cpu-moe and -ngl are vram flags too: re-plan with them and compare.
    for a in alts.iter().filter(|a| ["--n-cpu-moe", "-ngl"].contains(&a["flags"][0]["name"].as_str().unwrap())) {
        let r = rerun(&base, a["flag"].as_str().unwrap());
        assert!(r["plan"]["gpu_total_bytes"].as_u64().unwrap() <= total - total / 10, "{}", a["flag"]);
        assert_eq!(a["kv_tokens"], r["plan"]["ctx"], "{}", a["flag"]);
    }
    assert!(alts.iter().any(|a| a["flags"][0]["name"] == "--n-cpu-moe"), "{alts:?}");
    let text = stdout(&base);
    assert!(text.contains("re-run through llama.cpp's accounting"), "{text}");
}

/// Every vLLM flag the plan read goes into the emitted launch: the image flags of a VLM and the
/// state flags of a hybrid were dropped before, so the launch would not have been the plan.
#[test]
fn emitted_vllm_launch_keeps_image_and_state_flags() {
    const Q35: &str = "../../validation/configs/vlm/Qwen3.5-0.8B.json";
    let cmd = stdout(&[
        "serve",
        "-m",
        Q35,
        "-g",
        "h100",
        "--limit-mm-per-prompt",
        "image=2",
        "--mm-processor-kwargs",
        r#"{"max_pixels": 1003520}"#,
        "--mamba-ssm-cache-dtype",
        "bfloat16",
        "--no-enable-prefix-caching",
        "--emit",
        "vllm",
    ]);
    for f in [
        "--limit-mm-per-prompt image=2",
        r#"--mm-processor-kwargs '{"max_pixels": 1003520}'"#,
        "--mamba-ssm-cache-dtype bfloat16",
        "--no-enable-prefix-caching",
    ] {
        assert!(cmd.contains(f), "{f} in {cmd}");
    }
    let lm = stdout(&["serve", "-m", Q35, "-g", "h100", "--language-model-only", "--emit", "vllm"]);
    assert!(lm.contains("--language-model-only"), "{lm}");
}

/// On a GPU of 70 GiB or more vLLM keeps 1024 sequences, and its profile run samples over that
/// many rows (vLLM 0.33's warm-up pass: 14 bytes a logit): `--max-num-seqs 256` is offered when
/// it grows the KV pool, with the numbers of a re-run; a 24 GiB GPU's default is 256 already.
#[test]
fn fewer_sequences_are_offered_where_the_sampler_rows_cost_pool() {
    let base = ["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tp", "2", "--max-model-len", "131072"];
    let v = json(&base);
    let alts = v["advice"]["alternatives"].as_array().unwrap();
    let a = alts.iter().find(|a| a["change"] == "max-num-seqs").unwrap_or_else(|| panic!("{alts:?}"));
    assert_eq!(a["flag"], "--max-num-seqs 256");
    let r = rerun(&base, "--max-num-seqs 256");
    assert_eq!(a["kv_tokens"], r["gpus"][0]["kv_tokens"]);
    assert!(a["kv_tokens"].as_u64().unwrap() > v["gpus"][0]["kv_tokens"].as_u64().unwrap());
    let small = json(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--max-model-len", "131072"]);
    assert!(!small["advice"].to_string().contains("max-num-seqs"), "{}", small["advice"]);
}
