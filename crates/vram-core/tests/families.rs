//! Exact parameter counts beyond the decoders: `validation/fixtures/family_params.jsonl`
//! (written by `validation/family_params.py`: real transformers models built on the meta device
//! from real Hub configs, one line per config and head). Every model vram reads must match
//! PyTorch's count exactly; every other one must be refused by name, never estimated as
//! another architecture.

use std::path::PathBuf;

use serde_json::Value;
use vram_core::{parse_config, EncoderHead, Error};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_family_config_is_counted_exactly_or_refused() {
    let text = std::fs::read_to_string(root().join("validation/fixtures/family_params.jsonl")).expect("run validation/family_params.py");
    let (mut exact, mut refused) = (0, Vec::new());
    for line in text.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        if r.get("_meta").is_some() {
            continue;
        }
        let name = r["name"].as_str().unwrap();
        let src = std::fs::read(root().join(r["source"].as_str().unwrap())).unwrap();
        let mut m = match parse_config(&src, name, "config.json") {
            Ok(m) => m,
            Err(e @ Error::UnsupportedArchitecture { .. }) => {
                refused.push(format!("{name} ({})", r["model_type"].as_str().unwrap()));
                assert!(e.to_string().contains("not supported"), "{e}");
                continue;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let vision = m.encoder.is_some_and(|e| e.vision.is_some());
        let head = match r["head"].as_str().unwrap() {
            // A config naming no class is built as AutoModel by the generator (the bare encoder);
            // vram's own default for it is the masked-LM head, so compare the bare model.
            "config" if r["class"] == "AutoModel" && m.encoder.is_some() => Some(EncoderHead::Embedding),
            "config" => None,
            "mlm" => Some(EncoderHead::MaskedLm),
            "classification" if vision => Some(EncoderHead::ImageClassification { labels: r["num_labels"].as_u64().unwrap() }),
            "classification" => Some(EncoderHead::SequenceClassification { labels: r["num_labels"].as_u64().unwrap() }),
            "base" => Some(EncoderHead::Embedding),
            other => panic!("unknown head {other}"),
        };
        if let Some(h) = head {
            m.set_encoder_head(h).unwrap();
        }
        assert_eq!(m.parameters(), r["parameters"].as_u64().unwrap(), "{name} {}", r["head"]);
        exact += 1;
    }
    println!("{exact} exact; refused: {}", refused.join(", "));
    assert!(exact >= 90, "{exact}");
    // DistilBERT, ELECTRA (every head, the generator's embedding_size ≠ hidden_size too), T5, the
    // CLIP dual encoder and DeBERTa-v3 (every head; question answering as a 2-label token
    // classifier) and ModernBERT (every head; layer 0 without attn_norm) are exact.
    for t in ["distilbert", "electra", "t5", "clip", "deberta-v2", "modernbert"] {
        assert!(!refused.iter().any(|r| r.contains(&format!("({t})"))), "{t} is modelled: {refused:?}");
    }
}

fn family(name: &str) -> vram_core::Model {
    let src = std::fs::read(root().join("validation/configs/families").join(name)).unwrap();
    parse_config(&src, name, name).unwrap()
}

#[test]
fn padding_masks_only_what_sdpa_masks() {
    use vram_core::{estimate, AttentionImpl, Job};
    let peak = |m: &vram_core::Model, padded: bool, attention: AttentionImpl| {
        estimate(m, &Job { padded, attention, ..Job::train(8, 256) }).unwrap().peak_allocated
    };
    let bert = family("bert-base-uncased.json");
    assert!(peak(&bert, true, AttentionImpl::Sdpa) > peak(&bert, false, AttentionImpl::Sdpa));
    // flash_attention_2 unpads the batch (varlen kernels): no mask, no bias per layer.
    assert_eq!(peak(&bert, true, AttentionImpl::Flash), peak(&bert, false, AttentionImpl::Flash));
    // Whisper's encoder reads fixed-length audio: padded labels mask the decoder only.
    let whisper = family("whisper-small.json");
    let enc = |padded: bool| {
        let e = estimate(&whisper, &Job { padded, ..Job::train(8, 128) }).unwrap();
        e.components.iter().filter(|c| c.name.starts_with("activations: encoder")).map(|c| c.bytes).sum::<u64>()
    };
    assert!(enc(false) > 0);
    assert_eq!(enc(true), enc(false));
}

#[test]
fn modernbert_reads_its_layer_types_and_refuses_what_it_does_not_model() {
    let m = family("modernbert-base.json");
    // 22 layers, global every third (0, 3, … 21): 8 global, 14 windowed; window ±64 tokens.
    assert_eq!((m.layers, m.sliding_layers, m.sliding_window), (22, 14, Some(64)));
    let src = std::fs::read(root().join("validation/configs/families/modernbert-base.json")).unwrap();
    let mut cfg: Value = serde_json::from_slice(&src).unwrap();
    // transformers 5.x writes layer_types instead of global_attn_every_n_layers.
    let types: Vec<&str> = (0..22).map(|i| if i % 2 == 0 { "full_attention" } else { "sliding_attention" }).collect();
    cfg["layer_types"] = serde_json::json!(types);
    let m = parse_config(cfg.to_string().as_bytes(), "m", "config.json").unwrap();
    assert_eq!(m.sliding_layers, 11);
    for (key, value, says) in [
        ("sparse_prediction", serde_json::json!(true), "sparse prediction"),
        ("mlp_dropout", serde_json::json!(0.1), "dropout"),
        ("classifier_pooling", serde_json::json!("max"), "cls"),
        ("layer_types", serde_json::json!(["full_attention"]), "one entry per hidden layer"),
    ] {
        let mut c: Value = serde_json::from_slice(&src).unwrap();
        c[key] = value;
        let e = parse_config(c.to_string().as_bytes(), "m", "config.json").unwrap_err().to_string();
        assert!(e.contains(says), "{key}: {e}");
    }
}

/// Which training losses cast the logits to fp32 themselves (transformers' ForCausalLMLoss /
/// ForMaskedLMLoss) and which call CrossEntropyLoss on the logits as they are — where, under
/// autocast, CUDA keeps the log-softmax in half (validation/gpu/h100/family_recordings.jsonl).
/// The half log-softmax is one half `tokens × vocab` tensor less at the backward peak.
#[test]
fn the_loss_casts_as_each_head_does() {
    use vram_core::{estimate, Job, Precision};
    for (name, upcasts) in [
        ("bert-base-uncased.json", false),
        ("deberta-v3-base.json", false),
        ("electra-base-generator.json", false),
        ("t5-small.json", false),
        ("whisper-small.json", false),
        ("modernbert-base.json", true),
    ] {
        assert_eq!(family(name).loss_upcasts_logits(), upcasts, "{name}");
    }
    let llama = parse_config(&std::fs::read(root().join("validation/configs/gemma-3-1b.json")).unwrap(), "g", "g").unwrap();
    assert!(llama.loss_upcasts_logits());
    // BERT's masked-LM head under bf16-mixed, at its peak (backward start): the half
    // log-softmax and its fp32 copy saved, nll's fp32 gradient — 10 B per logit — where the
    // upcasting path (fp32 log-softmax saved, nll's and its own fp32 gradients) holds 12.
    let bert = family("bert-base-uncased.json");
    let job = Job { precision: Precision::parse("bf16-mixed").unwrap(), ..Job::train(16, 512) };
    let e = estimate(&bert, &job).unwrap();
    assert_eq!(e.peak_phase, vram_core::Phase::BackwardStart);
    assert_eq!(e.component("logits & loss"), 16 * 512 * bert.vocab * 10);
    // In pure bf16 (no autocast) the log-softmax and both gradients are half: 6 B per logit.
    let pure = Job { precision: Precision::parse("bf16").unwrap(), ..Job::train(16, 512) };
    let e = estimate(&bert, &pure).unwrap();
    assert_eq!(e.peak_phase, vram_core::Phase::BackwardStart);
    assert_eq!(e.component("logits & loss"), 16 * 512 * bert.vocab * 6);
}
