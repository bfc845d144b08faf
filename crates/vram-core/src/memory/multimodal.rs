//! A LLaVA-style vision-language model: the language model's own phases (its sequence holds
//! the image tokens) with the vision tower and projector added where they are alive.
//!
//! Order of a training step (transformers models/llava/modeling_llava.py): the tower runs first
//! on the batch's images, the projector maps the chosen hidden state into the language model's
//! width and `masked_scatter` places it at the image tokens; the language model runs; backward
//! goes through the language model, then the projector, then the tower (when it trains). So
//! the tower's and projector's saved activations are alive through the whole language-model
//! step, their gradients appear only at the end, and a trained tower adds its own backward.

use super::activations::{self as act};
use super::train::{self, ActivationProfile};
use super::{infer, optimizer, Breakdown, Phase};
use crate::job::{Checkpointing, Job, Mode};
use crate::model::{Model, Multimodal, ProjectorKind};
use crate::peft::{BaseWeights, KbitPrepare};

const TOWER: &str = "vision tower + projector parameters";
const TOWER_GRADS: &str = "vision tower + projector gradients";
const TOWER_STATES: &str = "vision tower + projector optimizer states";
const TOWER_CASTS: &str = "vision tower + projector autocast copies";
const TOWER_ACTS: &str = "activations: vision tower + projector";
const TOWER_BWD: &str = "vision tower backward temporaries";
const PIXELS: &str = "pixel_values";
const TOWER_FWD: &str = "vision tower forward (no grad)";
const HELD: &str = "image features held through the language model";
const EMBEDS: &str = "input embeddings";

/// The tower as it runs for this job: `batch × images × tiles` images, the layers up to the hidden
/// state the projector reads (a later layer's graph is dropped with the tower's output).
fn tower_job(mm: &Multimodal, job: &Job) -> (Model, Job) {
    let mut tower = mm.tower.clone();
    let used = (tower.layers as i64 + 1 + mm.feature_layer).clamp(1, tower.layers as i64) as u64;
    tower.layers = used;
    let vis = tower.encoder.and_then(|e| e.vision).expect("a LLaVA tower is a vision encoder");
    let images = job.batch.saturating_mul(mm.images).saturating_mul(mm.tiles());
    // Images are never padded: a padded batch's mask is the language model's.
    let mut j = Job { batch: images, seq: vis.tokens(vis.image_size), lora: None, base: None, padded: false, ..job.clone() };
    // CLIP's `pre_layrnorm` starts an fp32 residual stream under autocast whatever the weights'
    // dtype (Bytes::of), so only the other towers change.
    if job.lora.is_some() && vis.family != crate::model::VisionFamily::Clip {
        // Under LoRA the tower is frozen in the base dtype: no fp32 master weights, so its
        // residual stream (what checkpointing keeps per layer) is half, as in pure half
        // precision (measured: validation/vlm_lora.py, Gemma-3's 4,096-patch images).
        j.precision = match super::lora::base_dtype(job) {
            crate::dtype::DType::F32 => crate::job::Precision::Fp32,
            crate::dtype::DType::F16 => crate::job::Precision::Fp16,
            _ => crate::job::Precision::Bf16,
        };
    }
    (tower, j)
}

pub(crate) fn phases(m: &Model, job: &Job) -> (Vec<Breakdown>, act::Kernel, Vec<String>) {
    let mm = m.multimodal.as_ref().expect("a multimodal model");
    let lm = m.language_model();
    let (tower, tj) = tower_job(mm, job);
    // What the projector maps: every tile's tokens (LLaVA-NeXT), else the image tokens.
    let image_tokens = job.batch as u128 * mm.images as u128 * mm.projected_tokens() as u128;
    let mut notes = vec![format!(
        "{} image(s) per sample × {} tokens = {} of the {} tokens per sequence are image tokens; the vision tower runs {} images{} of {} tokens",
        mm.images,
        mm.image_tokens,
        mm.images * mm.image_tokens,
        job.seq,
        tj.batch,
        match (&mm.anyres, mm.shuffle) {
            (Some(a), _) => format!(" ({} tiles per image)", a.tiles),
            // The processor resizes every image to its longest edge, whatever the image's own size.
            (None, Some(s)) => format!(
                " ({} tiles per image: the processor resizes every image's longest edge to {} px, whatever its own size; --image-size sets that edge)",
                s.tiles, s.longest_edge
            ),
            (None, None) => String::new(),
        },
        tj.seq
    )];
    // Gemma-3: the processor's token_type_ids make image tokens attend bidirectionally within
    // their block, so transformers builds an explicit mask for every layer (modeling_gemma3.py
    // create_masks_for_vision_model): under SDPA each layer runs memory-efficient attention and
    // keeps the float bias made from the mask, as for a padded batch.
    // Training builds the language model's DynamicCache as a text decoder's does when its
    // text_config's `use_cache` is true: the wrappers pass None, which the language model's
    // merge_with_config_defaults fills from its own config (measured, validation/vlm.py at
    // batch 4–8 × 4096: llava-1.5-7b and LLaVA-NeXT +16 GiB at the end of forward, Qwen2-VL-2B
    // +1.75 GiB, gemma-3-4b +8.5 GiB). Gemma-3's saved tensors are estimated without it: the
    // text model's accounting of a cache under masks and GQA also changes what attention saves,
    // which moved gemma-3-4b +1.2% while its measured backward is the same with or without the
    // cache; the cache itself is added at the end of forward below.
    let padded = job.padded || (mm.block_mask && job.mode == Mode::Train);
    let no_cache = job.mode == Mode::Train && mm.block_mask;
    let lm_job = Job { padded, use_cache: Some(false).filter(|_| no_cache).or(job.use_cache), ..job.clone() };
    if mm.block_mask && job.mode == Mode::Train {
        notes.push("the processor's token_type_ids make the image tokens (PaliGemma: with the prefix) a bidirectional block, so every language-model layer gets an explicit (batch, 1, seq, seq) mask".into());
    }
    let (mut phases, kernel, lm_notes) = match job.mode {
        Mode::Train => train::phases(&lm, &lm_job),
        Mode::Infer => infer::phases(&lm, job),
    };
    if no_cache {
        // Gemma-3's cache itself, at the end of forward only (fp32 keys and values per layer,
        // measured: gemma-3-4b at 8 × 4096, +8.5 GiB there).
        let with_cache = Job { use_cache: job.use_cache, ..lm_job.clone() };
        let extra = act::training_cache_bytes(&lm, &with_cache, true) * job.batch as u128 * job.seq as u128 * lm.layers as u128;
        for ph in phases.iter_mut().filter(|p| p.phase == Phase::ForwardEnd) {
            ph.add(train::CACHE, extra, "fp32 keys and values the training-time DynamicCache holds until the model output is dropped");
        }
    }
    // The mask Gemma-3's token_type_ids bring is not a padded batch: its own note says why.
    let own_mask = padded && !job.padded;
    notes.extend(lm_notes.into_iter().filter(|n| !(own_mask && n.starts_with("padded batch"))));
    // LoRA adapts the language model only: tower and projector stay frozen in the base dtype
    // (LLaMA-Factory's and ms-swift's defaults for VLMs: freeze_vision_tower,
    // freeze_multi_modal_projector, targets inside the language model).
    let lora = job.lora.is_some();
    if job.base.is_some_and(BaseWeights::is_bnb) && job.mode == Mode::Train {
        notes.push("QLoRA: transformers' bitsandbytes rule quantizes every nn.Linear but lm_head, the vision tower's and the projector's too (llm_int8_skip_modules=[\"vision_tower\", …] keeps them in the base dtype, which vram does not model); their other parameters are fp32 after the kbit preparation".into());
    }
    if lora {
        notes.push("LoRA adapts the language model only: the vision tower and projector stay frozen (LLaMA-Factory's and ms-swift's defaults; peft's own default targets on LLaVA would also adapt the tower's q_proj/v_proj, which vram does not model)".into());
    }
    let p = if lora { super::lora::base_dtype(job).bytes() } else { job.precision.param_dtype().bytes() } as u128;
    let e = job.precision.compute_dtype().bytes() as u128;
    let amp = job.precision.is_mixed();
    let tower_params = mm.tower.parameters() as u128;
    let proj_params = mm.projector_parameters(m.hidden) as u128;
    let weights = match job.base.filter(|b| b.is_bnb() && job.mode == Mode::Train) {
        // QLoRA: transformers' bitsandbytes rule converts every nn.Linear but lm_head, the
        // tower's and the projector's too; prepare_model_for_kbit_training casts the rest (patch
        // conv, position table, norms) to fp32 (measured: validation/vlm_lora.py).
        // TRL's bf16 recast of a prepared model matches lm_head/embed_tokens/wte/wpe module names
        // only (trl/trainer/utils.py peft_module_casting_to_bf16), none of them in a tower: its
        // position table stays fp32 whichever trainer prepared it.
        Some(b) => {
            let peft_prepared = match b {
                BaseWeights::Bnb4 { quant_type, nested, compute, storage, .. } => {
                    BaseWeights::Bnb4 { quant_type, nested, compute, storage, prepare: KbitPrepare::Peft }
                }
                _ => BaseWeights::Bnb8 { prepare: KbitPrepare::Peft },
            };
            let tower_job = Job { base: Some(peft_prepared), ..job.clone() };
            super::lora::base_bytes(&mm.tower, &tower_job).0 + projector_qlora_bytes(mm, m.hidden, b)
        }
        None => (tower_params + proj_params) * if job.mode == Mode::Infer { e } else { p },
    };
    let vis = mm.tower.encoder.and_then(|e| e.vision).expect("a LLaVA tower is a vision encoder");
    // Idefics3's processor also returns `pixel_attention_mask`, int64 per pixel of every tile
    // (image_processing_idefics3.py make_pixel_mask), which the batch holds beside the images.
    let pixel_mask = if mm.shuffle.is_some() { tj.batch as u128 * 8 * vis.image_size as u128 * vis.image_size as u128 } else { 0 };
    let pixels = tj.batch as u128 * vis.pixel_bytes() + pixel_mask;
    if job.mode == Mode::Infer {
        // LLaVA and LLaVA-NeXT keep their image features while the language model runs
        // (modeling_llava*.py forward): the model's outputs dict holds the projected (NeXT: packed)
        // features and the tower's last and selected hidden states, and `image_features` is
        // their concatenated copy (measured: validation/vlm.py, llava-v1.6 prefill: 2 copies of
        // the features and 2 tower hidden states, to the byte).
        let llama4 = match mm.projector() {
            ProjectorKind::Llama4 { input } => Some(input),
            _ => None,
        };
        let held = match (mm.merger, mm.pool, llama4) {
            // Llama4ForConditionalGeneration.forward keeps the vision model's output (its
            // pixel-shuffle MLP's, in mm_encoder_outputs) and the projected features
            // (projected_vision_flat) until the language model has run (measured:
            // validation/llama4.py, the development prefills with the processor's bf16 pixels).
            (_, _, Some(vision_out)) => image_tokens_lm(mm, job) * (vision_out as u128 + m.hidden as u128) * e,
            (None, None, None) => {
                2 * (image_tokens_lm(mm, job) * m.hidden as u128 + tj.batch as u128 * tj.seq as u128 * mm.tower.hidden as u128) * e
            }
            // Qwen3-VL keeps its DeepStack features (one per merger, in the language model's
            // width) until the language model has run.
            (Some(pm), _, _) => pm.deepstack as u128 * image_tokens_lm(mm, job) * m.hidden as u128 * e,
            _ => 0,
        };
        for ph in &mut phases {
            ph.add(TOWER, weights, format!("{tower_params} + {proj_params} parameters"));
            ph.add(PIXELS, pixels, vis.pixel_label());
            if ph.phase == Phase::Prefill {
                let what = if mm.merger.is_some() {
                    "the DeepStack features"
                } else if llama4.is_some() {
                    "the vision model's output and the projected image features"
                } else {
                    "two copies of the image features and two tower hidden states"
                };
                ph.add(HELD, held, what);
            }
        }
        // Before the language model runs: its weights and the tower's forward.
        let (tph, _, _) = infer::phases(&tower, &tj);
        if let Some(fwd) = tph.into_iter().next() {
            let mut b = Breakdown::new(Phase::Prefill);
            b.add(
                infer::WEIGHTS,
                phases.first().map_or(0, |f| f.parts.iter().filter(|x| x.0 == infer::WEIGHTS).map(|x| x.1).sum()),
                "language model",
            );
            b.add(TOWER, weights, "vision tower and projector");
            // The tiles concatenated into one batch (LLaVA-NeXT/OneVision's 5-D pixel_values:
            // `torch.cat` of the per-image tiles, a copy), and the language
            // model's input embeddings, made before the tower runs (modeling_llava_next.py
            // forward; measured: validation/vlm.py, the OneVision-0.5B prefill peaks in the tower).
            // (The tower's own phase already holds the images and their half copy.)
            if mm.anyres.is_some() {
                b.add(PIXELS, pixels, "the tiles' concatenated fp32 copy");
            }
            // Idefics3Model.get_image_features keeps the real images' pixels (cast to the
            // weights' dtype, then indexed out: a copy) and pixel mask (indexed out of the
            // batch's: a copy, int64 per pixel) while the tower runs (measured:
            // validation/vlm.py, the SmolVLM prefills peak in the tower).
            if mm.shuffle.is_some() {
                b.add(
                    PIXELS,
                    2 * pixel_mask + tj.batch as u128 * vis.pixel_bytes() / vis.pixel_dtype_bytes() * e,
                    "the batch's pixel_attention_mask, the real tiles' copies of it and of the pixels",
                );
            }
            b.add(EMBEDS, job.batch as u128 * job.seq as u128 * m.hidden as u128 * e, "the language model's input embeddings");
            b.add(
                TOWER_FWD,
                fwd.total().saturating_sub(fwd.get(infer::WEIGHTS)),
                format!("{} images × {} tokens through the tower", tj.batch, tj.seq),
            );
            phases.push(b);
        }
        return (phases, kernel, notes);
    }
    let trained = !mm.tower_frozen && !lora;
    let trainable = match (lora, trained) {
        (true, _) => 0,
        (false, true) => tower_params + proj_params,
        (false, false) => proj_params,
    };
    let (state_pp, tmp_pp) = optimizer::per_parameter(&mm.tower, job);
    let states = if optimizer::paged(job) { 0 } else { trainable * state_pp };
    // Autocast caches half copies of trained weights only (leaves that require grad).
    let matmul_tower: u128 = mm.tower.tensors().iter().filter(|t| t.is_matrix()).map(|t| t.numel as u128 * t.count as u128).sum();
    let proj_matrix = projector_matrices(mm, m.hidden);
    let casts = if amp && !lora { 2 * (proj_matrix + if trained { matmul_tower } else { 0 }) } else { 0 };
    // Saved: the trained tower's activations (its own activation profile), and the projector's
    // (linear_1's input copy, the activation's input, linear_2's input: per image token).
    // A frozen tower saves nothing (pixels and weights need no gradient), except under gradient
    // checkpointing: transformers' enable_input_require_grads hooks every sub-model's input
    // embeddings, the tower's patch conv too, so its output requires grad and the checkpointed
    // layers keep their inputs and are recomputed in backward (measured: validation/vlm.py).
    // Qwen3-VL's tower names no input-embedding layer (Qwen2-VL's `_input_embed_layer` is its
    // patch conv), so the hooks miss it and a frozen Qwen3-VL tower saves nothing even then
    // (measured: validation/vlm.py and vlm_lora.py, the tower's output needs no gradient).
    let hooked = vis.family != crate::model::VisionFamily::Qwen3Vl;
    let ckpt_frozen = !trained && job.checkpointing == Checkpointing::Full && hooked;
    let mut tower_profile = if trained || ckpt_frozen { train::activation_profile(&tower, &tj) } else { ActivationProfile::default() };
    if trained && job.checkpointing != Checkpointing::Full {
        tower_profile.saved += qwen_attention_cat(mm, &tower, &tj, e);
    }
    if mm.shuffle.is_some() && (trained || ckpt_frozen) {
        // The tower's profile keeps its last_hidden_state (a bare vision model's output, which its
        // own loss would read); Idefics3's connector only reshapes it (copies, saving nothing)
        // and its linear saves the shuffled copy, so the final norm's output is freed after the
        // forward (measured: validation/vlm.py, SmolVLM's checkpointed points).
        let out = if tj.precision.is_mixed() { 4 } else { tj.precision.compute_dtype().bytes() as u128 };
        tower_profile.saved = tower_profile.saved.saturating_sub(tj.batch as u128 * tj.seq as u128 * mm.tower.hidden as u128 * out);
    }
    if let (Some(a), true) = (vis.adapter, trained || ckpt_frozen) {
        // Llama 4's pixel-shuffle MLP (modeling_llama4.py Llama4VisionPixelShuffleMLP), per
        // shuffled token: fc1's input (under autocast a half copy of the shuffled fp32 stream),
        // GELU's input, fc2's input and the second GELU's input; dropout at p = 0 is the identity.
        // The shuffle's two permute copies are transients, and `layernorm_post`'s output is read by
        // nothing else, so the tower profile's last_hidden_state is freed after the forward.
        let out = if tj.precision.is_mixed() { 4 } else { tj.precision.compute_dtype().bytes() as u128 };
        let tokens = tj.batch as u128 * (tj.seq as u128 - 1) / (a.shuffle * a.shuffle) as u128;
        let fc1_in = if amp { 2 } else { e };
        tower_profile.saved += tokens * (fc1_in * a.fc1_in as u128 + 2 * e * a.fc1_out as u128 + e * a.fc2_out as u128);
        tower_profile.saved = tower_profile.saved.saturating_sub(tj.batch as u128 * tj.seq as u128 * mm.tower.hidden as u128 * out);
    }
    // A frozen projector saves its inputs only when its output needs a gradient: under
    // checkpointing, whose input hooks make the tower's output require one.
    let bnb = job.base.is_some_and(BaseWeights::is_bnb);
    let projector_acts = match (lora && !ckpt_frozen, bnb) {
        (true, _) => 0,
        (false, true) => image_tokens * projector_saved_bnb(mm, m.hidden),
        (false, false) => image_tokens * projector_saved(mm, m.hidden, amp, if amp { 2 } else { p.max(e) }, e),
    };
    let saved = tower_profile.saved + projector_acts;
    let ckpt = if job.checkpointing == Checkpointing::Full { " (tower checkpointed)" } else { "" };
    for ph in &mut phases {
        ph.add(TOWER, weights, format!("{tower_params} tower + {proj_params} projector parameters × {p} B"));
        ph.add(TOWER_STATES, states, format!("{} states of {trainable} trainable tower/projector parameters", job.optimizer.name()));
        ph.add(PIXELS, pixels, vis.pixel_label());
        match ph.phase {
            Phase::BackwardEnd | Phase::OptimizerStep => {
                ph.add(TOWER_GRADS, trainable * p, format!("{trainable} gradients × {p} B"));
                if ph.phase == Phase::OptimizerStep {
                    ph.add(train::OPT_TMP, trainable * tmp_pp, "step temporaries of the tower/projector parameters");
                }
            }
            _ => {
                ph.add(TOWER_CASTS, casts, "half copies of trained tower/projector weights");
                ph.add(
                    TOWER_ACTS,
                    saved,
                    format!("{} images × {} tokens{ckpt}; projector on {image_tokens} image tokens", tj.batch, tj.seq),
                );
            }
        }
    }
    if trained || ckpt_frozen {
        // After the language model's backward: every LM gradient, the tower's saved activations
        // and one tower layer's backward.
        let lm_grads = match lora {
            // The adapters' gradients, as the language model's own phases count them.
            true => phases.iter().find(|b| b.phase == Phase::BackwardEnd).map_or(0, |b| b.get(train::GRADS)),
            false => lm.parameters() as u128 * p,
        };
        let mut b = Breakdown::new(Phase::Backward);
        let lm_weights = phases.first().map_or(0, |f| f.get(train::PARAMS));
        let lm_states = phases.first().map_or(0, |f| f.get(train::STATES));
        b.add(train::PARAMS, lm_weights, "language model");
        b.add(train::ADAPTERS, phases.first().map_or(0, |f| f.get(train::ADAPTERS)), "language model");
        b.add(train::STATES, lm_states, "language model");
        b.add(train::GRADS, lm_grads + if lora { 0 } else { proj_params * p }, "language model and projector gradients");
        b.add(TOWER, weights, "vision tower and projector");
        b.add(TOWER_STATES, states, "vision tower and projector");
        b.add(PIXELS, pixels, vis.pixel_label());
        b.add(TOWER_CASTS, casts, "half copies of trained tower weights");
        b.add(TOWER_ACTS, tower_profile.saved, "the tower's saved activations");
        b.add(TOWER_BWD, tower_profile.backward_transient, "one tower layer's backward");
        phases.push(b);
    }
    (phases, kernel, notes)
}

/// Image tokens of the batch in the language model's sequence.
fn image_tokens_lm(mm: &Multimodal, job: &Job) -> u128 {
    job.batch as u128 * mm.images as u128 * mm.image_tokens as u128
}

/// Bytes of the projector under QLoRA: its nn.Linear weights quantized, their biases in the
/// compute dtype, everything else (Qwen2-VL's `ln_q`, Gemma-3's projection parameter and norm,
/// LLaVA-NeXT's `image_newline`) in fp32 after the kbit preparation.
fn projector_qlora_bytes(mm: &Multimodal, text_hidden: u64, b: BaseWeights) -> u128 {
    let (w, t) = (mm.tower.hidden, text_hidden);
    let q = |rows: u64, cols: u64| super::lora::bnb_linear_bytes(rows, rows * cols, b);
    let bias = |n: u64| super::lora::bnb_bias_bytes(n, b);
    let all = mm.projector_parameters(text_hidden) as u128;
    // (quantized linears and biases, the parameters they hold); the rest is fp32.
    let (quantized, held) = match mm.projector() {
        ProjectorKind::Pool(_) => (0, 0),
        ProjectorKind::Shuffle(s) => (q(t, w * s.scale * s.scale), w * s.scale * s.scale * t),
        ProjectorKind::Linear => (q(t, w) + bias(t), w * t + t),
        ProjectorKind::Llama4 { input } => (q(t, input), input * t),
        ProjectorKind::Merger(pm) => {
            // The merger's two linears, and each Qwen3-VL DeepStack merger's (their LayerNorms stay
            // fp32 with the rest).
            let wide = w * pm.merge * pm.merge;
            let n = 1 + pm.deepstack;
            ((q(wide, wide) + q(t, wide) + bias(wide) + bias(t)) * n as u128, (wide * wide + wide * t + wide + t) * n)
        }
        ProjectorKind::Mlp => {
            let biases = if mm.projector_bias { 2 * t } else { 0 };
            (q(t, w) + q(t, t) + if mm.projector_bias { 2 * bias(t) } else { 0 }, w * t + t * t + biases)
        }
    };
    quantized + (all - held as u128) * 4
}

/// Elements of the projector's weight matrices (what autocast caches half copies of).
fn projector_matrices(mm: &Multimodal, text_hidden: u64) -> u128 {
    let (w, t) = (mm.tower.hidden as u128, text_hidden as u128);
    match mm.projector() {
        // PatchMerger: Linear(w·m², w·m²) and Linear(w·m², text); Qwen3-VL's DeepStack mergers
        // the same again each (their half copies are made in the tower's forward: measured,
        // validation/vlm.py Qwen3-VL-2B, four pairs of copies at the peak).
        ProjectorKind::Merger(pm) => {
            let wide = w * (pm.merge * pm.merge) as u128;
            (wide * wide + wide * t) * (1 + pm.deepstack as u128)
        }
        // Gemma-3: mm_input_projection_weight (w × text), used by torch.matmul.
        ProjectorKind::Pool(_) => w * t,
        // Idefics3: one Linear(w · scale², text).
        ProjectorKind::Shuffle(s) => w * (s.scale * s.scale) as u128 * t,
        // PaliGemma: one Linear(w, text).
        ProjectorKind::Linear => w * t,
        // Llama 4: one Linear(vision_output_dim, text).
        ProjectorKind::Llama4 { input } => input as u128 * t,
        ProjectorKind::Mlp => w * t + t * t,
    }
}

/// Bytes the projector saves per image token. LLaVA: linear_1's input copy, the activation's
/// input and linear_2's input. Qwen2-VL's PatchMerger (modeling_qwen2_vl.py PatchMerger.forward:
/// `mlp(ln_q(x).view(-1, w·m²))`), per merged token of m² patches: ln_q's saved tensors (LayerNorm:
/// the fp32 input under autocast and fp32 mean/rstd per patch; Qwen2.5-VL's RMSNorm: the fp32
/// input, the half normed copy and rstd), the first linear's input (a half copy under autocast),
/// GELU's input and the second linear's input (measured: validation/vlm.py saved tensors).
fn projector_saved(mm: &Multimodal, text_hidden: u64, amp: bool, proj_in: u128, e: u128) -> u128 {
    let w = mm.tower.hidden as u128;
    match mm.projector() {
        // Gemma3MultiModalProjector.forward, per pooled token: avg_pool2d saves its input (the
        // contiguous copy of the tower's output, the same bytes the tower's profile keeps for its
        // last_hidden_state, so not counted again); mm_soft_emb_norm (Gemma3RMSNorm) saves the fp32
        // input and rstd and the fp32 normalised tensor (for its weight); torch.matmul saves a half
        // copy under autocast or in half precision (the type_as output), in fp32 the product itself.
        ProjectorKind::Pool(_) => 4 * w + 4 + 4 * w + if e < 4 { 2 } else { 4 } * w,
        // PaliGemmaMultiModalProjector: the linear's input (a half copy under autocast).
        ProjectorKind::Linear => proj_in * w,
        // Llama4MultiModalProjector: the linear's input, the vision MLP's GELU output (half under
        // autocast: no copy is made).
        ProjectorKind::Llama4 { input } => proj_in * input as u128,
        // Idefics3Connector.forward, per token: pixel_shuffle's reshapes copy the tower's output
        // (transients; a view/reshape saves nothing), and the bias-free linear saves its input,
        // w · scale² wide (a half copy under autocast).
        ProjectorKind::Shuffle(s) => proj_in * w * (s.scale * s.scale) as u128,
        ProjectorKind::Mlp => proj_in * w + 2 * e * text_hidden as u128,
        ProjectorKind::Merger(pm) => {
            let patches = (pm.merge * pm.merge) as u128;
            let wide = w * patches;
            let ln = match mm.tower.norm {
                crate::model::Norm::LayerNorm { .. } => (if amp { 4 } else { e }) * wide + 8 * patches,
                _ => (4 + e) * wide + 4 * patches,
            };
            // Qwen3-VL's DeepStack mergers save as the merger does, their LayerNorm after the
            // shuffle (row statistics per merged token).
            let one = ln + proj_in * wide + 2 * e * wide;
            let deepstack = pm.deepstack as u128 * (one - 8 * patches + 8);
            one + deepstack
        }
    }
}

/// Bytes a frozen projector saves per image token under QLoRA (its output needing a gradient,
/// under checkpointing): bitsandbytes' quantized linears keep no activation (MatMul4Bit saves the
/// packed weight only: the input's gradient needs no input), so only what lies between them
/// does — the activation's input, in the tower's fp32 stream (Linear4bit casts its output back
/// to its input's dtype), and Qwen2-VL's `ln_q` (fp32 input and mean/rstd per patch).
fn projector_saved_bnb(mm: &Multimodal, text_hidden: u64) -> u128 {
    let w = mm.tower.hidden as u128;
    match mm.projector() {
        ProjectorKind::Linear | ProjectorKind::Shuffle(_) | ProjectorKind::Llama4 { .. } => 0,
        // Gemma-3's projection is a parameter, not an nn.Linear: not quantized.
        ProjectorKind::Pool(_) => projector_saved(mm, text_hidden, true, 2, 2),
        ProjectorKind::Merger(pm) => {
            let patches = (pm.merge * pm.merge) as u128;
            let wide = w * patches;
            4 * wide + 8 * patches + 4 * wide
        }
        ProjectorKind::Mlp => 4 * text_hidden as u128,
    }
}

/// Qwen2-VL's tower attention under SDPA (modeling_qwen2_vl.py VisionAttention.forward): one
/// SDPA call per image (Qwen2.5-VL: per window in windowed blocks) over `torch.split` views, then
/// `torch.cat` of their outputs — a copy `proj` saves, beside the outputs the kernel saves
/// itself (measured: validation/vlm.py saved tensors, 2 B × width per patch and block in bf16).
fn qwen_attention_cat(mm: &Multimodal, tower: &Model, tj: &Job, e: u128) -> u128 {
    if mm.merger.is_none() {
        return 0;
    }
    tower.layers as u128 * tj.batch as u128 * tj.seq as u128 * e * tower.hidden as u128
}
