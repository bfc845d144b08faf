//! OpenAI gpt-oss (model_type `gpt_oss`): the real gpt-oss-20b and gpt-oss-120b configs
//! (validation/configs/) read with transformers' exact module tree, their MXFP4 storage, the
//! attention kernel transformers really runs, and refusals of incomplete configs.

use std::path::PathBuf;

use serde_json::Value;
use vram_core::memory::activations::{self as act, Kernel};
use vram_core::quant::{self, Plan};
use vram_core::{parse_config, AttentionImpl, Error, Job, Model, Precision};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn config(name: &str) -> Vec<u8> {
    std::fs::read(root().join(format!("validation/configs/{name}.json"))).expect("config")
}

fn model(name: &str) -> Model {
    parse_config(&config(name), name, name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The record validation/param_counts.py wrote for `name` with real transformers (meta device).
fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("validation/fixtures/param_counts.jsonl")).expect("fixture");
    text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|v| v["name"] == name).expect("record in the fixture")
}

/// The config with `edit` applied to its JSON object.
fn edited(name: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&config(name)).unwrap();
    edit(v.as_object_mut().unwrap());
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn parameter_counts_equal_pytorch_for_both_real_configs() {
    // PyTorch's sum(p.numel()) for GptOssForCausalLM built from the same config.json.
    for (name, want) in [("gpt-oss-20b", 20_914_757_184u64), ("gpt-oss-120b", 116_829_156_672)] {
        let rec = fixture(name);
        assert_eq!(rec["parameters"].as_u64(), Some(want), "{name}: fixture");
        let m = model(name);
        assert_eq!(m.parameters(), want, "{name}");
        assert!(m.approximation.is_none(), "{name} read as approximate");
        // Every tensor transformers has beyond a Llama MoE (sinks, biases, the biased router) is
        // in vram's inventory under the same name with the same size and layer count.
        let ours = m.tensors();
        for t in rec["tensors"].as_array().unwrap() {
            let tname = t[0].as_str().unwrap();
            if !["sinks", "bias", "router", "experts"].iter().any(|k| tname.contains(k)) {
                continue;
            }
            let numel: u64 = t[1].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).product();
            let count = t[2].as_u64().unwrap();
            let short = tname.strip_prefix("model.").unwrap_or(tname);
            let g = ours.iter().find(|g| g.name == short).unwrap_or_else(|| panic!("{name}: {short} missing from vram's inventory"));
            assert_eq!((g.numel, g.count), (numel, count), "{name}: {short}");
        }
    }
}

#[test]
fn structure_is_read_from_the_config() {
    let m = model("gpt-oss-20b");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.experts, moe.top_k, moe.expert_intermediate, moe.shared_intermediate), (32, 4, 2880, 0));
    assert!(moe.biased && m.moe_layers() == 24);
    assert!(m.attention.sinks && m.attention.qkv_bias && m.attention.o_bias);
    assert_eq!((m.heads, m.kv_heads, m.head_dim, m.hidden), (64, 8, 64, 2880));
    // layer_types alternates sliding/full starting with sliding: half the layers slide.
    assert_eq!((m.sliding_layers, m.sliding_window), (12, Some(128)));
    let big = model("gpt-oss-120b");
    assert_eq!((big.moe.as_ref().unwrap().experts, big.sliding_layers, big.layers), (128, 18, 36));
    let r = m.rope_scaling.as_ref().unwrap();
    assert_eq!((r.kind.as_str(), r.native_positions, r.extended_positions), ("yarn", 4096, 131_072));
    // Without layer_types, GptOssConfig alternates the same way (configuration_gpt_oss.py).
    let bytes = edited("gpt-oss-20b", |o| {
        o.remove("layer_types");
        o.remove("sliding_window");
    });
    let m2 = parse_config(&bytes, "m", "m").unwrap();
    assert_eq!((m2.sliding_layers, m2.sliding_window), (12, Some(128)));
    assert_eq!(m2.parameters(), m.parameters());
    // experts_per_token alone (the original OpenAI key) is read too.
    let bytes = edited("gpt-oss-20b", |o| {
        o.remove("num_experts_per_tok");
    });
    assert_eq!(parse_config(&bytes, "m", "m").unwrap().moe.unwrap().top_k, 4);
}

#[test]
fn mxfp4_storage_equals_the_checkpoint() {
    // Independent figure: from the meta-device inventory, experts' weights take 0.5 B per value
    // plus one uint8 E8M0 scale per 32 values, everything else (attention, router, embeddings,
    // lm_head, norms, sinks, expert biases) bf16. For 20b this equals the Hub's
    // model.safetensors.index.json "total_size": 13761264768.
    for (name, want) in [("gpt-oss-20b", 13_761_264_768u128), ("gpt-oss-120b", 65_248_815_744)] {
        let m = model(name);
        let q = m.quantization.as_ref().unwrap();
        assert_eq!(q.method, "mxfp4");
        let plan = Plan::new(q).unwrap();
        let stored = quant::model_bytes(&m, &plan, 2);
        assert_eq!(stored.total(), want, "{name}");
    }
}

#[test]
fn transformers_runs_eager_attention_for_sinks() {
    let m = model("gpt-oss-20b");
    let job = Job::train(1, 2048);
    // The default (sdpa) is not available for gpt-oss: eager, said so.
    let (k, note) = act::choose_kernel(&m, &job);
    assert_eq!(k, Kernel::Eager);
    assert!(note.unwrap().contains("_supports_sdpa = False"));
    let flash = Job { attention: AttentionImpl::Flash, ..job.clone() };
    let (k, note) = act::choose_kernel(&m, &flash);
    assert_eq!(k, Kernel::Flash);
    assert!(note.unwrap().contains("vllm-flash-attn3"));
    let eager = Job { attention: AttentionImpl::Eager, ..job.clone() };
    assert_eq!(act::choose_kernel(&m, &eager), (Kernel::Eager, None));
    // No explicit sliding mask for SDPA: SDPA never runs.
    assert!(!act::sliding_masked(&m, &job, 4096));
    // Scores saved per element: under bf16 autocast the sinks (fp32 master weights) promote the
    // cat to fp32: fp32 softmax output + its bf16 copy for @v; in pure bf16 only the bf16 softmax.
    let amp = act::layer(&m, &job, Kernel::Eager, 0);
    assert_eq!(amp.attention_sq, 6);
    let pure = act::layer(&m, &Job { precision: Precision::Bf16, ..job }, Kernel::Eager, 0);
    assert_eq!(pure.attention_sq, 2);
}

#[test]
fn incomplete_gpt_oss_configs_are_refused() {
    // GptOssConfig's defaults (128 experts, top-4) are gpt-oss-120b's: a 20b config without its
    // expert keys must not be read as 120b.
    let bytes = edited("gpt-oss-20b", |o| {
        o.remove("num_local_experts");
    });
    match parse_config(&bytes, "m", "config.json") {
        Err(Error::MissingKey { key, .. }) => assert_eq!(key, "num_local_experts"),
        other => panic!("expected MissingKey, got {other:?}"),
    }
    let bytes = edited("gpt-oss-20b", |o| {
        o.remove("num_experts_per_tok");
        o.remove("experts_per_token");
    });
    let err = parse_config(&bytes, "m", "config.json").unwrap_err();
    assert!(matches!(&err, Error::MissingKey { key, .. } if key == "num_experts_per_tok"), "{err}");
    assert!(err.to_string().contains("mixture of experts"), "{err}");
    // layer_types that do not match num_hidden_layers.
    let bytes = edited("gpt-oss-20b", |o| {
        o.insert("layer_types".into(), serde_json::json!(["sliding_attention", "full_attention"]));
    });
    let err = parse_config(&bytes, "m", "config.json").unwrap_err();
    assert!(matches!(&err, Error::BadKey { key, .. } if key == "layer_types"), "{err}");
    // sliding_window written as null while layer_types names sliding layers.
    let bytes = edited("gpt-oss-20b", |o| {
        o.insert("sliding_window".into(), Value::Null);
    });
    let err = parse_config(&bytes, "m", "config.json").unwrap_err();
    assert!(matches!(&err, Error::MissingKey { key, .. } if key == "sliding_window"), "{err}");
}

#[test]
fn training_phases_match_the_harness_measurements() {
    // validation/gpt_oss_memory.py: gpt-oss-20b cut to two layers (one sliding, one full), no
    // quantization_config, eager attention, measured with validation/harness.py (FakeTensorMode,
    // CUDA's kernel/dtype/allocator choices). The steady-state step's forward and backward peaks
    // are activation-dominated; each must be within 3% of vram's.
    use vram_core::{memory::Phase, Checkpointing};
    let bytes = edited("gpt-oss-20b", |o| {
        o.insert("num_hidden_layers".into(), 2.into());
        o.insert("layer_types".into(), serde_json::json!(["sliding_attention", "full_attention"]));
        o.remove("quantization_config");
    });
    let m = parse_config(&bytes, "gpt-oss-2l", "gpt-oss-2l").unwrap();
    let text = std::fs::read_to_string(root().join("validation/fixtures/gpt_oss_memory.jsonl")).unwrap();
    let mut worst: f64 = 0.0;
    let mut n = 0;
    for line in text.lines().skip(1) {
        let r: Value = serde_json::from_str(line).unwrap();
        let job = Job {
            precision: Precision::parse(r["precision"].as_str().unwrap()).unwrap(),
            checkpointing: if r["checkpointing"] == true { Checkpointing::Full } else { Checkpointing::None },
            attention: AttentionImpl::Eager,
            ..Job::train(r["batch"].as_u64().unwrap(), r["seq"].as_u64().unwrap())
        };
        let est = vram_core::estimate(&m, &job).unwrap();
        let phase = |ps: &[Phase]| est.phases.iter().filter(|p| ps.contains(&p.phase)).map(|p| p.allocated).max().unwrap();
        let fwd = phase(&[Phase::ForwardAttention, Phase::ForwardEnd]);
        let bwd = phase(&[Phase::BackwardStart, Phase::Backward, Phase::BackwardEnd]);
        for (what, ours, measured) in [("forward", fwd, &r["phase_peaks"]["forward1"]), ("backward", bwd, &r["phase_peaks"]["backward1"])] {
            let measured = measured.as_u64().unwrap();
            let err = ours as f64 / measured as f64 - 1.0;
            assert!(err.abs() <= 0.03, "{line}\n{what}: vram {ours} vs measured {measured} ({:+.2}%)", 100.0 * err);
            worst = worst.max(err.abs());
            n += 1;
        }
    }
    assert!(n >= 14, "{n} comparisons");
    eprintln!("gpt-oss phases: worst |error| {:.2}% over {n}", 100.0 * worst);
}

/// vLLM pads gpt-oss's MXFP4 experts for the MoE kernel it picks by GPU
/// (fused_moe/oracle/mxfp4.py `mxfp4_round_up_hidden_size_and_intermediate_size`): Marlin on an
/// A100 takes hidden 2880 to 3072 and each of 4 ranks' 720 intermediate rows to 768; Triton on
/// an H100 only the 720 to 768; on one GPU 2880 is already a multiple of 64.
#[test]
fn mxfp4_experts_are_padded_for_the_moe_kernel() {
    use vram_core::serve::{serve, ServeConfig};
    let m = vram_core::presets::load("gpt-oss-120b").unwrap();
    let at = |gpu: &str, tp: u64| {
        let g = vram_core::gpu::lookup(gpu).unwrap();
        let cfg = ServeConfig {
            tp,
            max_model_len: Some(16384),
            quantization: vram_core::serve::Quantization::Checkpoint,
            ..ServeConfig::new(80 << 30).with_gpu_traits(&g)
        };
        serve(&m, &cfg).unwrap().weights_bytes as i128
    };
    // Per rank, 36 layers × 128 experts × (gate_up + down) elements at 4 bits plus one E8M0
    // scale per 32: 17/32 of a byte each.
    let experts = |h: i128, i: i128| 36 * 128 * 3 * h * i * 17 / 32;
    assert_eq!(at("a100-80gb", 4) - at("h100", 4), experts(3072, 768) - experts(2880, 768));
    assert_eq!(at("h100", 4) - at("h200", 4), 0);
    assert_eq!(at("h100", 1) - at("a100-80gb", 1), experts(2880, 2880) - experts(3072, 2944));
}
