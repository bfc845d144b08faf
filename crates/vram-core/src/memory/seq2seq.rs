//! An encoder-decoder model (Whisper): the decoder's own phases — its layers carry the
//! cross-attention over the encoder output (activations.rs `cross_attention`) — with the
//! encoder added where it is alive.
//!
//! Order of a training step (transformers models/whisper/modeling_whisper.py): the audio
//! frontend and the encoder run first; their saved activations and the encoder output (which
//! every decoder layer's k/v projections read) stay alive through the decoder's forward and
//! backward; the encoder's backward comes last, after the gradient of its output has been summed
//! over all decoder layers. Encoder gradients therefore appear only at the end.

use super::activations::{self as act};
use super::train::{self, ActivationProfile};
use super::{optimizer, Breakdown, Phase};
use crate::job::{Job, Mode};
use crate::model::{Model, Role, Seq2Seq};

const ENC: &str = "encoder parameters";
const ENC_GRADS: &str = "encoder gradients";
const ENC_STATES: &str = "encoder optimizer states";
const ENC_CASTS: &str = "encoder autocast copies";
const ENC_ACTS: &str = "activations: encoder (frontend, layers, output)";
const ENC_BWD: &str = "encoder backward temporaries";
const FEATURES: &str = "input features";
const ENC_FWD: &str = "encoder forward (no grad)";
const DEC_FWD: &str = "decoder forward (no grad)";

/// Bytes the audio frontend saves per sample for backward: conv1's input (a half copy of the
/// fp32 features under autocast), each GELU's input and conv2's input (the first GELU's output).
fn frontend_saved(s: &Seq2Seq, e: u128, amp: bool) -> u128 {
    let d = s.encoder.hidden as u128;
    let (mel, frames, src) = (s.mel_bins as u128, s.frames() as u128, s.source_tokens as u128);
    let copy = if amp { 2 * mel * frames } else { 0 };
    copy + e * d * frames * 2 + e * d * src
}

pub(crate) fn phases(m: &Model, job: &Job) -> (Vec<Breakdown>, act::Kernel, Vec<String>) {
    let s = m.seq2seq.as_ref().expect("an encoder-decoder model");
    let enc = &s.encoder;
    let batch = job.batch as u128;
    let src_t = batch * s.source_tokens as u128;
    let features = batch * s.mel_bins as u128 * s.frames() as u128 * 4;
    // Whisper's encoder takes fixed-length audio: no padding mask reaches it.
    let ej = Job { batch: job.batch, seq: s.source_tokens, lora: None, base: None, padded: false, ..job.clone() };
    let notes_head = format!(
        "encoder-decoder: the encoder runs {} positions per sample ({} mel frames), the decoder {} tokens; every decoder layer's cross-attention keeps K and V of all {} encoder positions",
        s.source_tokens, s.frames(), job.seq, s.source_tokens
    );
    if job.mode == Mode::Infer {
        return inference(m, s, job, features, notes_head);
    }
    let (mut phases, kernel, mut notes) = train::phases(m, job);
    notes.insert(0, notes_head);
    let p = job.precision.param_dtype().bytes() as u128;
    let e = job.precision.compute_dtype().bytes() as u128;
    let amp = job.precision.is_mixed();
    let h = enc.hidden as u128;
    let enc_params = s.encoder_parameters() as u128;
    // WhisperEncoder.embed_positions is frozen (requires_grad_(False)): no gradient, no states.
    let positions = enc.position_embeddings as u128 * h;
    let trainable = enc_params - positions;
    let (state_pp, tmp_pp) = optimizer::per_parameter(enc, job);
    let states = if optimizer::paged(job) { 0 } else { trainable * state_pp };
    let conv = enc_params - enc.parameters() as u128;
    let matrices: u128 = enc.tensors().iter().filter(|t| t.role == Role::Linear).map(|t| t.numel as u128 * t.count as u128).sum();
    let casts = if amp { 2 * (matrices + conv) } else { 0 };
    let profile: ActivationProfile = train::activation_profile(enc, &ej);
    // The encoder output (its final LayerNorm's, fp32 under autocast) stays referenced by the
    // model output while the decoder runs.
    let out = src_t * h * if amp { 4 } else { e };
    let saved = profile.saved + batch * frontend_saved(s, e, amp) + out;
    for ph in &mut phases {
        ph.add(ENC, enc_params * p, format!("{enc_params} parameters × {p} B"));
        ph.add(
            ENC_STATES,
            states,
            format!("{} states of {trainable} trainable encoder parameters (positions frozen)", job.optimizer.name()),
        );
        ph.add(FEATURES, features, "fp32 log-mel input features");
        match ph.phase {
            Phase::BackwardEnd | Phase::OptimizerStep => {
                ph.add(ENC_GRADS, trainable * p, format!("{trainable} gradients × {p} B"));
                if ph.phase == Phase::OptimizerStep {
                    ph.add(train::OPT_TMP, trainable * tmp_pp, "step temporaries of the encoder parameters");
                }
            }
            _ => {
                ph.add(ENC_CASTS, casts, "half copies of the encoder's matmul and conv weights");
                ph.add(ENC_ACTS, saved, format!("{src_t} encoder positions: frontend, {} layers, the output", enc.layers));
            }
        }
    }
    // After the decoder's backward: every decoder gradient, the encoder output's gradient summed
    // over the decoder layers (fp32), then one encoder layer's backward.
    let first = phases.first().cloned().unwrap_or_else(|| Breakdown::new(Phase::Backward));
    let dec_params: u128 = m.tensors().iter().map(|t| t.numel as u128 * t.count as u128).sum();
    let mut b = Breakdown::new(Phase::Backward);
    b.add(train::PARAMS, first.get(train::PARAMS), "decoder");
    b.add(train::STATES, first.get(train::STATES), "decoder");
    b.add(train::GRADS, dec_params * p, "decoder gradients");
    b.add(ENC, enc_params * p, "encoder");
    b.add(ENC_STATES, states, "encoder");
    b.add(FEATURES, features, "fp32 log-mel input features");
    b.add(ENC_CASTS, casts, "half copies of the encoder's weights");
    b.add(ENC_ACTS, saved, "the encoder's saved activations and output");
    b.add(ENC_BWD, profile.backward_transient + src_t * h * 4, "the encoder output's gradient and one encoder layer's backward");
    phases.push(b);
    (phases, kernel, notes)
}

/// One no-grad forward of encoder and decoder with labels (an evaluation step of
/// Seq2SeqTrainer without generation): weights, the features, then the wider of the encoder's
/// forward and the decoder's, which holds the encoder output, the self- and cross-attention
/// caches, and the logits of every decoder position with the loss's log_softmax of them.
fn inference(m: &Model, s: &Seq2Seq, job: &Job, features: u128, note: String) -> (Vec<Breakdown>, act::Kernel, Vec<String>) {
    let (kernel, kernel_note) = act::choose_kernel(m, job);
    let e: u128 = if job.precision == crate::job::Precision::Fp32 { 4 } else { 2 };
    let enc = &s.encoder;
    let batch = job.batch as u128;
    let (src_t, t) = (batch * s.source_tokens as u128, batch * job.seq as u128);
    let (h, ie, id) = (enc.hidden as u128, enc.intermediate as u128, m.intermediate as u128);
    let weights = m.parameters() as u128 * e;
    let frontend = batch * e * h * s.frames() as u128 * 2;
    let encoder = (src_t * (3 * h + 2 * ie) * e).max(frontend);
    let enc_out = src_t * h * e;
    let caches = m.layers as u128 * 2 * m.kv_dim() as u128 * e * (src_t + t);
    // With labels (an evaluation step) the loss's log_softmax output joins the logits.
    let decoder = enc_out + caches + (t * (3 * h + 2 * id) * e).max(2 * t * m.vocab as u128 * e);
    let mut bd = Breakdown::new(Phase::Prefill);
    bd.add(super::infer::WEIGHTS, weights, format!("{} parameters", m.parameters()));
    bd.add(FEATURES, features + 2 * t * 8, "fp32 log-mel features and decoder input ids");
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
