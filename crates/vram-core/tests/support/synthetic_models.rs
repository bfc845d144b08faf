//! Full-size GGUF files with the shapes of four public models, their weights all zero, for the
//! llama.cpp runs on a real GPU (validation/llamacpp/): what llama.cpp allocates depends on the
//! header alone, so a zero-weight file of the right shapes and types loads, warms up and sizes
//! its buffers as the real checkpoint does. Needs `gguf_writer` in the including crate.
//!
//! Shapes are the models' Hugging Face config.json values, names and keys those llama.cpp's
//! converter writes (src/models/{llama,qwen3moe,openai-moe,gemma3}.cpp read them). Types follow
//! llama-quantize's Q4_K_M mix (src/llama-quant.cpp): Q4_K, with Q6_K for the output and for the
//! `use_more_bits` layers' attn_v and ffn_down; gpt-oss as ggml-org publishes it (MXFP4 experts,
//! Q8_0 elsewhere: its 2,880-wide rows are no multiple of Q4_K's 256).
#![allow(dead_code)]

use super::gguf_writer::{Writer, F32, MXFP4, Q4_K, Q6_K, Q8_0};

/// The models, by the names `synthetic_gguf` takes.
pub const NAMES: [&str; 4] = ["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b", "gemma-3-12b"];

/// The writer of one of [`NAMES`].
pub fn by_name(name: &str) -> Option<Writer> {
    Some(match name {
        "llama-3.1-8b" => llama_3_1_8b(),
        "qwen3-30b-a3b" => qwen3_30b_a3b(),
        "gpt-oss-20b" => gpt_oss_20b(),
        "gemma-3-12b" => gemma_3_12b(),
        _ => return None,
    })
}

/// llama-quant.cpp's `use_more_bits(i_layer, n_layers)`: the first and last eighth, and every
/// third layer between.
fn more_bits(i: u64, n: u64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

fn q4_k_m(i: u64, n: u64) -> u32 {
    if more_bits(i, n) {
        Q6_K
    } else {
        Q4_K
    }
}

/// Layer `i` of `n`'s attention in the Q4_K_M mix: its norm, q, k, v (Q6_K in the
/// `use_more_bits` layers) and output, then the per-head q/k norms of width `qk_norm` if any.
fn attention_q4_k_m(w: &mut Writer, i: u64, n: u64, [embd, q, kv]: [u64; 3], qk_norm: Option<u64>) {
    w.tensor(&format!("blk.{i}.attn_norm.weight"), &[embd], F32)
        .tensor(&format!("blk.{i}.attn_q.weight"), &[embd, q], Q4_K)
        .tensor(&format!("blk.{i}.attn_k.weight"), &[embd, kv], Q4_K)
        .tensor(&format!("blk.{i}.attn_v.weight"), &[embd, kv], q4_k_m(i, n))
        .tensor(&format!("blk.{i}.attn_output.weight"), &[q, embd], Q4_K);
    if let Some(hd) = qk_norm {
        w.tensor(&format!("blk.{i}.attn_q_norm.weight"), &[hd], F32).tensor(&format!("blk.{i}.attn_k_norm.weight"), &[hd], F32);
    }
}

/// Layer `i` of `n`'s dense feed-forward in the Q4_K_M mix: gate, up, down (Q6_K in the
/// `use_more_bits` layers).
fn ffn_q4_k_m(w: &mut Writer, i: u64, n: u64, embd: u64, ff: u64) {
    w.tensor(&format!("blk.{i}.ffn_gate.weight"), &[embd, ff], Q4_K).tensor(&format!("blk.{i}.ffn_up.weight"), &[embd, ff], Q4_K).tensor(
        &format!("blk.{i}.ffn_down.weight"),
        &[ff, embd],
        q4_k_m(i, n),
    );
}

fn header(w: &mut Writer, arch: &str, name: &str, [layers, ctx, embd, ff, heads, kv]: [u32; 6], vocab: usize) {
    w.decoder(arch, [layers, ctx, embd, ff, heads, kv])
        .str("general.name", name)
        .u32("general.file_type", 15)
        .u32("general.quantization_version", 2)
        .spm_vocab(vocab);
}

/// meta-llama/Llama-3.1-8B-Instruct.
pub fn llama_3_1_8b() -> Writer {
    let (n, embd, ff, kv, vocab) = (32u64, 4096u64, 14336u64, 1024u64, 128_256usize);
    let mut w = Writer::default();
    header(&mut w, "llama", "Llama-3.1-8B (zero weights)", [32, 131_072, 4096, 14336, 32, 8], vocab);
    w.u32("llama.rope.dimension_count", 128)
        .f32("llama.rope.freq_base", 500_000.0)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .u32("llama.vocab_size", vocab as u32);
    w.tensor("token_embd.weight", &[embd, vocab as u64], Q4_K);
    for i in 0..n {
        attention_q4_k_m(&mut w, i, n, [embd, embd, kv], None);
        w.tensor(&format!("blk.{i}.ffn_norm.weight"), &[embd], F32);
        ffn_q4_k_m(&mut w, i, n, embd, ff);
    }
    w.tensor("output_norm.weight", &[embd], F32).tensor("output.weight", &[embd, vocab as u64], Q6_K);
    w
}

/// Qwen/Qwen3-30B-A3B: 128 experts of 768, 8 used; head_dim 128 with q/k norms.
pub fn qwen3_30b_a3b() -> Writer {
    let (n, embd, hd, q, kv, ff_exp, experts, vocab) = (48u64, 2048u64, 128u64, 4096u64, 512u64, 768u64, 128u64, 151_936usize);
    let mut w = Writer::default();
    header(&mut w, "qwen3moe", "Qwen3-30B-A3B (zero weights)", [48, 40_960, 2048, 6144, 32, 4], vocab);
    w.u32("qwen3moe.attention.key_length", 128)
        .u32("qwen3moe.attention.value_length", 128)
        .u32("qwen3moe.expert_count", experts as u32)
        .u32("qwen3moe.expert_used_count", 8)
        .u32("qwen3moe.expert_feed_forward_length", ff_exp as u32)
        .f32("qwen3moe.rope.freq_base", 1_000_000.0)
        .f32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6)
        .u32("qwen3moe.vocab_size", vocab as u32);
    w.tensor("token_embd.weight", &[embd, vocab as u64], Q4_K);
    for i in 0..n {
        attention_q4_k_m(&mut w, i, n, [embd, q, kv], Some(hd));
        w.tensor(&format!("blk.{i}.ffn_norm.weight"), &[embd], F32)
            .tensor(&format!("blk.{i}.ffn_gate_inp.weight"), &[embd, experts], F32)
            .tensor(&format!("blk.{i}.ffn_gate_exps.weight"), &[embd, ff_exp, experts], Q4_K)
            .tensor(&format!("blk.{i}.ffn_up_exps.weight"), &[embd, ff_exp, experts], Q4_K)
            .tensor(&format!("blk.{i}.ffn_down_exps.weight"), &[ff_exp, embd, experts], q4_k_m(i, n));
    }
    w.tensor("output_norm.weight", &[embd], F32).tensor("output.weight", &[embd, vocab as u64], Q6_K);
    w
}

/// openai/gpt-oss-20b: 32 experts of 2,880 (MXFP4), 4 used; sliding window 128 on every other
/// layer, attention sinks, biases.
pub fn gpt_oss_20b() -> Writer {
    let (n, embd, hd, heads, kv_heads, experts, vocab) = (24u64, 2880u64, 64u64, 64u64, 8u64, 32u64, 201_088usize);
    let (q, kv, ff_exp) = (heads * hd, kv_heads * hd, 2880u64);
    let mut w = Writer::default();
    header(&mut w, "gpt-oss", "gpt-oss-20b (zero weights)", [24, 131_072, 2880, 2880, 64, 8], vocab);
    w.u32("gpt-oss.attention.key_length", hd as u32)
        .u32("gpt-oss.attention.value_length", hd as u32)
        .u32("gpt-oss.expert_count", experts as u32)
        .u32("gpt-oss.expert_used_count", 4)
        .u32("gpt-oss.expert_feed_forward_length", ff_exp as u32)
        .u32("gpt-oss.attention.sliding_window", 128)
        .f32("gpt-oss.rope.freq_base", 150_000.0)
        .str("gpt-oss.rope.scaling.type", "yarn")
        .f32("gpt-oss.rope.scaling.factor", 32.0)
        .u32("gpt-oss.rope.scaling.original_context_length", 4096)
        .f32("gpt-oss.attention.layer_norm_rms_epsilon", 1e-5)
        .u32("gpt-oss.vocab_size", vocab as u32);
    w.tensor("token_embd.weight", &[embd, vocab as u64], Q8_0);
    for i in 0..n {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[embd], F32)
            .tensor(&format!("blk.{i}.post_attention_norm.weight"), &[embd], F32)
            .tensor(&format!("blk.{i}.attn_q.weight"), &[embd, q], Q8_0)
            .tensor(&format!("blk.{i}.attn_q.bias"), &[q], F32)
            .tensor(&format!("blk.{i}.attn_k.weight"), &[embd, kv], Q8_0)
            .tensor(&format!("blk.{i}.attn_k.bias"), &[kv], F32)
            .tensor(&format!("blk.{i}.attn_v.weight"), &[embd, kv], Q8_0)
            .tensor(&format!("blk.{i}.attn_v.bias"), &[kv], F32)
            .tensor(&format!("blk.{i}.attn_output.weight"), &[q, embd], Q8_0)
            .tensor(&format!("blk.{i}.attn_output.bias"), &[embd], F32)
            .tensor(&format!("blk.{i}.attn_sinks.weight"), &[heads], F32)
            .tensor(&format!("blk.{i}.ffn_gate_inp.weight"), &[embd, experts], F32)
            .tensor(&format!("blk.{i}.ffn_gate_inp.bias"), &[experts], F32)
            .tensor(&format!("blk.{i}.ffn_gate_exps.weight"), &[embd, ff_exp, experts], MXFP4)
            .tensor(&format!("blk.{i}.ffn_gate_exps.bias"), &[ff_exp, experts], F32)
            .tensor(&format!("blk.{i}.ffn_up_exps.weight"), &[embd, ff_exp, experts], MXFP4)
            .tensor(&format!("blk.{i}.ffn_up_exps.bias"), &[ff_exp, experts], F32)
            .tensor(&format!("blk.{i}.ffn_down_exps.weight"), &[ff_exp, embd, experts], MXFP4)
            .tensor(&format!("blk.{i}.ffn_down_exps.bias"), &[embd, experts], F32);
    }
    w.tensor("output_norm.weight", &[embd], F32).tensor("output.weight", &[embd, vocab as u64], Q8_0);
    w
}

/// google/gemma-3-12b-it's text model: head_dim 256, sliding window 1,024 on five layers of
/// six, a 262,208-token vocabulary tied to the output (no output tensor).
pub fn gemma_3_12b() -> Writer {
    let (n, embd, hd, q, kv, ff, vocab) = (48u64, 3840u64, 256u64, 4096u64, 2048u64, 15360u64, 262_208usize);
    let mut w = Writer::default();
    header(&mut w, "gemma3", "gemma-3-12b (zero weights)", [48, 131_072, 3840, 15360, 16, 8], vocab);
    w.u32("gemma3.attention.key_length", hd as u32)
        .u32("gemma3.attention.value_length", hd as u32)
        .u32("gemma3.attention.sliding_window", 1024)
        .f32("gemma3.rope.freq_base", 1_000_000.0)
        .f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
        .u32("gemma3.vocab_size", vocab as u32);
    w.tensor("token_embd.weight", &[embd, vocab as u64], Q6_K);
    for i in 0..n {
        attention_q4_k_m(&mut w, i, n, [embd, q, kv], Some(hd));
        w.tensor(&format!("blk.{i}.post_attention_norm.weight"), &[embd], F32).tensor(&format!("blk.{i}.ffn_norm.weight"), &[embd], F32);
        ffn_q4_k_m(&mut w, i, n, embd, ff);
        w.tensor(&format!("blk.{i}.post_ffw_norm.weight"), &[embd], F32);
    }
    w.tensor("output_norm.weight", &[embd], F32);
    w
}
