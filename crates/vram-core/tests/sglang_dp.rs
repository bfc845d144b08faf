//! SGLang's attention data parallelism (`--attn-dp-size N`, or 0.5.23's deprecated `--dp-size N
//! --enable-dp-attention`) for MoE models, as 0.5.23's source lays it out: the attention
//! projections, the embedding and the KV heads over tp/N GPUs, the experts over all of TP, the
//! LM head over TP (or the group with `--enable-dp-lm-head`), the prefill chunk divided by N,
//! a given request limit shared among the groups, and more reserved for DP padding.

use vram_core::model::Role;
use vram_core::presets;
use vram_core::sglang::{gpu_defaults, sglang, SglangConfig};

fn h100(tp: u64, attn_dp: u64) -> SglangConfig {
    let g = vram_core::gpu::lookup("h100").unwrap();
    SglangConfig { tp, attn_dp_size: attn_dp, ..SglangConfig::new(vram_core::gpu::cuda_total(&g).0, g.memory >> 20) }
}

/// Qwen3-30B-A3B at TP 4 with two attention-DP groups of 2: each GPU holds half the attention
/// projections and half the embedding instead of a quarter; the experts and the LM head do not
/// move; the KV cell holds 2 of the 4 KV heads instead of 1.
#[test]
fn attention_and_embedding_split_over_the_group_experts_over_tp() {
    let m = presets::load("qwen3-30b-a3b").unwrap();
    let (plain, dp) = (sglang(&m, &h100(4, 1)).unwrap(), sglang(&m, &h100(4, 2)).unwrap());
    let attention: u64 =
        m.tensors().iter().filter(|t| t.role == Role::Linear && t.name.contains("self_attn.")).map(|t| t.numel * t.count).sum();
    let embedding: u64 = m.tensors().iter().filter(|t| t.role == Role::Embedding).map(|t| t.numel * t.count).sum();
    // bf16: 2 bytes × (1/2 − 1/4) of each; the vocabulary (151,936) is a multiple of 64.
    assert_eq!(dp.weights_bytes - plain.weights_bytes, attention / 2 + embedding / 2);
    assert_eq!(dp.cell_bytes, 2 * plain.cell_bytes);
    assert_eq!(dp.attn_dp_size, 2);
    // The prefill chunk is divided among the groups, after the memory default used the whole one.
    let (cps, max_bs) = gpu_defaults(81_559, 4);
    assert_eq!(dp.chunked_prefill_size, cps / 2);
    assert_eq!(dp.reserved_mib - plain.reserved_mib, (max_bs * 2 * 3 + if max_bs > 300 { max_bs * 2 * 3 / 2 } else { 0 }) as f64);
    // --enable-dp-lm-head: the LM head over the group too (2 of 4 ranks' worth more).
    let head = sglang(&m, &SglangConfig { dp_lm_head: true, ..h100(4, 2) }).unwrap();
    let lm_head: u64 = m.tensors().iter().filter(|t| t.role == Role::LmHead).map(|t| t.numel * t.count).sum();
    assert_eq!(head.weights_bytes - dp.weights_bytes, lm_head / 2);
}

/// A given --max-running-requests is shared among the groups (resolve_max_num_reqs:
/// `max_running_requests // attn_dp_size` per worker).
#[test]
fn a_request_limit_is_per_group() {
    let m = presets::load("qwen3-30b-a3b").unwrap();
    let r = sglang(&m, &SglangConfig { max_running_requests: Some(300), ..h100(4, 2) }).unwrap();
    assert_eq!(r.max_running_requests, 150);
}

/// What SGLang refuses, and what vram does not model, are errors that say so.
#[test]
fn unmodelled_and_refused_layouts_are_errors() {
    let moe = presets::load("qwen3-30b-a3b").unwrap();
    let dense = presets::load("llama-3.1-8b").unwrap();
    assert!(sglang(&moe, &h100(4, 3)).unwrap_err().to_string().contains("divisor"));
    assert!(sglang(&dense, &h100(4, 2)).unwrap_err().to_string().contains("dense"));
    // mixtral.py keeps its attention over all of TP: not the layout modelled.
    let mixtral = presets::load("mixtral-8x7b").unwrap();
    assert!(sglang(&mixtral, &h100(4, 2)).unwrap_err().to_string().contains("model files read"));
    let e = sglang(&moe, &SglangConfig { dp_lm_head: true, ..h100(4, 1) }).unwrap_err().to_string();
    assert!(e.contains("attention DP"), "{e}");
}

/// `--ep-size` equal to `--tp-size`: whole experts per GPU, the same bytes as a TP slice of every
/// expert when the experts divide; other sizes SGLang refuses (ep_size * moe_dp_size == tp_size).
#[test]
fn expert_parallelism_over_the_tp_group_keeps_the_bytes() {
    let m = presets::load("qwen3-30b-a3b").unwrap();
    let tp = sglang(&m, &h100(4, 1)).unwrap();
    let ep = sglang(&m, &SglangConfig { ep_size: 4, ..h100(4, 1) }).unwrap();
    assert_eq!(ep.weights_bytes, tp.weights_bytes);
    assert!(ep.notes.iter().any(|n| n.contains("32 whole experts")));
    assert!(sglang(&m, &SglangConfig { ep_size: 2, ..h100(4, 1) }).unwrap_err().to_string().contains("equal to --tp-size"));
    let dense = presets::load("llama-3.1-8b").unwrap();
    assert!(sglang(&dense, &SglangConfig { ep_size: 2, ..h100(2, 1) }).is_err());
}
