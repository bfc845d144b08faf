//! Activations: what autograd saves for backward, layer by layer, and the transient tensors
//! of the largest op. Each term follows the op sequence of transformers 5.x modeling code on
//! PyTorch 2.x (the file named in each comment) and PyTorch's rule for what an op saves
//! (`tools/autograd/derivatives.yaml`): `mul` saves the other operand when one side needs grad,
//! `linear` saves its input, `softmax`/`tanh`/`relu` their output, `silu`/`gelu`/`pow` their input,
//! casts and adds save nothing. Under autocast (AMP) every linear casts its fp32 input to a
//! fresh half copy (only leaf parameters are cached), and that copy is what it saves.
//!
//! Units: bytes per token (`tok`) and bytes per attention-score element (`sq`, one per
//! batch × head × query × key). The caller multiplies by tokens and by batch·heads·seq².

use super::lora::{self, LoraActs};
use crate::job::{AttentionImpl, Checkpointing, Job};
use crate::model::{Act, Block, DeltaNet, EncoderHead, Model, Norm, QkNorm, Ssm};
use crate::peft::Slot;

/// The attention kernel that really runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// FlashAttention-2 (`sdpa` with fp16/bf16 on sm80+, or `flash_attention_2`).
    Flash,
    /// xformers-style memory-efficient SDPA (fp32 MHA, or different value head dim).
    MemEfficient,
    /// SDPA's math fallback: materialises seq² scores.
    Math,
    /// transformers eager attention: materialises seq² scores.
    Eager,
}

impl Kernel {
    /// Whether it stores batch × heads × seq² tensors.
    pub fn quadratic(self) -> bool {
        matches!(self, Kernel::Math | Kernel::Eager)
    }
}

/// Pick the kernel PyTorch dispatches to on an sm80/sm90 GPU (`sdp_utils.cpp`:
/// flash for fp16/bf16 with head_dim ≤ 256 and no mask; memory-efficient next, which has no
/// GQA; math last), after transformers' own choice (`use_gqa_in_sdpa`, Gemma-2 soft-capping).
pub fn choose_kernel(model: &Model, job: &Job) -> (Kernel, Option<String>) {
    if model.attention.sinks {
        // transformers models/gpt_oss/modeling_gpt_oss.py (GptOssPreTrainedModel): `_supports_sdpa =
        // False`, so the default (sdpa) falls back to eager (modeling_utils.py
        // get_correct_attn_implementation) and an explicit "sdpa" is refused; flash requests are
        // redirected to `_compatible_flash_implementations`, hub kernels that take the sinks.
        return match job.attention {
            AttentionImpl::Eager => (Kernel::Eager, None),
            AttentionImpl::Sdpa => (
                Kernel::Eager,
                Some("gpt-oss attention sinks: transformers has no sdpa path for gpt-oss (_supports_sdpa = False), so it runs eager attention and stores seq² scores; attn_implementation=\"kernels-community/vllm-flash-attn3\" (--attention flash) avoids them".into()),
            ),
            AttentionImpl::Flash => (
                Kernel::Flash,
                Some("gpt-oss attention sinks: transformers replaces flash_attention_2 with the hub kernel kernels-community/vllm-flash-attn3 (needs the `kernels` package and a CUDA GPU), counted here as FlashAttention (q, k, v, output and logsumexp saved; its training backward was not measured)".into()),
            ),
        };
    }
    if model.encoder.is_some_and(|e| e.disentangled.is_some()) {
        // modeling_deberta_v2.py: DisentangledSelfAttention is eager only (no sdpa or flash path).
        let note = (job.attention != AttentionImpl::Eager).then(|| {
            "DeBERTa's disentangled attention runs eagerly (transformers has no sdpa or flash path for it): seq² scores are stored"
                .to_string()
        });
        return (Kernel::Eager, note);
    }
    if model.attention.softcap && job.attention != AttentionImpl::Eager {
        return (Kernel::Eager, Some("Gemma-2 attention soft-capping runs in eager attention (sdpa/flash cannot apply it)".into()));
    }
    let half = job.precision.compute_dtype().bytes() == 2;
    let same_v_dim = model.attention.mla.is_none_or(|m| m.v_head_dim == m.qk_nope_head_dim + m.qk_rope_head_dim);
    match job.attention {
        AttentionImpl::Eager => (Kernel::Eager, None),
        AttentionImpl::Flash => (Kernel::Flash, None),
        AttentionImpl::Sdpa if half && model.head_dim <= 256 && same_v_dim => (Kernel::Flash, None),
        AttentionImpl::Sdpa if model.kv_heads == model.heads => (Kernel::MemEfficient, None),
        AttentionImpl::Sdpa => (
            Kernel::Math,
            Some("fp32 SDPA with grouped-query attention falls back to the math kernel on CUDA (memory-efficient attention has no GQA): seq² scores are stored".into()),
        ),
    }
}

/// Per-layer coefficients, split by where the bytes come from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerCoef {
    /// Norm inputs/outputs and residual copies, bytes per token.
    pub norms: u128,
    /// Attention projections and core, bytes per token.
    pub attention: u128,
    /// Attention seq² tensors, bytes per score element.
    pub attention_sq: u128,
    /// MLP / experts, bytes per token.
    pub mlp: u128,
    /// Per-layer attention masks, bytes per batch × seq² element.
    pub mask_sq: u128,
    /// Cross-attention over an encoder's output, bytes per source token (each decoder layer
    /// keeps its own K and V of the whole source, and under autocast their input copies).
    pub cross: u128,
}

/// Whether SDPA gets an explicit mask on sliding-window layers: transformers materialises one
/// once the sequence reaches the window (masking_utils.py `_ignore_causal_mask_sdpa`:
/// `kv_length >= local_attention_size`), which rules out flash on CUDA.
pub fn sliding_masked(m: &Model, job: &Job, seq: u64) -> bool {
    job.attention == AttentionImpl::Sdpa
        && !m.attention.softcap
        && !m.attention.sinks
        && m.sliding_layers > 0
        && m.sliding_window.is_some_and(|w| seq >= w)
}

/// Whether a padded batch hands SDPA an explicit mask: with `flash_attention_2` transformers
/// unpads the batch instead (varlen kernels, no mask), and eager attention builds its own.
pub fn padded_mask(job: &Job) -> bool {
    job.padded && job.attention == AttentionImpl::Sdpa
}

/// Precision facts the formulas need.
#[derive(Debug, Clone, Copy)]
pub struct Bytes {
    /// Autocast (AMP) active.
    pub amp: bool,
    /// Compute (matmul output) bytes: 2 for fp16/bf16, 4 for fp32.
    pub e: u128,
    /// Residual-stream bytes: fp32 under AMP (fp32 embeddings + bf16 adds promote), else `e`.
    pub r: u128,
    /// Parameter bytes (of the norm weights, under LoRA).
    pub p: u128,
    /// LoRA: the base is frozen (linears save no input, norms no normalised copy) and adapters
    /// save their own input copies.
    pub lora: Option<LoraActs>,
    /// Bytes of a frozen projection's output as the MLP sees it: `e`, except on a bitsandbytes
    /// base, whose `Linear4bit`/`Linear8bitLt` return `.to(input dtype)` (nn/modules.py
    /// Linear4bit.forward) and read the fp32 output of the fp32 norms: fp32.
    pub lin: u128,
}

impl Bytes {
    /// From a job's precision (and, under LoRA, its base dtype and adapters).
    pub fn of(m: &Model, job: &Job) -> Bytes {
        let e = job.precision.compute_dtype().bytes() as u128;
        let amp = job.precision.is_mixed();
        match LoraActs::of(m, job) {
            // The residual stream has the embedding's dtype (the frozen base's; fp32 after
            // prepare_model_for_kbit_training), and so do the norm weights.
            Some(l) => {
                // Post-LN layers end in a LayerNorm, which autocast runs in fp32 (its fp32 list):
                // from the first layer on the residual stream is fp32 whatever the base dtype
                // (modeling_bart.py; measured on bart-base-3l under LoRA).
                let post_ln_amp = amp && m.block == Block::PostLn;
                // CLIP's vision tower runs `pre_layrnorm` on the embeddings: under autocast its
                // fp32 output starts an fp32 residual stream (measured, validation/vision_lora.py).
                let clip_amp = amp && m.encoder.and_then(|e| e.vision).is_some_and(|v| v.family == crate::model::VisionFamily::Clip);
                // A text encoder's embeddings end in a LayerNorm (ModernBERT's pre-LN layers too):
                // under autocast its fp32 output starts an fp32 residual stream (measured,
                // validation/encoders_lora.py on modernbert-base).
                let text_encoder_amp = amp && m.encoder.is_some_and(|e| e.vision.is_none());
                let r = if post_ln_amp || clip_amp || text_encoder_amp { 4 } else { lora::embedding_dtype(job).bytes() as u128 };
                let p = lora::base_dtype(job).bytes() as u128;
                let lin = if job.base.is_some_and(crate::peft::BaseWeights::is_bnb) { r.max(p) } else { e };
                Bytes { amp, e, r, p, lora: Some(l), lin }
            }
            None => {
                let p = job.precision.param_dtype().bytes() as u128;
                // Qwen2-VL's vision tower adds no fp32 embedding to its patches: under autocast its
                // residual stream is the conv's half output (modeling_qwen2_vl.py PatchEmbed).
                let half_residual = m.encoder.and_then(|e| e.vision).is_some_and(|v| v.family.is_qwen());
                Bytes { amp, e, r: if amp && !half_residual { 4 } else { e }, p, lora: None, lin: e }
            }
        }
    }

    /// Saved bytes per token of the linears in `slot` reading one `width`-wide tensor of `src`
    /// bytes (`n` of them in full fine-tuning). Under LoRA a frozen linear saves no input (its
    /// weight gradient is not needed; `linear` saves the input only for it), an adapted one its
    /// adapter's copies.
    fn inputs(&self, slot: Slot, moe_layer: bool, n: u128, src: u128, width: u128) -> u128 {
        match self.lora {
            None => self.linear_inputs(n, src) * width,
            Some(l) => l.saved(l.count(slot, moe_layer).min(n), width),
        }
    }

    /// Saved bytes per element for `n` linears reading one tensor of `src` bytes: under AMP each
    /// makes its own half copy from fp32 (autocast caches only leaf casts); otherwise they share it.
    fn linear_inputs(&self, n: u128, src: u128) -> u128 {
        if n == 0 {
            0
        } else if self.amp && src == 4 {
            2 * n
        } else {
            src
        }
    }

    /// A norm over `width` elements of `input` bytes: (saved bytes per element, output bytes).
    pub(crate) fn norm(&self, norm: Norm, input: u128) -> (u128, u128) {
        let frozen = self.lora.is_some();
        match norm {
            // A frozen weight needs no gradient: `weight * normed` saves the weight, not `normed`;
            // the fp32 input saved by pow and by the rsqrt multiply remains.
            Norm::RmsNorm if frozen => (4, input.max(self.p)),
            Norm::GemmaRmsNorm | Norm::RmsNormFp32Weight if frozen => (4, input),
            // LlamaRMSNorm: x.to(fp32) [saved by pow, mul], normed.to(input_dtype) [saved by weight*];
            // output = weight * normed promotes to the wider of weight and input dtype.
            Norm::RmsNorm => (4 + input, input.max(self.p)),
            // GemmaRMSNorm: x.float() and the fp32 normed tensor are saved; output type_as(x).
            // Olmo2RMSNorm: x.float() and the fp32 normed tensor (saved by the fp32 weight multiply),
            // then (weight * normed).to(input_dtype).
            Norm::GemmaRmsNorm | Norm::RmsNormFp32Weight => (8, input),
            // T5LayerNorm (modeling_t5.py): pow saves an fp32 copy (the input itself when fp32),
            // `hidden * rsqrt` saves the original input when it is not fp32, `weight * hidden`
            // saves the normalised tensor (cast to a half weight's dtype, else fp32).
            Norm::T5LayerNorm => {
                let out = if self.p == 2 { 2 } else { 4 };
                let original = if input == 4 { 0 } else { input };
                (4 + original + if frozen { 0 } else { out }, out)
            }
            // nn.LayerNorm saves its input (cast to fp32 under autocast: layer_norm is on the fp32
            // list) plus fp32 mean and rstd per row (counted separately as 8 bytes per token).
            Norm::LayerNorm { .. } => {
                let b = if self.amp { 4 } else { input };
                (b, b)
            }
        }
    }
}

/// Bytes per state element per token a Mamba layer's backward holds beyond its saved tensors:
/// three fp32 full-size gradients; see `backward_transient`.
const SSM_BACKWARD: u128 = 12;

/// DeBERTa's attention core (modeling_deberta_v2.py `DisentangledSelfAttention.forward` and
/// `disentangled_attention_bias`), per token and per score element, measured op by op
/// (validation/encoders.py, 1- and 2-layer builds): q, k, v made contiguous by
/// `transpose_for_scores` (saved by the bmms), k / scale transposed (saved), the context's
/// contiguous copy (o-proj's input); per relative position the c2p and p2c bmm outputs
/// [B·H, S, 2·span] (saved by `gather`), the repeated position projections [B·H, 2·span, d]
/// (saved by the bmms), the clamped int64 [S, S] indices of both gathers and `~mask`
/// [B, 1, S, S]; per score the softmax output (fp32 under autocast), the dropout mask and the
/// probabilities' half copy for the value bmm (the dropout output itself under fp32).
fn disentangled(m: &Model, job: &Job, b: &Bytes, d: crate::model::Disentangled) -> (u128, u128) {
    let (h, e) = (m.hidden as u128, b.e);
    let (batch, seq) = (job.batch.max(1) as u128, job.seq.max(1) as u128);
    let rel = u128::from(d.c2p) + u128::from(d.p2c);
    let p = 2 * d.span as u128;
    let heads = m.heads as u128;
    // q, k, v contiguous copies, k / scale, the context copy.
    let mut tok = 5 * e * h;
    // Gather sources, per token: heads × 2·span each.
    tok += rel * e * heads * p;
    // Per layer, not per token: the int64 index of each gather ([S, S]), the repeated position
    // projections (B·H × 2·span × d each) and ~mask ([B, 1, S, S] bool), spread over B·S tokens.
    tok += (rel * 8 * seq * seq + rel * batch * e * p * h + batch * seq * seq) / (batch * seq);
    let softmax = if b.amp { 4 } else { e };
    let dropout = u128::from(m.attention_dropout > 0.0);
    let probs = if b.amp {
        2
    } else if dropout == 1 {
        e
    } else {
        0
    };
    (tok, softmax + dropout + probs)
}

/// How many linears read the attention block's input (q/k/v or fused qkv; MLA: q and kv_a).
fn attention_readers(m: &Model) -> u128 {
    if m.attention.mla.is_some() {
        2
    } else if m.attention.fused_qkv {
        1
    } else {
        3
    }
}

/// How many linears read the MLP block's input (gate+up or gate_up or fc1; MoE: router plus
/// shared expert and its gate; routed experts read a gathered copy, counted with the experts).
fn mlp_readers(m: &Model, moe_layer: bool) -> u128 {
    let dense = |gated: bool, fused: bool| if gated && !fused { 2 } else { 1 };
    if moe_layer {
        let moe = m.moe.as_ref().expect("moe layer has moe");
        let shared = if moe.shared_intermediate > 0 { dense(m.mlp.gated, false) } else { 0 };
        1 + shared + u128::from(moe.shared_gate)
    } else {
        dense(m.mlp.gated, m.mlp.fused_gate_up)
    }
}

/// What an activation function saves beyond its output, and its output's bytes, per element.
fn activation(act: Act, b: &Bytes) -> (u128, u128) {
    let e = b.lin;
    match act {
        // silu / native gelu save their input and keep its dtype (not on any autocast list).
        Act::Silu | Act::Gelu => (e, e),
        // relu saves its output, which the next op saves anyway.
        Act::Relu => (0, e),
        // relu2: relu's output (saved by relu), then `torch.square` of it. The square is aten's
        // pow.Tensor_Scalar, on CUDA autocast's fp32 list: under AMP it saves an fp32 copy of
        // relu's output and its own output is fp32, which the next linear casts and saves
        // (measured on an H100: validation/gpu/h100/family_recordings.jsonl, Nemotron-H, equal
        // to the byte to the oracle that emulates it). Without autocast the square saves relu's
        // output itself and returns the compute dtype.
        Act::Relu2 => {
            if b.amp && e != 4 {
                (e + 4, 4)
            } else {
                (e, e)
            }
        }
        // quick_gelu (activations.py QuickGELUActivation): x * sigmoid(1.702 * x) saves x and the
        // sigmoid output (sigmoid saves it too: one tensor).
        Act::QuickGelu => (2 * e, e),
        // NewGELU (activations.py): 0.5*x * (1 + tanh(c*(x + 0.044715*pow(x, 3)))). Autocast on CUDA
        // runs pow in fp32 (autocast_mode.cpp fp32 list), so under AMP it saves an fp32 copy of x,
        // the fp32 tanh output and 1+tanh, and 0.5*x in half; the product comes out fp32.
        // Without autocast: x, tanh, 1+tanh, 0.5*x, all in the compute dtype.
        // An fp32 input (a bitsandbytes projection's output) keeps all four in fp32.
        Act::GeluPython => {
            if b.amp && e != 4 {
                (4 + 4 + 4 + 2, 4)
            } else {
                (4 * e, e)
            }
        }
    }
}

/// Saved bytes per intermediate element of one MLP (its input excluded).
fn mlp_saved_per_elem(m: &Model, b: &Bytes, frozen: bool) -> u128 {
    mlp_saved_undropped(m, b, frozen) + mlp_dropout_extra(m, b)
}

/// Dropout between the activation and the output projection (modeling_bart.py
/// `activation_dropout`, modeling_t5.py T5DenseActDense/T5DenseGatedActDense.dropout): its bool
/// mask, and the projection saves the dropped copy in place of the activation's output — which
/// a ReLU still saves for itself.
fn mlp_dropout_extra(m: &Model, b: &Bytes) -> u128 {
    if !m.mlp_dropout {
        return 0;
    }
    let relu_out = if !m.mlp.gated && m.mlp.act == Act::Relu { activation(Act::Relu, b).1 } else { 0 };
    1 + relu_out
}

fn mlp_saved_undropped(m: &Model, b: &Bytes, frozen: bool) -> u128 {
    let (inner, out) = activation(m.mlp.act, b);
    // Under LoRA the output projection is frozen: it saves no input (an adapted one adds its
    // adapter's copies per token, in `mlp`); relu still saves its own output.
    if m.mlp.gated {
        // act out and up out (saved by the product), the product (saved by down_proj).
        inner + out + b.lin + if frozen { 0 } else { b.linear_inputs(1, out.max(b.e)) }
    } else if frozen {
        inner + if m.mlp.act == Act::Relu { out } else { 0 }
    } else {
        // act out, saved by fc2.
        inner + b.linear_inputs(1, out)
    }
}

/// A Mamba layer's saved tensors (modeling_mamba.py MambaBlock with MambaMixer's PyTorch path,
/// the sequential `mamba_selective_scan` and the reference `causal_conv1d_fn`), bytes per token,
/// e the compute dtype, D = d_inner, N = d_state, R = dt_rank:
/// - norm: the fp32 residual and the normalised copy (RMSNorm), in_proj's input copy;
/// - in_proj's output [2D] (conv input and gate z), the conv's half copy of its fp32-cast input
///   under autocast (2D), the conv output (silu's input) and the silu output, x_proj's output
///   (R + 2N), dt + bias (softplus's input) and softplus's output, the fp32 copies of the scan
///   input and of B (4D + 4N, none in fp32). Under autocast softplus is on CUDA's fp32 list
///   (autocast_mode.cpp): the saved input is the fp32 copy of dt + bias and the output is fp32
///   (an H100 held zamba-dev-8l's training 4 bytes per channel, token and layer above the
///   emulation without it: validation/gpu/h100/family_recordings.jsonl, run 7);
/// - per state element (D·N): `exp(A·dt)` (discrete_A, fp32), `dt·B` (discrete_B, fp32), the
///   state after every step (fp32, saved by the next step's multiply) and its half copy for the
///   step's output matmul (none in fp32);
/// - the fp32 `scan + x·D` (saved by the gate multiply), silu(z), out_proj's input copy.
///
/// Measured op by op on 1- and 2-layer builds (validation/ssm.py): within 0.02% per layer.
fn ssm_layer(m: &Model, job: &Job, s: crate::model::Ssm, i: u64) -> LayerCoef {
    if let Some(dn) = s.delta_net {
        return delta_net_layer(m, job, s, dn, i);
    }
    if let Some(m2) = s.mamba2 {
        return mamba2_layer(m, job, s, m2);
    }
    let b = Bytes::of(m, job);
    let h = m.hidden as u128;
    let (d, n, r) = (s.d_inner as u128, s.d_state as u128, s.dt_rank as u128);
    let e = b.e;
    let half = e < 4;
    let (saved, out) = b.norm(m.norm, 4);
    let norms = saved * h + b.inputs(Slot::AttnIn, false, 1, out, h);
    let conv_cast = if b.amp { 2 * d } else { 0 };
    let fp32_copies = if half { 4 * d + 4 * n } else { 0 };
    // x_proj's output (dt, B, C): one per head in the first Zamba's multi-head mixer.
    let dt = if b.amp { 4 } else { e };
    let per_d = e * (2 * d + d + d) + 2 * dt * d + conv_cast + fp32_copies + e * s.mamba1_heads.max(1) as u128 * (r + 2 * n);
    let state = (if half { 14 } else { 12 }) * d * n;
    // The gate product in fp32 (saved), silu(z), and out_proj's half copy under autocast (in
    // fp32 out_proj saves the product itself).
    let gate = 4 * d + e * d + if b.amp { 2 * d } else { 0 };
    // Per sequence: the conv output's kernel − 1 extra columns; per layer: -exp(A_log) [D, N]
    // fp32 and the zero initial state [B, D, N], spread over the tokens.
    let (batch, seq) = (job.batch.max(1) as u128, job.seq.max(1) as u128);
    let fixed = ((s.d_conv as u128).saturating_sub(1) * d * e * batch + 4 * d * n + e * batch * d * n) / (batch * seq);
    LayerCoef { norms, mlp: per_d + state + gate + fixed, ..LayerCoef::default() }
}

/// Bytes per chunk position and head (H·L per token) a Mamba-2 layer's backward holds beyond
/// its saved tensors: the gradients of the fp32 scores and their half copies (measured on
/// mamba2-130m with a small vocabulary under checkpointing: validation/ssm.py).
const MAMBA2_BACKWARD: u128 = 10;

/// Bytes per chunk position and head the chunked scan's forward holds at once beyond the saved
/// tensors (segment_sum's expansion, masks and cumsum in fp32; measured likewise).
pub(crate) const MAMBA2_FORWARD: u128 = 8;

/// Chunks of Mamba-2's scan for a sequence of `seq` tokens (padded to whole chunks).
pub(crate) fn mamba2_chunks(m2: crate::model::Mamba2, seq: u64) -> u128 {
    seq.div_ceil(m2.chunk.max(1)).max(1) as u128
}

/// A Mamba-2 layer's saved tensors under autocast (modeling_mamba2.py `Mamba2Mixer.forward` in
/// training: the reference PyTorch `mamba_split_conv1d_scan_combined`, the chunked SSD scan),
/// bytes per token, with H heads, P = head_dim, N = state_size, L = chunk_size, d = H·P:
/// - the block's RMSNorm (fp32 input and normalised copy) and in_proj's half input copy;
/// - the depthwise conv's half input and output over x·B·C (conv_dim = d + 2·G·N; the input
///   padded by kernel − 1 columns per sequence);
/// - per chunk position and head, quadratic in L: the fp32 decay-masked scores and two half
///   copies the batched matmuls save (8·H·L);
/// - per state element: the fp32 repeated B/C and four half copies of B, C and their decayed
///   forms (12·H·N);
/// - per channel: x and x·dt in fp32, the gated RMSNorm's five fp32 tensors, three half copies
///   of x for the matmuls and out_proj's input (36·d);
/// - the chunk states in half: every chunk's and the initial zeros (H·P·N per chunk, twice);
/// - dt, its softplus and the per-head decays (about 20 bytes per head).
///
/// Measured tensor by tensor with saved-tensor hooks on a 2-layer mamba2-130m
/// (validation/ssm.py); other precisions are refused.
fn mamba2_layer(m: &Model, job: &Job, s: crate::model::Ssm, m2: crate::model::Mamba2) -> LayerCoef {
    let b = Bytes::of(m, job);
    let h = m.hidden as u128;
    let (d, n, heads, l) = (s.d_inner as u128, s.d_state as u128, m2.heads as u128, m2.chunk as u128);
    let conv = d + 2 * m2.groups as u128 * n;
    let e = b.e;
    let (saved, out) = b.norm(m.norm, 4);
    let norms = saved * h + b.inputs(Slot::AttnIn, false, 1, out, h);
    let (batch, seq) = (job.batch.max(1) as u128, job.seq.max(1) as u128);
    let chunks = mamba2_chunks(m2, job.seq);
    let tokens = batch * seq;
    // Per sequence: the conv's k − 1 padding columns; per chunk: the states.
    let conv_pad = (s.d_conv as u128).saturating_sub(1) * conv * e * batch;
    let states = e * heads * m2.head_dim as u128 * n * batch * (2 * chunks + 1);
    let per_token = 8 * heads * l + 12 * heads * n + 36 * d + 2 * e * conv + 20 * heads;
    LayerCoef { norms, mlp: per_token + (conv_pad + states) / tokens, ..LayerCoef::default() }
}

/// Bytes per token and value-head key (value) channel a Gated DeltaNet layer's backward holds
/// beyond its saved tensors and the incoming gradient: the gradients of the chunked fp32 q, k,
/// β·k and decayed copies, and of the solved values. Its peak moves between ops with the head
/// sizes, so a linear fit is rough: least squares over 14 single-layer shapes
/// (`validation/probe_delta_net.py transients`), off by up to 82% on one shape, on a term under
/// 1% of a released model's peak (one layer's transient beside every layer's saved tensors).
pub(crate) const DELTA_NET_BACKWARD_K: u128 = 14;
/// See [`DELTA_NET_BACKWARD_K`].
pub(crate) const DELTA_NET_BACKWARD_V: u128 = 5;
/// Bytes per token and value-head key channel held inside the forward's chunked scan beyond the
/// saved tensors (the fp32 output being assembled, the solved values and decayed keys as locals);
/// fitted like [`DELTA_NET_BACKWARD_K`] (off by up to 69% on one shape).
pub(crate) const DELTA_NET_FORWARD_K: u128 = 16;
/// See [`DELTA_NET_FORWARD_K`]: per value channel.
pub(crate) const DELTA_NET_FORWARD_V: u128 = 8;

/// Bytes per token inside the last linear-attention layer's forward beyond what is saved: the
/// chunked rule's locals ([`DELTA_NET_FORWARD_K`], [`DELTA_NET_FORWARD_V`]) and the layer's half
/// input and output (2·hidden).
pub(crate) fn delta_net_forward_transient(m: &Model, dn: DeltaNet) -> u128 {
    (DELTA_NET_FORWARD_K * dn.key_dim as u128 + DELTA_NET_FORWARD_V * dn.value_dim as u128) * dn.value_heads as u128 + 2 * m.hidden as u128
}

/// What the model's layer 0 keeps under LoRA: it reads the frozen embedding, so only what an
/// adapter makes trainable needs a gradient there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstLayer {
    /// Not layer 0, not LoRA, or β and the decay adapted too: as any layer.
    AsAny,
    /// None of the mixer's input projections adapted: the mixer saves only an adapted out_proj's
    /// input; without one the residual still needs no gradient after the mixer.
    Inert { out_adapted: bool },
    /// q, k, v adapted but not β and the decay (`in_proj_a`/`in_proj_b`/`in_proj_ba`).
    NoDecay,
}

/// How vram's layer `i` of a Gated DeltaNet hybrid trains if it is the model's layer 0.
fn first_layer(m: &Model, job: &Job, i: u64) -> FirstLayer {
    let Some(l) = LoraActs::of(m, job).filter(|_| m.is_model_first_layer(i)) else { return FirstLayer::AsAny };
    let moe = m.is_moe_layer(i);
    if l.count(Slot::MixerIn, moe) == 0 {
        FirstLayer::Inert { out_adapted: l.count(Slot::MixerOut, moe) > 0 }
    } else if !l.decay_adapted {
        FirstLayer::NoDecay
    } else {
        FirstLayer::AsAny
    }
}

/// Positions a Gated DeltaNet scan runs over: the sequence padded to whole chunks of 64
/// (`torch_chunk_gated_delta_rule` pads q, k, v, β and the decay before chunking).
pub(crate) fn delta_net_positions(seq: u64) -> u128 {
    (seq.div_ceil(DeltaNet::CHUNK).max(1) * DeltaNet::CHUNK) as u128
}

/// A Gated DeltaNet layer's saved tensors under autocast (modeling_qwen3_next.py
/// `Qwen3NextGatedDeltaNet.forward` with the reference `torch_chunk_gated_delta_rule`), with
/// Hk key and Hv value heads of dk and dv, conv = 2·Hk·dk + Hv·dv, C = 64, n chunks, in bytes:
/// - the zero-centred RMSNorm (fp32 input and normalised copy) and a half copy of its output
///   per input projection (two fused, four in Qwen3.5);
/// - per token: the conv's half input and output (4·conv), q and k in fp32 after the repeat to
///   the value heads (8·Hv·dk), the gated RMSNorm's fp32 tensors and half copies and
///   `out_proj`'s input (20·Hv·dv), and per value head the L2 norms' rsqrts, β, the decay and
///   its softplus (22·Hv);
/// - per padded position: v, β·v, β·k, the decayed q and k and their half matmul copies
///   (30·Hv·dk + 12·Hv·dv), the intra-chunk decay, UT system and scores
///   (14·Hv·C), per-head vectors (16·Hv);
/// - per sequence and chunk: the recurrent state in fp32 and two half copies
///   (8·Hv·dk·dv), less the last chunk's update, which the discarded final state frees
///   (4·Hv·dk·dv + 2·Hv·C·(dk + dv)), and the conv's k − 1 padding columns.
///
/// Measured tensor by tensor with saved-tensor hooks on single layers of five shapes (heads,
/// head sizes, batch, and a sequence that is not a multiple of 64): exact
/// (validation/probe_delta_net.py). Other precisions are refused.
fn delta_net_layer(m: &Model, job: &Job, s: crate::model::Ssm, dn: DeltaNet, i: u64) -> LayerCoef {
    let b = Bytes::of(m, job);
    let moe_layer = m.is_moe_layer(i);
    let h = m.hidden as u128;
    let (hv, dk, dv, c) = (dn.value_heads as u128, dn.key_dim as u128, dn.value_dim as u128, DeltaNet::CHUNK as u128);
    let conv = dn.conv_dim() as u128;
    let (saved, out) = b.norm(m.norm, b.r);
    let readers = if dn.fused_projections { 2 } else { 4 };
    let norms = saved * h + b.inputs(Slot::MixerIn, moe_layer, readers, out, h);
    let (batch, seq) = (job.batch.max(1) as u128, job.seq.max(1) as u128);
    let padded = delta_net_positions(job.seq);
    let chunks = padded / c;
    let mut per_token = 4 * conv + 8 * hv * dk + 18 * hv * dv + 22 * hv + b.inputs(Slot::MixerOut, moe_layer, 1, 2, hv * dv);
    if b.lora.is_some() {
        // Frozen (LoRA): the gated RMSNorm's weight and the decay's A_log and dt_bias need no
        // gradient, so the half normed copy and an fp32 per-head tensor are not saved (probed
        // with the mixer frozen: validation/probe_delta_net.py).
        per_token = per_token.saturating_sub(2 * hv * dv + 4 * hv);
        if job.base.is_some_and(crate::peft::BaseWeights::is_bnb) {
            // QLoRA: peft's kbit preparation leaves the gated norm's weight fp32, so its product
            // with the normed values, saved by the gate multiply, is fp32 (measured:
            // validation/ssm_lora.py).
            per_token += 2 * hv * dv;
        }
    }
    let per_position = 30 * hv * dk + 12 * hv * dv + 14 * hv * c + 16 * hv;
    let mut per_sequence = (2 * conv * (s.d_conv as u128).saturating_sub(1) + (8 * chunks).saturating_sub(4) * hv * dk * dv)
        .saturating_sub(6 * hv * c * dk + 2 * hv * c * dv);
    if job.training_cache(m.use_cache) {
        // With the training-time DynamicCache (use_cache, no checkpointing) the final state is
        // returned: the last chunk's update stays in the graph, the cache keeps its own fp32 copy
        // of the state and the conv state in the compute dtype (measured likewise).
        per_sequence += 8 * hv * dk * dv + 2 * hv * c * (dk + dv) + b.e * conv * s.d_conv as u128;
    }
    let mixer = per_token + (batch * (padded * per_position + per_sequence)) / (batch * seq);
    match first_layer(m, job, i) {
        // Under LoRA the model's layer 0 reads the frozen embedding: with none of its mixer's
        // input projections adapted nothing in the mixer needs a gradient, so it saves nothing
        // but an adapted out_proj's input (measured: validation/ssm_lora.py, targets without
        // in_proj_*).
        FirstLayer::Inert { .. } => LayerCoef { mlp: b.inputs(Slot::MixerOut, moe_layer, 1, 2, hv * dv), ..LayerCoef::default() },
        // q, k, v adapted but not β and the decay: what the chunked rule saves only for their
        // gradients is not saved — v and the fp32 keys and queries the decay and β scale, the
        // half score products the decay multiplies, and the state each chunk's decay multiplies
        // (validation/probe_delta_net.py first: within 4% on three shapes).
        FirstLayer::NoDecay => {
            let spared = 4 * hv * dv + 12 * hv * dk + 4 * hv * c + 4 * hv * dk * dv / c;
            LayerCoef { norms, mlp: mixer.saturating_sub(spared), ..LayerCoef::default() }
        }
        FirstLayer::AsAny => LayerCoef { norms, mlp: mixer, ..LayerCoef::default() },
    }
}

/// Activation coefficients of decoder layer `i` with nothing recomputed.
pub fn layer(m: &Model, job: &Job, kernel: Kernel, i: u64) -> LayerCoef {
    if let (true, Some(s)) = (m.is_ssm_layer(i), m.ssm) {
        if s.parallel_attention {
            // Falcon-H1: a Llama layer, plus the mixer beside its attention reading the same
            // normed input (scaled by ssm_in_multiplier: in_proj saves its own copy).
            let mut c = attention_layer(m, job, kernel, i);
            let b = Bytes::of(m, job);
            let (_, out) = b.norm(m.norm, b.r);
            c.norms += b.inputs(Slot::AttnIn, false, 1, out, m.hidden as u128);
            c.mlp += ssm_layer(m, job, s, i).mlp;
            // FalconH1Mixer differs from Bamba's: the projections times the fp32 µP vector are
            // fp32 where Bamba's are half (2 more bytes per projected channel), and without
            // `mamba_rms_norm` the scan output is only multiplied by silu(gate), which saves 8
            // bytes per channel less than the gated RMSNorm (probed one size at a time on
            // falcon-h1-dev-4l: validation/ssm.py).
            if let Some(m2) = s.mamba2 {
                let d = s.d_inner as u128;
                let proj = 2 * d + 2 * m2.groups as u128 * s.d_state as u128 + m2.heads as u128;
                c.mlp += 2 * proj;
                if !m2.gated_norm {
                    c.mlp = c.mlp.saturating_sub(8 * d);
                }
            }
            return c;
        }
        let mut c = ssm_layer(m, job, s, i);
        // Layer 0's residual needs no gradient until an adapter writes into it.
        let residual_inert = first_layer(m, job, i) == FirstLayer::Inert { out_adapted: false };
        if s.attention_layers > 0 && s.mlp_layers == 0 && s.shared.is_none() {
            // A hybrid's mixer layer (BambaDecoderLayer) ends with pre_ff_layernorm and the MLP,
            // as its attention layers do.
            // Granite-4.0-H's MoE variants: the MoE block with its shared MLP, as on an
            // attention layer.
            let b = Bytes::of(m, job);
            let h = m.hidden as u128;
            let moe_layer = m.is_moe_layer(i);
            let (saved, out) = b.norm(m.norm, b.r);
            // A norm whose input needs no gradient saves nothing.
            let norm_saved = if residual_inert { 0 } else { saved * h };
            c.norms += norm_saved + b.inputs(Slot::MlpIn, moe_layer, mlp_readers(m, moe_layer), out, h);
            c.mlp += mlp(m, &b, moe_layer);
        }
        return c;
    }
    if let Some(sb) = m.shared_block() {
        return shared_block(m, job, kernel, sb);
    }
    if m.ssm.is_some_and(|s| s.mlp_layers > 0) {
        // Nemotron-H: one block per layer (NemotronHBlock): its norm, then the MLP or the
        // attention alone.
        let b = Bytes::of(m, job);
        let h = m.hidden as u128;
        let (saved, out) = b.norm(m.norm, b.r);
        let mlp_in = saved * h + b.inputs(Slot::MlpIn, false, mlp_readers(m, false), out, h);
        if m.is_mlp_layer(i) {
            return LayerCoef { norms: mlp_in, mlp: mlp(m, &b, false), ..LayerCoef::default() };
        }
        let mut c = attention_layer(m, job, kernel, i);
        c.norms = c.norms.saturating_sub(mlp_in);
        c.mlp = 0;
        return c;
    }
    attention_layer(m, job, kernel, i)
}

/// One invocation of Zamba2's shared block (modeling_zamba2.py `Zamba2AttentionDecoderLayer`
/// and `Zamba2HybridLayer.linear`), bytes per token, h = hidden, a = 2·h:
/// - `input_layernorm` over the concatenation of the residual stream and the embedding output
///   (the residual dtype, a wide), then q, k and v each reading its output (and, with attention
///   adapters, each adapter's first linear too; their rank-r outputs saved by the second);
/// - the attention core over head_dim = a / heads, as any attention layer's;
/// - `pre_ff_layernorm` over o_proj's half output (no residual add before it), read by
///   gate_up_proj and its adapter (whose rank-r output the second linear saves);
/// - the gated MLP's saved tensors (gate_up fused, as Phi-3's);
/// - `linear`'s half input (down_proj's output).
fn shared_block(m: &Model, job: &Job, kernel: Kernel, sb: crate::model::SharedBlock) -> LayerCoef {
    let b = Bytes::of(m, job);
    let h = m.hidden as u128;
    let a = 2 * h;
    let r = sb.adapter_rank as u128;
    let mut c = LayerCoef::default();
    let (saved, out) = b.norm(m.norm, b.r);
    let attention_adapters = if sb.attention_adapters { 3 } else { 0 };
    c.norms += saved * a + b.inputs(Slot::AttnIn, false, 3 + attention_adapters, out, a);
    c.attention += attention_adapters * b.e * r;
    let masked = kernel != Kernel::Eager && padded_mask(job);
    let (tok, sq) = attention(m, job, &b, if masked { Kernel::MemEfficient } else { kernel }, masked, false);
    c.attention += tok;
    c.attention_sq += sq;
    if masked {
        c.mask_sq += b.e;
    }
    let (saved, out) = b.norm(m.norm, b.e);
    c.norms += saved * h + b.inputs(Slot::MlpIn, false, 2, out, h);
    c.mlp += mlp(m, &b, false) + b.e * r + b.e * h;
    c
}

/// An attention layer's coefficients: norms, attention and the feed-forward block.
fn attention_layer(m: &Model, job: &Job, kernel: Kernel, i: u64) -> LayerCoef {
    let b = Bytes::of(m, job);
    let h = m.hidden as u128;
    let moe_layer = m.is_moe_layer(i);
    let mut c = LayerCoef::default();
    let ln_stats = if matches!(m.norm, Norm::LayerNorm { .. }) { 8 } else { 0 };

    // --- Attention input -------------------------------------------------------------------
    match m.block {
        // OLMo-2 feeds the raw residual to q/k/v (modeling_olmo2.py); a post-LN encoder the
        // previous LayerNorm's output, which is the residual stream (modeling_bert.py BertLayer).
        Block::PostNorm | Block::PostLn => c.norms += b.inputs(Slot::AttnIn, moe_layer, attention_readers(m), b.r, h),
        _ => {
            let (saved, out) = b.norm(m.norm, b.r);
            c.norms += saved * h + ln_stats;
            c.norms += b.inputs(Slot::AttnIn, moe_layer, attention_readers(m), out, h);
            if m.block == Block::Parallel {
                c.norms += match b.lora {
                    // Parallel blocks: one tensor read by attention and MLP alike.
                    None => {
                        b.linear_inputs(attention_readers(m) + mlp_readers(m, moe_layer), out) * h
                            - b.linear_inputs(attention_readers(m), out) * h
                    }
                    Some(_) => b.inputs(Slot::MlpIn, moe_layer, mlp_readers(m, moe_layer), out, h),
                };
            }
        }
    }

    // --- Attention core ------------------------------------------------------------------------
    // Sliding layers past the window: SDPA with an explicit bool mask runs memory-efficient
    // attention on K/V repeated for GQA (transformers' use_gqa_in_sdpa needs no mask), after
    // turning the mask into a float bias it keeps for backward (convert_boolean_attn_mask).
    // Eager attention (Gemma-2's soft-capping forces it) adds the mask to its scores instead: it
    // stays eager, saving its seq² tensors, and keeps no bias per layer (measured:
    // validation/vlm.py, PaliGemma 2's token_type_ids mask; a masked eager layer had been counted
    // as memory-efficient attention, −18 to −27%).
    let masked = kernel != Kernel::Eager && (padded_mask(job) || (i < m.sliding_layers && sliding_masked(m, job, job.seq)));
    let (a, a_sq) = match m.encoder.and_then(|e| e.disentangled) {
        Some(d) => disentangled(m, job, &b, d),
        None => attention(m, job, &b, if masked { Kernel::MemEfficient } else { kernel }, masked, moe_layer),
    };
    c.attention += a;
    c.attention_sq += a_sq;
    if masked {
        c.mask_sq += b.e;
    }
    // Llama 4's rotary layers (counted first: only their number matters): Llama4TextL2Norm reads q and k in fp32 (`x.float()`, saved by the square and the
    // product) with its per-head rsqrt; the complex rotary product saves only the shared
    // frequencies (measured: validation/llama4.py, live storages after the forward).
    if m.llama4.as_ref().is_some_and(|l| l.qk_l2 && i < l.rotary_layers) {
        c.attention += 4 * (m.q_dim() + m.kv_dim()) as u128 + 4 * (m.heads + m.kv_heads) as u128;
    }
    // Residual dropout after the attention output (GPT-2 resid_dropout, BertSelfOutput): a bool
    // mask; DistilBERT's TransformerBlock has none (modeling_distilbert.py).
    if m.hidden_dropout > 0.0 && m.encoder.is_none_or(|e| e.attention_output_dropout) {
        c.attention += h;
    }
    // DINOv2 layer scale (modeling_dinov2.py Dinov2LayerScale): `x * lambda1` saves x, the
    // attention block's output, for lambda's gradient (and again after the MLP).
    // A frozen lambda (LoRA) needs no gradient: the product then saves lambda, not x.
    let layer_scale = m.encoder.and_then(|e| e.vision).is_some_and(|v| v.family == crate::model::VisionFamily::Dinov2);
    if layer_scale && b.lora.is_none() {
        c.attention += b.e * h;
        c.mlp += b.e * h;
    }
    if matches!(m.block, Block::Sandwich | Block::PostNorm) {
        // Post-attention norm on the attention output (compute dtype).
        let (saved, _) = b.norm(m.norm, b.e);
        c.norms += saved * h;
    }
    if m.block == Block::PostLn {
        // BertSelfOutput: LayerNorm(dropout(dense(x)) + input): the sum has the residual dtype.
        let (saved, _) = b.norm(m.norm, b.r);
        c.norms += saved * h + ln_stats;
    }

    if m.cross_attention {
        cross_attention(m, &b, kernel, &mut c, ln_stats);
    }

    // --- MLP input -----------------------------------------------------------------------------
    match m.block {
        Block::Parallel => {} // shares the attention norm's output, counted above
        Block::PostNorm => c.norms += b.inputs(Slot::MlpIn, moe_layer, mlp_readers(m, moe_layer), b.r, h),
        // BertIntermediate reads the attention block's LayerNorm output.
        Block::PostLn => c.norms += b.inputs(Slot::MlpIn, moe_layer, mlp_readers(m, moe_layer), b.norm(m.norm, b.r).1, h),
        Block::ParallelTwoNorms | Block::Sequential | Block::Sandwich => {
            let (mut saved, out) = b.norm(m.norm, b.r);
            if m.block == Block::ParallelTwoNorms && b.r == 4 {
                // Both norms read the same layer input; in fp32 it is saved once.
                saved -= if matches!(m.norm, Norm::LayerNorm { .. }) { saved } else { 4 };
            }
            c.norms += saved * h + ln_stats;
            c.norms += b.inputs(Slot::MlpIn, moe_layer, mlp_readers(m, moe_layer), out, h);
        }
    }

    // --- MLP ---------------------------------------------------------------------------------------
    c.mlp += mlp(m, &b, moe_layer);
    if let Some(l) = b.lora {
        c.attention += l.dora_tokens(moe_layer, b.e);
    }
    if m.hidden_dropout > 0.0 {
        c.mlp += h;
    }
    if matches!(m.block, Block::Sandwich | Block::PostNorm) {
        let (saved, _) = b.norm(m.norm, b.e);
        c.norms += saved * h;
    }
    if m.block == Block::PostLn {
        // BertOutput: LayerNorm(dropout(dense(x)) + input).
        let (saved, _) = b.norm(m.norm, b.r);
        c.norms += saved * h + ln_stats;
    }
    c
}

/// A decoder layer's cross-attention block: per target token what feeds q_proj — pre-LN
/// (modeling_whisper.py WhisperDecoderLayer.encoder_attn, modeling_t5.py T5LayerCrossAttention):
/// its own norm, then q_proj's input copy; post-LN (modeling_bart.py BartDecoderLayer): q_proj
/// reads the previous LayerNorm's output and `encoder_attn_layer_norm` follows the residual
/// add — and what the kernel saves for q, the output and logsumexp; per source token k_proj
/// and v_proj each cast the (fp32 under autocast) encoder output to half, a copy each saves,
/// and the kernel saves their outputs.
///
/// Under LoRA the frozen projections save no input; adapted ones their adapter's copies
/// (`Bytes::inputs`), k/v's per source token.
fn cross_attention(m: &Model, b: &Bytes, kernel: Kernel, c: &mut LayerCoef, ln_stats: u128) {
    let h = m.hidden as u128;
    let (saved, out) = b.norm(m.norm, b.r);
    c.norms += match m.block {
        Block::PostLn => b.inputs(Slot::CrossIn, false, 1, b.r, h) + saved * h + ln_stats,
        _ => saved * h + ln_stats + b.inputs(Slot::CrossIn, false, 1, out, h),
    };
    let q_saved = if b.amp { 2 } else { out };
    c.attention += q_saved * m.q_dim() as u128 + b.e * m.q_dim() as u128 + 4 * m.heads as u128;
    if kernel == Kernel::Flash && m.attention.head_major_q && b.lora.is_none() {
        // No mask reaches cross-attention, so it runs the layer's unmasked kernel; flash's output
        // in q's head-major layout makes out_proj save a contiguous copy (`Attention::head_major_q`).
        c.attention += b.e * m.q_dim() as u128;
    }
    if m.hidden_dropout > 0.0 {
        c.attention += h;
    }
    if let Some(l) = b.lora {
        c.attention += l.saved(l.count(Slot::CrossOut, false), m.q_dim() as u128);
    }
    // The encoder output reaches k_proj and v_proj in the residual dtype (fp32 under autocast).
    let copies = match b.lora {
        None if b.amp && b.r == 4 => b.linear_inputs(2, b.r) * h,
        None => 0,
        Some(_) => b.inputs(Slot::CrossMemory, false, 2, b.r, h),
    };
    c.cross += copies + 2 * b.e * m.kv_dim() as u128;
}

/// Attention projections' outputs and the kernel's saved tensors, per token and per score.
fn attention(m: &Model, job: &Job, b: &Bytes, kernel: Kernel, masked: bool, moe_layer: bool) -> (u128, u128) {
    let e = b.e;
    let heads = m.heads as u128;
    let mut tok: u128 = 0;
    let mut sq: u128 = 0;
    let (qd, kd, vd): (u128, u128, u128);
    // Bytes of q and k as the kernel receives them, before autocast's cast.
    let qk_bytes;
    if let Some(mla) = m.attention.mla {
        // DeepSeek MLA (modeling_deepseek_v3.py): low-rank q (q_a -> norm -> q_b), kv_a -> norm -> kv_b,
        // q/k built by torch.cat of the no-rope and rope parts; values are a view of kv_b's output.
        let qk = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) as u128;
        qd = heads * qk;
        kd = qd;
        vd = heads * mla.v_head_dim as u128;
        if let Some(r) = mla.q_lora_rank {
            let (saved, out) = b.norm(m.norm, e);
            tok += saved * r as u128 + b.inputs(Slot::AttnInner, moe_layer, 1, out, r as u128);
        }
        let kvr = mla.kv_lora_rank as u128;
        let (saved, out) = b.norm(m.norm, e);
        tok += saved * kvr + b.inputs(Slot::AttnInner, moe_layer, 1, out, kvr);
        // kv_b output (k_nope and v) stays alive: v is a view of it.
        tok += e * heads * (mla.qk_nope_head_dim as u128 + mla.v_head_dim as u128);
        qk_bytes = b.r.max(e); // cat with the rotary part (residual dtype) promotes
    } else {
        qd = m.q_dim() as u128;
        kd = m.kv_dim() as u128;
        vd = kd;
        let mut qk_in = e;
        match m.attention.qk_norm {
            QkNorm::None => {}
            QkNorm::PerHead | QkNorm::Full => {
                // RMSNorm on q and k (modeling_qwen3.py q_norm/k_norm; Gemma-3 uses its own RMSNorm).
                let qk_norm = if matches!(m.norm, Norm::GemmaRmsNorm | Norm::RmsNormFp32Weight) { m.norm } else { Norm::RmsNorm };
                let (saved, out) = b.norm(qk_norm, e);
                tok += saved * (qd + kd);
                qk_in = out;
            }
            QkNorm::LayerNormPerHead => {
                let (saved, out) = b.norm(Norm::LayerNorm { bias: true }, e);
                tok += saved * (qd + kd);
                qk_in = out;
            }
        }
        let rotary = m.rotary();
        // apply_rotary_pos_emb: q*cos + rotate_half(q)*sin, cos in the residual dtype -> promotes.
        qk_bytes = if rotary { qk_in.max(b.r) } else { qk_in };
        let cache = job.training_cache(m.use_cache);
        if m.attention.fused_qkv {
            match (rotary, cache) {
                // v stays a view of the fused qkv output, which therefore stays alive whole.
                (true, false) => tok += e * (qd + 2 * kd) - e * vd,
                // q (no rotary) is a view of the fused output; the cache's torch.cat copies of k and v
                // are what attention saves, on top of it (DynamicLayer.update, cache_utils.py).
                (false, true) => tok += e * 2 * kd,
                // rotary with cache: q, k are new tensors and v a cat copy: the fused output is freed.
                _ => {}
            }
        }
    }
    // The value projection's output, unless it is already counted (MLA: part of kv_b's output).
    let v_own = if m.attention.mla.is_some() { 0 } else { e * vd };
    // q and k as the kernel saves them: cast to half by autocast (a copy) when they are fp32.
    let q_saved = if b.amp { 2 } else { qk_bytes };
    let gqa = m.kv_heads != m.heads;
    // K/V repeated to every query head: eager and math always, other kernels when masked.
    let groups_expand = |d: u128| if (kernel.quadratic() || masked) && gqa { heads * m.head_dim as u128 } else { d };
    match kernel {
        Kernel::Flash | Kernel::MemEfficient => {
            // _scaled_dot_product_{flash,efficient}_attention saves q, k, v, out, logsumexp (fp32 per head).
            let v_saved = if masked && gqa { e * groups_expand(vd) } else { v_own };
            tok += q_saved * (qd + groups_expand(kd)) + v_saved + e * heads * per_head(vd, m.kv_heads) + 4 * heads;
            if masked && gqa && job.training_cache(m.use_cache) {
                // The cache's copies of the un-repeated k and v are no longer what attention saves.
                tok += (qk_bytes + e) * kd;
            }
            if kernel == Kernel::Flash && m.attention.head_major_q && b.lora.is_none() {
                // Flash's output in q's head-major layout: o_proj saves its contiguous copy.
                tok += e * heads * per_head(vd, m.kv_heads);
            }
        }
        Kernel::Math => {
            // aten _scaled_dot_product_attention_math: q*sqrt(scale), k^T*sqrt(scale) (GQA repeated),
            // v (repeated for GQA), softmax output; output copied contiguous for o_proj.
            let v_saved = if m.kv_heads != m.heads { e * groups_expand(vd) } else { v_own };
            tok += e * qd + e * groups_expand(kd) + v_saved + e * heads * per_head(vd, m.kv_heads);
            sq += e;
            if m.attention_dropout > 0.0 {
                sq += 1 + e; // bool mask + dropped probabilities saved by the matmul
            }
        }
        Kernel::Eager => {
            // eager_attention_forward (modeling_llama.py): repeat_kv, q@k^T, softmax(fp32), cast, @v.
            let v_saved = if m.kv_heads != m.heads { e * groups_expand(vd) } else { v_own };
            tok += q_saved * qd + q_saved * groups_expand(kd) + v_saved + e * heads * per_head(vd, m.kv_heads);
            if m.attention.sinks {
                // modeling_gpt_oss.py eager_attention_forward: torch.cat of the scores with the sinks
                // promotes to the sinks' dtype (fp32 master weights under AMP), minus the row max
                // (max.dim saves int64 indices per row), softmax in that dtype (saves its output),
                // the sink column dropped by a view, then cast to v's dtype (a copy only when it
                // differs) and saved by the @v matmul.
                tok += 8 * heads;
                let c = sinks_dtype(b);
                sq += c + if c != e { e } else { 0 };
            } else {
                if m.attention.softcap {
                    sq += e; // tanh output (Gemma-2 soft-capping)
                }
                sq += 4; // softmax(dtype=float32) output
                if e == 2 {
                    sq += 2; // half copy of the probabilities, saved by the @v matmul
                }
            }
            if m.attention_dropout > 0.0 {
                sq += 1 + if e == 4 { 4 } else { 0 };
            }
        }
    }
    if let Some(l) = b.lora {
        // The attention output: seq² kernels hand o_proj a contiguous copy that only o_proj's
        // weight gradient needed; flash saves its output itself.
        let out_w = heads * per_head(vd, m.kv_heads);
        if kernel.quadratic() {
            tok -= e * out_w;
        }
        tok += l.saved(l.count(Slot::AttnOut, moe_layer), out_w);
    }
    (tok, sq)
}

/// Bytes of gpt-oss's sink-extended scores: the wider of the compute dtype and the sinks'
/// parameter dtype (`torch.cat` promotes).
fn sinks_dtype(b: &Bytes) -> u128 {
    b.e.max(b.p)
}

/// Output width of attention: heads × value head dim, given the total value width of kv heads.
fn per_head(vd: u128, kv_heads: u64) -> u128 {
    vd / (kv_heads as u128).max(1)
}

/// Saved bytes per intermediate element of one gpt-oss expert (its input excluded).
/// modeling_gpt_oss.py `GptOssExperts._apply_gate` on the grouped_mm output (integrations/moe.py
/// grouped_mm_experts_forward, the default experts implementation): gate and up are strided
/// views of the [S, 2I] projection that the two clamps save (so it stays alive whole: 2 per
/// element), sigmoid saves its output, `gate * sigmoid` both operands (the clamped gate, the
/// sigmoid), `(up + 1) * glu` both, and the product is the down projection's saved input.
/// `x`: bytes of the experts' dtype.
fn gpt_oss_gate_per_elem(x: u128, frozen: bool) -> u128 {
    // [S, 2I] projection (2), clamped gate, sigmoid, glu, up + 1, all in the experts' dtype `x`;
    // the product is the down projection's input (not saved under LoRA: frozen experts).
    6 * x + if frozen { 0 } else { x }
}

/// MLP / MoE saved bytes per token (inputs counted with the norms).
fn mlp(m: &Model, b: &Bytes, moe_layer: bool) -> u128 {
    let e = b.e;
    let h = m.hidden as u128;
    let per_elem = mlp_saved_per_elem(m, b, b.lora.is_some());
    match (&m.moe, moe_layer) {
        (Some(moe), true) if moe.dense_dispatch => {
            // Llama4TextMoe (modeling_llama4.py): the router's logits, top-k ids (int64), the
            // sigmoid over the scattered scores in fp32 (saved) and their half copy laid out per
            // expert (saved by the multiply); the MoE input repeated once per expert (saved by
            // the multiply: the norm's output, fp32 under autocast), the scaled copy the first
            // bmm saves (half), then per expert the gate_up output, the activation and the
            // product (saved by the second bmm) — every expert over every token. The shared
            // expert as a dense MLP. Measured tensor by tensor on llama4-dev-4l
            // (validation/llama4.py, live storages after the forward).
            // Under LoRA the stacked experts are frozen parameters peft cannot wrap: neither bmm
            // saves its input (no weight gradient), so the scaled half copy and the product are
            // not kept; the repeated input still is (the scores need a gradient through the
            // router's input) — measured: validation/llama4.py's LoRA points.
            let (k, ei, experts) = (moe.top_k as u128, moe.expert_intermediate as u128, moe.experts as u128);
            let input = if b.amp { b.r } else { e };
            let router = experts * (4 + e) + 8 * k;
            let routed = match b.lora {
                None => experts * (input * h + e * h + 4 * e * ei),
                Some(_) => experts * (input * h + 3 * e * ei),
            };
            let shared_i = moe.shared_intermediate as u128;
            let adapted = b.lora.map_or(0, |l| l.saved(l.count(Slot::MlpOut, true), shared_i));
            router + routed + shared_i * per_elem + adapted
        }
        (Some(moe), true) => {
            let k = moe.top_k as u128;
            let ei = moe.expert_intermediate as u128;
            let experts = moe.experts as u128;
            // Router (modeling_mixtral.py MixtralTopKRouter): logits, fp32 softmax (saved), top-k values/ids.
            // gpt-oss (GptOssTopKRouter): top-k of the logits first (saves int64 ids), then a softmax
            // over the k values in their own dtype (saves its output); the logits are freed.
            let router = if moe.biased { k * (8 + e) } else { experts * (e + 4) + k * 16 };
            // Each routed token: gathered input copy (saved by the expert linear), the expert MLP,
            // and the expert output saved by the multiply with its routing weight.
            // Under LoRA the experts are frozen 3-D parameters: the gathered input is not saved,
            // unless peft adapts them (a merged weight that needs a gradient: saved as in full FT).
            let experts_frozen = b.lora.is_some_and(|l| !l.experts_trained);
            // transformers 5 runs the experts with grouped_mm, which autocast does not cover: the
            // gathered input is cast to the weights' dtype (integrations/moe.py _grouped_mm), so
            // under autocast with fp32 master weights the experts compute and save in fp32
            // (measured: validation/ssm.py granite-h-moe-dev-8l, 5–9% low with half copies).
            // Under LoRA/QLoRA the LoRA fixtures were measured with the experts in the compute
            // dtype (lora_validation.rs; a change there moved a held-out QLoRA point the wrong way),
            // so only full fine-tuning takes the weights' dtype for the plain experts.
            let weights_dtype = moe.biased || b.lora.is_none();
            // The Gated DeltaNet hybrids' QLoRA was measured (validation/ssm_lora.py): the kbit
            // preparation's fp32 experts compute and save in fp32.
            let fp32_experts = b.lora.is_some_and(|l| l.bnb) && m.delta_net().is_some();
            let x = if weights_dtype {
                b.p
            } else if fp32_experts {
                4
            } else {
                e
            };
            let gathered = if experts_frozen {
                0
            } else if weights_dtype {
                x
            } else if b.amp {
                2
            } else {
                b.r
            };
            let routed = if moe.biased {
                // gpt-oss: saved per routed token, that input, its clamped gate's tensors, and the
                // down output saved by the routing multiply.
                k * (gathered * h + gpt_oss_gate_per_elem(x, experts_frozen) * ei + x * h)
            } else {
                // The gate/up output, the activation and the product, and the down output saved by
                // the routing multiply: in the experts' dtype.
                let expert_elem = if experts_frozen { per_elem } else { mlp_saved_per_elem(m, b, false) } * x / e;
                k * (gathered * h + expert_elem * ei + x * h)
            };
            let shared_i = moe.shared_intermediate as u128;
            let shared = shared_i * per_elem + if moe.shared_gate { e * h + 2 * e } else { 0 };
            let adapted = b.lora.map_or(0, |l| if shared_i > 0 { l.saved(l.count(Slot::MlpOut, true), shared_i) } else { 0 });
            router + routed + shared + adapted
        }
        _ => {
            let i = m.intermediate as u128;
            per_elem * i + b.lora.map_or(0, |l| l.saved(l.count(Slot::MlpOut, false), i))
        }
    }
}

/// Bytes per token saved once per forward outside the decoder layers: embedding dropout mask,
/// rotary cos/sin (shared by every layer), the final norm and the LM head's input.
pub fn outside_layers(m: &Model, job: &Job, batch: u64) -> (u128, u128) {
    let b = Bytes::of(m, job);
    let h = m.hidden as u128;
    if let Some(enc) = m.encoder {
        return (encoder_outside(m, &b, enc.head) + embeddings_saved(m, job), 0);
    }
    let mut tok = 0;
    if m.hidden_dropout > 0.0 {
        tok += h; // embedding dropout mask (GPT-2 embd_pdrop)
    }
    // The LM head saves its input for its weight gradient: not when it is frozen (LoRA).
    let head_saves = |src: u128| if b.lora.is_some_and(|l| !l.head_trained) { 0 } else { b.linear_inputs(1, src) };
    if m.final_norm {
        let (saved, out) = b.norm(m.norm, b.r);
        tok += saved * h + head_saves(out) * h;
        if matches!(m.norm, Norm::LayerNorm { .. }) {
            tok += 8;
        }
    } else {
        tok += head_saves(b.r) * h;
    }
    // Rotary cos and sin, [1, seq, head_dim] in the residual dtype (LlamaRotaryEmbedding): per
    // sequence position, not per token, so returned separately.
    let rope = if m.rotary() { 2 * m.head_dim as u128 * b.r } else { 0 };
    let _ = batch;
    (tok, rope)
}

/// A BERT-style encoder's bytes per token saved outside its layers (modeling_bert.py):
/// BertEmbeddings sums three embeddings in the parameter dtype, its LayerNorm saves the sum and
/// the row statistics, dropout its mask; then the head's saved inputs. ELECTRA's embeddings are
/// `embed_dim` wide, and `embeddings_project` saves its input (modeling_electra.py ElectraModel).
fn encoder_outside(m: &Model, b: &Bytes, head: EncoderHead) -> u128 {
    let h = m.hidden as u128;
    if let Some(vis) = m.encoder.and_then(|e| e.vision) {
        return vision_outside(m, b, head, vis);
    }
    let (_, ln_out) = b.norm(m.norm, b.r);
    let ed = m.embed_dim as u128;
    let dropout = if m.hidden_dropout > 0.0 { 1 } else { 0 };
    match head {
        // BertLMPredictionHead: transform.dense reads the last LayerNorm's output (saves its copy),
        // the activation saves its input, transform.LayerNorm its (fp32 under autocast) input and
        // statistics, the tied decoder its own copy of that LayerNorm's output. DistilBERT's
        // vocab_transform/vocab_layer_norm/vocab_projector alike; ELECTRA's generator head
        // (ElectraGeneratorPredictions) works at `embed_dim` after its dense.
        EncoderHead::MaskedLm => {
            let (act_saved, act_out) = activation(m.mlp.act, b);
            let (t_saved, t_out) = b.norm(m.norm, act_out);
            b.linear_inputs(1, ln_out) * h + act_saved * ed + t_saved * ed + 8 + b.linear_inputs(1, t_out) * ed
        }
        // ElectraDiscriminatorPredictions: dense saves its input copy, the activation its input,
        // dense_prediction the activation's output (one logit per token after it).
        EncoderHead::ReplacedTokenDetection => {
            let (act_saved, act_out) = activation(m.mlp.act, b);
            b.linear_inputs(1, ln_out) * h + act_saved * h + b.linear_inputs(1, act_out) * h
        }
        // BertForTokenClassification: dropout, then the classifier saves its input copy.
        EncoderHead::TokenClassification { .. } => dropout * h + b.linear_inputs(1, ln_out) * h,
        // The pooler and the classifier read one token per sequence: bytes per sequence, negligible.
        EncoderHead::SequenceClassification { .. } | EncoderHead::Embedding | EncoderHead::ImageClassification { .. } => 0,
    }
}

/// A text encoder's embeddings: the LayerNorm's saved sum and row statistics, the dropout mask,
/// ELECTRA's `embeddings_project` input.
fn text_embeddings(m: &Model, b: &Bytes) -> u128 {
    let (h, ed) = (m.hidden as u128, m.embed_dim as u128);
    let dropout = if m.hidden_dropout > 0.0 { 1 } else { 0 };
    let (ln_saved, ln_out) = b.norm(m.norm, b.r);
    let project = if ed != h { b.linear_inputs(1, ln_out) * ed } else { 0 };
    ln_saved * ed + 8 + dropout * ed + project
}

/// Bytes per token saved outside the layers that live until the end of backward: a text
/// encoder's embeddings (their backward runs last). Under LoRA the frozen embeddings' output
/// needs no gradient and they save nothing, unless checkpointing (`enable_input_require_grads`
/// makes it require one: measured, validation/encoders_lora.py). Zero for decoders and vision
/// encoders, whose tensors outside the layers belong to the head end (back-propagated first).
pub fn embeddings_saved(m: &Model, job: &Job) -> u128 {
    match m.encoder {
        Some(e) if e.vision.is_none() => {
            let b = Bytes::of(m, job);
            if b.lora.is_some() && job.checkpointing != Checkpointing::Full {
                0
            } else {
                text_embeddings(m, &b)
            }
        }
        _ => 0,
    }
}

/// A vision transformer's bytes per token saved outside its layers (the conv's pixel copy is
/// per image: [`pixel_copy`]). The embeddings sum the patches (half under autocast) with fp32
/// class token and positions: fp32, saved by nothing but CLIP's `pre_layrnorm`. The final
/// LayerNorm (ViT, DINOv2, SigLIP: every token; CLIP's `post_layernorm`: the class token only)
/// saves its fp32 input and row statistics. What the head reads stays alive: a classifier on
/// the class token `x[:, 0]` keeps the whole tensor through that view when no autocast copy is
/// made (fp32); a bare model returns `last_hidden_state`, which the loss's graph keeps; SigLIP's
/// attention-pooling head saves its input copy and the packed K/V projection (torch
/// nn.functional.multi_head_attention_forward, `_in_projection_packed`).
fn vision_outside(m: &Model, b: &Bytes, head: EncoderHead, vis: crate::model::Vision) -> u128 {
    use crate::model::VisionFamily;
    let h = m.hidden as u128;
    if vis.family.is_qwen() {
        // Qwen2-VL: no final norm (the merger's ln_q is the projector's); the rotary cos and sin,
        // fp32 [patches, head_dim] each, saved by every block's multiply (apply_rotary_pos_emb_vision).
        let _ = head;
        return 8 * m.head_dim as u128;
    }
    let (ln_saved, ln_out) = b.norm(m.norm, b.r);
    let ln = ln_saved * h + 8;
    // One LayerNorm over every token: CLIP's pre_layrnorm on the embeddings, the others' final one.
    let head_reads = match (head, vis.family) {
        (EncoderHead::ImageClassification { .. }, VisionFamily::Dinov2) => 0,
        (EncoderHead::ImageClassification { .. }, _) if b.amp => 0,
        (EncoderHead::ImageClassification { .. }, _) => ln_out * h,
        // CLIP: post_layernorm reads the view last_hidden_state[:, 0]: the residual stays alive.
        (_, VisionFamily::Clip) => b.r * h,
        (_, VisionFamily::Siglip) if vis.pooling_head => ln_out * h + b.linear_inputs(1, ln_out) * h + 2 * b.e * h,
        _ => ln_out * h,
    };
    // Llama 4's vision model has both: `layernorm_pre` over the embeddings (fp32 under autocast:
    // the class embedding's fp32 concatenation promotes them) and `layernorm_post` over every
    // token (measured: validation/llama4.py, live storages after the tower's forward).
    let pre = if vis.family == VisionFamily::Llama4 { ln } else { 0 };
    ln + pre + head_reads
}

/// Bytes per image the patch embedding's conv saves beyond the input batch: under autocast its
/// half copy of the fp32 pixels (conv is on autocast's lower-precision list); otherwise the
/// pixels themselves, which are the input batch.
pub fn pixel_copy(m: &Model, job: &Job) -> u128 {
    let Some(vis) = m.encoder.and_then(|e| e.vision) else { return 0 };
    let b = Bytes::of(m, job);
    let side = (vis.image_size / vis.patch.max(1) * vis.patch) as u128;
    if b.amp {
        2 * vis.channels as u128 * vis.frames() * side * side
    } else {
        0
    }
}

/// Bytes per token per layer the training KV cache holds beyond what attention saves: under
/// autocast the rotary keys are fp32, and DynamicLayer's first `update` concatenates onto empty
/// tensors of the keys' dtype (cache_utils.py lazy_initialization), so the cache keeps fp32
/// copies of the keys and of the values (promoted by `torch.cat`), while attention saves their
/// half copies (measured: validation/harness.py, Vicuna-7B at batch 4 × 4096, 16 GiB over 32
/// layers = 8 B per K/V element).
pub fn training_cache_extra(m: &Model, job: &Job) -> u128 {
    // Where SDPA gets a mask with GQA (a padded batch, sliding layers past their window) the
    // cache's copies are already counted with the layer's saved tensors (`attention`: what the
    // kernel no longer saves itself), so only its fp32 keys are added here (measured: Mistral-7B
    // v0.1 at 4 × 4096, its window, −0.1% unmasked at 4000 tokens and +1.2% masked with them).
    let masked_gqa = m.kv_heads != m.heads && (padded_mask(job) || sliding_masked(m, job, job.seq));
    training_cache_bytes(m, job, !masked_gqa)
}

/// The training cache's fp32 keys and (with `values`) values, bytes per token per layer, under
/// autocast with rotary keys in the fp32 residual dtype; 0 otherwise.
pub fn training_cache_bytes(m: &Model, job: &Job, values: bool) -> u128 {
    let b = Bytes::of(m, job);
    if !job.training_cache(m.use_cache) || !b.amp || b.r != 4 || !m.rotary() {
        return 0;
    }
    // MLA: transformers 5 caches the compressed latent (`kv_lora_rank`) and the rotary key part
    // (modeling_deepseek_v2.py `past_key_values.update(k_nope, k_pe, …)`), as the prefill's cache;
    // deepseek-v2-lite's measured ends of forward (validation/fixtures/memory.jsonl) are within
    // 0.1% with it, 1.4% high with decompressed keys and values.
    let (kd, vd) = match m.attention.mla {
        Some(mla) => (mla.kv_lora_rank as u128, mla.qk_rope_head_dim as u128),
        None => (m.kv_dim() as u128, m.kv_dim() as u128),
    };
    // OLMo-2's apply_rotary_pos_emb casts q and k back to their input dtype (modeling_olmo2.py),
    // so its cache starts half and promotes no values; its keys' 4 B per element are as measured
    // (validation/run_matrix.py, olmo-2-7b at the end of forward).
    // A state-space model keeps its measured accounting (its MambaCache holds no K/V; the
    // 4 B × width per layer counted there is what validation/ssm.py matched, not located).
    // Zamba2's cache holds K/V for its shared-block invocations only, promoted as any
    // attention layer's (validation/ssm.py zamba2-dev-6l at the end of forward: −0.3% with the
    // values, −1.0% without).
    let promoted = values && m.attention.qk_norm != crate::model::QkNorm::Full && (m.ssm.is_none() || m.shared_block().is_some());
    4 * (kd + if promoted { vd } else { 0 })
}

/// The layers [`training_cache_extra`] is held for: every layer, as measured on the models it
/// was fitted to; Zamba2's shared-block invocations, which alone cache keys and values.
pub fn training_cache_layers(m: &Model) -> u128 {
    match m.ssm {
        Some(s) if s.shared.is_some() => s.attention_layers as u128,
        _ => m.layers as u128,
    }
}

/// Bytes per token the layer saves when checkpointed: its input only (HF gradient checkpointing
/// wraps each decoder layer in torch.utils.checkpoint).
pub fn checkpointed_layer(job: &Job, m: &Model) -> u128 {
    Bytes::of(m, job).r * m.hidden as u128
}

/// Apply selective checkpointing: the attention core's seq² tensors are recomputed, not saved.
pub fn apply_checkpointing(c: LayerCoef, mode: Checkpointing) -> LayerCoef {
    match mode {
        Checkpointing::Selective => LayerCoef { attention_sq: 0, ..c },
        _ => c,
    }
}

/// The largest transient of one layer's backward beyond its saved tensors, per token and per
/// score: incoming and outgoing residual gradients, then the larger of the MLP backward (three
/// intermediate-sized gradients live at the product's backward) and the attention backward
/// (FlashAttention-2 keeps dq, dk, dv and an fp32 dq accumulator; seq² kernels hold the fp32
/// gradient of the probabilities and of the scores).
pub fn backward_transient(m: &Model, job: &Job, kernel: Kernel, i: u64) -> (u128, u128) {
    let b = Bytes::of(m, job);
    if let (true, Some(s)) = (m.is_ssm_layer(i), m.ssm) {
        let scan = ssm_backward(m, s, &b);
        if s.parallel_attention {
            // Falcon-H1: the larger of the mixer's and the attention/MLP backward.
            let (tok, sq) = attention_backward_transient(m, job, kernel, i);
            return (tok.max(scan), sq);
        }
        return (scan, 0);
    }
    attention_backward_transient(m, job, kernel, i)
}

/// A state-space mixer layer's backward transient per token.
fn ssm_backward(m: &Model, s: Ssm, b: &Bytes) -> u128 {
    // The sequential scan's backward: every step's `discrete_A[:, :, i]` and
    // `deltaB_u[:, :, i]` selects scatter their gradient into a full [B, D, L, N] fp32
    // tensor that accumulates the steps (select_backward then an add): both accumulators
    // and one step's fresh full-size gradient exist at once, then the gradients of exp and
    // of the two products: three fp32 full-size tensors counted (bytes per state element
    // D·N per token). Under checkpointing mamba-130m's measured layer backward holds more
    // (about 22 bytes) while fewer gradients exist than vram places beside it: the
    // checkpointed points come out 2–3% low (validation/ssm.py).
    if let Some(dn) = s.delta_net {
        return DELTA_NET_BACKWARD_K * dn.value_heads as u128 * dn.key_dim as u128
            + DELTA_NET_BACKWARD_V * dn.value_heads as u128 * dn.value_dim as u128
            + 2 * b.r * m.hidden as u128;
    }
    if let Some(m2) = s.mamba2 {
        // Mamba-2: the chunked scan's backward holds gradients of its per-chunk scores.
        return MAMBA2_BACKWARD * m2.heads as u128 * m2.chunk as u128 + 2 * b.r * m.hidden as u128;
    }
    // The first Zamba scans its heads one after another, each its own [B, D/heads, L, N] graph,
    // so the accumulators are one head's (validation/ssm.py zamba-dev-8l, with and without
    // checkpointing).
    let heads = s.mamba1_heads.max(1) as u128;
    SSM_BACKWARD * s.d_inner as u128 * s.d_state as u128 / heads + 2 * b.r * m.hidden as u128
}

/// An attention layer's backward transient: (per token, per score).
fn attention_backward_transient(m: &Model, job: &Job, kernel: Kernel, i: u64) -> (u128, u128) {
    let b = Bytes::of(m, job);
    let h = m.hidden as u128;
    let e = b.e;
    let mlp_width = match &m.moe {
        // Llama 4 runs every expert over every token: at the product's backward the gradients of
        // the product, of up and of the activation — three [E, T, I] tensors — sit beside the
        // layer's saved tensors (measured: validation/llama4.py, checkpointed LoRA on
        // llama4-dev-4l with 4, 16 and 32 experts).
        Some(moe) if m.is_moe_layer(i) && moe.dense_dispatch => moe.experts as u128 * moe.expert_intermediate as u128,
        Some(moe) if m.is_moe_layer(i) => {
            // Busiest expert assumed to get twice its fair share of the k·tokens routed.
            let routed = (2 * moe.top_k as u128 * moe.expert_intermediate as u128 / (moe.experts as u128).max(1))
                .max(moe.expert_intermediate as u128 / 4);
            routed.max(moe.shared_intermediate as u128)
        }
        _ => m.intermediate as u128,
    };
    if m.encoder.is_some_and(|x| x.modern.is_some()) {
        // ModernBERT (modeling_modernbert.py): backward starts at `final_norm` with its output's
        // gradient and its input's (residual dtype) beside everything saved. Its saved input is
        // freed before the top layer's MLP backward, where `Wo`'s gradient frees the product it
        // saved and the GeGLU multiply's two input gradients join the residual's: the larger of
        // the two moments (measured: validation/encoders.py, 3- and 6-layer builds).
        let (fn_saved, _) = b.norm(m.norm, b.r);
        let top = (b.r * h + 2 * mlp_width * e).saturating_sub(fn_saved * h + 8);
        return ((2 * b.r * h).max(top), 0);
    }
    // Gated: the product's gradient, then the gate's and up's (three intermediate-sized tensors
    // at once); plain fc1 → act → fc2: the activation output's gradient and its input's (two).
    // Llama 4's experts are bmm operands, never bitsandbytes linears: their gradients are in the
    // compute dtype.
    let dense_experts = m.is_moe_layer(i) && m.moe.as_ref().is_some_and(|moe| moe.dense_dispatch);
    let mlp = if m.mlp.gated { 3 } else { 1 } * mlp_width * if dense_experts { e } else { b.lin };
    let (qd, kd) = (m.q_dim() as u128, m.kv_dim() as u128);
    let (attn, sq) = if kernel.quadratic() { (e * (qd + 2 * kd), 8) } else { (e * (qd + 2 * kd) + 4 * qd, 0) };
    // Nemotron-H's blocks hold one of the two: an MLP block or an attention block.
    if m.ssm.is_some_and(|s| s.mlp_layers > 0) {
        return match m.is_mlp_layer(i) {
            true => (2 * b.r * h + mlp, 0),
            false => (2 * b.r * h + attn, sq),
        };
    }
    (2 * b.r * h + mlp.max(attn), sq)
}

/// Forward transient at the widest op beyond what is saved: for seq² kernels the masked scores
/// feeding the softmax (promoted to the residual dtype by the float mask).
pub fn forward_transient_sq(m: &Model, job: &Job, kernel: Kernel) -> u128 {
    let b = Bytes::of(m, job);
    if kernel.quadratic() && m.attention.sinks {
        // gpt-oss eager (modeling_gpt_oss.py eager_attention_forward): from the softmax to the cast
        // for @v, the masked scores and the shifted sink-extended scores stay referenced beside the
        // saved probabilities.
        b.e.max(b.r) + sinks_dtype(&b)
    } else if kernel.quadratic() {
        b.e.max(b.r)
    } else {
        0
    }
}
