//! PaliGemma and PaliGemma 2 (transformers models/paligemma `PaliGemmaForConditionalGeneration`):
//! a SigLIP vision tower (its last hidden state after `post_layernorm`, no pooling head),
//! `PaliGemmaMultiModalProjector` (one linear with a bias into the text width) and a Gemma
//! (PaliGemma) or Gemma 2 (PaliGemma 2) language model. The processor resizes every image to the
//! tower's `image_size` ((image / patch)² tokens: 256 at 224 px, 1024 at 448, 4096 at 896),
//! places the image tokens first and marks image and prefix with `token_type_ids` 0, which
//! `PaliGemmaModel.forward` turns into a bidirectional block of the language model's mask.

use serde_json::{Map, Value};

use super::llava::{inherit_top_level, nested, siglip_tower, with_defaults};
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Model, Multimodal};

/// PaliGemmaConfig's `vision_config` defaults (configuration_paligemma.py sub_configs_defaults,
/// transformers 5.23).
const VISION_DEFAULTS: &[(&str, u64)] = &[
    ("hidden_size", 1152),
    ("intermediate_size", 4096),
    ("num_hidden_layers", 27),
    ("num_attention_heads", 16),
    ("image_size", 224),
    ("patch_size", 14),
];

/// PaliGemmaConfig's `text_config` defaults (a Gemma-2B); `max_position_embeddings` is
/// GemmaConfig's and Gemma2Config's default (8192), which the Hub configs leave out and vLLM
/// takes as the longest context.
const TEXT_DEFAULTS: &[(&str, u64)] = &[
    ("max_position_embeddings", 8192),
    ("hidden_size", 2048),
    ("num_hidden_layers", 18),
    ("intermediate_size", 16384),
    ("num_attention_heads", 8),
    ("num_key_value_heads", 1),
    ("vocab_size", 257_152),
];

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let (tower, vis) = siglip_tower(&obj, VISION_DEFAULTS, "PaliGemma", name, file, opts)?;
    let mut text = with_defaults(nested(&obj, "text_config", file)?, TEXT_DEFAULTS);
    let ttype = text.get("model_type").and_then(Value::as_str).unwrap_or("gemma").to_string();
    if !matches!(ttype.as_str(), "gemma" | "gemma2") {
        return Err(Error::InvalidValue {
            what: "PaliGemma language model".into(),
            value: ttype,
            hint: "vram models PaliGemma with a Gemma (PaliGemma) or Gemma 2 (PaliGemma 2) language model".into(),
        });
    }
    text.insert("model_type".into(), Value::from(ttype.clone()));
    // PaliGemmaConfig ties the LM head to the embeddings by default; the top level decides.
    inherit_top_level(&mut text, &obj, file)?;
    text.entry("tie_word_embeddings").or_insert(Value::Bool(true));
    let arch = if ttype == "gemma2" { "Gemma2ForCausalLM" } else { "GemmaForCausalLM" };
    text.insert("architectures".into(), Value::from(vec![Value::from(arch)]));
    let mut m = parse_object(text, name, file, opts)?;
    // The projector maps into projection_dim, which the language model reads: it must be its width.
    let projection = obj.get("projection_dim").and_then(Value::as_u64).unwrap_or(2048);
    if projection != m.hidden {
        return Err(Error::BadKey {
            file: file.into(),
            key: "projection_dim".into(),
            value: projection.to_string(),
            hint: format!("the projector's output feeds the language model, whose hidden size is {}", m.hidden),
        });
    }
    let per_side = vis.image_size / vis.patch.max(1);
    m.multimodal = Some(Box::new(Multimodal {
        projector_bias: true,
        // last_hidden_state: every layer and post_layernorm.
        single_linear: true,
        block_mask: true,
        ..Multimodal::new(tower, per_side * per_side)
    }));
    m.warnings.push(format!(
        "PaliGemma: a SigLIP vision tower ({} layers, {} tokens per {}×{} image, the processor's fixed size), one projector linear and a {ttype} language model; image and prefix attend bidirectionally (token_type_ids)",
        m.multimodal.as_ref().map_or(0, |x| x.tower.layers),
        per_side * per_side,
        vis.image_size,
        vis.image_size,
    ));
    m.warnings.retain(|w| !w.starts_with("multimodal config"));
    Ok(m)
}
