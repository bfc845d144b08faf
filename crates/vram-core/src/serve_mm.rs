//! vLLM serving of vision-language models (LLaVA-1.5 / LLaVA-interleave, Qwen2-VL, Qwen2.5-VL,
//! Qwen3-VL dense and MoE, Qwen3.5, Gemma-3, Llama 4):
//! the vision tower and projector on every tensor-parallel rank, and the profile run's
//! multimodal pass (vllm/v1/worker/gpu_model_runner.py `profile_run`): the encoder runs once over
//! the largest batch of maximum-size images the encoder budget admits, its outputs stay in the
//! encoder cache while the language model's dummy forward runs, and the larger of the two peaks
//! is the activation memory vLLM subtracts before sizing the KV cache.

use crate::error::{Error, Result};
use crate::model::{Model, Multimodal, ProjectorKind, Role, TensorGroup, VisionFamily};
use crate::serve::{ServeConfig, VllmEngine};

/// `--limit-mm-per-prompt` default on the V1 engine: 999 items of each modality
/// (vllm/config/multimodal.py `MultiModalConfig.limit_per_prompt`: "Defaults to 1 (V0) or 999
/// (V1) for each modality").
pub const DEFAULT_MM_LIMIT: u64 = 999;

/// Tiles of vLLM's dummy Llama 4 image: the image processor's `max_patches` (16) and the global
/// tile.
const LLAMA4_SERVE_TILES: u64 = 17;

/// The vision side of one rank's budget.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VisionServe {
    /// Tower + projector bytes on one TP rank (never quantized: AWQ/GPTQ/FP8 checkpoints of
    /// VLMs keep the vision tower in the model dtype, `modules_to_not_convert`).
    pub weights: u128,
    /// Buffers the model allocates when it is built, measured in "Model loading took": Qwen3-VL's
    /// DeepStack inputs, one (max_num_batched_tokens, text width) tensor per level
    /// (qwen3_vl.py `deepstack_input_embeds`).
    pub buffers: u128,
    /// Images in the profile's encoder batch.
    pub items: u64,
    /// Language-model tokens per maximum-size image, as the encoder budget counts them.
    pub tokens_per_item: u64,
    /// Vision-transformer tokens (patches) per maximum-size image.
    pub patches_per_item: u64,
    /// Encoder budget in tokens (the number vLLM logs: "Encoder cache will be initialized with a
    /// budget of N tokens").
    pub budget: u64,
    /// Peak bytes of the encoder pass.
    pub encoder_peak: u128,
    /// Encoder outputs held in the encoder cache during the language model's dummy forward.
    pub outputs: u128,
}

fn refuse(what: &str, value: impl ToString, hint: String) -> Error {
    Error::InvalidValue { what: what.into(), value: value.to_string(), hint }
}

/// What vLLM serving of a vision-language model may ask for; refused by name otherwise.
pub(crate) fn check(m: &Model, mm: &Multimodal, cfg: &ServeConfig) -> Result<()> {
    let name = &m.name;
    if !supported(mm) {
        return Err(refuse(
            "model",
            &m.model_type,
            format!("{name}: vLLM serving is modelled for LLaVA-1.5/LLaVA-interleave, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, Gemma-3 and Llama 4 among vision-language models (with --language-model-only, any of them as its language model); `vram estimate` gives its training and inference"),
        ));
    }
    if cfg.engine == VllmEngine::V0 {
        return Err(refuse(
            "--vllm-engine",
            "v0",
            format!("{name} is a vision-language model: its profile run is modelled for the V1 engine only"),
        ));
    }
    if cfg.pp > 1 {
        return Err(refuse(
            "--pipeline-parallel-size",
            cfg.pp,
            format!("{name} is a vision-language model: the tower's place in a pipeline split is not modelled (estimate with --pipeline-parallel-size 1)"),
        ));
    }
    if cfg.lora.is_some() {
        return Err(refuse(
            "--enable-lora",
            "on",
            format!("{name} is a vision-language model: LoRA slots on its tower and projector are not modelled"),
        ));
    }
    // The tower's attention is split by heads like the language model's (QKVParallelLinear).
    if mm.tower.heads % cfg.tp != 0 {
        return Err(refuse(
            "--tensor-parallel-size",
            cfg.tp,
            format!("vLLM needs it to divide the {} attention heads of {name}'s vision tower", mm.tower.heads),
        ));
    }
    if cfg.mm_max_pixels.is_some() && mm.merger.is_none() {
        return Err(refuse(
            "--mm-processor-kwargs",
            "max_pixels",
            format!("max_pixels is the Qwen-VL processors' cap; {name}'s processor sizes its images another way (its fixed tile or square), so it would change nothing"),
        ));
    }
    if cfg.mm_limit_per_prompt == Some(0) {
        return Err(refuse(
            "--limit-mm-per-prompt",
            "image=0",
            format!("{name} with images off: pass --language-model-only as well (vLLM then builds the language model alone; with video still allowed it would profile the tower over a video, which is not modelled)"),
        ));
    }
    Ok(())
}

/// The vision-language layouts modelled here: LLaVA's CLIP/SigLIP tower with its two-layer
/// projector, and Qwen2-VL/Qwen2.5-VL's tower with its PatchMerger.
fn supported(mm: &Multimodal) -> bool {
    let Some(vis) = mm.tower.encoder.and_then(|e| e.vision) else { return false };
    // LLaVA-NeXT's anyres dummy image (vLLM's largest-feature pinpoint search) is not modelled
    // for serving yet; nor are Gemma-3's pooling projector and vLLM's Gemma-3 model (pan-and-scan,
    // its encoder budget), Idefics3/SmolVLM's split images (vLLM's idefics3.py dummy image and
    // encoder budget) and PaliGemma (its prefix-LM mask in vLLM).
    if mm.anyres.is_some() {
        return false;
    }
    match mm.projector() {
        ProjectorKind::Merger(_) => vis.family.is_qwen(),
        ProjectorKind::Mlp => matches!(vis.family, VisionFamily::Clip | VisionFamily::Siglip),
        // Gemma-3: SigLIP, then average pooling (gemma3_mm.py; pan-and-scan off, the processor's
        // default).
        ProjectorKind::Pool(_) => vis.family == VisionFamily::Siglip,
        // Llama 4: tiles through its vision model, the pixel-shuffle MLP, one linear (mllama4.py).
        ProjectorKind::Llama4 { .. } => vis.adapter.is_some() && mm.llama4.is_some(),
        ProjectorKind::Shuffle(_) | ProjectorKind::Linear => false,
    }
}

/// Tower layers vLLM builds: LLaVA initialises the tower only up to `vision_feature_layer`
/// (vllm/model_executor/models/llava.py `_get_num_hidden_layers`: L + 1 + index for a negative
/// index), and drops the final LayerNorm when it stops early (`require_post_norm`).
fn tower_layers(mm: &Multimodal) -> u64 {
    let l = mm.tower.layers;
    if mm.merger.is_some() {
        return l;
    }
    let kept = if mm.feature_layer < 0 { l as i64 + 1 + mm.feature_layer } else { mm.feature_layer };
    (kept.max(1) as u64).min(l)
}

/// Elements of one tower tensor on one rank: the blocks' linears are column/row-parallel
/// (qwen2_5_vl.py, clip.py, siglip.py); the patch embedding, norms and positions are replicated.
fn tower_rank_numel(t: &TensorGroup, tp: u64) -> u128 {
    match t.role {
        Role::Linear if !t.name.contains("patch_embeddings") => (t.numel as u128).div_ceil(tp as u128),
        _ => t.numel as u128,
    }
}

/// Tower + projector bytes on one rank.
fn rank_weights(mm: &Multimodal, text_hidden: u64, tp: u64, e: u128) -> u128 {
    let (all, kept) = (mm.tower.layers, tower_layers(mm));
    let mut n = 0u128;
    for t in mm.tower.tensors() {
        let count = match t.count {
            c if c == all && t.name.contains("{i}") => kept,
            c => c,
        };
        if kept < all && (t.name == "layernorm.weight" || t.name == "layernorm.bias") {
            continue;
        }
        n += tower_rank_numel(&t, tp) * count as u128;
    }
    // Projector / PatchMerger: ColumnParallelLinear then RowParallelLinear; Gemma-3's
    // `mm_input_projection_weight` is a plain parameter, whole on every rank.
    let projector = mm.projector_parameters(text_hidden) as u128;
    n += if mm.pool.is_some() { projector } else { projector.div_ceil(tp as u128) };
    n * e
}

/// vLLM's dummy image, the largest the processor produces, as the profile run sees it.
struct Item {
    /// Vision-transformer tokens (patches, with any class token) through the tower.
    patches: u64,
    /// Language-model tokens, as the encoder budget counts them (the whole placeholder).
    tokens: u64,
    /// Embeddings the encoder returns (the placeholder's image positions; Gemma-3's and
    /// Llama 4's markers and separators are text).
    embeds: u64,
    /// Pixels per channel and frame of its `pixel_values`.
    pixels: u128,
}

/// The dummy image of each family. LLaVA: the tower's own image size. Qwen: the square that
/// fills `max_pixels` (qwen2_vl.py `get_image_size_with_most_features`: smart_resize of a
/// 9999999-pixel side, ⌊√max_pixels / f⌋ · f with f = patch × merge: 28 for Qwen2-VL's 3584²,
/// 32 for Qwen3-VL's and Qwen3.5's 4096², whose qwen3_vl.py inherits it). Gemma-3: its square,
/// `<start_of_image>`, the pooled tokens, `<end_of_image>` (gemma3_mm.py `get_image_repl`
/// features, counted by `get_num_image_tokens`). Llama 4: max_patches tiles tall and one wide
/// (mllama4.py `get_image_size_with_most_features`, h:w = 16:1), so 16 tiles plus the global
/// one; Llama4Processor's placeholder is <|image_start|>, a row of patch tokens and a
/// <|tile_y_separator|> per tile row, <|image|>, the global tile's patches, <|image_end|>.
fn item(mm: &Multimodal, cfg: &ServeConfig) -> Result<Item> {
    let vis = mm.tower.encoder.and_then(|e| e.vision).ok_or(Error::Overflow { what: "vision tower".into() })?;
    let native = vis.tokens(vis.native_image_size);
    let native_pixels = (vis.native_image_size as u128).pow(2);
    Ok(match (mm.merger, mm.llama4) {
        (Some(pm), _) => {
            let max_pixels = cfg.mm_max_pixels.unwrap_or(pm.max_pixels);
            let f = vis.patch.saturating_mul(pm.merge).max(1);
            let side = (((max_pixels as f64).sqrt() / f as f64).floor() as u64).max(1) * f;
            let per_side = side / vis.patch.max(1);
            let patches = per_side * per_side;
            let tokens = patches / (pm.merge * pm.merge).max(1);
            Item { patches, tokens, embeds: tokens, pixels: patches as u128 * (vis.patch as u128).pow(2) }
        }
        (None, Some(l)) => Item {
            patches: LLAMA4_SERVE_TILES * native,
            tokens: LLAMA4_SERVE_TILES * l.tile_tokens + (LLAMA4_SERVE_TILES - 1) + 3,
            embeds: LLAMA4_SERVE_TILES * l.tile_tokens,
            pixels: LLAMA4_SERVE_TILES as u128 * native_pixels,
        },
        (None, None) if mm.pool.is_some() => {
            Item { patches: native, tokens: mm.image_tokens + 2, embeds: mm.image_tokens, pixels: native_pixels }
        }
        (None, None) => Item { patches: native, tokens: mm.image_tokens, embeds: mm.image_tokens, pixels: native_pixels },
    })
}

/// The encoder budget and the items profiled (vllm/v1/core/encoder_cache_manager.py
/// `compute_mm_encoder_budget`: compute budget and cache size both default to
/// max(max_num_batched_tokens, tokens of the largest item); multimodal/encoder_budget.py
/// `get_max_items`: items per prompt max(1, min(limit, max_model_len // item)), items per batch
/// max(1, min(budget // item, max_num_seqs · per prompt)) — V1 always chunks prefill).
fn encoder_items(tokens: u64, cfg: &ServeConfig, batched: u64, seqs: u64, max_len: u64) -> (u64, u64) {
    let t = tokens.max(1);
    let budget = batched.max(t);
    let limit = cfg.mm_limit_per_prompt.unwrap_or(DEFAULT_MM_LIMIT);
    let per_prompt = limit.min(max_len / t).max(1);
    let items = (budget / t).min(seqs.saturating_mul(per_prompt)).max(1);
    (budget, items)
}

/// Peak bytes of one encoder pass over `p` tower tokens on one rank (inference mode: a block's
/// input, its norm output and the widest intermediates live together): attention = qkv (3w/tp),
/// attention output (w/tp) and o-proj output (w); MLP = fc1 or gate_up ((1 or 2)·I/tp), the
/// activation (I/tp) and fc2's output (w) — the Python locals of vLLM's VisionBlock / CLIP
/// encoder layer forward. Then the projector over the merged tokens.
///
/// Qwen3-VL and Qwen3.5 add two phases (qwen3_vl.py `Qwen3_VisionTransformer.forward`): the
/// learned position table interpolated to the image (`fast_pos_embed_interpolate`: four table
/// rows gathered per patch and their weighted copies, 8·w per patch, beside the patch
/// embeddings), and DeepStack — each level's merged features (text width per merged token) stay
/// alive through the blocks after it and into the final concatenation, (1 + levels) wide.
fn encoder_pass(mm: &Multimodal, text_hidden: u64, p: u128, tp: u128, e: u128) -> u128 {
    let tower = &mm.tower;
    let (w, i, t) = (tower.hidden as u128, tower.intermediate as u128, text_hidden as u128);
    let up = if tower.mlp.gated { 2 * i } else { i };
    let attn = 4 * w / tp + w;
    let mlp = (up + i) / tp + w;
    // Tower patches per language-model token: the PatchMerger's merge², Gemma-3's pooling
    // kernel² (its projector pools, normalises and projects: no wide intermediate).
    let merge = mm.merger.map_or(1, |pm| (pm.merge * pm.merge) as u128);
    // Llama 4's pixel shuffle folds shuffle² patches into a token.
    let shuffled = tower.encoder.and_then(|x| x.vision).and_then(|v| v.adapter).map(|a| (a.shuffle * a.shuffle) as u128);
    let merged = p / mm.pool.map(|k| (k * k) as u128).or(shuffled).unwrap_or(merge);
    let levels = mm.merger.map_or(0, |pm| pm.deepstack as u128);
    let deepstack = levels * merged * t * e;
    let block = p * e * (2 * w + attn.max(mlp)) + deepstack;
    let learned_positions = tower.encoder.and_then(|x| x.vision).is_some_and(|v| v.position_table > 0);
    let positions = if learned_positions { p * e * 9 * w } else { 0 };
    // Merger/projector: the tower output, its norm, the wide fc1 output and activation, the
    // language-model-width output.
    let wide = if mm.pool.is_some() { 2 * w } else { 2 * w * merge / tp };
    let proj = p * e * 2 * w + merged * e * (wide + t) + deepstack;
    // The merger's output, the DeepStack levels and their concatenation.
    let concat = 2 * (1 + levels) * merged * t * e;
    block.max(proj).max(positions).max(concat)
}

/// The vision side of one rank's vLLM budget.
pub(crate) fn plan(m: &Model, mm: &Multimodal, cfg: &ServeConfig, batched: u64, seqs: u64, max_len: u64, e: u128) -> Result<VisionServe> {
    let it = item(mm, cfg)?;
    let (budget, items) = encoder_items(it.tokens, cfg, batched, seqs, max_len);
    let vis = mm.tower.encoder.and_then(|e| e.vision).ok_or(Error::Overflow { what: "vision tower".into() })?;
    // pixel_values arrive in the processor's dtype (`Vision::pixel_dtype_bytes`: fp32, Llama 4's
    // bf16) and are cast to the model dtype (qwen2_5_vl.py `pixel_values.type(self.visual.dtype)`,
    // llava.py `.to(dtype)`): both copies live, one when the cast changes nothing.
    let arrived = vis.pixel_dtype_bytes();
    let pixel_bytes = if arrived == e { e } else { arrived + e };
    let pixels = items as u128 * vis.channels as u128 * vis.frames() * it.pixels * pixel_bytes;
    let p = items as u128 * it.patches as u128;
    let encoder_peak = pixels + encoder_pass(mm, m.hidden, p, cfg.tp as u128, e);
    // The encoder cache holds the merger's output and, for Qwen3-VL, its DeepStack levels beside
    // it (the tower returns them concatenated: text width × (1 + levels) per token).
    let levels = mm.merger.map_or(0, |pm| pm.deepstack as u128);
    let outputs = items as u128 * it.embeds as u128 * m.hidden as u128 * (1 + levels) * e;
    Ok(VisionServe {
        weights: rank_weights(mm, m.hidden, cfg.tp, e),
        buffers: levels * batched as u128 * m.hidden as u128 * e,
        items,
        tokens_per_item: it.tokens,
        patches_per_item: it.patches,
        budget,
        encoder_peak,
        outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ServeConfig {
        ServeConfig::new(80 << 30)
    }

    /// vLLM's log for Qwen2.5-VL: "Encoder cache will be initialized with a budget of 16384
    /// tokens, and profiled with 1 image items of the maximum feature size"
    /// (vllm-project/vllm#27706), with the default 8192 batched tokens.
    #[test]
    fn qwen_budget_is_one_image_of_16384_tokens() {
        let (budget, items) = encoder_items(16384, &cfg(), 8192, 256, 128_000);
        assert_eq!((budget, items), (16384, 1));
    }

    #[test]
    fn small_items_fill_the_budget_up_to_the_limits() {
        // LLaVA-1.5: 576 tokens an image, 8192 batched tokens: 14 images.
        assert_eq!(encoder_items(576, &cfg(), 8192, 256, 4096), (8192, 14));
        // --limit-mm-per-prompt image=1 with 4 sequences: 4 images.
        let c = ServeConfig { mm_limit_per_prompt: Some(1), ..cfg() };
        assert_eq!(encoder_items(576, &c, 8192, 4, 4096), (8192, 4));
        // A prompt shorter than one image still takes one.
        assert_eq!(encoder_items(576, &c, 8192, 1, 100), (8192, 1));
    }

    /// The processor's fp32 pixels are cast to the model dtype: two copies under bf16, one when
    /// the model is served in fp32 (the cast returns the same tensor); Llama 4's bf16 pixels stay
    /// one copy under bf16.
    #[test]
    fn pixel_copies_follow_the_cast() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation/configs/vlm");
        let read = |f: &str| crate::config::parse_config(&std::fs::read(dir.join(f)).unwrap(), f, f).unwrap();
        let pixels = |m: &Model, e: u128| {
            let mm = m.multimodal.as_ref().unwrap();
            let v = plan(m, mm, &cfg(), 8192, 256, 32_768, e).unwrap();
            let p = v.items as u128 * v.patches_per_item as u128;
            v.encoder_peak - encoder_pass(mm, m.hidden, p, 1, e)
        };
        let qwen = read("Qwen2-VL-2B-Instruct.json");
        // One 3584² image: 65536 patches of 14² pixels, 3 channels, 2 frames.
        let values = 65_536u128 * 14 * 14 * 3 * 2;
        assert_eq!(pixels(&qwen, 2), values * (4 + 2));
        assert_eq!(pixels(&qwen, 4), values * 4);
        let llama4 = read("llama-4-scout-17b-16e.json");
        let v = plan(&llama4, llama4.multimodal.as_ref().unwrap(), &cfg(), 8192, 256, 32_768, 2).unwrap();
        assert_eq!(pixels(&llama4, 2), v.items as u128 * 17 * 336 * 336 * 3 * 2);
    }
}
