//! The normalised model description: every architecture vram reads is reduced to this one
//! shape, from which parameters and memory are computed. Raw configs become a [`Model`] in
//! [`crate::config`]; nothing else looks at raw JSON.

use serde::Serialize;

use crate::dtype::DType;

/// Most classes a classification head may have (a guard against absurd configs and flags).
pub const MAX_LABELS: u64 = 1 << 20;
/// Largest image side in pixels a vision encoder accepts.
pub const MAX_IMAGE_SIDE: u64 = 1 << 16;

/// Normalisation layer type, which decides what autograd saves (see `memory::activations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// `LlamaRMSNorm`: upcast to fp32, normalise, cast back, multiply by weight.
    RmsNorm,
    /// `GemmaRMSNorm`: fp32 throughout, `x * (1 + w)`, cast back at the end.
    GemmaRmsNorm,
    /// `Olmo2RMSNorm`: the weight is applied in fp32, then the product is cast back.
    RmsNormFp32Weight,
    /// `T5LayerNorm`: the variance from an fp32 copy, the *original* input times its rsqrt
    /// (promoted to fp32), cast to a half weight's dtype, times the weight.
    T5LayerNorm,
    /// `nn.LayerNorm` (weight, and bias when `bias`).
    LayerNorm {
        /// Whether the norm has a bias vector.
        bias: bool,
    },
}

/// How the attention and MLP blocks are wired inside a decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// Pre-norm, attention then MLP, two norms (Llama, Qwen, Mistral, GPT-2 …).
    Sequential,
    /// Attention and MLP read the same normed input (GPT-J, Phi-2, Falcon-7B): one norm.
    Parallel,
    /// GPT-NeoX parallel residual: two norms, both on the layer input.
    ParallelTwoNorms,
    /// Gemma-2/3 "sandwich": pre- and post-norm around attention and MLP, four norms.
    Sandwich,
    /// OLMo-2: norms after attention and after the MLP only.
    PostNorm,
    /// BERT "post-LN": `LayerNorm(x + sublayer(x))` after attention and after the MLP
    /// (transformers models/bert/modeling_bert.py BertSelfOutput, BertOutput).
    PostLn,
}

/// What sits on top of an encoder (transformers `BertFor…` classes), which decides the head's
/// parameters and what the loss holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EncoderHead {
    /// `…ForMaskedLM` (fill-mask): transform dense + LayerNorm, decoder tied to the word
    /// embedding, a vocabulary-sized bias; logits for every position.
    MaskedLm,
    /// `…ForSequenceClassification` (text-classification): a pooler (BERT) or a dense layer
    /// (RoBERTa's classification head), both h×h, then `labels` outputs per sequence.
    SequenceClassification {
        /// Output classes (`id2label` / `num_labels`).
        labels: u64,
    },
    /// `…ForTokenClassification` (token-classification): `labels` outputs per token, no pooler.
    TokenClassification {
        /// Output classes.
        labels: u64,
    },
    /// The bare `…Model` with its pooler (feature-extraction: sentence-embedding training,
    /// sentence-transformers): the loss works on pooled vectors.
    Embedding,
    /// `ElectraForPreTraining` (replaced-token detection, ELECTRA's discriminator): dense h×h,
    /// activation, then one logit per token (`dense_prediction`) under a binary cross-entropy.
    ReplacedTokenDetection,
    /// `…ForImageClassification` (image-classification): a linear classifier on the class
    /// token (DINOv2: on the class token and the mean patch token, 2 × hidden inputs).
    ImageClassification {
        /// Output classes.
        labels: u64,
    },
}

/// Which vision transformer (they differ in embeddings, layer scale and heads only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VisionFamily {
    /// ViT (models/vit/modeling_vit.py): class token, conv patches with bias, pooler on ViTModel.
    Vit,
    /// DINOv2 (models/dinov2/modeling_dinov2.py): class and mask tokens, layer scale per block.
    Dinov2,
    /// CLIP's vision tower (models/clip CLIPVisionTransformer): class embedding, bias-free conv
    /// patches, a LayerNorm before the layers (`pre_layrnorm`).
    Clip,
    /// SigLIP's vision tower (models/siglip): no class token, attention-pooling head (`head`).
    Siglip,
    /// Qwen2-VL's vision tower (models/qwen2_vl Qwen2VisionTransformerPretrainedModel): a bias-free
    /// Conv3d over two frames (an image is repeated), 2-D rotary positions, LayerNorm + fc1/fc2.
    Qwen2Vl,
    /// Qwen2.5-VL's (models/qwen2_5_vl): as Qwen2-VL with RMSNorm, a SwiGLU MLP and window attention.
    Qwen25Vl,
    /// Qwen3-VL's (models/qwen3_vl `Qwen3VLVisionModel`; Qwen3.5's without DeepStack): Qwen2-VL's
    /// blocks (LayerNorm, a GELU-tanh fc1/fc2 MLP with biases) over 16-px patches from a Conv3d
    /// with bias, plus a learned position table bilinearly resampled to each image's grid.
    Qwen3Vl,
    /// Llama 4's vision model (models/llama4 `Llama4VisionModel`): a bias-free linear over
    /// unfolded patches, a class embedding appended after them, a position table,
    /// `layernorm_pre`, pre-norm layers (LayerNorm, attention with biases and 2-D complex rotary
    /// positions, a GELU fc1/fc2 MLP with biases), `layernorm_post`, then its pixel-shuffle MLP
    /// (`vision_adapter`, [`VisionAdapter`]).
    Llama4,
}

/// Llama 4's `Llama4VisionPixelShuffleMLP`, part of the vision model: the class token dropped,
/// the patch grid pixel-shuffled (`shuffle`² neighbouring patches into one token of `shuffle`² ×
/// the width), then `Llama4VisionMLP2`: fc1 (`fc1_in` → `fc1_out`), GELU, fc2 (`fc1_out`'s
/// projector output width → `fc2_out`), GELU, both without bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VisionAdapter {
    /// 1 / `pixel_shuffle_ratio` (2 for 0.5).
    pub shuffle: u64,
    /// fc1's input: the vision config's `intermediate_size` (the shuffled width).
    pub fc1_in: u64,
    /// `projector_input_dim`.
    pub fc1_out: u64,
    /// `projector_output_dim`.
    pub fc2_out: u64,
}

impl VisionFamily {
    /// Qwen2-VL or Qwen2.5-VL (no class token, no position table, no final norm).
    pub fn is_qwen(self) -> bool {
        matches!(self, VisionFamily::Qwen2Vl | VisionFamily::Qwen25Vl | VisionFamily::Qwen3Vl)
    }
}

/// A vision transformer's patch embedding: images become `(image / patch)²` tokens (+ a class token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Vision {
    /// Which vision transformer.
    pub family: VisionFamily,
    /// Input channels (`num_channels`, 3).
    pub channels: u64,
    /// Patch side in pixels.
    pub patch: u64,
    /// Image side in pixels the job runs at (the config's `image_size` unless --image-size).
    pub image_size: u64,
    /// Image side the position table was trained for (the config's `image_size`).
    pub native_image_size: u64,
    /// SigLIP's attention-pooling head is present (`vision_use_head`).
    pub pooling_head: bool,
    /// Qwen3-VL's learned position table (`num_position_embeddings` rows), resampled to each
    /// image; 0 for none (the others' tables are the model's `position_embeddings`).
    pub position_table: u64,
    /// Llama 4's pixel-shuffle MLP at the end of the vision model.
    pub adapter: Option<VisionAdapter>,
}

impl Vision {
    /// Whether the family prepends a class token.
    pub fn class_token(self) -> bool {
        !matches!(self.family, VisionFamily::Siglip) && !self.family.is_qwen()
    }

    /// Frames each image is fed as: Qwen2-VL's processor repeats an image to its
    /// `temporal_patch_size` (2) frames (image_processing_qwen2_vl.py), others 1.
    pub fn frames(self) -> u128 {
        if self.family.is_qwen() {
            2
        } else {
            1
        }
    }

    /// Bytes per value of the processor's `pixel_values`: bf16 for Llama 4
    /// (image_processing_llama4.py rescales and normalizes in torch.bfloat16), fp32 for the others.
    pub fn pixel_dtype_bytes(self) -> u128 {
        if self.family == VisionFamily::Llama4 {
            2
        } else {
            4
        }
    }

    /// What the processor's images are, for breakdown labels ("fp32 images").
    pub fn pixel_label(self) -> &'static str {
        if self.pixel_dtype_bytes() == 2 {
            "bf16 images (the processor's dtype)"
        } else {
            "fp32 images"
        }
    }

    /// Bytes of one image as the processor's `pixel_values` (channels × frames × side²).
    pub fn pixel_bytes(self) -> u128 {
        self.pixel_dtype_bytes() * self.channels as u128 * self.frames() * self.image_size as u128 * self.image_size as u128
    }

    /// Tokens the encoder sees for an image of `side` pixels.
    pub fn tokens(self, side: u64) -> u64 {
        let per_side = side / self.patch.max(1);
        per_side * per_side + u64::from(self.class_token())
    }
}

impl EncoderHead {
    /// The head for a task name as Hugging Face pipelines spell it (`fill-mask`,
    /// `text-classification`, `token-classification`, `feature-extraction`) or a common alias;
    /// `labels` sizes a classifier.
    pub fn parse(task: &str, labels: u64) -> Result<EncoderHead, String> {
        match task.to_ascii_lowercase().replace('_', "-").as_str() {
            "fill-mask" | "mlm" | "masked-lm" => Ok(EncoderHead::MaskedLm),
            "text-classification" | "sequence-classification" | "classification" => Ok(EncoderHead::SequenceClassification { labels }),
            "token-classification" | "ner" => Ok(EncoderHead::TokenClassification { labels }),
            "feature-extraction" | "embedding" | "sentence-embedding" => Ok(EncoderHead::Embedding),
            "replaced-token-detection" | "pretraining" | "discriminator" => Ok(EncoderHead::ReplacedTokenDetection),
            // Vision encoders (the Hugging Face pipeline names).
            "image-classification" => Ok(EncoderHead::ImageClassification { labels }),
            "image-feature-extraction" => Ok(EncoderHead::Embedding),
            other => Err(format!(
                "unknown task `{other}`: use fill-mask, text-classification, token-classification, feature-extraction, image-classification, image-feature-extraction or (ELECTRA) replaced-token-detection"
            )),
        }
    }

    /// Output classes of a classification head.
    pub fn labels(self) -> Option<u64> {
        match self {
            EncoderHead::SequenceClassification { labels }
            | EncoderHead::TokenClassification { labels }
            | EncoderHead::ImageClassification { labels } => Some(labels),
            _ => None,
        }
    }

    /// The task name as Hugging Face pipelines spell it.
    pub fn task(self) -> &'static str {
        match self {
            EncoderHead::MaskedLm => "fill-mask",
            EncoderHead::SequenceClassification { .. } => "text-classification",
            EncoderHead::TokenClassification { .. } => "token-classification",
            EncoderHead::Embedding => "feature-extraction",
            EncoderHead::ReplacedTokenDetection => "replaced-token-detection",
            EncoderHead::ImageClassification { .. } => "image-classification",
        }
    }
}

/// A LLaVA-style vision-language model around a decoder (transformers models/llava): a vision
/// tower, a two-layer projector into the language model's width, and image tokens placed in the
/// language model's sequence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Multimodal {
    /// The vision tower (CLIP or SigLIP vision transformer, bare).
    pub tower: Model,
    /// `LlavaMultiModalProjector`: linear_1 (tower width → text width), activation, linear_2.
    pub projector_bias: bool,
    /// The projector's activation.
    pub projector_act: Act,
    /// `vision_feature_layer`: the tower hidden state the projector reads (-2: the one before
    /// the last layer).
    pub feature_layer: i64,
    /// Tokens each image puts in the language model's sequence (`vision_feature_select_strategy`
    /// "default" drops CLIP's class token).
    pub image_tokens: u64,
    /// Images per sample (the CLI's --images-per-sample).
    pub images: u64,
    /// The vision tower is frozen (`--freeze-vision-tower`): no gradients, states or saved
    /// activations for it.
    pub tower_frozen: bool,
    /// Qwen2-VL's PatchMerger in place of LLaVA's projector.
    pub merger: Option<PatchMerger>,
    /// LLaVA-NeXT's tiling of each image ("anyres"); None: one tile per image.
    pub anyres: Option<AnyRes>,
    /// Gemma-3's `Gemma3MultiModalProjector` in place of LLaVA's projector: the average-pooling
    /// kernel (patches per side ÷ tokens per side; 4 for 64×64 patches into 16×16 tokens), then
    /// `mm_soft_emb_norm` (RMSNorm over the tower width) and `mm_input_projection_weight`
    /// (tower width × text width, no bias).
    pub pool: Option<u64>,
    /// Idefics3/SmolVLM's connector and image splitting in place of LLaVA's projector.
    pub shuffle: Option<Shuffle>,
    /// PaliGemma's `PaliGemmaMultiModalProjector`: one Linear(tower width → text width) with a
    /// bias in place of LLaVA's two.
    pub single_linear: bool,
    /// The processor's `token_type_ids` make the image (PaliGemma: with the prefix) a
    /// bidirectional block, so training gives every language-model layer an explicit
    /// (batch, 1, seq, seq) mask (Gemma-3, PaliGemma).
    pub block_mask: bool,
    /// Llama 4's image tiling; its projector is one bias-free linear from the vision model's
    /// pixel-shuffle MLP into the text width (`Llama4MultiModalProjector`).
    pub llama4: Option<Llama4Tiles>,
}

/// Llama 4's images (transformers models/llama4 image_processing_llama4.py): a square image of
/// `side` pixels goes to the smallest n × n canvas of 336-px tiles (at most 16 tiles) that holds
/// it without downscaling, else 4 × 4; more than one tile adds the whole image resized to one
/// tile. Each tile is `tile_tokens` tokens (the patch grid after the pixel shuffle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Llama4Tiles {
    /// The side of the square images in pixels (`--image-size`; the tile size when not given).
    pub side: u64,
    /// Tiles through the tower per image.
    pub tiles: u64,
    /// Language-model tokens per tile.
    pub tile_tokens: u64,
}

/// How the warning on Llama 4's assumed image size begins (dropped once `--image-size` is given).
pub const LLAMA4_IMAGE_ASSUMED: &str = "Llama 4 images assumed";

impl Llama4Tiles {
    /// Tiles for a square image of `side` px with tiles of `tile` px (Llama4ImageProcessor,
    /// max_patches 16, resize_to_max_canvas false: get_best_fit picks the smallest canvas
    /// scale ≥ 1, the square one among equal scales, else the largest canvas).
    pub fn tiles_for(side: u64, tile: u64) -> u64 {
        let n = side.div_ceil(tile.max(1)).clamp(1, 4);
        n * n + u64::from(n > 1)
    }
}

/// Which projector maps the tower's features into the language model (one per family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectorKind {
    /// LLaVA's `LlavaMultiModalProjector`: Linear, activation, Linear.
    Mlp,
    /// Qwen2-VL's `PatchMerger`.
    Merger(PatchMerger),
    /// Gemma-3's average-pooling projector (the pooling kernel).
    Pool(u64),
    /// Idefics3's pixel-shuffle connector.
    Shuffle(Shuffle),
    /// PaliGemma's single linear with a bias.
    Linear,
    /// Llama 4's bias-free Linear(`input`, text width) after the vision model's pixel-shuffle MLP.
    Llama4 {
        /// `vision_output_dim` (the MLP's output width).
        input: u64,
    },
}

/// Idefics3's and SmolVLM's images (transformers models/idefics3): the processor resizes an
/// image's longest edge to `size["longest_edge"]`, rounds each side up to a multiple of the
/// tower's image size and splits it into tiles of that size plus the whole image resized to one
/// tile (image_processing_idefics3.py `get_number_of_image_patches`); the tower runs every tile,
/// and `Idefics3Connector` pixel-shuffles each tile's patch grid (`scale_factor`² neighbouring
/// patches into one token of `scale_factor`² × the tower's width) and projects it with one
/// bias-free linear into the text width (`Idefics3SimpleMLP`). Every tile's tokens go into the
/// language model's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shuffle {
    /// `scale_factor`.
    pub scale: u64,
    /// The processor's `size["longest_edge"]` in pixels (`--image-size`).
    pub longest_edge: u64,
    /// Tiles per image through the tower (the grid plus the global image, or 1 unsplit).
    pub tiles: u64,
    /// Language-model tokens per tile (`image_seq_len`: (image / patch)² / scale²).
    pub tile_tokens: u64,
}

/// How the warning on Idefics3's assumed image size begins (dropped once `--image-size` is given).
pub const SPLIT_IMAGE_ASSUMED: &str = "Split images assumed";

impl Shuffle {
    /// Tiles through the tower for a square image whose longest edge the processor resizes to
    /// `edge` px, with tiles of `tile` px: image_processing_idefics3.py
    /// `get_number_of_image_patches` for a square image (the rescale makes an odd side even; the
    /// sides are held under 4096 px, then rounded up to whole tiles; not above one tile: unsplit).
    pub fn tiles_for(edge: u64, tile: u64) -> u64 {
        let tile = tile.max(1);
        let (mut h, mut w) = (edge + edge % 2, edge);
        // _resize_output_size_scale_below_upper_bound(max_len = MAX_IMAGE_SIZE = 4096).
        if w >= h && w > 4096 {
            (h, w) = (4096 * h / w, 4096);
        } else if h > w && h > 4096 {
            (h, w) = (4096, 4096 * w / h);
        }
        let (rh, rw) = (h.div_ceil(tile) * tile, w.div_ceil(tile) * tile);
        if rh > tile || rw > tile {
            rh.div_ceil(tile) * rw.div_ceil(tile) + 1
        } else {
            1
        }
    }
}

/// Qwen2-VL's `PatchMerger` (modeling_qwen2_vl.py; Qwen2.5-VL's with RMSNorm): `ln_q` over the
/// tower width, `merge`² neighbouring patches concatenated, then Linear(w·merge², w·merge²), GELU,
/// Linear(w·merge², text width), both with bias. Image tokens = patches / merge².
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PatchMerger {
    /// `spatial_merge_size` (2).
    pub merge: u64,
    /// Qwen2.5-VL window attention: window side in patches (`window_size` / patch_size; 0: none).
    pub window: u64,
    /// Blocks attending over the whole image (`fullatt_block_indexes`; all of Qwen2-VL's).
    pub full_attention_layers: u64,
    /// Qwen3-VL's DeepStack mergers (`deepstack_visual_indexes`): each maps one intermediate
    /// block's output as the merger does (its LayerNorm over the merged w·merge² width) into
    /// features added to the language model's image positions after one of its first layers.
    pub deepstack: u64,
    /// The processor's `min_pixels` (`size.shortest_edge`): Qwen2-VL's 56², Qwen3-VL's 256².
    pub min_pixels: u64,
    /// The processor's `max_pixels` (`size.longest_edge`): Qwen2-VL-7B's 3584², Qwen3-VL's 4096².
    pub max_pixels: u64,
}

/// How the warning on Qwen2-VL's assumed image size begins (dropped once `--image-size` is given).
pub const QWEN_IMAGE_ASSUMED: &str = "Qwen2-VL images assumed";
/// How the warning on a vision-language checkpoint read as its language model alone begins
/// (dropped once images are asked for and the tower is loaded).
pub const LM_ONLY_WARNING: &str = "a Qwen3.5 vision-language checkpoint, estimated as AutoModelForCausalLM loads it";
/// How the warning on LLaVA-NeXT's assumed image size begins (dropped once `--image-size` is given).
pub const NEXT_IMAGE_ASSUMED: &str = "Tiled (anyres) images assumed";

/// LLaVA-NeXT's "anyres" images (transformers models/llava_next): the processor picks the
/// resolution in `image_grid_pinpoints` that best fits the image, cuts it into tiles of the
/// tower's image size and adds the whole image resized to one tile (the base); the tower runs
/// every tile, the projector maps every tile's patches, and `pack_image_features` keeps the base
/// tile's tokens plus the grid's, cropped back to the image's aspect ratio (`unpad_image`), with
/// one `image_newline` vector after each row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnyRes {
    /// `image_grid_pinpoints` as (height, width) in pixels, multiples of the tower's image size.
    pub pinpoints: Vec<(u64, u64)>,
    /// The side of the square images the estimate assumes (`--image-size`).
    pub side: u64,
    /// Tiles per image through the tower: the chosen grid plus the base image.
    pub tiles: u64,
    /// Tokens each tile gives the projector (the tower's patches; "default" drops CLIP's class
    /// token): also the base image's share of the language model's tokens.
    pub tile_tokens: u64,
    /// LLaVA-OneVision's `vision_aspect_ratio` "anyres_max_N": a grid feature map larger than
    /// N tiles' worth (by a ratio over 1.1) is bilinearly resized down to about N tiles.
    pub max_tiles: Option<u64>,
    /// LLaVA-OneVision: an image in a sample with several images is not tiled (the model's
    /// `batch_num_images`): the base tile and one newline.
    pub multi_image_base_only: bool,
}

impl AnyRes {
    /// The pinpoint `select_best_resolution` (transformers image_processing_utils.py) picks for a
    /// square image of `side` px: the most effective pixels, then the least waste, first wins a
    /// tie (its float scale and `int()` truncation).
    pub fn best_resolution(&self, side: u64) -> (u64, u64) {
        self.best_resolution_of((side, side))
    }

    /// [`Self::best_resolution`] of an (height, width) image: the pinpoint keeping the most of its
    /// pixels after an aspect-preserving downscale, then the least padding.
    pub fn best_resolution_of(&self, (height, width): (u64, u64)) -> (u64, u64) {
        let mut best = self.pinpoints.first().copied().unwrap_or_default();
        let (mut max_eff, mut min_waste) = (0u128, u128::MAX);
        let (hf, wf) = (height as f64, width as f64);
        for &(h, w) in &self.pinpoints {
            let scale = (w as f64 / wf).min(h as f64 / hf);
            let eff = ((wf * scale) as u128 * (hf * scale) as u128).min(height as u128 * width as u128);
            let waste = (w as u128 * h as u128).saturating_sub(eff);
            if eff > max_eff || (eff == max_eff && waste < min_waste) {
                (max_eff, min_waste, best) = (eff, waste, (h, w));
            }
        }
        best
    }

    /// (tiles, language-model tokens) of a square image of `side` px, for a tower whose tiles
    /// are `crop` px with `per` patches a side.
    /// Tiles: `image_size_to_num_patches` (the grid rounded up, plus the base). Tokens:
    /// `pack_image_features` — a square image's aspect ratio crops the grid's feature map to its
    /// shorter side (`unpad_image` scales the image onto the map: round(side × cur / side) = cur),
    /// centred, so (cur − short)/2 rows or columns go from each edge; each kept row gets a newline.
    pub fn layout(&self, side: u64, crop: u64, per: u64) -> (u64, u64) {
        let (h, w) = self.best_resolution(side);
        let crop = crop.max(1);
        let tiles = h.div_ceil(crop) * w.div_ceil(crop) + 1;
        let (cur_h, cur_w) = (h / crop * per, w / crop * per);
        let (mut rows, mut cols) =
            if cur_w < cur_h { (cur_h - 2 * ((cur_h - cur_w) / 2), cur_w) } else { (cur_h, cur_w - 2 * ((cur_w - cur_h) / 2)) };
        // LlavaOnevisionModel.pack_image_features: ratio = √(rows·cols / (N·per²)); above 1.1
        // the map is interpolated to (int(rows // ratio), int(cols // ratio)).
        if let Some(n) = self.max_tiles {
            let ratio = ((rows * cols) as f64 / (n * per * per).max(1) as f64).sqrt();
            if ratio > 1.1 {
                (rows, cols) = ((rows as f64 / ratio).floor() as u64, (cols as f64 / ratio).floor() as u64);
            }
        }
        (tiles, self.tile_tokens + rows * (cols + 1))
    }

    /// (tiles, tokens) of one image when a sample holds `images` of them (LLaVA-OneVision tiles
    /// a lone image only).
    pub fn layout_for(&self, images: u64, crop: u64, per: u64) -> (u64, u64) {
        match self.multi_image_base_only && images > 1 {
            true => (1, self.tile_tokens + 1),
            false => self.layout(self.side, crop, per),
        }
    }

    /// The default side: the largest square pinpoint (any larger square image gets the same
    /// tiles and tokens), else the largest side of any pinpoint.
    pub fn default_side(pinpoints: &[(u64, u64)]) -> u64 {
        let square = pinpoints.iter().filter(|(h, w)| h == w).map(|p| p.0).max();
        square.unwrap_or_else(|| pinpoints.iter().map(|&(h, w)| h.max(w)).max().unwrap_or(0))
    }
}

/// `max_pixels` of Qwen2-VL-7B-Instruct's and Qwen2.5-VL's preprocessor_config.json (3584²).
pub const QWEN_MAX_PIXELS: u64 = 12_845_056;
/// Their `min_pixels` (56²).
pub const QWEN_MIN_PIXELS: u64 = 3136;
/// Qwen3-VL's (and Qwen3.5's) preprocessor_config.json `size.longest_edge` (4096² pixels).
pub const QWEN3_MAX_PIXELS: u64 = 16_777_216;
/// Their `size.shortest_edge` (256² pixels).
pub const QWEN3_MIN_PIXELS: u64 = 65_536;

impl PatchMerger {
    /// The side the processor resizes a square image of `side` pixels to: transformers
    /// models/qwen2_vl/image_processing_qwen2_vl.py `smart_resize` with factor patch × merge (28):
    /// Python's `round` (halves to even), then held within min/max_pixels (same f64 arithmetic).
    pub fn processed_side(self, side: u64, patch: u64) -> u64 {
        let f = patch.saturating_mul(self.merge).max(1);
        let (q, r) = (side / f, side % f);
        let q = if 2 * r > f || (2 * r == f && q % 2 == 1) { q + 1 } else { q };
        let h = q.saturating_mul(f);
        let (sf, ff) = (side as f64, f as f64);
        let (lo, hi) = (self.min_pixels as f64, self.max_pixels as f64);
        if (h as f64) * (h as f64) > hi {
            let beta = (sf * sf / hi).sqrt();
            ((sf / beta / ff).floor() as u64 * f).max(f)
        } else if (h as f64) * (h as f64) < lo {
            let beta = (lo / (sf * sf)).sqrt();
            (sf * beta / ff).ceil() as u64 * f
        } else {
            h
        }
    }

    /// Language-model tokens of an image of `side` pixels (after the processor's resize): its
    /// patches merged `merge`×`merge`.
    pub fn image_tokens(self, side: u64, patch: u64) -> u64 {
        let per_side = self.processed_side(side, patch) / patch.max(1);
        per_side * per_side / (self.merge * self.merge).max(1)
    }
}

impl Multimodal {
    /// A tower whose last hidden state (every layer, its final norm) feeds a bias-free GELU
    /// projector, `image_tokens` per image, one image per sample, everything trained; the
    /// families' parsers set what differs (their projector, tiling and masks).
    pub fn new(tower: Model, image_tokens: u64) -> Multimodal {
        Multimodal {
            tower,
            projector_bias: false,
            projector_act: Act::Gelu,
            feature_layer: -1,
            image_tokens,
            images: 1,
            tower_frozen: false,
            merger: None,
            anyres: None,
            pool: None,
            shuffle: None,
            single_linear: false,
            block_mask: false,
            llama4: None,
        }
    }

    /// `--image-size` on Qwen2-VL: square images of `side` pixels, resized as the processor does.
    fn set_qwen_image_size(&mut self, side: u64) -> Result<(), String> {
        let pm = self.merger.ok_or("not a Qwen2-VL model")?;
        let Some(vis) = self.tower.encoder.as_mut().and_then(|e| e.vision.as_mut()) else {
            return Err("the vision tower has no patch embedding".into());
        };
        if side == 0 || side > MAX_IMAGE_SIDE {
            return Err(format!("--image-size {side}: must be between 1 and {MAX_IMAGE_SIDE} pixels"));
        }
        let processed = pm.processed_side(side, vis.patch);
        vis.image_size = processed;
        vis.native_image_size = processed;
        self.image_tokens = pm.image_tokens(side, vis.patch);
        Ok(())
    }

    /// `--image-size` on LLaVA-NeXT: square images of `side` pixels, tiled as the processor does.
    fn set_anyres_image_size(&mut self, side: u64) -> Result<(), String> {
        if side == 0 || side > MAX_IMAGE_SIDE {
            return Err(format!("--image-size {side}: must be between 1 and {MAX_IMAGE_SIDE} pixels"));
        }
        self.anyres.as_mut().ok_or("not a LLaVA-NeXT model")?.side = side;
        self.relayout_anyres()
    }

    /// Tiles and tokens per image from the assumed side and the images per sample.
    pub(crate) fn relayout_anyres(&mut self) -> Result<(), String> {
        let vis = self.tower.encoder.and_then(|e| e.vision).ok_or("the vision tower has no patch embedding")?;
        let images = self.images;
        let Some(a) = self.anyres.as_mut() else { return Ok(()) };
        let (tiles, tokens) = a.layout_for(images, vis.image_size, vis.image_size / vis.patch.max(1));
        (a.tiles, self.image_tokens) = (tiles, tokens);
        Ok(())
    }

    /// `--image-size` on Idefics3/SmolVLM: the processor's longest edge, split into tiles.
    /// Llama 4: square images of `side` px, tiled as Llama4ImageProcessor does.
    fn set_llama4_image_size(&mut self, side: u64) -> Result<(), String> {
        let tile = self.tile_for(side)?;
        let l = self.llama4.as_mut().ok_or("not a Llama 4 model")?;
        l.side = side;
        l.tiles = Llama4Tiles::tiles_for(side, tile);
        self.image_tokens = l.tiles * l.tile_tokens;
        Ok(())
    }

    /// The tower's tile side, once `side` (an `--image-size` cut into such tiles) is in range.
    fn tile_for(&self, side: u64) -> Result<u64, String> {
        let tile = self.tower.encoder.and_then(|e| e.vision).ok_or("the vision tower has no patch embedding")?.image_size;
        if side == 0 || side > MAX_IMAGE_SIDE {
            return Err(format!("--image-size {side}: must be between 1 and {MAX_IMAGE_SIDE} pixels"));
        }
        Ok(tile)
    }

    fn set_split_image_size(&mut self, edge: u64) -> Result<(), String> {
        let tile = self.tile_for(edge)?;
        let s = self.shuffle.as_mut().ok_or("not an Idefics3 model")?;
        s.longest_edge = edge;
        s.tiles = Shuffle::tiles_for(edge, tile);
        self.image_tokens = s.tiles * s.tile_tokens;
        Ok(())
    }

    /// The projector this model's family uses.
    pub fn projector(&self) -> ProjectorKind {
        if self.llama4.is_some() {
            let input = self.tower.encoder.and_then(|e| e.vision).and_then(|v| v.adapter).map_or(self.tower.hidden, |a| a.fc2_out);
            return ProjectorKind::Llama4 { input };
        }
        match (self.merger, self.pool, self.shuffle) {
            (Some(pm), _, _) => ProjectorKind::Merger(pm),
            (None, Some(k), _) => ProjectorKind::Pool(k),
            (None, None, Some(s)) => ProjectorKind::Shuffle(s),
            (None, None, None) if self.single_linear => ProjectorKind::Linear,
            (None, None, None) => ProjectorKind::Mlp,
        }
    }

    /// Tiles per image through the tower (LLaVA-NeXT's grid plus base, Idefics3's split plus the
    /// global image; 1 otherwise).
    pub fn tiles(&self) -> u64 {
        if let Some(l) = self.llama4 {
            return l.tiles;
        }
        match (&self.anyres, self.shuffle) {
            (Some(a), _) => a.tiles,
            (None, Some(s)) => s.tiles,
            _ => 1,
        }
    }

    /// Tokens per image the projector maps: every tile's (LLaVA-NeXT), else the image's own.
    pub fn projected_tokens(&self) -> u64 {
        self.anyres.as_ref().map_or(self.image_tokens, |a| a.tiles * a.tile_tokens)
    }

    /// The projector's parameters (two linears; Qwen2-VL's merger adds `ln_q`; LLaVA-NeXT's
    /// `image_newline`, one text-width vector, is counted with it).
    pub fn projector_parameters(&self, text_hidden: u64) -> u64 {
        let (w, t) = (self.tower.hidden, text_hidden);
        match self.projector() {
            // Gemma3MultiModalProjector: mm_input_projection_weight (w × text) and the RMSNorm.
            ProjectorKind::Pool(_) => w * t + w,
            // Idefics3SimpleMLP: Linear(width · scale², text, bias=False).
            ProjectorKind::Shuffle(s) => w * s.scale * s.scale * t,
            ProjectorKind::Linear => w * t + t,
            ProjectorKind::Llama4 { input } => input * t,
            ProjectorKind::Merger(pm) => {
                let wide = w * pm.merge * pm.merge;
                let ln = if matches!(self.tower.norm, Norm::LayerNorm { bias: true }) { 2 * w } else { w };
                // Qwen3-VL's DeepStack mergers: the same linears, their LayerNorm (weight and
                // bias) over the merged width (modeling_qwen3_vl.py use_postshuffle_norm).
                ln + wide * wide + wide + wide * t + t + pm.deepstack * (2 * wide + wide * wide + wide + wide * t + t)
            }
            ProjectorKind::Mlp => {
                let b = u64::from(self.projector_bias);
                let newline = if self.anyres.is_some() { t } else { 0 };
                w * t + b * t + t * t + b * t + newline
            }
        }
    }
}

/// A Mamba (selective state-space) mixer in place of attention and MLP (transformers
/// models/mamba/modeling_mamba.py `MambaMixer`; Falcon-Mamba's adds weightless RMS norms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ssm {
    /// `intermediate_size` (expand × hidden).
    pub d_inner: u64,
    /// `state_size` N.
    pub d_state: u64,
    /// `conv_kernel`.
    pub d_conv: u64,
    /// `time_step_rank` R.
    pub dt_rank: u64,
    /// `use_conv_bias`.
    pub conv_bias: bool,
    /// `use_bias` on in_proj and out_proj.
    pub proj_bias: bool,
    /// Mamba-2's multi-head state-space dual (SSD) mixer in place of Mamba's selective scan.
    pub mamba2: Option<Mamba2>,
    /// A hybrid (Bamba): this many layers are attention layers (counted first) and the others
    /// the mixer; every layer has a pre-norm MLP after its mixer or attention. 0: every layer is
    /// the mixer alone (Mamba, Mamba-2).
    pub attention_layers: u64,
    /// Falcon-H1: every layer runs attention and the mixer side by side on the same normed
    /// input and adds their outputs, then the MLP (transformers models/falcon_h1
    /// `FalconH1DecoderLayer`).
    pub parallel_attention: bool,
    /// Jamba's mixer: RMSNorms on dt, B and C after x_proj (`dt_layernorm`, `b_layernorm`,
    /// `c_layernorm` in transformers models/jamba `JambaMambaMixer`).
    pub dt_bc_norms: bool,
    /// Nemotron-H (transformers models/nemotron_h `NemotronHBlock`): every layer is ONE block —
    /// a pre-norm, then a Mamba-2 mixer, attention or an MLP alone, then the residual add. This
    /// many layers are MLP blocks (counted after the attention layers); with it, neither the
    /// attention nor the mixer layers have an MLP of their own. 0: the layouts above.
    pub mlp_layers: u64,
    /// Gated DeltaNet's linear attention in place of a Mamba scan (Qwen3-Next, Qwen3.5).
    pub delta_net: Option<DeltaNet>,
    /// Zamba2's shared transformer block: the `attention_layers` are its invocations, each
    /// before one of the Mamba-2 layers, which have no MLP of their own.
    pub shared: Option<SharedBlock>,
    /// The first Zamba's Mamba-1 mixer splits its channels into this many heads, each with its
    /// own x_proj and dt_proj and its own scan (modeling_zamba.py `ZambaMambaMixer`): the same
    /// parameters as one mixer `d_inner` wide, with `heads` × (R + 2N) x_proj outputs per token.
    /// 1 for every other Mamba-1 mixer (unused by Mamba-2 and Gated DeltaNet).
    pub mamba1_heads: u64,
    /// The recurrent state's dtype the config names for inference caches (Qwen3.5
    /// `mamba_ssm_dtype`, Nemotron-H `mamba_ssm_cache_dtype`); `None` when it names none.
    pub cache_state_dtype: Option<crate::dtype::DType>,
}

impl Ssm {
    /// A stack of mixers `d_inner` wide, every layer a mixer, bias flags off: Mamba-1's selective
    /// scan unless the family sets `mamba2` or `delta_net`; families set their bias flags and
    /// layouts over it.
    pub fn mixers(d_inner: u64, d_state: u64, d_conv: u64, dt_rank: u64) -> Ssm {
        Ssm {
            d_inner,
            d_state,
            d_conv,
            dt_rank,
            conv_bias: false,
            proj_bias: false,
            mamba2: None,
            attention_layers: 0,
            parallel_attention: false,
            dt_bc_norms: false,
            mlp_layers: 0,
            delta_net: None,
            shared: None,
            mamba1_heads: 1,
            cache_state_dtype: None,
        }
    }
}

/// Zamba2's shared attention block (transformers models/zamba2/modeling_zamba2.py
/// `Zamba2HybridLayer`, Glorioso et al. 2024 "The Zamba2 Suite"): before each hybrid layer's
/// Mamba-2 mixer, the residual stream is concatenated with the embedding output (2·hidden),
/// normed, and run through attention whose q/k/v read the 2·hidden input (head_dim =
/// 2·hidden / heads) and whose o_proj returns to hidden; then a norm, a gated MLP (`gate_up_proj`
/// fused), and an unshared `linear` hidden → hidden whose output is added to the mixer's input.
/// The block's weights cycle through `unique` sets (`num_mem_blocks`); each invocation has its
/// own low-rank adapter on gate_up (and on q, k, v with `attention_adapters`), and its own
/// `linear`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SharedBlock {
    /// `num_mem_blocks`: distinct weight sets the invocations cycle through.
    pub unique: u64,
    /// `adapter_rank`.
    pub adapter_rank: u64,
    /// `use_shared_attention_adapter`: adapters on q, k and v too.
    pub attention_adapters: bool,
}

/// Gated DeltaNet (transformers models/qwen3_next/modeling_qwen3_next.py
/// `Qwen3NextGatedDeltaNet`, Yang et al. 2024 "Gated Delta Networks"): projections to q, k
/// (`key_heads` × `key_dim` each), v and the output gate z (`value_heads` × `value_dim` each),
/// β and the decay input a (one per value head); a depthwise causal conv over q·k·v; per value
/// head `dt_bias` and `A_log`; the delta rule over chunks of 64 tokens
/// (`torch_chunk_gated_delta_rule`, without flash-linear-attention); a gated RMSNorm over
/// `value_dim`; `out_proj`. The recurrent state is [value_heads, key_dim, value_dim] per
/// sequence. `Ssm::d_inner` is the value width, `d_state` the key head size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeltaNet {
    /// `linear_num_key_heads`.
    pub key_heads: u64,
    /// `linear_num_value_heads` (a multiple of the key heads: q and k are repeated to match).
    pub value_heads: u64,
    /// `linear_key_head_dim`.
    pub key_dim: u64,
    /// `linear_value_head_dim`.
    pub value_dim: u64,
    /// Qwen3-Next's fused `in_proj_qkvz` and `in_proj_ba`; Qwen3.5's four separate
    /// projections (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`).
    pub fused_projections: bool,
    /// The model's layer 0 is a linear-attention layer (every released layout): under LoRA its
    /// input, the frozen embedding, needs no gradient.
    pub first_layer_linear: bool,
}

impl DeltaNet {
    /// Tokens per chunk of `torch_chunk_gated_delta_rule` (its default, which the model uses).
    pub const CHUNK: u64 = 64;

    /// Width of q, k and v together: the conv's channels.
    pub fn conv_dim(&self) -> u64 {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }
}

/// Mamba-2 (transformers models/mamba2/modeling_mamba2.py `Mamba2Mixer`): one `in_proj` to
/// the gate, x, B, C (`n_groups` × `state_size` each) and dt per head, a depthwise conv over
/// x·B·C, scalar A, dt bias and D per head, a gated RMSNorm, `out_proj`; the scan runs in
/// chunks of `chunk_size` tokens (`mamba2_chunk_scan` without the `mamba-ssm` kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mamba2 {
    /// `num_heads` H (d_inner = H × head_dim).
    pub heads: u64,
    /// `head_dim` P.
    pub head_dim: u64,
    /// `n_groups` G: B and C are shared by H / G heads.
    pub groups: u64,
    /// `chunk_size` L.
    pub chunk: u64,
    /// The gated RMSNorm over d before `out_proj` (Falcon-H1's `mamba_rms_norm`; without it the
    /// scan output is multiplied by silu(gate)).
    pub gated_norm: bool,
}

/// Which contrastive image-text model (they differ in the text tower's pooling, the heads
/// and the loss).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DualFamily {
    /// CLIP (transformers models/clip `CLIPModel`): the text tower pools its EOS token; bias-free
    /// `visual_projection` and `text_projection` to `projection_dim`; `logit_scale`; a
    /// symmetric cross-entropy over the batch × batch similarities.
    Clip,
    /// SigLIP (models/siglip `SiglipModel`): the text tower pools its last token through a
    /// biased `head`; the vision tower its attention-pooling head; `logit_scale` and
    /// `logit_bias`; a pairwise sigmoid loss over the batch × batch similarities.
    Siglip,
}

/// A dual encoder: an image tower and a text tower trained together on image-text pairs. The
/// outer model is the text tower; this holds the vision tower and what joins them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DualEncoder {
    /// CLIP or SigLIP.
    pub family: DualFamily,
    /// The vision tower (a vision encoder, bare: CLIPVisionTransformer / SiglipVisionTransformer).
    pub vision: Model,
    /// CLIP's `projection_dim`; SigLIP's text head width (`projection_size`, the text hidden size
    /// by default).
    pub projection: u64,
    /// `--freeze-vision-tower`: the image tower gets no gradients or optimizer states.
    pub tower_frozen: bool,
}

impl DualEncoder {
    /// Parameters outside both towers: CLIP's two projections (no bias) and `logit_scale`;
    /// SigLIP's `logit_scale` and `logit_bias` (its text `head` belongs to the text tower).
    pub fn joint_parameters(&self, text_hidden: u64) -> u64 {
        match self.family {
            DualFamily::Clip => (self.vision.hidden + text_hidden) * self.projection + 1,
            DualFamily::Siglip => 2,
        }
    }
}

/// The encoder half of an encoder-decoder model (Whisper: transformers models/whisper; BART:
/// models/bart; T5: models/t5), whose output every decoder layer reads through cross-attention.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seq2Seq {
    /// The encoder stack (no vocabulary of its own: Whisper's input is the audio frontend's, a
    /// text encoder shares the decoder's token embedding, counted with the decoder).
    pub encoder: Model,
    /// Positions the encoder runs over (Whisper: 1500, after the stride-2 conv over 3000 frames;
    /// text: the source length of the job, `--source-len`).
    pub source_tokens: u64,
    /// What feeds the encoder.
    pub frontend: Frontend,
    /// A forward with labels runs without the decoder's KV cache (BART and mBART set
    /// `use_cache = False` when labels are given: modeling_bart.py
    /// BartForConditionalGeneration.forward); Whisper and T5 keep it.
    pub labels_disable_cache: bool,
    /// BART's `final_logits_bias`, a buffer added to the logits: loaded in fp32 it promotes them
    /// to fp32 under autocast before the loss (modeling_bart.py BartForConditionalGeneration).
    pub fp32_logits_bias: bool,
}

/// What turns the input into the encoder's first hidden states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Frontend {
    /// Whisper's audio frontend: conv1 (mel bins → d, kernel 3) and conv2 (d → d, kernel 3,
    /// stride 2), each followed by GELU, over [`Seq2Seq::frames`] log-mel frames.
    Audio {
        /// Log-mel bins per frame (80, or 128 for large-v3).
        mel_bins: u64,
    },
    /// Source token ids through the embedding shared with the decoder (BART, T5).
    Text,
}

/// Longest source accepted for an encoder without a position table (T5): 2^20 tokens.
pub const MAX_SOURCE: u64 = 1 << 20;

impl Seq2Seq {
    /// Input frames: conv2's stride 2 halves them into the encoder's positions (30 s: 3000);
    /// a text encoder reads one token per position.
    pub fn frames(&self) -> u64 {
        match self.frontend {
            Frontend::Audio { .. } => 2 * self.source_tokens,
            Frontend::Text => self.source_tokens,
        }
    }

    /// The encoder's parameters: Whisper's two frontend convs (with biases) and the stack.
    pub fn encoder_parameters(&self) -> u64 {
        let d = self.encoder.hidden;
        let convs = match self.frontend {
            Frontend::Audio { mel_bins } => d * mel_bins * 3 + d + d * d * 3 + d,
            Frontend::Text => 0,
        };
        convs + self.encoder.parameters()
    }

    /// Whether the source length is the user's to choose (text) or fixed by the model (audio).
    pub fn text(&self) -> bool {
        self.frontend == Frontend::Text
    }
}

/// A bidirectional encoder (BERT, RoBERTa, XLM-R): what differs from a decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Encoder {
    /// Rows of the token-type (segment) embedding (`type_vocab_size`; RoBERTa 1).
    pub token_types: u64,
    /// The head on top.
    pub head: EncoderHead,
    /// Patch embedding of a vision transformer (tokens come from images, not a vocabulary).
    pub vision: Option<Vision>,
    /// The bare model (`…Model`, feature-extraction) carries a pooler (BertModel's
    /// `add_pooling_layer=True`); DistilBertModel and ElectraModel have none.
    pub pooler: bool,
    /// A dropout on the attention block's output before its residual add (BertSelfOutput);
    /// DistilBERT's TransformerBlock adds `out_lin`'s output directly.
    pub attention_output_dropout: bool,
    /// DeBERTa-v2/v3's disentangled attention (content-to-position and position-to-content
    /// scores over relative-position embeddings).
    pub disentangled: Option<Disentangled>,
    /// ModernBERT's pre-LN layers and prediction head.
    pub modern: Option<ModernBert>,
}

/// ModernBERT (transformers models/modernbert/modeling_modernbert.py): pre-LN layers (the first
/// without `attn_norm`), fused `Wqkv` and GeGLU `Wi`, rotary positions, global and
/// sliding-window attention, a final norm, and `ModernBertPredictionHead` (dense, activation,
/// norm) under every task head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModernBert {
    /// `classifier_pooling` "mean" (else "cls", the first token).
    pub mean_pooling: bool,
    /// `classifier_bias`: the prediction head's dense bias.
    pub head_bias: bool,
    /// `decoder_bias`: the masked-LM decoder's bias.
    pub decoder_bias: bool,
    /// `classifier_dropout` > 0: a token classifier keeps a dropout mask per token.
    pub classifier_dropout: bool,
}

/// DeBERTa-v2/v3's relative attention (transformers models/deberta_v2/modeling_deberta_v2.py
/// `DisentangledSelfAttention`): `rel_embeddings` of 2 × `span` rows shared by every layer,
/// projected by the layer's own query/key projections (`share_att_key`) or by `pos_key_proj` /
/// `pos_query_proj`, scored against the content and gathered by relative position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Disentangled {
    /// `att_span` = `position_buckets` (or `max_relative_positions`): the embeddings have 2 × span rows.
    pub span: u64,
    /// `share_att_key`: positions reuse the layer's query/key projections.
    pub share_att_key: bool,
    /// Content-to-position scores (`pos_att_type` has "c2p").
    pub c2p: bool,
    /// Position-to-content scores (`pos_att_type` has "p2c").
    pub p2c: bool,
    /// A LayerNorm on the relative embeddings (`norm_rel_ebd` "layer_norm").
    pub rel_norm: bool,
}

/// Multi-head latent attention (DeepSeek-V2/V3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mla {
    /// Rank of the low-rank query projection (`None`: plain `q_proj`).
    pub q_lora_rank: Option<u64>,
    /// Rank of the compressed KV latent.
    pub kv_lora_rank: u64,
    /// Per-head query/key dimension without rotary.
    pub qk_nope_head_dim: u64,
    /// Per-head rotary dimension (shared key part).
    pub qk_rope_head_dim: u64,
    /// Per-head value dimension.
    pub v_head_dim: u64,
}

/// Query/key normalisation inside attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    /// None.
    None,
    /// RMSNorm over each head's `head_dim` (Qwen3, Gemma-3).
    PerHead,
    /// RMSNorm over the whole projection (OLMo-2).
    Full,
    /// LayerNorm with bias over `head_dim` (Phi-2 `qk_layernorm`).
    LayerNormPerHead,
}

/// Activation function, by how PyTorch evaluates it (which decides the tensors saved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    /// SiLU / swish: one native op, saves its input.
    Silu,
    /// Native GELU (exact or `approximate="tanh"`): saves its input.
    Gelu,
    /// `gelu_new`/`gelu_fast`: Python tanh formula, saves four tensors.
    GeluPython,
    /// ReLU: saves its output.
    Relu,
    /// `relu2` (activations.py ReLUSquaredActivation): relu, then `torch.square` of its output.
    Relu2,
    /// `quick_gelu` (CLIP): `x * sigmoid(1.702 * x)` in Python, saves x and the sigmoid output.
    QuickGelu,
}

/// Feed-forward block shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mlp {
    /// Gated (SwiGLU/GeGLU: gate, up, down) or plain (fc1, fc2).
    pub gated: bool,
    /// Gate and up in one `gate_up_proj` (Phi-3).
    pub fused_gate_up: bool,
    /// Activation.
    pub act: Act,
    /// Linear biases.
    pub bias: bool,
}

/// Mixture-of-experts shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// Each routed expert's intermediate size.
    pub expert_intermediate: u64,
    /// Total intermediate size of the always-on shared expert(s), 0 if none.
    pub shared_intermediate: u64,
    /// Shared expert output scaled by a sigmoid gate (Qwen2-MoE).
    pub shared_gate: bool,
    /// For each layer, whether its MLP is an MoE block (else dense with `intermediate`).
    pub sparse_layers: Vec<bool>,
    /// gpt-oss experts (transformers models/gpt_oss/modeling_gpt_oss.py): the router is
    /// `mlp.router` with a bias, every expert has `gate_up_proj_bias` [E, 2I] and
    /// `down_proj_bias` [E, h], and the gate is gpt-oss's clamped SwiGLU (`_apply_gate`).
    pub biased: bool,
    /// Llama 4 (transformers models/llama4 `Llama4TextMoe`): every expert runs over every token
    /// (the input repeated once per expert and scaled by the router's sigmoid score, zero where
    /// not routed; two batched matmuls over the stacked experts) instead of a gather of each
    /// expert's tokens; the router is `router`, the shared expert `shared_expert`.
    pub dense_dispatch: bool,
}

/// What Llama 4's text layers add to a Llama layer (transformers models/llama4
/// `Llama4TextAttention`, configuration_llama4.py `Llama4TextConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Llama4Text {
    /// Layers with rotary positions (`no_rope_layers` 1; the others, every
    /// `no_rope_layer_interval`-th, have none: full causal attention and a query temperature
    /// that keeps nothing for backward, measured). Like Gemma's sliding layers only their number
    /// matters, and vram counts them first: with `attention_chunk_size` they are the model's
    /// windowed (`chunked_attention`) layers, `sliding_layers`.
    pub rotary_layers: u64,
    /// `use_qk_norm`: a weightless L2 norm over q and k on the rotary layers.
    pub qk_l2: bool,
}

/// Attention projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Attention {
    /// Bias on q, k, v.
    pub qkv_bias: bool,
    /// Bias on the output projection.
    pub o_bias: bool,
    /// q, k, v in one projection (GPT-2 `c_attn`, NeoX, Falcon, Phi-3).
    pub fused_qkv: bool,
    /// Query/key normalisation.
    pub qk_norm: QkNorm,
    /// Multi-head latent attention, when present.
    pub mla: Option<Mla>,
    /// `tanh` soft-capping of attention logits (Gemma-2): SDPA/flash cannot run it, eager does.
    pub softcap: bool,
    /// Learned attention sinks, one logit per query head (gpt-oss `self_attn.sinks`): SDPA
    /// cannot run them; transformers runs eager attention or a hub flash kernel with sinks.
    pub sinks: bool,
    /// A sigmoid output gate per query channel, projected by `q_proj` beside the queries (its
    /// output doubled) and multiplied into the attention output before `o_proj` (Qwen3-Next,
    /// Qwen3.5: `attn_output * torch.sigmoid(gate)`).
    pub output_gate: bool,
    /// q made contiguous head-major ([B, H, S, D]) before the kernel (modeling_whisper.py
    /// WhisperAttention: `.transpose(1, 2).contiguous()`). Flash's output follows q's memory
    /// layout (aten flash_api.cpp mha_fwd: `empty_like` of q's [B, S, H, D] view), so the
    /// caller's `transpose(1, 2).contiguous()` of it is a copy, the one the output projection
    /// saves (measured on an H100: validation/gpu/h100/family_recordings.jsonl, Whisper).
    pub head_major_q: bool,
}

impl Attention {
    /// Plain multi-head attention: q/k/v (fused or not) and the output projection with the given
    /// biases, nothing else (no q/k norm, MLA, soft-capping, sinks or output gate).
    pub fn plain(qkv_bias: bool, o_bias: bool, fused_qkv: bool) -> Attention {
        Attention {
            qkv_bias,
            o_bias,
            fused_qkv,
            qk_norm: QkNorm::None,
            mla: None,
            softcap: false,
            sinks: false,
            output_gate: false,
            head_major_q: false,
        }
    }
}

/// A normalised decoder-only transformer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    /// Llama 4's text layers (NoPE layers, chunked attention, the L2 q/k norm).
    pub llama4: Option<Llama4Text>,
    /// Display name (preset name or file path).
    pub name: String,
    /// The config's `model_type`.
    pub model_type: String,
    /// Hidden size.
    pub hidden: u64,
    /// Decoder layers.
    pub layers: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (GQA/MQA when fewer than `heads`).
    pub kv_heads: u64,
    /// Per-head dimension (may differ from hidden/heads).
    pub head_dim: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Dense MLP intermediate size.
    pub intermediate: u64,
    /// Input embedding and LM head share one tensor.
    pub tied_embeddings: bool,
    /// Rows of the learned position embedding (0 for rotary models).
    pub position_embeddings: u64,
    /// Width of the token embedding when it differs from `hidden` (OPT-350m projects in/out).
    pub embed_dim: u64,
    /// Norm type.
    pub norm: Norm,
    /// Block wiring.
    pub block: Block,
    /// Attention projections.
    pub attention: Attention,
    /// Feed-forward block.
    pub mlp: Mlp,
    /// Mixture-of-experts, when present.
    pub moe: Option<Moe>,
    /// Final norm before the LM head.
    pub final_norm: bool,
    /// LM head bias (Phi-2).
    pub lm_head_bias: bool,
    /// Sliding-window size of windowed layers.
    pub sliding_window: Option<u64>,
    /// How many layers use the sliding window (the rest attend globally).
    pub sliding_layers: u64,
    /// `tanh` soft-capping of the final logits (Gemma-2 `final_logit_softcapping`): saves a
    /// vocab-sized tanh output per token.
    pub final_softcap: bool,
    /// Attention-probability dropout (eager attention materialises a mask when > 0).
    pub attention_dropout: f64,
    /// Residual/embedding dropout (GPT-2 `resid_pdrop`): a mask per dropout site when > 0.
    pub hidden_dropout: f64,
    /// Dtype the checkpoint is stored in (`torch_dtype`), or read from safetensors headers.
    pub stored_dtype: Option<DType>,
    /// `use_cache` from the config (transformers default true): in training without gradient
    /// checkpointing, transformers 5 then builds a DynamicCache whose `torch.cat` copies K and V.
    pub use_cache: bool,
    /// Exact parameter count read from safetensors headers, when a model directory was given.
    pub checkpoint_parameters: Option<u64>,
    /// Longest context the model was trained for (`max_position_embeddings`, `n_positions`,
    /// `seq_length`); 0 when the config does not say.
    pub max_positions: u64,
    /// Rotary dimensions per head (`head_dim × partial_rotary_factor`, MLA's
    /// `qk_rope_head_dim`); 0 for learned or ALiBi positions.
    pub rotary_dim: u64,
    /// Things the user should know about how this config was read.
    pub warnings: Vec<String>,
    /// Set when the architecture was not recognised and the user opted in to a Llama-style
    /// guess (`ParseOptions::approximate_unknown`): why the numbers are approximate.
    pub approximation: Option<String>,
    /// The checkpoint's `quantization_config`: the weights on disk are pre-quantized; inference
    /// and serving use that storage (`quant`), training assumes unquantized weights.
    pub quantization: Option<QuantizationConfig>,
    /// Quantized storage seen in the safetensors headers (FP8, packed int4, MXFP4 blocks).
    pub checkpoint_quantization: Option<String>,
    /// Bytes of all tensors in the safetensors headers (exact stored size, scales included).
    pub checkpoint_bytes: Option<u64>,
    /// Multi-token-prediction layers the checkpoint carries beyond `layers`
    /// (`num_nextn_predict_layers`, Qwen3.5/Qwen3-Next's `mtp_num_hidden_layers`): not built for
    /// the model itself, loaded by vLLM as the drafter of `--speculative-config` method mtp.
    pub mtp_layers: u64,
    /// An EAGLE-3 head's `draft_vocab_size`: the tokens its own LM head scores.
    pub draft_vocab: Option<u64>,
    /// RoPE context extension (`rope_scaling` / `rope_parameters`), when the config has one.
    pub rope_scaling: Option<RopeScaling>,
    /// Set for bidirectional encoders (no causal mask, no KV cache, post-LN, an encoder head).
    pub encoder: Option<Encoder>,
    /// Set for a vision-language model: the vision tower and projector around this decoder.
    pub multimodal: Option<Box<Multimodal>>,
    /// A vision tower the checkpoint carries but `AutoModelForCausalLM` does not load (Qwen3.5's
    /// vision-language configs): asking for images (`--images-per-sample`, `--image-size`,
    /// `--freeze-vision-tower`) moves it to `multimodal`, the model as
    /// `…ForConditionalGeneration` loads it.
    pub vision_unloaded: Option<Box<Multimodal>>,
    /// The warnings that replace the language-model-only one when the tower is loaded.
    #[serde(skip)]
    pub vision_warnings: Vec<String>,
    /// Set for an encoder-decoder model: this is its decoder, `seq2seq` its encoder.
    pub seq2seq: Option<Box<Seq2Seq>>,
    /// Set for a CLIP/SigLIP dual encoder: this is its text tower, `dual` its vision tower.
    pub dual: Option<Box<DualEncoder>>,
    /// Set for a Mamba model: every layer is a norm and this mixer (no attention, no MLP).
    pub ssm: Option<Ssm>,
    /// Each decoder layer has cross-attention over the encoder output (its own norm, q/k/v/o).
    pub cross_attention: bool,
    /// With `attention.qkv_bias`, whether k_proj has one too (Whisper's k_proj has none).
    pub k_bias: bool,
    /// A LayerNorm on the summed embeddings before the first layer (BART `layernorm_embedding`).
    pub embedding_norm: bool,
    /// Dropout between the MLP's activation and its output projection (BART
    /// `activation_dropout`, T5 `DenseReluDense.dropout`): a mask, and the projection reads the
    /// dropped copy.
    pub mlp_dropout: bool,
    /// T5's relative position bias: an embedding of `relative_attention_num_buckets` × heads
    /// in the first layer's self-attention (modeling_t5.py `has_relative_attention_bias`); 0 for
    /// none.
    pub relative_buckets: u64,
}

/// A checkpoint's `quantization_config` (transformers `utils/quantization_config.py`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuantizationConfig {
    /// `quant_method` as written, lower-case (`fp8`, `awq`, `gptq`, `bitsandbytes`,
    /// `compressed-tensors`, `mxfp4` …).
    pub method: String,
    /// Bits per weight, when the config says (`bits`, `num_bits`, `load_in_4bit` …).
    pub bits: Option<u64>,
    /// Weights sharing one scale (`group_size`; MXFP4 blocks of 32; FP8 `weight_block_size`
    /// as rows × columns).
    pub group_size: Option<u64>,
    /// Storage format details (`fmt` e4m3, `version` gemm, `bnb_4bit_quant_type` nf4 …).
    pub format: Option<String>,
    /// Modules left unquantized (`modules_to_not_convert`, `ignore`, `llm_int8_skip_modules`).
    pub excluded: Vec<String>,
    /// The `quantization_config` object as written, for the scheme details `quant::scheme`
    /// reads (`weight_block_size`, `bnb_4bit_use_double_quant`, `config_groups` …).
    #[serde(skip)]
    pub raw: serde_json::Map<String, serde_json::Value>,
}

/// How RoPE is stretched beyond the pre-training context (transformers
/// `modeling_rope_utils.py`: linear, dynamic, yarn, llama3, longrope).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RopeScaling {
    /// `rope_type` / `type`.
    pub kind: String,
    /// `factor` (1.0 when the type has none, as longrope's per-dimension factors).
    pub factor: f64,
    /// Pre-training context: `original_max_position_embeddings`, else `max_position_embeddings`.
    pub native_positions: u64,
    /// Context the scaling reaches: the larger of `max_position_embeddings` and
    /// native × factor (transformers' YaRN and Llama-3 configs set both equal).
    pub extended_positions: u64,
}

impl QuantizationConfig {
    /// One line for users: what the checkpoint holds and what the estimate assumes.
    pub fn describe(&self) -> String {
        let mut s = self.method.clone();
        if let Some(b) = self.bits {
            s.push_str(&format!(", {b}-bit"));
        }
        // fp8 block quantization (DeepSeek-V3's `weight_block_size`) names its block, not a group.
        let block = self.raw.get("weight_block_size").and_then(|v| v.as_array()).filter(|a| a.len() == 2);
        match (block, self.group_size) {
            (Some(b), _) => s.push_str(&format!(", block {}×{}", b[0], b[1])),
            (None, Some(g)) => s.push_str(&format!(", group {g}")),
            (None, None) => {}
        }
        if let Some(f) = &self.format {
            s.push_str(&format!(", {f}"));
        }
        if !self.excluded.is_empty() {
            s.push_str(&format!(", {} module pattern(s) left unquantized", self.excluded.len()));
        }
        s
    }
}

/// What a parameter tensor is, for sharding, quantisation and 8-bit optimisers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Token embedding.
    Embedding,
    /// Learned position embedding.
    Position,
    /// Output projection to the vocabulary (untied).
    LmHead,
    /// A linear weight matrix inside a decoder layer.
    Linear,
    /// Routed experts' weights (3-D in transformers 5: `[experts, out, in]`).
    Experts,
    /// MoE router / gate.
    Router,
    /// Norm weights and biases.
    Norm,
    /// A LoRA/DoRA adapter tensor (trainable, fp32).
    Adapter,
    /// Linear biases.
    Bias,
}

/// A group of identical parameter tensors (one per layer, or one in total).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorGroup {
    /// Name template as transformers names it (`layers.{i}.self_attn.q_proj.weight`).
    pub name: String,
    /// Elements in one tensor.
    pub numel: u64,
    /// How many such tensors.
    pub count: u64,
    /// What it is.
    pub role: Role,
    /// Output features (first dimension) of a matrix, times the expert stack; `numel` for vectors.
    pub rows: u64,
    /// Input features (last dimension) of a matrix, times the expert stack; 1 for vectors.
    pub cols: u64,
}

impl TensorGroup {
    pub(crate) fn vector(name: String, numel: u64, count: u64, role: Role) -> Self {
        TensorGroup { name, numel, count, role, rows: numel, cols: 1 }
    }
    pub(crate) fn matrix(name: String, stack: u64, out: u64, inp: u64, count: u64, role: Role) -> Self {
        TensorGroup { name, numel: stack * out * inp, count, role, rows: stack * out, cols: stack * inp }
    }
    /// Whether this is a matrix (2-D, or a 3-D expert stack).
    pub fn is_matrix(&self) -> bool {
        self.cols > 1
    }
}

impl Model {
    /// Notes about running `seq_len` tokens through this model: past its trained context, and
    /// which RoPE scaling (native → extended length) a long context relies on.
    pub fn context_warnings(&self, seq_len: u64) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(vis) = self.encoder.and_then(|e| e.vision) {
            if vis.image_size != vis.native_image_size {
                v.push(format!(
                    "images of {0}×{0} pixels where the position table was trained at {1}×{1}: transformers interpolates it (interpolate_pos_encoding=True); {2} tokens per image",
                    vis.image_size, vis.native_image_size, seq_len
                ));
            }
            return v;
        }
        if let Some(table) = self.position_table().filter(|&t| seq_len > t) {
            v.push(format!(
                "sequence length {seq_len} exceeds the learned position table ({table} positions): the model cannot run it at all"
            ));
            return v;
        }
        match &self.rope_scaling {
            Some(r) => {
                if seq_len > r.extended_positions {
                    v.push(format!(
                        "sequence length {seq_len} exceeds the longest context the {} RoPE scaling reaches ({} tokens): memory is estimated, quality past it is untrained",
                        r.kind, r.extended_positions
                    ));
                } else if seq_len > r.native_positions {
                    v.push(format!(
                        "sequence length {seq_len} relies on {} RoPE scaling (factor {}): native context {} tokens, extended to {}",
                        r.kind, r.factor, r.native_positions, r.extended_positions
                    ));
                }
            }
            None if self.max_positions > 0 && seq_len > self.max_positions => v.push(format!(
                "sequence length {seq_len} exceeds max_position_embeddings ({}) and the config has no RoPE scaling: memory is estimated, the model was not trained for it",
                self.max_positions
            )),
            None => {}
        }
        v
    }

    /// `--task` / `--num-labels` (CLI, Python and web alike): the head an encoder is fine-tuned
    /// or run with; `None, None` keeps the config's.
    pub fn apply_task(&mut self, task: Option<&str>, num_labels: Option<u64>) -> Result<(), String> {
        if task.is_none() && num_labels.is_none() {
            return Ok(());
        }
        let current = self.encoder.map(|e| e.head);
        let labels = num_labels.or(current.and_then(|h| h.labels())).unwrap_or(2);
        let head = match (task, current) {
            (Some(t), _) => EncoderHead::parse(t, labels)?,
            (None, Some(h)) if h.labels().is_some() => EncoderHead::parse(h.task(), labels)?,
            _ => return Err("--num-labels sizes a classification head: add --task text-classification or token-classification".into()),
        };
        if task.is_some() && num_labels.is_some() && head.labels().is_none() {
            return Err(format!("--num-labels applies to classification heads, not --task {}", head.task()));
        }
        self.set_encoder_head(head)
    }

    /// `--images-per-sample` and `--freeze-vision-tower` on a vision-language model.
    pub fn set_vision_inputs(&mut self, images: Option<u64>, freeze_tower: bool) -> Result<(), String> {
        if let Some(d) = self.dual.as_mut() {
            if images.is_some_and(|n| n != 1) {
                return Err(format!("--images-per-sample: {} trains on image-text pairs, one image per sample", self.model_type));
            }
            d.tower_frozen |= freeze_tower;
            return Ok(());
        }
        if images.is_some() || freeze_tower {
            self.load_vision();
        }
        let Some(mm) = self.multimodal.as_mut() else {
            return match (images, freeze_tower) {
                (None, false) => Ok(()),
                _ => Err(format!(
                    "--images-per-sample and --freeze-vision-tower apply to vision-language models (LLaVA, LLaVA-NeXT, LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 with its vision_config, Gemma-3, Idefics3/SmolVLM, PaliGemma, Llama 4); {} has no vision tower",
                    self.model_type
                )),
            };
        };
        if let Some(n) = images {
            if n == 0 || n > 4096 {
                return Err(format!("--images-per-sample {n}: must be between 1 and 4096"));
            }
            mm.images = n;
            mm.relayout_anyres()?;
        }
        mm.tower_frozen |= freeze_tower;
        Ok(())
    }

    /// Load the vision tower a language-model-only reading left aside (Qwen3.5): the model
    /// becomes the vision-language model, and its warnings say so.
    pub fn load_vision(&mut self) {
        if self.multimodal.is_some() {
            return;
        }
        if let Some(mm) = self.vision_unloaded.take() {
            self.multimodal = Some(mm);
            self.warnings.retain(|w| !w.starts_with(LM_ONLY_WARNING));
            let extra = std::mem::take(&mut self.vision_warnings);
            self.warnings.splice(0..0, extra);
        }
    }

    /// The model vLLM builds from this checkpoint: the checkpoint's whole architecture (a config
    /// read as its language model for training, Qwen3.5's, gets its vision tower back), or with
    /// `language_model_only` (vLLM's `--language-model-only`) a vision-language model's language
    /// model alone.
    pub fn as_served(&self, language_model_only: bool) -> Model {
        let mut m = self.clone();
        if !language_model_only {
            m.load_vision();
        } else if m.encoder.is_none() && m.seq2seq.is_none() {
            m.multimodal = None;
            m.vision_unloaded = None;
            m.warnings.retain(|w| !w.starts_with(LM_ONLY_WARNING));
        }
        m
    }

    /// Drop the warning that names the image size a VLM assumed (the user gave one, or serving
    /// sizes images its own way).
    pub fn drop_image_assumption(&mut self) {
        self.warnings.retain(|w| {
            !w.starts_with(QWEN_IMAGE_ASSUMED)
                && !w.starts_with(NEXT_IMAGE_ASSUMED)
                && !w.starts_with(SPLIT_IMAGE_ASSUMED)
                && !w.starts_with(LLAMA4_IMAGE_ASSUMED)
        });
    }

    /// `--image-size`: run a vision encoder on square images of `side` pixels (transformers
    /// interpolates the position table). Text models have no image size.
    pub fn set_image_size(&mut self, side: u64) -> Result<(), String> {
        self.load_vision();
        if let Some(mm) = self.multimodal.as_mut().filter(|mm| mm.llama4.is_some()) {
            mm.set_llama4_image_size(side)?;
            self.drop_image_assumption();
            return Ok(());
        }
        if let Some(mm) = self.multimodal.as_mut().filter(|mm| mm.merger.is_some() || mm.anyres.is_some() || mm.shuffle.is_some()) {
            match (mm.merger, mm.shuffle) {
                (Some(_), _) => mm.set_qwen_image_size(side)?,
                (None, Some(_)) => mm.set_split_image_size(side)?,
                (None, None) => mm.set_anyres_image_size(side)?,
            }
            self.drop_image_assumption();
            return Ok(());
        }
        if let Some(d) = self.dual.as_mut() {
            return d.vision.set_image_size(side);
        }
        if let Some(vis) = self.multimodal.as_ref().and_then(|mm| mm.tower.encoder).and_then(|e| e.vision) {
            return Err(format!(
                "--image-size {side}: this vision-language model's processor resizes every image to the tower's fixed {0}×{0} px ({1} tokens per image); images are counted with --images-per-sample",
                vis.image_size,
                self.multimodal.as_ref().map_or(0, |mm| mm.image_tokens)
            ));
        }
        let Some(vis) = self.encoder.as_mut().and_then(|e| e.vision.as_mut()) else {
            return Err(format!("--image-size applies to vision encoders (ViT, DINOv2, CLIP, SigLIP); {} reads tokens", self.model_type));
        };
        if side < vis.patch || side > MAX_IMAGE_SIDE {
            return Err(format!("--image-size {side}: must be between the patch size ({}) and {MAX_IMAGE_SIDE} pixels", vis.patch));
        }
        vis.image_size = side;
        Ok(())
    }

    /// The sequence a job runs: the tokens of one image for a vision encoder (a requested
    /// length is then an error: the image size decides it), else `requested` or `default` (for
    /// a text encoder at most what its position table runs).
    pub fn sequence(&self, requested: Option<u64>, default: u64) -> Result<u64, String> {
        /// Text tokens a vision-language sample is assumed to add to its images' when the
        /// default sequence cannot hold the images.
        const VLM_TEXT_TOKENS: u64 = 512;
        match (self.encoder.and_then(|e| e.vision), requested) {
            (Some(v), None) => Ok(v.tokens(v.image_size)),
            (Some(v), Some(_)) => Err(format!(
                "a vision encoder's sequence is its image's patches ({} tokens at {}×{} pixels): drop --seq-len, pass --image-size to change it",
                v.tokens(v.image_size),
                v.image_size,
                v.image_size
            )),
            // A text encoder defaults to the longest sequence its position table runs.
            (None, None) if self.encoder.is_some() => {
                // DeBERTa-v3 has no absolute position table: its max_position_embeddings bounds it.
                Ok(default.min(self.position_table().unwrap_or(self.max_positions)).max(1))
            }
            (None, r) if self.seq2seq.is_some() => self.target_sequence(r, default),
            // A vision-language model's sequence holds its images' tokens: when they need more
            // than the default, the default grows to hold them and 512 text tokens (rounded up
            // to 128), and the report shows the length used.
            (None, None) if self.multimodal.is_some() => {
                let img = self.multimodal.as_ref().map_or(0, |mm| mm.images.saturating_mul(mm.image_tokens));
                Ok(if img >= default { (img + VLM_TEXT_TOKENS).div_ceil(128) * 128 } else { default })
            }
            // A learned position table cannot embed more tokens than it has rows: on a GPU the
            // lookup fails with an index assertion (validation/gpu/h100: GPT-2 at 2,048 tokens).
            (None, r) => match (r, self.position_table()) {
                (Some(n), Some(t)) if n > t => Err(format!(
                    "--seq-len {n}: {} has a learned position table of {t} positions and cannot embed more tokens (on a GPU an index assertion stops it); use --seq-len {t} or less",
                    self.model_type
                )),
                (Some(n), _) => Ok(n),
                (None, t) => Ok(t.map_or(default, |t| default.min(t)).max(1)),
            },
        }
    }

    /// Tokens a learned absolute position table embeds (None for rotary, ALiBi or relative
    /// positions). RoBERTa's table has two extra rows (padding_idx + 1 offset, modeling_roberta.py),
    /// OPT's too (OPTLearnedPositionalEmbedding's offset 2, counted in `position_embeddings`).
    pub fn position_table(&self) -> Option<u64> {
        let offset = if matches!(self.model_type.as_str(), "roberta" | "xlm-roberta" | "camembert" | "opt") { 2 } else { 0 };
        (self.position_embeddings > 0).then(|| self.position_embeddings.saturating_sub(offset))
    }

    /// The decoder's positions of an encoder-decoder model: at most its learned position table
    /// (Whisper's `max_target_positions` 448, BART's `max_position_embeddings`); T5's relative
    /// bias has no table, and defaults to the length it was pre-trained on (`n_positions`).
    fn target_sequence(&self, requested: Option<u64>, default: u64) -> Result<u64, String> {
        let table = match self.relative_buckets {
            0 => Some(self.position_embeddings.saturating_sub(if self.embedding_norm { 2 } else { 0 })),
            _ => None,
        };
        match (requested, table) {
            (Some(n), Some(t)) if n > t => Err(format!(
                "--seq-len {n}: {}'s decoder has a learned table of {t} positions; target sequences are at most {t} tokens",
                self.model_type
            )),
            (Some(n), _) => Ok(n),
            (None, Some(t)) => Ok(default.min(t).max(1)),
            (None, None) => Ok(default.min(self.max_positions.max(1))),
        }
    }

    /// `--source-len`: the source tokens a text encoder-decoder's encoder runs (BART: at most
    /// its position table). Whisper's encoder always runs 30 s of audio.
    pub fn set_source_len(&mut self, n: u64) -> Result<(), String> {
        let Some(s) = self.seq2seq.as_mut() else {
            return Err(format!("--source-len applies to encoder-decoder models (BART, T5); {} has no encoder", self.model_type));
        };
        if !s.text() {
            return Err(format!(
                "--source-len: Whisper's encoder always runs {} positions (30 s of audio padded or cut by the feature extractor)",
                s.source_tokens
            ));
        }
        let table = if s.encoder.relative_buckets > 0 { MAX_SOURCE } else { s.encoder.position_embeddings.saturating_sub(2) };
        if n == 0 || n > table {
            return Err(format!("--source-len {n}: must be between 1 and {table} tokens for {}", self.model_type));
        }
        s.source_tokens = n;
        Ok(())
    }

    /// Put `head` on an encoder (the CLI's `--task`): the config names the class it was saved
    /// with, the user may fine-tune it for another task. A decoder has no encoder head.
    pub fn set_encoder_head(&mut self, head: EncoderHead) -> Result<(), String> {
        if self.dual.is_some() {
            return Err(format!(
                "--task {}: {} trains both towers on a contrastive loss; it has no task head to choose",
                head.task(),
                self.model_type
            ));
        }
        if head.labels().is_some_and(|l| l == 0 || l > MAX_LABELS) {
            return Err(format!("--num-labels must be between 1 and {MAX_LABELS}"));
        }
        let Some(enc) = self.encoder.as_mut() else {
            return Err(format!(
                "--task {} applies to encoder models (BERT, RoBERTa, XLM-R, ViT …); {} is a decoder",
                head.task(),
                self.model_type
            ));
        };
        let image_head = matches!(head, EncoderHead::ImageClassification { .. } | EncoderHead::Embedding);
        let text_head = !matches!(head, EncoderHead::ImageClassification { .. });
        if (enc.vision.is_some() && !image_head) || (enc.vision.is_none() && !text_head) {
            let kind = if enc.vision.is_some() {
                "a vision encoder: use image-classification or image-feature-extraction"
            } else {
                "a text encoder: use fill-mask, text-classification, token-classification or feature-extraction"
            };
            return Err(format!("--task {} does not fit {}, {kind}", head.task(), self.model_type));
        }
        // Only ELECTRA has a replaced-token-detection head (ElectraForPreTraining).
        if head == EncoderHead::ReplacedTokenDetection && self.model_type != "electra" {
            return Err(format!("--task {} is ELECTRA's discriminator head; {} has none", head.task(), self.model_type));
        }
        enc.head = head;
        // BertForMaskedLM ties its decoder to the word embedding; other heads have no decoder.
        self.tied_embeddings = head == EncoderHead::MaskedLm;
        Ok(())
    }

    /// Whether layer `i` is a state-space mixer layer (every layer of Mamba and Mamba-2; in a
    /// hybrid, those after its attention layers).
    pub fn is_ssm_layer(&self, i: u64) -> bool {
        self.ssm.is_some_and(|s| i >= s.attention_layers + s.mlp_layers)
    }

    /// Whether vram's layer `i` is the model's layer 0 where vram reorders a hybrid's layers
    /// (attention first): a Gated DeltaNet hybrid whose layer 0 is linear attention.
    pub fn is_model_first_layer(&self, i: u64) -> bool {
        self.delta_net().is_some_and(|d| d.first_layer_linear) && self.ssm.is_some_and(|s| i == s.attention_layers)
    }

    /// The Gated DeltaNet mixer of a Qwen3-Next / Qwen3.5 hybrid, if this is one.
    pub fn delta_net(&self) -> Option<DeltaNet> {
        self.ssm.and_then(|s| s.delta_net)
    }

    /// Layers as the config counts them (`num_hidden_layers`): vram counts each of Zamba2's
    /// shared-block invocations as a layer of its own beside the Mamba-2 layers.
    pub fn config_layers(&self) -> u64 {
        match self.ssm {
            Some(s) if s.shared.is_some() => self.layers - s.attention_layers,
            _ => self.layers,
        }
    }

    /// Zamba2's shared attention block, if this is a Zamba2 model.
    pub fn shared_block(&self) -> Option<SharedBlock> {
        self.ssm.and_then(|s| s.shared)
    }

    /// Whether layer `i` is a Nemotron-H MLP block (after its attention layers).
    pub fn is_mlp_layer(&self, i: u64) -> bool {
        self.ssm.is_some_and(|s| s.mlp_layers > 0 && i >= s.attention_layers && i < s.attention_layers + s.mlp_layers)
    }

    /// A hybrid of attention and state-space layers.
    pub fn is_hybrid(&self) -> bool {
        self.ssm.is_some_and(|s| s.attention_layers > 0 || s.parallel_attention || s.mlp_layers > 0)
    }

    /// Whether layer `i` has attention (every layer but a state-space mixer layer; Falcon-H1's
    /// layers have both).
    pub fn has_attention(&self, i: u64) -> bool {
        (!self.is_ssm_layer(i) && !self.is_mlp_layer(i)) || self.ssm.is_some_and(|s| s.parallel_attention)
    }

    /// Whether layer `i` is a mixture-of-experts layer.
    pub fn is_moe_layer(&self, i: u64) -> bool {
        self.moe.as_ref().is_some_and(|m| m.sparse_layers.get(i as usize).copied().unwrap_or(false))
    }

    /// Number of MoE layers.
    pub fn moe_layers(&self) -> u64 {
        self.moe.as_ref().map_or(0, |m| m.sparse_layers.iter().filter(|s| **s).count() as u64)
    }

    /// Query projection width.
    pub fn q_dim(&self) -> u64 {
        match self.attention.mla {
            Some(m) => self.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim),
            None => self.heads * self.head_dim,
        }
    }

    /// Whether positions enter through rotary embeddings: no learned table, no relative bias
    /// (T5). ALiBi models count here too, as they always have.
    pub fn rotary(&self) -> bool {
        // Zamba2's shared attention without `use_mem_rope` has no positions at all.
        self.position_embeddings == 0 && self.relative_buckets == 0 && !(self.shared_block().is_some() && self.rotary_dim == 0)
    }

    /// Key (and value) projection width.
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    /// Exact parameter count as PyTorch reports it: `sum(p.numel() for p in model.parameters())`,
    /// tied weights once.
    pub fn parameters(&self) -> u64 {
        // Validated in config::validate to stay below 2^50.
        let own = self.tensors().iter().map(|t| t.numel.saturating_mul(t.count)).fold(0, u64::saturating_add);
        let own = match &self.seq2seq {
            Some(s) => own.saturating_add(s.encoder_parameters()),
            None => own,
        };
        let own = match &self.dual {
            Some(d) => own.saturating_add(d.vision.parameters()).saturating_add(d.joint_parameters(self.hidden)),
            None => own,
        };
        match &self.multimodal {
            Some(mm) => own.saturating_add(mm.tower.parameters()).saturating_add(mm.projector_parameters(self.hidden)),
            None => own,
        }
    }

    /// A decoder-only language model (no encoder head, vision tower or encoder stack): what LoRA,
    /// the parallel layouts and the serving engines are modelled for.
    pub fn is_plain_decoder(&self) -> bool {
        self.encoder.is_none() && self.multimodal.is_none() && self.seq2seq.is_none() && self.dual.is_none()
    }

    /// The training loss casts the logits to fp32 before its cross-entropy: transformers'
    /// `ForCausalLMLoss` / `ForMaskedLMLoss` (loss/loss_utils.py `logits.float()`), which decoders,
    /// vision-language models and ModernBERT use. BERT-family, DistilBERT, ELECTRA and DeBERTa
    /// masked-LM heads, T5, BART and Whisper call `CrossEntropyLoss` on the logits as they are
    /// (BART's fp32 `final_logits_bias` promotes them under autocast: `Seq2Seq::fp32_logits_bias`).
    pub fn loss_upcasts_logits(&self) -> bool {
        match (&self.encoder, &self.seq2seq) {
            (Some(enc), _) => enc.modern.is_some(),
            (None, Some(_)) => false,
            (None, None) => true,
        }
    }

    /// What kind of model this is (a stable name for JSON and messages): `decoder`, `encoder`,
    /// `vision-encoder`, `vision-language`, `encoder-decoder` or `dual-encoder`.
    pub fn kind(&self) -> &'static str {
        if self.dual.is_some() {
            "dual-encoder"
        } else if self.encoder.is_some_and(|e| e.vision.is_some()) {
            "vision-encoder"
        } else if self.encoder.is_some() {
            "encoder"
        } else if self.multimodal.is_some() {
            "vision-language"
        } else if self.seq2seq.is_some() {
            "encoder-decoder"
        } else {
            "decoder"
        }
    }

    /// The language model alone (a VLM without its tower and projector; itself otherwise).
    pub fn language_model(&self) -> Model {
        Model { multimodal: None, ..self.clone() }
    }

    /// Parameters in the token embedding, position embedding and (untied) LM head.
    pub fn embedding_parameters(&self) -> u64 {
        self.tensors().iter().filter(|t| matches!(t.role, Role::Embedding | Role::Position | Role::LmHead)).map(|t| t.numel * t.count).sum()
    }

    /// Parameters of one decoder layer `i`.
    pub fn layer_parameters(&self, i: u64) -> u64 {
        self.layer_inventory(i).iter().map(|t| t.numel * t.count).sum()
    }

    /// The parameter tensors of decoder layer `i`.
    pub fn layer_inventory(&self, i: u64) -> Vec<TensorGroup> {
        let mut v = Vec::new();
        self.layer_tensors(i, 1, &mut v);
        v
    }

    /// The parameter inventory, mirroring transformers' module tree (checked against
    /// `validation/fixtures/param_counts.jsonl`, written by real transformers on the meta device).
    pub fn tensors(&self) -> Vec<TensorGroup> {
        if let Some(enc) = self.encoder {
            return self.encoder_tensors(enc);
        }
        let h = self.hidden;
        let mut v = Vec::new();
        v.push(TensorGroup::matrix("embed_tokens.weight".into(), 1, self.vocab, self.embed_dim, 1, Role::Embedding));
        if self.position_embeddings > 0 {
            v.push(TensorGroup::matrix("embed_positions.weight".into(), 1, self.position_embeddings, h, 1, Role::Position));
        }
        if self.embedding_norm {
            self.norm_tensors("layernorm_embedding", 1, h, &mut v);
        }
        if self.relative_buckets > 0 {
            // T5Attention.relative_attention_bias, first layer only (shared by the others).
            v.push(TensorGroup::matrix(
                "block.0.relative_attention_bias.weight".into(),
                1,
                self.relative_buckets,
                self.heads,
                1,
                Role::Position,
            ));
        }
        if self.embed_dim != h {
            // OPT with word_embed_proj_dim != hidden_size: project_in / project_out, no bias.
            Self::linear(&mut v, "project_in", self.embed_dim, h, false, 1);
            Self::linear(&mut v, "project_out", h, self.embed_dim, false, 1);
        }
        // Layers come in runs of identical structure; group them.
        let mut i = 0;
        while i < self.layers {
            let kind = (self.is_moe_layer(i), self.is_ssm_layer(i), self.is_mlp_layer(i));
            let mut j = i + 1;
            while j < self.layers && (self.is_moe_layer(j), self.is_ssm_layer(j), self.is_mlp_layer(j)) == kind {
                j += 1;
            }
            self.layer_tensors(i, j - i, &mut v);
            i = j;
        }
        if self.final_norm {
            self.norm_tensors("norm", 1, h, &mut v);
        }
        if !self.tied_embeddings {
            v.push(TensorGroup::matrix("lm_head.weight".into(), 1, self.vocab, self.embed_dim, 1, Role::LmHead));
        }
        if self.lm_head_bias {
            v.push(TensorGroup::vector("lm_head.bias".into(), self.vocab, 1, Role::Bias));
        }
        v
    }

    /// A BERT-style encoder's inventory (transformers models/bert/modeling_bert.py; RoBERTa and
    /// XLM-R name them `roberta.`/`lm_head.`, DistilBERT `distilbert.`/`vocab_*`, but hold the
    /// same shapes): word, position and token-type embeddings with a LayerNorm, the layers, then
    /// the head. ELECTRA's embeddings are `embed_dim` wide and projected to the hidden size
    /// (modeling_electra.py ElectraModel.embeddings_project), its generator head back to it.
    fn encoder_tensors(&self, enc: Encoder) -> Vec<TensorGroup> {
        if let Some(vis) = enc.vision {
            return self.vision_tensors(enc.head, vis);
        }
        if let Some(mb) = enc.modern {
            return self.modernbert_tensors(enc.head, mb);
        }
        let (h, e) = (self.hidden, self.embed_dim);
        let mut v = vec![TensorGroup::matrix("embeddings.word_embeddings.weight".into(), 1, self.vocab, e, 1, Role::Embedding)];
        v.push(TensorGroup::matrix("embeddings.position_embeddings.weight".into(), 1, self.position_embeddings, e, 1, Role::Position));
        if enc.token_types > 0 {
            v.push(TensorGroup::matrix("embeddings.token_type_embeddings.weight".into(), 1, enc.token_types, e, 1, Role::Position));
        }
        self.norm_tensors("embeddings.LayerNorm", 1, e, &mut v);
        if e != h {
            Self::linear(&mut v, "embeddings_project", e, h, true, 1);
        }
        self.layer_tensors(0, self.layers, &mut v);
        if let Some(d) = enc.disentangled {
            // DebertaV2Encoder: rel_embeddings [2 × span, hidden] and its LayerNorm, shared by every
            // layer; without share_att_key each layer has pos_key_proj / pos_query_proj.
            v.push(TensorGroup::matrix("encoder.rel_embeddings.weight".into(), 1, 2 * d.span, h, 1, Role::Position));
            if d.rel_norm {
                self.norm_tensors("encoder.LayerNorm", 1, h, &mut v);
            }
            if !d.share_att_key {
                if d.c2p {
                    Self::linear(&mut v, "layers.{i}.attention.self.pos_key_proj", h, h, true, self.layers);
                }
                if d.p2c {
                    Self::linear(&mut v, "layers.{i}.attention.self.pos_query_proj", h, h, true, self.layers);
                }
            }
        }
        match enc.head {
            // BertOnlyMLMHead: transform (dense, act, LayerNorm), decoder tied to the word embedding,
            // and its own `bias` [vocab] (RobertaLMHead, DistilBERT's vocab_transform /
            // vocab_layer_norm / vocab_projector, ELECTRA's generator h → embed_dim: the same).
            EncoderHead::MaskedLm => {
                Self::linear(&mut v, "cls.predictions.transform.dense", h, e, true, 1);
                self.norm_tensors("cls.predictions.transform.LayerNorm", 1, e, &mut v);
                if !self.tied_embeddings {
                    v.push(TensorGroup::matrix("cls.predictions.decoder.weight".into(), 1, self.vocab, e, 1, Role::LmHead));
                }
                v.push(TensorGroup::vector("cls.predictions.bias".into(), self.vocab, 1, Role::Bias));
            }
            // BertPooler (dense h×h + tanh on the first token) + classifier; RoBERTa's
            // RobertaClassificationHead and ELECTRA's have dense h×h + out_proj, DistilBERT
            // pre_classifier + classifier: the same shapes.
            EncoderHead::SequenceClassification { labels } => {
                Self::linear(&mut v, "pooler.dense", h, h, true, 1);
                Self::linear(&mut v, "classifier", h, labels, true, 1);
            }
            // BertForTokenClassification: no pooler (add_pooling_layer=False), one classifier.
            EncoderHead::TokenClassification { labels } | EncoderHead::ImageClassification { labels } => {
                Self::linear(&mut v, "classifier", h, labels, true, 1)
            }
            // BertModel as AutoModel loads it: with its pooler (add_pooling_layer=True).
            EncoderHead::Embedding if enc.pooler => Self::linear(&mut v, "pooler.dense", h, h, true, 1),
            EncoderHead::Embedding => {}
            // ElectraDiscriminatorPredictions: dense h×h, activation, dense_prediction h → 1.
            EncoderHead::ReplacedTokenDetection => {
                Self::linear(&mut v, "discriminator_predictions.dense", h, h, true, 1);
                Self::linear(&mut v, "discriminator_predictions.dense_prediction", h, 1, true, 1);
            }
        }
        v
    }

    /// ModernBERT's inventory (modeling_modernbert.py): `tok_embeddings` and the embedding norm,
    /// the layers (layer 0's `attn_norm` is an Identity), `final_norm`, then the head:
    /// `ModernBertPredictionHead` (dense h×h, `classifier_bias`; norm) under every task, the
    /// masked-LM decoder tied to the embeddings with its own `decoder_bias`, classifiers with bias.
    fn modernbert_tensors(&self, head: EncoderHead, mb: ModernBert) -> Vec<TensorGroup> {
        let h = self.hidden;
        let mut v = vec![TensorGroup::matrix("embeddings.tok_embeddings.weight".into(), 1, self.vocab, h, 1, Role::Embedding)];
        self.norm_tensors("embeddings.norm", 1, h, &mut v);
        self.layer_tensors(0, self.layers, &mut v);
        for t in v.iter_mut().filter(|t| t.name.starts_with("layers.{i}.norms.")) {
            t.count = t.count.saturating_sub(1);
        }
        self.norm_tensors("final_norm", 1, h, &mut v);
        let prediction_head = |v: &mut Vec<TensorGroup>| {
            Self::linear(v, "head.dense", h, h, mb.head_bias, 1);
            self.norm_tensors("head.norm", 1, h, v);
        };
        match head {
            EncoderHead::MaskedLm => {
                prediction_head(&mut v);
                if !self.tied_embeddings {
                    v.push(TensorGroup::matrix("decoder.weight".into(), 1, self.vocab, h, 1, Role::LmHead));
                }
                if mb.decoder_bias {
                    v.push(TensorGroup::vector("decoder.bias".into(), self.vocab, 1, Role::Bias));
                }
            }
            EncoderHead::SequenceClassification { labels } | EncoderHead::TokenClassification { labels } => {
                prediction_head(&mut v);
                Self::linear(&mut v, "classifier", h, labels, true, 1);
            }
            EncoderHead::Embedding | EncoderHead::ImageClassification { .. } | EncoderHead::ReplacedTokenDetection => {}
        }
        v
    }

    /// A vision transformer's inventory: patch embedding (a conv, counted as a matrix of
    /// hidden × channels·patch²), class/mask tokens and position table, the pre-norm layers,
    /// the final LayerNorm, then the head.
    fn vision_tensors(&self, head: EncoderHead, vis: Vision) -> Vec<TensorGroup> {
        let (h, l) = (self.hidden, self.layers);
        let fam = vis.family;
        let mut v = Vec::new();
        let pixels = vis.channels * vis.frames() as u64 * vis.patch * vis.patch;
        v.push(TensorGroup::matrix("embeddings.patch_embeddings.weight".into(), 1, h, pixels, 1, Role::Linear));
        if fam.is_qwen() {
            // Qwen2-VL: Conv3d without bias, rotary positions, no final norm (the merger's ln_q
            // is the projector's), no head. Qwen3-VL: the conv has a bias, and a learned
            // position table (`pos_embed`) beside the rotary positions.
            if fam == VisionFamily::Qwen3Vl {
                v.push(TensorGroup::vector("embeddings.patch_embeddings.bias".into(), h, 1, Role::Bias));
                v.push(TensorGroup::matrix("pos_embed.weight".into(), 1, vis.position_table, h, 1, Role::Position));
            }
            self.layer_tensors(0, l, &mut v);
            return v;
        }
        // CLIP's conv and Llama 4's unfold linear have no bias.
        if !matches!(fam, VisionFamily::Clip | VisionFamily::Llama4) {
            v.push(TensorGroup::vector("embeddings.patch_embeddings.bias".into(), h, 1, Role::Bias));
        }
        // Class token (CLIP: class_embedding), DINOv2's mask token.
        let tokens = u64::from(vis.class_token()) + u64::from(fam == VisionFamily::Dinov2);
        if tokens > 0 {
            v.push(TensorGroup::vector("embeddings.cls_token".into(), tokens * h, 1, Role::Position));
        }
        v.push(TensorGroup::matrix("embeddings.position_embeddings".into(), 1, self.position_embeddings, h, 1, Role::Position));
        if matches!(fam, VisionFamily::Clip | VisionFamily::Llama4) {
            self.norm_tensors("pre_layrnorm", 1, h, &mut v);
        }
        self.layer_tensors(0, l, &mut v);
        if fam == VisionFamily::Dinov2 {
            // Dinov2LayerScale lambda1 and lambda2, [hidden] each.
            v.push(TensorGroup::vector("layers.{i}.layer_scale".into(), 2 * h, l, Role::Norm));
        }
        self.norm_tensors("layernorm", 1, h, &mut v);
        if let Some(a) = vis.adapter {
            // Llama4VisionMLP2: fc1 and fc2, no bias.
            Self::linear(&mut v, "vision_adapter.mlp.fc1", a.fc1_in, a.fc1_out, false, 1);
            Self::linear(&mut v, "vision_adapter.mlp.fc2", a.fc1_out, a.fc2_out, false, 1);
        }
        match head {
            EncoderHead::ImageClassification { labels } => {
                // Dinov2ForImageClassification reads the class token and the mean patch token.
                let width = if fam == VisionFamily::Dinov2 { 2 * h } else { h };
                Self::linear(&mut v, "classifier", width, labels, true, 1);
            }
            // ViTModel's pooler (dense + tanh on the class token); DINOv2 and CLIP have none.
            _ if fam == VisionFamily::Vit => Self::linear(&mut v, "pooler.dense", h, h, true, 1),
            // SiglipMultiheadAttentionPoolingHead: probe, nn.MultiheadAttention (packed in_proj
            // and out_proj), LayerNorm, MLP.
            _ if fam == VisionFamily::Siglip && vis.pooling_head => {
                v.push(TensorGroup::vector("head.probe".into(), h, 1, Role::Position));
                Self::linear(&mut v, "head.attention.in_proj", h, 3 * h, true, 1);
                Self::linear(&mut v, "head.attention.out_proj", h, h, true, 1);
                self.norm_tensors("head.layernorm", 1, h, &mut v);
                self.mlp_tensors("head.mlp", self.intermediate, 1, &mut v);
            }
            _ => {}
        }
        v
    }

    /// The matrix that produces the logits the loss reads, as (rows, cols): the LM head (or the
    /// tied embedding), a classifier's output layer, none for an embedding model.
    pub fn head_matrix(&self) -> (u64, u64) {
        match self.encoder.map(|e| e.head) {
            None | Some(EncoderHead::MaskedLm) => (self.vocab, self.embed_dim),
            Some(EncoderHead::SequenceClassification { labels } | EncoderHead::TokenClassification { labels }) => (labels, self.hidden),
            Some(EncoderHead::ImageClassification { labels }) => {
                let dinov2 = self.encoder.and_then(|e| e.vision).is_some_and(|v| v.family == VisionFamily::Dinov2);
                (labels, if dinov2 { 2 * self.hidden } else { self.hidden })
            }
            Some(EncoderHead::Embedding) => (0, 0),
            Some(EncoderHead::ReplacedTokenDetection) => (1, self.hidden),
        }
    }

    /// Bytes of the input batch: int64 input_ids, labels and attention_mask per token (HF data
    /// collator); for a vision encoder the processor's pixel_values per image and an int64 label.
    pub fn input_bytes(&self, batch: u64, seq: u64) -> u128 {
        match self.encoder.and_then(|e| e.vision) {
            Some(v) => batch as u128 * (v.pixel_bytes() + 8),
            None => 3 * batch as u128 * seq as u128 * 8,
        }
    }

    /// Logits the loss reads for `batch` sequences of `seq` tokens, as (rows, width): every token
    /// × the vocabulary for language-model heads, one row per sequence for sequence
    /// classification, the batch × batch similarity matrix of an in-batch contrastive loss.
    pub fn loss_logits(&self, batch: u64, seq: u64) -> (u128, u128) {
        let t = batch as u128 * seq as u128;
        match self.encoder.map(|e| e.head) {
            None | Some(EncoderHead::MaskedLm) => (t, self.vocab as u128),
            Some(EncoderHead::SequenceClassification { labels } | EncoderHead::ImageClassification { labels }) => {
                (batch as u128, labels as u128)
            }
            Some(EncoderHead::TokenClassification { labels }) => (t, labels as u128),
            Some(EncoderHead::Embedding) => (batch as u128, batch as u128),
            Some(EncoderHead::ReplacedTokenDetection) => (t, 1),
        }
    }

    fn norm_tensors(&self, name: &str, count: u64, width: u64, v: &mut Vec<TensorGroup>) {
        v.push(TensorGroup::vector(format!("{name}.weight"), width, count, Role::Norm));
        if let Norm::LayerNorm { bias: true } = self.norm {
            v.push(TensorGroup::vector(format!("{name}.bias"), width, count, Role::Norm));
        }
    }

    fn linear(v: &mut Vec<TensorGroup>, name: &str, din: u64, dout: u64, bias: bool, count: u64) {
        v.push(TensorGroup::matrix(format!("{name}.weight"), 1, dout, din, count, Role::Linear));
        if bias {
            v.push(TensorGroup::vector(format!("{name}.bias"), dout, count, Role::Bias));
        }
    }

    /// Tensors of `count` identical layers starting at layer `i`.
    fn layer_tensors(&self, i: u64, count: u64, v: &mut Vec<TensorGroup>) {
        let h = self.hidden;
        let l = |s: &str| format!("layers.{{i}}.{s}");
        if let (true, Some(Ssm { delta_net: Some(dn), .. })) = (self.is_ssm_layer(i), self.ssm) {
            // Qwen3NextDecoderLayer with linear attention (modeling_qwen3_next.py __init__):
            // input_layernorm, the Gated DeltaNet, post_attention_layernorm, the MLP or MoE block.
            let (kd, vd, hv) = (dn.key_heads * dn.key_dim, dn.value_heads * dn.value_dim, dn.value_heads);
            self.norm_tensors(&l("input_layernorm"), count, h, v);
            if dn.fused_projections {
                Self::linear(v, &l("linear_attn.in_proj_qkvz"), h, 2 * kd + 2 * vd, false, count);
                Self::linear(v, &l("linear_attn.in_proj_ba"), h, 2 * hv, false, count);
            } else {
                Self::linear(v, &l("linear_attn.in_proj_qkv"), h, 2 * kd + vd, false, count);
                Self::linear(v, &l("linear_attn.in_proj_z"), h, vd, false, count);
                Self::linear(v, &l("linear_attn.in_proj_b"), h, hv, false, count);
                Self::linear(v, &l("linear_attn.in_proj_a"), h, hv, false, count);
            }
            // Depthwise Conv1d(conv_dim, conv_dim, kernel, groups=conv_dim, bias=False).
            v.push(TensorGroup::matrix(
                l("linear_attn.conv1d.weight"),
                1,
                dn.conv_dim(),
                self.ssm.map_or(4, |s| s.d_conv),
                count,
                Role::Linear,
            ));
            for t in ["linear_attn.dt_bias", "linear_attn.A_log"] {
                v.push(TensorGroup::vector(l(t), hv, count, Role::Norm));
            }
            v.push(TensorGroup::vector(l("linear_attn.norm.weight"), dn.value_dim, count, Role::Norm));
            Self::linear(v, &l("linear_attn.out_proj"), vd, h, false, count);
            self.norm_tensors(&l("post_attention_layernorm"), count, h, v);
            self.ffn_tensors(i, "mlp", count, v);
            return;
        }
        if let (true, Some(Ssm { mamba2: Some(m2), .. })) = (self.is_ssm_layer(i), self.ssm) {
            // Mamba2Block: norm, then Mamba2Mixer (modeling_mamba2.py __init__): in_proj to
            // [gate d, x d, B G·N, C G·N, dt H], the depthwise conv over x·B·C, dt_bias / A_log / D
            // per head, the gated RMSNorm over d, out_proj.
            let s = self.ssm.expect("ssm");
            let (d, n, heads) = (s.d_inner, s.d_state, m2.heads);
            let conv = d + 2 * m2.groups * n;
            if !s.parallel_attention {
                self.norm_tensors(&l("norm"), count, h, v);
            }
            Self::linear(v, &l("mixer.in_proj"), h, d + conv + heads, s.proj_bias, count);
            v.push(TensorGroup::matrix(l("mixer.conv1d.weight"), 1, conv, s.d_conv, count, Role::Linear));
            if s.conv_bias {
                v.push(TensorGroup::vector(l("mixer.conv1d.bias"), conv, count, Role::Bias));
            }
            for t in ["mixer.dt_bias", "mixer.A_log", "mixer.D"] {
                v.push(TensorGroup::vector(l(t), heads, count, Role::Norm));
            }
            if m2.gated_norm {
                v.push(TensorGroup::vector(l("mixer.norm.weight"), d, count, Role::Norm));
            }
            Self::linear(v, &l("mixer.out_proj"), d, h, s.proj_bias, count);
            if s.parallel_attention {
                // FalconH1DecoderLayer: the mixer beside a Llama layer's attention and MLP, whose
                // two norms, attention and MLP follow.
                self.attention_layer_tensors(i, count, v);
                return;
            }
            if s.attention_layers > 0 && s.mlp_layers == 0 && s.shared.is_none() {
                // BambaDecoderLayer: pre_ff_layernorm and the gated MLP after the mixer.
                self.norm_tensors(&l("pre_ff_layernorm"), count, h, v);
                self.ffn_tensors(i, "feed_forward", count, v);
            }
            return;
        }
        if let (true, Some(s)) = (self.is_ssm_layer(i), self.ssm) {
            // MambaBlock: norm, then MambaMixer (modeling_mamba.py __init__).
            let (d, n) = (s.d_inner, s.d_state);
            self.norm_tensors(&l("norm"), count, h, v);
            Self::linear(v, &l("mixer.in_proj"), h, 2 * d, s.proj_bias, count);
            // Depthwise Conv1d(d, d, kernel, groups=d): weight [d, 1, kernel].
            v.push(TensorGroup::matrix(l("mixer.conv1d.weight"), 1, d, s.d_conv, count, Role::Linear));
            if s.conv_bias {
                v.push(TensorGroup::vector(l("mixer.conv1d.bias"), d, count, Role::Bias));
            }
            Self::linear(v, &l("mixer.x_proj"), d, s.dt_rank + 2 * n, false, count);
            Self::linear(v, &l("mixer.dt_proj"), s.dt_rank, d, true, count);
            // A_log [d, N] and D [d]: read in fp32 (`self.A_log.float()`), never autocast.
            v.push(TensorGroup::vector(l("mixer.A_log"), d * n, count, Role::Norm));
            v.push(TensorGroup::vector(l("mixer.D"), d, count, Role::Norm));
            Self::linear(v, &l("mixer.out_proj"), d, h, s.proj_bias, count);
            if s.dt_bc_norms {
                v.push(TensorGroup::vector(l("mixer.dt_layernorm.weight"), s.dt_rank, count, Role::Norm));
                v.push(TensorGroup::vector(l("mixer.b_layernorm.weight"), n, count, Role::Norm));
                v.push(TensorGroup::vector(l("mixer.c_layernorm.weight"), n, count, Role::Norm));
            }
            if s.attention_layers > 0 && s.shared.is_none() {
                // JambaMambaDecoderLayer: pre_ff_layernorm and the MLP or MoE block.
                self.norm_tensors(&l("pre_ff_layernorm"), count, h, v);
                self.ffn_tensors(i, "feed_forward", count, v);
            }
            return;
        }
        if let Some(sb) = self.shared_block() {
            self.shared_block_tensors(i, count, sb, v);
            return;
        }
        if self.is_mlp_layer(i) {
            // NemotronHBlock with an MLP mixer: its norm and the MLP.
            self.norm_tensors(&l("norm"), count, h, v);
            self.ffn_tensors(i, "mixer", count, v);
            return;
        }
        self.attention_layer_tensors(i, count, v);
    }

    /// `count` invocations of Zamba2's shared block from invocation `i` on
    /// (modeling_zamba2.py `Zamba2AttentionDecoderLayer`, `Zamba2HybridLayer.linear`). The block's
    /// weights are tied across invocations (`_tied_weights_keys`: `model.parameters()` yields each
    /// set once): invocations below `unique` carry the `unique` sets; every invocation has its
    /// adapters (`Sequential(Linear(in, r), Linear(r, out))`, in the adapter lists of the set it
    /// uses) and its `linear`.
    fn shared_block_tensors(&self, i: u64, count: u64, sb: SharedBlock, v: &mut Vec<TensorGroup>) {
        let (h, r) = (self.hidden, sb.adapter_rank);
        let a = 2 * h;
        let (q, kv) = (self.q_dim(), self.kv_dim());
        let l = |s: &str| format!("layers.{{i}}.shared_transformer.{s}");
        let sets = sb.unique.min(i + count).saturating_sub(i);
        if sets > 0 {
            v.push(TensorGroup::vector(l("input_layernorm.weight"), a, sets, Role::Norm));
            Self::linear(v, &l("self_attn.q_proj"), a, q, false, sets);
            Self::linear(v, &l("self_attn.k_proj"), a, kv, false, sets);
            Self::linear(v, &l("self_attn.v_proj"), a, kv, false, sets);
            Self::linear(v, &l("self_attn.o_proj"), q, h, false, sets);
            v.push(TensorGroup::vector(l("pre_ff_layernorm.weight"), h, sets, Role::Norm));
            if self.mlp.fused_gate_up {
                Self::linear(v, &l("feed_forward.gate_up_proj"), h, 2 * self.intermediate, self.mlp.bias, sets);
            } else {
                // The first Zamba's ZambaMLP: Mistral's gate_proj and up_proj.
                Self::linear(v, &l("feed_forward.gate_proj"), h, self.intermediate, self.mlp.bias, sets);
                Self::linear(v, &l("feed_forward.up_proj"), h, self.intermediate, self.mlp.bias, sets);
            }
            Self::linear(v, &l("feed_forward.down_proj"), self.intermediate, h, self.mlp.bias, sets);
        }
        if r > 0 {
            Self::linear(v, &l("feed_forward.gate_up_proj_adapter_list.{j}.0"), h, r, false, count);
            Self::linear(v, &l("feed_forward.gate_up_proj_adapter_list.{j}.1"), r, 2 * self.intermediate, false, count);
        }
        if sb.attention_adapters {
            for p in ["q", "k", "v"] {
                // Zamba2Attention: each adapter maps attention_hidden_size to itself.
                Self::linear(v, &l(&format!("self_attn.linear_{p}_adapter_list.{{j}}.0")), a, r, false, count);
                Self::linear(v, &l(&format!("self_attn.linear_{p}_adapter_list.{{j}}.1")), r, a, false, count);
            }
        }
        Self::linear(v, "layers.{i}.linear", h, h, false, count);
    }

    /// An attention layer's norms, attention and feed-forward block (a Nemotron-H attention
    /// block: one norm and the attention alone).
    fn attention_layer_tensors(&self, i: u64, count: u64, v: &mut Vec<TensorGroup>) {
        let single = self.ssm.is_some_and(|s| s.mlp_layers > 0);
        let h = self.hidden;
        let l = |s: &str| format!("layers.{{i}}.{s}");
        let norms = match self.block {
            Block::Parallel => 1,
            Block::Sequential | Block::ParallelTwoNorms | Block::PostNorm | Block::PostLn => 2,
            Block::Sandwich => 4,
        } + u64::from(self.cross_attention);
        let norms = if single { 1 } else { norms };
        self.norm_tensors(&l("norms"), norms * count, h, v);
        let a = self.attention;
        if let Some(m) = a.mla {
            // DeepSeek-V2/V3 MLA (transformers models/deepseek_v3/modeling_deepseek_v3.py).
            let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
            match m.q_lora_rank {
                Some(r) => {
                    Self::linear(v, &l("self_attn.q_a_proj"), h, r, a.qkv_bias, count);
                    self.norm_tensors(&l("self_attn.q_a_layernorm"), count, r, v);
                    Self::linear(v, &l("self_attn.q_b_proj"), r, self.heads * qk, false, count);
                }
                None => Self::linear(v, &l("self_attn.q_proj"), h, self.heads * qk, false, count),
            }
            let kva = m.kv_lora_rank + m.qk_rope_head_dim;
            Self::linear(v, &l("self_attn.kv_a_proj_with_mqa"), h, kva, a.qkv_bias, count);
            self.norm_tensors(&l("self_attn.kv_a_layernorm"), count, m.kv_lora_rank, v);
            let kvb = self.heads * (m.qk_nope_head_dim + m.v_head_dim);
            Self::linear(v, &l("self_attn.kv_b_proj"), m.kv_lora_rank, kvb, false, count);
            Self::linear(v, &l("self_attn.o_proj"), self.heads * m.v_head_dim, h, a.o_bias, count);
        } else {
            let (q, kv) = (self.q_dim(), self.kv_dim());
            if a.fused_qkv {
                Self::linear(v, &l("self_attn.qkv_proj"), h, q + 2 * kv, a.qkv_bias, count);
            } else {
                let gate = if a.output_gate { q } else { 0 };
                Self::linear(v, &l("self_attn.q_proj"), h, q + gate, a.qkv_bias, count);
                Self::linear(v, &l("self_attn.k_proj"), h, kv, a.qkv_bias && self.k_bias, count);
                Self::linear(v, &l("self_attn.v_proj"), h, kv, a.qkv_bias, count);
            }
            Self::linear(v, &l("self_attn.o_proj"), q, h, a.o_bias, count);
            if self.cross_attention {
                // WhisperDecoderLayer.encoder_attn: q from the decoder, k and v from the encoder output
                // (the same widths here), its own LayerNorm counted with the norms above.
                Self::linear(v, &l("encoder_attn.q_proj"), h, q, a.qkv_bias, count);
                Self::linear(v, &l("encoder_attn.k_proj"), h, kv, a.qkv_bias && self.k_bias, count);
                Self::linear(v, &l("encoder_attn.v_proj"), h, kv, a.qkv_bias, count);
                Self::linear(v, &l("encoder_attn.out_proj"), q, h, a.o_bias, count);
            }
            if a.sinks {
                // GptOssAttention.sinks: one logit per query head (modeling_gpt_oss.py), a vector
                // sharded with the heads like q_proj's bias.
                v.push(TensorGroup::vector(l("self_attn.sinks"), self.heads, count, Role::Bias));
            }
            match a.qk_norm {
                QkNorm::None => {}
                QkNorm::PerHead => {
                    v.push(TensorGroup::vector(l("self_attn.q_norm.weight"), self.head_dim, count, Role::Norm));
                    v.push(TensorGroup::vector(l("self_attn.k_norm.weight"), self.head_dim, count, Role::Norm));
                }
                QkNorm::LayerNormPerHead => {
                    // LayerNorm weight + bias over head_dim, for q and for k.
                    v.push(TensorGroup::vector(l("self_attn.q_layernorm"), 2 * self.head_dim, count, Role::Norm));
                    v.push(TensorGroup::vector(l("self_attn.k_layernorm"), 2 * self.head_dim, count, Role::Norm));
                }
                QkNorm::Full => {
                    v.push(TensorGroup::vector(l("self_attn.q_norm.weight"), q, count, Role::Norm));
                    v.push(TensorGroup::vector(l("self_attn.k_norm.weight"), kv, count, Role::Norm));
                }
            }
        }
        if !single {
            self.ffn_tensors(i, "mlp", count, v);
        }
    }

    /// Layer `i`'s feed-forward block under `prefix` (`mlp`; Bamba's and Granite-4.0-H's
    /// `feed_forward`): the MoE block on an MoE layer, else the dense MLP.
    fn ffn_tensors(&self, i: u64, prefix: &str, count: u64, v: &mut Vec<TensorGroup>) {
        let h = self.hidden;
        let l = |s: &str| format!("layers.{{i}}.{prefix}.{s}");
        match &self.moe {
            Some(m) if self.is_moe_layer(i) => {
                // Router, routed experts stored 3-D ([E, 2I, h] gate_up + [E, h, I] down), shared experts.
                let ei = m.expert_intermediate;
                if m.biased {
                    // GptOssTopKRouter: weight [E, h] and bias [E]; GptOssExperts stores its weights
                    // transposed ([E, h, 2I], [E, I, h]: same numel) plus a bias per expert.
                    v.push(TensorGroup::matrix(l("router.weight"), 1, m.experts, h, count, Role::Router));
                    v.push(TensorGroup::vector(l("router.bias"), m.experts, count, Role::Bias));
                } else if m.dense_dispatch {
                    // Llama4Router: an nn.Linear(h, E) without bias.
                    v.push(TensorGroup::matrix(l("router.weight"), 1, m.experts, h, count, Role::Router));
                } else {
                    v.push(TensorGroup::matrix(l("gate.weight"), 1, m.experts, h, count, Role::Router));
                }
                v.push(TensorGroup::matrix(l("experts.gate_up_proj"), m.experts, 2 * ei, h, count, Role::Experts));
                v.push(TensorGroup::matrix(l("experts.down_proj"), m.experts, h, ei, count, Role::Experts));
                if m.biased {
                    v.push(TensorGroup::vector(l("experts.gate_up_proj_bias"), m.experts * 2 * ei, count, Role::Bias));
                    v.push(TensorGroup::vector(l("experts.down_proj_bias"), m.experts * h, count, Role::Bias));
                }
                if m.shared_intermediate > 0 {
                    let name = if m.dense_dispatch { "shared_expert" } else { "shared_experts" };
                    self.mlp_tensors(&l(name), m.shared_intermediate, count, v);
                }
                if m.shared_gate {
                    v.push(TensorGroup::matrix(l("shared_expert_gate.weight"), 1, 1, h, count, Role::Router));
                }
            }
            _ => self.mlp_tensors(&format!("layers.{{i}}.{prefix}"), self.intermediate, count, v),
        }
    }

    fn mlp_tensors(&self, prefix: &str, inter: u64, count: u64, v: &mut Vec<TensorGroup>) {
        let h = self.hidden;
        let m = self.mlp;
        if m.gated {
            if m.fused_gate_up {
                Self::linear(v, &format!("{prefix}.gate_up_proj"), h, 2 * inter, m.bias, count);
            } else {
                Self::linear(v, &format!("{prefix}.gate_proj"), h, inter, m.bias, count);
                Self::linear(v, &format!("{prefix}.up_proj"), h, inter, m.bias, count);
            }
            Self::linear(v, &format!("{prefix}.down_proj"), inter, h, m.bias, count);
        } else {
            Self::linear(v, &format!("{prefix}.fc1"), h, inter, m.bias, count);
            Self::linear(v, &format!("{prefix}.fc2"), inter, h, m.bias, count);
        }
    }
}
