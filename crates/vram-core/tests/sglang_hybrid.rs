//! Serving hybrid models on SGLang (src/sglang.rs): the recurrent-state pool taken out of the
//! budget before the token pool, the token pool over the full-attention layers only, and the
//! state slots that cap the running requests, held to the figures SGLang logged where a public
//! log exists (notes of the rules: SGLang 0.5.23 mem_cache/kv_cache_configurator.py,
//! configs/mamba_utils.py, mem_cache/memory_pool.py).

use std::path::PathBuf;

use vram_core::dtype::DType;
use vram_core::serve_ssm::Mixer;
use vram_core::sglang::{cell_bytes, hybrid_shape, sglang, HybridShape, SglangConfig};
use vram_core::{gpu, parse_config, Model};

const GIB: f64 = (1u64 << 30) as f64;

fn model(dir: &str, name: &str) -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../validation/configs/{dir}/{name}.json"));
    parse_config(&std::fs::read(&path).unwrap(), name, &path.display().to_string()).unwrap()
}

fn inline(json: &str, name: &str) -> Model {
    parse_config(json.as_bytes(), name, name).unwrap()
}

fn h100(tp: u64) -> SglangConfig {
    let g = gpu::lookup("h100").unwrap();
    SglangConfig { tp, ..SglangConfig::new(g.memory - 434 * (1 << 20), g.memory >> 20) }
}

/// Qwen3.5-397B-A17B's language model (the released config's text part: 60 layers, every fourth
/// full attention, 64 value and 16 key heads of 128, 2 KV heads of 256).
const QWEN35_397B: &str = r#"{"model_type": "qwen3_5_moe_text", "architectures": ["Qwen3_5MoeForCausalLM"],
  "hidden_size": 4096, "num_hidden_layers": 60, "num_attention_heads": 32, "num_key_value_heads": 2,
  "head_dim": 256, "vocab_size": 248320, "num_experts": 512, "num_experts_per_tok": 10,
  "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024, "full_attention_interval": 4,
  "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128,
  "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "max_position_embeddings": 262144,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
  "torch_dtype": "bfloat16"}"#;

/// kvcache-ai/ktransformers#1870 (SGLang 0.5.9, Qwen3.5-397B-A17B-FP8, --tp-size 2,
/// --max-running-requests 1): "Mamba Cache is allocated. max_mamba_cache_size: 82, conv_state
/// size: 0.13GB, ssm_state size: 7.29GB" and "KV Cache is allocated. #tokens: 580364, K size:
/// 4.15 GB, V size: 4.15 GB". The per-slot state and the per-token cell that give all four
/// figures: 45 Gated DeltaNet layers × (conv (6144, 3) bf16 + state (32, 128, 128) float32) over
/// 83 rows (the pool's padding slot), and 15 full-attention layers × 1 KV head × 256 × 2 bytes.
#[test]
fn qwen35_397b_tp2_state_and_cell_give_the_logged_sizes() {
    let m = inline(QWEN35_397B, "qwen3.5-397b-a17b");
    let HybridShape { mixer, attention_layers: attention, state_layers: layers, conv_bytes: conv, ssm_bytes: ssm, ssm_dtype: dtype } =
        hybrid_shape(&m, &h100(2)).unwrap();
    assert_eq!((mixer, attention, layers, dtype), (Mixer::GatedDeltaNet, 15, 45, DType::F32));
    assert_eq!((conv, ssm), (6144 * 3 * 2, 32 * 128 * 128 * 4));
    let rows = 83.0 * 45.0;
    assert_eq!(format!("{:.2}", rows * conv as f64 / GIB), "0.13");
    assert_eq!(format!("{:.2}", rows * ssm as f64 / GIB), "7.29");
    let cell = cell_bytes(&m, 2, 2, attention).unwrap();
    assert_eq!(cell, 15 * 512 * 2);
    assert_eq!(format!("{:.2}", (580_364 + 1) as f64 * cell as f64 / 2.0 / GIB), "4.15");
}

/// ovg-project/kvcached#459 (Qwen3.5-9B, TP 1, SGLang ≥ 0.5.13): "Elastic mamba cell padded:
/// raw=2146304B", one Gated DeltaNet layer's state for one slot: conv (8192, 3) bf16 + state
/// (32, 128, 128) float32.
#[test]
fn qwen35_9b_layer_state_is_the_logged_cell() {
    let m = inline(
        r#"{"model_type": "qwen3_5_text", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 16,
            "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 12288, "vocab_size": 248320,
            "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "max_position_embeddings": 262144, "mamba_ssm_dtype": "float32", "torch_dtype": "bfloat16"}"#,
        "qwen3.5-9b",
    );
    let HybridShape { attention_layers: attention, state_layers: layers, conv_bytes: conv, ssm_bytes: ssm, .. } =
        hybrid_shape(&m, &h100(1)).unwrap();
    assert_eq!((attention, layers), (8, 24));
    assert_eq!(conv + ssm, 2_146_304);
}

/// The state slots cap the running requests at slots // 5 under SGLang's default (radix cache,
/// extra_buffer with overlap scheduling), as the logs' warnings read: MiaAI-Lab/
/// Qwen3.8-27B-SGLang-DGX-Spark#7 "max_running_requests is capped to 12 by the mamba state cache
/// (max_mamba_cache_size=64, 5 state slots per request)", jpezzulli/sglang-rtxpro6000#5
/// (--max-mamba-cache-size 40 → max_running_requests=8). no_buffer takes 3, the radix cache off 1.
#[test]
fn state_slots_cap_running_requests() {
    let m = model("ssm", "qwen3.5-0.8b");
    let run = |k: u64, f: &dyn Fn(&mut SglangConfig)| {
        let mut c = SglangConfig { max_mamba_cache_size: Some(k), ..h100(1) };
        f(&mut c);
        sglang(&m, &c).unwrap()
    };
    let r = run(64, &|_| {});
    assert_eq!(r.max_running_requests, 12);
    assert!(r.log.iter().any(|l| l.starts_with(
        "max_running_requests is capped to 12 by the mamba state cache (max_mamba_cache_size=64, 5 state slots per request)"
    )));
    assert_eq!(run(40, &|_| {}).max_running_requests, 8);
    assert_eq!(run(64, &|c| c.disable_overlap_schedule = true).max_running_requests, 64 / 3);
    assert_eq!(run(64, &|c| c.disable_radix_cache = true).max_running_requests, 64);
    assert_eq!(run(64, &|c| c.mamba_strategy = Some(vram_core::sglang::MambaStrategy::ExtraBufferLazy)).max_running_requests, 16);
    // The slots given are the pool: (64 + 1) rows, the rest to the tokens.
    let st = r.state.unwrap();
    assert_eq!(st.pool_bytes, 65 * st.per_request_bytes);
}

/// Without --max-mamba-cache-size the state pool takes r/(1+r) of the budget (r = 0.9) less one
/// slot, the pool one slot more, and the token pool the rest over the full-attention layers:
/// state ≈ 0.9 × tokens' bytes. A bf16 SSM state halves the slot and about doubles the slots.
#[test]
fn default_split_follows_the_memory_ratio() {
    let m = model("ssm", "qwen3-next-80b-a3b");
    let r = sglang(&m, &h100(4)).unwrap();
    let st = r.state.clone().unwrap();
    assert_eq!((st.attention_layers, st.state_layers), (12, 36));
    let budget = st.pool_bytes + r.kv_pool_bytes;
    let share = st.pool_bytes as f64 / budget as f64;
    assert!((share - 0.9 / 1.9).abs() < 0.002, "state share {share}");
    assert_eq!(r.max_running_requests, st.max_mamba_cache_size / 5);
    assert!(st.caps_requests && r.fits);
    let half = sglang(&m, &SglangConfig { mamba_ssm_dtype: Some(DType::BF16), ..h100(4) }).unwrap();
    let hs = half.state.unwrap();
    assert!(hs.per_request_bytes < st.per_request_bytes * 55 / 100);
    assert!(hs.max_mamba_cache_size > st.max_mamba_cache_size * 18 / 10);
}

/// Qwen3.5 checkpoints are vision-language models: SGLang loads the tower, lowers its default
/// fraction by 0.95 · f (f from the tower's width; 24 layers read, as its Qwen3-VL vision config
/// has no num_hidden_layers) and reserves 100 MB; `--language-only` serves the text model alone.
#[test]
fn qwen35_checkpoint_is_served_as_a_vlm() {
    let m = model("vlm", "Qwen3.5-0.8B");
    let r = sglang(&m, &h100(1)).unwrap();
    let text = sglang(&m, &SglangConfig { language_only: true, ..h100(1) }).unwrap();
    assert_eq!(text.mem_fraction_static, 0.83);
    let f = 1.0 - 0.1 * ((768.0f64 / 1024.0).powi(2) - 1.0);
    assert!((r.mem_fraction_static - 0.83 * 0.95 * f).abs() < 1e-12);
    assert_eq!((r.mm_reserve_bytes, text.mm_reserve_bytes), (100 << 20, 0));
    assert!(r.weights_bytes > text.weights_bytes);
}

/// Hybrids SGLang's pool is not modelled for are refused by name, never sized as a decoder.
#[test]
fn unmodelled_hybrids_are_refused() {
    for name in ["jamba-v0.1", "bamba-9b", "zamba2-1.2b", "mamba-130m-hf"] {
        let e = sglang(&model("ssm", name), &h100(1)).unwrap_err().to_string();
        assert!(e.contains("hybrid state pool is modelled for"), "{name}: {e}");
    }
    // A mixer flag on a model without mixers.
    let e = sglang(&model("vlm", "llava-1.5-7b-hf").clone(), &h100(1)).unwrap_err().to_string();
    assert!(e.contains("vision-language"), "{e}");
}

/// When the state slots cap the running requests, the advice offers SGLang's own remedy, the
/// bf16 SSM state, re-run through the sizing: about twice the slots, so about twice the requests.
#[test]
fn bf16_state_is_offered_when_slots_cap_requests() {
    use vram_core::serve_advice::{sglang_alternatives, ServeChange};
    let m = model("ssm", "qwen3.5-0.8b");
    let cfg = SglangConfig { context_length: Some(4096), ..h100(1) };
    let base = sglang(&m, &cfg).unwrap();
    assert!(base.state.as_ref().unwrap().caps_requests);
    let adv = sglang_alternatives(&m, &cfg, &base, None, false);
    let a = adv.alternatives.iter().find(|a| a.change == ServeChange::StateDtype).expect("bf16 state offered");
    assert_eq!(a.flags[0].name, "--mamba-ssm-dtype");
    let ratio = a.max_concurrency / base.max_running_requests as f64;
    assert!((1.7..2.0).contains(&ratio), "concurrency x{ratio}");
}
