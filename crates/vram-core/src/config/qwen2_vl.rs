//! Qwen2-VL and Qwen2.5-VL (transformers models/qwen2_vl, models/qwen2_5_vl): a vision tower
//! (Conv3d patches over two frames, `depth` pre-norm blocks with 2-D rotary attention), the
//! `PatchMerger` (2×2 neighbouring patches into one language-model token) and a Qwen2 language
//! model with M-RoPE.
//!
//! Two layouts are read. The Hub's configs (Qwen2-VL-7B-Instruct, transformers 4.41) are flat:
//! the language model's keys at the top level, `vision_config` nested. transformers 5
//! (configuration_qwen2_vl.py `Qwen2VLConfig.__post_init__`) and configs saved since 4.52 nest
//! `text_config` too; a key a nested part omits is its class default.

use serde_json::{Map, Value};

use super::keys::Cfg;
use super::{parse_object, ParseOptions};
use crate::error::{Error, Result};
use crate::model::{
    Act, Attention, Block, Encoder, EncoderHead, Mlp, Model, Multimodal, Norm, PatchMerger, Vision, VisionFamily, QWEN_IMAGE_ASSUMED,
};

/// Square side in pixels assumed when `--image-size` is not given: 448 px → 32×32 patches →
/// 256 image tokens. The processor keeps an image's own resolution (rounded to 28 px, up to
/// 3584² pixels), so there is no natural default; this one is stated in the warnings.
pub(super) const DEFAULT_IMAGE_SIDE: u64 = 448;

/// Qwen2VLTextConfig / Qwen2_5_VLTextConfig defaults (the 72B's dimensions), for a nested
/// `text_config` that omits them.
const TEXT_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 152064),
    ("hidden_size", 8192),
    ("intermediate_size", 29568),
    ("num_hidden_layers", 80),
    ("num_attention_heads", 64),
    ("num_key_value_heads", 8),
    ("max_position_embeddings", 32768),
];

/// Qwen3VLTextConfig defaults (configuration_qwen3_vl.py), for a `text_config` that omits them.
const QWEN3_TEXT_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 151936),
    ("hidden_size", 4096),
    ("intermediate_size", 22016),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("num_key_value_heads", 32),
    ("head_dim", 128),
    ("max_position_embeddings", 128000),
];

/// Qwen3VLMoeTextConfig defaults (configuration_qwen3_vl_moe.py).
const QWEN3_MOE_TEXT_DEFAULTS: &[(&str, u64)] = &[
    ("vocab_size", 151936),
    ("hidden_size", 2048),
    ("intermediate_size", 5632),
    ("num_hidden_layers", 24),
    ("num_attention_heads", 16),
    ("num_key_value_heads", 16),
    ("max_position_embeddings", 128000),
    ("moe_intermediate_size", 1408),
    ("num_experts", 60),
    ("num_experts_per_tok", 4),
    ("decoder_sparse_step", 1),
];

/// Which of the families `model_type` names.
fn family(model_type: &str) -> VisionFamily {
    match model_type {
        "qwen2_5_vl" => VisionFamily::Qwen25Vl,
        "qwen3_vl" | "qwen3_vl_moe" => VisionFamily::Qwen3Vl,
        _ => VisionFamily::Qwen2Vl,
    }
}

/// The family's display name.
fn family_name(fam: VisionFamily) -> &'static str {
    match fam {
        VisionFamily::Qwen25Vl => "Qwen2.5-VL",
        VisionFamily::Qwen3Vl => "Qwen3-VL",
        _ => "Qwen2-VL",
    }
}

pub(super) fn parse(obj: Map<String, Value>, name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    let model_type = obj.get("model_type").and_then(Value::as_str).unwrap_or_default();
    let fam = family(model_type);
    let moe = model_type == "qwen3_vl_moe";
    let mut m = parse_object(text_part(&obj, fam, moe), name, file, opts)?;
    let lm = match fam {
        VisionFamily::Qwen3Vl if moe => "Qwen3 MoE",
        VisionFamily::Qwen3Vl => "Qwen3",
        _ => "Qwen2",
    };
    let (mm, warnings) = vision_part(&obj, fam, true, m.hidden, lm, name, file)?;
    m.warnings.extend(warnings);
    m.multimodal = Some(mm);
    Ok(m)
}

/// The vision tower and PatchMerger of a Qwen vision-language config (`vision_config`; the
/// class builds a default one when it is absent), checked against the language model's width
/// `text_hidden`, and the warnings that describe them. `deepstack`: Qwen3-VL's DeepStack mergers
/// exist (Qwen3.5's tower has none). `lm` names the language model in the warning.
pub(super) fn vision_part(
    obj: &Map<String, Value>,
    fam: VisionFamily,
    deepstack: bool,
    text_hidden: u64,
    lm: &str,
    name: &str,
    file: &str,
) -> Result<(Box<Multimodal>, Vec<String>)> {
    let vision = match obj.get("vision_config") {
        Some(Value::Object(v)) => v.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(v) => {
            return Err(Error::BadKey {
                file: file.into(),
                key: "vision_config".into(),
                value: v.to_string(),
                hint: "expected an object".into(),
            })
        }
    };
    let vc = Cfg { obj: &vision, file };
    let (tower, merger, out_width) = tower(&vc, fam, deepstack, name)?;
    super::validate(&tower, file)?;
    if out_width != text_hidden {
        let key = if fam == VisionFamily::Qwen2Vl { "vision_config.hidden_size" } else { "vision_config.out_hidden_size" };
        return Err(Error::BadKey {
            file: file.into(),
            key: key.into(),
            value: out_width.to_string(),
            hint: format!("the PatchMerger's output must equal the language model's hidden_size ({text_hidden})"),
        });
    }
    let patch = tower.encoder.and_then(|e| e.vision).map_or(14, |v| v.patch);
    let image_tokens = merger.image_tokens(DEFAULT_IMAGE_SIDE, patch);
    let deepstack = match merger.deepstack {
        0 => String::new(),
        n => format!(" and {n} DeepStack mergers whose features are added to the first {n} language-model layers' image positions"),
    };
    let warnings = vec![
        format!(
            "{}: a {}-block vision tower (patches of {patch} px, merged {}×{} into one token), the PatchMerger{deepstack}, and a {lm} language model",
            family_name(fam),
            tower.layers,
            merger.merge,
            merger.merge,
        ),
        // Removed by Model::set_image_size once the user gives the size.
        format!(
            "{QWEN_IMAGE_ASSUMED} {DEFAULT_IMAGE_SIDE}×{DEFAULT_IMAGE_SIDE} px ({image_tokens} tokens each, {} patches through the tower): pass --image-size for yours",
            image_tokens * merger.merge * merger.merge
        ),
    ];
    let mm = Multimodal { projector_bias: true, merger: Some(merger), ..Multimodal::new(tower, image_tokens) };
    Ok((Box::new(mm), warnings))
}

/// The language model's config: `text_config` with its class defaults, or the flat top level
/// without `vision_config`; read as the Qwen2 causal LM it is (Qwen2VLTextModel's layers are
/// Qwen2's: q/k/v with bias, RMSNorm, SwiGLU).
fn text_part(obj: &Map<String, Value>, fam: VisionFamily, moe: bool) -> Map<String, Value> {
    let qwen3 = fam == VisionFamily::Qwen3Vl;
    let defaults = match (qwen3, moe) {
        (true, true) => QWEN3_MOE_TEXT_DEFAULTS,
        (true, false) => QWEN3_TEXT_DEFAULTS,
        _ => TEXT_DEFAULTS,
    };
    let mut text = match obj.get("text_config") {
        Some(Value::Object(t)) => {
            let mut t = t.clone();
            for (k, v) in defaults {
                t.entry(k.to_string()).or_insert(Value::from(*v));
            }
            t
        }
        _ => obj
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "vision_config" | "text_config"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    // Qwen2VLConfig: `tie_word_embeddings` lives at the top (default false); a pre-v5 nested
    // text_config's true is forwarded to it.
    let top_tie = obj.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    let nested_tie = text.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    text.insert("tie_word_embeddings".into(), Value::from(top_tie || nested_tie));
    for k in ["torch_dtype", "dtype"] {
        if let (false, Some(v)) = (text.contains_key(k), obj.get(k)) {
            text.insert(k.into(), v.clone());
        }
    }
    // Qwen3-VL's text model is Qwen3's layers (per-head q/k RMSNorms) with interleaved M-RoPE;
    // Qwen3-VL-MoE's are Qwen3-MoE's (the same experts, grouped_mm by default, and routing: the
    // top-k weights renormalised, as norm_topk_prob does).
    let lm_type = match (qwen3, moe) {
        (true, true) => "qwen3_moe",
        (true, false) => "qwen3",
        _ => "qwen2",
    };
    text.insert("model_type".into(), Value::from(lm_type));
    text.insert("architectures".into(), Value::from(vec![Value::from("Qwen2VLTextForCausalLM")]));
    text
}

/// The vision tower (Qwen2VLVisionConfig / Qwen2_5_VLVisionConfig / Qwen3VLVisionConfig defaults
/// for absent keys), its merger, and the merger's output width.
fn tower(c: &Cfg, fam: VisionFamily, deepstack: bool, name: &str) -> Result<(Model, PatchMerger, u64)> {
    let qwen25 = fam == VisionFamily::Qwen25Vl;
    let qwen3 = fam == VisionFamily::Qwen3Vl;
    let mut m = super::keys::base(&format!("{name} (vision tower)"));
    m.model_type = match fam {
        VisionFamily::Qwen25Vl => "qwen2_5_vl_vision",
        VisionFamily::Qwen3Vl => "qwen3_vl_vision",
        _ => "qwen2_vl_vision",
    }
    .into();
    m.layers = c.opt(&["depth"])?.unwrap_or(if qwen3 { 27 } else { 32 });
    m.heads = c.opt(&["num_heads"])?.unwrap_or(16);
    // Qwen2-VL: `embed_dim` is the tower's width and `hidden_size` the merger's output;
    // Qwen2.5-VL and Qwen3-VL: `hidden_size` is the width and `out_hidden_size` the output.
    let (width, out) = match fam {
        VisionFamily::Qwen25Vl => (c.opt(&["hidden_size"])?.unwrap_or(3584), c.opt(&["out_hidden_size"])?.unwrap_or(3584)),
        VisionFamily::Qwen3Vl => (c.opt(&["hidden_size"])?.unwrap_or(1152), c.opt(&["out_hidden_size"])?.unwrap_or(3584)),
        _ => (c.opt(&["embed_dim"])?.unwrap_or(1280), c.opt(&["hidden_size"])?.unwrap_or(3584)),
    };
    m.hidden = width;
    m.embed_dim = width;
    m.kv_heads = m.heads;
    m.head_dim = width.checked_div(m.heads).unwrap_or(0);
    m.rotary_dim = m.head_dim;
    m.intermediate = match fam {
        VisionFamily::Qwen25Vl => c.opt(&["intermediate_size"])?.unwrap_or(3420),
        VisionFamily::Qwen3Vl => c.opt(&["intermediate_size"])?.unwrap_or(4304),
        _ => mlp_width(c, width)?,
    };
    m.norm = if qwen25 { Norm::RmsNorm } else { Norm::LayerNorm { bias: true } };
    m.block = Block::Sequential;
    m.final_norm = false;
    m.use_cache = false;
    // VisionAttention: one qkv Linear with bias, proj with bias.
    m.attention = Attention::plain(true, true, true);
    let act = c.act(
        &["hidden_act"],
        match fam {
            VisionFamily::Qwen25Vl => Act::Silu,
            VisionFamily::Qwen3Vl => Act::Gelu,
            _ => Act::QuickGelu,
        },
    )?;
    m.mlp = Mlp { gated: qwen25, fused_gate_up: false, act, bias: true };
    let patch = c.opt(&["patch_size"])?.unwrap_or(if qwen3 { 16 } else { 14 });
    let merge = c.opt(&["spatial_merge_size"])?.unwrap_or(2);
    check_geometry(c, patch, merge)?;
    let channels = c.opt(&["in_channels"])?.unwrap_or(3);
    // Qwen3VLVisionModel.pos_embed: nn.Embedding(num_position_embeddings, hidden), a square grid.
    let position_table = if qwen3 { c.opt(&["num_position_embeddings"])?.unwrap_or(2304) } else { 0 };
    if qwen3 && (position_table == 0 || position_table > 1 << 24) {
        return Err(c.bad("num_position_embeddings", &Value::from(position_table), "expected 1–16777216 positions"));
    }
    let vision =
        Vision { family: fam, channels, patch, image_size: 0, native_image_size: 0, pooling_head: false, position_table, adapter: None };
    m.encoder = Some(Encoder {
        token_types: 0,
        head: EncoderHead::Embedding,
        vision: Some(vision),
        pooler: false,
        attention_output_dropout: true,
        disentangled: None,
        modern: None,
    });
    let window = if qwen25 { c.opt(&["window_size"])?.unwrap_or(112) / patch } else { 0 };
    let full = if qwen25 { full_layers(c, m.layers)? } else { m.layers };
    let deepstack = if qwen3 && deepstack { deepstack_mergers(c, m.layers)? } else { 0 };
    let (min_pixels, max_pixels) = if qwen3 {
        (crate::model::QWEN3_MIN_PIXELS, crate::model::QWEN3_MAX_PIXELS)
    } else {
        (crate::model::QWEN_MIN_PIXELS, crate::model::QWEN_MAX_PIXELS)
    };
    let merger = PatchMerger { merge, window, full_attention_layers: full, deepstack, min_pixels, max_pixels };
    let side = merger.processed_side(DEFAULT_IMAGE_SIDE, patch);
    if let Some(v) = m.encoder.as_mut().and_then(|e| e.vision.as_mut()) {
        v.image_size = side;
        v.native_image_size = side;
    }
    Ok((m, merger, out))
}

/// Qwen3-VL's DeepStack mergers: one per entry of `deepstack_visual_indexes` (default
/// [8, 16, 24]), each reading a block the tower has. The language model adds them to its first
/// layers, one per layer.
fn deepstack_mergers(c: &Cfg, layers: u64) -> Result<u64> {
    match c.get("deepstack_visual_indexes") {
        None | Some(Value::Null) => Ok(3),
        Some(Value::Array(a)) => {
            let idx: Option<Vec<u64>> = a.iter().map(Value::as_u64).collect();
            match idx {
                Some(idx) if idx.iter().all(|&i| i < layers) => Ok(idx.len() as u64),
                _ => Err(c.bad(
                    "deepstack_visual_indexes",
                    &Value::Array(a.clone()),
                    &format!("expected block numbers below depth ({layers})"),
                )),
            }
        }
        Some(v) => Err(c.bad("deepstack_visual_indexes", v, "expected a list of block numbers")),
    }
}

/// Qwen2-VL's MLP width: `int(embed_dim * mlp_ratio)` (Qwen2VLVisionBlock), mlp_ratio 4 by default.
fn mlp_width(c: &Cfg, width: u64) -> Result<u64> {
    let ratio = c.f64("mlp_ratio", 4.0)?;
    if !(ratio > 0.0 && ratio <= 64.0) {
        return Err(c.bad("mlp_ratio", &Value::from(ratio), "expected a number between 0 and 64"));
    }
    Ok((width as f64 * ratio) as u64)
}

/// Patch and merge sizes the model's shapes depend on; `temporal_patch_size` must be the 2
/// frames vram counts (an image is repeated to them).
fn check_geometry(c: &Cfg, patch: u64, merge: u64) -> Result<()> {
    if patch == 0 || patch > 1024 {
        return Err(c.bad("patch_size", &Value::from(patch), "expected 1–1024 pixels"));
    }
    if merge == 0 || merge > 16 {
        return Err(c.bad("spatial_merge_size", &Value::from(merge), "expected 1–16"));
    }
    let temporal = c.opt(&["temporal_patch_size"])?.unwrap_or(2);
    if temporal != 2 {
        return Err(c.bad("temporal_patch_size", &Value::from(temporal), "vram models Qwen2-VL's 2-frame patches (every released config)"));
    }
    Ok(())
}

/// How many of `layers` blocks are in `fullatt_block_indexes` (Qwen2.5-VL; the others attend
/// within windows).
fn full_layers(c: &Cfg, layers: u64) -> Result<u64> {
    match c.get("fullatt_block_indexes") {
        None => Ok([7, 15, 23, 31].iter().filter(|&&i| i < layers).count() as u64),
        Some(Value::Array(a)) => {
            let idx: Option<Vec<u64>> = a.iter().map(Value::as_u64).collect();
            let idx = idx.ok_or_else(|| c.bad("fullatt_block_indexes", &Value::Array(a.clone()), "expected block numbers"))?;
            Ok(idx.iter().filter(|&&i| i < layers).count() as u64)
        }
        Some(v) => Err(c.bad("fullatt_block_indexes", v, "expected a list of block numbers")),
    }
}

#[cfg(test)]
mod tests {
    use crate::model::PatchMerger;

    fn merger() -> PatchMerger {
        PatchMerger {
            merge: 2,
            window: 0,
            full_attention_layers: 32,
            deepstack: 0,
            min_pixels: crate::model::QWEN_MIN_PIXELS,
            max_pixels: crate::model::QWEN_MAX_PIXELS,
        }
    }

    #[test]
    fn processor_rounds_as_smart_resize() {
        let m = merger();
        // 448 = 16·28: kept, 32×32 patches, 256 tokens.
        assert_eq!((m.processed_side(448, 14), m.image_tokens(448, 14)), (448, 256));
        // Python's round: 434/28 = 15.5 → 16 (even), 462/28 = 16.5 → 16 (even), 463 → 17.
        assert_eq!(m.processed_side(434, 14), 448);
        assert_eq!(m.processed_side(462, 14), 448);
        assert_eq!(m.processed_side(463, 14), 476);
        // Below min_pixels (56²): 56; above max_pixels (3584²) scaled down (f64 as in Python).
        assert_eq!(m.processed_side(10, 14), 56);
        assert_eq!((m.processed_side(5000, 14), m.processed_side(4000, 14)), (3556, 3584));
        assert_eq!(m.image_tokens(672, 14), 576);
    }
}
