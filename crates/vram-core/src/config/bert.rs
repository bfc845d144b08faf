//! BERT-style encoders: BERT, RoBERTa, XLM-RoBERTa, CamemBERT (transformers models/bert,
//! models/roberta, models/xlm_roberta, models/camembert: one layer structure, post-LN).

use serde_json::Value;

use super::keys::{core_dims, Cfg};
use crate::error::{Error, Result};
use crate::model::{Act, Attention, Block, Encoder, EncoderHead, Mlp, Model, Norm};

/// The head a class in `architectures` puts on the encoder, when vram models it.
pub(super) fn head_of(arch: &str, labels: u64) -> Option<EncoderHead> {
    if arch.ends_with("ForMaskedLM") {
        Some(EncoderHead::MaskedLm)
    } else if arch.ends_with("ForSequenceClassification") {
        Some(EncoderHead::SequenceClassification { labels })
    } else if arch.ends_with("ForTokenClassification") {
        Some(EncoderHead::TokenClassification { labels })
    } else if arch.ends_with("Model") {
        Some(EncoderHead::Embedding)
    } else {
        None
    }
}

/// The head of an encoder whose family also has a question-answering class (DeBERTa,
/// ModernBERT): `…ForQuestionAnswering` is a 2-output classifier on every token, counted as a
/// 2-label token classifier (with a warning naming `qa`, what the family puts under it); no
/// class is the masked-LM head; otherwise [`head_of`]. `family` names it in the messages.
pub(super) fn head_with_qa(c: &Cfg, m: &mut Model, family: &str, qa: &str) -> Result<EncoderHead> {
    let arch = c.first_architecture();
    let head = if arch.ends_with("ForQuestionAnswering") {
        m.warnings
            .push(format!("{family} question answering: {qa} (start and end logits per token) counted as a 2-label token classifier"));
        Some(EncoderHead::TokenClassification { labels: 2 })
    } else if arch.is_empty() {
        Some(EncoderHead::MaskedLm)
    } else {
        head_of(&arch, c.labels()?)
    };
    head.ok_or_else(|| Error::InvalidValue {
        what: "encoder head".into(),
        value: arch,
        hint: format!("vram models {family} with a masked-LM, sequence- or token-classification or question-answering head, or bare; pass --task fill-mask|text-classification|token-classification|feature-extraction"),
    })
}

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["intermediate_size"], "size the MLP")?;
    // BertConfig: max_position_embeddings 512 (RoBERTa's configs write 514: padding_idx + 1
    // offset rows), type_vocab_size 2 (RoBERTa's configs write 1).
    m.position_embeddings = c.opt(&["max_position_embeddings"])?.unwrap_or(512);
    let token_types = c.opt(&["type_vocab_size"])?.unwrap_or(2);
    if token_types > 1 << 16 {
        return Err(c.bad("type_vocab_size", &Value::from(token_types), "expected at most 65536 token types (BERT: 2, RoBERTa: 1)"));
    }
    // The head follows the config's class; the CLI's --task replaces it.
    let arch = c.first_architecture();
    let head = if arch.is_empty() { Some(EncoderHead::MaskedLm) } else { head_of(&arch, c.labels()?) };
    let Some(head) = head else {
        return Err(Error::InvalidValue {
            what: "encoder head".into(),
            value: arch,
            hint: "vram models BERT-style encoders with a masked-LM, sequence- or token-classification head, or the bare model (embeddings); pass --task fill-mask|text-classification|token-classification|feature-extraction to choose one".into(),
        });
    };
    // BertConfig: hidden_dropout_prob 0.1, attention_probs_dropout_prob 0.1.
    post_ln(
        c,
        m,
        Encoder { token_types, head, vision: None, pooler: true, attention_output_dropout: true, disentangled: None, modern: None },
        ["hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob"],
    )
}

/// What BERT, DistilBERT and ELECTRA share: post-LN layers with LayerNorm (bias), biased q/k/v/o
/// and a plain biased MLP; the masked-LM head tied to the word embedding unless the config says
/// otherwise; dropout from `keys` (activation, hidden dropout, attention dropout: each config
/// class's spelling, 0.1 by default in all three classes).
pub(super) fn post_ln(c: &Cfg, mut m: Model, enc: Encoder, keys: [&str; 3]) -> Result<Model> {
    let [act, hidden_drop, attn_drop] = keys;
    m.tied_embeddings = enc.head == EncoderHead::MaskedLm && c.bool("tie_word_embeddings", true)?;
    m.encoder = Some(enc);
    m.norm = Norm::LayerNorm { bias: true };
    m.block = Block::PostLn;
    m.final_norm = false;
    m.attention = Attention::plain(true, true, false);
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&[act], Act::Gelu)?, bias: true };
    m.hidden_dropout = if c.get(hidden_drop).is_some() { c.f64(hidden_drop, 0.1)? } else { 0.1 };
    m.attention_dropout = if c.get(attn_drop).is_some() { c.f64(attn_drop, 0.1)? } else { 0.1 };
    Ok(m)
}
