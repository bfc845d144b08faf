//! Training step timeline (steady state: the second step, optimizer states already alive,
//! gradients freed by `zero_grad(set_to_none=True)`, PyTorch's default since 2.0).

use super::activations::{self as act, Bytes, Kernel, LayerCoef};
use super::optimizer;
use super::{Breakdown, Phase};
use crate::job::{Checkpointing, Job};
use crate::model::{EncoderHead, Model, Role, TensorGroup};
use crate::units::GIB;

/// Names of training components (stable: JSON users key on them).
pub(crate) const PARAMS: &str = "parameters";
pub(crate) const ADAPTERS: &str = "adapter parameters (trainable)";
pub(crate) const GRADS: &str = "gradients";
pub(crate) const STATES: &str = "optimizer states";
pub(crate) const CASTS: &str = "autocast weight copies";
pub(crate) const ACT_ATTN: &str = "activations: attention";
pub(crate) const ACT_MLP: &str = "activations: mlp";
pub(crate) const ACT_NORM: &str = "activations: norms & residual";
pub(crate) const ACT_SSM: &str = "activations: Mamba mixer (selective scan)";
/// A Gated DeltaNet hybrid's mixer activations (its MLPs with them, as for the Mamba hybrids).
pub(crate) const ACT_DELTA: &str = "activations: Gated DeltaNet & MLP";
pub(crate) const ACT_CKPT: &str = "activations: checkpointed layer inputs";
pub(crate) const ACT_RECOMP: &str = "activations: recomputed layer";
pub(crate) const ACT_OTHER: &str = "activations: final norm & lm_head input";
pub(crate) const LOGITS: &str = "logits & loss";
pub(crate) const INPUT: &str = "input batch";
pub(crate) const BWD_TMP: &str = "backward temporaries";
pub(crate) const FWD_TMP: &str = "attention scores (forward)";
pub(crate) const OPT_TMP: &str = "optimizer step temporaries";
pub(crate) const DORA_TMP: &str = "DoRA weight-norm temporaries";
pub(crate) const CACHE: &str = "KV cache (use_cache during training)";

pub(crate) fn phases(m: &Model, job: &Job) -> (Vec<Breakdown>, Kernel, Vec<String>) {
    let (kernel, kernel_note) = act::choose_kernel(m, job);
    let mut notes: Vec<String> = kernel_note.into_iter().collect();
    let b = Bytes::of(m, job);
    let (batch, seq) = (job.batch as u128, job.seq as u128);
    let t = batch * seq;
    let sq_elems = batch * m.heads as u128 * seq * seq;
    let h = m.hidden as u128;
    let (v, ed) = (m.vocab as u128, m.embed_dim as u128);
    // Logits the loss reads: tokens × vocabulary for LM heads, less for classifiers.
    let (logit_rows, logit_width) = m.loss_logits(job.batch, job.seq);
    let p = b.p;
    let e = b.e;

    // ZeRO-3 / FSDP full_shard, first order: each GPU holds 1/N of the model states.
    let shards = job.model_state_shards.max(1) as u128;
    let ms = match job.lora {
        Some(_) => super::lora::model_states(m, job, &b),
        None => full_states(m, job, &b, shards),
    };
    let (weights, grads_all, states, head_cast, casts_all) = (ms.weights, ms.grads, ms.states, ms.head_cast, ms.casts);
    // Weight copies alive through the forward: all of them, or under full checkpointing only the
    // autocast cache's (copies a matmul saved are dropped by the checkpoint and remade in backward).
    let casts_fwd = if job.checkpointing == Checkpointing::Full { ms.casts_cached } else { casts_all };
    // HF data collator batch: input_ids, labels, attention_mask as int64 [batch, seq].
    let input = m.input_bytes(job.batch, job.seq);

    // Per-layer saved activations.
    let ckpt = job.checkpointing;
    let masked_any = act::padded_mask(job) || act::sliding_masked(m, job, job.seq);
    if act::padded_mask(job) {
        notes.push("padded batch: transformers passes SDPA a (batch, 1, seq, seq) mask, so CUDA runs memory-efficient attention (not flash) and every layer keeps the float bias made from it for backward".into());
    } else if masked_any {
        notes.push(format!(
            "sequence {} ≥ sliding window {}: transformers passes SDPA an explicit mask on {} windowed layers, so CUDA runs memory-efficient attention (not flash){} and a batch×seq² float mask saved per layer; attn_implementation=flash_attention_2 avoids it",
            job.seq,
            m.sliding_window.unwrap_or(0),
            m.sliding_layers,
            if m.kv_heads != m.heads { ", with K/V repeated for GQA" } else { "" }
        ));
    }
    // Layers differ only by kind (dense or MoE, windowed or not): compute each kind once.
    let kind = |i: u64| [m.is_moe_layer(i), i < m.sliding_layers, m.is_ssm_layer(i), m.is_mlp_layer(i), m.is_model_first_layer(i)];
    let mut coef_cache: Vec<([bool; 5], LayerCoef)> = Vec::new();
    let layer_full: Vec<LayerCoef> = (0..m.layers)
        .map(|i| {
            if let Some((_, c)) = coef_cache.iter().find(|(k, _)| *k == kind(i)) {
                return *c;
            }
            let c = act::apply_checkpointing(act::layer(m, job, kernel, i), ckpt);
            coef_cache.push((kind(i), c));
            c
        })
        .collect();
    let mask_elems = batch * seq * seq;
    // Source tokens an encoder-decoder's cross-attention reads (0 for a decoder-only model).
    let src_t = batch * m.seq2seq.as_ref().map_or(0, |s| s.source_tokens as u128);
    let layer_bytes =
        |c: &LayerCoef| c.norms * t + c.attention * t + c.mlp * t + c.attention_sq * sq_elems + c.mask_sq * mask_elems + c.cross * src_t;
    let layer_saved: Vec<u128> = match ckpt {
        Checkpointing::Full => (0..m.layers).map(|_| act::checkpointed_layer(job, m) * t).collect(),
        _ => layer_full.iter().map(layer_bytes).collect(),
    };
    let (layer_grads, layer_casts) = (&ms.layer_grads, &ms.layer_casts);
    let (outside_tok, rope_per_pos) = act::outside_layers(m, job, job.batch);
    // An encoder's embeddings are back-propagated last: what they saved outlives every layer.
    let embeddings = act::embeddings_saved(m, job) * t;
    let outside = outside_tok * t + rope_per_pos * seq + act::pixel_copy(m, job) * batch;

    let add_activations = |bd: &mut Breakdown, upto: usize| match ckpt {
        Checkpointing::Full => {
            let s: u128 = layer_saved[..upto].iter().sum();
            bd.add(
                ACT_CKPT,
                s,
                format!(
                    "{upto} layer inputs × tokens {t} × hidden {h} × {} B (gradient checkpointing keeps each decoder layer's input)",
                    b.r
                ),
            );
        }
        _ => {
            let part = |f: &dyn Fn(&LayerCoef) -> u128| -> u128 { layer_full[..upto].iter().map(f).sum() };
            bd.add(
                ACT_ATTN,
                part(&|c| c.attention * t + c.attention_sq * sq_elems + c.mask_sq * mask_elems + c.cross * src_t),
                format!(
                    "{upto} layers: q/k/v/output saved by the {kernel:?} kernel{}{}",
                    if kernel.quadratic() && ckpt != Checkpointing::Selective { ", plus batch×heads×seq² probabilities" } else { "" },
                    if masked_any { ", plus the batch×seq² float mask each masked layer keeps" } else { "" }
                ),
            );
            let (mlp_name, mlp_detail) = match m.ssm {
                Some(s) if s.delta_net.is_some() => (
                    ACT_DELTA,
                    format!("{upto} layers: the chunked delta rule's fp32 q/k/v, decays and per-chunk states, the conv, the gated norm, and every layer's MLP or MoE block (tokens {t})"),
                ),
                Some(_) => {
                    (ACT_SSM, format!("{upto} layers: the selective scan's fp32 state tensors and the mixer's projections (tokens {t})"))
                }
                None => (ACT_MLP, format!("{upto} layers: MLP intermediates saved for backward (tokens {t} × intermediate)")),
            };
            bd.add(mlp_name, part(&|c| c.mlp * t), mlp_detail);
            bd.add(
                ACT_NORM,
                part(&|c| c.norms * t),
                format!(
                    "{upto} layers: norm inputs/outputs and the inputs saved by q/k/v, gate/up linears{}",
                    if b.amp { " (one half copy per linear under autocast)" } else { "" }
                ),
            );
        }
    };

    // Logits and loss.
    let (logits_fwd, logits_bwd, logits_detail) = if job.fused_cross_entropy {
        // Liger FusedLinearCrossEntropy: chunks of ~tokens·hidden/vocab rows; grad_input [tokens, hidden]
        // and grad_weight [vocab, hidden] are computed in forward (liger_kernel/ops/fused_linear_cross_entropy.py).
        let fused = t * h * (e + 8) + ms.head_grad;
        (fused, fused, "fused linear cross-entropy: grad_input + grad_weight precomputed in forward, fp32 logit chunks".to_string())
    } else {
        // ForCausalLMLoss (transformers loss_utils.py): logits [tokens, vocab] in compute dtype, .float()
        // upcast, log_softmax output (saved). At backward start: saved log-probs + nll grad + log_softmax grad, all fp32.
        let upcast = if e == 2 { 4 } else { 0 };
        // Gemma-2 final soft-capping (modeling_gemma2.py): logits / cap -> tanh (output saved) -> * cap.
        let cap = if m.final_softcap { e } else { 0 };
        // Without ForCausalLMLoss's .float() (encoders' masked-LM heads, T5 and Whisper call
        // CrossEntropyLoss on the logits as they are; BART's fp32 bias upcasts them under autocast):
        // - under autocast, aten's cross_entropy_loss asks for `log_softmax(x, dim, x.dtype)`
        //   (LossNLL.cpp), which CUDA autocast leaves in half; nll_loss (CUDA's fp32 list) casts
        //   that to fp32 and keeps the copy for backward. During the loss: the logits, the half
        //   log-softmax and its fp32 copy; at backward start: the two saved and nll's fp32
        //   gradient (measured on an H100: validation/gpu/h100/family_recordings.jsonl, BERT,
        //   ELECTRA, DistilBERT, T5, Whisper masked-LM/seq2seq points under bf16-mixed);
        // - without autocast, log_softmax runs in half: the logits and its output in the forward;
        //   at backward start its output with nll's and its own gradients, all half
        //   (modeling_whisper.py, modeling_bart.py; measured on bart-base-3l: three half tensors
        //   of tokens × vocab).
        let upcasts = m.loss_upcasts_logits();
        let half_loss = e == 2 && !b.amp && !upcasts;
        // BART's final_logits_bias is a buffer in the model's load dtype: an fp32 one promotes the
        // logits under autocast, a bf16 base's (LoRA) does not.
        let bias_upcasts = p == 4 && m.seq2seq.as_ref().is_some_and(|s| s.fp32_logits_bias);
        let amp_half_loss = e == 2 && b.amp && !upcasts && !bias_upcasts;
        let (f, bw) = if half_loss {
            (2 * e, 3 * e)
        } else if amp_half_loss {
            (2 * e + 4, e + 8)
        } else {
            (e + cap + upcast + 4, 12 + cap)
        };
        let what = if m.encoder.is_some_and(|x| x.head != EncoderHead::MaskedLm) { "outputs" } else { "vocab" };
        (
            logit_rows * logit_width * f,
            logit_rows * logit_width * bw,
            format!(
                "{logit_rows} rows × {what} {logit_width}: {} log-softmax + its gradients ({bw} B/elem at backward start; {f} B/elem during the loss)",
                if half_loss || amp_half_loss { "half" } else { "fp32" }
            ),
        )
    };

    let accum = job.grad_accum > 1;
    let base = |bd: &mut Breakdown| {
        bd.add(PARAMS, weights, ms.weights_detail.clone());
        bd.add(ADAPTERS, ms.adapters, ms.adapters_detail.clone());
        bd.add(STATES, states, format!("{} states", job.optimizer.name()));
        let what = if m.encoder.is_some_and(|e| e.vision.is_some()) {
            "pixel_values (fp32) and labels".to_string()
        } else {
            format!("input_ids, labels, attention_mask: 3 × {t} tokens × 8 B")
        };
        bd.add(INPUT, input, what);
        if accum {
            bd.add(
                GRADS,
                grads_all,
                format!("gradient accumulation ({} steps): gradients stay alive through forward and backward", job.grad_accum),
            );
        }
    };

    let mut out = Vec::new();
    let layers = m.layers as usize;

    // Forward: the widest attention op of the last layer (seq² kernels, or explicit masks).
    if kernel.quadratic() || masked_any {
        let mut bd = Breakdown::new(Phase::ForwardAttention);
        base(&mut bd);
        bd.add(CASTS, casts_fwd, "half copies of the weights used so far (autocast cache)");
        add_activations(&mut bd, layers);
        // Masked scores feeding the softmax, and the 4-D float causal mask eager builds once per forward.
        let mask = if kernel == Kernel::Eager { batch * seq * seq * b.r } else { seq * seq * (1 + e) };
        // gpt-oss builds a full and a sliding-window 4-D mask (modeling_gpt_oss.py causal_mask_mapping).
        let mask = if m.attention.sinks && kernel == Kernel::Eager && m.sliding_layers > 0 { 2 * mask } else { mask };
        bd.add(
            FWD_TMP,
            act::forward_transient_sq(m, job, kernel) * sq_elems + mask + ms.dequant,
            "masked attention scores feeding the softmax, and the causal mask",
        );
        out.push(bd);
    }

    // Mamba: inside the last layer's selective scan, `deltaB_u` (fp32 [B, D, L, N], not saved)
    // exists beside everything saved so far; under checkpointing the layer's own saved tensors
    // exist too, built for the forward and dropped after it (modeling_mamba.py).
    if let Some(s) = m.ssm {
        let mut bd = Breakdown::new(Phase::ForwardLayer);
        base(&mut bd);
        bd.add(CASTS, casts_fwd, "half copies of the weights used so far (autocast cache)");
        add_activations(&mut bd, layers);
        let inside = if ckpt == Checkpointing::Full { layer_bytes(&act::layer(m, job, kernel, m.layers.saturating_sub(1))) } else { 0 };
        let (scan, what) = match (s.delta_net, s.mamba2) {
            (Some(dn), _) => (
                act::delta_net_forward_transient(m, dn) * t,
                "the last linear-attention layer's chunked delta rule: its fp32 output and solved values",
            ),
            // Mamba-2: inside the chunked scan, segment_sum's fp32 [B, H, c, L, L] expansion,
            // masked copies and cumsum beside what the layer has saved so far.
            (None, Some(m2)) => (
                act::MAMBA2_FORWARD * m2.heads as u128 * m2.chunk as u128 * t,
                "the last layer's chunked scan: segment_sum's fp32 [B, H, chunks, L, L] temporaries",
            ),
            (None, None) => (4 * s.d_inner as u128 * s.d_state as u128 * t, "the last layer's selective scan: deltaB_u, fp32 [B, D, L, N]"),
        };
        bd.add(FWD_TMP, scan + inside, what);
        out.push(bd);
    }

    // DoRA: inside the last layer's forward, the widest adapted module rebuilds its weight norm.
    if ms.dora_transient > 0 {
        let mut bd = Breakdown::new(Phase::ForwardLayer);
        base(&mut bd);
        bd.add(CASTS, casts_fwd, "half copies of the weights used so far (autocast cache)");
        add_activations(&mut bd, layers);
        bd.add(
            DORA_TMP,
            ms.dora_transient,
            "DoRA weight-norm temporaries of the widest adapted module (identity, LoRA weight, fp32 base weight)",
        );
        out.push(bd);
    }

    // End of forward: loss computed inside autocast; the whole weight cache is alive.
    let mut fwd = Breakdown::new(Phase::ForwardEnd);
    base(&mut fwd);
    fwd.add(CASTS, casts_fwd, "half copies of every matmul weight (autocast cache, alive until autocast exits)");
    add_activations(&mut fwd, layers);
    let other_detail = if m.encoder.is_some() {
        "embeddings' LayerNorm and dropout, the head's saved inputs"
    } else {
        "final norm, lm_head input, rotary cos/sin"
    };
    fwd.add(ACT_OTHER, outside, other_detail);
    fwd.add(LOGITS, logits_fwd, logits_detail.clone());
    fwd.add(
        CACHE,
        act::training_cache_extra(m, job) * t * act::training_cache_layers(m),
        "fp32 keys and values the training-time DynamicCache holds until the model output is dropped (use_cache)",
    );
    out.push(fwd);

    // Start of backward: cross-entropy gradient; casts survive only where a matmul saved them.
    let casts_saved = if ckpt == Checkpointing::Full { head_cast } else { casts_all };
    let mut bs = Breakdown::new(Phase::BackwardStart);
    base(&mut bs);
    bs.add(CASTS, casts_saved, "half weight copies saved by matmuls for backward");
    add_activations(&mut bs, layers);
    bs.add(ACT_OTHER, outside, other_detail);
    bs.add(LOGITS, logits_bwd, logits_detail);
    out.push(bs);

    // Backward through each decoder layer, last to first; keep the worst. The walk is numeric
    // (prefix sums); the named breakdown is built once, for the worst layer.
    let head_grad = ms.head_grad; // lm_head (or tied embedding) gradient appears first
                                  // optimizer_in_bwd steps one parameter at a time inside backward: its own gradient and the
                                  // step's per-parameter temporaries (the for-loop implementation's) are what is added.
    let in_bwd_step = if job.optimizer_in_bwd {
        let one = Job { optimizer_impl: crate::job::OptimizerImpl::ForLoop, ..job.clone() };
        optimizer::step_temporaries(m, &one) / shards + layer_grads.iter().max().copied().unwrap_or(0) / shards / m.layers.max(1) as u128
    } else {
        0
    };
    let layer_walk = |l: usize, bd: Option<&mut Breakdown>| -> u128 {
        // optimizer_in_bwd: each gradient is stepped and freed as soon as it is produced
        // (torchtune training/_optimizer_in_backward: a post-accumulate-grad hook per parameter).
        let grads = if accum || job.optimizer_in_bwd { 0 } else { (layer_grads[l + 1..].iter().sum::<u128>() + head_grad) / shards };
        let casts_left: u128 = if ckpt == Checkpointing::Full { 0 } else { layer_casts[..=l].iter().sum() };
        let recomputed = if ckpt == Checkpointing::Full { layer_bytes(&act::layer(m, job, kernel, l as u64)) + layer_casts[l] } else { 0 };
        // Zamba and Zamba2 checkpoint a hybrid layer as one unit (modeling_zamba.py
        // ZambaHybridLayer: the shared block, its `linear` and the Mamba layer): recomputing a
        // mixer that follows the shared block rebuilds the block's activations beside its own
        // (validation/ssm.py zamba-dev-8l checkpointed: −15% without; Zamba2's checkpointed
        // points peak elsewhere and do not move).
        let recomputed = recomputed
            + match (ckpt, m.ssm) {
                (Checkpointing::Full, Some(s)) if s.shared.is_some() && m.is_ssm_layer(l as u64) => {
                    layer_bytes(&act::layer(m, job, kernel, 0)) + layer_casts[0]
                }
                _ => 0,
            };
        let (tr_tok, tr_sq) = act::backward_transient(m, job, kernel, l as u64);
        // AMP: the half gradient of each weight copy before it is cast into the fp32 .grad;
        // accumulation: the fresh gradient before it is added into the existing one.
        let grad_tmp = ms.layer_grad_tmp[l] + if accum { layer_grads[l] / shards } else { 0 };
        // Under checkpointing the recomputed forward rebuilds DoRA's weight norms too, before the
        // layer's backward ops run: the larger of the two transients, not their sum.
        let dora = if ckpt == Checkpointing::Full { ms.dora_transient.max(ms.lora_forward) } else { 0 };
        let tmp = (tr_tok * t + tr_sq * sq_elems + grad_tmp + ms.dequant + in_bwd_step).max(dora);
        let saved: u128 = layer_saved[..=l].iter().sum();
        match bd {
            None => grads + casts_left + recomputed + tmp + saved + rope_per_pos * seq + embeddings,
            Some(bd) => {
                base(bd);
                if !accum {
                    bd.add(GRADS, grads, format!("gradients of the lm_head and the {} layers already back-propagated", layers - l - 1));
                }
                bd.add(CASTS, casts_left, "half weight copies still saved by layers not yet back-propagated");
                add_activations(bd, l + 1);
                bd.add(ACT_OTHER, rope_per_pos * seq + embeddings, "rotary cos/sin; an encoder's embeddings (back-propagated last)");
                bd.add(ACT_RECOMP, recomputed, "one decoder layer's activations, recomputed for its backward");
                bd.add(BWD_TMP, tmp, "residual gradients, the widest op's input gradients, fresh weight gradients");
                bd.total()
            }
        }
    };
    if let Some(worst) = (0..layers).rev().max_by_key(|l| (layer_walk(*l, None), std::cmp::Reverse(*l))) {
        let mut bd = Breakdown::new(Phase::Backward);
        layer_walk(worst, Some(&mut bd));
        out.push(bd);
    }

    // End of backward: the embedding gradient is created last (embedding_dense_backward). When the
    // weight already has a .grad (tied LM head, or gradient accumulation), AccumulateGrad adds the
    // two out of place (aten.add.Tensor, seen on real and fake tensors): the old gradient, the new
    // one and their sum exist at once.
    let mut be = Breakdown::new(Phase::BackwardEnd);
    be.add(PARAMS, weights, ms.weights_detail.clone());
    be.add(ADAPTERS, ms.adapters, ms.adapters_detail.clone());
    be.add(STATES, states, format!("{} states", job.optimizer.name()));
    be.add(INPUT, input, "input batch");
    if !job.optimizer_in_bwd {
        be.add(GRADS, grads_all, ms.grads_detail.clone());
    }
    let emb_tmp = if ms.embedding_trained && (m.tied_embeddings || accum) { 2 * v * ed * p / shards } else { 0 };
    be.add(BWD_TMP, emb_tmp, "new embedding gradient and its out-of-place sum with the existing .grad");
    out.push(be);

    // Optimizer step (none after backward under optimizer_in_bwd).
    let mut os = Breakdown::new(Phase::OptimizerStep);
    os.add(PARAMS, weights, ms.weights_detail.clone());
    os.add(ADAPTERS, ms.adapters, ms.adapters_detail.clone());
    os.add(GRADS, grads_all, ms.grads_detail.clone());
    os.add(STATES, states, format!("{} states", job.optimizer.name()));
    os.add(INPUT, input, "input batch");
    os.add(
        OPT_TMP,
        optimizer::step_temporaries(m, job) / shards,
        format!("{} {:?} step temporaries", job.optimizer.name(), job.optimizer_impl),
    );
    if !job.optimizer_in_bwd {
        out.push(os);
    }

    if job.seq > 0 && b.amp && casts_all > 4 * GIB as u128 {
        notes.push("under autocast, half copies of the weights are cached during forward and saved for backward".into());
    }
    if job.base.is_some_and(crate::peft::BaseWeights::is_bnb) && m.moe.as_ref().is_some_and(|moe| moe.dense_dispatch) {
        let experts: u128 =
            super::inventory(m).iter().filter(|t| t.role == crate::model::Role::Experts).map(|t| t.numel as u128 * t.count as u128).sum();
        notes.push(format!(
            "QLoRA on Llama 4: bitsandbytes quantizes nn.Linear layers only, so the {experts} stacked expert parameters stay unquantized, peft's kbit preparation upcasts them to fp32 ({:.1} GiB), and under autocast every MoE layer's bmm saves their half copy for backward; gradient checkpointing keeps one layer's",
            (experts * 4) as f64 / GIB as f64
        ));
    }
    (out, kernel, notes)
}

/// The model-state side of a training step: parameters, gradients, optimizer states and the
/// half copies of weights autocast makes, whole and per layer.
pub(crate) struct ModelStates {
    pub weights: u128,
    pub weights_detail: String,
    /// Trainable parameters kept apart from `weights` (LoRA adapters, modules_to_save copies).
    pub adapters: u128,
    pub adapters_detail: String,
    pub grads: u128,
    pub grads_detail: String,
    pub states: u128,
    /// Half copy of the LM head weight (autocast), saved for backward.
    pub head_cast: u128,
    /// All half weight copies alive at the end of forward.
    pub casts: u128,
    /// Of those, the ones the autocast cache holds (leaf weights that require grad), which full
    /// checkpointing does not drop: all of them in full fine-tuning.
    pub casts_cached: u128,
    /// Gradient bytes of each decoder layer's trainable parameters.
    pub layer_grads: Vec<u128>,
    /// Half weight copies each layer's matmuls save.
    pub layer_casts: Vec<u128>,
    /// Gradient temporaries of one layer's backward (the half gradient of each weight copy
    /// before it is cast into the fp32 `.grad`).
    pub layer_grad_tmp: Vec<u128>,
    /// Gradient of the LM head (or the tied embedding), the first one backward creates.
    pub head_grad: u128,
    /// Whether the token embedding gets a gradient.
    pub embedding_trained: bool,
    /// A weight dequantized for its matmul (bitsandbytes bases), alive inside one linear.
    pub dequant: u128,
    /// DoRA's weight-norm temporaries of the widest adapted module, alive inside one layer's forward.
    pub dora_transient: u128,
    /// LoRA: the widest adapted module's forward outputs (base, scaled adapter, sum), bytes.
    pub lora_forward: u128,
}

/// Full fine-tuning: every parameter trained in the parameter dtype.
fn full_states(m: &Model, job: &Job, b: &Bytes, shards: u128) -> ModelStates {
    let tensors = super::inventory(m);
    let p = b.p;
    let n_params: u128 = tensors.iter().map(|t| t.numel as u128 * t.count as u128).sum();
    let (head_rows, head_cols) = m.head_matrix();
    let head = head_rows as u128 * head_cols as u128;
    // Autocast caches a half copy of every weight a matmul reads (linear layers, experts, the
    // LM head — the tied embedding too); the copies are saved by the matmuls for backward.
    // Stacked experts are not cast: transformers 5 runs them with grouped_mm, which autocast
    // does not cover, and casts the input to the weights' dtype instead (integrations/moe.py
    // _grouped_mm; measured: validation/ssm.py granite-h-moe-dev-8l, gpt-oss).
    // Llama 4's experts are two torch.bmm calls, which autocast casts (and caches) as any matmul.
    let uncast_experts = m.moe.as_ref().is_some_and(|moe| !moe.dense_dispatch);
    let matmul = |ts: &[TensorGroup]| -> u128 {
        ts.iter()
            .filter(|t| matches!(t.role, Role::Linear | Role::Router) || (t.role == Role::Experts && !uncast_experts))
            .map(|t| t.numel as u128 * t.count as u128)
            .sum()
    };
    let head_cast = if b.amp { 2 * head / shards } else { 0 };
    let casts = if b.amp { 2 * matmul(&tensors) + head_cast } else { 0 } / shards;
    let dense_params = (0..m.layers).find(|i| !m.is_moe_layer(*i)).map_or(0, |i| m.layer_parameters(i) as u128);
    let moe_params = (0..m.layers).find(|i| m.is_moe_layer(*i)).map_or(0, |i| m.layer_parameters(i) as u128);
    // A hybrid's attention and mixer layers differ: count each layer's own parameters.
    let layer_grads: Vec<u128> = (0..m.layers)
        .map(|i| {
            p * if m.is_hybrid() {
                m.layer_parameters(i) as u128
            } else if m.is_moe_layer(i) {
                moe_params
            } else {
                dense_params
            }
        })
        .collect();
    // Half copies of a layer's matmul weights (norm weights and biases are not cast).
    let layer_casts: Vec<u128> = (0..m.layers).map(|i| if b.amp { 2 * matmul(&m.layer_inventory(i)) } else { 0 }).collect();
    ModelStates {
        weights: n_params * p / shards,
        weights_detail: format!("{n_params} parameters × {p} B ({})", job.precision.param_dtype().torch_name()),
        adapters: 0,
        adapters_detail: String::new(),
        grads: n_params * p / shards, // .grad matches the parameter dtype
        grads_detail: format!("{n_params} gradients × {p} B"),
        states: if optimizer::paged(job) { 0 } else { optimizer::states(m, job) / shards },
        head_cast,
        casts,
        casts_cached: casts,
        layer_grad_tmp: layer_casts.clone(),
        layer_grads,
        layer_casts,
        head_grad: head * p,
        embedding_trained: true,
        dequant: 0,
        dora_transient: 0,
        lora_forward: 0,
    }
}

/// Activation-side quantities of one micro-batch, for engines that lay out model states their
/// own way (DeepSpeed, FSDP, DDP across GPUs): everything but parameters, gradients, optimizer
/// states and autocast copies, from the same formulas as the single-GPU walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivationProfile {
    /// Saved activations of all decoder layers (or their checkpointed inputs) plus the final
    /// norm, LM-head input and rotary tables.
    pub saved: u128,
    /// The part of `saved` outside the layers (final norm, LM-head input, rotary tables).
    pub outside: u128,
    /// Logits and cross-entropy at the start of backward.
    pub logits: u128,
    /// Largest backward transient of one layer (incl. recomputation under checkpointing).
    pub backward_transient: u128,
    /// Input batch.
    pub input: u128,
}

/// The activation profile of `job` on one GPU (its micro-batch and sequence).
pub fn activation_profile(m: &Model, job: &Job) -> ActivationProfile {
    let (phases, _, _) = phases(m, job);
    let get = |phase: Phase, names: &[&str]| -> u128 {
        phases
            .iter()
            .filter(|p| p.phase == phase)
            .flat_map(|p| p.parts.iter())
            .filter(|(n, _, _)| names.contains(n))
            .map(|(_, b, _)| *b)
            .sum()
    };
    let acts = [ACT_ATTN, ACT_MLP, ACT_SSM, ACT_DELTA, ACT_NORM, ACT_CKPT, ACT_OTHER];
    ActivationProfile {
        saved: get(Phase::BackwardStart, &acts),
        outside: get(Phase::BackwardStart, &[ACT_OTHER]),
        logits: get(Phase::BackwardStart, &[LOGITS]),
        backward_transient: get(Phase::Backward, &[BWD_TMP, ACT_RECOMP]),
        input: get(Phase::OptimizerStep, &[INPUT]),
    }
}
