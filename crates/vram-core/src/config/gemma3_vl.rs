//! Gemma-3 vision-language models (transformers models/gemma3: `Gemma3ForConditionalGeneration`,
//! configuration_gemma3.py `Gemma3Config`): a SigLIP vision tower (`vision_config`, its last
//! hidden state after `post_layernorm`), `Gemma3MultiModalProjector` (the patch grid
//! average-pooled to `mm_tokens_per_image` tokens, a Gemma RMSNorm, one matrix into the text
//! width) and a Gemma-3 language model (`text_config`). The Hub's configs omit what equals the
//! nested classes' defaults, which are filled in before each part is read by its own parser.

use serde_json::{Map, Value};

use super::llava::{inherit_top_level, nested, siglip_tower, with_defaults};
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Model, Multimodal};

/// Gemma3TextConfig's defaults (configuration_gemma3.py, transformers 5.23), which the Hub's
/// `text_config` relies on for heads, head size and vocabulary.
const TEXT_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 262_208),
    ("hidden_size", 2304),
    ("intermediate_size", 9216),
    ("num_hidden_layers", 26),
    ("num_attention_heads", 8),
    ("num_key_value_heads", 4),
    ("head_dim", 256),
    ("max_position_embeddings", 131_072),
    ("sliding_window", 4096),
    ("query_pre_attn_scalar", 256),
];

/// Gemma3Config's `vision_config` when absent: SiglipVisionConfig as Gemma3Config builds it
/// (896-pixel images of 14-pixel patches, 27 layers, no pooling head).
const VISION_DEFAULTS: &[(&str, u64)] = &[
    ("hidden_size", 1152),
    ("intermediate_size", 4304),
    ("num_hidden_layers", 27),
    ("num_attention_heads", 16),
    ("image_size", 896),
    ("patch_size", 14),
];

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let (tower, vis) = siglip_tower(&obj, VISION_DEFAULTS, "Gemma-3", name, file, opts)?;
    // The language model, with the top level's dtype and tying when the nested config omits them.
    let mut text = with_defaults(nested(&obj, "text_config", file)?, TEXT_DEFAULTS);
    text.insert("model_type".into(), Value::from("gemma3_text"));
    inherit_top_level(&mut text, &obj, file)?;
    text.insert("architectures".into(), Value::from(vec![Value::from("Gemma3ForCausalLM")]));
    let mut m = parse_object(text, name, file, opts)?;
    // Gemma3MultiModalProjector: patches_per_image = image_size // patch_size, pooled by
    // kernel = patches_per_image // sqrt(mm_tokens_per_image).
    let tokens = obj.get("mm_tokens_per_image").and_then(Value::as_u64).unwrap_or(256);
    let per_side = vis.image_size / vis.patch.max(1);
    let side = (tokens as f64).sqrt() as u64;
    if tokens == 0 || side * side != tokens || side == 0 || per_side % side != 0 {
        return Err(Error::BadKey {
            file: file.into(),
            key: "mm_tokens_per_image".into(),
            value: tokens.to_string(),
            hint: format!("a square number of tokens whose side divides the {per_side}×{per_side} patch grid"),
        });
    }
    m.multimodal = Some(Box::new(Multimodal {
        // last_hidden_state: every layer and post_layernorm.
        pool: Some(per_side / side),
        block_mask: true,
        ..Multimodal::new(tower, tokens)
    }));
    m.warnings.push(format!(
        "Gemma-3: a SigLIP vision tower ({} patches per {}×{} image, {} layers), the average-pooling projector ({tokens} tokens per image) and a gemma3_text language model; images are the processor's fixed {}-pixel square (pan-and-scan crops count as more images: --images-per-sample)",
        per_side * per_side,
        vis.image_size,
        vis.image_size,
        m.multimodal.as_ref().map_or(0, |x| x.tower.layers),
        vis.image_size,
    ));
    m.warnings.retain(|w| !w.starts_with("multimodal config"));
    Ok(m)
}
