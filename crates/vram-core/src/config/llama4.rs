//! Llama 4 (transformers models/llama4: `Llama4ForConditionalGeneration`,
//! configuration_llama4.py `Llama4Config`): the vision model (`vision_config`,
//! `Llama4VisionModel` with its pixel-shuffle MLP, vision.rs), one bias-free linear into the text
//! width (`Llama4MultiModalProjector`) and the Llama 4 text model (`text_config`, llama.rs
//! `llama4_text`). Images are split into 336-px tiles by the processor (model.rs `Llama4Tiles`).

use serde_json::{Map, Value};

use super::llava::{inherit_top_level, nested, with_defaults};
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Llama4Tiles, Model, Multimodal, LLAMA4_IMAGE_ASSUMED};

/// Llama4VisionConfig's defaults (transformers 5.23) for what the Hub's `vision_config` omits.
const VISION_DEFAULTS: &[(&str, u64)] = &[
    ("hidden_size", 768),
    ("intermediate_size", 5632),
    ("num_hidden_layers", 34),
    ("num_attention_heads", 16),
    ("image_size", 448),
    ("patch_size", 14),
    ("vision_output_dim", 7680),
];

/// Llama4TextConfig's defaults (Llama 4 Scout's shape) for what the Hub's `text_config` omits.
const TEXT_DEFAULTS: &[(&str, u64)] =
    &[("vocab_size", 202_048), ("hidden_size", 5120), ("num_hidden_layers", 48), ("num_attention_heads", 40), ("num_key_value_heads", 8)];

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let mut vision = with_defaults(nested(&obj, "vision_config", file)?, VISION_DEFAULTS);
    let vtype = vision.get("model_type").and_then(Value::as_str).unwrap_or("llama4_vision_model").to_string();
    if vtype != "llama4_vision_model" {
        return Err(Error::InvalidValue {
            what: "Llama 4 vision model".into(),
            value: vtype,
            hint: "Llama 4's vision_config is a llama4_vision_model".into(),
        });
    }
    vision.insert("model_type".into(), Value::from(vtype));
    vision.entry("hidden_act").or_insert(Value::from("gelu"));
    vision.remove("architectures");
    let vision_output = vision.get("vision_output_dim").and_then(Value::as_u64).unwrap_or(7680);
    let tower = parse_object(vision, &format!("{name} (vision tower)"), file, opts)?;
    let vis = tower.encoder.and_then(|e| e.vision).expect("a vision config parses to a vision encoder");
    let adapter = vis.adapter.expect("a Llama 4 vision model has its pixel-shuffle MLP");
    // Llama4MultiModalProjector reads vision_output_dim, which the MLP's fc2 must produce.
    if vision_output != adapter.fc2_out {
        return Err(Error::BadKey {
            file: file.into(),
            key: "vision_config.vision_output_dim".into(),
            value: vision_output.to_string(),
            hint: format!("the projector reads the pixel-shuffle MLP's output, projector_output_dim = {}", adapter.fc2_out),
        });
    }
    let mut text = with_defaults(nested(&obj, "text_config", file)?, TEXT_DEFAULTS);
    text.insert("model_type".into(), Value::from("llama4_text"));
    inherit_top_level(&mut text, &obj, file)?;
    text.insert("architectures".into(), Value::from(vec![Value::from("Llama4ForCausalLM")]));
    let mut m = parse_object(text, name, file, opts)?;
    // Llama4Processor: (image / patch)² patches per tile, round(1 / ratio²) of them per token.
    let per_side = vis.image_size / vis.patch.max(1);
    let tile_tokens = per_side * per_side / (adapter.shuffle * adapter.shuffle);
    let tiles = Llama4Tiles::tiles_for(vis.image_size, vis.image_size);
    // last_hidden_state of the vision model: every layer, layernorm_post and the MLP.
    m.multimodal = Some(Box::new(Multimodal {
        llama4: Some(Llama4Tiles { side: vis.image_size, tiles, tile_tokens }),
        ..Multimodal::new(tower, tiles * tile_tokens)
    }));
    m.warnings.push(format!(
        "{LLAMA4_IMAGE_ASSUMED} of one {0}×{0} px tile ({tile_tokens} tokens each): larger images are split into up to 16 tiles plus a global one (672 px: 5 tiles, 720 tokens); pass --image-size for yours",
        vis.image_size
    ));
    m.warnings.push(format!(
        "Llama 4: its vision model ({} layers, {} patches per tile and a pixel-shuffle MLP), a linear projector and the llama4_text language model",
        m.multimodal.as_ref().map_or(0, |x| x.tower.layers),
        per_side * per_side,
    ));
    m.warnings.retain(|w| !w.starts_with("multimodal config"));
    Ok(m)
}
