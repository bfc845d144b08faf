//! DistilBERT and ELECTRA (config/distilbert.rs, config/electra.rs): what their configs mean,
//! checked against the real configs in `validation/configs/families/` and transformers' modules
//! (models/distilbert/modeling_distilbert.py, models/electra/modeling_electra.py). The peaks are
//! held to PyTorch in tests/encoders.rs, the exact parameter counts in tests/families.rs.

use std::path::PathBuf;

use vram_core::{estimate, parse_config, EncoderHead, Error, Job, Model};

fn family(name: &str) -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../validation/configs/families").join(name);
    let src = std::fs::read(&path).unwrap();
    parse_config(&src, name, name).unwrap()
}

fn tensor_names(m: &Model) -> Vec<String> {
    m.tensors().into_iter().map(|t| t.name).collect()
}

#[test]
fn distilbert_reads_its_own_key_names_and_has_no_token_types() {
    let m = family("distilbert-base-uncased.json");
    assert_eq!((m.hidden, m.layers, m.heads, m.intermediate, m.vocab), (768, 6, 12, 3072, 30522));
    let enc = m.encoder.unwrap();
    assert_eq!(enc.token_types, 0);
    assert_eq!(enc.head, EncoderHead::MaskedLm);
    assert!(!enc.attention_output_dropout, "TransformerBlock adds out_lin's output without a dropout");
    assert!(m.tied_embeddings);
}

#[test]
fn bare_distilbert_and_electra_have_no_pooler() {
    // DistilBertModel / ElectraModel: no pooler, unlike BertModel (add_pooling_layer=True).
    for name in ["distilbert-base-uncased.json", "electra-base-discriminator.json"] {
        let mut m = family(name);
        m.set_encoder_head(EncoderHead::Embedding).unwrap();
        assert!(!tensor_names(&m).iter().any(|n| n.starts_with("pooler")), "{name}");
    }
    let mut bert = family("bert-base-uncased.json");
    bert.set_encoder_head(EncoderHead::Embedding).unwrap();
    assert!(tensor_names(&bert).iter().any(|n| n.starts_with("pooler")));
}

#[test]
fn electra_projects_narrow_embeddings_and_detects_replaced_tokens() {
    let small = family("electra-small-discriminator.json");
    assert_eq!((small.embed_dim, small.hidden), (128, 256));
    assert_eq!(small.encoder.unwrap().head, EncoderHead::ReplacedTokenDetection);
    assert!(tensor_names(&small).iter().any(|n| n.starts_with("embeddings_project")));
    // electra-base: embeddings as wide as the layers, no projection.
    let base = family("electra-base-discriminator.json");
    assert!(!tensor_names(&base).iter().any(|n| n.starts_with("embeddings_project")));
    // The discriminator's logits: one per token.
    assert_eq!(base.loss_logits(8, 512), (8 * 512, 1));
}

#[test]
fn electra_generator_head_works_at_embedding_size() {
    // electra-base-generator: hidden 256, embedding_size 768; ElectraGeneratorPredictions.dense
    // maps 256 → 768 and the tied generator_lm_head reads 768-wide vectors.
    let m = family("electra-base-generator.json");
    assert_eq!((m.hidden, m.embed_dim), (256, 768));
    assert_eq!(m.head_matrix(), (30522, 768));
    let dense = m.tensors().into_iter().find(|t| t.name == "cls.predictions.transform.dense.weight").unwrap();
    assert_eq!((dense.rows, dense.cols), (768, 256));
}

#[test]
fn replaced_token_detection_is_electra_only() {
    let mut bert = family("bert-base-uncased.json");
    let err = bert.set_encoder_head(EncoderHead::ReplacedTokenDetection).unwrap_err();
    assert!(err.contains("ELECTRA"), "{err}");
    let mut electra = family("electra-base-generator.json");
    electra.apply_task(Some("replaced-token-detection"), None).unwrap();
    assert_eq!(electra.encoder.unwrap().head, EncoderHead::ReplacedTokenDetection);
    assert!(!electra.tied_embeddings);
}

#[test]
fn hostile_electra_and_distilbert_configs_are_refused() {
    let cases = [
        (
            r#"{"model_type":"electra","hidden_size":256,"num_hidden_layers":12,"num_attention_heads":4,"intermediate_size":1024,"vocab_size":30522,"embedding_size":0}"#,
            "embedding_size",
        ),
        (
            r#"{"model_type":"electra","hidden_size":256,"num_hidden_layers":12,"num_attention_heads":4,"intermediate_size":1024,"vocab_size":30522,"embedding_size":1e15}"#,
            "embedding_size",
        ),
        (r#"{"model_type":"distilbert","dim":768,"n_layers":6,"n_heads":12,"vocab_size":30522}"#, "hidden_dim"),
        (
            r#"{"model_type":"distilbert","dim":768,"n_layers":6,"n_heads":12,"hidden_dim":3072,"vocab_size":30522,"architectures":["DistilBertForQuestionAnswering"]}"#,
            "DistilBertForQuestionAnswering",
        ),
    ];
    for (src, what) in cases {
        let err = parse_config(src.as_bytes(), "x", "config.json").unwrap_err();
        assert!(err.to_string().contains(what), "{src}: {err}");
        assert!(!matches!(err, Error::UnsupportedArchitecture { .. }), "{src}");
    }
}

#[test]
fn distilbert_saves_less_per_layer_than_bert_of_its_shape() {
    // The same shapes as BERT without BertSelfOutput's dropout: one bool mask per token and
    // hidden unit fewer per layer (modeling_distilbert.py TransformerBlock).
    let d = family("distilbert-base-uncased.json");
    let mut b = family("bert-base-uncased.json");
    b.layers = d.layers;
    b.encoder = Some(vram_core::Encoder { token_types: 0, ..b.encoder.unwrap() });
    assert_eq!(b.parameters(), d.parameters());
    let job = Job::train(8, 512);
    let diff = estimate(&b, &job).unwrap().peak_allocated - estimate(&d, &job).unwrap().peak_allocated;
    assert!(diff > 0, "{diff}");
}
