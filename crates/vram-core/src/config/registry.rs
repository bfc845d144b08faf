//! Which parser reads which `model_type`, and the families recognised but not estimated.

use serde_json::{Map, Value};

use super::keys::Cfg;
use super::{
    bart, bert, clip, deberta, distilbert, electra, falcon, gemma3_vl, gpt2, gpt_neox, idefics3, llama, llama4, llava, mamba, modernbert,
    opt, paligemma, phi, qwen2_vl, qwen3_next, t5, vision, whisper, zamba, zamba2, ParseOptions,
};
use crate::error::Result;
use crate::model::Model;

/// A family's parser: the config, the display name, the `model_type` it was chosen for.
pub(super) type Parser = fn(&Cfg, &str, &str) -> Result<Model>;

/// Architectures read natively, by `model_type`, and the file that reads them.
const FAMILIES: &[(&[&str], Parser)] = &[
    (
        &[
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3",
            "gemma3_text",
            "phi3",
            "starcoder2",
            "olmo2",
            "deepseek_v2",
            "deepseek_v3",
            "gpt_oss",
            "llama4_text",
        ],
        llama::parse,
    ),
    (&["gpt2"], gpt2::parse),
    (&["mamba", "falcon_mamba"], mamba::parse),
    (&["mamba2"], mamba::parse2),
    (&["bamba"], mamba::parse_bamba),
    (&["granitemoehybrid"], mamba::parse_granite_hybrid),
    (&["falcon_h1"], mamba::parse_falcon_h1),
    (&["jamba"], mamba::parse_jamba),
    (&["nemotron_h"], mamba::parse_nemotron_h),
    (&["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"], qwen3_next::parse),
    (&["zamba"], zamba::parse),
    (&["zamba2"], zamba2::parse),
    (&["gpt_neox"], gpt_neox::parse),
    (&["falcon"], falcon::parse),
    (&["opt"], opt::parse),
    (&["phi"], phi::parse),
    (&["bert", "roberta", "xlm-roberta", "camembert"], bert::parse),
    (&["distilbert"], distilbert::parse),
    (&["deberta-v2"], deberta::parse),
    (&["modernbert"], modernbert::parse),
    (&["electra"], electra::parse),
    (&["vit", "dinov2", "clip_vision_model", "siglip_vision_model", "llama4_vision_model"], vision::parse),
    (&["clip_text_model", "siglip_text_model"], clip::parse_text),
    (&["whisper"], whisper::parse),
    (&["bart", "mbart"], bart::parse),
    (&["t5", "mt5"], t5::parse),
];

/// A composite config's parser (vision-language models, dual encoders): the whole JSON object,
/// whose nested parts it reads with their own families' parsers.
pub(super) type CompositeParser = fn(Map<String, Value>, &str, &str, ParseOptions) -> Result<Model>;

/// Composite architectures, by `model_type`, and the file that reads them.
const COMPOSITES: &[(&[&str], CompositeParser)] = &[
    (&["llava"], llava::parse),
    (&["llava_next"], llava::parse_next),
    (&["llava_onevision"], llava::parse_onevision),
    (&["clip", "siglip"], clip::parse),
    (&["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"], qwen2_vl::parse),
    (&["idefics3", "smolvlm"], idefics3::parse),
    (&["paligemma"], paligemma::parse),
    (&["qwen3_5", "qwen3_5_moe"], qwen3_next::parse_vl),
    (&["llama4"], llama4::parse),
];

/// The composite parser for this config, if it is one. Gemma-3 is one only with a
/// `vision_config` (Gemma3ForConditionalGeneration); without, it is its text model.
pub(super) fn composite(model_type: &str, obj: &Map<String, Value>) -> Option<CompositeParser> {
    if model_type == "gemma3" && matches!(obj.get("vision_config"), Some(Value::Object(_))) {
        return Some(gemma3_vl::parse);
    }
    COMPOSITES.iter().find(|(types, _)| types.contains(&model_type)).map(|(_, p)| *p)
}

/// Types whose parser checks `architectures` itself (encoder heads, Whisper's conditional
/// generation) instead of requiring a causal-LM class.
pub(super) fn reads_own_heads(model_type: &str) -> bool {
    is_encoder(model_type) || matches!(model_type, "whisper" | "bart" | "mbart" | "t5" | "mt5")
}

/// The encoder types (their `architectures` name encoder heads, not causal-LM classes).
pub(super) fn is_encoder(model_type: &str) -> bool {
    matches!(
        model_type,
        "bert"
            | "roberta"
            | "xlm-roberta"
            | "camembert"
            | "distilbert"
            | "deberta-v2"
            | "modernbert"
            | "electra"
            | "vit"
            | "dinov2"
            | "clip_vision_model"
            | "siglip_vision_model"
            | "llama4_vision_model"
            | "clip_text_model"
            | "siglip_text_model"
    )
}

/// The parser for `model_type`, when vram reads it natively.
pub(super) fn parser(model_type: &str) -> Option<Parser> {
    FAMILIES.iter().find(|(types, _)| types.contains(&model_type)).map(|(_, p)| *p)
}

/// Every `model_type` vram reads natively.
pub fn known_model_types() -> Vec<&'static str> {
    FAMILIES.iter().flat_map(|(types, _)| types.iter().copied()).collect()
}

/// Whether vram reads `model_type` natively.
pub(super) fn is_known(model_type: &str) -> bool {
    parser(model_type).is_some()
}

/// Families vram recognises but cannot estimate, with the reason given to the user.
const UNSUPPORTED: &[(&[&str], &str)] = &[
    (
        &["albert", "deberta", "mpnet", "ernie", "nomic_bert", "xlm", "xlm-roberta-xl", "roberta-prelayernorm"],
        "this encoder is not supported yet: vram models BERT, RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, ELECTRA, DeBERTa-v2/v3 and ModernBERT among encoders (ALBERT, DeBERTa v1 and MPNet differ in embeddings, attention or norms)",
    ),
    (
        &["umt5", "longt5", "pegasus", "marian", "blenderbot", "m2m_100", "nllb-moe", "seamless_m4t", "switch_transformers", "speecht5", "fsmt", "prophetnet"],
        "this encoder-decoder is not supported yet: vram models Whisper, BART, mBART, T5, Flan-T5 and mT5 (UMT5 has a position bias in every layer, LongT5 local/global attention, Pegasus/Marian sinusoidal positions, Switch experts)",
    ),
    (
        &["rwkv", "recurrent_gemma", "xlstm", "lfm2", "kimi_linear"],
        "this state-space, recurrent or hybrid model is not supported yet: vram models Mamba, Falcon-Mamba, Mamba-2, the Bamba, Granite-4.0-H, Falcon-H1, Jamba, Nemotron-H, Zamba and Zamba2 hybrids and Qwen3-Next/Qwen3.5's Gated DeltaNet layers (RWKV's recurrence, LFM2's convolutions and Kimi's delta attention are not modelled)",
    ),
    (
        &["siglip2", "chinese_clip", "align", "altclip"],
        "this dual encoder is not supported yet: vram models CLIP and SigLIP (SigLIP 2 patchifies with a linear layer over variable-size images; Chinese-CLIP, ALIGN and AltCLIP have other text towers)",
    ),
    (
        &["llava_next_video", "mllama", "idefics2", "pixtral", "blip-2", "kosmos-2", "phi3_v", "internvl", "chameleon", "gemma3n", "qwen2_5_omni", "mistral3", "aya_vision", "sam"],
        "this vision-language model is not supported yet: vram models LLaVA, LLaVA-NeXT, LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, Qwen3-VL (dense and MoE), Qwen3.5, Gemma-3, Idefics3, SmolVLM, PaliGemma and Llama 4 (LLaVA-NeXT-Video pools video frames, Idefics2 has a perceiver resampler, Mllama adds cross-attention layers)",
    ),
];

/// Why a recognised family is not estimated, if `model_type` belongs to one.
pub(super) fn family_reason(model_type: &str) -> Option<&'static str> {
    UNSUPPORTED.iter().find(|(types, _)| types.contains(&model_type)).map(|(_, r)| *r)
}
