//! A tensor-level allocation sequence for a training step, for the caching-allocator model.
//!
//! The memory model (train.rs) works in per-phase totals; the caching allocator's reserve depends
//! on the sizes and order of the individual tensors (a freed 594 MiB bf16 logits block cannot
//! hold the 1,187 MiB fp32 gradient that follows it). This builds the sequence of two steps of
//! HF Trainer-style full fine-tuning — the order and shapes were read from recorded real
//! sequences (validation/alloc_traces.py, transformers 5 + torch 2.15) — from the same per-layer
//! byte counts the memory model uses, split into tensors of the shapes that hold them:
//! - parameters, one per parameter tensor in module order (Model::tensors);
//! - forward, per layer: under autocast a half copy of each weight when first used (the
//!   autocast cache keeps it to the end of forward; matmuls save it for backward), the saved
//!   activations as tokens×hidden and tokens×intermediate tensors, one tokens×hidden fp32
//!   transient; then the final norm, and the loss as transformers 5 ForCausalLMLoss computes it
//!   (logits in the compute dtype, the fp32 upcast, the saved log-softmax; the upcast freed);
//! - backward: the cross-entropy gradients (fp32 tokens×vocab, twice), the logits gradient in
//!   the compute dtype, the LM head's weight gradient, then per layer last to first its
//!   transients, under autocast the half gradient of each weight before its fp32 `.grad`, the
//!   layer's activations (and weight copies) freed; the embedding gradient last;
//! - optimizer: on the first step the states, two per parameter (torch.optim.AdamW `_init_group`);
//!   the foreach step's state-sized list (`_foreach_sqrt`) allocated parameter by parameter and
//!   freed together; `zero_grad(set_to_none=True)` frees the gradients;
//! - LoRA on a 16-bit base: the frozen base as loaded, fp32 adapters with their half copies; only
//!   the adapters get gradients and states (no LM head or embedding gradient);
//! - a generation: see [`inference`].
//!
//! Held to the real sequences by crates/vram-core/tests/allocator_traces.rs.

use super::activations::{self as act, Bytes};
use super::optimizer;
use crate::allocator::{Op, MAX_OPS};
use crate::job::{Checkpointing, Job, Optimizer, OptimizerImpl};
use crate::model::Model;

struct Seq {
    ops: Vec<Op>,
    next: u64,
}

impl Seq {
    fn alloc(&mut self, size: u128) -> u64 {
        self.next += 1;
        let size = u64::try_from(size).unwrap_or(u64::MAX);
        if size > 0 {
            self.ops.push(Op::Alloc { id: self.next, size });
        }
        self.next
    }
    /// `total` bytes as tensors of `unit` bytes (the remainder as one more).
    fn split(&mut self, total: u128, unit: u128) -> Vec<u64> {
        let unit = unit.max(1);
        let n = (total / unit).min(64);
        let mut ids: Vec<u64> = (0..n).map(|_| self.alloc(unit)).collect();
        let rest = total - n * unit;
        if rest > 0 {
            ids.push(self.alloc(rest));
        }
        ids
    }
    fn free(&mut self, ids: &[u64]) {
        self.ops.extend(ids.iter().map(|&id| Op::Free { id }));
    }
}

/// Parameter tensors in module order: (elements, layer it belongs to, whether it is a matrix).
fn parameter_tensors(m: &Model) -> Vec<(u128, Option<u64>, bool)> {
    let mut out = Vec::new();
    let groups = super::inventory(m);
    let mut i = 0;
    let mut layer0 = 0;
    while i < groups.len() {
        let g = &groups[i];
        if !g.name.starts_with("layers.") {
            for _ in 0..g.count {
                out.push((g.numel as u128, None, g.is_matrix()));
            }
            i += 1;
            continue;
        }
        // A run of identical layers: consecutive layer groups with the same count, interleaved.
        let mut j = i;
        while j < groups.len() && groups[j].name.starts_with("layers.") && groups[j].count == g.count {
            j += 1;
        }
        for l in 0..g.count {
            for h in &groups[i..j] {
                out.push((h.numel as u128, Some(layer0 + l), h.is_matrix()));
            }
        }
        layer0 += g.count;
        i = j;
    }
    out
}

/// One parameter tensor of the sequence.
struct Param {
    /// Bytes as stored.
    bytes: u128,
    /// Decoder layer it belongs to.
    layer: Option<u64>,
    /// Half copy autocast makes for a matmul (0: none).
    cast: u128,
    /// Trained: gets a gradient of `grad` bytes and optimizer states.
    grad: u128,
    /// Elements (optimizer states and temporaries are split by them).
    numel: u128,
}

/// Full fine-tuning: every parameter trained in the parameter dtype, matrices cast to half
/// under autocast. LoRA: the frozen base as loaded (bf16 base only: no casts), then the fp32
/// adapters spread over the layers, cast under autocast (peft.tuners.lora.layer: the adapter
/// weights are leaves that require grad, so the autocast cache keeps their half copies).
fn parameters(m: &Model, job: &Job, b: &Bytes) -> Result<Vec<Param>, &'static str> {
    let half = |numel: u128, matrix: bool| if b.amp && matrix { numel * 2 } else { 0 };
    let tensors = parameter_tensors(m);
    let Some(lora) = &job.lora else {
        return Ok(tensors
            .iter()
            .map(|&(n, layer, matrix)| Param { bytes: n * b.p, layer, cast: half(n, matrix), grad: n * b.p, numel: n })
            .collect());
    };
    // QLoRA, pre-quantized bases, fp32 bases (per-use casts of frozen weights) and
    // modules_to_save copies are not sequenced yet.
    if job.base.is_some_and(crate::peft::BaseWeights::is_bnb) || m.quantization.is_some() {
        return Err("QLoRA and other quantized bases are not simulated yet");
    }
    if b.p != 2 {
        return Err("LoRA on a 32-bit base is not simulated yet");
    }
    if !lora.modules_to_save.is_empty() {
        return Err("LoRA with modules_to_save is not simulated yet");
    }
    let states = super::lora::model_states(m, job, b);
    let all: u128 = tensors.iter().map(|t| t.0).sum::<u128>().max(1);
    let mut out: Vec<Param> =
        tensors.iter().map(|&(n, layer, _)| Param { bytes: states.weights * n / all, layer, cast: 0, grad: 0, numel: 0 }).collect();
    let layers = m.layers.max(1) as u128;
    for t in optimizer::trainable(m, job) {
        let (n, count) = (t.group.numel as u128, t.group.count.max(1) as u128);
        for k in 0..count {
            let layer = Some((k * layers / count) as u64);
            out.push(Param { bytes: n * t.bytes, layer, cast: half(n, t.group.is_matrix()), grad: n * t.bytes, numel: n });
        }
    }
    Ok(out)
}

/// The allocation sequence of two training steps of `job` on one GPU (full fine-tuning, or LoRA
/// on a 16-bit base), or why not: the job is not one this sequence describes (QLoRA and other
/// quantized bases, sharding, accumulation, optimizer-in-backward, fused cross-entropy) or would
/// exceed [`MAX_OPS`].
pub(crate) fn training(m: &Model, job: &Job) -> Result<Vec<Op>, &'static str> {
    let unsupported = [
        (job.model_state_shards > 1, "sharded jobs are not simulated yet"),
        (job.grad_accum > 1, "gradient accumulation is not simulated yet"),
        (job.optimizer_in_bwd, "optimizer-in-backward is not simulated yet"),
        (job.fused_cross_entropy, "fused cross-entropy is not simulated yet"),
    ];
    if let Some((_, why)) = unsupported.iter().find(|u| u.0) {
        return Err(why);
    }
    let b = Bytes::of(m, job);
    let (t, h, v) = ((job.batch * job.seq) as u128, m.hidden as u128, m.vocab as u128);
    let inter = (m.intermediate as u128).max(h);
    let sq_elems = job.batch as u128 * m.heads as u128 * job.seq as u128 * job.seq as u128;
    let mask_elems = (job.batch * job.seq) as u128 * job.seq as u128;
    let layers = m.layers.max(1);
    let budget = parameter_tensors(m).len() as u128 * 16 + layers as u128 * 2 * (4 * 64 + 64) + 64;
    if budget > MAX_OPS as u128 {
        return Err(TOO_MANY);
    }
    let params = parameters(m, job, &b)?;
    let (kernel, _) = act::choose_kernel(m, job);
    let p = b.p;
    let full_ft = job.lora.is_none();
    let ckpt = job.checkpointing;
    let mut q = Seq { ops: Vec::new(), next: 0 };
    for x in &params {
        q.alloc(x.bytes);
    }
    let layer_params = |l: u64| params.iter().filter(move |x| x.layer == Some(l));
    let head_numel = v * m.embed_dim as u128;
    // States: Adam keeps two per parameter, SGD-momentum/Lion one; paged states are not in the
    // caching allocator (cudaMallocManaged).
    let (states, per_param) = match job.optimizer {
        _ if optimizer::paged(job) => (0, 0),
        Optimizer::Sgd => (0, 0),
        Optimizer::SgdMomentum | Optimizer::Lion => (optimizer::states(m, job), 1),
        _ => (optimizer::states(m, job), 2),
    };
    let trained: Vec<&Param> = params.iter().filter(|x| x.grad > 0).collect();
    let all_numel: u128 = trained.iter().map(|x| x.numel).sum::<u128>().max(1);
    let temporaries = optimizer::step_temporaries(m, job);
    let (outside_tok, rope_per_pos) = act::outside_layers(m, job, job.batch);
    for step in 0..2 {
        let inputs: Vec<u64> = (0..3).map(|_| q.alloc(t * 8)).collect();
        // Forward.
        let emb = q.alloc(t * h * p.max(b.r));
        let rope = q.alloc(rope_per_pos * job.seq as u128);
        let mut saved: Vec<Vec<u64>> = Vec::new();
        let mut casts: Vec<Vec<u64>> = Vec::new();
        for l in 0..layers {
            let c: Vec<u64> = layer_params(l).filter(|x| x.cast > 0).map(|x| q.alloc(x.cast)).collect();
            let full = act::layer(m, job, kernel, l);
            let mut ids = Vec::new();
            if ckpt == Checkpointing::Full {
                // The whole layer runs, then only its input survives.
                let tmp = layer_tensors(&mut q, &full, t, h, inter, &b, sq_elems, mask_elems);
                ids.extend(q.split(act::checkpointed_layer(job, m) * t, t * h * b.r));
                q.free(&tmp);
            } else {
                ids = layer_tensors(&mut q, &act::apply_checkpointing(full, ckpt), t, h, inter, &b, sq_elems, mask_elems);
            }
            let tr = q.alloc(t * h * 4);
            q.free(&[tr]);
            saved.push(ids);
            casts.push(c);
        }
        let outside = q.split(outside_tok * t, t * h * b.r);
        // Loss (transformers loss_utils.py ForCausalLMLoss): the head's half weight copy (the
        // embedding's when tied), logits, .float(), log_softmax (saved); the upcast goes, and the
        // logits with the model output, which the Trainer drops before backward.
        let head_cast = if b.amp && full_ft { q.alloc(head_numel * 2) } else { 0 };
        let logits = q.alloc(t * v * b.e);
        let upcast = if b.e == 2 { q.alloc(t * v * 4) } else { 0 };
        let log_probs = q.alloc(t * v * 4);
        q.free(&[upcast, logits]);
        if ckpt == Checkpointing::Full {
            // Autocast exits: the cache's copies go; the recomputation remakes them per layer.
            for c in &casts {
                q.free(c);
            }
            casts.iter_mut().for_each(Vec::clear);
        }
        // Backward: nll and log_softmax gradients, the logits gradient, the LM head gradient
        // (half, then the fp32 .grad; the tied embedding's .grad when tied).
        let g1 = q.alloc(t * v * 4);
        let g2 = q.alloc(t * v * 4);
        q.free(&[g1, log_probs]);
        let g3 = if b.e == 2 { q.alloc(t * v * b.e) } else { 0 };
        q.free(&[g2]);
        let half = if b.amp && full_ft { q.alloc(head_numel * 2) } else { 0 };
        let head_grad = if full_ft { q.alloc(head_numel * p) } else { 0 };
        q.free(&[half, g3, head_cast]);
        let mut grads = if full_ft { vec![head_grad] } else { Vec::new() };
        let dx = q.alloc(t * h * b.e);
        q.free(&outside);
        for l in (0..layers).rev() {
            let mut recomputed = Vec::new();
            let mut recast = Vec::new();
            if ckpt == Checkpointing::Full {
                recast = layer_params(l).filter(|x| x.cast > 0).map(|x| q.alloc(x.cast)).collect();
                recomputed = layer_tensors(&mut q, &act::layer(m, job, kernel, l), t, h, inter, &b, sq_elems, mask_elems);
            }
            let (tok, sq) = act::backward_transient(m, job, kernel, l);
            let tmp = q.split(tok * t + sq * sq_elems, t * inter * b.e);
            for x in layer_params(l).filter(|x| x.grad > 0).collect::<Vec<_>>().iter().rev() {
                let half = if x.cast > 0 { q.alloc(x.cast) } else { 0 };
                grads.push(q.alloc(x.grad));
                q.free(&[half]);
            }
            q.free(&tmp);
            q.free(&recomputed);
            q.free(&recast);
            q.free(&saved[l as usize]);
            q.free(&casts[l as usize]);
        }
        q.free(&[dx, rope, emb]);
        // Embedding gradient (embedding_dense_backward); tied: added out of place to the head's.
        let emb_grad = if full_ft { q.alloc(head_numel * p) } else { 0 };
        if !full_ft {
        } else if m.tied_embeddings {
            let sum = q.alloc(head_numel * p);
            q.free(&[emb_grad]);
            grads.retain(|&g| g != head_grad);
            q.free(&[head_grad]);
            grads.push(sum);
        } else {
            grads.push(emb_grad);
        }
        // Other trained parameters outside the layers (final norm, position embeddings...).
        for x in params.iter().filter(|x| x.layer.is_none() && x.grad > 0).skip(1) {
            grads.push(q.alloc(x.grad));
        }
        // Optimizer.
        if step == 0 {
            for x in &trained {
                for _ in 0..per_param {
                    q.alloc(states * x.numel / all_numel / per_param);
                }
            }
        }
        if temporaries > 0 {
            let tmp: Vec<u64> = if job.optimizer_impl == OptimizerImpl::Foreach {
                trained.iter().map(|x| q.alloc(temporaries * x.numel / all_numel)).collect()
            } else {
                vec![q.alloc(temporaries)]
            };
            q.free(&tmp);
        }
        q.free(&grads);
        q.free(&inputs);
    }
    Ok(q.ops)
}

/// Why a job too large to sequence gets the flat reserve.
const TOO_MANY: &str = "the job has too many tensors to simulate";

/// One layer's saved activations as tensors of their shapes: attention (tokens × hidden in the
/// compute dtype, plus the seq² scores), MLP (tokens × intermediate), norms and residual
/// (tokens × hidden in the residual dtype), masks.
#[allow(clippy::too_many_arguments)]
fn layer_tensors(q: &mut Seq, c: &act::LayerCoef, t: u128, h: u128, inter: u128, b: &Bytes, sq: u128, mask: u128) -> Vec<u64> {
    let mut ids = q.split(c.norms * t / 2, t * h * b.r);
    ids.extend(q.split(c.attention * t, t * h * b.e));
    ids.extend(q.split(c.attention_sq * sq, sq * b.e));
    ids.extend(q.split(c.mlp * t, t * inter * b.e));
    ids.extend(q.split(c.norms * t - c.norms * t / 2, t * h * b.r));
    ids.extend(q.split(c.mask_sq * mask, mask * b.e));
    ids
}

/// Decode steps simulated at the end of a generation (the cache grows by torch.cat each step).
const DECODE_STEPS: u64 = 16;

/// The allocation sequence of a generation (HF `generate()` with a DynamicCache), as recorded:
/// the weights (`weight_bytes` split over the parameter tensors by elements); the prefill, layer
/// by layer — the normed input, q, the layer's keys and values (kept in the cache), the attention
/// output, the MLP's gate/up/activation in tokens×intermediate, the residual adds — interleaving
/// the cache with transients in the same segments; the last-position fp32 logits; then the cache
/// jumps to `context − 16` tokens and 16 decode steps each re-allocate every layer's keys and
/// values one token longer (DynamicLayer.update: torch.cat) and free the old ones. An error past
/// [`MAX_OPS`].
pub(crate) fn inference(m: &Model, job: &Job, weight_bytes: u128) -> Result<Vec<Op>, &'static str> {
    let params = parameter_tensors(m);
    let layers = m.layers.max(1);
    if params.len() as u128 + layers as u128 * (32 + 8 * DECODE_STEPS as u128) > MAX_OPS as u128 {
        return Err(TOO_MANY);
    }
    let e: u128 = if job.precision == crate::job::Precision::Fp32 { 4 } else { 2 };
    let kv_b = job.kv_dtype.map_or(e, |d| d.bytes() as u128);
    let (batch, ctx) = (job.batch as u128, job.seq as u128);
    let prompt = job.prompt_len.unwrap_or(job.seq).min(job.seq) as u128;
    let (h, inter, v) = (m.hidden as u128, (m.intermediate as u128).max(m.hidden as u128), m.vocab as u128);
    let (qd, kd) = (m.q_dim() as u128, m.kv_dim() as u128);
    let t = batch * prompt;
    let window = |l: u64, len: u128| if l < m.sliding_layers { m.sliding_window.map_or(len, |w| len.min(w as u128)) } else { len };
    let mut q = Seq { ops: Vec::new(), next: 0 };
    let all: u128 = params.iter().map(|x| x.0).sum::<u128>().max(1);
    for x in &params {
        q.alloc(weight_bytes * x.0 / all);
    }
    // Prefill.
    let mut resid = q.alloc(t * h * e);
    let mut cache: Vec<(u64, u64)> = Vec::new();
    for _ in 0..layers {
        let normed = q.alloc(t * h * e);
        let qs = q.alloc(t * qd * e);
        let k = q.alloc(t * kd * kv_b);
        let vv = q.alloc(t * kd * kv_b);
        let out = q.alloc(t * qd * e);
        q.free(&[qs, normed]);
        let o = q.alloc(t * h * e);
        q.free(&[out]);
        let r = q.alloc(t * h * e);
        q.free(&[o, resid]);
        let n2 = q.alloc(t * h * e);
        let gate = q.alloc(t * inter * e);
        let up = q.alloc(t * inter * e);
        let act = q.alloc(t * inter * e);
        q.free(&[gate, up]);
        let down = q.alloc(t * h * e);
        q.free(&[act, n2]);
        resid = q.alloc(t * h * e);
        q.free(&[r, down]);
        cache.push((k, vv));
    }
    let logits = q.alloc(batch * v * 4);
    q.free(&[resid, logits]);
    // Decode: jump to the last steps, then grow one token at a time.
    let start = ctx.saturating_sub(DECODE_STEPS as u128).max(prompt);
    for len in start..ctx {
        let x = q.alloc(batch * h * e);
        for (l, kv) in cache.iter_mut().enumerate() {
            let n = window(l as u64, len + 1);
            let k = q.alloc(batch * n * kd * kv_b);
            q.free(&[kv.0]);
            let vv = q.alloc(batch * n * kd * kv_b);
            q.free(&[kv.1]);
            *kv = (k, vv);
            let tmp = q.alloc(batch * inter * e);
            q.free(&[tmp]);
        }
        let logits = q.alloc(batch * v * 4);
        q.free(&[x, logits]);
    }
    Ok(q.ops)
}
