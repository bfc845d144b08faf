//! A CLIP/SigLIP dual encoder trained on image-text pairs: the text tower's own phases with
//! the vision tower added where it is alive.
//!
//! Order of a training step (transformers models/clip/modeling_clip.py `CLIPModel.forward`,
//! models/siglip `SiglipModel.forward`): the vision tower runs on the batch's images, then the
//! text tower on its captions; both pooled outputs are projected (CLIP) and normalised, and the
//! batch × batch similarities give the loss (CLIP: cross-entropy both ways; SigLIP: a sigmoid
//! over every pair). Backward runs the other way: the text tower first, then the vision tower.
//! So the vision tower's saved activations are alive through the whole text step, its
//! gradients appear only at the end, and its backward comes last — as a VLM's tower.

use super::activations as act;
use super::train::{self, ActivationProfile};
use super::{infer, optimizer, Breakdown, Phase};
use crate::job::{Checkpointing, Job, Mode};
use crate::model::{DualEncoder, Model};

const VISION: &str = "vision tower + projections parameters";
const VISION_GRADS: &str = "vision tower + projections gradients";
const VISION_STATES: &str = "vision tower + projections optimizer states";
const VISION_CASTS: &str = "vision tower + projections autocast copies";
const VISION_ACTS: &str = "activations: vision tower";
const VISION_BWD: &str = "vision tower backward temporaries";
const VISION_FWD: &str = "vision tower forward (no grad)";
const PIXELS: &str = "pixel_values";
const VISION_OUT: &str = "vision tower outputs";
const SIMILARITY: &str = "pooled embeddings & similarity matrix";

/// The vision tower as it runs for this job: one image per sample.
fn vision_job(d: &DualEncoder, job: &Job) -> Job {
    let vis = d.vision.encoder.and_then(|e| e.vision).expect("a dual encoder's vision tower is a vision encoder");
    Job { batch: job.batch, seq: vis.tokens(vis.image_size), lora: None, base: None, padded: false, ..job.clone() }
}

/// Bytes of the joint head at the loss: both pooled and projected embeddings, their norms, and
/// the batch × batch similarities with their loss intermediates, in fp32 (tiny next to the
/// towers; `logits_per_text`, its transpose is a view).
fn similarity_bytes(d: &DualEncoder, text_hidden: u64, batch: u64) -> u128 {
    let b = batch as u128;
    let widths = (d.vision.hidden + text_hidden + 2 * d.projection) as u128;
    4 * b * widths + 4 * 4 * b * b
}

pub(crate) fn phases(m: &Model, job: &Job) -> (Vec<Breakdown>, act::Kernel, Vec<String>) {
    let d = m.dual.as_ref().expect("a dual encoder");
    let text = Model { dual: None, ..m.clone() };
    let vj = vision_job(d, job);
    let mut notes = vec![format!(
        "{} image-text pairs: the text tower runs {} tokens per caption, the vision tower {} tokens per image",
        job.batch, job.seq, vj.seq
    )];
    let (mut phases, kernel, text_notes) = match job.mode {
        Mode::Train => train::phases(&text, job),
        Mode::Infer => infer::phases(&text, job),
    };
    notes.extend(text_notes);
    let p = job.precision.param_dtype().bytes() as u128;
    let e = job.precision.compute_dtype().bytes() as u128;
    let vision_params = d.vision.parameters() as u128;
    let joint = d.joint_parameters(m.hidden) as u128;
    let weights = (vision_params + joint) * if job.mode == Mode::Infer { e } else { p };
    let vis = d.vision.encoder.and_then(|e| e.vision).expect("a vision encoder");
    let pixels = vj.batch as u128 * vis.pixel_bytes();
    let sim = similarity_bytes(d, m.hidden, job.batch);
    if job.mode == Mode::Infer {
        infer_phases(&mut phases, d, &vj, weights, pixels);
        return (phases, kernel, notes);
    }
    let trained = !d.tower_frozen;
    let trainable = if trained { vision_params + joint } else { joint };
    let (state_pp, tmp_pp) = optimizer::per_parameter(&d.vision, job);
    let states = if optimizer::paged(job) { 0 } else { trainable * state_pp };
    // Autocast caches half copies of the trained matrices (leaves that require grad).
    let matrices: u128 = d.vision.tensors().iter().filter(|t| t.is_matrix()).map(|t| t.numel as u128 * t.count as u128).sum();
    // CLIP's projections are matrices too (SigLIP's text head is in the text tower).
    let joint_matrices = if d.family == crate::model::DualFamily::Clip { joint.saturating_sub(1) } else { 0 };
    let casts = if job.precision.is_mixed() { 2 * (joint_matrices + if trained { matrices } else { 0 }) } else { 0 };
    // A frozen tower saves nothing, unless checkpointing hooks its input embeddings
    // (enable_input_require_grads), as for a VLM's tower.
    let ckpt = job.checkpointing == Checkpointing::Full;
    let ckpt_frozen = !trained && ckpt;
    let profile = if trained || ckpt_frozen { train::activation_profile(&d.vision, &vj) } else { ActivationProfile::default() };
    for ph in &mut phases {
        ph.add(VISION, weights, format!("{vision_params} vision + {joint} joint parameters × {p} B"));
        ph.add(VISION_STATES, states, format!("{} states of {trainable} trainable parameters", job.optimizer.name()));
        ph.add(PIXELS, pixels, "fp32 images");
        match ph.phase {
            Phase::BackwardEnd | Phase::OptimizerStep => {
                ph.add(VISION_GRADS, trainable * p, format!("{trainable} gradients × {p} B"));
                if ph.phase == Phase::OptimizerStep {
                    ph.add(train::OPT_TMP, trainable * tmp_pp, "step temporaries of the vision tower and projections");
                }
            }
            // Under checkpointing no matmul saves its half weight: the copies die with the
            // autocast cache when the forward ends (train.rs does the same for the text tower).
            Phase::BackwardStart | Phase::Backward if ckpt => {
                ph.add(VISION_ACTS, profile.saved, format!("{} images × {} tokens (checkpointed)", vj.batch, vj.seq));
                ph.add(SIMILARITY, sim, format!("{0} × {0} similarities, fp32", job.batch));
            }
            _ => {
                ph.add(VISION_CASTS, casts, "half copies of trained vision weights");
                ph.add(VISION_ACTS, profile.saved, format!("{} images × {} tokens", vj.batch, vj.seq));
                ph.add(SIMILARITY, sim, format!("{0} × {0} similarities, fp32", job.batch));
            }
        }
    }
    if trained || ckpt_frozen {
        phases.push(vision_backward(&phases, &text, p, weights, states, pixels, if ckpt { 0 } else { casts }, &profile));
    }
    (phases, kernel, notes)
}

/// After the text tower's backward: every text gradient, the vision tower's saved activations
/// and one vision layer's backward.
#[allow(clippy::too_many_arguments)]
fn vision_backward(
    phases: &[Breakdown],
    text: &Model,
    p: u128,
    weights: u128,
    states: u128,
    pixels: u128,
    casts: u128,
    profile: &ActivationProfile,
) -> Breakdown {
    let first = phases.first();
    let mut b = Breakdown::new(Phase::Backward);
    b.add(train::PARAMS, first.map_or(0, |f| f.get(train::PARAMS)), "text tower");
    b.add(train::STATES, first.map_or(0, |f| f.get(train::STATES)), "text tower");
    b.add(train::GRADS, text.parameters() as u128 * p, "text tower gradients");
    b.add(VISION, weights, "vision tower and projections");
    b.add(VISION_STATES, states, "vision tower and projections");
    b.add(PIXELS, pixels, "fp32 images");
    b.add(VISION_CASTS, casts, "half copies of trained vision weights");
    b.add(VISION_ACTS, profile.saved, "the vision tower's saved activations");
    b.add(VISION_BWD, profile.backward_transient, "one vision layer's backward");
    b
}

/// Inference (`get_image_features` and `get_text_features` in one forward): the vision tower's
/// forward before the text tower's, the weights of both throughout.
fn infer_phases(phases: &mut Vec<Breakdown>, d: &DualEncoder, vj: &Job, weights: u128, pixels: u128) {
    // The vision model's output (last_hidden_state and the pooled vector) is returned in the
    // model's output, so it lives while the text tower runs (measured: validation/dual.py,
    // SigLIP base at 128 images: exactly its 36.75 MiB last_hidden_state).
    let e = vj.precision.compute_dtype().bytes() as u128;
    let outputs = vj.batch as u128 * (vj.seq as u128 + 1) * d.vision.hidden as u128 * e;
    for ph in phases.iter_mut() {
        ph.add(VISION, weights, "vision tower and projections");
        ph.add(PIXELS, pixels, "fp32 images");
        ph.add(VISION_OUT, outputs, "last_hidden_state and pooled output, kept in the model's output");
    }
    let (vph, _, _) = infer::phases(&d.vision, vj);
    if let Some(fwd) = vph.into_iter().next() {
        let mut b = Breakdown::new(Phase::Prefill);
        let text_weights = phases.first().map_or(0, |f| f.get(infer::WEIGHTS));
        b.add(infer::WEIGHTS, text_weights, "text tower");
        b.add(VISION, weights, "vision tower and projections");
        b.add(PIXELS, pixels, "fp32 images");
        // The tower's own phase holds its weights and pixels, counted above.
        let acts = fwd.total().saturating_sub(fwd.get(infer::WEIGHTS) + fwd.get(infer::INPUT));
        b.add(VISION_FWD, acts, format!("{} images × {} tokens through the tower", vj.batch, vj.seq));
        phases.push(b);
    }
}
