//! Architecture inference from safetensors tensor names and shapes, checked on the real
//! parameter lists of `validation/fixtures/param_counts.jsonl` (written by transformers on the
//! meta device) against each model's own config.

use std::path::PathBuf;

use serde_json::Value;
use vram_core::arch_infer::{approximate_model, infer, MAX_TENSORS};
use vram_core::memory::unmodelled_parameters;
use vram_core::safetensors::TensorInfo;
use vram_core::{estimate, parse_config, Error, Job};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fixture records; `{i}` templates expanded to one tensor per layer index.
fn records(file: &str) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(root().join("validation/fixtures").join(file)) else { return vec![] };
    text.lines().map(|l| serde_json::from_str::<Value>(l).expect("json line")).filter(|v| v.get("name").is_some()).collect()
}

fn tensors(rec: &Value) -> Vec<TensorInfo> {
    let mut v = Vec::new();
    for t in rec["tensors"].as_array().unwrap() {
        let name = t[0].as_str().unwrap();
        let shape: Vec<u64> = t[1].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        let count = t.get(2).and_then(Value::as_u64).unwrap_or(1);
        let names: Vec<String> =
            if name.contains("{i}") { (0..count).map(|i| name.replace("{i}", &i.to_string())).collect() } else { vec![name.to_string()] };
        for n in names {
            v.push(TensorInfo { name: n, dtype: "BF16".into(), shape: shape.clone() });
        }
    }
    v
}

#[test]
fn real_decoders_recover_layers_widths_vocab_and_exact_totals() {
    let recs = records("param_counts.jsonl");
    assert!(recs.len() >= 37, "fixture has {} records", recs.len());
    let mut failures = Vec::new();
    for r in &recs {
        let name = r["name"].as_str().unwrap();
        let cfg = parse_config(&std::fs::read(root().join(r["source"].as_str().unwrap())).unwrap(), name, name).unwrap();
        let s = infer(&tensors(r)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let main = &s.stacks[0];
        let emb = s.embedding.as_ref().unwrap_or_else(|| panic!("{name}: no embedding found"));
        let got = (s.summary.parameters, main.layers, main.width, emb.rows, s.head.is_none(), main.experts);
        let want = (
            r["parameters"].as_u64().unwrap(),
            cfg.layers,
            cfg.hidden,
            cfg.vocab,
            cfg.tied_embeddings,
            cfg.moe.as_ref().map(|m| m.experts),
        );
        if got != want {
            failures.push(format!("{name}: (params, layers, width, vocab, tied, experts) inferred {got:?}, config {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn gpt2_names_alone_give_its_structure() {
    let r = records("param_counts.jsonl").into_iter().find(|r| r["name"] == "gpt2").unwrap();
    let s = infer(&tensors(&r)).unwrap();
    assert_eq!(s.stacks.len(), 1);
    let st = &s.stacks[0];
    assert_eq!((st.prefix.as_str(), st.layers, st.width, st.mlp_width), ("transformer.h", 12, 768, Some(3072)));
    assert!(st.contiguous);
    assert_eq!(s.summary.parameters, 124_439_808);
    assert_eq!(s.summary.bytes, 2 * 124_439_808);
    // Outside the stack: wte, wpe, ln_f.
    assert_eq!(s.outside_parameters, 50257 * 768 + 1024 * 768 + 2 * 768);
}

#[test]
fn approximate_model_carries_the_exact_count_into_weights_gradients_and_states() {
    for name in ["gpt2", "qwen3-30b-a3b", "deepseek-v2-lite", "phi-2"] {
        let r = records("param_counts.jsonl").into_iter().find(|r| r["name"] == name).unwrap();
        let s = infer(&tensors(&r)).unwrap();
        let m = approximate_model(name, "model_type `my_new_arch` is not known to vram", None, &s).unwrap();
        let exact = r["parameters"].as_u64().unwrap();
        assert_eq!(m.checkpoint_parameters, Some(exact));
        let text = m.approximation.as_deref().unwrap();
        assert!(text.contains(&format!("{exact} parameters")), "{name}: {text}");
        assert!(text.contains("may be far off") && text.contains("vram.measure"), "{name}: {text}");
        assert!(m.warnings[0].starts_with("APPROXIMATE"), "{name}");
        assert!(m.parameters() <= exact, "{name}: the stand-in holds {} > {exact}", m.parameters());
        assert_eq!(m.parameters() + unmodelled_parameters(&m), exact, "{name}");
        // Full fine-tuning in fp32 with AdamW: weights 4 B, gradients 4 B, two 4-B states per parameter.
        let mut job = Job::train(1, 128);
        job.precision = vram_core::Precision::Fp32;
        let est = estimate(&m, &job).unwrap();
        let get = |c: &str| est.components.iter().find(|x| x.name == c).map(|x| x.bytes).unwrap_or(0);
        assert_eq!(get("parameters"), 4 * exact, "{name}: {:?}", est.components);
        assert_eq!(get("gradients"), 4 * exact, "{name}");
        assert_eq!(get("optimizer states"), 8 * exact, "{name}");
    }
}

#[test]
fn config_keys_win_and_disagreements_are_reported() {
    let r = records("param_counts.jsonl").into_iter().find(|r| r["name"] == "llama-3.2-1b").unwrap();
    let s = infer(&tensors(&r)).unwrap();
    let cfg = br#"{"model_type":"my_new_arch","hidden_size":2048,"num_hidden_layers":16,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":128000}"#;
    let m = approximate_model("x", "model_type `my_new_arch` is not known to vram", Some(cfg), &s).unwrap();
    assert_eq!((m.hidden, m.layers, m.heads, m.kv_heads, m.vocab), (2048, 16, 32, 8, 128000));
    assert_eq!(m.model_type, "my_new_arch");
    assert!(m.warnings.iter().any(|w| w.contains("vocab_size") && w.contains("128256")), "{:?}", m.warnings);
    // Without the keys: heads of 64 inferred, KV heads from k_proj's rows.
    let m = approximate_model("x", "unknown", None, &s).unwrap();
    assert_eq!((m.heads, m.head_dim, m.kv_heads), (16, 128, 4));
    let text = m.approximation.unwrap();
    assert!(text.contains("Inferred: heads 16"), "{text}");
}

#[test]
fn conv_kernels_are_not_experts_and_absurd_config_keys_are_refused() {
    let mut t = vec![TensorInfo { name: "backbone.embeddings.weight".into(), dtype: "F32".into(), shape: vec![1000, 64] }];
    for i in 0..3 {
        for (n, shape) in [("mixer.in_proj.weight", vec![256, 64]), ("mixer.conv1d.weight", vec![128, 1, 4]), ("norm.weight", vec![64])] {
            t.push(TensorInfo { name: format!("backbone.layers.{i}.{n}"), dtype: "F32".into(), shape });
        }
    }
    let s = infer(&t).unwrap();
    assert_eq!((s.stacks[0].layers, s.stacks[0].width, s.stacks[0].experts), (3, 64, None));
    let huge = br#"{"model_type":"x","num_attention_heads":18446744073709551615,"head_dim":18446744073709551615}"#;
    let e = approximate_model("x", "unknown", Some(huge), &s).unwrap_err();
    assert!(matches!(e, Error::BadKey { .. }), "{e}");
}

#[test]
fn the_stand_in_never_holds_more_than_the_checkpoint() {
    // A two-layer encoder without a final norm: a Llama stand-in of the fitted width would add one.
    let mut t = vec![TensorInfo { name: "enc.embed.weight".into(), dtype: "F32".into(), shape: vec![1000, 64] }];
    for i in 0..2 {
        for (n, shape) in [("q.weight", vec![64, 64]), ("up.weight", vec![256, 64]), ("down.weight", vec![64, 256])] {
            t.push(TensorInfo { name: format!("enc.layer.{i}.{n}"), dtype: "F32".into(), shape });
        }
    }
    let s = infer(&t).unwrap();
    let m = approximate_model("x", "unknown", None, &s).unwrap();
    assert!(m.parameters() <= s.summary.parameters, "{} > {}", m.parameters(), s.summary.parameters);
    assert!(!m.approximation.unwrap().contains("overstated"));
}

#[test]
fn too_little_is_a_clear_error() {
    let t = vec![TensorInfo { name: "w".into(), dtype: "F32".into(), shape: vec![4, 4] }];
    let s = infer(&t).unwrap();
    let e = approximate_model("tiny", "unknown", None, &s).unwrap_err();
    assert!(matches!(e, Error::NotEnoughStructure { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("layer stack") && msg.contains("vocab"), "{msg}");
}

#[test]
fn hostile_lists_are_bounded() {
    // A dimension beyond any model.
    let t = vec![TensorInfo { name: "a.0.w".into(), dtype: "F32".into(), shape: vec![1 << 40, 2] }];
    assert!(infer(&t).is_err());
    // Overflowing totals.
    let big = |i: u32| TensorInfo { name: format!("h.{i}.w"), dtype: "F32".into(), shape: vec![1 << 24, 1 << 24] };
    assert!(infer(&(0..100_000).map(big).collect::<Vec<_>>()).is_err());
    // Too many tensors.
    let many: Vec<TensorInfo> =
        (0..=MAX_TENSORS).map(|i| TensorInfo { name: format!("t{i}"), dtype: "F32".into(), shape: vec![1] }).collect();
    assert!(infer(&many).is_err());
    // Odd names never fail.
    let odd: Vec<TensorInfo> = ["", ".", "..", "0", "a.99999999999.b", "x.0", "x.1", "é.1.ü", "a..1..b"]
        .iter()
        .map(|n| TensorInfo { name: n.to_string(), dtype: "F32".into(), shape: vec![3] })
        .collect();
    assert!(infer(&odd).is_ok());
}

/// A family record's checkpoint tensors (`[name, shape, torch dtype]`, one per tensor).
fn checkpoint_tensors(rec: &Value) -> Vec<TensorInfo> {
    let dtype = |d: &str| match d {
        "float16" => "F16",
        "bfloat16" => "BF16",
        _ => "F32",
    };
    rec["checkpoint_tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| TensorInfo {
            name: t[0].as_str().unwrap().into(),
            dtype: dtype(t[2].as_str().unwrap_or("float32")).into(),
            shape: t[1].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect(),
        })
        .collect()
}

/// Encoders, encoder-decoders and vision models (`validation/fixtures/family_params.jsonl`,
/// written by transformers): exact totals, and the stacks their configs describe.
#[test]
fn families_have_their_stacks() {
    let recs = records("family_params.jsonl");
    assert!(!recs.is_empty(), "validation/fixtures/family_params.jsonl is missing");
    for r in &recs {
        let name = format!("{} ({})", r["name"].as_str().unwrap(), r["head"].as_str().unwrap_or(""));
        let s = infer(&checkpoint_tensors(r)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.summary.parameters, r["checkpoint_parameters"].as_u64().unwrap(), "{name}");
        let Ok(bytes) = std::fs::read(root().join(r["source"].as_str().unwrap())) else { panic!("{name}: config {} missing", r["source"]) };
        let cfg: Value = serde_json::from_slice(&bytes).unwrap();
        // Top-level keys, else the language model's (`text_config`: LLaVA, CLIP).
        let key = |k: &[&str]| {
            let find = |o: &Value| k.iter().find_map(|k| o.get(*k).and_then(Value::as_u64));
            find(&cfg).or_else(|| cfg.get("text_config").and_then(find))
        };
        let main = &s.stacks[0];
        let stacks: Vec<(&str, u64, u64)> = s.stacks.iter().map(|x| (x.prefix.as_str(), x.layers, x.width)).collect();
        // CLIP's towers are close in size: the text tower (the config's text_config) is one of the stacks.
        let found = |w: Option<u64>, l: Option<u64>| stacks.iter().any(|(_, layers, width)| Some(*width) == w && Some(*layers) == l);
        let (w, l) = (key(&["hidden_size", "d_model"]), key(&["num_hidden_layers", "num_layers"]));
        if r["model_type"] == "clip" {
            assert!(found(w, l), "{name}: {stacks:?}");
        } else if w.is_some() && l.is_some() {
            // (LLaVA's text_config leaves them to LlamaConfig's defaults.)
            assert_eq!((Some(main.width), Some(main.layers)), (w, l), "{name}: {stacks:?}");
        }
        if r["model_type"] == "whisper" {
            assert!(stacks.iter().filter(|(p, n, _)| p.ends_with("coder.layers") && *n == 12).count() == 2, "{stacks:?}");
        }
        if r["model_type"] == "t5" {
            assert!(
                stacks.iter().any(|x| x.0 == "encoder.block" && x.1 == 6) && stacks.iter().any(|x| x.0 == "decoder.block" && x.1 == 6),
                "{stacks:?}"
            );
        }
        if let Some(v) = key(&["vocab_size"]) {
            assert_eq!(s.embedding.as_ref().map(|e| e.rows), Some(v), "{name}");
            let m = approximate_model(&name, "recognised, not supported", Some(&bytes), &s).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(m.parameters() + unmodelled_parameters(&m), s.summary.parameters, "{name}");
            if r["model_type"] == "clip" {
                // text_config describes the text tower: that is the stack modelled, without disagreements.
                assert!(m.approximation.unwrap().contains("of the stack `text_model.encoder.layers`"), "{name}");
                assert_eq!(m.warnings.len(), 1, "{name}: {:?}", m.warnings);
            }
        }
    }
}
