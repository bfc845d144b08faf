//! SGLang's LoRA pool (`--enable-lora`): its buffers' shapes as SGLang 0.5.23's
//! lora/mem_pool.py sizes them, and the token pool that gives them up.

use vram_core::presets;
use vram_core::sglang::{lora_pool_bytes, normalize_lora_targets, sglang, SglangConfig, SglangLora};

const GIB: u64 = 1 << 30;

fn lora(rank: u64, modules: &[&str]) -> SglangLora {
    let names: Vec<String> = modules.iter().map(|s| s.to_string()).collect();
    SglangLora { max_loras_per_batch: 8, max_lora_rank: rank, target_modules: normalize_lora_targets(&names).unwrap() }
}

fn h100() -> SglangConfig {
    let g = vram_core::gpu::lookup("h100").unwrap();
    SglangConfig::new(vram_core::gpu::cuda_total(&g).0, g.memory >> 20)
}

/// Llama-3.1-8B at rank 64, each layer's A [r·stacked, in] and B [out, r], by hand from
/// mem_pool.py's shapes: qkv 3·64·4096 + 6144·64, o 64·4096 + 4096·64, gate_up 2·64·4096 +
/// 28672·64, down 64·14336 + 4096·64 = 5,242,880 elements; × 32 layers × 8 slots × 2 bytes.
#[test]
fn the_pool_is_the_buffers_mem_pool_allocates() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let four = lora(64, &["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]);
    assert_eq!(four.target_modules, ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]);
    assert_eq!(lora_pool_bytes(&m, &four, 1, 2).unwrap(), 5_242_880 * 32 * 8 * 2);
    assert_eq!(lora_pool_bytes(&m, &four, 1, 2).unwrap(), 5 * GIB / 2);
    // `all` adds the embeddings' and the LM head's pairs, once each: 64·128256 + 4096·64 apiece.
    let all = lora(64, &["all"]);
    assert_eq!(lora_pool_bytes(&m, &all, 1, 2).unwrap() - lora_pool_bytes(&m, &four, 1, 2).unwrap(), 2 * 8_470_528 * 8 * 2);
    // TP 2: the column-parallel outputs and the row-parallel inputs halve.
    let q = lora(16, &["q_proj"]);
    assert_eq!(lora_pool_bytes(&m, &q, 2, 2).unwrap(), (3 * 16 * 4096 + 3072 * 16) * 32 * 8 * 2);
    // TP 16 > 8 KV heads: each rank keeps one whole K and V head (QKVParallelLinear replicates).
    assert_eq!(lora_pool_bytes(&m, &q, 16, 2).unwrap(), (3 * 16 * 4096 + (256 + 2 * 128) * 16) * 32 * 8 * 2);
}

#[test]
fn the_token_pool_gives_up_exactly_the_lora_pool() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let base = sglang(&m, &h100()).unwrap();
    let l = lora(64, &["all-linear"]);
    let with = sglang(&m, &SglangConfig { lora: Some(l.clone()), ..h100() }).unwrap();
    assert_eq!(with.lora_pool_bytes, lora_pool_bytes(&m, &l, 1, 2).unwrap());
    assert_eq!(base.rest_bytes - with.rest_bytes, with.lora_pool_bytes);
    assert!(with.max_total_num_tokens < base.max_total_num_tokens);
    assert_eq!(with.weights_bytes, base.weights_bytes);
    assert!(with.notes.iter().any(|n| n.contains("--enable-lora")), "{:?}", with.notes);
}

#[test]
fn what_is_not_modelled_is_refused() {
    let moe = presets::load("qwen3-30b-a3b").unwrap();
    let e = sglang(&moe, &SglangConfig { lora: Some(lora(16, &["q_proj"])), ..h100() }).unwrap_err().to_string();
    assert!(e.contains("dense decoders"), "{e}");
    let e = normalize_lora_targets(&["fc1".to_string()]).unwrap_err().to_string();
    assert!(e.contains("q_proj"), "{e}");
    assert!(normalize_lora_targets(&[]).is_err());
    let m = presets::load("llama-3.1-8b").unwrap();
    let e = sglang(&m, &SglangConfig { lora: Some(SglangLora { max_lora_rank: 0, ..lora(16, &["q_proj"]) }), ..h100() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("between 1 and 1024"), "{e}");
}
