//! `vram serve -g GPU -- <launch command>`: a pasted vLLM or llama.cpp command is read as the
//! engine reads it; every flag is read, listed as ignored, refused, or listed as not understood.

mod util;

use util::{fails, json, vram};

/// `json` for a pasted command: `--json` goes before the `--` (after it, it would be the engine's).
fn pasted(args: &[&str]) -> serde_json::Value {
    let k = args.iter().position(|a| *a == "--").expect("a pasted command");
    let out = util::vram().args(&args[..k]).arg("--json").args(&args[k..]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn a_pasted_vllm_command_equals_the_same_flags_given_to_vram() {
    let pasted = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "qwen2.5-7b",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "16384",
        "--gpu-memory-utilization=0.85",
        "--port",
        "8000",
        "--trust-remote-code",
        "--enable-lora",
        "--max-lora-rank",
        "32",
        "--some-new-flag",
        "7",
    ]);
    let direct = json(&[
        "serve",
        "-m",
        "qwen2.5-7b",
        "-g",
        "h100",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "16384",
        "--gpu-memory-utilization",
        "0.85",
        "--enable-lora",
        "--max-lora-rank",
        "32",
    ]);
    let (p, d) = (&pasted["gpus"][0], &direct["gpus"][0]);
    for k in ["weights_bytes", "activation_peak_bytes", "kv_cache_bytes", "num_kv_blocks", "lora_slots_bytes"] {
        assert_eq!(p[k], d[k], "{k}");
    }
    let notes = pasted.to_string();
    assert!(notes.contains("ignored (no effect on GPU memory): --port 8000, --trust-remote-code"), "{notes}");
    assert!(notes.contains("NOT UNDERSTOOD") && notes.contains("--some-new-flag 7"), "{notes}");
}

#[test]
fn the_openai_entrypoint_and_llama_server_are_read_too() {
    let v = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "llama-3.1-8b",
        "--max-model-len",
        "8192",
    ]);
    assert_eq!(v["gpus"][0]["max_model_len"], 8192, "{v}");
}

#[test]
fn memory_changing_flags_vram_does_not_model_are_refused_by_name() {
    let e = fails(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--decode-context-parallel-size", "2"], 2);
    assert!(e.contains("--decode-context-parallel-size 2"), "{e}");
    // Chunked prefill off sizes the default batch, and so the profile run, by max-model-len
    // (arg_utils.py); a given batch below it is refused as vLLM refuses it (verify_max_model_len).
    let off =
        pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "32768", "--no-enable-chunked-prefill"]);
    let on = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "32768"]);
    assert_eq!(
        (off["gpus"][0]["max_num_batched_tokens"].as_u64(), on["gpus"][0]["max_num_batched_tokens"].as_u64()),
        (Some(32768), Some(8192))
    );
    assert!(off["gpus"][0]["activation_peak_bytes"].as_u64() > on["gpus"][0]["activation_peak_bytes"].as_u64());
    let e = fails(
        &[
            "serve",
            "-g",
            "h100",
            "--",
            "vllm",
            "serve",
            "llama-3.1-8b",
            "--max-model-len",
            "32768",
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            "8192",
        ],
        2,
    );
    assert!(e.contains("verify_max_model_len"), "{e}");
    // --performance-mode throughput doubles the defaults it was not given; interactivity
    // captures every graph size to 32; before 0.19 there is no such flag.
    let thr = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--performance-mode", "throughput"]);
    assert_eq!((thr["gpus"][0]["max_num_batched_tokens"].as_u64(), thr["gpus"][0]["max_num_seqs"].as_u64()), (Some(16384), Some(2048)));
    let inter = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--max-model-len",
        "8192",
        "--performance-mode",
        "interactivity",
    ]);
    let graphs = |v: &serde_json::Value| v["gpus"][0]["cuda_graphs"]["piecewise"].as_u64().unwrap();
    let plain = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"]);
    assert_eq!(graphs(&inter), graphs(&plain) - 7 + 32);
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--performance-mode", "throughput", "--vllm-version", "0.15"], 2)
        .contains("0.19"));
    // VLLM_USE_FLASHINFER_SAMPLER in a pasted command is --flashinfer-sampler: before 0.17 it
    // spares the profile run PyTorch's top-k/top-p sort; --emit writes the variable back.
    let env = pasted(&[
        "serve",
        "-g",
        "h100",
        "--vllm-version",
        "0.10",
        "--",
        "VLLM_USE_FLASHINFER_SAMPLER=1",
        "vllm",
        "serve",
        "qwen3-30b-a3b",
        "--max-model-len",
        "8192",
    ]);
    let typed = json(&[
        "serve",
        "-m",
        "qwen3-30b-a3b",
        "-g",
        "h100",
        "--vllm-version",
        "0.10",
        "--max-model-len",
        "8192",
        "--flashinfer-sampler",
        "on",
    ]);
    let pip = json(&["serve", "-m", "qwen3-30b-a3b", "-g", "h100", "--vllm-version", "0.10", "--max-model-len", "8192"]);
    let act = |v: &serde_json::Value| v["gpus"][0]["activation_peak_bytes"].as_u64().unwrap();
    assert_eq!(act(&env), act(&typed));
    // 24 bytes more a logit at 1,024 requests × 151,936: 3.47 GiB.
    assert_eq!(act(&pip) - act(&typed), 24 * 1024 * 151_936, "{} vs {}", act(&pip), act(&typed));
    assert!(pip.to_string().contains("vram assumes pip"), "{pip}");
    let out = vram()
        .args(["serve", "-m", "qwen3-30b-a3b", "-g", "h100", "--vllm-version", "0.10", "--flashinfer-sampler", "on", "--emit", "vllm"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("VLLM_USE_FLASHINFER_SAMPLER=1"), "{}", String::from_utf8_lossy(&out.stdout));
    // Pipeline parallelism is read like the flag given to vram.
    let pp = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192", "-pp", "2"]);
    let direct = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--pipeline-parallel-size", "2"]);
    assert_eq!(pp["gpus"][0]["weights_bytes"], direct["gpus"][0]["weights_bytes"]);
    // CPU offload is read like the flag given to vram; 0 (vLLM's default) changes nothing.
    let none = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192", "--cpu-offload-gb", "0"]);
    let plain = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"]);
    assert_eq!(none["gpus"][0]["weights_bytes"], plain["gpus"][0]["weights_bytes"]);
    // Attention data parallelism (MoE models): the deprecated `--dp N --enable-dp-attention` is
    // `--attn-dp-size N`, typed or pasted, one replica; beside replicas SGLang refuses it, and on a
    // dense model vram says it does not model it.
    let moe = |extra: &[&str]| {
        let mut a = vec!["serve", "-g", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path", "qwen3-30b-a3b", "--tp", "4"];
        a.extend(extra);
        pasted(&a)
    };
    let old_form = moe(&["--dp", "2", "--enable-dp-attention"]);
    let new_form = moe(&["--attn-dp-size", "2"]);
    let typed = json(&["serve", "-m", "qwen3-30b-a3b", "-g", "h100", "--engine", "sglang", "--tp-size", "4", "--attn-dp-size", "2"]);
    for v in [&new_form, &typed] {
        assert_eq!(v["gpus"][0]["weights_bytes"], old_form["gpus"][0]["weights_bytes"]);
        assert_eq!(v["gpus"][0]["max_total_num_tokens"], old_form["gpus"][0]["max_total_num_tokens"]);
    }
    assert_eq!((old_form["gpus"][0]["attn_dp_size"].as_u64(), old_form["gpus_in_all"].as_u64()), (Some(2), Some(4)));
    assert!(old_form["gpus"][0]["weights_bytes"].as_u64() > moe(&[])["gpus"][0]["weights_bytes"].as_u64());
    let emitted = vram()
        .args([
            "serve",
            "-m",
            "qwen3-30b-a3b",
            "-g",
            "h100",
            "--engine",
            "sglang",
            "--tp-size",
            "4",
            "--dp-size",
            "2",
            "--enable-dp-attention",
            "--emit",
            "sglang",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&emitted.stdout);
    assert!(text.contains("--attn-dp-size 2") && !text.contains("--dp-size"), "{text}");
    let e = fails(
        &["serve", "-m", "qwen3-30b-a3b", "-g", "h100", "--engine", "sglang", "--tp-size", "4", "--dp-size", "2", "--attn-dp-size", "2"],
        2,
    );
    assert!(e.contains("refuses"), "{e}");
    let e = fails(
        &[
            "serve",
            "-g",
            "h100",
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "llama-3.1-8b",
            "--tp",
            "2",
            "--dp",
            "2",
            "--enable-dp-attention",
        ],
        2,
    );
    assert!(e.contains("dense"), "{e}");
    // SGLang's --dp-size: replicas of the TP group, each the same per GPU (0.5.23 dp_size).
    let one = sglang_pasted(&["--tp", "2"]);
    let dp = sglang_pasted(&["--tp", "2", "--dp-size", "4"]);
    for k in ["weights_bytes", "kv_pool_bytes", "max_total_num_tokens", "max_running_requests", "headroom_bytes"] {
        assert_eq!(dp["gpus"][1][k], one["gpus"][1][k], "{k}: per GPU, a replica is the model alone");
    }
    assert_eq!((dp["dp_size"].as_u64(), dp["gpus_in_all"].as_u64()), (Some(4), Some(8)));
    let typed = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--tp-size", "2", "--dp-size", "4"]);
    assert_eq!(typed["gpus"][0]["kv_pool_bytes"], dp["gpus"][0]["kv_pool_bytes"]);
    let out = vram().args(["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--dp-size", "3"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--dp-size 3: 3 replicas") && text.contains("3 GPUs in all"), "{text}");
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--dp-size", "0"], 2).contains("--dp-size"));
    let out = vram()
        .args(["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--dp-size", "2", "--emit", "docker"])
        .output()
        .unwrap();
    let compose = String::from_utf8_lossy(&out.stdout);
    assert!(compose.contains("\"--dp-size\", \"2\"") && compose.contains("count: 2"), "{compose}");
    assert!(fails(&["serve", "-g", "h100", "--", "docker", "run", "x"], 2).contains("vllm serve MODEL"));
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b"], 2).contains("--model included"));
    assert!(fails(&["serve", "-g", "h100", "--", "vllm", "serve", "--port", "8000"], 2).contains("names no model"));
}

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "../../vram-core/tests/support/moe_gguf.rs"]
mod moe_gguf;
#[path = "../../vram-core/tests/support/synthetic_models.rs"]
mod synthetic_models;

#[test]
fn a_pasted_llama_server_command_reads_its_short_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-moe-Q4_K_M.gguf");
    std::fs::write(&path, moe_gguf::tiny_moe().bytes()).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(16 << 20).unwrap();
    let p = path.to_str().unwrap();
    let v = pasted(&[
        "serve",
        "-g",
        "24GiB",
        "--",
        "llama-server",
        "-m",
        p,
        "-ngl",
        "99",
        "-c",
        "8192",
        "-np",
        "2",
        "-ncmoe",
        "3",
        "--port",
        "8080",
    ]);
    let d = json(&["serve", "-m", p, "-g", "24GiB", "-ngl", "99", "-c", "8192", "-np", "2", "-ncmoe", "3"]);
    assert_eq!(v["plan"], d["plan"]);
    assert!(v["notes"].to_string().contains("--port 8080"), "{v}");
    // -b/--batch-size is the logical batch: llama.cpp runs min(-b, -ub) tokens a micro-batch
    // (llama-context.cpp), so -b 256 sizes the compute buffers as -ub 256 does, and -b above
    // -ub changes nothing.
    let small_b = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", p, "-c", "8192", "-b", "256"]);
    let small_ub = json(&["serve", "-m", p, "-g", "24GiB", "-c", "8192", "--ubatch-size", "256"]);
    assert_eq!(small_b["config"]["ubatch"].as_u64(), Some(256), "{small_b}");
    assert_eq!(small_b["plan"], small_ub["plan"]);
    let big_b = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", p, "-c", "8192", "--batch-size", "4096"]);
    let plain = json(&["serve", "-m", p, "-g", "24GiB", "-c", "8192"]);
    assert_eq!(big_b["plan"], plain["plan"]);
    assert!(small_b["plan"]["gpu_compute_bytes"].as_u64() < plain["plan"]["gpu_compute_bytes"].as_u64(), "{small_b}");
    assert!(fails(&["serve", "-m", p, "-g", "24GiB", "-b", "0"], 2).contains("--batch-size"));
    // A llama.cpp flag under vLLM is refused by name.
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "-b", "256"], 2).contains("--batch-size"));
}

#[test]
fn max_model_len_auto_picks_the_longest_that_fits() {
    let plain = json(&["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tensor-parallel-size", "2"]);
    let g = &plain["gpus"][0];
    assert_eq!(g["fits"], false, "{g}");
    let longest = g["max_model_len_that_fits"].as_u64().unwrap();
    for spelling in ["auto", "-1"] {
        let v = json(&["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tensor-parallel-size", "2", "--max-model-len", spelling]);
        assert_eq!(v["gpus"][0]["max_model_len"].as_u64(), Some(longest), "{spelling}");
        assert_eq!(v["gpus"][0]["fits"], true);
    }
    // A model that fits keeps its own length.
    let small = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "auto"]);
    assert_eq!(small["gpus"][0]["max_model_len"], 131072);
}

#[test]
fn kv_cache_memory_bytes_sets_the_pool_directly() {
    let v = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--kv-cache-memory-bytes", "20GiB"]);
    let g = &v["gpus"][0];
    assert_eq!(g["kv_cache_bytes"].as_u64(), Some(20 << 30));
    assert_eq!(g["requested_bytes"].as_u64().unwrap(), g["non_kv_bytes"].as_u64().unwrap() + (20 << 30));
    // Bytes by definition: a bare number is bytes, as vLLM reads it.
    let b = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--kv-cache-memory-bytes", "21474836480"]);
    assert_eq!(b["gpus"][0]["kv_cache_bytes"], g["kv_cache_bytes"]);
    // A pool larger than the GPU does not fit.
    let big = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--kv-cache-memory-bytes", "90GiB"]);
    assert_eq!(big["gpus"][0]["fits"], false);
}

/// vLLM's runner switch in a pasted command's environment is read, not listed as unknown.
#[test]
fn the_model_runner_environment_switch_is_read() {
    let v2 = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"]);
    assert_eq!(v2["gpus"][0]["model_runner"], "v2");
    let v1 =
        pasted(&["serve", "-g", "h100", "--", "VLLM_USE_V2_MODEL_RUNNER=0", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"]);
    assert_eq!(v1["gpus"][0]["model_runner"], "v1");
    assert!(v1["gpus"][0]["cuda_graph_estimate_bytes"].as_u64().unwrap() > 0, "the V1 runner's graph estimate applies");
    assert!(!v1.to_string().contains("NOT UNDERSTOOD"), "{v1}");
    // Each runner profiles its own sampler: from 0.33 Model Runner V2 adds its warm-up pass.
    assert!(v2["gpus"][0]["activation_peak_at"].as_str().unwrap().contains("warm-up sampling pass"), "{}", v2["gpus"][0]);
    assert!(!v1["gpus"][0]["activation_peak_at"].as_str().unwrap().contains("warm-up"), "{}", v1["gpus"][0]);
}

/// llama-server without -np runs 4 slots over one unified KV cache (llama.cpp PR #16736);
/// llama-cli runs one sequence; -kvu keeps an explicit -np unified.
#[test]
fn pasted_llama_server_and_llama_cli_take_their_own_slot_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let p = gguf_writer::write_tiny_llama(dir.path());
    let seqs = |v: &serde_json::Value| {
        (v["config"]["parallel"].as_u64(), v["config"]["unified"].as_bool(), v["plan"]["ctx_per_sequence"].as_u64())
    };
    let server = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", &p, "-c", "8192"]);
    assert_eq!(seqs(&server), (Some(4), Some(true), Some(8192)));
    let cli = pasted(&["serve", "-g", "24GiB", "--", "llama-cli", "-m", &p, "-c", "8192"]);
    assert_eq!(seqs(&cli), (Some(1), Some(false), Some(8192)));
    let explicit = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", &p, "-c", "8192", "-np", "4"]);
    assert_eq!(seqs(&explicit), (Some(4), Some(false), Some(2048)));
    let kvu = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", &p, "-c", "8192", "-np", "4", "-kvu"]);
    assert_eq!(seqs(&kvu), (Some(4), Some(true), Some(8192)));
}

/// `--mmproj FILE` (`-mm`): the projector's weights, read exactly from its header, join the GPU
/// total (on CUDA0 under a split); `--no-mmproj-offload` keeps them in RAM; Ollama refuses it.
#[test]
fn a_multimodal_projector_adds_its_weights_to_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let p = gguf_writer::write_tiny_llama(dir.path());
    let mut mm = gguf_writer::Writer::default();
    mm.str("general.architecture", "clip")
        .tensor("v.patch_embd.weight", &[14, 14, 3, 256], gguf_writer::F16)
        .tensor("v.blk.0.attn_q.weight", &[256, 256], gguf_writer::F16)
        .tensor("mm.0.weight", &[256, 1024], gguf_writer::F16);
    let mm_bytes = 2 * (14 * 14 * 3 * 256 + 256 * 256 + 256 * 1024);
    let mm_path = gguf_writer::write_padded(dir.path(), "mmproj-F16.gguf", &mm);
    let total = |v: &serde_json::Value| v["plan"]["gpu_total_bytes"].as_u64().unwrap();
    let base = json(&["serve", "-m", &p, "-g", "24GiB"]);
    let with = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path]);
    assert_eq!(total(&with) - total(&base), mm_bytes);
    let pasted = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", &p, "-mm", &mm_path]);
    assert_eq!(total(&pasted), total(&with));
    let host = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path, "--no-mmproj-offload"]);
    assert_eq!(total(&host), total(&base));
    let split = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path, "--tensor-split", "1,1"]);
    assert_eq!(split["split"]["plan"]["devices"][0]["projector_bytes"], mm_bytes);
    let e = fails(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path, "--engine", "ollama"], 2);
    assert!(e.contains("--mmproj is llama-server's"), "{e}");
}

/// A Gemma 3 projector (`clip.projector_type` gemma3, the hyper-parameters of
/// ggml-org/gemma-3-4b-it-GGUF's mmproj) adds its weights and the vision encoder's warm-up
/// compute buffer to the GPU — 121.25 MiB under flash attention as llama.cpp PR #22790's log
/// prints it, over 1 GiB without — and its 896² f32 image (9.19 MiB) to RAM; under
/// `--no-mmproj-offload` the whole buffer is in RAM. The report names the buffer.
#[test]
fn a_gemma3_projector_adds_its_vision_compute_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let p = gguf_writer::write_tiny_llama(dir.path());
    let mm = gguf_writer::gemma3_projector();
    let weights = 2 * 14 * 14 * 3 * 1152;
    let mm_path = gguf_writer::write_padded(dir.path(), "mmproj-gemma3.gguf", &mm);
    let gpu = |v: &serde_json::Value| v["plan"]["gpu_total_bytes"].as_u64().unwrap();
    let ram = |v: &serde_json::Value| v["plan"]["host"]["total_bytes"].as_u64().unwrap();
    let base = json(&["serve", "-m", &p, "-g", "24GiB"]);
    let with = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path]);
    let compute = (gpu(&with) - gpu(&base) - weights) as f64 / (1u64 << 20) as f64;
    assert!((compute - 121.25).abs() < 0.05, "{compute:.2} MiB");
    let inputs = (ram(&with) - ram(&base)) as f64 / (1u64 << 20) as f64;
    assert!((inputs - 9.19).abs() < 0.01, "{inputs:.2} MiB");
    let off = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path, "--flash-attn", "off"]);
    assert!(gpu(&off) - gpu(&base) > 1 << 30);
    let host = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path, "--no-mmproj-offload"]);
    assert_eq!(gpu(&host), gpu(&base));
    assert_eq!(ram(&host) - ram(&base), gpu(&with) - gpu(&base) - weights);
    let notes = with["notes"].to_string();
    assert!(notes.contains("warm-up image of 896 px") && notes.contains("gemma3"), "{notes}");
    // `--log` reads clip.cpp's own line beside the text model's buffers.
    let log = dir.path().join("load.log");
    std::fs::write(
        &log,
        "clip_ctx: CLIP using CUDA0 backend\nalloc_compute_meta:      CUDA0 compute buffer size =   121.25 MiB\nalloc_compute_meta:        CPU compute buffer size =     9.19 MiB\n",
    )
    .unwrap();
    let cmp = json(&["serve", "-m", &p, "-g", "24GiB", "--mmproj", &mm_path, "--log", log.to_str().unwrap()]);
    let rows = cmp["comparison"]["rows"].as_array().unwrap();
    let r = rows.iter().find(|r| r["quantity"] == "vision compute buffer (--mmproj)").expect("a vision row");
    assert_eq!(r["log"].as_f64(), Some(121.25));
    assert!((r["estimate"].as_f64().unwrap() - 121.25).abs() < 0.05, "{r}");
}

/// RAM as llama.cpp holds it: under mmap the file's span from the first to the last tensor left
/// on the CPU (with `-ngl 2` of 4 layers the output and the last layer are on the GPU, so the
/// span runs from the token embeddings at the start to the end of the third layer and leaves the
/// GPU's tensors at the file's end out); `--no-mmap` reads only those tensors; `--mlock` locks
/// what is held. A pasted command gives the same, `--log` compares the host buffers, and vLLM
/// refuses the flags.
#[test]
fn host_memory_follows_mmap_and_mlock() {
    let dir = tempfile::tempdir().unwrap();
    let p = gguf_writer::write_tiny_llama(dir.path());
    let host = |v: &serde_json::Value, k: &str| v["plan"]["host"][k].as_u64().unwrap();
    let mapped = json(&["serve", "-m", &p, "-g", "24GiB", "-ngl", "2"]);
    let cpu = mapped["plan"]["cpu_weights_bytes"].as_u64().unwrap();
    let data = mapped["plan"]["gpu_weights_bytes"].as_u64().unwrap() + cpu;
    assert_eq!(mapped["plan"]["host"]["weights_mapped"], true);
    assert!(host(&mapped, "weights_bytes") >= cpu && host(&mapped, "weights_bytes") < data, "{}", mapped["plan"]["host"]);
    assert_eq!(mapped["plan"]["output_on_gpu"], true);
    assert_eq!(host(&mapped, "locked_bytes"), 0);
    // Every layer and the output on the GPU: only the token embeddings, the first tensor, stay.
    let full = json(&["serve", "-m", &p, "-g", "24GiB"]);
    assert_eq!(host(&full, "weights_bytes"), full["plan"]["cpu_weights_bytes"].as_u64().unwrap());
    let read = json(&["serve", "-m", &p, "-g", "24GiB", "-ngl", "2", "--no-mmap", "--mlock"]);
    assert_eq!(host(&read, "weights_bytes"), cpu);
    assert_eq!(host(&read, "locked_bytes"), cpu);
    let total = ["weights_bytes", "kv_state_bytes", "output_bytes", "compute_bytes"].iter().map(|k| host(&read, k)).sum::<u64>();
    assert_eq!(host(&read, "total_bytes"), total);
    let pasted_read = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", &p, "-ngl", "2", "--no-mmap", "--mlock"]);
    assert_eq!(pasted_read["plan"]["host"], read["plan"]["host"]);
    // The text says which kind of RAM it is.
    let out = util::vram().args(["serve", "-m", &p, "-g", "24GiB", "-ngl", "2"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("RAM weights:") && text.contains("mapped from the file"), "{text}");
    // A log's host buffers are compared.
    let log = dir.path().join("start.log");
    std::fs::write(
        &log,
        "load_tensors:   CPU_Mapped model buffer size =     1.00 MiB\nllama_context:  CUDA_Host compute buffer size =     2.00 MiB\n",
    )
    .unwrap();
    let v = json(&["serve", "-m", &p, "-g", "24GiB", "-ngl", "2", "--log", log.to_str().unwrap()]);
    let rows = v["comparison"]["rows"].as_array().unwrap();
    let ram = rows.iter().find(|r| r["quantity"] == "model buffer in RAM").expect("a RAM row");
    assert_eq!(ram["log"].as_f64(), Some(1.0));
    assert!(rows.iter().any(|r| r["quantity"] == "host compute (inputs only)"), "{rows:?}");
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--no-mmap"], 2).contains("--no-mmap"));
}

/// llama-server's `--fit` flags in a pasted command are read (`-fit`, `-fitt` in MiB, `-fitc`):
/// with no `-c` the context is the training context, and a margin that leaves too little cuts it
/// to a multiple of 256 no smaller than `-fitc`; `-fit off` keeps the training context.
#[test]
fn pasted_fit_flags_cut_an_unset_context() {
    let dir = tempfile::tempdir().unwrap();
    let p = gguf_writer::write_tiny_llama(dir.path());
    let train = pasted(&["serve", "-g", "24GiB", "--", "llama-server", "-m", &p]);
    assert_eq!(train["config"]["ctx"], 8192);
    assert!(train["notes"].to_string().contains("no change"), "{}", train["notes"]);
    // A margin that leaves room for about half the training context's KV cache.
    let at = |mib: u64, extra: &[&str]| {
        let m = mib.to_string();
        pasted(&[&["serve", "-g", "24GiB", "--cuda-context", "1B", "--", "llama-server", "-m", &p, "-fitt", &m][..], extra].concat())
    };
    let free_mib = 24 * 1024;
    let used = train["plan"]["gpu_total_bytes"].as_u64().unwrap() - train["plan"]["cuda_overhead_bytes"].as_u64().unwrap();
    let margin = free_mib - (used >> 20) + 2;
    let cut = at(margin, &["-fitc", "1024"]);
    let ctx = cut["config"]["ctx"].as_u64().unwrap();
    assert!((1024..8192).contains(&ctx) && ctx % 256 == 0, "{ctx}");
    assert!(cut["notes"].to_string().contains("reduced to"), "{}", cut["notes"]);
    let off = at(margin, &["-fit", "off"]);
    assert_eq!(off["config"]["ctx"], 8192);
    let e = util::vram().args(["serve", "-m", &p, "-g", "24GiB", "--fit", "maybe"]).output().unwrap();
    assert_eq!(e.status.code(), Some(2));
    // `--log` sets the fit's first projection beside vram's.
    let log = dir.path().join("fit.log");
    std::fs::write(&log, "common_params_fit_impl: projected to use 120 MiB of device memory vs. 24000 MiB of free device memory\nllama_context: n_ctx         = 8192\n").unwrap();
    let cmp = pasted(&["serve", "-g", "24GiB", "--log", log.to_str().unwrap(), "--", "llama-server", "-m", &p]);
    let rows = cmp["comparison"]["rows"].as_array().unwrap();
    let r = rows.iter().find(|r| r["quantity"] == "--fit projection at the initial settings").expect("a fit row");
    assert_eq!(r["log"].as_f64(), Some(120.0));
    let free = rows.iter().find(|r| r["quantity"] == "free device memory --fit saw").expect("a free row");
    assert_eq!(free["log"].as_f64(), Some(24000.0));
}

/// vLLM reads `--max_model_len` as `--max-model-len` and takes human-readable integers
/// (vllm/utils/argparse_utils.py): `32k` is 32,000 and `32K` 32,768; a flag given twice keeps
/// its last value, as argparse does.
#[test]
fn a_pasted_vllm_command_is_read_with_vllms_own_spellings() {
    let v = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "--model",
        "llama-3.1-8b",
        "--max_model_len",
        "8192",
        "--max_model_len",
        "32k",
        "--tensor_parallel_size=2",
        "--max-num-batched-tokens",
        "4K",
    ]);
    let d = json(&[
        "serve",
        "-m",
        "llama-3.1-8b",
        "-g",
        "h100",
        "--max-model-len",
        "32000",
        "--tensor-parallel-size",
        "2",
        "--max-num-batched-tokens",
        "4096",
    ]);
    let (p, g) = (&v["gpus"][0], &d["gpus"][0]);
    assert_eq!(p["max_model_len"].as_u64(), Some(32_000), "{p}");
    for k in ["weights_bytes", "activation_peak_bytes", "kv_cache_bytes", "num_kv_blocks"] {
        assert_eq!(p[k], g[k], "{k}");
    }
    assert!(!v.to_string().contains("NOT UNDERSTOOD"), "{v}");
    // The same spellings given to vram directly.
    let direct =
        json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "32k", "--tp", "2", "--max-num-batched-tokens", "4K"]);
    assert_eq!(direct["gpus"][0]["kv_cache_bytes"], g["kv_cache_bytes"]);
    // --kv-cache-memory-bytes: `20g` is 20·10^9 bytes and `20G` 20 GiB, as vLLM reads them.
    for (text, bytes) in [("20g", 20_000_000_000u64), ("20G", 20 << 30)] {
        let k = pasted(&[
            "serve",
            "-g",
            "h100",
            "--",
            "vllm",
            "serve",
            "llama-3.1-8b",
            "--max-model-len",
            "8192",
            "--kv-cache-memory-bytes",
            text,
        ]);
        assert_eq!(k["gpus"][0]["kv_cache_bytes"].as_u64(), Some(bytes), "{text}");
        let direct = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--kv-cache-memory-bytes", text]);
        assert_eq!(direct["gpus"][0]["kv_cache_bytes"].as_u64(), Some(bytes), "{text}");
    }
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "1.5K"], 2).contains("32k"));
    // Flags of vLLM's front end and engine that change no memory, one taking several values.
    let many = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--served-model-name",
        "llama",
        "llama8b",
        "--async-scheduling",
        "--device-memory-utilization",
        "0.85",
        "--log-level",
        "debug",
    ]);
    let notes = many.to_string();
    assert!(
        notes.contains("ignored (no effect on GPU memory): --served-model-name llama llama8b, --async-scheduling, --log-level debug"),
        "{notes}"
    );
    assert!(!notes.contains("NOT UNDERSTOOD"), "{notes}");
    let util = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--gpu-memory-utilization", "0.85"]);
    assert_eq!(many["gpus"][0]["kv_cache_bytes"], util["gpus"][0]["kv_cache_bytes"]);
    // Older releases' spellings and the launch environment.
    let old = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "CUDA_VISIBLE_DEVICES=2,3",
        "NCCL_DEBUG=INFO",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--max_num_batched_tokens",
        "32768",
        "--enable-reasoning",
        "--tensor-parallel-size",
        "2",
    ]);
    assert!(!old.to_string().contains("NOT UNDERSTOOD"), "{old}");
    assert!(old.to_string().contains("CUDA_VISIBLE_DEVICES=2,3"), "{old}");
    let e = fails(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--decode-context-parallel-size", "2"], 2);
    assert!(e.contains("--decode-context-parallel-size 2") && e.contains("does not model"), "{e}");
    // EPLB is read as typed; without expert parallelism it is refused as vLLM refuses it.
    let eplb = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "qwen3-30b-a3b",
        "-tp",
        "4",
        "--enable-expert-parallel",
        "--enable-eplb",
        "--eplb-config",
        r#"{"num_redundant_experts": 32}"#,
        "--max-model-len",
        "8192",
    ]);
    let typed = json(&[
        "serve",
        "-m",
        "qwen3-30b-a3b",
        "-g",
        "h100",
        "--tp",
        "4",
        "--enable-expert-parallel",
        "--enable-eplb",
        "--eplb-config",
        r#"{"num_redundant_experts": 32}"#,
        "--max-model-len",
        "8192",
    ]);
    assert_eq!(eplb["gpus"][0]["weights_bytes"], typed["gpus"][0]["weights_bytes"]);
    assert!(fails(&["serve", "-m", "qwen3-30b-a3b", "-g", "h100", "--tp", "4", "--enable-eplb"], 2).contains("--enable-expert-parallel"));
    // --num-gpu-blocks-override is read as typed.
    let blocks = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--max-model-len",
        "8192",
        "--num-gpu-blocks-override",
        "1000",
    ]);
    assert_eq!(blocks["gpus"][0]["num_kv_blocks"], 1000);
    // --disable-sliding-window is read as typed; on a model without a window it is an error.
    let gemma = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "gemma-2-9b", "--disable-sliding-window"]);
    let typed = json(&["serve", "-m", "gemma-2-9b", "-g", "h100", "--disable-sliding-window"]);
    assert_eq!(gemma["gpus"][0]["num_kv_blocks"], typed["gpus"][0]["num_kv_blocks"]);
    assert_eq!(gemma["gpus"][0]["max_model_len"], 4096);
    let e = fails(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--disable-sliding-window"], 2);
    assert!(e.contains("no sliding-window layers"), "{e}");
}

/// `-O0` and a compilation config with `cudagraph_mode` NONE capture no CUDA graphs
/// (vllm/config/vllm.py OptimizationLevel): planned as `--enforce-eager`; `-O3` keeps them.
#[test]
fn pasted_optimization_levels_and_compilation_configs_decide_the_cuda_graphs() {
    let base = ["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        pasted(&a)
    };
    let eager = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--enforce-eager"]);
    let graphs = with(&[]);
    assert!(graphs["gpus"][0]["cuda_graph_estimate_bytes"].as_u64().unwrap() > 0, "{graphs}");
    for extra in [
        &["-O0"][..],
        &["-O", "0"],
        &["--optimization-level", "0"],
        &["-cc.cudagraph_mode=NONE"],
        &["--compilation-config.cudagraph_mode", "NONE"],
        &["--compilation_config", r#"{"cudagraph_mode": "NONE"}"#],
    ] {
        let v = with(extra);
        assert_eq!(v["gpus"][0]["kv_cache_bytes"], eager["gpus"][0]["kv_cache_bytes"], "{extra:?}");
        assert!(v.to_string().contains("captures no CUDA graphs"), "{extra:?}: {v}");
    }
    // -O2/-O3 keep vLLM's default graphs; a compilation key vram does not model is said.
    assert_eq!(with(&["-O3"])["gpus"][0]["kv_cache_bytes"], graphs["gpus"][0]["kv_cache_bytes"]);
    let level = with(&["-cc", r#"{"level": 3}"#]);
    assert_eq!(level["gpus"][0]["kv_cache_bytes"], graphs["gpus"][0]["kv_cache_bytes"]);
    assert!(level.to_string().contains("CUDA graphs kept") && level.to_string().contains("(level)"), "{level}");
    // The graph settings vram models, pasted, plan as the typed flags do, and each captures
    // fewer graphs than vLLM's default.
    let est = |v: &serde_json::Value| v["gpus"][0]["cuda_graph_estimate_bytes"].as_u64().unwrap();
    let typed = |extra: &[&str]| {
        let mut a = vec!["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"];
        a.extend(extra);
        json(&a)
    };
    for (pasted_form, typed_form) in [
        (&["-cc", r#"{"cudagraph_mode": "FULL_DECODE_ONLY"}"#][..], &["--cudagraph-mode", "FULL_DECODE_ONLY"][..]),
        (&["-O1"], &["--cudagraph-mode", "piecewise"]),
        (&["-cc.cudagraph_mode", "PIECEWISE"], &["--cudagraph-mode", "PIECEWISE"]),
        (&["--cudagraph-capture-sizes", "1", "2", "4", "8"], &["--cudagraph-capture-sizes", "1,2,4,8"]),
        (
            &["-cc", r#"{"cudagraph_capture_sizes": [1, 2, 4, 8], "max_cudagraph_capture_size": 8}"#],
            &["--cudagraph-capture-sizes", "1", "2", "4", "8"],
        ),
        (&["-cc.max_cudagraph_capture_size", "8"], &["--max-cudagraph-capture-size", "8"]),
        (&["--max-cudagraph-capture-size", "8"], &["--cudagraph-capture-sizes", "1,2,4,8"]),
    ] {
        let (p, t) = (with(pasted_form), typed(typed_form));
        assert_eq!(est(&p), est(&t), "{pasted_form:?} vs {typed_form:?}");
        assert!(est(&p) > 0 && est(&p) < est(&graphs), "{pasted_form:?}: {} vs {}", est(&p), est(&graphs));
        assert!(!p.to_string().contains("CUDA graphs kept"), "{pasted_form:?}: {p}");
    }
    // vLLM refuses a ceiling that is not the given list's largest size; so does vram.
    let e =
        fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--cudagraph-capture-sizes", "1,2,4", "--max-cudagraph-capture-size", "8"], 2);
    assert!(e.contains("--max-cudagraph-capture-size"), "{e}");
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--cudagraph-mode", "partial"], 2).contains("FULL_DECODE_ONLY"));
    let mut bad = base.to_vec();
    bad.push("-O7");
    assert!(fails(&bad, 2).contains("0–3"));
}

/// vLLM's `--kv-cache-dtype` values: a 2-byte float is the model's own size, fp8 one byte, and
/// its packed layouts are refused by name.
#[test]
fn pasted_kv_cache_dtypes_follow_vllms_list() {
    let kv = |t: &str| {
        pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192", "--kv-cache-dtype", t])["gpus"][0]
            ["num_kv_blocks"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(kv("bfloat16"), kv("auto"));
    assert_eq!(kv("float16"), kv("auto"));
    assert!(kv("fp8_e4m3") > kv("auto") * 19 / 10);
    for packed in ["fp8_per_token_head", "nvfp4", "turboquant_k8v4", "fp8_ds_mla"] {
        let e = fails(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--kv-cache-dtype", packed], 2);
        assert!(e.contains(packed) && e.contains("packed"), "{e}");
    }
}

/// llama.cpp's memory switches in a pasted llama-server command: `--swa-full` sizes the
/// sliding-window layers at the whole context (llama-kv-cache-iswa.cpp), `--no-op-offload`
/// drops op offload's copy of the RAM experts, `-dev` names the GPUs, `-no-kvu` keeps a stream
/// per slot; sampling and server flags are listed as ignored, and flags that change memory in
/// ways vram does not model are refused by name.
#[test]
fn pasted_llama_server_memory_switches_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = |name: &str| {
        let path = dir.path().join(format!("{name}.gguf"));
        synthetic_models::by_name(name).unwrap().write_file(&path).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (gemma, moe) = (gguf("gemma-3-12b"), gguf("qwen3-30b-a3b"));
    let run = |m: &str, extra: &[&str]| {
        let mut a = vec!["serve", "-g", "h100", "--", "llama-server", "-m", m, "-ngl", "99", "-c", "32768"];
        a.extend(extra);
        pasted(&a)
    };
    // Gemma 3 12B: 48 layers of 8 KV heads × 256 × (K + V) × 2 bytes; the whole context in every layer.
    let full = run(&gemma, &["--swa-full", "--temp", "0.6", "--top-k", "64", "--no-context-shift", "-t", "8"]);
    assert_eq!(full["plan"]["gpu_kv_bytes"].as_u64(), Some(32_768 * 48 * 8 * 256 * 2 * 2));
    let windowed = run(&gemma, &[]);
    assert!(windowed["plan"]["gpu_kv_bytes"].as_u64().unwrap() < full["plan"]["gpu_kv_bytes"].as_u64().unwrap() / 3);
    let notes = full["notes"].to_string();
    assert!(notes.contains("ignored (no effect on GPU memory): --temp 0.6, --top-k 64, --no-context-shift, -t 8"), "{notes}");
    assert!(!notes.contains("NOT UNDERSTOOD"), "{notes}");
    // Op offload's copy of a layer's RAM experts is in the compute buffer unless turned off.
    let offload = run(&moe, &["--n-cpu-moe", "10"]);
    let no_offload = run(&moe, &["--n-cpu-moe", "10", "--no-op-offload"]);
    let all_gpu = run(&moe, &[]);
    let compute = |v: &serde_json::Value| v["plan"]["gpu_compute_bytes"].as_u64().unwrap();
    assert!(compute(&offload) > compute(&no_offload), "{} vs {}", compute(&offload), compute(&no_offload));
    assert_eq!(compute(&no_offload), compute(&all_gpu));
    // -dev CUDA0,CUDA1: two GPUs, as --gpus 2.
    let two = run(&moe, &["-dev", "CUDA0,CUDA1"]);
    assert_eq!(two["split"]["plan"]["devices"].as_array().map(Vec::len), Some(2), "{two}");
    // CUDA_VISIBLE_DEVICES=0,1 shows llama.cpp two GPUs, as -dev does.
    let mut visible =
        vec!["serve", "-g", "h100", "--", "CUDA_VISIBLE_DEVICES=0,1", "llama-server", "-m", moe.as_str(), "-ngl", "99", "-c", "32768"];
    assert_eq!(pasted(&visible)["split"], two["split"]);
    visible.extend(["-dev", "CUDA0"]);
    assert_eq!(pasted(&visible)["split"]["plan"]["devices"].as_array().map(Vec::len), Some(1));
    // LLAMA_ARG_* variables (llama.cpp's Docker images) are read as their flags, before the
    // command line's.
    let env = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        &format!("LLAMA_ARG_MODEL={gemma}"),
        "LLAMA_ARG_CTX_SIZE=65536",
        "LLAMA_ARG_N_GPU_LAYERS=99",
        "LLAMA_ARG_SWA_FULL=1",
        "LLAMA_ARG_PORT=8080",
        "llama-server",
        "-c",
        "32768",
    ]);
    assert_eq!(env["plan"], full["plan"]);
    assert!(!env.to_string().contains("NOT UNDERSTOOD"), "{env}");
    // A repeated flag keeps its last value, as llama.cpp's parser does.
    let again = run(&gemma, &["-fa", "on", "--flash-attn", "off"]);
    assert_eq!(again["config"]["flash_attn"], false);
    for (flag, value) in [("-nkvo", None), ("-md", Some("draft.gguf")), ("--lora", Some("a.gguf")), ("-dev", Some("none"))] {
        let mut a = vec!["serve", "-g", "h100", "--", "llama-server", "-m", gemma.as_str(), flag];
        a.extend(value);
        let e = fails(&a, 2);
        assert!(e.contains(flag), "{e}");
    }
}

/// `vllm serve --config FILE.yaml`: the file's keys are flags placed before the command line's
/// (vllm/utils/argparse_utils.py `_pull_args_from_config`), so the command line wins.
#[test]
fn a_vllm_config_file_is_read_as_vllm_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.yaml");
    std::fs::write(
        &path,
        "# a served model\nmodel: llama-3.1-8b\ntensor-parallel-size: 2\nmax_model_len: 16k\nport: 8000\ncompilation-config:\n  cudagraph_mode: NONE\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let v = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "--config", p, "--max-model-len", "8192"]);
    let d = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--tp", "2", "--max-model-len", "8192", "--enforce-eager"]);
    for k in ["max_model_len", "weights_bytes", "kv_cache_bytes", "num_kv_blocks"] {
        assert_eq!(v["gpus"][0][k], d["gpus"][0][k], "{k}");
    }
    assert!(v.to_string().contains(&format!("--config {p}")), "{v}");
    std::fs::write(&path, "model: llama-3.1-8b\nlimits: &anchor 3\n").unwrap();
    assert!(fails(&["serve", "-g", "h100", "--", "vllm", "serve", "--config", p], 2).contains("line 2"));
    let json_file = dir.path().join("serve.json");
    std::fs::write(&json_file, "{}").unwrap();
    assert!(fails(&["serve", "-g", "h100", "--", "vllm", "serve", "--config", json_file.to_str().unwrap()], 2).contains(".yaml"));
}

/// vLLM spreads a MoE model's experts over every TP × DP GPU (fused_moe/config.py
/// `flatten_tp_across_dp_and_pcp`): data parallelism halves the experts on each GPU while the
/// attention weights stay whole; expert parallelism keeps whole experts, the busiest GPU the
/// rounded-up share (expert_map_manager.py `determine_expert_map`).
#[test]
fn data_and_expert_parallelism_spread_a_moe_models_experts() {
    let weights = |extra: &[&str]| {
        let mut a = vec!["serve", "-m", "qwen3-30b-a3b", "-g", "h100", "--max-model-len", "8192"];
        a.extend(extra);
        json(&a)["gpus"][0]["weights_bytes"].as_u64().unwrap()
    };
    let (one, dp2, tp2) = (weights(&[]), weights(&["--data-parallel-size", "2"]), weights(&["--tp", "2"]));
    // Qwen3-30B-A3B: 48 layers × 128 experts × (gate, up, down) of 768 × 2048, in bf16.
    let experts: u64 = 48 * 128 * 3 * 768 * 2048 * 2;
    assert_eq!(one - dp2, experts / 2);
    assert!(dp2 > tp2, "attention and embeddings stay whole on each replica");
    // 128 experts over 2 GPUs divide evenly; over 3 the busiest GPU holds 43 whole experts.
    assert_eq!(weights(&["--data-parallel-size", "2", "--enable-expert-parallel"]), dp2);
    let (ep3, dp3) = (weights(&["--data-parallel-size", "3", "--enable-expert-parallel"]), weights(&["--data-parallel-size", "3"]));
    assert_eq!(ep3 - (one - experts), experts / 128 * 43);
    assert!(ep3 > dp3);
    // Pasted, vLLM's short spellings.
    let p = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", "qwen3-30b-a3b", "--max-model-len", "8192", "-dp", "3", "-ep"]);
    assert_eq!(p["gpus"][0]["weights_bytes"].as_u64(), Some(ep3));
    assert!(p.to_string().contains("43 of the 128"), "{p}");
    // A dense model's weights do not change with data parallelism.
    let dense = |extra: &[&str]| {
        let mut a = vec!["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"];
        a.extend(extra);
        json(&a)["gpus"][0]["weights_bytes"].as_u64().unwrap()
    };
    assert_eq!(dense(&["--data-parallel-size", "4"]), dense(&[]));
}

/// `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0` keeps the CUDA-graph estimate off the KV budget
/// (vllm/v1/worker/gpu_worker.py), as `--cuda-graph-memory 0` does; zero needs no unit, a
/// fraction of one does.
#[test]
fn the_cuda_graph_estimate_can_be_switched_off() {
    let graph = |v: &serde_json::Value| v["gpus"][0]["cuda_graph_estimate_bytes"].as_u64();
    let env = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--max-model-len",
        "8192",
    ]);
    assert_eq!(graph(&env), Some(0));
    assert!(!env.to_string().contains("NOT UNDERSTOOD"), "{env}");
    for (text, bytes) in [("0", Some(0)), ("0GiB", Some(0)), ("0.5GiB", Some(1 << 29))] {
        let v = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--cuda-graph-memory", text]);
        assert_eq!(graph(&v), bytes, "{text}");
    }
    assert_eq!(
        env["gpus"][0]["kv_cache_bytes"],
        json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192", "--cuda-graph-memory", "0"])["gpus"][0]
            ["kv_cache_bytes"]
    );
    for bad in ["0x", "5", ".", "_", "._GiB"] {
        fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--cuda-graph-memory", bad], 2);
    }
}

/// SGLang's LoRA flags: `--lora-paths` adapters read from their adapter_config.json (the largest
/// rank, their modules together), or `--enable-lora` with `--max-lora-rank` and
/// `--lora-target-modules`; the pool comes out of the token pool.
#[test]
fn sglang_lora_flags_size_the_adapter_pool() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = |name: &str, body: &str| adapter_dir(&dir, name, body);
    let a = adapter("a", r#"{"r": 16, "target_modules": ["q_proj", "v_proj"], "peft_type": "LORA"}"#);
    let b = adapter("b", r#"{"r": 32, "target_modules": ["o_proj"]}"#);
    let (pa, pb) = (format!("first={a}"), format!("second={b}"));
    let v = sglang_pasted(&["--lora-paths", &pa, &pb, "--max-loaded-loras", "8"]);
    assert_eq!(v["config"]["lora"]["max_lora_rank"], 32);
    assert_eq!(v["config"]["lora"]["target_modules"], serde_json::json!(["qkv_proj", "o_proj"]));
    // Rank 32: qkv 3·32·4096 + 6144·32, o 32·4096 + 4096·32 per layer; × 32 layers × 8 slots × 2 bytes.
    let pool = (3 * 32 * 4096 + 6144 * 32 + 2 * 32 * 4096) * 32 * 8 * 2;
    assert_eq!(v["gpus"][0]["lora_pool_bytes"], pool);
    let typed = json(&[
        "serve",
        "-m",
        "llama-3.1-8b",
        "-g",
        "h100",
        "--engine",
        "sglang",
        "--enable-lora",
        "--max-lora-rank",
        "32",
        "--lora-target-modules",
        "q_proj",
        "o_proj",
    ]);
    assert_eq!(typed["gpus"][0]["lora_pool_bytes"], pool);
    let bare = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang"]);
    assert!(typed["gpus"][0]["max_total_num_tokens"].as_u64() < bare["gpus"][0]["max_total_num_tokens"].as_u64());
    // What SGLang refuses, vram refuses.
    // A Hub adapter: its adapter_config.json from the cache (offline here), else refused.
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("hub/models--org--adapter");
    let snap = root.join("snapshots/0123456789abcdef0123456789abcdef01234567");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), "0123456789abcdef0123456789abcdef01234567").unwrap();
    std::fs::write(snap.join("adapter_config.json"), r#"{"r": 32, "target_modules": ["q_proj", "o_proj"]}"#).unwrap();
    let hub = |id: &str| {
        vram()
            .args(["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--json", "--lora-paths", id])
            .env("HF_HOME", home.path())
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap()
    };
    let out = hub("org/adapter");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gpus"][0]["lora_pool_bytes"], pool);
    let out = hub("org/missing");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("HF_HUB_OFFLINE") && e.contains("org/missing"), "{e}");
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", "/nonexistent/adapter"], 2);
    assert!(e.contains("adapter_config.json") && e.contains("--max-lora-rank"), "{e}");
    // SGLang loads each --lora-paths adapter at start-up, so a missing one stops it even when the
    // pool's rank and modules are given.
    let e = fails(
        &[
            "serve",
            "-m",
            "llama-3.1-8b",
            "-g",
            "h100",
            "--engine",
            "sglang",
            "--lora-paths",
            "/nonexistent/adapter",
            "--max-lora-rank",
            "8",
            "--lora-target-modules",
            "q_proj",
        ],
        2,
    );
    assert!(e.contains("would not start"), "{e}");
    for (name, body, want) in [
        ("huge", r#"{"r": 8, "rank_pattern": {"q_proj": 2048}, "target_modules": ["q_proj"]}"#, "rank_pattern"),
        ("odd", r#"{"r": 8, "target_modules": ["q_proj", 7]}"#, "not a module name"),
    ] {
        let bad = adapter(name, body);
        let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &bad], 2);
        assert!(e.contains(want), "{name}: {e}");
    }
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--max-lora-rank", "8"], 2);
    assert!(e.contains("needs --enable-lora"), "{e}");
    let e =
        fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &pa, &pb, "--max-loaded-loras", "4"], 2);
    assert!(e.contains("below --max-loras-per-batch 8"), "{e}");
    let e = fails(
        &[
            "serve",
            "-m",
            "llama-3.1-8b",
            "-g",
            "h100",
            "--engine",
            "sglang",
            "--lora-paths",
            &pa,
            &pb,
            "--max-loras-per-batch",
            "1",
            "--max-loaded-loras",
            "1",
        ],
        2,
    );
    assert!(e.contains("2 --lora-paths exceed --max-loaded-loras 1"), "{e}");
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &b, "--max-lora-rank", "16"], 2);
    assert!(e.contains("above --max-lora-rank 16"), "{e}");
    let e = fails(
        &["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &a, "--lora-target-modules", "o_proj"],
        2,
    );
    assert!(e.contains("leaves out"), "{e}");
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--lora-paths", &a], 2);
    assert!(e.contains("--lora-paths") && e.contains("SGLang"), "{e}");
    // --emit writes them back in SGLang's spelling, the paths as one flag.
    let out = vram()
        .args(["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &pa, &pb, "--emit", "docker"])
        .output()
        .unwrap();
    let compose = String::from_utf8_lossy(&out.stdout);
    assert!(compose.contains(&format!("\"--lora-paths\", \"{pa}\", \"{pb}\"")), "{compose}");
}

/// vLLM's `--lora-modules`: vLLM loads them at start-up and will not start when one cannot load;
/// vram reads each adapter_config.json and says why first.
#[test]
fn vllm_lora_modules_are_checked_as_vllm_loads_them() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = |name: &str, body: &str| adapter_dir(&dir, name, body);
    let r16 = adapter("r16", r#"{"r": 16, "target_modules": ["q_proj"], "bias": "none"}"#);
    let r64 = adapter("r64", r#"{"r": 8, "rank_pattern": {"q_proj": 64}, "target_modules": ["q_proj"]}"#);
    let biased = adapter("biased", r#"{"r": 8, "target_modules": ["q_proj"], "bias": "all"}"#);
    let base = ["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192", "--enable-lora"];
    let paste = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let (m16, m64, mb) = (format!("a={r16}"), format!("b={r64}"), format!("c={biased}"));
    let ok = pasted(&paste(&["--lora-modules", &m16]).iter().map(String::as_str).collect::<Vec<_>>());
    let plain = pasted(&paste(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(ok["gpus"][0]["kv_tokens"], plain["gpus"][0]["kv_tokens"], "the slots, not the adapters, take memory");
    // The JSON form, a rank_pattern above --max-lora-rank's default 16, and a biased adapter.
    let json_form = format!(r#"{{"name": "a", "path": "{r16}"}}"#);
    pasted(&paste(&["--lora-modules", &json_form]).iter().map(String::as_str).collect::<Vec<_>>());
    let e = fails(&paste(&["--lora-modules", &m16, &m64]).iter().map(String::as_str).collect::<Vec<_>>(), 2);
    assert!(e.contains("LoRA rank 64 is greater than max_lora_rank 16") && e.contains("--max-lora-rank 64"), "{e}");
    pasted(&paste(&["--max-lora-rank", "64", "--lora-modules", &m64]).iter().map(String::as_str).collect::<Vec<_>>());
    let e = fails(&paste(&["--lora-modules", &mb]).iter().map(String::as_str).collect::<Vec<_>>(), 2);
    assert!(e.contains("bias"), "{e}");
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--lora-modules", &m16], 2);
    assert!(e.contains("needs --enable-lora"), "{e}");
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--enable-lora", "--lora-modules", "a=/nonexistent/adapter"], 2);
    assert!(e.contains("would not start"), "{e}");
    // --emit writes them back, one flag with its values.
    let out = vram()
        .args(["serve", "-m", "llama-3.1-8b", "-g", "h100", "--enable-lora", "--lora-modules", &m16, &json_form, "--emit", "docker"])
        .output()
        .unwrap();
    let compose = String::from_utf8_lossy(&out.stdout);
    assert!(compose.contains(&format!("\"--lora-modules\", \"{m16}\", ")), "{compose}");
}

/// SGLang's JSON form of `--lora-paths` (`{"lora_name", "lora_path", "pinned"}`, arg_groups/
/// argparse_actions.py) reads as NAME=PATH does; pinning every slot is refused, as SGLang
/// refuses it (lora_manager.py `validate_new_adapter`).
#[test]
fn sglang_lora_paths_json_form_and_pinned_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let a = adapter_dir(&dir, "a", r#"{"r": 16, "target_modules": ["q_proj", "v_proj"]}"#);
    let by_name = sglang_pasted(&["--lora-paths", &format!("x={a}")]);
    let pinned = |name: &str| format!(r#"{{"lora_name": "{name}", "lora_path": "{a}", "pinned": true}}"#);
    let (one, two) = (pinned("x"), pinned("y"));
    let by_json = sglang_pasted(&["--lora-paths", &one]);
    assert_eq!(by_json["gpus"][0]["lora_pool_bytes"], by_name["gpus"][0]["lora_pool_bytes"]);
    assert_eq!(by_json["config"]["lora"], by_name["config"]["lora"]);
    // Two pinned adapters leave no free slot of two.
    let e = fails(
        &["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &one, &two, "--max-loras-per-batch", "2"],
        2,
    );
    assert!(e.contains("2 pinned") && e.contains("at most 1"), "{e}");
    sglang_pasted(&["--lora-paths", &one, &two, "--max-loras-per-batch", "3"]);
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", r#"{"lora_path": "/x"}"#], 2);
    assert!(e.contains("\"lora_name\""), "{e}");
}

/// An adapter_config.json that is a FIFO, or far too large, is refused without reading it (a
/// FIFO would block for ever).
#[test]
fn hostile_adapter_configs_are_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    std::fs::create_dir(&fifo).unwrap();
    let c = std::ffi::CString::new(fifo.join("adapter_config.json").display().to_string()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let huge = dir.path().join("huge");
    std::fs::create_dir(&huge).unwrap();
    std::fs::File::create(huge.join("adapter_config.json")).unwrap().set_len(64 << 20).unwrap();
    for (d, want) in [(&fifo, "not a regular file"), (&huge, "limit")] {
        let p = d.display().to_string();
        let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--lora-paths", &p], 2);
        assert!(e.contains(want) && e.contains("--lora-paths"), "{e}");
        let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--enable-lora", "--lora-modules", &format!("a={p}")], 2);
        assert!(e.contains(want) && e.contains("--lora-modules a"), "{e}");
    }
}

/// `python -m sglang.launch_server --model-path llama-3.1-8b EXTRA…` pasted on an H100: its JSON.
fn sglang_pasted(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["serve", "-g", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path", "llama-3.1-8b"];
    args.extend(extra);
    pasted(&args)
}

/// A PEFT adapter directory holding only its adapter_config.json (all that the engines' start-up
/// checks and vram read); its path.
fn adapter_dir(dir: &tempfile::TempDir, name: &str, config: &str) -> String {
    let d = dir.path().join(name);
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("adapter_config.json"), config).unwrap();
    d.display().to_string()
}

/// Engine flags typed beside a pasted command would lose to the pasted ones: refused, not
/// dropped; vram's own settings (--vllm-version, --cuda-graph-memory …) are carried into it.
#[test]
fn engine_flags_typed_beside_a_pasted_command_are_refused_and_vrams_own_carried() {
    for extra in [&["--tp", "2"][..], &["--max-num-seqs", "7"], &["-m", "llama-3.1-8b"]] {
        let mut a = vec!["serve", "-g", "h100"];
        a.extend(extra);
        a.extend(["--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"]);
        assert!(fails(&a, 2).contains("beside a pasted command"), "{extra:?}");
    }
    let v10 = pasted(&["serve", "-g", "h100", "--vllm-version", "0.10", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"]);
    assert_eq!(v10["gpus"][0]["vllm_version"], "0.10");
    let given =
        pasted(&["serve", "-g", "h100", "--cuda-graph-memory", "1GiB", "--", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"]);
    assert_eq!(given["gpus"][0]["cuda_graph_estimate_bytes"], 1u64 << 30);
}

/// vLLM's `--speculative-config`, pasted as users write it: an EAGLE-3 head by path (a real
/// config, validation/vllm/spec_heads/), n-gram drafting, and what is refused by name.
#[test]
fn speculative_decoding_is_read_from_a_pasted_command() {
    let head = util::repo_file("validation/vllm/spec_heads/qwen3-32b-eagle3.config.json");
    let target = util::repo_file("validation/vllm/configs/qwen3-32b.config.json");
    let spec = format!(r#"{{"method": "eagle3", "model": "{head}", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}}"#);
    let with = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        &target,
        "-tp",
        "2",
        "--max-model-len",
        "8192",
        "--speculative-config",
        &spec,
    ]);
    let without = pasted(&["serve", "-g", "h100", "--", "vllm", "serve", &target, "-tp", "2", "--max-model-len", "8192"]);
    let (w, wo) = (&with["gpus"][0], &without["gpus"][0]);
    let drafter = w["draft_weights_bytes"].as_u64().unwrap();
    assert!(drafter > 600 << 20 && drafter < 800 << 20, "{w}");
    assert_eq!(w["weights_bytes"].as_u64().unwrap() - wo["weights_bytes"].as_u64().unwrap(), drafter);
    assert!(w["kv_tokens"].as_u64().unwrap() < wo["kv_tokens"].as_u64().unwrap(), "{w}");
    // The method follows from the head's name when none is given, as vLLM picks it.
    let named = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        &target,
        "--max-model-len",
        "8192",
        "--speculative-config",
        &format!(r#"{{"model": "{head}", "num_speculative_tokens": 2}}"#),
    ]);
    assert!(named.to_string().contains("method eagle3"), "{named}");
    let ngram = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--speculative-config",
        r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}"#,
    ]);
    assert_eq!(ngram["gpus"][0]["draft_weights_bytes"], 0, "{ngram}");
    // vLLM's dotted form, and the two merged, read as the JSON object.
    let dotted = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--speculative-config.method",
        "ngram",
        "--speculative_config.num_speculative_tokens=4",
        "--speculative-config.prompt_lookup_max",
        "4",
    ]);
    assert_eq!(dotted["gpus"][0]["notes"], ngram["gpus"][0]["notes"].clone(), "{dotted}");
    let merged = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--speculative-config",
        r#"{"method": "ngram"}"#,
        "--speculative-config.num_speculative_tokens",
        "4",
    ]);
    assert!(merged.to_string().contains("method ngram with 4 speculative token"), "{merged}");
    // Refused by name: a method, a key and a drafter TP vram does not model; no method at all.
    for (json, says) in [
        (r#"{"method": "medusa", "model": "x", "num_speculative_tokens": 2}"#, "medusa"),
        (r#"{"method": "ngram", "num_speculative_tokens": 2, "quantization": "fp8"}"#, "quantization"),
        (r#"{"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}"#, "draft_tensor_parallel_size"),
        (r#"{"num_speculative_tokens": 2}"#, "without a speculative model"),
        (r#"{"method": "suffix", "num_speculative_tokens": 2, "quantization": null, "x": 1}"#, "speculative_config.x"),
        ("not json", "not a JSON object"),
    ] {
        let e = fails(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-70b", "-tp", "2", "--speculative-config", json], 2);
        assert!(e.contains(says), "{json}: {e}");
    }
    // vLLM's V0 flags are gone from V1 and stay refused.
    let e = fails(&["serve", "-g", "h100", "--", "vllm", "serve", "llama-3.1-8b", "--speculative-model", "x"], 2);
    assert!(e.contains("--speculative-model"), "{e}");
}

/// SGLang's speculative flags, pasted: NEXTN on a checkpoint with MTP layers, EAGLE3 with a head
/// (a real config, validation/vllm/spec_heads/), and the algorithms not modelled refused by name.
#[test]
fn sglang_speculative_flags_are_read_from_a_pasted_command() {
    let v3 = util::repo_file("validation/configs/deepseek-v3.json");
    let base = [
        "serve",
        "-g",
        "h200",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        v3.as_str(),
        "--tp",
        "8",
        "--quantization",
        "fp8",
    ];
    let plain = pasted(&base);
    let nextn = pasted(
        &[
            &base[..],
            &[
                "--speculative-algorithm",
                "NEXTN",
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4",
            ],
        ]
        .concat(),
    );
    let (p, n) = (&plain["gpus"][0], &nextn["gpus"][0]);
    assert!(n["draft_weights_bytes"].as_u64().unwrap() > 0, "{n}");
    assert_eq!(n["max_running_requests"], 48, "{n}");
    assert!(n["max_total_num_tokens"].as_u64() < p["max_total_num_tokens"].as_u64(), "{n}");
    let head = util::repo_file("validation/vllm/spec_heads/qwen3-32b-eagle3.config.json");
    let q = util::repo_file("validation/vllm/configs/qwen3-32b.config.json");
    let eagle3 = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        &q,
        "--tp",
        "2",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        &head,
    ]);
    assert!(eagle3.to_string().contains("EAGLE-3 head"), "{eagle3}");
    for (args, says) in [
        (vec!["--speculative-algorithm", "NGRAM"], "NGRAM"),
        (vec!["--speculative-algorithm", "MTP"], "MTP"),
        (vec!["--speculative-algorithm", "EAGLE3"], "--speculative-draft-model-path"),
        (vec!["--speculative-num-steps", "3"], "need --speculative-algorithm"),
        (vec!["--speculative-algorithm", "EAGLE", "--speculative-token-map", "map.pt"], "--speculative-token-map"),
    ] {
        let mut cmd = vec!["serve", "-g", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path", "llama-3.1-8b"];
        cmd.extend(args.iter().copied());
        let e = fails(&cmd, 2);
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

/// `env NAME=value … command`, as shells write it: the assignments are read as without `env`.
#[test]
fn a_command_run_through_env_reads_its_assignments() {
    let with = pasted(&[
        "serve",
        "-g",
        "h100",
        "--",
        "env",
        "VLLM_USE_V2_MODEL_RUNNER=0",
        "vllm",
        "serve",
        "llama-3.1-8b",
        "--max-model-len",
        "8192",
    ]);
    let without =
        pasted(&["serve", "-g", "h100", "--", "VLLM_USE_V2_MODEL_RUNNER=0", "vllm", "serve", "llama-3.1-8b", "--max-model-len", "8192"]);
    assert_eq!(with["gpus"], without["gpus"]);
    assert_eq!(with["gpus"][0]["model_runner"], "v1", "{with}");
}
