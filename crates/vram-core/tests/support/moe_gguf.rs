//! A 12-layer MoE GGUF header (qwen3moe-style names: `blk.N.ffn_{gate,up,down}_exps`, 8 experts)
//! for the llama.cpp tensor-override tests. Needs `gguf_writer` in the including crate.
#![allow(dead_code)]

use super::gguf_writer::{Writer, F16, F32, Q4_K, Q8_0};

/// Layers in [`tiny_moe`].
pub const LAYERS: u64 = 12;
/// One layer's expert bytes: gate and up [256, 128, 8] in Q4_K (262,144 elements / 256 × 144
/// bytes = 147,456 each), down [128, 256, 8] in Q8_0 (262,144 / 32 × 34 = 278,528).
pub const EXPERT_BYTES_PER_LAYER: u64 = 2 * 147_456 + 278_528;
/// token_embd [256, 1024] in Q4_K: 262,144 / 256 × 144.
pub const TOKEN_EMBD_BYTES: u64 = 147_456;

/// The MoE file.
pub fn tiny_moe() -> Writer {
    let mut w = Writer::default();
    w.str("general.architecture", "qwen3moe")
        .str("general.name", "tiny-moe")
        .u32("general.file_type", 15)
        .u32("qwen3moe.block_count", LAYERS as u32)
        .u32("qwen3moe.context_length", 32768)
        .u32("qwen3moe.embedding_length", 256)
        .u32("qwen3moe.feed_forward_length", 512)
        .u32("qwen3moe.expert_feed_forward_length", 128)
        .u32("qwen3moe.expert_count", 8)
        .u32("qwen3moe.expert_used_count", 2)
        .u32("qwen3moe.attention.head_count", 8)
        .u32("qwen3moe.attention.head_count_kv", 2)
        .tokens(1024);
    w.tensor("token_embd.weight", &[256, 1024], Q4_K);
    for i in 0..LAYERS {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[256], F32)
            .tensor(&format!("blk.{i}.attn_q.weight"), &[256, 256], Q4_K)
            .tensor(&format!("blk.{i}.attn_k.weight"), &[256, 64], Q4_K)
            .tensor(&format!("blk.{i}.attn_v.weight"), &[256, 64], Q8_0)
            .tensor(&format!("blk.{i}.attn_output.weight"), &[256, 256], Q4_K)
            .tensor(&format!("blk.{i}.ffn_norm.weight"), &[256], F32)
            .tensor(&format!("blk.{i}.ffn_gate_inp.weight"), &[256, 8], F32)
            .tensor(&format!("blk.{i}.ffn_gate_exps.weight"), &[256, 128, 8], Q4_K)
            .tensor(&format!("blk.{i}.ffn_up_exps.weight"), &[256, 128, 8], Q4_K)
            .tensor(&format!("blk.{i}.ffn_down_exps.weight"), &[128, 256, 8], Q8_0);
    }
    w.tensor("output_norm.weight", &[256], F32).tensor("output.weight", &[256, 1024], F16);
    w
}

/// [`tiny_moe`] parsed, as the llama.cpp tests read it.
pub fn parsed() -> vram_core::gguf::Gguf {
    match vram_core::gguf::parse(&tiny_moe().bytes(), "moe.gguf").unwrap() {
        vram_core::gguf::Parsed::Complete(g) => *g,
        vram_core::gguf::Parsed::NeedMore(n) => panic!("header incomplete, needs {n}"),
    }
}
