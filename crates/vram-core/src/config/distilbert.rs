//! DistilBERT (transformers models/distilbert/modeling_distilbert.py): BERT's post-LN layer
//! under other key names (`dim`, `hidden_dim`, `n_layers`, `n_heads`), no token types, no
//! dropout on the attention output, and a bare model without a pooler.

use super::bert::head_of;
use super::keys::{core_dims, Cfg};
use crate::error::{Error, Result};
use crate::model::{Encoder, EncoderHead, Model};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = core_dims(c, name, &["dim", "hidden_size"], &["n_layers", "num_hidden_layers"], &["n_heads", "num_attention_heads"])?;
    m.intermediate = c.req(&["hidden_dim"], "size the MLP (FFN lin1)")?;
    // DistilBertConfig: max_position_embeddings 512. `sinusoidal_pos_embds` only fills the
    // same nn.Embedding with fixed values: a parameter all the same (Embeddings.__init__).
    m.position_embeddings = c.opt(&["max_position_embeddings"])?.unwrap_or(512);
    let arch = c.first_architecture();
    let head = if arch.is_empty() { Some(EncoderHead::MaskedLm) } else { head_of(&arch, c.labels()?) };
    let Some(head) = head else {
        return Err(Error::InvalidValue {
            what: "DistilBERT head".into(),
            value: arch,
            hint: "vram models DistilBertForMaskedLM, …ForSequenceClassification, …ForTokenClassification and the bare DistilBertModel; pass --task fill-mask|text-classification|token-classification|feature-extraction to choose one".into(),
        });
    };
    // DistilBertConfig: tie_word_embeddings True (vocab_projector.weight is the word embedding),
    // dropout 0.1, attention_dropout 0.1.
    let enc =
        Encoder { token_types: 0, head, vision: None, pooler: false, attention_output_dropout: false, disentangled: None, modern: None };
    super::bert::post_ln(c, m, enc, ["activation", "dropout", "attention_dropout"])
}
