//! Idefics3 and SmolVLM (transformers models/idefics3 `Idefics3ForConditionalGeneration`,
//! models/smolvlm `SmolVLMForConditionalGeneration`, the same model): a SigLIP-style vision
//! transformer (`Idefics3VisionTransformer`: no pooling head, its last hidden state after
//! `post_layernorm`), `Idefics3Connector` (a pixel shuffle by `scale_factor`, then one bias-free
//! linear into the text width) and a Llama language model (`text_config`). Images are split into
//! tiles of the tower's image size by the processor (model.rs `Shuffle`).

use serde_json::{Map, Value};

use super::llava::{inherit_top_level, nested, with_defaults, LLAMA_DEFAULTS};
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Model, Multimodal, Shuffle, SPLIT_IMAGE_ASSUMED};

/// Idefics3VisionConfig's defaults (configuration_idefics3.py, transformers 5.23; SmolVLM's
/// vision config inherits them), which the Hub's `vision_config` relies on.
const VISION_DEFAULTS: &[(&str, u64)] = &[
    ("hidden_size", 1152),
    ("intermediate_size", 3072),
    ("num_hidden_layers", 12),
    ("num_attention_heads", 16),
    ("image_size", 224),
    ("patch_size", 32),
];

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let model_type = obj.get("model_type").and_then(Value::as_str).unwrap_or("idefics3").to_string();
    let mut vision = with_defaults(nested(&obj, "vision_config", file)?, VISION_DEFAULTS);
    // The tower is read as the SigLIP vision transformer it is (same layers, no pooling head);
    // its embedding looks positions up per image (NaViT-style buckets), a transient of the
    // same size as SigLIP's broadcast table sum.
    let processor_edge = vision.get("size").and_then(|s| s.get("longest_edge")).and_then(Value::as_u64);
    vision.insert("model_type".into(), Value::from("siglip_vision_model"));
    vision.insert("vision_use_head".into(), Value::Bool(false));
    vision.entry("hidden_act").or_insert(Value::from("gelu_pytorch_tanh"));
    vision.remove("architectures");
    let tower = parse_object(vision, &format!("{name} (vision tower)"), file, opts)?;
    let vis = tower.encoder.and_then(|e| e.vision).expect("a vision config parses to a vision encoder");
    // Idefics3Config's text_config default is a LlamaConfig; the model's own use_cache (top
    // level, Idefics3Model.forward / SmolVLMModel.forward) decides whether training builds a
    // DynamicCache, so it replaces the text config's.
    let mut text = nested(&obj, "text_config", file)?;
    let ttype = text.get("model_type").and_then(Value::as_str).unwrap_or("llama").to_string();
    if ttype != "llama" {
        return Err(Error::InvalidValue {
            what: format!("{model_type} language model"),
            value: ttype,
            hint: "vram models Idefics3 and SmolVLM with their Llama language model (text_config model_type llama)".into(),
        });
    }
    text = with_defaults(text, LLAMA_DEFAULTS);
    text.insert("model_type".into(), Value::from("llama"));
    inherit_top_level(&mut text, &obj, file)?;
    text.insert("use_cache".into(), Value::Bool(obj.get("use_cache").and_then(Value::as_bool).unwrap_or(true)));
    text.insert("architectures".into(), Value::from(vec![Value::from("LlamaForCausalLM")]));
    let mut m = parse_object(text, name, file, opts)?;
    // Idefics3Model.image_seq_len = (image // patch)² / scale_factor²; pixel_shuffle views the
    // patch grid as (side / scale) × (side / scale) blocks, which must divide.
    let scale = match obj.get("scale_factor") {
        None => 2,
        Some(v) => v.as_u64().filter(|&s| s >= 1).ok_or_else(|| Error::BadKey {
            file: file.into(),
            key: "scale_factor".into(),
            value: v.to_string(),
            hint: "a positive integer (Idefics3: 2, SmolVLM: 3 or 4)".into(),
        })?,
    };
    let per_side = vis.image_size / vis.patch.max(1);
    if per_side % scale != 0 {
        return Err(Error::BadKey {
            file: file.into(),
            key: "scale_factor".into(),
            value: scale.to_string(),
            hint: format!("the pixel shuffle folds the {per_side}×{per_side} patch grid by scale_factor, which must divide {per_side}"),
        });
    }
    let tile_tokens = per_side * per_side / (scale * scale);
    // The processor's default longest edge: 4 × the tile (Idefics3ImageProcessor's 4 × 364,
    // SmolVLM's 4 × 512), unless the config carries the processor's `size` (SmolVLM2's do).
    let edge = processor_edge.unwrap_or(4 * vis.image_size);
    let tiles = Shuffle::tiles_for(edge, vis.image_size);
    // last_hidden_state: every layer and post_layernorm.
    m.multimodal = Some(Box::new(Multimodal {
        shuffle: Some(Shuffle { scale, longest_edge: edge, tiles, tile_tokens }),
        ..Multimodal::new(tower, tiles * tile_tokens)
    }));
    m.warnings.push(format!(
        "{SPLIT_IMAGE_ASSUMED} at the processor's longest edge of {edge} px: {tiles} tiles of {0}×{0} px through the tower ({1} tokens each after the pixel shuffle) = {2} tokens per image in the language model's sequence: pass --image-size (the processor's size[\"longest_edge\"]; the tile size or less: one unsplit tile) for yours",
        vis.image_size,
        tile_tokens,
        tiles * tile_tokens,
    ));
    m.warnings.push(format!(
        "{}: a SigLIP-style vision tower ({} layers, {} patches per tile), the pixel-shuffle connector (scale {scale}) and a llama language model",
        if model_type == "smolvlm" { "SmolVLM" } else { "Idefics3" },
        m.multimodal.as_ref().map_or(0, |x| x.tower.layers),
        per_side * per_side,
    ));
    m.warnings.retain(|w| !w.starts_with("multimodal config"));
    Ok(m)
}
