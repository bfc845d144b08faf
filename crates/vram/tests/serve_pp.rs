//! `vram serve --pipeline-parallel-size` / `-pp` and `--vllm-version`: the stage vLLM sizes the
//! pool by, the version rules, and the combinations vram refuses by name (exit 2).

mod util;

use util::{fails, json};

const GIB: u64 = 1 << 30;

#[test]
fn pipeline_stages_are_reported_with_the_one_that_sets_the_pool() {
    // The V1 runner's sampler (fp32 logits, probabilities, exponential draw) outweighs the
    // forward here, so the stage that runs it is the one that sets the pool.
    let v =
        json(&["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tp", "2", "-pp", "2", "--max-model-len", "16384", "--model-runner", "v1"]);
    let g = &v["gpus"][0];
    assert_eq!(g["pp"], 2);
    let ranks = g["pp_ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    assert_eq!(ranks[0]["layers"], 40);
    assert_eq!(ranks[1]["layers"], 40);
    // The last stage holds the LM head and the sampler: more non-KV memory, fewer blocks.
    assert_eq!(g["pp_rank"], 1);
    assert!(ranks[1]["num_kv_blocks"].as_u64() < ranks[0]["num_kv_blocks"].as_u64());
    assert_eq!(g["num_kv_blocks"], ranks[1]["num_kv_blocks"]);
    // The long spelling and the short one are the same flag.
    let long = json(&[
        "serve",
        "-m",
        "llama-3.1-70b",
        "-g",
        "h100",
        "--tp",
        "2",
        "--pipeline-parallel-size",
        "2",
        "--max-model-len",
        "16384",
        "--model-runner",
        "v1",
    ]);
    assert_eq!(long["gpus"][0]["kv_tokens"], g["kv_tokens"]);
    // Half the layers per stage: about half the weights of TP 2 alone.
    let one = json(&["serve", "-m", "llama-3.1-70b", "-g", "h100", "--tp", "2", "--max-model-len", "16384"]);
    let (w1, w2) = (one["gpus"][0]["weights_bytes"].as_u64().unwrap(), g["weights_bytes"].as_u64().unwrap());
    assert!(w2 * 2 > w1 && w2 * 2 < w1 + w1 / 20, "{w1} {w2}");
}

#[test]
fn pipeline_splits_vram_does_not_model_are_refused_by_name() {
    let e = fails(&["serve", "-m", "gemma-2-9b", "-g", "h100", "-pp", "2"], 2);
    assert!(e.contains("--pipeline-parallel-size") && e.contains("sliding-window"), "{e}");
    let e = fails(&["serve", "-m", "llama-3.2-1b", "-g", "h100", "-pp", "64"], 2);
    assert!(e.contains("--pipeline-parallel-size"), "{e}");
}

#[test]
fn vllm_version_selects_the_cuda_graph_rule() {
    // Model Runner V2, vLLM's default for a dense model from 0.25, adds no estimate before 0.29
    // and one from 0.29 on (cudagraph_utils.py); the V1 runner does from 0.20.
    let v2 = json(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--max-model-len", "8192"]);
    assert_eq!(v2["gpus"][0]["model_runner"], "v2");
    assert!(v2["gpus"][0]["cuda_graph_estimate_bytes"].as_u64().unwrap() > 0);
    let v028 = json(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--max-model-len", "8192", "--vllm-version", "0.28"]);
    assert_eq!(v028["gpus"][0]["model_runner"], "v2");
    assert_eq!(v028["gpus"][0]["cuda_graph_estimate_bytes"], 0);
    // vLLM's --gpu-memory-utilization default follows the version too (0.92 from 0.25, 0.9
    // before): given here, so that only the graph rule differs below.
    let v020 = json(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--max-model-len", "8192", "--vllm-version", "0.19"]);
    let requested = |v: &serde_json::Value| v["gpus"][0]["requested_bytes"].as_u64().unwrap() as f64;
    assert!((requested(&v2) / requested(&v020) - 0.92 / 0.9).abs() < 1e-6);
    // The non-torch memory is given, so that 0.33's cuBLAS baseline does not differ either.
    let args = [
        "serve",
        "-m",
        "qwen2.5-7b",
        "-g",
        "h100",
        "--max-model-len",
        "8192",
        "--model-runner",
        "v1",
        "--gpu-memory-utilization",
        "0.9",
        "--non-torch-memory",
        "150MiB",
    ];
    let new = json(&args);
    let with = |extra: &[&str]| json(&[&args[..], extra].concat());
    let old = with(&["--vllm-version", "0.19"]);
    // 0.20 applies the estimate (envs.py default "1" in the 0.20.0 sdist, "0" in 0.19.1).
    assert!(with(&["--vllm-version", "0.20"])["gpus"][0]["cuda_graph_estimate_bytes"].as_u64().unwrap() > 0);
    let est = new["gpus"][0]["cuda_graph_estimate_bytes"].as_u64().unwrap();
    assert!(est > 0);
    assert_eq!(old["gpus"][0]["cuda_graph_estimate_bytes"], 0);
    assert_eq!(old["gpus"][0]["kv_cache_bytes"].as_u64().unwrap() - new["gpus"][0]["kv_cache_bytes"].as_u64().unwrap(), est);
    let given = with(&["--cuda-graph-memory", "1GiB"]);
    assert_eq!(given["gpus"][0]["cuda_graph_estimate_bytes"], GIB);
    let eager = with(&["--enforce-eager"]);
    assert_eq!(eager["gpus"][0]["cuda_graph_estimate_bytes"], 0);
    // The V1 engine before 0.8 is refused, naming what to use instead.
    let e = fails(&[&args[..], &["--vllm-version", "0.7"]].concat(), 2);
    assert!(e.contains("--vllm-version") && e.contains("--vllm-engine v0"), "{e}");
    let e = fails(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--model-runner", "v3"], 2);
    assert!(e.contains("--model-runner"), "{e}");
    let e = fails(&["serve", "-m", "qwen2.5-7b", "-g", "h100", "--vllm-engine", "v0", "--vllm-version", "0.6", "--model-runner", "v1"], 2);
    assert!(e.contains("--model-runner") && e.contains("v0"), "{e}");
    let e = fails(&[&args[..], &["--vllm-version", "banana"]].concat(), 2);
    assert!(e.contains("--vllm-version"), "{e}");
}

#[test]
fn tp_non_torch_memory_follows_the_gpu() {
    let nt = |gpu: &str| {
        json(&["serve", "-m", "qwen2.5-7b", "-g", gpu, "--tp", "2", "--max-model-len", "8192"])["gpus"][0]["non_torch_bytes"]
            .as_u64()
            .unwrap()
    };
    // Less, from vLLM 0.33, the cuBLAS workspace created before the start-up snapshot: 32 MiB on
    // compute capability 9.0, a 20 MiB segment before.
    assert_eq!(nt("h100"), (150 + 1833 - 32) << 20);
    assert_eq!(nt("a100-80gb"), (150 + 256 - 20) << 20);
    assert_eq!(nt("rtx-4090"), (150 + 256 - 20) << 20);
}

/// `--cpu-offload-gb`: whole decoder layers leave the GPU until the budget is reached (vLLM's
/// maybe_offload_to_cpu), so the weights fall by a whole number of layers at least the budget,
/// and the KV pool grows by the same bytes. A pasted command passes it through.
#[test]
fn cpu_offload_moves_whole_layers_and_grows_the_pool() {
    let base = json(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--max-model-len", "8192"]);
    let off = json(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--max-model-len", "8192", "--cpu-offload-gb", "6"]);
    let w = |v: &serde_json::Value| v["gpus"][0]["weights_bytes"].as_u64().unwrap();
    let kv = |v: &serde_json::Value| v["gpus"][0]["kv_cache_bytes"].as_u64().unwrap();
    let moved = w(&base) - w(&off);
    // Llama-3.1-8B decoder layer: 218,112,000 parameters × 2 bytes; 6 GiB needs 15 of them.
    assert_eq!(moved, 15 * 218_112_000 * 2);
    assert!(moved >= 6 * GIB);
    assert_eq!(kv(&off) - kv(&base), moved);
    let notes = off["gpus"][0]["notes"].to_string();
    assert!(notes.contains("15 of 32 decoder layers"), "{notes}");
    let out = util::vram()
        .args([
            "serve",
            "-g",
            "rtx-4090",
            "--json",
            "--",
            "vllm",
            "serve",
            "llama-3.1-8b",
            "--max-model-len",
            "8192",
            "--cpu-offload-gb",
            "6",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pasted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w(&pasted), w(&off));
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090", "--cpu-offload-gb=-1"], 2);
    assert!(e.contains("--cpu-offload-gb"), "{e}");
}

/// `--data-parallel-size` / `-dp`: replicas; per-GPU figures unchanged, the note says so.
#[test]
fn data_parallel_replicas_keep_per_gpu_figures() {
    let one = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--tp", "2"]);
    let dp = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--tp", "2", "-dp", "4"]);
    assert_eq!(one["gpus"][0]["kv_tokens"], dp["gpus"][0]["kv_tokens"]);
    assert!(dp["gpus"][0]["notes"].to_string().contains("8 GPUs in all"), "{}", dp["gpus"][0]["notes"]);
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "-dp", "0"], 2);
    assert!(e.contains("--data-parallel-size"), "{e}");
}
