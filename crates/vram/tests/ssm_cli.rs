//! `vram estimate` on a Mamba config: parameters, the PyTorch-path warning, and what is refused.

mod util;

use util::{fails, json};

const MAMBA: &str = "../../validation/configs/ssm/mamba-130m-hf.json";

#[test]
fn a_mamba_config_is_estimated_and_says_which_path() {
    let v = json(&["estimate", "--model", MAMBA, "--batch", "1", "--seq-len", "512"]);
    assert_eq!(v["model"]["parameters"], 129_135_360);
    let warnings = v["model"]["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("mamba-ssm")), "{warnings:?}");
    let infer = json(&["estimate", "--model", MAMBA, "--mode", "infer", "--batch", "4", "--seq-len", "512"]);
    let names: Vec<&str> = infer["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"conv and SSM state (the cache)") && !names.contains(&"KV cache"), "{names:?}");
}

#[test]
fn what_mamba_does_not_take_is_refused() {
    // Served on vLLM: a page is one layer's state; the config names no length, so vLLM's default
    // of 2048 applies, and the report says so.
    let d = json(&["serve", "--model", MAMBA, "-g", "h100"]);
    assert_eq!(d["gpus"][0]["max_model_len"].as_u64(), Some(2048), "{d}");
    assert!(d["gpus"][0]["notes"].to_string().contains("the config names no maximum length"), "{d}");
    let s = json(&["serve", "--model", MAMBA, "-g", "h100", "--max-model-len", "4096"]);
    let g = &s["gpus"][0];
    assert_eq!(g["state"]["attention_layers"].as_u64(), Some(0), "{s}");
    assert_eq!(g["groups"][0]["kind"], "state", "{s}");
    let e = fails(&["serve", "--model", MAMBA, "-g", "h100", "--max-model-len", "4096", "--pipeline-parallel-size", "2"], 2);
    assert!(e.contains("pipeline"), "{e}");
    let e = fails(&["estimate", "--model", MAMBA, "--peft", "lora"], 2);
    assert!(e.contains("LoRA"), "{e}");
    let e = fails(&["estimate", "--model", MAMBA, "--precision", "bf16"], 2);
    assert!(e.contains("pure bf16"), "{e}");
    let e = fails(&["plan", "--model", MAMBA, "-g", "h100", "--gpus", "8"], 2);
    assert!(e.contains("state-space"), "{e}");
}

/// `vram fit` on a hybrid: the search offers only what vram can estimate for a state-space
/// model (no LoRA, no pure bf16, no multi-GPU answers), and the estimate's advice does not fail.
#[test]
fn fit_on_a_hybrid_offers_only_what_is_modelled() {
    const GRANITE: &str = "../../validation/configs/ssm/granite-4.0-h-1b.json";
    let v = json(&["fit", "--model", GRANITE, "-g", "h100", "--seq-len", "2048"]);
    let alts = v["alternatives"].as_array().expect("alternatives");
    assert!(!alts.is_empty(), "{v}");
    for a in alts {
        let s = a.to_string();
        assert!(a["gpus"].as_u64().unwrap_or(1) == 1, "{s}");
        assert!(!s.contains("--peft") && !s.contains("--precision bf16\""), "{s}");
    }
    let e = json(&["estimate", "--model", GRANITE, "--seq-len", "2048"]);
    assert!(e["peak_allocated_bytes"].as_u64().unwrap() > 0);
}

/// Qwen3.5 as its vision-language checkpoint ships: read as AutoModelForCausalLM loads it (said
/// so), trained with LoRA on named or all-linear targets and with Liger's fused loss; peft's
/// missing default targets, 8-bit QLoRA and serving are refused with exit 2.
#[test]
fn qwen3_5_is_estimated_as_its_language_model() {
    const QWEN: &str = "../../validation/configs/ssm/qwen3.5-0.8b.json";
    let v = json(&["estimate", "--model", QWEN, "--seq-len", "2048"]);
    assert_eq!(v["model"]["parameters"], 752_393_024);
    let warnings = v["model"]["warnings"].to_string();
    assert!(warnings.contains("Qwen3_5ForCausalLM") && warnings.contains("flash-linear-attention"), "{warnings}");
    let names: Vec<&str> = v["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.contains("Gated DeltaNet")), "{names:?}");
    // With images: Qwen3_5ForConditionalGeneration, its vision tower loaded.
    let images = json(&["estimate", "--model", QWEN, "--seq-len", "2048", "--images-per-sample", "1", "--image-size", "448"]);
    assert_eq!((images["model"]["parameters"].as_u64(), images["model"]["kind"].as_str()), (Some(852_985_920), Some("vision-language")));
    assert!(images["peak_allocated_bytes"].as_u64().unwrap() > v["peak_allocated_bytes"].as_u64().unwrap());
    let lora = json(&[
        "estimate",
        "--model",
        QWEN,
        "--peft",
        "lora",
        "--lora_r",
        "16",
        "--lora-target-modules",
        "all-linear",
        "--seq-len",
        "2048",
    ]);
    assert!(lora["peak_allocated_bytes"].as_u64().unwrap() < v["peak_allocated_bytes"].as_u64().unwrap());
    let fused = json(&["estimate", "--model", QWEN, "--fused-cross-entropy", "--seq-len", "2048"]);
    assert!(fused["peak_allocated_bytes"].as_u64().unwrap() < v["peak_allocated_bytes"].as_u64().unwrap());
    let e = fails(&["estimate", "--model", QWEN, "--peft", "lora"], 2);
    assert!(e.contains("in_proj_qkv"), "{e}");
    let e = fails(&["estimate", "--model", QWEN, "--peft", "lora", "--lora-target-modules", "all-linear", "--load-in-8bit"], 2);
    assert!(e.contains("8-bit"), "{e}");
    // Served on vLLM: the attention block grows until a page holds a Gated DeltaNet state.
    // This copy of the config names no mamba_ssm_dtype, so the state is in the model's bf16:
    // (16 heads, 128, 128) × 2 B + conv (3, 6144) × 2 B per layer, 2,048 B of KV per token → 288.
    let v32 = ["serve", "--model", QWEN, "-g", "h100", "--max-model-len", "32768", "--vllm-version", "0.32"];
    let s = json(&v32);
    let g = &s["gpus"][0];
    assert_eq!((g["block_size"].as_u64(), g["state"]["ssm_dtype"].as_str()), (Some(288), Some("bf16")), "{s}");
    // The released config's float32 (vllm-project/vllm-ascend#15408: a (16, 128, 128) fp32 state
    // of 1,048,576 B for Qwen3.5-0.8B), given as the flag: 16·⌈1,085,440 / (16 · 2,048)⌉ = 544.
    let s = json(&[&v32[..], &["--mamba-ssm-cache-dtype", "float32"]].concat());
    let g = &s["gpus"][0];
    assert_eq!((g["block_size"].as_u64(), g["state"]["ssm_bytes"].as_u64()), (Some(544), Some(1_048_576)), "{s}");
    // vLLM 0.33 on an H100 (FlashInfer's GDN prefill, prefix caching on): blocks on a 64-token
    // grid, 64·⌈561,152 / (64 · 2,048)⌉ = 320, three state blocks a request, and an fp32
    // checkpoint workspace of ⌈8192 / 320⌉ × 16 × 128 × 128 × 4 B kept from the profile run.
    let s = json(&["serve", "--model", QWEN, "-g", "h100", "--max-model-len", "32768", "--vllm-version", "0.33"]);
    let g = &s["gpus"][0];
    assert_eq!(g["block_size"].as_u64(), Some(320), "{s}");
    let state = g["groups"].as_array().unwrap().iter().find(|k| k["kind"] == "state").unwrap().clone();
    assert_eq!(state["blocks_per_request"], 3, "{state}");
    let no_pc = json(&["serve", "--model", QWEN, "-g", "h100", "--max-model-len", "32768", "--no-enable-prefix-caching"]);
    let ws = 26 * 16 * 128 * 128 * 4;
    let (nk, nk0) = (g["non_kv_bytes"].as_u64().unwrap(), no_pc["gpus"][0]["non_kv_bytes"].as_u64().unwrap());
    assert_eq!(nk - nk0, ws, "the checkpoint workspace");
    assert_eq!(no_pc["gpus"][0]["block_size"].as_u64(), Some(288));
    // Not on an A100 (no FlashInfer GDN prefill there).
    let a100 = json(&["serve", "--model", QWEN, "-g", "a100-80gb", "--max-model-len", "32768"]);
    assert_eq!(a100["gpus"][0]["block_size"].as_u64(), Some(288));
    // On Blackwell only under a CUDA 13 runtime (vLLM's Docker image): the PyPI build is
    // planned, and the report says which.
    let b200 = json(&["serve", "--model", QWEN, "-g", "b200", "--max-model-len", "32768"]);
    assert_eq!(b200["gpus"][0]["block_size"].as_u64(), Some(288));
    assert!(b200["gpus"][0]["notes"].to_string().contains("CUDA 13 runtime"), "{}", b200["gpus"][0]["notes"]);
    // DDP replicates the measured single-GPU job; sharding engines are refused.
    let ddp = json(&["estimate", "--model", QWEN, "--gpus", "8", "--seq-len", "2048"]);
    let text = ddp.to_string();
    assert!(text.contains("DDP gradient buckets"), "{text}");
    let e = fails(&["estimate", "--model", QWEN, "--gpus", "8", "--zero", "3", "--seq-len", "2048"], 2);
    assert!(e.contains("beyond DDP"), "{e}");
}

/// Zamba2 through the CLI: the layout is said, a prefill holds the shared block's KV beside the
/// mixers' state, `fit` finds a batch, vLLM serving caches each invocation; LoRA and multi-GPU
/// (not measured) exit 2.
#[test]
fn zamba2_is_estimated_with_its_shared_block() {
    const ZAMBA: &str = "../../validation/configs/ssm/zamba2-1.2b.json";
    let v = json(&["estimate", "--model", ZAMBA, "--seq-len", "2048"]);
    assert_eq!((v["model"]["parameters"].as_u64(), v["model"]["num_layers"].as_u64()), (Some(1_215_064_704), Some(38)));
    let warnings = v["model"]["warnings"].to_string();
    assert!(warnings.contains("38 Mamba-2 layers, 6 of them preceded by the shared attention block"), "{warnings}");
    let infer = json(&["estimate", "--model", ZAMBA, "--mode", "infer", "--seq-len", "4096"]);
    let names: Vec<&str> = infer["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.contains("KV cache")) && names.iter().any(|n| n.contains("SSM state")), "{names:?}");
    let fit = json(&["fit", "--model", ZAMBA, "--seq-len", "2048", "-g", "h100"]);
    assert!(fit["max_batch_size"].as_u64().is_some_and(|b| b >= 1), "{fit}");
    let e = fails(&["estimate", "--model", ZAMBA, "--peft", "lora", "--lora-target-modules", "all-linear"], 2);
    assert!(e.contains("LoRA"), "{e}");
    // Served on vLLM: a KV cache per shared-block invocation beside the Mamba-2 states.
    let s = json(&["serve", "--model", ZAMBA, "-g", "h100", "--max-model-len", "8192"]);
    let st = &s["gpus"][0]["state"];
    assert_eq!((st["attention_layers"].as_u64(), st["state_layers"].as_u64()), (Some(6), Some(38)), "{s}");
    let e = fails(&["estimate", "--model", ZAMBA, "--gpus", "2"], 2);
    assert!(e.contains("multi-GPU"), "{e}");
}

/// `serve --log` on a hybrid compares vLLM's "Setting attention block size to N tokens" and
/// "Padding mamba page size by P%" lines with vram's (Qwen3.5-4B's lines, vllm-project/vllm#40696
/// and #37467, against Qwen3.5-0.8B's estimate here: the rows are what is tested, not agreement).
#[test]
fn serve_log_compares_the_hybrid_block_lines() {
    let dir = std::env::temp_dir().join(format!("vram-ssm-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("startup.log");
    std::fs::write(
        &log,
        "INFO [config.py:281] Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.\n\
         INFO [config.py:312] Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.\n",
    )
    .unwrap();
    let v = json(&[
        "serve",
        "--model",
        "../../validation/configs/ssm/qwen3.5-0.8b.json",
        "-g",
        "h100",
        "--max-model-len",
        "32768",
        "--vllm-version",
        "0.32",
        "--log",
        log.to_str().unwrap(),
    ]);
    std::fs::remove_dir_all(&dir).ok();
    let rows = v["comparison"]["rows"].as_array().unwrap();
    let row = |q: &str| rows.iter().find(|r| r["quantity"] == q).unwrap_or_else(|| panic!("no {q} row: {v}"));
    assert_eq!((row("attention block size")["estimate"].as_f64(), row("attention block size")["log"].as_f64()), (Some(288.0), Some(528.0)));
    assert_eq!(row("state page padding")["log"].as_f64(), Some(0.76));
}

/// SGLang serves hybrids with a state pool beside the token pool: a pasted launch with its
/// hybrid flags is read unchanged; the flags are refused on a model without mixers and under
/// vLLM; hybrids SGLang's pool is not modelled for are refused by name.
#[test]
fn sglang_hybrid_pool_from_a_pasted_launch() {
    const NEXT: &str = "../../validation/configs/ssm/qwen3-next-80b-a3b.json";
    let out = util::vram()
        .args(["serve", "-g", "h100", "--json", "--", "python", "-m", "sglang.launch_server", "--model-path", NEXT, "--tp", "4"])
        .args(["--max-mamba-cache-size", "256", "--disable-radix-cache", "--mamba-ssm-dtype", "bfloat16"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &v["gpus"][0];
    assert_eq!(g["state"]["max_mamba_cache_size"].as_u64(), Some(256), "{v}");
    assert_eq!(g["state"]["slots_per_request"].as_u64(), Some(1), "{v}");
    assert_eq!(g["state"]["ssm_dtype"], "bf16", "{v}");
    assert_eq!(g["max_running_requests"].as_u64(), Some(256), "{v}");
    assert!(g["log"].to_string().contains("Mamba Cache is allocated. max_mamba_cache_size: 256"), "{v}");
    let out = util::vram().args(["serve", "-m", NEXT, "-g", "h100", "--engine", "sglang", "--tp", "4"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("state pool (36 layers, Gated DeltaNet)") && text.contains("a running request takes up to 5"), "{text}");
    let e = fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--engine", "sglang", "--max-mamba-cache-size", "64"], 2);
    assert!(e.contains("--max-mamba-cache-size") && e.contains("no recurrent state"), "{e}");
    let e = fails(&["serve", "-m", NEXT, "-g", "h100", "--max-mamba-cache-size", "64"], 2);
    assert!(e.contains("--max-mamba-cache-size") && e.contains("SGLang flag"), "{e}");
    let e = fails(&["serve", "-m", "../../validation/configs/ssm/jamba-v0.1.json", "-g", "h100", "--engine", "sglang"], 2);
    assert!(e.contains("Jamba has no SGLang model"), "{e}");
    // --emit writes the launch with the hybrid flags as given, and an alternative's flag in place.
    let out = util::vram()
        .args(["serve", "-m", NEXT, "-g", "h100", "--engine", "sglang", "--tp", "4", "--max-mamba-cache-size", "256"])
        .args(["--disable-radix-cache", "--emit", "sglang"])
        .output()
        .unwrap();
    let launch = String::from_utf8_lossy(&out.stdout);
    assert!(launch.contains("--max-mamba-cache-size 256") && launch.contains("--disable-radix-cache"), "{launch}");
    let e = fails(&["serve", "-m", NEXT, "-g", "h100", "--engine", "sglang", "--language-only"], 2);
    assert!(e.contains("no vision tower"), "{e}");
    let e = fails(&["serve", "-m", NEXT, "-g", "h100", "--engine", "sglang", "--mamba-radix-cache-strategy", "all"], 2);
    assert!(e.contains("no_buffer, extra_buffer"), "{e}");
}
