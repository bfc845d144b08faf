//! Vision transformers: ViT, DINOv2, and the vision towers of CLIP and SigLIP
//! (transformers models/vit, models/dinov2, models/clip `CLIPVisionConfig`, models/siglip
//! `SiglipVisionConfig`): pre-norm LayerNorm layers over image patches.

use serde_json::Value;

use super::keys::Cfg;
use crate::error::{Error, Result};
use crate::model::{Act, Attention, Block, Encoder, EncoderHead, Mlp, Model, Norm, QkNorm, Vision, VisionFamily, MAX_IMAGE_SIDE};

fn family(model_type: &str) -> VisionFamily {
    match model_type {
        "dinov2" => VisionFamily::Dinov2,
        "clip_vision_model" => VisionFamily::Clip,
        "siglip_vision_model" => VisionFamily::Siglip,
        "llama4_vision_model" => VisionFamily::Llama4,
        _ => VisionFamily::Vit,
    }
}

pub(super) fn parse(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let fam = family(model_type);
    // keys::core_dims reads vocab_size: a vision model has none.
    let mut m = core_dims_vision(c, name)?;
    m.intermediate = match fam {
        // Dinov2Config: mlp_ratio × hidden (4 by default).
        VisionFamily::Dinov2 => m.hidden.saturating_mul(c.opt(&["mlp_ratio"])?.unwrap_or(4)),
        _ => c.opt(&["intermediate_size"])?.unwrap_or(3072),
    };
    if fam == VisionFamily::Dinov2 && c.bool("use_swiglu_ffn", false)? {
        return Err(Error::InvalidValue {
            what: "use_swiglu_ffn".into(),
            value: "true".into(),
            hint: "DINOv2-giant's SwiGLU MLP is not modelled yet (the small, base and large models are)".into(),
        });
    }
    // Class defaults: ViT 224/16, DINOv2 224/16 (the published configs write 518/14), CLIP 224/32,
    // SigLIP 224/16; three channels.
    let image = c.opt(&["image_size"])?.unwrap_or(224);
    let patch = c.opt(&["patch_size"])?.unwrap_or(if fam == VisionFamily::Clip { 32 } else { 16 });
    let channels = c.opt(&["num_channels"])?.unwrap_or(3);
    if image == 0 || image > MAX_IMAGE_SIDE || patch == 0 || patch > image || channels == 0 || channels > 64 {
        return Err(c.bad(
            "image_size",
            &Value::from(image),
            "expected image_size ≥ patch_size ≥ 1 (at most 65536 pixels) and 1–64 channels",
        ));
    }
    let vision = Vision {
        family: fam,
        channels,
        patch,
        image_size: image,
        native_image_size: image,
        pooling_head: fam == VisionFamily::Siglip && c.bool("vision_use_head", true)?,
        position_table: 0,
        adapter: if fam == VisionFamily::Llama4 { Some(llama4_adapter(c, m.hidden, m.intermediate, image / patch)?) } else { None },
    };
    m.position_embeddings = vision.tokens(image);
    let arch = c.first_architecture();
    let head = if arch.ends_with("ForImageClassification") {
        EncoderHead::ImageClassification { labels: c.labels()? }
    } else if arch.is_empty() || arch.ends_with("Model") {
        EncoderHead::Embedding
    } else {
        return Err(Error::InvalidValue {
            what: "vision head".into(),
            value: arch,
            hint: "vram models vision transformers with an image-classification head or bare (feature extraction); pass --task image-classification or image-feature-extraction".into(),
        });
    };
    m.encoder = Some(Encoder {
        token_types: 0,
        head,
        vision: Some(vision),
        pooler: true,
        attention_output_dropout: true,
        disentangled: None,
        modern: None,
    });
    m.tied_embeddings = false;
    m.use_cache = false;
    m.norm = Norm::LayerNorm { bias: true };
    m.block = Block::Sequential;
    m.final_norm = true;
    let qkv_bias = c.bool("qkv_bias", true)?;
    m.attention = Attention {
        qkv_bias,
        o_bias: true,
        fused_qkv: false,
        qk_norm: QkNorm::None,
        mla: None,
        softcap: false,
        sinks: false,
        head_major_q: false,
        output_gate: false,
    };
    let default_act = match fam {
        VisionFamily::Clip => Act::QuickGelu,
        _ => Act::Gelu,
    };
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["hidden_act"], default_act)?, bias: true };
    // ViTConfig hidden_dropout_prob 0.0; Dinov2Config hidden_dropout_prob 0.0; CLIP/SigLIP none.
    m.hidden_dropout = c.dropout(&["hidden_dropout_prob"])?;
    m.attention_dropout = c.dropout(&["attention_probs_dropout_prob", "attention_dropout"])?;
    Ok(m)
}

/// Hidden size, layers and heads; no vocabulary. A key absent from the config is the class
/// default, as transformers reads it (ViTConfig, Dinov2Config, CLIPVisionConfig and
/// SiglipVisionConfig all default to a base-sized 768 × 12 layers × 12 heads; published nested
/// configs such as SigLIP's `vision_config` often write nothing else).
fn core_dims_vision(c: &Cfg, name: &str) -> Result<Model> {
    let mut m = super::keys::base(name);
    m.hidden = c.opt(&["hidden_size"])?.unwrap_or(768);
    m.layers = c.opt(&["num_hidden_layers"])?.unwrap_or(12);
    m.heads = c.opt(&["num_attention_heads"])?.unwrap_or(12);
    m.embed_dim = m.hidden;
    m.kv_heads = m.heads;
    m.head_dim = m.hidden.checked_div(m.heads).unwrap_or(0);
    Ok(m)
}

/// Llama4VisionConfig's pixel-shuffle MLP (configuration_llama4.py: `pixel_shuffle_ratio` 0.5,
/// `projector_input_dim` and `projector_output_dim` 4096): fc1 reads the shuffled width, which
/// is `intermediate_size` in every release, and fc2 maps projector_output_dim to itself, so
/// anything else cannot run.
fn llama4_adapter(c: &Cfg, hidden: u64, intermediate: u64, grid: u64) -> Result<crate::model::VisionAdapter> {
    let ratio = c.f64("pixel_shuffle_ratio", 0.5)?;
    let shuffle = if ratio > 0.0 && ratio <= 1.0 { (1.0 / ratio).round() as u64 } else { 0 };
    if shuffle == 0 || (shuffle as f64 * ratio - 1.0).abs() > 1e-9 || grid % shuffle != 0 {
        return Err(c.bad(
            "pixel_shuffle_ratio",
            &Value::from(ratio),
            &format!("1 / an integer that divides the {grid}×{grid} patch grid (0.5 in every release)"),
        ));
    }
    let (fc1_out, fc2_out) = (c.opt(&["projector_input_dim"])?.unwrap_or(4096), c.opt(&["projector_output_dim"])?.unwrap_or(4096));
    if intermediate != hidden * shuffle * shuffle || fc1_out != fc2_out || fc1_out == 0 {
        return Err(c.bad(
            "intermediate_size",
            &Value::from(intermediate),
            &format!(
                "Llama 4's pixel-shuffle MLP reads hidden_size × (1 / pixel_shuffle_ratio)² = {} channels with fc1 (intermediate_size) and needs projector_input_dim = projector_output_dim",
                hidden * shuffle * shuffle
            ),
        ));
    }
    Ok(crate::model::VisionAdapter { shuffle, fc1_in: intermediate, fc1_out, fc2_out })
}
