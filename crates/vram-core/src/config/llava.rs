//! LLaVA (transformers models/llava/configuration_llava.py): a vision tower (`vision_config`,
//! CLIP or SigLIP), `LlavaMultiModalProjector`, and a decoder language model (`text_config`).
//! Nested configs omit what equals their class defaults, so the documented defaults of the
//! classes LLaVA nests are filled in before each part is read by its own family's parser.

use serde_json::{Map, Value};

use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Model, Multimodal};

/// LlamaConfig's defaults (configuration_llama.py), which LLaVA-1.5's text_config relies on.
const LLAMA_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 32000),
    ("hidden_size", 4096),
    ("intermediate_size", 11008),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("max_position_embeddings", 2048),
];

/// Qwen2Config's defaults (configuration_qwen2.py): LLaVA-interleave's text_config omits them.
const QWEN2_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 151936),
    ("hidden_size", 4096),
    ("intermediate_size", 22016),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("num_key_value_heads", 32),
    ("max_position_embeddings", 32768),
];

/// MistralConfig's defaults (configuration_mistral.py).
const MISTRAL_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 32000),
    ("hidden_size", 4096),
    ("intermediate_size", 14336),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("num_key_value_heads", 8),
    ("max_position_embeddings", 131072),
];

pub(super) fn with_defaults(mut obj: Map<String, Value>, defaults: &[(&str, u64)]) -> Map<String, Value> {
    for (k, v) in defaults {
        obj.entry(k.to_string()).or_insert(Value::from(*v));
    }
    obj
}

pub(super) fn nested(obj: &Map<String, Value>, key: &str, file: &str) -> Result<Map<String, Value>> {
    match obj.get(key) {
        Some(Value::Object(o)) => Ok(o.clone()),
        _ => Err(Error::MissingKey { file: file.into(), key: key.into(), why: "read the LLaVA model's part it describes".into() }),
    }
}

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    // The vision tower: LlavaConfig defaults it to a CLIP ViT-L/14 at 336 pixels when absent.
    let mut vision = nested(&obj, "vision_config", file)?;
    let vtype = vision.get("model_type").and_then(Value::as_str).unwrap_or("clip_vision_model").to_string();
    // Missing keys are the vision class's defaults, which the vision parser applies.
    match vtype.as_str() {
        "clip_vision_model" | "siglip_vision_model" => {}
        other => {
            return Err(Error::InvalidValue {
                what: "LLaVA vision tower".into(),
                value: other.into(),
                hint: "vram models LLaVA with a CLIP or SigLIP vision tower (clip_vision_model, siglip_vision_model)".into(),
            })
        }
    }
    vision.insert("model_type".into(), Value::from(vtype.clone()));
    vision.remove("architectures");
    let tower = parse_object(vision, &format!("{name} (vision tower)"), file, opts)?;
    // The language model, with the top level's dtype and tying when the nested config omits them.
    let mut text = nested(&obj, "text_config", file)?;
    let ttype = text.get("model_type").and_then(Value::as_str).unwrap_or("llama").to_string();
    let defaults: &[(&str, u64)] = match ttype.as_str() {
        "llama" => LLAMA_DEFAULTS,
        "qwen2" => QWEN2_DEFAULTS,
        "mistral" => MISTRAL_DEFAULTS,
        // Other language models are read as their configs write them (a missing key is an error).
        _ => &[],
    };
    text = with_defaults(text, defaults);
    text.insert("model_type".into(), Value::from(ttype));
    for k in ["torch_dtype", "dtype", "tie_word_embeddings"] {
        if let (false, Some(v)) = (text.contains_key(k), obj.get(k)) {
            text.insert(k.into(), v.clone());
        }
    }
    // The language model is read as the causal LM it is inside LlavaForConditionalGeneration.
    text.insert("architectures".into(), Value::from(vec![Value::from("LlavaTextForCausalLM")]));
    let mut m = parse_object(text, name, file, opts)?;
    let vis = tower.encoder.and_then(|e| e.vision).expect("a vision config parses to a vision encoder");
    // vision_feature_select_strategy "default" drops the class token; "full" keeps it.
    let strategy = obj.get("vision_feature_select_strategy").and_then(Value::as_str).unwrap_or("default");
    let patches = vis.tokens(vis.image_size) - u64::from(vis.class_token());
    let image_tokens = if strategy == "full" { vis.tokens(vis.image_size) } else { patches };
    let feature_layer = obj.get("vision_feature_layer").and_then(Value::as_i64).unwrap_or(-2);
    if feature_layer.unsigned_abs() > tower.layers + 1 {
        return Err(Error::BadKey {
            file: file.into(),
            key: "vision_feature_layer".into(),
            value: feature_layer.to_string(),
            hint: format!("the vision tower has {} layers", tower.layers),
        });
    }
    let act = super::keys::act_from_name(obj.get("projector_hidden_act").and_then(Value::as_str).unwrap_or("gelu"));
    m.multimodal = Some(Box::new(Multimodal {
        tower,
        projector_bias: obj.get("multimodal_projector_bias").and_then(Value::as_bool).unwrap_or(true),
        projector_act: act,
        feature_layer,
        image_tokens,
        images: 1,
        tower_frozen: false,
        merger: None,
        pool: None,
    }));
    m.warnings.push(format!(
        "LLaVA: a {} vision tower ({} tokens per image of {}×{} pixels, hidden state {} of {} layers), the projector and a {} language model",
        vtype.trim_end_matches("_vision_model"),
        image_tokens,
        vis.image_size,
        vis.image_size,
        feature_layer,
        m.multimodal.as_ref().map_or(0, |x| x.tower.layers),
        m.model_type,
    ));
    Ok(m)
}
