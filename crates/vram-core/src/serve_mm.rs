//! vLLM serving of vision-language models (LLaVA-1.5 / LLaVA-interleave, LLaVA-NeXT, Qwen2-VL,
//! Qwen2.5-VL, Qwen3-VL dense and MoE, Qwen3.5, Gemma-3, Idefics3 / SmolVLM, PaliGemma and
//! PaliGemma 2, Llama 4):
//! the vision tower and projector on every tensor-parallel rank, and the profile run's
//! multimodal pass (vllm/v1/worker/gpu_model_runner.py `profile_run`): the encoder runs once over
//! the largest batch of maximum-size images the encoder budget admits, its outputs stay in the
//! encoder cache while the language model's dummy forward runs, and the larger of the two peaks
//! is the activation memory vLLM subtracts before sizing the KV cache.

use crate::error::{Error, Result};
use crate::model::{AnyRes, Model, Multimodal, ProjectorKind, Role, Shuffle, TensorGroup, VisionFamily};
use crate::serve::{ServeConfig, VllmEngine, VllmVersion};

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
    /// Tokens per maximum-size image as the release's encoder budget counts them: its
    /// embeddings (0.13 on), its whole placeholder before.
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
            format!("{name}: vLLM serving is modelled for LLaVA-1.5/LLaVA-interleave, LLaVA-NeXT, LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5, Gemma-3, Idefics3/SmolVLM, PaliGemma and Llama 4 among vision-language models; with --language-model-only any of them is served as its language model; `vram estimate` gives its training and inference"),
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
    if let Some(edge) = cfg.mm_longest_edge {
        let tile = mm.tower.encoder.and_then(|e| e.vision).map_or(0, |v| v.native_image_size);
        if mm.shuffle.is_none() {
            return Err(refuse(
                "--mm-processor-kwargs",
                "size",
                format!(
                    "size.longest_edge alone is the Idefics3/SmolVLM processors' split edge; {name}'s processor sizes its images another way{}",
                    if mm.merger.is_some() { " (a Qwen-VL processor takes max_pixels, or a size with both shortest_edge and longest_edge)" } else { "" }
                ),
            ));
        }
        // idefics3.py `_get_image_feature_grid_size`: "`longest_edge` in image_processor's `size`
        // must be divisible by `longest_edge` in `max_image_size`".
        if tile == 0 || edge % tile != 0 {
            return Err(refuse(
                "--mm-processor-kwargs",
                format!("size.longest_edge {edge}"),
                format!("vLLM asserts it is a multiple of the {tile}-px tile (max_image_size), e.g. {}", 3 * tile),
            ));
        }
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
/// projector (LLaVA-NeXT's tiles too), Qwen2-VL/Qwen2.5-VL/Qwen3-VL's tower with its PatchMerger,
/// Gemma-3's pooling projector, Idefics3/SmolVLM's pixel-shuffle connector, PaliGemma's linear
/// and Llama 4's vision model.
fn supported(mm: &Multimodal) -> bool {
    let Some(vis) = mm.tower.encoder.and_then(|e| e.vision) else { return false };
    match mm.projector() {
        ProjectorKind::Merger(_) => vis.family.is_qwen(),
        ProjectorKind::Mlp => matches!(vis.family, VisionFamily::Clip | VisionFamily::Siglip),
        // Gemma-3: SigLIP, then average pooling (gemma3_mm.py; pan-and-scan off, the processor's
        // default). Idefics3/SmolVLM: the SigLIP-style Idefics2 vision transformer, then the
        // pixel shuffle (idefics3.py). PaliGemma: SigLIP, then one linear (paligemma.py).
        ProjectorKind::Pool(_) | ProjectorKind::Shuffle(_) | ProjectorKind::Linear => vis.family == VisionFamily::Siglip,
        // Llama 4: tiles through its vision model, the pixel-shuffle MLP, one linear (mllama4.py).
        ProjectorKind::Llama4 { .. } => vis.adapter.is_some() && mm.llama4.is_some(),
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

/// Tower + projector bytes on one rank (vLLM's split; SGLang's vision layers keep it).
pub(crate) fn rank_weights(mm: &Multimodal, text_hidden: u64, tp: u64, e: u128) -> u128 {
    let (all, kept) = (mm.tower.layers, tower_layers(mm));
    let mut n = 0u128;
    for t in mm.tower.tensors() {
        let count = match t.count {
            c if c == all && t.name.contains("{i}") => kept,
            c => c,
        };
        // LLaVA, LLaVA-NeXT and LLaVA-OneVision build the tower with `require_post_norm=False`
        // (llava.py, llava_next.py, llava_onevision.py); the others keep it when every layer is.
        let no_post_norm = kept < all || (mm.projector() == ProjectorKind::Mlp && mm.merger.is_none());
        if no_post_norm && (t.name == "layernorm.weight" || t.name == "layernorm.bias") {
            continue;
        }
        n += tower_rank_numel(&t, tp) * count as u128;
    }
    // Projector / PatchMerger: ColumnParallelLinear then RowParallelLinear (LLaVA's
    // LlavaMultiModalProjector, the PatchMerger, Llama 4's); whole on every rank: Gemma-3's
    // `mm_input_projection_weight` (a plain parameter), Idefics3's `ReplicatedLinear`,
    // PaliGemma's `nn.Linear` and LLaVA-NeXT's `image_newline` (a plain parameter).
    let projector = mm.projector_parameters(text_hidden) as u128;
    let newline = if mm.anyres.is_some() { text_hidden as u128 } else { 0 };
    // LLaVA-OneVision's projector is two plain nn.Linear (llava_onevision.py
    // `LlavaOnevisionMultiModalProjector`): whole on every rank, as its `image_newline`.
    let onevision = mm.anyres.as_ref().is_some_and(|a| a.max_tiles.is_some());
    n += match mm.projector() {
        _ if onevision => projector,
        ProjectorKind::Pool(_) | ProjectorKind::Shuffle(_) | ProjectorKind::Linear => projector,
        _ => (projector - newline).div_ceil(tp as u128) + newline,
    };
    n * e
}

/// vLLM's dummy image, the largest the processor produces, as the profile run sees it.
struct Item {
    /// Vision-transformer tokens (patches, with any class token) through the tower.
    patches: u64,
    /// Language-model tokens of its whole placeholder (what the encoder budget counted before
    /// vLLM 0.13).
    tokens: u64,
    /// Embeddings the encoder returns (the placeholder's image positions; Gemma-3's, Idefics3's,
    /// PaliGemma's and Llama 4's markers and separators are text): what the budget counts from
    /// vLLM 0.13.
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
/// LLaVA-NeXT: the pinpoint with the most features ([`next_item`]). Idefics3/SmolVLM: the
/// processor's split at its longest edge ([`split_item`]). PaliGemma: its one square, the image
/// tokens then `<bos>` (paligemma.py `PromptInsertion` of image tokens + bos; the placeholder
/// counts both, the encoder returns the image tokens' embeddings).
fn item(mm: &Multimodal, cfg: &ServeConfig) -> Result<Item> {
    let vis = mm.tower.encoder.and_then(|e| e.vision).ok_or(Error::Overflow { what: "vision tower".into() })?;
    let native = vis.tokens(vis.native_image_size);
    let native_pixels = (vis.native_image_size as u128).pow(2);
    if let Some(a) = &mm.anyres {
        let per = vis.native_image_size / vis.patch.max(1);
        if a.max_tiles.is_some() {
            return Ok(onevision_item(a, vis.native_image_size, per, native));
        }
        return Ok(next_item(a, vis.native_image_size, per, native));
    }
    Ok(match (mm.merger, mm.llama4, mm.projector()) {
        (Some(pm), _, _) => {
            let max_pixels = cfg.mm_max_pixels.unwrap_or(pm.max_pixels);
            let f = vis.patch.saturating_mul(pm.merge).max(1);
            let side = (((max_pixels as f64).sqrt() / f as f64).floor() as u64).max(1) * f;
            let per_side = side / vis.patch.max(1);
            let patches = per_side * per_side;
            let tokens = patches / (pm.merge * pm.merge).max(1);
            Item { patches, tokens, embeds: tokens, pixels: patches as u128 * (vis.patch as u128).pow(2) }
        }
        (None, Some(l), _) => Item {
            patches: LLAMA4_SERVE_TILES * native,
            tokens: LLAMA4_SERVE_TILES * l.tile_tokens + (LLAMA4_SERVE_TILES - 1) + 3,
            embeds: LLAMA4_SERVE_TILES * l.tile_tokens,
            pixels: LLAMA4_SERVE_TILES as u128 * native_pixels,
        },
        (None, None, ProjectorKind::Shuffle(s)) => {
            // `--mm-processor-kwargs '{"size": {"longest_edge": N}}'` re-sizes the split.
            let s = match cfg.mm_longest_edge {
                Some(edge) => Shuffle { longest_edge: edge, tiles: Shuffle::tiles_for(edge, vis.native_image_size), ..s },
                None => s,
            };
            split_item(s, native, native_pixels)
        }
        (None, None, ProjectorKind::Pool(_)) => {
            Item { patches: native, tokens: mm.image_tokens + 2, embeds: mm.image_tokens, pixels: native_pixels }
        }
        (None, None, ProjectorKind::Linear) => {
            Item { patches: native, tokens: mm.image_tokens + 1, embeds: mm.image_tokens, pixels: native_pixels }
        }
        (None, None, _) => Item { patches: native, tokens: mm.image_tokens, embeds: mm.image_tokens, pixels: native_pixels },
    })
}

/// LLaVA-NeXT's dummy image (llava_next.py `get_image_size_with_most_features`): of the
/// `image_grid_pinpoints` (height, width), the first with the most features, each counted by
/// `get_num_image_tokens` — the base tile's tokens plus the grid's feature map unpadded to the
/// image's aspect ratio (none to crop: the image is the pinpoint) with a newline per row. The
/// tower runs the grid's tiles plus the base.
fn next_item(a: &AnyRes, crop: u64, per: u64, tower_tokens: u64) -> Item {
    let (crop, base) = (crop.max(1), a.tile_tokens);
    let mut best = Item { patches: tower_tokens, tokens: base, embeds: base, pixels: (crop as u128).pow(2) };
    for &(h, w) in &a.pinpoints {
        let (gh, gw) = (h / crop, w / crop);
        let (rows, cols) = (gh * per, gw * per);
        let tokens = base + rows * (cols + 1);
        if tokens > best.tokens {
            let tiles = gh * gw + 1;
            best = Item { patches: tiles * tower_tokens, tokens, embeds: tokens, pixels: tiles as u128 * (crop as u128).pow(2) };
        }
    }
    best
}

/// The size of LLaVA-OneVision's dummy image (llava_onevision.py
/// `get_image_size_with_most_features`: width 1153, height 944, "found via processor tests").
const ONEVISION_DUMMY: (u64, u64) = (944, 1153);

/// LLaVA-OneVision's dummy image as vLLM counts it (llava_onevision.py; llava_next.py
/// `get_num_image_tokens`): the pinpoint `select_best_resolution` picks for the 944×1153 image,
/// its grid's feature map unpadded to the image's aspect ratio (`_get_num_unpadded_features`),
/// then, past a ratio of 1.1 over 9 tiles' worth, scaled down (the 9 hard-coded, whatever the
/// config's `anyres_max_N`), a newline per row, and the base tile. The tower runs the grid's
/// tiles plus the base.
fn onevision_item(a: &AnyRes, crop: u64, per: u64, tower_tokens: u64) -> Item {
    let (h, w) = ONEVISION_DUMMY;
    let (hf, wf) = (h as f64, w as f64);
    let best = if a.pinpoints.is_empty() { (crop, crop) } else { a.best_resolution_of((h, w)) };
    let crop = crop.max(1);
    let (gh, gw) = (best.0 / crop, best.1 / crop);
    let (mut ch, mut cw) = (per * gh, per * gw);
    // Python's int(round(x, 7)).
    let trunc7 = |x: f64| ((x * 1e7).round() / 1e7).floor() as u64;
    if wf / hf > cw as f64 / ch.max(1) as f64 {
        let nh = trunc7(hf * cw as f64 / wf);
        ch -= 2 * (ch.saturating_sub(nh) / 2);
    } else {
        let nw = trunc7(wf * ch as f64 / hf);
        cw -= 2 * (cw.saturating_sub(nw) / 2);
    }
    let ratio = ((ch * cw) as f64 / (9 * per * per).max(1) as f64).sqrt();
    let (rows, cols) = if ratio > 1.1 { ((ch as f64 / ratio).floor() as u64, (cw as f64 / ratio).floor() as u64) } else { (ch, cw) };
    let tokens = a.tile_tokens + rows * cols + rows;
    let tiles = gh * gw + 1;
    Item { patches: tiles * tower_tokens, tokens, embeds: tokens, pixels: tiles as u128 * (crop as u128).pow(2) }
}

/// Idefics3's and SmolVLM's dummy image (idefics3.py): a square the processor resizes to its
/// longest edge and splits into an n × n grid plus the global tile. The placeholder
/// (`get_image_repl`) is, per grid tile, `<fake_token_around_image>`, `<row_r_col_c>` and the
/// tile's image tokens, a newline after each grid row, one more newline, then
/// `<fake_token_around_image><global-img>`, the global tile's tokens and a closing
/// `<fake_token_around_image>`: 2n² + n + 3 text tokens when the two newlines after the last row
/// are one token, as Llama-3's and SmolLM's BPE merge "\n\n" (an unsplit image: 3). The
/// encoder returns the image tokens' embeddings.
fn split_item(s: Shuffle, tower_tokens: u64, tile_pixels: u128) -> Item {
    let tiles = s.tiles.max(1);
    let n = (((tiles - 1) as f64).sqrt().round()) as u64;
    let text = if tiles > 1 { 2 * n * n + n + 3 } else { 3 };
    let embeds = tiles * s.tile_tokens;
    Item { patches: tiles * tower_tokens, tokens: embeds + text, embeds, pixels: tiles as u128 * tile_pixels }
}

/// The encoder budget and the items profiled (vllm/v1/core/encoder_cache_manager.py
/// `compute_mm_encoder_budget`: compute budget and cache size both default to
/// max(max_num_batched_tokens, tokens of the largest item); multimodal/encoder_budget.py
/// `get_max_items`: items per prompt max(1, min(limit, max_model_len // item)), items per batch
/// max(1, min(budget // item, max_num_seqs · per prompt)) — V1 always chunks prefill; `supported`
/// is the model's own per-prompt limit, `get_supported_mm_limits`: PaliGemma's 1).
fn encoder_items(tokens: u64, cfg: &ServeConfig, batched: u64, seqs: u64, max_len: u64, supported: Option<u64>) -> (u64, u64) {
    let t = tokens.max(1);
    let budget = batched.max(t);
    // The processor's `allowed_mm_limits`: the user's limit held to the model's supported one.
    let limit = cfg.mm_limit_per_prompt.unwrap_or(DEFAULT_MM_LIMIT).min(supported.unwrap_or(u64::MAX));
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
    // Idefics3's connector folds scale² patches into a token.
    let folded = mm.shuffle.map(|s| (s.scale * s.scale) as u128);
    let merged = p / mm.pool.map(|k| (k * k) as u128).or(shuffled).or(folded).unwrap_or(merge);
    let levels = mm.merger.map_or(0, |pm| pm.deepstack as u128);
    let deepstack = levels * merged * t * e;
    let block = p * e * (2 * w + attn.max(mlp)) + deepstack;
    let learned_positions = tower.encoder.and_then(|x| x.vision).is_some_and(|v| v.position_table > 0);
    let positions = if learned_positions { p * e * 9 * w } else { 0 };
    let proj = match mm.projector() {
        // Idefics3Connector.pixel_shuffle: the tower's output stays referenced while its two
        // permute-reshape copies are made, then the last copy goes through the linear.
        ProjectorKind::Shuffle(_) => p * e * 2 * w + (p * e * w).max(merged * e * t),
        // PaliGemma: the tower's output and the linear's, then the linear's output and its copy
        // scaled by hidden^-0.5 (`embed_multimodal`).
        ProjectorKind::Linear => (p * e * (w + t)).max(2 * p * e * t),
        // Merger/projector: the tower output, its norm, the wide fc1 output and activation, the
        // language-model-width output.
        _ => {
            let wide = if mm.pool.is_some() { 2 * w } else { 2 * w * merge / tp };
            p * e * 2 * w + merged * e * (wide + t) + deepstack
        }
    };
    // The merger's output, the DeepStack levels and their concatenation.
    let concat = 2 * (1 + levels) * merged * t * e;
    block.max(proj).max(positions).max(concat)
}

/// The vision side of one rank's vLLM budget.
pub(crate) fn plan(m: &Model, mm: &Multimodal, cfg: &ServeConfig, batched: u64, seqs: u64, max_len: u64, e: u128) -> Result<VisionServe> {
    let it = item(mm, cfg)?;
    // paligemma.py `get_supported_mm_limits`: one image a prompt.
    let supported = (mm.projector() == ProjectorKind::Linear).then_some(1);
    // What the budget counts per item: its embeddings from 0.13, its whole placeholder before.
    let counted = if cfg.vllm_version >= VllmVersion::ENCODER_EMBEDS { it.embeds } else { it.tokens };
    let (budget, items) = encoder_items(counted, cfg, batched, seqs, max_len, supported);
    let vis = mm.tower.encoder.and_then(|e| e.vision).ok_or(Error::Overflow { what: "vision tower".into() })?;
    // pixel_values arrive in the processor's dtype (`Vision::pixel_dtype_bytes`: fp32, Llama 4's
    // bf16) and are cast to the model dtype (qwen2_5_vl.py `pixel_values.type(self.visual.dtype)`,
    // llava.py `.to(dtype)`): both copies live, one when the cast changes nothing.
    let arrived = vis.pixel_dtype_bytes();
    let pixel_bytes = if arrived == e { e } else { arrived + e };
    let pixels = items as u128 * vis.channels as u128 * vis.frames() * it.pixels * pixel_bytes;
    let p = items as u128 * it.patches as u128;
    let t = m.hidden as u128;
    // LLaVA-NeXT's `_merge_image_patch_embeddings`, image after image: the projector's output for
    // every tile of every image stays in the split list while each image's grid features are
    // unpadded with a newline per row (one copy) and concatenated behind its base tile (another),
    // and each merged image stays in the returned list.
    let merge_phase = match &mm.anyres {
        Some(a) => {
            let tiles = (it.patches / vis.tokens(vis.native_image_size).max(1)) as u128;
            let n = items as u128;
            (n * (tiles * a.tile_tokens as u128 + it.embeds as u128) + (it.embeds - a.tile_tokens) as u128) * t * e
        }
        None => 0,
    };
    let encoder_peak = pixels + encoder_pass(mm, m.hidden, p, cfg.tp as u128, e).max(merge_phase);
    // The encoder cache holds the merger's output and, for Qwen3-VL, its DeepStack levels beside
    // it (the tower returns them concatenated: text width × (1 + levels) per token).
    let levels = mm.merger.map_or(0, |pm| pm.deepstack as u128);
    let outputs = items as u128 * it.embeds as u128 * t * (1 + levels) * e;
    Ok(VisionServe {
        weights: rank_weights(mm, m.hidden, cfg.tp, e),
        buffers: levels * batched as u128 * m.hidden as u128 * e,
        items,
        tokens_per_item: counted,
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
        let (budget, items) = encoder_items(16384, &cfg(), 8192, 256, 128_000, None);
        assert_eq!((budget, items), (16384, 1));
    }

    #[test]
    fn small_items_fill_the_budget_up_to_the_limits() {
        // LLaVA-1.5: 576 tokens an image, 8192 batched tokens: 14 images.
        assert_eq!(encoder_items(576, &cfg(), 8192, 256, 4096, None), (8192, 14));
        // --limit-mm-per-prompt image=1 with 4 sequences: 4 images.
        let c = ServeConfig { mm_limit_per_prompt: Some(1), ..cfg() };
        assert_eq!(encoder_items(576, &c, 8192, 4, 4096, None), (8192, 4));
        // A prompt shorter than one image still takes one.
        assert_eq!(encoder_items(576, &c, 8192, 1, 100, None), (8192, 1));
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

    /// LLaVA-NeXT's merge of tile features into each image's sequence outgrows the encoder pass
    /// when the language model is wide: the peak is then the pixels plus the merge phase — every
    /// tile's projector output (576 tokens a tile) plus each merged image, plus one image's
    /// unpadded grid in flight — at the text width.
    #[test]
    fn llava_next_merge_phase_sets_the_peak_for_a_wide_language_model() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation/configs/vlm");
        let f = "llava-v1.6-mistral-7b-hf.json";
        let mut m = crate::config::parse_config(&std::fs::read(dir.join(f)).unwrap(), f, f).unwrap();
        m.hidden = 7168;
        let mm = m.multimodal.clone().unwrap();
        let v = plan(&m, &mm, &cfg(), 8192, 256, 32_768, 2).unwrap();
        let (n, tiles, embeds) = (v.items as u128, v.patches_per_item as u128 / 576, v.tokens_per_item as u128);
        assert!(n >= 1 && tiles > 1, "{n} images of {tiles} tiles");
        let merge = (n * (tiles * 576 + embeds) + (embeds - 576)) * 7168 * 2;
        let pass = encoder_pass(&mm, m.hidden, n * v.patches_per_item as u128, 1, 2);
        assert!(merge > pass, "merge {merge} ≤ encoder pass {pass}");
        // fp32 pixels cast to bf16: 4 + 2 bytes a value, 3 channels, 336² pixels a tile.
        let pixels = n * tiles * 336 * 336 * 3 * (4 + 2);
        assert_eq!(v.encoder_peak, pixels + merge);
    }
}
