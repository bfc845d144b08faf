//! vLLM serving of Whisper, the encoder-decoder vLLM's V1 engine runs
//! (vllm/model_executor/models/whisper.py `WhisperForConditionalGeneration`; rules read in the
//! 0.33.0 wheel and checked against three public start-up logs, `tests/serve_whisper.rs`):
//! - Weights: every encoder and decoder linear split over TP (QKV/column/row-parallel, vLLM's
//!   zero k_proj bias added to each attention: `_create_fake_bias_for_k_proj`); the convs,
//!   position tables, norms, row-parallel biases and the token embedding (a plain `nn.Embedding`,
//!   the LM head tied to it, the checkpoint's `proj_out` dropped) whole on every rank.
//! - KV cache: the decoder's self-attention (`FullAttentionSpec`) and cross-attention
//!   (`CrossAttentionSpec`) layers form two groups of the same page size sharing one block pool;
//!   the encoder keeps none. For the logged concurrency a request holds ⌈max_model_len / block⌉
//!   self-attention blocks and ⌈max_num_encoder_input_tokens / block⌉ cross-attention blocks, the
//!   scheduler's `max_num_encoder_input_tokens` being `max_num_batched_tokens`
//!   (config/scheduler.py `__post_init__`), so the logged concurrency is pessimistic once that
//!   exceeds the 1500 encoder positions a request really caches.
//! - Scheduler: chunked prefill and prefix caching off for encoder-decoders; max_model_len from
//!   `max_target_positions` (448); `max_num_batched_tokens` at least max(max_model_len, 1500).
//! - Profile run: the encoder over as many 30-second dummy clips (3000 mel frames, 1500
//!   positions each) as the encoder budget admits, its outputs held while the decoder's dummy
//!   forward over max_num_batched_tokens tokens and the sampler run.

use crate::error::Result;
use crate::model::{Frontend, Model, Role, Seq2Seq};
use crate::serve::{invalid, KvPool, Quantization, ServeConfig, VllmEngine};

/// The encoder side of one rank's profile run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EncoderServe {
    /// Dummy clips the profile's encoder batch holds.
    pub items: u64,
    /// Encoder positions per clip (1500 for every released Whisper).
    pub tokens_per_item: u64,
    /// The encoder budget vLLM logs: max(max_num_batched_tokens, tokens per clip).
    pub budget: u64,
    /// Peak bytes of the encoder pass.
    pub encoder_peak: u128,
    /// The encoder outputs held while the decoder's dummy forward runs.
    pub outputs: u128,
}

/// What vLLM serving of an encoder-decoder may ask for; refused by name otherwise.
pub(crate) fn check(m: &Model, s: &Seq2Seq, cfg: &ServeConfig) -> Result<()> {
    let name = &m.name;
    match s.frontend {
        Frontend::Audio { .. } => {}
        Frontend::Text => {
            let why = if m.model_type.contains("bart") {
                "vLLM serves BART and mBART through an out-of-tree plugin (vllm-project/bart-plugin; its registry lists them there), whose memory accounting vram has not read"
            } else {
                "vLLM's V1 engine has no model for it"
            };
            return Err(invalid(
                "model",
                &m.model_type,
                &format!("{name} is a text encoder-decoder: {why}; `vram estimate` gives its training and inference"),
            ));
        }
    }
    if cfg.engine == VllmEngine::V0 {
        return Err(invalid("--vllm-engine", "v0", &format!("{name}: Whisper's serving is modelled for the V1 engine only")));
    }
    let refuse = |flag: &str, value: String, what: &str| Err(invalid(flag, value, &format!("{name} (Whisper): {what} is not modelled")));
    if cfg.pp > 1 {
        return refuse("--pipeline-parallel-size", cfg.pp.to_string(), "a pipeline split of the encoder and decoder");
    }
    if cfg.lora.is_some() {
        return refuse("--enable-lora", "on".into(), "LoRA slots on its encoder and decoder");
    }
    if cfg.cpu_offload_bytes > 0 {
        return refuse("--cpu-offload-gb", "given".into(), "offloading its layers");
    }
    if cfg.quantization != Quantization::None {
        return refuse("--quantization", "given".into(), "a quantized Whisper");
    }
    if m.multimodal.is_some() || m.ssm.is_some() || m.moe.is_some() {
        return Err(invalid("model", &m.model_type, &format!("{name}: an encoder-decoder with other parts is not modelled")));
    }
    Ok(())
}

/// Parameters one TP rank holds (see the module docs), in elements.
pub(crate) fn rank_elements(m: &Model, s: &Seq2Seq, tp: u64) -> u128 {
    let tp = tp.max(1) as u128;
    let split = |n: u128| n.div_ceil(tp);
    let mut n = 0u128;
    for t in m.tensors().into_iter().chain(s.encoder.tensors()) {
        let numel = t.numel as u128 * t.count as u128;
        // RowParallelLinear keeps its bias whole on every rank ("bias is not parallelized").
        let row_bias = ["o_proj", "out_proj", "fc2"].iter().any(|k| t.name.contains(k));
        n += match t.role {
            Role::Linear => split(numel),
            Role::Bias if !row_bias => split(numel),
            _ => numel,
        };
    }
    // The audio frontend: conv1 (mel bins → d, kernel 3) and conv2 (d → d, kernel 3), plain
    // nn.Conv1d on every rank.
    let d = m.hidden as u128;
    if let Frontend::Audio { mel_bins } = s.frontend {
        n += mel_bins as u128 * d * 3 + d + d * d * 3 + d;
    }
    // The zero k_proj bias vLLM adds to each attention's fused projection (column-parallel):
    // the encoder's self-attention, the decoder's self- and cross-attention.
    n += split((s.encoder.layers as u128 + 2 * m.layers as u128) * d);
    n
}

/// The profile run's encoder pass (gpu_model_runner.py `profile_run` → the encoder over
/// `mm_max_items_per_batch` dummy clips): items = max(1, min(budget // per-clip tokens,
/// max_num_seqs, max_num_batched_tokens // per-clip tokens)) with the budget
/// max(max_num_batched_tokens, per-clip tokens) (v1/core/encoder_cache_manager.py
/// `compute_mm_encoder_budget`, multimodal/encoder_budget.py `_get_max_items`; audio limited to
/// 1 item per prompt).
pub(crate) fn encoder_profile(m: &Model, s: &Seq2Seq, batched: u64, seqs: u64, tp: u64, e: u128) -> EncoderServe {
    let per = s.source_tokens.max(1);
    let budget = batched.max(per);
    let items = (budget / per).min(seqs).min(batched / per).max(1);
    let tokens = items * per;
    // The frontend: the mel input [n, M, frames], conv1's output and its GELU [n, d, frames].
    let frames = s.frames() as u128;
    let mel = match s.frontend {
        Frontend::Audio { mel_bins } => mel_bins as u128,
        Frontend::Text => 0,
    };
    let (n, d) = (items as u128, m.hidden as u128);
    let frontend = n * frames * (mel + 2 * d) * e;
    // The encoder layers over n × positions tokens: vLLM's fused attention keeps no scores
    // (MMEncoderAttention), so the layer peak is the decoder's rule over the encoder's widths.
    let (layers, _) = crate::serve::forward_peak(&s.encoder, tokens, tp, e);
    EncoderServe { items, tokens_per_item: per, budget, encoder_peak: frontend.max(layers), outputs: n * per as u128 * d * e }
}

/// The report's line on the encoder and the cross-attention blocks, with the concurrency a
/// pool of running requests really reaches (each holding ⌈positions / block⌉ cross blocks).
pub(crate) fn note(enc: &EncoderServe, pool: &KvPool, max_len: u64) -> String {
    let block = pool.block_size.max(1);
    let logged = pool.groups.iter().find(|g| g.kind == "cross").map_or(0, |g| g.blocks_per_request);
    let (own, real) = (max_len.div_ceil(block), enc.tokens_per_item.div_ceil(block));
    let running = pool.num_kv_blocks as f64 / (own + real) as f64;
    format!(
        "Whisper: the encoder budget is {} tokens, profiled with {} dummy clip(s) of 30 s ({} encoder positions each) — vLLM logs this line; the encoder pass peaks at {:.2} GiB, modelled from vLLM's model code, not checked against a logged profile. The decoder's self- and cross-attention layers are two KV groups of one block pool: for the concurrency it logs vLLM counts {logged} cross-attention blocks per request (max_num_batched_tokens encoder tokens, CrossAttentionSpec), where a running request holds {real} ({} positions) beside its {own} self-attention blocks, so about {running:.2} requests of {max_len} tokens fit at once, not {:.2}",
        enc.budget,
        enc.items,
        enc.tokens_per_item,
        enc.encoder_peak as f64 / (1u64 << 30) as f64,
        enc.tokens_per_item,
        pool.max_concurrency,
    )
}
