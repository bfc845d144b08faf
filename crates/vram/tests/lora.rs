//! LoRA / DoRA / QLoRA on the command line (issue 12): TRL arguments paste as they are, bad
//! combinations are refused naming the fix, a 4-bit base holds exactly bitsandbytes' storage, and
//! a pre-quantized checkpoint is the frozen base as its headers store it.

mod util;

mod awq_dir;
use serde_json::{json, Value};
use util::{fails, json};

fn component(v: &Value, name: &str) -> u64 {
    v["components"].as_array().unwrap().iter().filter(|c| c["name"] == name).map(|c| c["bytes"].as_u64().unwrap()).sum()
}

#[test]
fn trl_arguments_paste_as_they_are() {
    let v = json(&[
        "estimate",
        "-m",
        "llama-3.2-1b",
        "--use_peft",
        "--lora_r",
        "16",
        "--lora_alpha",
        "32",
        "--lora_dropout",
        "0.05",
        "--lora_target_modules",
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "--load_in_4bit",
        "--bnb_4bit_quant_type",
        "nf4",
        "--use_bnb_nested_quant",
        "--per_device_train_batch_size",
        "2",
        "--gradient_checkpointing",
    ]);
    assert_eq!(v["job"]["checkpointing"], "full");
    let l = &v["job"]["lora"];
    assert_eq!(l["r"], 16);
    assert_eq!(l["method"], "lora");
    assert_eq!(l["targets"]["names"], json!(["q_proj", "k_proj", "v_proj", "o_proj"]), "{l}");
    assert_eq!(v["job"]["base"]["kind"], "bnb4");
    assert_eq!(v["job"]["base"]["nested"], true);
    // r·(in + out) per adapted module: q and o are 2048×2048, k and v 2048→512; 16 layers.
    let per_layer = 16 * ((2048 + 2048) * 2 + (2048 + 512) * 2);
    assert_eq!(component(&v, "adapter parameters (trainable)"), 16 * per_layer * 4);
    // `--load_in_4bit True` (HfArgumentParser style) reads the same.
    let w = json(&["estimate", "-m", "llama-3.2-1b", "--use_peft", "True", "--load_in_4bit", "True"]);
    assert_eq!(w["job"]["base"]["kind"], "bnb4");
}

#[test]
fn bad_combinations_name_the_fix() {
    let m = ["estimate", "-m", "llama-3.2-1b"];
    let run = |extra: &[&str]| fails(&[&m[..], extra].concat(), 2);
    assert!(run(&["--load-in-4bit"]).contains("add --peft lora"));
    assert!(run(&["--peft", "lora", "--lora-r", "0"]).contains("between 1 and 65536"));
    let e = run(&["--peft", "lora", "--lora-target-modules", "q_proj,c_attn"]);
    assert!(e.contains("c_attn") && e.contains("q_proj, up_proj, v_proj"), "{e}");
    assert!(run(&["--lora-r", "16"]).contains("add --peft lora"));
    assert!(run(&["--peft", "lora", "--load-in-4bit", "--load-in-8bit"]).contains("pick one"));
    assert!(run(&["--peft", "lora", "--bnb-4bit-quant-type", "nf4"]).contains("add --load-in-4bit"));
    assert!(run(&["--peft", "lora", "--mode", "infer"]).contains("only for training"));
    assert!(run(&["--peft", "qlora"]).contains("--load-in-4bit"));
    assert!(run(&["--peft", "lora", "--lora-dropout", "1.5"]).contains("probability"));
    assert!(run(&["--peft", "lora", "--lora-modules-to-save", "mlp"]).contains("embed_tokens"));
    assert!(run(&["--peft", "lora", "--gpus", "2", "--zero", "3"]).contains("--fsdp full_shard"));
    // The FSDP path checks the adapters too (it once estimated an unknown target with exit 0).
    assert!(run(&["--peft", "lora", "--lora-target-modules", "foo", "--gpus", "2", "--fsdp", "full_shard"]).contains("`foo`"));
    assert!(fails(&["plan", "-m", "llama-3.2-1b", "--peft", "lora", "--gpus", "8", "--gpu", "h100", "--emit", "deepspeed"], 2)
        .contains("DDP and FSDP"));
    // An architecture peft has no default for needs explicit targets, as peft says.
    let e = fails(&["estimate", "-m", "phi-3-mini", "--peft", "lora"], 2);
    assert!(e.contains("--lora-target-modules all-linear") && e.contains("qkv_proj"), "{e}");
}

/// bitsandbytes' storage of one 4-bit weight, derived here from bitsandbytes/functional.py
/// `quantize_4bit` (packed uint8 of n/2, fp32 absmax per 64, the 16-entry fp32 code; double
/// quantization: uint8 absmax, fp32 absmax per 256 of them, the 256-entry code, an offset),
/// each storage rounded to the caching allocator's 512 B.
fn bnb4(n: u64, nested: bool) -> u64 {
    let r = |b: u64| b.div_ceil(512) * 512;
    let blocks = n.div_ceil(64);
    let tail = if nested { r(blocks) + r(blocks.div_ceil(256) * 4) + r(1024) + r(4) } else { r(blocks * 4) };
    r(n / 2) + r(64) + tail
}

#[test]
fn a_4bit_base_holds_exactly_what_bitsandbytes_stores() {
    // Llama-3.2-1B: 16 layers of q,o (2048²), k,v (512×2048), gate,up (8192×2048), down (2048×8192);
    // the tied embedding (128256×2048) and norms stay unquantized.
    let linears: Vec<u64> = [2048 * 2048, 512 * 2048, 512 * 2048, 2048 * 2048, 8192 * 2048, 8192 * 2048, 2048 * 8192].to_vec();
    for nested in [false, true] {
        let mut args = vec!["estimate", "-m", "llama-3.2-1b", "--peft", "lora", "--load-in-4bit"];
        if nested {
            args.push("--use-bnb-nested-quant");
        }
        let trl = json(&args);
        args.extend(["--kbit-prepare", "peft"]);
        let v = json(&args);
        let quant: u64 = 16 * linears.iter().map(|n| bnb4(*n, nested)).sum::<u64>();
        // prepare_model_for_kbit_training: everything not 4-bit in fp32 (embedding, 33 norms of 2048).
        let rest = (128_256 * 2048 + 33 * 2048) * 4;
        assert_eq!(component(&v, "parameters"), quant + rest, "nested {nested}");
        // TRL (the default) puts the embedding back in bf16 after preparing.
        assert_eq!(component(&trl, "parameters"), quant + 128_256 * 2048 * 2 + 33 * 2048 * 4, "nested {nested}");
    }
}

fn write_awq_dir() -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = awq_dir::write(dir.path());
    (dir, data)
}

#[test]
fn a_prequantized_checkpoint_is_the_frozen_base_as_stored() {
    let (dir, data) = write_awq_dir();
    let p = dir.path().to_str().unwrap();
    let v = json(&["estimate", "-m", p, "--peft", "lora", "-s", "64"]);
    assert_eq!(component(&v, "parameters"), data, "{v}");
    let detail = v["components"].as_array().unwrap().iter().find(|c| c["name"] == "parameters").unwrap()["detail"].to_string();
    assert!(detail.contains("safetensors headers") && detail.contains("exact"), "{detail}");
    // Quantizing an already quantized checkpoint again is refused.
    let e = fails(&["estimate", "-m", p, "--peft", "lora", "--load-in-4bit", "-s", "64"], 2);
    assert!(e.contains("already quantized") && e.contains("drop --load-in-4bit"), "{e}");
}

#[test]
fn fsdp_shards_the_frozen_base_and_the_adapters() {
    let one = json(&["estimate", "-m", "llama-3.1-8b", "--peft", "lora", "--load-in-4bit", "-s", "1024"]);
    let four =
        json(&["estimate", "-m", "llama-3.1-8b", "--peft", "lora", "--load-in-4bit", "-s", "1024", "--gpus", "4", "--fsdp", "full_shard"]);
    let base = component(&one, "parameters");
    assert_eq!(component(&four, "parameters (frozen base shard)"), base / 4, "{four}");
    assert_eq!(component(&four, "adapter parameters (shard)"), component(&one, "adapter parameters (trainable)") / 4);
}

#[test]
fn vllm_enable_lora_reserves_its_slots() {
    let base = ["serve", "-m", "llama-3.1-8b", "-g", "h100", "--max-model-len", "8192"];
    let plain = json(&base);
    let v = json(&[&base[..], &["--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"]].concat());
    // vllm/lora/layers/base_linear.py: lora_a [4, 1, 64, in] + lora_b [4, 1, out, 64] in bf16 for
    // every linear of every layer: q, o 4096→4096; k, v 4096→1024; gate, up 4096→14336; down back.
    let per_layer: u64 = 2 * (4096 + 4096) + 2 * (4096 + 1024) + 3 * (4096 + 14336);
    let slots = 32 * 4 * 64 * per_layer * 2;
    let g = &v["gpus"][0];
    assert_eq!(g["lora_slots_bytes"].as_u64().unwrap(), slots, "{g}");
    assert_eq!(g["weights_bytes"].as_u64().unwrap() - plain["gpus"][0]["weights_bytes"].as_u64().unwrap(), slots);
    assert!(g["kv_cache_bytes"].as_u64().unwrap() < plain["gpus"][0]["kv_cache_bytes"].as_u64().unwrap());
    assert!(fails(&[&base[..], &["--max-loras", "4"]].concat(), 2).contains("need --enable-lora"));
    assert!(fails(&[&base[..], &["--enable-lora", "--max-lora-rank", "24"]].concat(), 2).contains("one of 1, 8, 16"));
    assert!(fails(&["serve", "-m", "mixtral-8x7b", "-g", "h100", "--enable-lora"], 2).contains("MoE"));
}

#[test]
fn plan_searches_lora_layouts_with_the_parallel_estimator() {
    let v = json(&["plan", "-m", "llama-3.1-70b", "--peft", "lora", "--load-in-4bit", "--gpus", "8", "--gpu", "h100", "-s", "2048"]);
    let top = v["plans"].as_array().unwrap();
    assert!(!top.is_empty(), "{v}");
    for p in top {
        let par = &p["parallel"];
        let engine = par["engine"].as_str().unwrap();
        assert!(engine == "ddp" || engine == "fsdp", "{p}");
        // Each plan's memory is what `vram estimate` prints for the same layout.
        let mb = p["micro_batch"].as_u64().unwrap().to_string();
        let accum = p["grad_accum"].as_u64().unwrap().to_string();
        let mut args = vec![
            "estimate",
            "-m",
            "llama-3.1-70b",
            "--peft",
            "lora",
            "--load-in-4bit",
            "--gpus",
            "8",
            "-s",
            "2048",
            "-b",
            &mb,
            "--grad-accum",
            &accum,
        ];
        if p["checkpointing"] == "full" {
            args.extend(["--checkpointing", "full"]);
        }
        let strategy;
        if engine == "fsdp" {
            strategy = par["fsdp"].as_str().unwrap().to_string();
            args.extend(["--fsdp", &strategy]);
        }
        let e = json(&args);
        assert_eq!(e["total_bytes"], p["per_gpu_bytes"], "{p}");
    }
    let cmd = util::vram()
        .args([
            "plan",
            "-m",
            "llama-3.1-70b",
            "--peft",
            "lora",
            "--load-in-4bit",
            "--gpus",
            "8",
            "--gpu",
            "h100",
            "-s",
            "2048",
            "--emit",
            "torchrun",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&cmd.stdout);
    assert!(text.contains("--use_peft") && text.contains("--load_in_4bit"), "{text}");
}

#[test]
fn paged_optimizer_states_are_unified_memory_outside_the_allocated_peak() {
    let base = ["estimate", "-m", "llama-3.2-1b", "-s", "1024", "--peft", "lora", "--lora-target-modules", "all-linear"];
    let eight = json(&[&base[..], &["--optimizer", "adamw_bnb_8bit"]].concat());
    let paged = json(&[&base[..], &["--optimizer", "paged_adamw_8bit"]].concat());
    let comp = |v: &Value, n: &str| v["components"].as_array().unwrap().iter().find(|c| c["name"] == n).cloned();
    // The same 8-bit states, moved from allocated memory to a unified-memory overhead line.
    let states = comp(&eight, "optimizer states").unwrap();
    let unified = comp(&paged, "paged optimizer states").unwrap();
    assert_eq!(unified["bytes"], states["bytes"]);
    assert_eq!(unified["kind"], "overhead");
    assert!(comp(&paged, "optimizer states").is_none());
    // Across GPUs the engines' layouts count device states only: refused, not dropped.
    assert!(
        fails(&[&base[..], &["--optimizer", "paged_adamw_8bit", "--gpus", "2", "--fsdp", "full_shard"]].concat(), 2).contains("one GPU")
    );
}

#[test]
fn optimizer_in_backward_frees_gradients_and_has_no_step_phase() {
    let base = ["estimate", "-m", "llama-3.2-1b", "-s", "1024", "--optimizer", "adamw"];
    let normal = json(&base);
    let in_bwd = json(&[&base[..], &["--optimizer-in-bwd"]].concat());
    let phases = |v: &Value| v["phases"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert!(phases(&normal).contains(&"optimizer_step".to_string()));
    assert!(!phases(&in_bwd).contains(&"optimizer_step".to_string()));
    // Gradients never all exist at once: the end of backward holds none.
    let end = |v: &Value| {
        v["phases"].as_array().unwrap().iter().find(|p| p["phase"] == "backward_end").unwrap()["allocated_bytes"].as_u64().unwrap()
    };
    assert!(end(&in_bwd) < end(&normal));
    assert!(in_bwd["peak_allocated_bytes"].as_u64() <= normal["peak_allocated_bytes"].as_u64());
    assert!(fails(&[&base[..], &["--optimizer-in-bwd", "--grad-accum", "4"]].concat(), 2).contains("cannot accumulate"));
}

/// LoRA on a text encoder: peft's default targets (query, value) and, for a classification head,
/// the classifier trained as peft's SEQ_CLS task trains it; on a vision encoder, peft's image
/// recipe (q_proj, v_proj, the classifier saved); a dual encoder is refused.
#[test]
fn lora_on_encoders_counts_peft_s_trainable_parameters() {
    let bert = "../../validation/configs/families/bert-base-uncased.json";
    let out = util::vram()
        .args(["estimate", "-m", bert, "--task", "text-classification", "--num-labels", "2", "--peft", "lora"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // 12 layers × 2 modules × (768×8 + 8×768) adapters + the 768×2 + 2 classifier copy (peft 0.21).
    assert!(text.contains("LoRA r 8 on query,value (24 modules) · 296,450 trainable parameters"), "{text}");
    let vit = "../../validation/configs/families/vit-base-patch16-224.json";
    let args = ["estimate", "-m", vit, "--task", "image-classification", "--num-labels", "10", "--peft", "lora"];
    let more = ["--lora-target-modules", "q_proj,v_proj", "--lora-modules-to-save", "classifier"];
    let out = util::vram().args(args).args(more).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // 12 × 2 × (768×8 + 8×768) = 294,912 adapter parameters + the 768×10 + 10 classifier copy.
    assert!(text.contains("· 302,602 trainable parameters"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let e = fails(&["estimate", "-m", "../../validation/configs/families/clip-vit-base-patch32.json", "--peft", "lora"], 2);
    assert!(e.contains("dual encoder"), "{e}");
}
