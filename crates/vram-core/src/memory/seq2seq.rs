//! An encoder-decoder model (Whisper, BART, T5): the decoder's own phases — its layers carry
//! the cross-attention over the encoder output (activations.rs `cross_attention`) — with the
//! encoder added where it is alive.
//!
//! Order of a training step (transformers models/whisper/modeling_whisper.py,
//! models/bart/modeling_bart.py, models/t5/modeling_t5.py): the frontend (Whisper's audio
//! convs, or the shared token embedding) and the encoder run first; their saved activations and the encoder output (which
//! every decoder layer's k/v projections read) stay alive through the decoder's forward and
//! backward; the encoder's backward comes last, after the gradient of its output has been summed
//! over all decoder layers. Encoder gradients therefore appear only at the end.

use super::activations::{self as act};
use super::train::{self, ActivationProfile};
use super::{optimizer, Breakdown, Phase};
use crate::job::{Job, Mode};
use crate::model::{Frontend, Model, Norm, Role, Seq2Seq};

const ENC: &str = "encoder parameters";
const ENC_GRADS: &str = "encoder gradients";
const ENC_STATES: &str = "encoder optimizer states";
const ENC_CASTS: &str = "encoder autocast copies";
const ENC_ACTS: &str = "activations: encoder (frontend, layers, output)";
const ENC_BWD: &str = "encoder backward temporaries";
const FEATURES: &str = "input features";
const SOURCE_IDS: &str = "source input_ids and attention_mask";
const DEC_EMB: &str = "activations: decoder embeddings";
const BIAS: &str = "activations: relative position bias";
const CROSS_MASKS: &str = "activations: cross-attention masks";
const EMB_BWD: &str = "shared embedding gradient accumulation";
const ENC_FWD: &str = "encoder forward (no grad)";
const DEC_FWD: &str = "decoder forward (no grad)";

/// Bytes the frontend saves per sample. Audio (Whisper): conv1's input (a half copy of the
/// fp32 features under autocast), each GELU's input and conv2's input (the first GELU's
/// output). Text: what the encoder saves outside its layers, [`text_outside`]. Under LoRA the
/// frozen frontend has no gradient path (nothing before the first adapter requires grad): it
/// saves nothing — unless checkpointing, for which `enable_input_require_grads` hooks every
/// input embedding, WhisperEncoder's conv1 and the shared token embedding included
/// (transformers modeling_utils.py; measured on whisper-small and bart-base-3l).
fn frontend_saved(s: &Seq2Seq, job: &Job) -> u128 {
    let e = job.precision.compute_dtype().bytes() as u128;
    let amp = job.precision.is_mixed();
    let d = s.encoder.hidden as u128;
    let (frames, src) = (s.frames() as u128, s.source_tokens as u128);
    match s.frontend {
        Frontend::Audio { .. } if frozen_inputs(job) => 0,
        Frontend::Audio { mel_bins } => {
            let copy = if amp { 2 * mel_bins as u128 * frames } else { 0 };
            copy + e * d * frames * 2 + e * d * src
        }
        Frontend::Text => text_outside(&s.encoder, job, true) * src,
    }
}

/// Bytes per token a text stack saves outside its layers beyond what the decoder-only
/// accounting (activations.rs `outside_layers`) counts. Embeddings save their int64 indices
/// (the decoder's come from shifting the labels, BART's positions from an arange: new tensors;
/// the encoder's input_ids are the batch's); BART's `layernorm_embedding` saves its input
/// (fp32 under autocast) and row statistics; T5's stacks end with a dropout after the final
/// norm (a mask). An encoder's own final norm and embedding dropout are counted here too.
/// Under LoRA the frozen embeddings are not recorded by autograd: only what follows the
/// adapted layers (the final norm, T5's final dropout) saves.
fn text_outside(m: &Model, job: &Job, encoder: bool) -> u128 {
    let b = act::Bytes::of(m, job);
    let lora = frozen_inputs(job);
    let h = m.hidden as u128;
    let dropout = if m.hidden_dropout > 0.0 { h } else { 0 };
    let mut tok = if encoder || lora { 0 } else { 8 };
    if m.embedding_norm && !lora {
        // BartLearnedPositionalEmbedding's position ids [batch, seq] (the encoder's; the
        // decoder's are [1, seq]), then the LayerNorm over the fp32 sum.
        tok += if encoder { 8 } else { 0 } + b.norm(m.norm, b.r).0 * h + 8;
    }
    if m.relative_buckets > 0 {
        tok += dropout;
    }
    if encoder {
        tok += if lora { 0 } else { dropout };
        if m.final_norm {
            // T5LayerNorm's saved tensors (activations.rs Bytes::norm), its rsqrt per row.
            let stats = if matches!(m.norm, Norm::LayerNorm { .. }) { 8 } else { 4 };
            tok += b.norm(m.norm, b.r).0 * h + stats;
        }
    }
    tok
}

/// Whether the embeddings' outputs do not require grad: a LoRA job without checkpointing.
fn frozen_inputs(job: &Job) -> bool {
    job.lora.is_some() && job.checkpointing == crate::job::Checkpointing::None
}

/// T5's relative position bias as the layers keep it, (encoder, decoder). Each stack's first
/// self-attention looks up [q, k, heads] values (parameter dtype; the int64 buckets saved by
/// the lookup) and passes the permuted view to every layer; each layer's SDPA call makes it
/// contiguous (the decoder's under a causal `torch.where`) — a new tensor per layer, cast to
/// half under autocast — and keeps that as its `attn_mask` for backward
/// (integrations/sdpa_attention.py create_position_bias_mask). The decoder's cross-attention
/// bias is one contiguous zeros tensor in the compute dtype, shared by every layer
/// (modeling_t5.py T5Attention.forward). Checkpointed layers keep only what they were given.
fn relative_bias(m: &Model, s: &Seq2Seq, job: &Job) -> (u128, u128) {
    if m.relative_buckets == 0 {
        return (0, 0);
    }
    let (src, tgt) = (s.source_tokens as u128, job.seq as u128);
    // The bias table's dtype: the parameters' (a LoRA base's), whose per-layer copies need no
    // autocast cast when already half.
    let p = match job.lora {
        Some(_) => super::lora::base_dtype(job).bytes() as u128,
        None => job.precision.param_dtype().bytes() as u128,
    };
    let e = job.precision.compute_dtype().bytes() as u128;
    let per_layer = match job.checkpointing {
        crate::job::Checkpointing::None if job.precision.is_mixed() => e,
        crate::job::Checkpointing::None => p,
        _ => 0,
    };
    let (enc, dec) = (s.encoder.heads as u128 * src * src, m.heads as u128 * tgt * tgt);
    let enc_bytes = enc * (p + per_layer * s.encoder.layers as u128) + 8 * src * src;
    let dec_bytes = dec * (p + per_layer * m.layers as u128) + 8 * tgt * tgt + e * m.heads as u128 * tgt * src;
    (enc_bytes, dec_bytes)
}

/// The encoder's input as the batch holds it: Whisper's fp32 log-mel features, or the source
/// input_ids and attention_mask (int64), with their component name and description.
fn encoder_input(s: &Seq2Seq, batch: u128) -> (&'static str, u128, &'static str) {
    match s.frontend {
        Frontend::Audio { mel_bins } => (FEATURES, batch * mel_bins as u128 * s.frames() as u128 * 4, "fp32 log-mel input features"),
        Frontend::Text => (SOURCE_IDS, 2 * batch * s.source_tokens as u128 * 8, "int64 source ids and mask"),
    }
}

/// The encoder's model states: its parameters (with Whisper's convs), optimizer states,
/// gradients, autocast weight copies and step temporaries.
struct EncoderStates {
    params: u128,
    params_detail: String,
    states: u128,
    states_detail: String,
    grads: u128,
    casts: u128,
    step_tmp: u128,
}

fn encoder_states(s: &Seq2Seq, job: &Job, ej: &Job) -> EncoderStates {
    let enc = &s.encoder;
    let h = enc.hidden as u128;
    let enc_params = s.encoder_parameters() as u128;
    let conv = enc_params - enc.parameters() as u128;
    if job.lora.is_some() {
        // LoRA: the frozen base in its dtype (the convs too), the adapters of the encoder's
        // targets trained (lora.rs model_states on the encoder stack).
        let ms = super::lora::model_states(enc, ej, &act::Bytes::of(enc, ej));
        let base = super::lora::base_dtype(job).bytes() as u128;
        return EncoderStates {
            params: ms.weights + ms.adapters + conv * base,
            params_detail: format!("{enc_params} frozen parameters × {base} B, and the adapters"),
            states: ms.states,
            states_detail: format!("{} states of the encoder's adapters", job.optimizer.name()),
            grads: ms.grads,
            casts: ms.casts,
            step_tmp: 0,
        };
    }
    let p = job.precision.param_dtype().bytes() as u128;
    // WhisperEncoder.embed_positions is frozen (requires_grad_(False)): no gradient, no states.
    // BART's learned positions train; T5 has none.
    let positions = if s.text() { 0 } else { enc.position_embeddings as u128 * h };
    let trainable = enc_params - positions;
    let (state_pp, tmp_pp) = optimizer::per_parameter(enc, job);
    let matrices: u128 = enc.tensors().iter().filter(|t| t.role == Role::Linear).map(|t| t.numel as u128 * t.count as u128).sum();
    let frozen = if positions > 0 { " (positions frozen)" } else { "" };
    EncoderStates {
        params: enc_params * p,
        params_detail: format!("{enc_params} parameters × {p} B"),
        states: if optimizer::paged(job) { 0 } else { trainable * state_pp },
        states_detail: format!("{} states of {trainable} trainable encoder parameters{frozen}", job.optimizer.name()),
        grads: trainable * p,
        casts: if job.precision.is_mixed() { 2 * (matrices + conv) } else { 0 },
        step_tmp: trainable * tmp_pp,
    }
}

pub(crate) fn phases(m: &Model, job: &Job) -> (Vec<Breakdown>, act::Kernel, Vec<String>) {
    let s = m.seq2seq.as_ref().expect("an encoder-decoder model");
    let enc = &s.encoder;
    let batch = job.batch as u128;
    let src_t = batch * s.source_tokens as u128;
    let (input_name, features, input_what) = encoder_input(s, batch);
    // Whisper's encoder takes fixed-length audio: no padding mask reaches it; a padded text
    // batch masks the source as it masks the target.
    let ej = Job { batch: job.batch, seq: s.source_tokens, padded: job.padded && s.text(), ..job.clone() };
    let notes_head = match s.frontend {
        Frontend::Audio { .. } => format!(
            "encoder-decoder: the encoder runs {} positions per sample ({} mel frames), the decoder {} tokens; every decoder layer's cross-attention keeps K and V of all {} encoder positions",
            s.source_tokens,
            s.frames(),
            job.seq,
            s.source_tokens
        ),
        Frontend::Text => format!(
            "encoder-decoder: the encoder runs {} source tokens per sample, the decoder {} target tokens; every decoder layer's cross-attention keeps K and V of all {} source positions",
            s.source_tokens, job.seq, s.source_tokens
        ),
    };
    if job.mode == Mode::Infer {
        return inference(m, s, job, (input_name, features, input_what), notes_head);
    }
    let (mut phases, kernel, mut notes) = train::phases(m, job);
    notes.insert(0, notes_head);
    let e = job.precision.compute_dtype().bytes() as u128;
    let h = enc.hidden as u128;
    let st = encoder_states(s, job, &ej);
    let profile: ActivationProfile = train::activation_profile(enc, &ej);
    // The encoder output (its final norm's, fp32 under autocast) stays referenced by the model
    // output while the decoder runs.
    // The encoder output: its final norm's (LayerNorm: fp32 under autocast), else the residual.
    let b_enc = act::Bytes::of(enc, &ej);
    let r = if enc.final_norm { b_enc.norm(enc.norm, b_enc.r).1 } else { b_enc.r };
    let out = src_t * h * r;
    // A text encoder's outside-the-layers terms are its own (text_outside), not a decoder's.
    let layers_saved = if s.text() { profile.saved - profile.outside } else { profile.saved };
    let saved = layers_saved + batch * frontend_saved(s, job) + out;
    let dec_emb = batch * job.seq as u128 * if s.text() { text_outside(m, job, false) } else { 0 };
    // A padded source hands each cross-attention SDPA call the encoder's (batch, 1, tgt, src)
    // mask, which it turns into a float bias and keeps (as for self-attention: activations.rs
    // padded_mask).
    let cross_masks = if act::padded_mask(job) && s.text() { m.layers as u128 * job.seq as u128 * src_t * e } else { 0 };
    let (enc_bias, dec_bias) = relative_bias(m, s, job);
    for ph in &mut phases {
        ph.add(ENC, st.params, st.params_detail.clone());
        ph.add(ENC_STATES, st.states, st.states_detail.clone());
        ph.add(input_name, features, input_what);
        match ph.phase {
            Phase::BackwardEnd | Phase::OptimizerStep => {
                ph.add(ENC_GRADS, st.grads, "gradients of the encoder's trainable parameters");
                if ph.phase == Phase::OptimizerStep {
                    ph.add(train::OPT_TMP, st.step_tmp, "step temporaries of the encoder parameters");
                }
            }
            _ => {
                ph.add(ENC_CASTS, st.casts, "half copies of the encoder's matmul and conv weights");
                ph.add(ENC_ACTS, saved, format!("{src_t} encoder positions: frontend, {} layers, the output", enc.layers));
                ph.add(DEC_EMB, dec_emb, "decoder input ids from the shifted labels, BART's embedding LayerNorm, T5's final dropout");
                ph.add(CROSS_MASKS, cross_masks, "padded source: each cross-attention layer's float mask");
                ph.add(BIAS, enc_bias + dec_bias, "T5 relative position bias: fp32 per stack, a half copy per layer under autocast");
            }
        }
    }
    // After the decoder's backward: every decoder gradient, the encoder output's gradient summed
    // over the decoder layers, then one encoder layer's backward.
    let first = phases.first().cloned().unwrap_or_else(|| Breakdown::new(Phase::Backward));
    let end = phases.iter().find(|ph| ph.phase == Phase::BackwardEnd).cloned().unwrap_or_else(|| first.clone());
    let mut b = Breakdown::new(Phase::Backward);
    for name in [train::PARAMS, train::ADAPTERS, train::STATES] {
        b.add(name, first.get(name), "decoder");
    }
    b.add(train::GRADS, end.get(train::GRADS), "decoder gradients");
    b.add(ENC, st.params, "encoder");
    b.add(ENC_STATES, st.states, "encoder");
    b.add(input_name, features, input_what);
    b.add(ENC_CASTS, st.casts, "half copies of the encoder's weights");
    b.add(ENC_ACTS, saved, "the encoder's saved activations and output");
    b.add(BIAS, enc_bias, "the encoder's relative position bias");
    // The decoder's token embedding backward, when the embedding also serves as the LM head
    // (tied) or the encoder's input (shared): the gradient already accumulated, the embedding's
    // own dense gradient and their sum (torch autograd accumulates into a new tensor).
    // A frozen embedding (LoRA) has no gradient.
    let shared = (m.tied_embeddings || s.text()) && job.lora.is_none();
    if shared {
        let p = job.precision.param_dtype().bytes() as u128;
        let mut emb = b.clone();
        emb.add(EMB_BWD, 2 * m.vocab as u128 * m.embed_dim as u128 * p, "the token embedding's gradient and its accumulation");
        phases.push(emb);
    }
    // The encoder output's gradient: fp32 summed over the decoder layers under autocast of an
    // fp32 model, the residual dtype otherwise.
    let grad_out = if job.lora.is_none() { 4 } else { r };
    b.add(ENC_BWD, profile.backward_transient + src_t * h * grad_out, "the encoder output's gradient and one encoder layer's backward");
    phases.push(b);
    (phases, kernel, notes)
}

/// One no-grad forward of encoder and decoder with labels (an evaluation step of
/// Seq2SeqTrainer without generation): weights, the features, then the wider of the encoder's
/// forward and the decoder's, which holds the encoder output, the self- and cross-attention
/// caches, and the logits of every decoder position with the loss's log_softmax of them.
fn inference(
    m: &Model,
    s: &Seq2Seq,
    job: &Job,
    input: (&'static str, u128, &str),
    note: String,
) -> (Vec<Breakdown>, act::Kernel, Vec<String>) {
    let (kernel, kernel_note) = act::choose_kernel(m, job);
    let e: u128 = if job.precision == crate::job::Precision::Fp32 { 4 } else { 2 };
    let enc = &s.encoder;
    let batch = job.batch as u128;
    let (src_t, t) = (batch * s.source_tokens as u128, batch * job.seq as u128);
    let (h, ie, id) = (enc.hidden as u128, enc.intermediate as u128, m.intermediate as u128);
    let weights = m.parameters() as u128 * e;
    let frontend = if s.text() { 0 } else { batch * e * h * s.frames() as u128 * 2 };
    let encoder = (src_t * (3 * h + 2 * ie) * e).max(frontend);
    let enc_out = src_t * h * e;
    // The config's `use_cache` decides too (t5-small-ssm's is false).
    let caches = if s.labels_disable_cache || !m.use_cache { 0 } else { m.layers as u128 * 2 * m.kv_dim() as u128 * e * (src_t + t) };
    // With labels (an evaluation step) the loss's log_softmax output joins the logits.
    let decoder = enc_out + caches + (t * (3 * h + 2 * id) * e).max(2 * t * m.vocab as u128 * e);
    let mut bd = Breakdown::new(Phase::Prefill);
    bd.add(super::infer::WEIGHTS, weights, format!("{} parameters", m.parameters()));
    bd.add(input.0, input.1, input.2);
    bd.add(super::train::INPUT, 2 * t * 8, "decoder input ids and labels");
    if encoder >= decoder {
        bd.add(ENC_FWD, encoder, format!("{src_t} encoder positions through the widest op"));
    } else {
        bd.add(
            DEC_FWD,
            decoder,
            format!(
                "encoder output, self- and cross-attention caches of {} layers, {t} positions' logits and the loss's log-softmax",
                m.layers
            ),
        );
    }
    let notes = std::iter::once(note).chain(kernel_note).collect();
    (vec![bd], kernel, notes)
}
