//! ELECTRA (transformers models/electra/modeling_electra.py): BERT's post-LN layers behind
//! embeddings `embedding_size` wide (projected to the hidden size by `embeddings_project` when
//! they differ), no pooler, and its own heads: the discriminator (`ElectraForPreTraining`:
//! replaced-token detection), the generator (`ElectraForMaskedLM`, back to `embedding_size`).

use serde_json::Value;

use super::bert::head_of;
use super::keys::{core_dims, Cfg};
use super::MAX_DIM;
use crate::error::{Error, Result};
use crate::model::{Encoder, EncoderHead, Model};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["hidden_size"], &["num_hidden_layers"], &["num_attention_heads"])?;
    m.intermediate = c.req(&["intermediate_size"], "size the MLP")?;
    // ElectraConfig: embedding_size 128, max_position_embeddings 512, type_vocab_size 2.
    m.embed_dim = c.opt(&["embedding_size"])?.unwrap_or(128);
    if m.embed_dim == 0 || m.embed_dim > MAX_DIM {
        return Err(c.bad("embedding_size", &Value::from(m.embed_dim), &format!("must be between 1 and {MAX_DIM}")));
    }
    m.position_embeddings = c.opt(&["max_position_embeddings"])?.unwrap_or(512);
    let token_types = c.opt(&["type_vocab_size"])?.unwrap_or(2);
    if token_types > 1 << 16 {
        return Err(c.bad("type_vocab_size", &Value::from(token_types), "expected at most 65536 token types (ELECTRA: 2)"));
    }
    let arch = c.first_architecture();
    let head = match arch.as_str() {
        "" | "ElectraForPreTraining" => Some(EncoderHead::ReplacedTokenDetection),
        _ => head_of(&arch, c.labels()?),
    };
    let Some(head) = head else {
        return Err(Error::InvalidValue {
            what: "ELECTRA head".into(),
            value: arch,
            hint: "vram models ElectraForPreTraining (the discriminator), ElectraForMaskedLM (the generator), …ForSequenceClassification, …ForTokenClassification and the bare ElectraModel; pass --task replaced-token-detection|fill-mask|text-classification|token-classification|feature-extraction to choose one".into(),
        });
    };
    // ElectraForMaskedLM ties generator_lm_head to the word embedding (tie_word_embeddings True);
    // ElectraConfig: hidden_dropout_prob 0.1, attention_probs_dropout_prob 0.1.
    let enc = Encoder { token_types, head, vision: None, pooler: false, attention_output_dropout: true, disentangled: None, modern: None };
    super::bert::post_ln(c, m, enc, ["hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob"])
}
