//! Contrastive image-text dual encoders: CLIP and SigLIP (transformers models/clip `CLIPModel`,
//! models/siglip `SiglipModel`), and their text towers on their own (`CLIPTextModel`,
//! `SiglipTextModel`: the text encoders of Stable Diffusion and of retrieval pipelines).
//!
//! The text tower is a pre-LN transformer over token and learned position embeddings with a
//! final LayerNorm (`CLIPTextTransformer`, `SiglipTextTransformer`); the vision tower is read by
//! the vision parser from `vision_config`. Nested configs omit what equals their class defaults,
//! which are filled in here (CLIPTextConfig, SiglipTextConfig).

use serde_json::{Map, Value};

use super::keys::Cfg;
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{Act, Attention, Block, DualEncoder, DualFamily, Encoder, EncoderHead, Mlp, Model, Norm};

/// A text tower's class defaults: vocabulary, hidden, intermediate, layers, heads, positions,
/// activation (configuration_clip.py CLIPTextConfig; configuration_siglip.py SiglipTextConfig).
struct TextDefaults {
    vocab: u64,
    hidden: u64,
    intermediate: u64,
    layers: u64,
    heads: u64,
    positions: u64,
    act: Act,
}

const CLIP_TEXT: TextDefaults =
    TextDefaults { vocab: 49408, hidden: 512, intermediate: 2048, layers: 12, heads: 8, positions: 77, act: Act::QuickGelu };
const SIGLIP_TEXT: TextDefaults =
    TextDefaults { vocab: 32000, hidden: 768, intermediate: 3072, layers: 12, heads: 12, positions: 64, act: Act::Gelu };

/// `clip_text_model` / `siglip_text_model`: the text tower (registered in the family table).
pub(super) fn parse_text(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let siglip = model_type == "siglip_text_model";
    let d = if siglip { SIGLIP_TEXT } else { CLIP_TEXT };
    let mut m = super::keys::base(name);
    m.vocab = c.opt(&["vocab_size"])?.unwrap_or(d.vocab);
    m.hidden = c.opt(&["hidden_size"])?.unwrap_or(d.hidden);
    m.intermediate = c.opt(&["intermediate_size"])?.unwrap_or(d.intermediate);
    m.layers = c.opt(&["num_hidden_layers"])?.unwrap_or(d.layers);
    m.heads = c.opt(&["num_attention_heads"])?.unwrap_or(d.heads);
    m.position_embeddings = c.opt(&["max_position_embeddings"])?.unwrap_or(d.positions);
    m.embed_dim = m.hidden;
    m.kv_heads = m.heads;
    m.head_dim = m.hidden.checked_div(m.heads).unwrap_or(0);
    // SigLIP's text tower ends in `head`, Linear(hidden, projection_size) with bias, on the
    // last token: counted as the encoder's pooler dense (hidden × hidden + bias), which it is
    // when projection_size is the hidden size (the class default and every published config).
    let projection = c.opt(&["projection_size"])?.unwrap_or(m.hidden);
    if siglip && projection != m.hidden {
        return Err(c.bad(
            "projection_size",
            &Value::from(projection),
            "SigLIP text heads narrower or wider than hidden_size are not modelled yet",
        ));
    }
    let arch = c.first_architecture();
    if !(arch.is_empty() || arch.ends_with("Model") || arch.ends_with("Transformer")) {
        return Err(Error::InvalidValue {
            what: "text tower head".into(),
            value: arch,
            hint: "vram models CLIP/SigLIP text towers bare (CLIPTextModel, SiglipTextModel) or inside CLIPModel/SiglipModel".into(),
        });
    }
    m.encoder = Some(Encoder {
        token_types: 0,
        head: EncoderHead::Embedding,
        vision: None,
        pooler: siglip,
        attention_output_dropout: false,
        disentangled: None,
        modern: None,
    });
    m.tied_embeddings = false;
    m.use_cache = false;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = Block::Sequential;
    m.final_norm = true;
    m.attention = Attention::plain(true, true, false);
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], d.act)?, bias: true };
    // Neither tower has hidden dropout; CLIP's attention_dropout is 0.0 by default.
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    Ok(m)
}

fn nested(obj: &Map<String, Value>, key: &str) -> Map<String, Value> {
    match obj.get(key) {
        Some(Value::Object(o)) => o.clone(),
        // CLIPConfig/SiglipConfig default an absent tower config to the class defaults.
        _ => Map::new(),
    }
}

/// `clip` / `siglip`: both towers, the projections and the logit scale (and bias).
pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let siglip = obj.get("model_type").and_then(Value::as_str) == Some("siglip");
    let (family, text_type, vision_type) = if siglip {
        (DualFamily::Siglip, "siglip_text_model", "siglip_vision_model")
    } else {
        (DualFamily::Clip, "clip_text_model", "clip_vision_model")
    };
    let arch = obj.get("architectures").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str).unwrap_or("");
    if !(arch.is_empty() || arch == "CLIPModel" || arch == "SiglipModel") {
        return Err(Error::InvalidValue {
            what: "dual-encoder class".into(),
            value: arch.into(),
            hint: "vram models CLIPModel and SiglipModel (both towers, contrastive loss); for one tower alone save its text_config or vision_config as a config.json with its own model_type".into(),
        });
    }
    // transformers ≤ 4.x wrote the non-default keys twice, in `text_config_dict` too: it wins.
    let mut text = nested(&obj, "text_config");
    let mut vision = nested(&obj, "vision_config");
    for (src, dst) in [("text_config_dict", &mut text), ("vision_config_dict", &mut vision)] {
        if let Some(Value::Object(o)) = obj.get(src) {
            dst.extend(o.clone());
        }
    }
    for (part, ty) in [(&mut text, text_type), (&mut vision, vision_type)] {
        part.insert("model_type".into(), Value::from(ty));
        part.remove("architectures");
        if let (false, Some(v)) = (part.contains_key("torch_dtype"), obj.get("torch_dtype")) {
            part.insert("torch_dtype".into(), v.clone());
        }
    }
    let vision = parse_object(vision, &format!("{name} (vision tower)"), file, opts)?;
    let mut m = parse_object(text, name, file, opts)?;
    // CLIPConfig projection_dim (512 by default); SigLIP's text head is the text tower's pooler.
    let projection = match family {
        DualFamily::Clip => Cfg { obj: &obj, file }.opt(&["projection_dim"])?.unwrap_or(512),
        DualFamily::Siglip => m.hidden,
    };
    if projection == 0 || projection > super::MAX_DIM {
        return Err(Error::BadKey {
            file: file.into(),
            key: "projection_dim".into(),
            value: projection.to_string(),
            hint: "a width of 1 to 1048576".into(),
        });
    }
    let vis = vision.encoder.and_then(|e| e.vision).expect("a vision config parses to a vision encoder");
    m.warnings.push(format!(
        "{}: a {}-layer text tower ({} positions) and a {}-layer vision tower ({}×{} px, patches of {}), trained together on image-text pairs; --seq-len is the text length",
        if siglip { "SigLIP" } else { "CLIP" },
        m.layers,
        m.position_embeddings,
        vision.layers,
        vis.image_size,
        vis.image_size,
        vis.patch
    ));
    m.model_type = if siglip { "siglip" } else { "clip" }.into();
    m.dual = Some(Box::new(DualEncoder { family, vision, projection, tower_frozen: false }));
    Ok(m)
}
