//! Inference with transformers `generate()`: weights, the KV cache (DynamicCache, growing to the
//! full context), the prefill's peak activations under `torch.no_grad()`, and the last-position
//! logits.

use super::activations::{self as act, Kernel};
use super::{Breakdown, Phase};
use crate::dtype::DType;
use crate::job::{Job, Precision};
use crate::model::{Act, EncoderHead, Model, Role, VisionFamily};
use crate::quant::{self, Plan, Stored};

pub(crate) const WEIGHTS: &str = "weights";
pub(crate) const SCALES: &str = "quantization scales";
pub(crate) const KV: &str = "KV cache";
pub(crate) const PREFILL: &str = "activations (prefill peak)";
pub(crate) const LOGITS: &str = "logits";
pub(crate) const INPUT: &str = "input batch";
pub(crate) const KV_TMP: &str = "KV cache growth (torch.cat)";

/// int4 group size (AWQ/GPTQ default `group_size=128`).
const INT4_GROUP: u128 = 128;

pub(crate) fn phases(m: &Model, job: &Job) -> (Vec<Breakdown>, Kernel, Vec<String>) {
    if let Some(enc) = m.encoder {
        return encoder_forward(m, job, enc.head);
    }
    if let Some(s) = m.ssm {
        return ssm_prefill(m, job, s);
    }
    let (kernel, kernel_note) = act::choose_kernel(m, job);
    let mut notes: Vec<String> = kernel_note.into_iter().collect();
    let e: u128 = if job.precision == Precision::Fp32 { 4 } else { 2 };
    let kv_b = job.kv_dtype.map_or(e, |d| d.bytes() as u128);
    let (batch, ctx) = (job.batch as u128, job.seq as u128);
    let prompt = job.prompt_len.unwrap_or(job.seq) as u128;
    let h = m.hidden as u128;

    let weights = weights(m, job, e);
    notes.extend(weights.notes.iter().cloned());
    let (w, scales) = (weights.bytes.weight, weights.bytes.scales);

    // KV cache per token: keys and values of every layer; sliding-window layers keep the window.
    // MLA in transformers 5 caches the compressed latent: the normed `kv_lora_rank` part in the
    // key slot and the rotary key part in the value slot, one "head" each
    // (modeling_deepseek_v2.py `past_key_values.update(k_nope, k_pe, …)`; read off the live
    // tensors at deepseek-v2-lite's prefill peak: [B, 1, S, 512] and [B, 1, S, 64] per layer).
    let (k_dim, v_dim) = match m.attention.mla {
        Some(mla) => (mla.kv_lora_rank as u128, mla.qk_rope_head_dim as u128),
        None => (m.kv_dim() as u128, m.kv_dim() as u128),
    };
    let per_layer_tok = (k_dim + v_dim) * kv_b;
    // After the prefill a sliding layer's cache is a view (the last window tokens) of the full
    // prompt's keys, which keeps their whole storage alive; the first decode step's torch.cat
    // compacts it to the window (cache_utils.py DynamicSlidingWindowLayer).
    let kv_at = |tokens: u128, windowed: bool| -> u128 {
        let full = (m.layers - m.sliding_layers) as u128 * tokens;
        let win = if windowed { m.sliding_window.map_or(tokens, |w| tokens.min(w as u128)) } else { tokens };
        let sliding = m.sliding_layers as u128 * win;
        batch * per_layer_tok * (full + sliding)
    };
    let kv_detail = format!(
        "batch {batch} × {} layers × (K {k_dim} + V {v_dim}) × {kv_b} B per token{}",
        m.layers,
        if m.sliding_layers > 0 {
            format!("; {} sliding layers keep {} tokens", m.sliding_layers, m.sliding_window.unwrap_or(0))
        } else {
            String::new()
        }
    );

    // Prefill peak (no autograd): the live tensors of one layer's widest moment, either inside
    // attention or inside the MLP (tensors die as soon as Python drops them).
    let t = batch * prompt;
    let (qd, kd) = (m.q_dim() as u128, m.kv_dim() as u128);
    // residual + normed input, q/k/v, the rotary copies of q and k, the attention output.
    let attn_tok = 2 * h * e + e * (2 * qd + 3 * kd + qd);
    // seq² kernels: SDPA math holds the scores and the softmax output (aten sdp math); eager holds
    // the masked scores and the fp32 softmax (modeling_llama.py eager_attention_forward).
    // softmax(dtype=float32) of bf16 scores first converts them (aten SoftMax.cpp: the
    // half-to-float fast path exists only for fp16 on CUDA), so bf16 holds an fp32 copy too.
    let bf16_copy = if job.precision.compute_dtype() == DType::BF16 { 4 } else { 0 };
    let sq_bytes: u128 = match kernel {
        Kernel::Math => 2 * e,
        Kernel::Eager => e + 4 + bf16_copy,
        _ => 0,
    };
    let mut sq = batch * m.heads as u128 * prompt * prompt * sq_bytes;
    if kernel == Kernel::Eager {
        // Eager builds a float [B, 1, P, P] mask per mask type (full, and sliding when present),
        // and repeats K and V to every query head (repeat_kv) for GQA.
        sq += batch * prompt * prompt * e * if m.sliding_layers > 0 { 2 } else { 1 };
        if m.kv_heads != m.heads {
            sq += 2 * t * e * qd;
        }
    }
    // The model keeps `inputs_embeds` referenced for its whole forward (modeling_llama.py
    // LlamaModel.forward), one more tokens × hidden tensor beside the residual stream.
    let held = t * h * e;
    let mut shared_mask = 0;
    if act::sliding_masked(m, job, job.prompt_len.unwrap_or(job.seq)) && !kernel.quadratic() {
        // Explicit sliding mask: a [1, 1, P, P] bool mask alive for the whole forward; in each
        // windowed attention SDPA's logical_not and float copy of it, and K/V repeated for GQA.
        // Llama 4's chunked mask is built per sequence ([B, 1, P, P]; read off llama4-dev-4l's
        // prefill peak).
        shared_mask = prompt * prompt * if m.llama4.is_some() { batch } else { 1 };
        sq += batch * prompt * prompt * (1 + e) + if m.kv_heads != m.heads { 2 * t * e * qd } else { 0 };
    }
    // MLP intermediates alive at once: gated act(gate), up and their product; plain fc1 output and
    // the activation; NewGELU's Python formula keeps its input, 0.5·x and two temporaries.
    let live = match (m.mlp.gated, m.mlp.act) {
        (true, Act::GeluPython) => 5,
        (true, _) => 3,
        (false, Act::GeluPython) => 4,
        (false, _) => 2,
    };
    let mlp_width = match &m.moe {
        Some(moe) if m.moe_layers() > 0 => {
            // Busiest expert assumed to get twice its fair share of the k·tokens routed; the
            // shared expert runs on every token; routed outputs accumulate into a [tokens, hidden] sum.
            let busiest = (2 * moe.top_k as u128 * moe.expert_intermediate as u128 / (moe.experts as u128).max(1))
                .max(moe.expert_intermediate as u128 / 4);
            busiest.max(moe.shared_intermediate as u128) + h
        }
        _ => m.intermediate as u128,
    };
    // transformers 5 runs plain experts with grouped_mm (integrations/moe.py
    // grouped_mm_experts_forward): under no_grad its peak is at `weighted_out[inv_perm]`, where the
    // gathered inputs, the down projections, the weighted rows and their reordered copy — four
    // [tokens·k, hidden] tensors — are alive (earlier, the gate_up output and the gated product
    // beside the gathered inputs), with a shared expert's output computed before them (read off
    // the live tensors at the peak: validation/vlm.py, Qwen3-VL-MoE-dev with intermediate 512 and
    // 256). DeepSeek's routing weights stay fp32 (its softmax), so the weighted rows and their
    // reordered copy are fp32 there (read off deepseek-v2-lite's prefill peak). gpt-oss's experts
    // keep their own measured accounting.
    let routed = match &m.moe {
        // Llama4TextMoe runs every expert over every token: at `up * act(gate)` the scaled
        // repeated input, the gate_up output, the activation and the product — E × (h + 4I) per
        // token — are alive (modeling_llama4.py Llama4TextExperts.forward; read off the live
        // tensors at llama4-dev-4l's prefill peak, validation/llama4.py).
        Some(moe) if m.moe_layers() > 0 && moe.dense_dispatch => moe.experts as u128 * (h + 4 * moe.expert_intermediate as u128) * e,
        Some(moe) if m.moe_layers() > 0 && !moe.biased => {
            let (k, ei) = (moe.top_k as u128, moe.expert_intermediate as u128);
            let weighted = if m.attention.mla.is_some() { 4 } else { e };
            let shared = if moe.shared_intermediate > 0 { h * e } else { 0 };
            k * (2 * h * e + 2 * h * weighted).max((h + 3 * ei) * e) + shared
        }
        _ => 0,
    };
    // During the MLP the model's layer loop still holds the layer's input beside the new residual.
    let mlp_tok = 3 * h * e + (live * mlp_width * e).max(routed);
    let prefill_acts = held + shared_mask + (t * attn_tok + sq).max(t * mlp_tok);
    // generate() computes logits for the last position only, then an fp32 copy for sampling.
    let logits = batch * m.vocab as u128 * (e + 4);
    let input = 2 * batch * ctx * 8; // input_ids + attention_mask

    let add_weights = |bd: &mut Breakdown| {
        bd.add(WEIGHTS, w, weights.detail.clone());
        bd.add(SCALES, scales, weights.scales_detail);
        bd.add(INPUT, input, "input_ids and attention_mask, int64");
    };
    let mut pre = Breakdown::new(Phase::Prefill);
    add_weights(&mut pre);
    pre.add(KV, kv_at(prompt, false), kv_detail.clone());
    pre.add(PREFILL, prefill_acts, format!("{t} prompt tokens through the widest op ({kernel:?} attention or MLP), no autograd"));
    pre.add(LOGITS, logits, "last-position logits and their fp32 copy for sampling");
    let mut dec = Breakdown::new(Phase::Decode);
    add_weights(&mut dec);
    dec.add(KV, kv_at(ctx, ctx > prompt), kv_detail);
    // DynamicCache.update concatenates: one layer's keys (or values) exist twice for a moment.
    dec.add(KV_TMP, batch * ctx * k_dim.max(v_dim) * kv_b, "torch.cat copy of one layer's keys while the cache grows");
    dec.add(LOGITS, logits, "last-position logits");
    if job.kv_dtype == Some(DType::F8) {
        notes.push("fp8 KV cache: 1 byte per element".into());
    }
    (vec![pre, dec], kernel, notes)
}

/// Weight bytes and how they were obtained.
/// An encoder's inference: one forward of `batch × seq` tokens under `torch.no_grad()` (no KV
/// cache, no generation): weights, the widest op of a layer (the residual, q/k/v and attention
/// output, or the MLP's two intermediate-sized tensors: modeling_bert.py BertLayer), then the
/// head's output for every token (masked-LM logits over the vocabulary) or the hidden states.
fn encoder_forward(m: &Model, job: &Job, head: EncoderHead) -> (Vec<Breakdown>, Kernel, Vec<String>) {
    let (kernel, kernel_note) = act::choose_kernel(m, job);
    let e: u128 = if job.precision == Precision::Fp32 { 4 } else { 2 };
    let (batch, seq) = (job.batch as u128, job.seq as u128);
    let t = batch * seq;
    let (h, inter) = (m.hidden as u128, m.intermediate as u128);
    let weights = weights(m, job, e);
    let mut notes: Vec<String> = kernel_note.into_iter().chain(weights.notes.iter().cloned()).collect();
    let sq = if kernel.quadratic() { batch * m.heads as u128 * seq * seq * (e + 4) } else { 0 };
    // Residual in, q, k, v, attention output, its projection: 6 hidden-sized tensors per token;
    // MLP: the layer input and the attention block's output, the dense and activation outputs.
    // Plus the embeddings' output, which BertModel.forward (ViTModel alike) keeps referenced while
    // its encoder runs: one more hidden-sized tensor in both.
    // A padded batch: the (B, 1, S, S) bool mask, alive through the forward (the float bias SDPA
    // makes from it in each layer is freed with the layer under no_grad).
    let mask = if act::padded_mask(job) { batch * seq * seq } else { 0 };
    let vision = m.encoder.and_then(|x| x.vision);
    let modern = m.encoder.is_some_and(|x| x.modern.is_some());
    let (attn, mlp, mask) = if modern {
        // ModernBERT (modeling_modernbert.py): the embeddings' output, the layer input and its
        // normed copy, the fused qkv output, and apply_rotary_pos_emb's fp32 work on k while q's
        // fp32 result waits: `k.float() * cos`, `rotate_half(k.float())` (the copy — none in
        // fp32 —, `-x2` of half width and the cat). The MLP: the embeddings' output, the layer
        // input, the residual after attention and its normed copy, `Wi`'s output (input and
        // gate), the activation and the product. The sliding-window mask lives through the
        // forward: [1, 1, S, S] bool unpadded; padded, it and the global layers' mask are
        // [B, 1, S, S] each (measured op by op: validation/encoders.py).
        let fp32_copies: u128 = if e < 4 { 4 } else { 3 };
        let attn = t * (6 * h * e + fp32_copies * 4 * h + 2 * h);
        let window = act::sliding_masked(m, job, job.seq) || (mask > 0 && m.sliding_layers > 0);
        let masks = match (mask > 0, window) {
            (true, true) => 2 * mask,
            (true, false) => mask,
            (false, true) => seq * seq,
            (false, false) => 0,
        };
        (attn, t * (4 * h + 4 * inter) * e, masks)
    } else {
        // quick_gelu (x * sigmoid(1.702x)) holds x, the sigmoid and the product at once.
        let live = if m.mlp.act == Act::QuickGelu { 3 } else { 2 };
        // A pre-norm vision layer (ViTLayer, CLIPEncoderLayer, SiglipEncoderLayer) feeds its MLP
        // the normed copy, which the layer's local keeps referenced while the MLP runs: one more
        // hidden-sized tensor than BERT's post-norm layer (measured: validation/vlm.py, the
        // Idefics3/SmolVLM prefills peak in a tower layer's MLP at 4 hidden + 2 intermediate, and
        // SiglipVisionModel/Idefics3VisionTransformer alone under the oracle: 11 hidden-sized
        // tensors with one layer, 12 with two or more). DINOv2's MLP takes `norm2(x)` inline,
        // freed when fc1 rebinds it.
        let pre_norm = u128::from(vision.is_some_and(|v| v.family != VisionFamily::Dinov2));
        (t * 7 * h * e + sq, t * ((3 + pre_norm) * h + live * inter) * e, mask)
    };
    let (rows, width) = m.loss_logits(job.batch, job.seq);
    let out = match head {
        // At the logits: the last hidden state and the prediction head's transform output
        // (dense, activation, LayerNorm, each freed by the next; ELECTRA's generator maps to
        // embedding_size: ElectraGeneratorPredictions), then the logits.
        EncoderHead::MaskedLm => t * (h + m.embed_dim as u128) * e + rows * width * e,
        // ElectraDiscriminatorPredictions: dense and activation outputs, then one logit per token.
        EncoderHead::ReplacedTokenDetection => t * 2 * h * e + rows * width * e,
        _ => t * h * e,
    };
    // input_ids + attention_mask, or a vision encoder's pixels (and their copy in the weights' dtype).
    // CLIP's and SigLIP's embeddings cast the pixels inside the patch conv's call (a copy freed
    // before the layers run: measured, validation/vision.py, their peaks hold the fp32 pixels only).
    let input = match vision {
        Some(v) if matches!(v.family, VisionFamily::Clip | VisionFamily::Siglip) => m.input_bytes(job.batch, job.seq),
        Some(_) => m.input_bytes(job.batch, job.seq) * (4 + e) / 4,
        None => 2 * t * 8,
    };
    let mut bd = Breakdown::new(Phase::Prefill);
    bd.add(WEIGHTS, weights.bytes.weight, weights.detail.clone());
    bd.add(SCALES, weights.bytes.scales, weights.scales_detail);
    bd.add(INPUT, input, "input_ids and attention_mask, int64");
    // The embeddings' LayerNorm (BertEmbeddings/ElectraEmbeddings.forward): the word and
    // token-type lookups stay referenced as locals beside their sum and its normalised copy
    // (position rows are per position), `embed_dim` wide: wider than a layer only when the
    // embeddings are (an ELECTRA generator's 768 before 256-wide layers).
    let lookups = 3 + u128::from(m.encoder.is_some_and(|x| x.token_types > 0 && x.vision.is_none()));
    let embeddings = t * lookups * m.embed_dim as u128 * e;
    let core = attn.max(mlp).max(out).max(embeddings);
    let widest = core + mask;
    let what = if core == out {
        "the head's output"
    } else if core == embeddings {
        "the embeddings"
    } else if core == attn {
        "attention"
    } else {
        "the MLP"
    };
    bd.add(PREFILL, widest, format!("{t} tokens through the widest op ({what}; {kernel:?} attention), no autograd"));
    notes.push(format!("encoder inference: one forward of {batch} × {seq} tokens ({}), no KV cache", head.task()));
    (vec![bd], kernel, notes)
}

const SSM_STATE: &str = "conv and SSM state (the cache)";

/// A Mamba model's prefill with the cache (modeling_mamba.py under `torch.no_grad()`): the
/// weights, the cache of every layer — the conv state [B, D, kernel] and the SSM state
/// [B, D, N] in the model dtype (MambaCache) — and the peak at the end of a layer's selective
/// scan, where `discrete_A`, `discrete_B` and `deltaB_u` (fp32 [B, D, L, N] each) are still
/// locals beside, per channel, the in_proj output (2D), the silu and softplus outputs, the scan
/// input's contiguous copy, the per-step outputs and their stack (e each), `x·D` and the sum
/// (fp32), the fp32 input copy in flight (2D), and the fp32 residual and the embedding output
/// per hidden unit. Measured at the peak op by op on mamba-130m (validation/ssm.py).
/// Then the last position's logits.
fn ssm_prefill(m: &Model, job: &Job, s: crate::model::Ssm) -> (Vec<Breakdown>, Kernel, Vec<String>) {
    if let Some(dn) = s.delta_net {
        return delta_net_prefill(m, job, s, dn);
    }
    if let Some(m2) = s.mamba2 {
        return mamba2_prefill(m, job, s, m2);
    }
    let e: u128 = if job.precision == Precision::Fp32 { 4 } else { 2 };
    let (batch, seq) = (job.batch as u128, job.seq as u128);
    let t = batch * seq;
    let (d, n) = (s.d_inner as u128, s.d_state as u128);
    let weights = weights(m, job, e);
    let mut notes = weights.notes.clone();
    // Mamba's own MambaCache keeps both states in the model dtype; a hybrid's DynamicCache
    // (Jamba) keeps the scan's fp32 SSM state as it comes (read off the cache objects under
    // validation/ssm.py's oracle), and its attention layers' prompt K/V.
    let state_b = if m.is_hybrid() { 4 } else { e };
    let (mut bd, mixers, attention) = state_space_cache(m, job, &weights, e, batch * d * (s.d_conv as u128 * e + n * state_b), |mixers| {
        format!("{mixers} mixer layers × batch {batch} × {d} channels × (conv {} × {e} B + state {n} × {state_b} B)", s.d_conv)
    });
    let h = m.hidden as u128;
    let scan = match s.mamba1_heads {
        0 | 1 => t * (12 * d * n + 7 * e * d + 10 * d + 6 * h),
        // The first Zamba scans its heads one after another: at the peak one head's
        // [B, D/heads, L, N] fp32 tensors and its five fp32 and two half [B, D/heads, L] ones, beside
        // in_proj's output (2·D, half), the full-width conv output and dt projection (half), every
        // head's dt/B/C, and five hidden-wide tensors (the residual, the normed input, the
        // embedding output, the clone the shared block concatenates, a layer output); read off
        // the live tensors at zamba-dev-8l's prefill peak (validation/ssm.py).
        heads => {
            let heads = heads as u128;
            let r = s.dt_rank as u128;
            t * (12 * d * n / heads + 24 * d / heads + 4 * e * d + e * heads * (r + 2 * n) + 5 * e * h)
        }
    };
    let logits = batch * m.vocab as u128 * (e + 4);
    bd.add(PREFILL, scan, format!("{t} tokens through one layer's selective scan: discrete A, B and their product, fp32 [B, D, L, N]"));
    bd.add(LOGITS, logits, "the last position's logits and their fp32 copy");
    let kernel = state_space_kernel(m, job, mixers, attention, &mut notes, || {
        format!("Mamba inference: prefill of {batch} × {seq} tokens; the cache is a fixed-size state, not a KV cache")
    });
    (vec![bd], kernel, notes)
}

/// A Mamba-2 prefill with the cache (modeling_mamba2.py under `torch.no_grad()`, the chunked
/// `mamba2_chunk_scan`): the weights, every layer's cache — the conv state [B, conv_dim, kernel]
/// in the model dtype and the final SSM state [B, H, P, N] the scan returns in fp32 — and the
/// peak inside the last layer's scan, where per token the fp32 decay mask, scores and masked
/// scores (3 × H·L), the repeated B and C and the decayed B (3 × H·N), seven fp32 per-channel
/// tensors (x, x·dt, D's residual, the two partial outputs …), the conv input and output, and
/// per sequence every chunk's state (fp32) are alive. Measured at the peak tensor by tensor on
/// mamba2-130m (validation/ssm.py). Then the last position's logits.
fn mamba2_prefill(m: &Model, job: &Job, s: crate::model::Ssm, m2: crate::model::Mamba2) -> (Vec<Breakdown>, Kernel, Vec<String>) {
    let e: u128 = if job.precision == Precision::Fp32 { 4 } else { 2 };
    let (batch, seq) = (job.batch as u128, job.seq as u128);
    let t = batch * seq;
    let (d, n, heads, l, p) = (s.d_inner as u128, s.d_state as u128, m2.heads as u128, m2.chunk as u128, m2.head_dim as u128);
    let conv = d + 2 * m2.groups as u128 * n;
    let weights = weights(m, job, e);
    let mut notes = weights.notes.clone();
    let (mut bd, mixers, attention) =
        state_space_cache(m, job, &weights, e, batch * (4 * heads * p * n + e * conv * s.d_conv as u128), |mixers| {
            format!("{mixers} mixer layers × batch {batch} × (conv {conv} × {} + fp32 state {heads} heads × {p} × {n})", s.d_conv)
        });
    let chunks = act::mamba2_chunks(m2, job.seq);
    let h = m.hidden as u128;
    // Falcon-H1 runs attention first: its output waits beside the mixer's scan for the sum.
    let beside = if s.parallel_attention { e * h } else { 0 };
    // Zamba2 keeps the embedding output and the clone its shared blocks concatenate through the
    // whole forward, and its rotary cos/sin (read at the peak, validation/ssm.py's oracle).
    let (beside, rope) = match s.shared {
        Some(_) => (beside + 2 * e * h, if m.rotary() { 2 * seq * m.head_dim as u128 * e } else { 0 }),
        None => (beside, 0),
    };
    let scan = t * (12 * heads * l + 12 * heads * n + 28 * d + 2 * e * conv + e * d + 2 * e * h + beside)
        + batch * 4 * heads * p * n * (chunks + 1)
        + rope;
    let logits = batch * m.vocab as u128 * (e + 4);
    bd.add(
        PREFILL,
        scan,
        format!("{t} tokens through one layer's chunked scan: fp32 [B, H, chunks, {l}, {l}] scores and per-chunk states"),
    );
    bd.add(LOGITS, logits, "the last position's logits and their fp32 copy");
    let kernel = state_space_kernel(m, job, mixers, attention, &mut notes, || {
        format!("Mamba-2 inference: prefill of {batch} × {seq} tokens in chunks of {l}; the cache is a fixed-size state, not a KV cache")
    });
    (vec![bd], kernel, notes)
}

/// A Gated DeltaNet hybrid's prefill with the cache (Qwen3-Next, Qwen3.5 under
/// `torch.no_grad()`, the reference `torch_chunk_gated_delta_rule`): the weights, every
/// linear-attention layer's cache — the conv state [B, conv_dim, kernel] in the model dtype and
/// the fp32 recurrent state [B, Hv, dk, dv] the chunked rule returns — the gated-attention layers'
/// prompt keys and values, and the peak at the end of the last linear-attention layer's chunked
/// rule, where its fp32 locals sit beside the layer's input and residual: per padded position
/// q, k, β·k, the decayed β·k and k_cumdecay (20·Hv·dk), v, β·v, the solved values and the output
/// being assembled with its half copy (20·Hv·dv), the per-chunk decay, UT system and scores
/// (12·Hv·64); the half conv output and z; Qwen3-Next's fused projection outputs; per sequence
/// three state-sized fp32 tensors. Read off the live tensors at the peak of single layers in
/// bf16; `validation/probe_delta_net.py prefill` holds it within 5% (low) of twelve
/// single-layer shapes, fused and not. Then the last position's logits.
fn delta_net_prefill(m: &Model, job: &Job, s: crate::model::Ssm, dn: crate::model::DeltaNet) -> (Vec<Breakdown>, Kernel, Vec<String>) {
    let e: u128 = if job.precision == Precision::Fp32 { 4 } else { 2 };
    let (batch, seq) = (job.batch as u128, job.seq as u128);
    let t = batch * seq;
    let (hv, hk, dk, dv) = (dn.value_heads as u128, dn.key_heads as u128, dn.key_dim as u128, dn.value_dim as u128);
    let conv = dn.conv_dim() as u128;
    let weights = weights(m, job, e);
    let mut notes = weights.notes.clone();
    let (mut bd, mixers, attention) =
        state_space_cache(m, job, &weights, e, batch * (4 * hv * dk * dv + e * conv * s.d_conv as u128), |mixers| {
            format!("{mixers} linear-attention layers × batch {batch} × (conv {conv} × {} + fp32 state {hv} heads × {dk} × {dv})", s.d_conv)
        });
    let h = m.hidden as u128;
    let c = crate::model::DeltaNet::CHUNK as u128;
    // Qwen3-Next's fused in_proj_qkvz and in_proj_ba outputs stay bound in the mixer's forward.
    let fused = if dn.fused_projections { e * (2 * hk * dk + 2 * hv * dv + 2 * hv) } else { 0 };
    let scan = t * (20 * hv * (dk + dv) + 12 * hv * c + e * conv + e * hv * dv + 16 * hv + 2 * e * h + fused) + batch * 12 * hv * dk * dv;
    let logits = batch * m.vocab as u128 * (e + 4);
    bd.add(
        PREFILL,
        scan,
        format!(
            "{t} tokens through the last linear-attention layer's chunked delta rule: fp32 q, k, v and chunk-by-chunk [{c} × {c}] decays"
        ),
    );
    bd.add(LOGITS, logits, "the last position's logits and their fp32 copy");
    let kernel = state_space_kernel(m, job, mixers, attention, &mut notes, || {
        format!("Gated DeltaNet inference: prefill of {batch} × {seq} tokens in chunks of {c}; the linear-attention layers' cache is a fixed-size state")
    });
    (vec![bd], kernel, notes)
}

/// A state-space prefill up to its scan: the weights, the input, every mixer's state
/// (`per_mixer` bytes) and a hybrid's attention layers' prompt keys and values in the model
/// dtype (its DynamicCache: cache_utils.py LinearAttentionLayer beside DynamicLayer; Falcon-H1's
/// layers have both). Returns the breakdown and the numbers of mixer and attention layers.
fn state_space_cache(
    m: &Model,
    job: &Job,
    weights: &Weights,
    e: u128,
    per_mixer: u128,
    detail: impl Fn(u128) -> String,
) -> (Breakdown, u128, u128) {
    let t = job.batch as u128 * job.seq as u128;
    let mixers = (0..m.layers).filter(|&i| m.is_ssm_layer(i)).count() as u128;
    let attention = (0..m.layers).filter(|&i| m.has_attention(i)).count() as u128;
    let mut bd = Breakdown::new(Phase::Prefill);
    bd.add(WEIGHTS, weights.bytes.weight, weights.detail.clone());
    bd.add(INPUT, 8 * t, "input_ids, int64");
    bd.add(SSM_STATE, mixers * per_mixer, detail(mixers));
    let kv = attention * t * 2 * m.kv_dim() as u128 * e;
    if kv > 0 {
        bd.add(KV, kv, format!("{attention} attention layers × {t} tokens × (K + V) {} × {e} B", m.kv_dim()));
    }
    (bd, mixers, attention)
}

/// A state-space prefill's note and attention kernel: a hybrid's attention layers run the
/// kernel SDPA picks; a pure Mamba has none (`pure` gives its note).
fn state_space_kernel(
    m: &Model,
    job: &Job,
    mixers: u128,
    attention: u128,
    notes: &mut Vec<String>,
    pure: impl FnOnce() -> String,
) -> Kernel {
    if attention == 0 {
        notes.push(pure());
        return Kernel::Eager;
    }
    notes.push(format!(
        "hybrid inference: prefill of {} × {} tokens; {mixers} mixer layers keep a fixed-size state, {attention} attention layers a KV cache",
        job.batch, job.seq
    ));
    act::choose_kernel(m, job).0
}

struct Weights {
    bytes: Stored,
    detail: String,
    scales_detail: &'static str,
    notes: Vec<String>,
}

/// The weights as the checkpoint stores them when it is pre-quantized and `--precision` agrees
/// (or was not given: resolve picks the checkpoint's class); otherwise in `job.precision`.
fn weights(m: &Model, job: &Job, e: u128) -> Weights {
    let params = m.parameters() + super::unmodelled_parameters(m);
    let mut notes = Vec::new();
    if let Some(q) = &m.quantization {
        match Plan::new(q) {
            Ok(plan) if plan.agrees_with(job.precision) => return stored_weights(m, &plan, e),
            Ok(plan) => notes.push(contradiction(&plan.describe(), job.precision)),
            Err(err) => notes.push(format!("{err}; weights estimated in {}", job.precision.name())),
        }
    }
    Weights {
        bytes: precision_weights(m, job.precision),
        detail: format!("{params} parameters in {}", job.precision.name()),
        scales_detail: "per-channel (int8/fp8) or per-128-group (int4) scales and zeros",
        notes,
    }
}

/// What an explicit precision that contradicts the checkpoint means.
fn contradiction(stored: &str, p: Precision) -> String {
    if matches!(p, Precision::Fp8 | Precision::Int8 | Precision::Int4) {
        format!(
            "the checkpoint is {stored}; --precision {} is honoured: weights estimated as {} (re-quantized), not as stored",
            p.name(),
            p.name()
        )
    } else {
        format!("the checkpoint is {stored}; --precision {}: dequantized to {} at load", p.name(), p.name())
    }
}

/// The checkpoint's own storage: safetensors header bytes when a model directory was read,
/// else the scheme's formula (quant.rs).
fn stored_weights(m: &Model, plan: &Plan, e: u128) -> Weights {
    let formula = quant::model_bytes(m, plan, e);
    let mut notes = plan.notes.clone();
    notes.push(format!("weights: {} as stored (quantization_config)", plan.describe()));
    let params = m.parameters() + super::unmodelled_parameters(m);
    if plan.scheme == quant::Scheme::Mxfp4 {
        // transformers quantizers/quantizer_mxfp4.py validate_environment: without these it sets
        // dequantize=True and loads every weight in bf16.
        notes.push(format!(
            "transformers keeps MXFP4 experts only with triton >= 3.4 and the `kernels` package on a GPU of compute capability >= 7.5; otherwise it dequantizes them to bf16 at load ({:.2} GiB of weights): --precision bf16 estimates that",
            (params as f64 * 2.0) / (1u64 << 30) as f64
        ));
    }
    match m.checkpoint_bytes {
        Some(b) => {
            if b as u128 != formula.total() {
                notes.push(format!(
                    "the safetensors headers store {b} bytes of tensors, the {} formula gives {} bytes (extra tensors such as multi-token-prediction layers, or a layout vram does not know); the headers are used",
                    plan.describe(),
                    formula.total()
                ));
            }
            Weights {
                bytes: Stored { weight: b as u128, scales: 0 },
                detail: format!("{params} parameters; {b} bytes as the safetensors headers store them (scales included)"),
                scales_detail: "included in the weights (read from the safetensors headers)",
                notes,
            }
        }
        None => Weights {
            bytes: formula,
            detail: format!("{params} parameters, {} as stored", plan.describe()),
            scales_detail: "the checkpoint's scales, zero points and group indices (quantization_config)",
            notes,
        },
    }
}

/// Weights converted to `p` at load: quantised formats quantise the decoder's linear layers and
/// experts; embeddings, LM head, norms, biases and routers stay in 16-bit.
fn precision_weights(m: &Model, p: Precision) -> Stored {
    let mut s = Stored::default();
    for t in super::inventory(m) {
        let n = t.numel as u128 * t.count as u128;
        let quantised = matches!(t.role, Role::Linear | Role::Experts);
        match p {
            Precision::Fp32 => s.weight += 4 * n,
            Precision::Int8 | Precision::Fp8 if quantised => {
                s.weight += n;
                s.scales += 4 * t.rows as u128 * t.count as u128; // one fp32 scale per output channel
            }
            Precision::Int4 if quantised => {
                s.weight += n / 2;
                // per group of 128: fp16 scale + packed 4-bit zero point (AWQ/GPTQ)
                s.scales += n.div_ceil(INT4_GROUP) * 5 / 2;
            }
            _ => s.weight += 2 * n,
        }
    }
    s
}
