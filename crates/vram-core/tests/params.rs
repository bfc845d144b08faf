//! Parameter counts must equal what PyTorch reports for real transformers models built from
//! the same config.json (`validation/param_counts.py` on the meta device wrote the fixture).

use std::path::PathBuf;

use serde_json::Value;
use vram_core::safetensors::CheckpointSummary;
use vram_core::{parse_config, parse_config_with, presets, Error, ParseOptions};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("validation/fixtures/param_counts.jsonl")).expect("fixture");
    text.lines().map(|l| serde_json::from_str::<Value>(l).expect("json line")).filter(|v| v.get("name").is_some()).collect()
}

#[test]
fn every_preset_and_architecture_matches_pytorch_exactly() {
    let recs = fixture();
    assert!(recs.len() >= 37, "fixture has {} records", recs.len());
    let mut failures = Vec::new();
    for r in &recs {
        let name = r["name"].as_str().unwrap();
        let want = r["parameters"].as_u64().unwrap();
        let bytes = std::fs::read(root().join(r["source"].as_str().unwrap())).unwrap();
        let m = parse_config(&bytes, name, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        // gpt-oss ships MXFP4 experts: its config carries quantization_config (counted in tests/gpt_oss.rs).
        assert!(
            m.approximation.is_none() && (m.quantization.is_none() || m.model_type == "gpt_oss"),
            "{name} read as approximate or quantized"
        );
        let got = m.parameters();
        if got != want {
            failures.push(format!("{name} ({}): vram {got} vs PyTorch {want} (diff {})", m.model_type, got as i128 - want as i128));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn every_preset_is_in_the_fixture() {
    let recs = fixture();
    for p in presets::PRESETS {
        assert!(recs.iter().any(|r| r["name"] == p.name), "{} missing from the fixture: rerun validation/param_counts.py", p.name);
    }
    assert!(presets::PRESETS.len() >= 29);
}

#[test]
fn issue_reference_counts() {
    // Numbers quoted in the issue, as PyTorch reports them.
    for (name, n) in [
        ("llama-2-7b", 6_738_415_616u64),
        ("qwen2.5-1.5b", 1_543_714_304),
        ("mistral-7b", 7_241_732_096),
        ("mixtral-8x7b", 46_702_792_704),
        ("gpt2", 124_439_808),
    ] {
        assert_eq!(presets::load(name).unwrap().parameters(), n, "{name}");
    }
}

const APPROX: ParseOptions = ParseOptions { approximate_unknown: true };

/// openai/gpt-oss-20b config.json (transformers 4.55), layer_types omitted.
const GPT_OSS_20B: &str = r#"{"architectures":["GptOssForCausalLM"],"attention_bias":true,"attention_dropout":0.0,"experts_per_token":4,"head_dim":64,"hidden_act":"silu","hidden_size":2880,"initial_context_length":4096,"intermediate_size":2880,"max_position_embeddings":131072,"model_type":"gpt_oss","num_attention_heads":64,"num_experts_per_tok":4,"num_hidden_layers":24,"num_key_value_heads":8,"num_local_experts":32,"quantization_config":{"modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router","model.embed_tokens","lm_head"],"quant_method":"mxfp4"},"rms_norm_eps":1e-05,"rope_scaling":{"beta_fast":32.0,"beta_slow":1.0,"factor":32.0,"original_max_position_embeddings":4096,"rope_type":"yarn","truncate":false},"rope_theta":150000,"sliding_window":128,"tie_word_embeddings":false,"torch_dtype":"bfloat16","use_cache":true,"vocab_size":201088}"#;

/// google-bert/bert-base-uncased config.json.
const BERT_BASE: &str = r#"{"architectures":["BertForMaskedLM"],"attention_probs_dropout_prob":0.1,"hidden_act":"gelu","hidden_dropout_prob":0.1,"hidden_size":768,"initializer_range":0.02,"intermediate_size":3072,"layer_norm_eps":1e-12,"max_position_embeddings":512,"model_type":"bert","num_attention_heads":12,"num_hidden_layers":12,"pad_token_id":0,"type_vocab_size":2,"vocab_size":30522}"#;

/// state-spaces/mamba-130m-hf config.json (abridged to its dimensions).
const MAMBA_130M: &str = r#"{"architectures":["MambaForCausalLM"],"conv_kernel":4,"expand":2,"hidden_size":768,"intermediate_size":1536,"model_type":"mamba","num_hidden_layers":24,"state_size":16,"time_step_rank":48,"vocab_size":50280}"#;

/// gpt-oss-20b's config under a model_type vram does not know.
fn unknown_moe() -> String {
    GPT_OSS_20B.replace(r#""model_type":"gpt_oss""#, r#""model_type":"gpt_oss_unknown""#)
}

fn unsupported(json: &str) -> (String, String) {
    match parse_config(json.as_bytes(), "m", "config.json") {
        Err(e @ Error::UnsupportedArchitecture { .. }) => {
            let Error::UnsupportedArchitecture { ref reason, ref supported, .. } = e else { unreachable!() };
            assert!(supported.contains(&"llama") && supported.contains(&"deepseek_v3"));
            (reason.clone(), e.to_string())
        }
        other => panic!("expected UnsupportedArchitecture, got {other:?}"),
    }
}

#[test]
fn unsupported_families_are_errors_that_say_why() {
    // Regression: these were estimated as Llama-style decoders with one warning line
    // (gpt-oss-20b: 2.39B parameters instead of 20.9B; BERT-base 160M instead of 110M).
    // gpt-oss is now read natively (tests/gpt_oss.rs); an unknown type still fails.
    assert!(unsupported(&unknown_moe()).0.contains("does not know this architecture"));
    // BERT is read natively now (exactly: 109,514,298 parameters as BertForMaskedLM); encoders
    // with other embeddings or attention still fail, saying which encoders are modelled.
    assert_eq!(parse_config(BERT_BASE.as_bytes(), "bert", "config.json").unwrap().parameters(), 109_514_298);
    let albert = BERT_BASE.replace(r#""model_type":"bert""#, r#""model_type":"albert""#);
    assert!(unsupported(&albert).0.contains("this encoder is not supported yet"));
    // Regression: a Mamba config failed on a missing `num_attention_heads`, an unrelated error.
    // Mamba and Mamba-2 are read natively now (tests/ssm.rs); RWKV is refused, saying why.
    assert_eq!(parse_config(MAMBA_130M.as_bytes(), "mamba", "config.json").unwrap().parameters(), 129_135_360);
    let rwkv = MAMBA_130M.replace(r#""model_type":"mamba""#, r#""model_type":"rwkv""#);
    assert!(unsupported(&rwkv).0.contains("state-space"));
    // T5 is read natively now (t5-small: 60,506,624 parameters, validation/fixtures/encdec.jsonl);
    // encoder-decoders with other positions or attention still fail, saying which are modelled.
    let t5 = r#"{"architectures":["T5ForConditionalGeneration"],"model_type":"t5","d_model":512,"num_layers":6,"num_heads":8,"vocab_size":32128}"#;
    assert_eq!(parse_config(t5.as_bytes(), "t5", "config.json").unwrap().parameters(), 60_506_624);
    let pegasus = t5.replace(r#""model_type":"t5""#, r#""model_type":"pegasus""#);
    assert!(unsupported(&pegasus).0.contains("this encoder-decoder is not supported yet"));
    let (_, msg) =
        unsupported(r#"{"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#);
    assert!(msg.contains("without `model_type`") && msg.contains("--approximate-architecture"), "{msg}");
}

#[test]
fn a_task_head_or_bare_backbone_is_not_read_as_a_causal_lm() {
    let llama = std::fs::read_to_string(root().join("crates/vram-core/presets/llama-3.2-1b.json")).unwrap();
    for (arch, why) in [
        ("LlamaForSequenceClassification", "sequence-classification head"),
        ("LlamaForTokenClassification", "token-classification head"),
        ("LlamaModel", "bare backbone"),
    ] {
        let json = llama.replace("LlamaForCausalLM", arch);
        assert!(unsupported(&json).0.contains(why), "{arch}");
        let m = parse_config_with(json.as_bytes(), "m", "m", APPROX).unwrap();
        assert!(m.approximation.as_deref().unwrap().contains(arch));
    }
}

#[test]
fn the_approximation_is_opt_in_and_marked() {
    let m = parse_config_with(unknown_moe().as_bytes(), "gpt-oss-20b", "config.json", APPROX).unwrap();
    assert!(m.approximation.as_deref().unwrap().contains("Llama-style"));
    assert!(m.warnings.iter().any(|w| w.starts_with("APPROXIMATE")));
    // The quantization and RoPE scaling are still read.
    let q = m.quantization.as_ref().unwrap();
    assert_eq!((q.method.as_str(), q.bits, q.group_size, q.excluded.len()), ("mxfp4", Some(4), Some(32), 4));
    let r = m.rope_scaling.as_ref().unwrap();
    assert_eq!((r.kind.as_str(), r.native_positions, r.extended_positions), ("yarn", 4096, 131_072));
    // A multimodal wrapper vram does not know: an error, or the language model alone on request.
    let idefics = r#"{"model_type":"idefics2","architectures":["Idefics2ForConditionalGeneration"],"text_config":{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128},"vision_config":{"model_type":"idefics2_vision"}}"#;
    assert!(unsupported(idefics).0.contains("vision-language model is not supported"));
    let m = parse_config_with(idefics.as_bytes(), "m", "m", APPROX).unwrap();
    assert!(m.approximation.as_deref().unwrap().contains("idefics2"));
    // Idefics3 is read natively (tests/vlm.rs): tower, pixel-shuffle connector, 17 tiles.
    let idefics3 = idefics.replace("idefics2_vision", "idefics3_vision").replace("idefics2", "idefics3").replace("Idefics2", "Idefics3");
    let idefics3 =
        idefics3.replace(r#""model_type":"idefics3_vision""#, r#""model_type":"idefics3_vision","image_size":364,"patch_size":14"#);
    let m = parse_config(idefics3.as_bytes(), "m", "m").unwrap();
    let mm = m.multimodal.as_ref().unwrap();
    assert!(m.approximation.is_none() && (mm.tiles(), mm.image_tokens) == (17, 17 * 169));
    // LLaVA is read natively: its tower (CLIP class defaults) and projector are counted.
    let llava = idefics.replace("idefics2_vision", "clip_vision_model").replace("idefics2", "llava").replace("Idefics2", "Llava");
    let m = parse_config(llava.as_bytes(), "m", "m").unwrap();
    assert!(m.approximation.is_none() && m.multimodal.is_some());
}

fn with_quant(q: &str) -> vram_core::QuantizationConfig {
    let json = format!(
        r#"{{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128,"quantization_config":{q}}}"#
    );
    let m = parse_config(json.as_bytes(), "m", "m").unwrap();
    assert!(m.warnings.iter().any(|w| w.contains("pre-quantized") && w.contains("UNQUANTIZED")), "{:?}", m.warnings);
    m.quantization.unwrap()
}

#[test]
fn pre_quantized_checkpoints_are_recorded() {
    // Regression: DeepSeek-V3's fp8 checkpoint was read as bf16 with no word said.
    let mut ds: Value = serde_json::from_slice(&std::fs::read(root().join("validation/configs/deepseek-v3.json")).unwrap()).unwrap();
    ds["quantization_config"] =
        serde_json::json!({"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128]});
    let m = parse_config(ds.to_string().as_bytes(), "deepseek-v3", "config.json").unwrap();
    let q = m.quantization.as_ref().unwrap();
    assert_eq!((q.method.as_str(), q.bits, q.group_size, q.format.as_deref()), ("fp8", Some(8), Some(128 * 128), Some("e4m3")));
    assert_eq!(m.parameters(), 671_026_404_352);
    let awq = with_quant(r#"{"bits":4,"group_size":128,"quant_method":"awq","version":"gemm","zero_point":true}"#);
    assert_eq!((awq.method.as_str(), awq.bits, awq.group_size, awq.format.as_deref()), ("awq", Some(4), Some(128), Some("gemm")));
    let gptq = with_quant(r#"{"bits":8,"group_size":-1,"desc_act":false,"quant_method":"gptq"}"#);
    assert_eq!((gptq.bits, gptq.group_size), (Some(8), None));
    let bnb = with_quant(r#"{"load_in_4bit":true,"bnb_4bit_quant_type":"nf4","llm_int8_skip_modules":["lm_head"]}"#);
    assert_eq!((bnb.method.as_str(), bnb.bits, bnb.format.as_deref(), bnb.excluded.len()), ("bitsandbytes", Some(4), Some("nf4"), 1));
    let ct = with_quant(
        r#"{"quant_method":"compressed-tensors","format":"pack-quantized","ignore":["lm_head"],"config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"group_size":128,"type":"int"}}}}"#,
    );
    assert_eq!((ct.bits, ct.group_size, ct.excluded.len()), (Some(4), Some(128), 1));
}

#[test]
fn quantized_safetensors_storage_is_recorded_on_the_model() {
    let mut m = presets::load("llama-3.2-1b").unwrap();
    let mut s = CheckpointSummary::default();
    let header = br#"{"model.layers.0.mlp.down_proj.weight":{"dtype":"F8_E4M3","shape":[4,4],"data_offsets":[0,16]},"model.layers.0.mlp.down_proj.weight_scale_inv":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}}"#;
    s.add_header(header, "model.safetensors", None).unwrap();
    s.apply(&mut m);
    assert_eq!(m.checkpoint_parameters, Some(17));
    assert!(m.checkpoint_quantization.as_deref().unwrap().contains("FP8 weights: 16"));
    assert!(m.warnings.iter().any(|w| w.contains("quantized weights")));
}

#[test]
fn context_past_the_trained_length_is_named() {
    // Regression: `-s 10000000` beyond max_position_embeddings gave a number without a word.
    let l = presets::load("llama-3.1-8b").unwrap();
    assert!(l.context_warnings(8192).is_empty());
    let w = l.context_warnings(100_000);
    assert!(w[0].contains("llama3 RoPE scaling") && w[0].contains("native context 8192") && w[0].contains("131072"), "{w:?}");
    assert!(l.context_warnings(10_000_000)[0].contains("exceeds the longest context"));
    let q = presets::load("qwen2.5-7b").unwrap();
    assert!(q.context_warnings(q.max_positions).is_empty());
    assert!(q.context_warnings(q.max_positions + 1)[0].contains("max_position_embeddings (131072)"));
    assert!(presets::load("gpt2").unwrap().context_warnings(2048)[0].contains("cannot run"));
}

/// A RoPE scaling type vram does not know (Qwen2-VL's mrope) claims no reach beyond the config's
/// max_position_embeddings: before, any unknown type stretched it by `factor` without a word.
#[test]
fn an_unknown_rope_type_claims_no_extended_reach() {
    let cfg = br#"{"model_type":"qwen2","architectures":["Qwen2ForCausalLM"],"hidden_size":256,"num_hidden_layers":2,
        "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":512,"vocab_size":1000,
        "max_position_embeddings":32768,"rope_scaling":{"type":"mrope","factor":4.0,"mrope_section":[16,24,24]}}"#;
    let m = vram_core::parse_config(cfg, "m", "config.json").unwrap();
    assert_eq!(m.rope_scaling.as_ref().unwrap().extended_positions, 32768);
    assert!(!m.context_warnings(100_000).is_empty());
}

/// An activation vram does not model is refused by its key, not estimated as GELU (which every
/// unknown name used to become); the natively evaluated ones read as one saved tensor.
#[test]
fn unknown_activations_are_refused_by_name() {
    let cfg = |act: &str| {
        format!(
            r#"{{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"hidden_act":"{act}"}}"#
        )
    };
    let e = parse_config(cfg("xielu").as_bytes(), "m", "config.json").unwrap_err().to_string();
    assert!(e.contains("hidden_act") && e.contains("xielu"), "{e}");
    assert!(parse_config(cfg("no_such_act").as_bytes(), "m", "config.json").is_err());
    for known in ["silu", "gelu_pytorch_tanh", "relu2", "tanh"] {
        assert!(parse_config(cfg(known).as_bytes(), "m", "config.json").is_ok(), "{known}");
    }
    // A LLaVA projector's activation goes through the same check.
    let src = std::fs::read(root().join("validation/configs/vlm/llava-1.5-7b-hf.json")).unwrap();
    let mut llava: serde_json::Value = serde_json::from_slice(&src).unwrap();
    llava["projector_hidden_act"] = serde_json::json!("xielu");
    let e = parse_config(llava.to_string().as_bytes(), "m", "config.json").unwrap_err().to_string();
    assert!(e.contains("projector_hidden_act") && e.contains("xielu"), "{e}");
}
