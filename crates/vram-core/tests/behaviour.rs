//! Known quantities the model must reproduce, and the traps of real configs.

use vram_core::units::{GIB, MIB};
use vram_core::{estimate, parse_config, presets, DType, Error, Job, Kind, Phase, Precision};

fn cfg(json: &str) -> Result<vram_core::Model, Error> {
    parse_config(json.as_bytes(), "t", "t.json")
}

#[test]
fn kv_cache_is_gqa_aware() {
    // Llama-3-8B: 32 layers × 8 KV heads × 128 dims × 2 (K,V) × 2 B = 128 KiB per token.
    let m = presets::load("llama-3-8b").unwrap();
    let e = estimate(&m, &Job::infer(1, 8192)).unwrap();
    assert_eq!(e.component("KV cache"), 8192 * 128 * 1024);
    // The whole context as the prompt: the prefill (its activations on top of the cache) peaks;
    // a short prompt: the end of generation peaks.
    assert_eq!(e.peak_phase, Phase::Prefill);
    let short = estimate(&m, &Job { prompt_len: Some(128), ..Job::infer(1, 8192) }).unwrap();
    assert_eq!(short.peak_phase, Phase::Decode);
    assert_eq!(short.component("KV cache"), 8192 * 128 * 1024);
    // Llama-2-7B has no GQA: 4× more per token.
    let m2 = presets::load("llama-2-7b").unwrap();
    let e2 = estimate(&m2, &Job::infer(1, 8192)).unwrap();
    assert_eq!(e2.component("KV cache"), 8192 * 512 * 1024);
    // fp8 KV halves it.
    let e3 = estimate(&m, &Job { kv_dtype: Some(DType::F8), ..Job::infer(1, 8192) }).unwrap();
    assert_eq!(e3.component("KV cache"), 8192 * 64 * 1024);
}

#[test]
fn sliding_window_caps_the_cache() {
    // Mistral-7B v0.1 (sliding_window 4096 on every layer): once decoding, the cache stops growing
    // at 4096 tokens; a prefill of the whole context still holds all of it (the window is a view).
    let m = presets::load("mistral-7b").unwrap();
    let decode = |ctx| estimate(&m, &Job { prompt_len: Some(128), ..Job::infer(1, ctx) }).unwrap().component("KV cache");
    assert_eq!(decode(4096), decode(32768));
    let prefill = estimate(&m, &Job::infer(1, 32768)).unwrap().component("KV cache");
    assert_eq!(prefill, 8 * decode(4096));
}

#[test]
fn quantised_weights() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let w = |p| {
        let e = estimate(&m, &Job { precision: p, ..Job::infer(1, 128) }).unwrap();
        e.component("weights") + e.component("quantization scales")
    };
    let bf16 = w(Precision::Bf16);
    assert_eq!(bf16, 2 * m.parameters());
    assert!(w(Precision::Int8) < bf16 * 6 / 10);
    assert!(w(Precision::Int4) < bf16 * 4 / 10);
    assert!(w(Precision::Int4) > bf16 / 4); // embeddings and lm_head stay 16-bit
}

#[test]
fn mixed_precision_adam_is_16_bytes_per_parameter_plus() {
    // accelerate counts 8 B/param for mixed Adam; PyTorch AMP holds fp32 params (4), grads (4)
    // and two fp32 moments (8) at the optimizer step, plus the foreach sqrt temporary (4).
    let m = presets::load("llama-3.2-1b").unwrap();
    let e = estimate(&m, &Job::train(1, 16)).unwrap();
    assert_eq!(e.peak_phase, Phase::OptimizerStep);
    let p = m.parameters();
    assert_eq!(e.component("parameters") + e.component("gradients") + e.component("optimizer states"), 16 * p);
    assert_eq!(e.component("optimizer step temporaries"), 4 * p);
}

#[test]
fn overheads_are_named_components() {
    let m = presets::load("gpt2").unwrap();
    let e = estimate(&m, &Job::train(1, 128)).unwrap();
    let names: Vec<&str> = e.components.iter().filter(|c| c.kind == Kind::Overhead).map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["caching allocator reserve", "CUDA context", "cuBLAS workspace"]);
    // the H100 measurements (validation/gpu/h100): a training step's context, two cuBLAS handles
    assert_eq!(e.component("CUDA context"), 758 * MIB);
    assert_eq!(e.component("cuBLAS workspace"), 64 * MIB);
    let i = estimate(&m, &Job::infer(1, 128)).unwrap();
    assert_eq!((i.component("CUDA context"), i.component("cuBLAS workspace")), (688 * MIB, 32 * MIB));
}

#[test]
fn checkpointing_and_fused_ce_save_memory() {
    let m = presets::load("qwen2.5-7b").unwrap();
    let base = Job::train(4, 4096);
    let e0 = estimate(&m, &base).unwrap();
    let ck = estimate(&m, &Job { checkpointing: vram_core::Checkpointing::Full, ..base.clone() }).unwrap();
    let ce = estimate(&m, &Job { fused_cross_entropy: true, ..base.clone() }).unwrap();
    assert!(ck.peak_allocated < e0.peak_allocated);
    assert!(ce.peak_allocated < e0.peak_allocated);
    // 152k vocab: logits at batch 4 × 4096 dominate the start of backward (12 B × tokens × vocab).
    assert_eq!(e0.peak_phase, Phase::BackwardStart);
    assert_eq!(e0.component("logits & loss"), 12 * 4 * 4096 * 152_064);
}

#[test]
fn eager_attention_stores_seq_squared() {
    let m = presets::load("llama-3-8b").unwrap();
    let job = Job::train(1, 4096);
    let sdpa = estimate(&m, &job).unwrap();
    let eager = estimate(&m, &Job { attention: vram_core::AttentionImpl::Eager, ..job }).unwrap();
    // 32 layers × 32 heads × 4096² × (4 B fp32 softmax + 2 B half copy) = 96 GiB more.
    let attn = |e: &vram_core::Estimate| e.phases.iter().find(|p| p.phase == Phase::BackwardStart).unwrap().allocated;
    assert!(attn(&eager) - attn(&sdpa) >= 96 * GIB);
    assert!(eager.peak_allocated > sdpa.peak_allocated);
}

#[test]
fn implicit_tie_and_head_dim_traps() {
    // GPT-2 configs have no tie_word_embeddings key: the class default (true) applies.
    let g = cfg(r#"{"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":4,"vocab_size":100}"#).unwrap();
    assert!(g.tied_embeddings);
    // Llama's default is untied.
    let l = cfg(
        r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#,
    )
    .unwrap();
    assert!(!l.tied_embeddings);
    // head_dim differs from hidden / heads (Gemma default 256).
    let gm = cfg(
        r#"{"model_type":"gemma","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#,
    )
    .unwrap();
    assert_eq!(gm.head_dim, 256);
    // The published float32 dtype is read.
    assert_eq!(presets::load("gemma-2-9b").unwrap().stored_dtype, Some(DType::F32));
}

#[test]
fn unknown_model_type_is_estimated_only_on_request_and_marked() {
    let json = r#"{"model_type":"brandnew","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#;
    assert!(matches!(cfg(json), Err(Error::UnsupportedArchitecture { .. })));
    let opts = vram_core::ParseOptions { approximate_unknown: true };
    let m = vram_core::parse_config_with(json.as_bytes(), "t", "t.json", opts).unwrap();
    assert!(m.warnings.iter().any(|w| w.contains("brandnew")) && m.approximation.is_some());
    assert!(m.parameters() > 0);
}

#[test]
fn multimodal_text_config_is_read() {
    let m = cfg(r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,"head_dim":16,"vocab_size":100,"intermediate_size":128}}"#).unwrap();
    assert_eq!(m.model_type, "gemma3_text");
    assert!(m.warnings.iter().any(|w| w.contains("text_config")));
}

#[test]
fn bad_configs_name_the_problem() {
    let e = cfg(r#"{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#).unwrap_err();
    assert!(matches!(&e, Error::MissingKey { key, .. } if key == "num_hidden_layers"), "{e}");
    assert!(e.to_string().contains("num_hidden_layers"));
    let e = cfg(r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":100,"intermediate_size":128}"#).unwrap_err();
    assert!(e.to_string().contains("num_key_value_heads"), "{e}");
    let e = cfg(r#"{"model_type":"llama","hidden_size":"big","num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#).unwrap_err();
    assert!(e.to_string().contains("hidden_size"), "{e}");
    assert!(matches!(cfg("{not json"), Err(Error::Json { .. })));
    assert!(matches!(cfg("[1,2,3]"), Err(Error::Json { .. })));
    let huge = r#"{"model_type":"llama","hidden_size":16000000,"num_hidden_layers":9000,"num_attention_heads":4,"vocab_size":16000000,"intermediate_size":16000000}"#;
    assert!(cfg(huge).is_err(), "a quadrillion-parameter config is refused");
}

#[test]
fn absurd_jobs_are_errors_not_panics() {
    let m = presets::load("llama-3.1-405b").unwrap();
    for job in [Job::train(0, 128), Job::train(1, 0), Job::train(1 << 30, 128), Job { grad_accum: 0, ..Job::train(1, 128) }] {
        assert!(estimate(&m, &job).is_err());
    }
    // The largest accepted job still computes without overflow.
    let e = estimate(&m, &Job { attention: vram_core::AttentionImpl::Eager, ..Job::train(1 << 20, 1 << 24) });
    assert!(matches!(e, Ok(_) | Err(Error::Overflow { .. })));
}

#[test]
fn unknown_preset_suggests_names() {
    match presets::load("llama-3.1-8") {
        Err(Error::Unknown { suggestions, .. }) => assert!(suggestions.iter().any(|s| s == "llama-3.1-8b"), "{suggestions:?}"),
        other => panic!("{other:?}"),
    }
    assert!(presets::load("meta-llama/Llama-3.1-8B").is_ok());
    assert!(presets::load("QWEN2.5-1.5B").is_ok());
}

/// A Gemma-3 vision-language config (Gemma3ForConditionalGeneration: a sparse `text_config`
/// and a SigLIP `vision_config`) is read as the vision-language model it is, never as its
/// language model alone: tower, pooling projector (64×64 patches → 16×16 tokens) and the
/// Gemma-3 text model with Gemma3TextConfig's defaults for what the config omits.
#[test]
fn a_gemma3_vision_language_config_is_read_with_its_tower_and_projector() {
    let cfg = serde_json::json!({
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "mm_tokens_per_image": 256,
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
                        "sliding_window": 1024},
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
                          "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false},
        "torch_dtype": "bfloat16"
    });
    let bytes = serde_json::to_vec(&cfg).unwrap();
    let m = vram_core::parse_config(&bytes, "gemma-3-4b", "config.json").unwrap();
    let mm = m.multimodal.as_ref().expect("a vision-language model");
    assert_eq!((mm.image_tokens, mm.pool, mm.tower.layers), (256, Some(4), 27));
    assert_eq!((m.heads, m.kv_heads, m.head_dim, m.vocab), (8, 4, 256, 262_208));
    // google/gemma-3-4b-it: 4,300,079,472 parameters (tower, projector, tied language model).
    assert_eq!(m.parameters(), 4_300_079_472);
    // A token count that is not a square dividing the patch grid is refused.
    let mut bad = cfg.clone();
    bad["mm_tokens_per_image"] = serde_json::json!(200);
    let e = vram_core::parse_config(&serde_json::to_vec(&bad).unwrap(), "g", "config.json").unwrap_err().to_string();
    assert!(e.contains("mm_tokens_per_image"), "{e}");
}

/// A padded batch never lowers a Gemma-2 estimate: its soft-capping runs eager attention, which
/// adds the mask to its seq² scores and saves them as unpadded (regression: a masked eager layer
/// was counted as memory-efficient attention, 27% low; found on PaliGemma 2, validation/vlm.py).
#[test]
fn a_mask_keeps_gemma2_eager() {
    let json =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/configs/vlm/paligemma2-3b-pt-224-constructed.json"))
            .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let mut text = v["text_config"].clone();
    text["architectures"] = serde_json::json!(["Gemma2ForCausalLM"]);
    let m = cfg(&text.to_string()).unwrap();
    let plain = estimate(&m, &Job::train(2, 2048)).unwrap();
    let padded = estimate(&m, &Job { padded: true, ..Job::train(2, 2048) }).unwrap();
    assert!(padded.peak_allocated >= plain.peak_allocated, "{} < {}", padded.peak_allocated, plain.peak_allocated);
    assert!(padded.component("activations: attention") >= plain.component("activations: attention"));
}
