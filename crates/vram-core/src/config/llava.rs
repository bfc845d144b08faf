//! LLaVA (transformers models/llava/configuration_llava.py): a vision tower (`vision_config`,
//! CLIP or SigLIP), `LlavaMultiModalProjector`, and a decoder language model (`text_config`).
//! Nested configs omit what equals their class defaults, so the documented defaults of the
//! classes LLaVA nests are filled in before each part is read by its own family's parser.

use serde_json::{Map, Value};

use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Act, AnyRes, Model, Multimodal, MAX_IMAGE_SIDE, NEXT_IMAGE_ASSUMED};

/// LlamaConfig's defaults (configuration_llama.py), which LLaVA-1.5's text_config relies on.
pub(super) const LLAMA_DEFAULTS: &[(&str, u64)] = &[
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

/// A composite model's SigLIP vision tower without its pooling head (Gemma-3, PaliGemma): the
/// nested `vision_config` with the class defaults the Hub's configs omit, read as a bare
/// `siglip_vision_model`; another tower type is refused, naming `family`.
pub(super) fn siglip_tower(
    obj: &Map<String, Value>,
    defaults: &[(&str, u64)],
    family: &str,
    name: &str,
    file: &str,
    opts: ParseOptions,
) -> Result<(Model, crate::model::Vision)> {
    let mut vision = with_defaults(nested(obj, "vision_config", file)?, defaults);
    let vtype = vision.get("model_type").and_then(Value::as_str).unwrap_or("siglip_vision_model").to_string();
    if vtype != "siglip_vision_model" {
        return Err(Error::InvalidValue {
            what: format!("{family} vision tower"),
            value: vtype,
            hint: format!("{family}'s vision tower is a SigLIP vision model (siglip_vision_model)"),
        });
    }
    vision.insert("model_type".into(), Value::from(vtype));
    vision.insert("vision_use_head".into(), Value::Bool(false));
    vision.remove("architectures");
    let tower = parse_object(vision, &format!("{name} (vision tower)"), file, opts)?;
    let vis = tower.encoder.and_then(|e| e.vision).expect("a vision config parses to a vision encoder");
    Ok((tower, vis))
}

/// A composite model's language model takes the top level's dtype and embedding tying where its
/// nested `text_config` omits them (the Hub's VLM configs write them once, at the top). A
/// top-level `quantization_config` the caller has not given the language model is refused: a
/// pre-quantized vision-language checkpoint (tower, projector and language model quantized or
/// not, per its exclusions) is not modelled, and dropping it would count its weights unquantized.
pub(super) fn inherit_top_level(text: &mut Map<String, Value>, obj: &Map<String, Value>, file: &str) -> Result<()> {
    if let (false, Some(q)) = (text.contains_key("quantization_config"), obj.get("quantization_config").filter(|q| !q.is_null())) {
        return Err(Error::BadKey {
            file: file.into(),
            key: "quantization_config".into(),
            value: q.get("quant_method").map_or_else(|| q.to_string(), Value::to_string),
            hint: "pre-quantized vision-language checkpoints are not modelled yet (the tower, projector and language model would be counted unquantized); estimate the unquantized release, or pass --load-in-4bit for QLoRA".into(),
        });
    }
    for k in ["torch_dtype", "dtype", "tie_word_embeddings"] {
        if let (false, Some(v)) = (text.contains_key(k), obj.get(k)) {
            text.insert(k.into(), v.clone());
        }
    }
    Ok(())
}

pub(super) fn nested(obj: &Map<String, Value>, key: &str, file: &str) -> Result<Map<String, Value>> {
    match obj.get(key) {
        Some(Value::Object(o)) => Ok(o.clone()),
        _ => Err(Error::MissingKey { file: file.into(), key: key.into(), why: "read the LLaVA model's part it describes".into() }),
    }
}

/// `image_grid_pinpoints` (LlavaNextConfig's default when absent: llava-v1.6's five
/// resolutions), each a multiple of the tower's tile size: `pack_image_features` views the grid's
/// features as (height/tile, width/tile) tiles, which any other size breaks.
fn anyres(obj: &Map<String, Value>, file: &str, tile: u64, per: u64, tile_tokens: u64, kind: Kind) -> Result<AnyRes> {
    const DEFAULT: [(u64, u64); 5] = [(336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008)];
    // LlavaOnevisionConfig's default: every grid of 1–6 × 1–6 tiles of 384 px.
    let onevision_default: Vec<(u64, u64)> = (1..=6).flat_map(|h| (1..=6).map(move |w| (384 * h, 384 * w))).collect();
    let bad = |value: String, hint: String| Error::BadKey { file: file.into(), key: "image_grid_pinpoints".into(), value, hint };
    let pinpoints: Vec<(u64, u64)> = match obj.get("image_grid_pinpoints") {
        None | Some(Value::Null) if kind == Kind::OneVision => onevision_default,
        None | Some(Value::Null) => DEFAULT.to_vec(),
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .map(|p| match p.as_array().map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>()).as_deref() {
                Some([Some(h), Some(w)]) => Ok((*h, *w)),
                _ => Err(bad(p.to_string(), "each pinpoint is [height, width] in pixels".into())),
            })
            .collect::<Result<_>>()?,
        Some(v) => return Err(bad(v.to_string(), "a non-empty list of [height, width] resolutions".into())),
    };
    if let Some(&(h, w)) = pinpoints.iter().find(|&&(h, w)| h == 0 || w == 0 || h % tile != 0 || w % tile != 0 || h.max(w) > MAX_IMAGE_SIDE)
    {
        return Err(bad(
            format!("[{h}, {w}]"),
            format!("each side must be a multiple of the vision tower's {tile}-px tiles, at most {MAX_IMAGE_SIDE}"),
        ));
    }
    // vision_aspect_ratio "anyres_max_N" (LlavaOnevisionConfig's default N = 9).
    let max_tiles = match (kind, obj.get("vision_aspect_ratio")) {
        (Kind::OneVision, None) => Some(9),
        (Kind::OneVision, Some(v)) => {
            let n = v.as_str().and_then(|s| s.strip_prefix("anyres_max_")).and_then(|n| n.parse::<u64>().ok()).filter(|n| *n > 0);
            Some(n.ok_or_else(|| Error::BadKey {
                file: file.into(),
                key: "vision_aspect_ratio".into(),
                value: v.to_string(),
                hint: "vram models LLaVA-OneVision's \"anyres_max_N\" (N tiles at most)".into(),
            })?)
        }
        _ => None,
    };
    let side = AnyRes::default_side(&pinpoints);
    let mut a = AnyRes { pinpoints, side, tiles: 0, tile_tokens, max_tiles, multi_image_base_only: kind == Kind::OneVision };
    a.tiles = a.layout(side, tile, per).0;
    Ok(a)
}

/// Which LLaVA: its defaults and its image handling differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Llava,
    Next,
    OneVision,
}

/// LlavaOnevisionConfig's vision tower when the config leaves keys out: SigLIP so400m/14 at
/// 384 px with 26 of its 27 layers (configuration_llava_onevision.py `sub_configs_defaults`).
const ONEVISION_VISION_DEFAULTS: &[(&str, u64)] = &[
    ("hidden_size", 1152),
    ("intermediate_size", 4304),
    ("patch_size", 14),
    ("image_size", 384),
    ("num_hidden_layers", 26),
    ("num_attention_heads", 16),
];

/// LLaVA-OneVision (transformers models/llava_onevision): LLaVA-NeXT's tiling with up to 6×6
/// tiles, the feature map resized down to about `anyres_max_N` tiles, and multi-image samples
/// untiled; SigLIP and Qwen2 by default.
pub(super) fn parse_onevision(mut obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let mut vision = match obj.get("vision_config") {
        Some(Value::Object(o)) => o.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(Error::MissingKey { file: file.into(), key: "vision_config".into(), why: "read the vision tower".into() }),
    };
    if vision.get("model_type").and_then(Value::as_str).is_none_or(|t| t == "siglip_vision_model") {
        vision = with_defaults(vision, ONEVISION_VISION_DEFAULTS);
        vision.insert("model_type".into(), Value::from("siglip_vision_model"));
        // Without the attention-pooling head (`vision_use_head` False in the same defaults).
        vision.entry("vision_use_head").or_insert(Value::from(false));
    }
    obj.insert("vision_config".into(), Value::Object(vision));
    if !matches!(obj.get("text_config"), Some(Value::Object(_))) {
        obj.insert("text_config".into(), Value::Object(Map::new()));
    }
    for (k, v) in [("vision_feature_select_strategy", Value::from("full")), ("vision_feature_layer", Value::from(-1))] {
        obj.entry(k).or_insert(v);
    }
    parse_with(obj, name, file, opts, Kind::OneVision)
}

/// LLaVA-NeXT (transformers models/llava_next): LLaVA's parts plus anyres tiling and
/// `image_newline`.
pub(super) fn parse_next(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    parse_with(obj, name, file, opts, Kind::Next)
}

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    parse_with(obj, name, file, opts, Kind::Llava)
}

fn parse_with(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions, kind: Kind) -> Result<Model> {
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
    let default_lm = if kind == Kind::OneVision { "qwen2" } else { "llama" };
    let ttype = text.get("model_type").and_then(Value::as_str).unwrap_or(default_lm).to_string();
    let defaults: &[(&str, u64)] = match ttype.as_str() {
        "llama" => LLAMA_DEFAULTS,
        "qwen2" => QWEN2_DEFAULTS,
        "mistral" => MISTRAL_DEFAULTS,
        // Other language models are read as their configs write them (a missing key is an error).
        _ => &[],
    };
    text = with_defaults(text, defaults);
    text.insert("model_type".into(), Value::from(ttype));
    inherit_top_level(&mut text, &obj, file)?;
    // The language model is read as the causal LM it is inside LlavaForConditionalGeneration.
    text.insert("architectures".into(), Value::from(vec![Value::from("LlavaTextForCausalLM")]));
    let mut m = parse_object(text, name, file, opts)?;
    let vis = tower.encoder.and_then(|e| e.vision).expect("a vision config parses to a vision encoder");
    // vision_feature_select_strategy "default" drops the class token; "full" keeps it.
    let strategy = obj.get("vision_feature_select_strategy").and_then(Value::as_str).unwrap_or("default");
    let patches = vis.tokens(vis.image_size) - u64::from(vis.class_token());
    let image_tokens = if strategy == "full" { vis.tokens(vis.image_size) } else { patches };
    // One hidden state (an integer index); a list concatenates several (Granite Vision, VipLlava),
    // which widens the projector's input and is not modelled.
    let feature_layer = match obj.get("vision_feature_layer") {
        None => -2,
        Some(v) => v.as_i64().ok_or_else(|| Error::BadKey {
            file: file.into(),
            key: "vision_feature_layer".into(),
            value: v.to_string(),
            hint: "vram models a projector reading one hidden state of the tower (an integer index); several concatenated hidden states are not modelled".into(),
        })?,
    };
    if feature_layer.unsigned_abs() > tower.layers + 1 {
        return Err(Error::BadKey {
            file: file.into(),
            key: "vision_feature_layer".into(),
            value: feature_layer.to_string(),
            hint: format!("the vision tower has {} layers", tower.layers),
        });
    }
    let act = super::keys::Cfg { obj: &obj, file }.act(&["projector_hidden_act"], Act::Gelu)?;
    let anyres = match kind {
        Kind::Llava => None,
        _ => Some(anyres(&obj, file, vis.image_size, vis.image_size / vis.patch.max(1), image_tokens, kind)?),
    };
    let lm_tokens = anyres.as_ref().map_or(image_tokens, |a| a.layout(a.side, vis.image_size, vis.image_size / vis.patch.max(1)).1);
    m.multimodal = Some(Box::new(Multimodal {
        projector_bias: obj.get("multimodal_projector_bias").and_then(Value::as_bool).unwrap_or(true),
        projector_act: act,
        feature_layer,
        anyres: anyres.clone(),
        ..Multimodal::new(tower, lm_tokens)
    }));
    if let Some(a) = &anyres {
        m.warnings.push(format!(
            "{NEXT_IMAGE_ASSUMED} {0}×{0} px: {1} tiles of {2}×{2} px through the tower ({3} tokens each) and {lm_tokens} tokens per image in the language model's sequence: pass --image-size for yours",
            a.side, a.tiles, vis.image_size, a.tile_tokens
        ));
    }
    m.warnings.push(format!(
        "{}: a {} vision tower ({} tokens per tile of {}×{} pixels, hidden state {} of {} layers), the projector and a {} language model",
        match kind {
            Kind::Llava => "LLaVA",
            Kind::Next => "LLaVA-NeXT",
            Kind::OneVision => "LLaVA-OneVision",
        },
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
