//! Pre-quantized checkpoints: the scheme formulas (quant.rs) against safetensors headers laid
//! out as AutoAWQ, AutoGPTQ, DeepSeek-V3 fp8 and bitsandbytes nf4 write them, and serving /
//! inference defaulting to the checkpoint's own quantization.

#[path = "support/safetensors_writer.rs"]
mod safetensors_writer;
use safetensors_writer::header;
use serde_json::{json, Value};
use vram_core::quant::{self, Plan};
use vram_core::safetensors::CheckpointSummary;
use vram_core::serve::{serve, Quantization, ServeConfig};
use vram_core::{estimate, parse_config, Job, Precision};

const GIB: u64 = 1 << 30;

/// A tiny Llama: hidden 256, 4 heads of 64, 2 KV heads, intermediate 512, 2 layers, vocab 1000.
fn tiny_llama(q: Value) -> vram_core::Model {
    let cfg = json!({"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":256,"num_hidden_layers":2,
        "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":512,"vocab_size":1000,
        "max_position_embeddings":2048,"torch_dtype":"float16","quantization_config":q});
    parse_config(cfg.to_string().as_bytes(), "tiny", "config.json").unwrap()
}

/// The seven linear layers of a Llama layer: (module, out, in).
const LINEARS: [(&str, u64, u64); 7] = [
    ("self_attn.q_proj", 256, 256),
    ("self_attn.k_proj", 128, 256),
    ("self_attn.v_proj", 128, 256),
    ("self_attn.o_proj", 256, 256),
    ("mlp.gate_proj", 512, 256),
    ("mlp.up_proj", 512, 256),
    ("mlp.down_proj", 256, 512),
];

/// Embeddings, LM head and norms in F16/BF16, and each linear layer as `linear` lays it out.
fn checkpoint(
    dtype16: &'static str,
    linear: impl Fn(&str, u64, u64) -> Vec<(String, &'static str, Vec<u64>)>,
) -> Vec<(String, &'static str, Vec<u64>)> {
    let mut t = vec![
        ("model.embed_tokens.weight".to_string(), dtype16, vec![1000, 256]),
        ("lm_head.weight".to_string(), dtype16, vec![1000, 256]),
        ("model.norm.weight".to_string(), dtype16, vec![256]),
    ];
    for i in 0..2 {
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            t.push((format!("model.layers.{i}.{norm}.weight"), dtype16, vec![256]));
        }
        for (m, out, inp) in LINEARS {
            t.extend(linear(&format!("model.layers.{i}.{m}"), out, inp));
        }
    }
    t
}

fn header_bytes(t: &[(String, &str, Vec<u64>)]) -> u64 {
    let (json, data) = header(t);
    let mut s = CheckpointSummary::default();
    s.add_header(&json, "model.safetensors", Some(json.len() as u64 + 8 + data)).unwrap();
    assert_eq!(s.bytes, data);
    s.bytes
}

fn formula(m: &vram_core::Model) -> u128 {
    let plan = Plan::new(m.quantization.as_ref().unwrap()).unwrap();
    quant::model_bytes(m, &plan, 2).total()
}

#[test]
fn awq_gemm_formula_equals_its_headers() {
    // AutoAWQ WQLinear_GEMM: qweight [in, out/8] i32, qzeros [in/128, out/8] i32, scales [in/128, out] f16.
    let m = tiny_llama(json!({"bits":4,"group_size":128,"quant_method":"awq","version":"gemm","zero_point":true}));
    let t = checkpoint("F16", |n, out, inp| {
        vec![
            (format!("{n}.qweight"), "I32", vec![inp, out / 8]),
            (format!("{n}.qzeros"), "I32", vec![inp / 128, out / 8]),
            (format!("{n}.scales"), "F16", vec![inp / 128, out]),
        ]
    });
    assert_eq!(formula(&m), header_bytes(&t) as u128);
}

#[test]
fn gptq_formula_equals_its_headers() {
    // AutoGPTQ QuantLinear: qweight [in/8, out] i32, qzeros [in/128, out/8] i32, scales [in/128, out]
    // f16, g_idx [in] i32 (registered whatever desc_act says).
    let m = tiny_llama(json!({"bits":4,"group_size":128,"desc_act":false,"sym":true,"quant_method":"gptq"}));
    let t = checkpoint("F16", |n, out, inp| {
        vec![
            (format!("{n}.qweight"), "I32", vec![inp / 8, out]),
            (format!("{n}.qzeros"), "I32", vec![inp / 128, out / 8]),
            (format!("{n}.scales"), "F16", vec![inp / 128, out]),
            (format!("{n}.g_idx"), "I32", vec![inp]),
        ]
    });
    assert_eq!(formula(&m), header_bytes(&t) as u128);
}

#[test]
fn fp8_block_formula_equals_its_headers() {
    // DeepSeek-V3: weight F8_E4M3 [out, in], weight_scale_inv F32 [out/128, in/128]; the rest BF16.
    let m = tiny_llama(json!({"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128]}));
    let t = checkpoint("BF16", |n, out, inp| {
        vec![(format!("{n}.weight"), "F8_E4M3", vec![out, inp]), (format!("{n}.weight_scale_inv"), "F32", vec![out / 128, inp / 128])]
    });
    assert_eq!(formula(&m), header_bytes(&t) as u128);
}

#[test]
fn bnb_nf4_formula_equals_its_headers_less_the_json_blob() {
    // transformers' bnb 4-bit serialisation (Params4bit / QuantState.as_dict(packed=True)):
    // weight u8 [n/2, 1], absmax u8 [n/64], nested_absmax f32 [⌈n/64/256⌉], nested_quant_map
    // f32 [256], quant_map f32 [16], and a u8 JSON blob `quant_state.bitsandbytes__nf4` that
    // is read on the CPU and never reaches the GPU (so the formula leaves it out).
    let m =
        tiny_llama(json!({"load_in_4bit":true,"bnb_4bit_quant_type":"nf4","bnb_4bit_use_double_quant":true,"quant_method":"bitsandbytes"}));
    const BLOB: u64 = 180;
    let t = checkpoint("F16", |n, out, inp| {
        let e = out * inp;
        vec![
            (format!("{n}.weight"), "U8", vec![e / 2, 1]),
            (format!("{n}.weight.absmax"), "U8", vec![e / 64]),
            (format!("{n}.weight.nested_absmax"), "F32", vec![(e / 64).div_ceil(256)]),
            (format!("{n}.weight.nested_quant_map"), "F32", vec![256]),
            (format!("{n}.weight.quant_map"), "F32", vec![16]),
            (format!("{n}.weight.quant_state.bitsandbytes__nf4"), "U8", vec![BLOB]),
        ]
    });
    assert_eq!(formula(&m), (header_bytes(&t) - 14 * BLOB) as u128);
}

#[test]
fn compressed_tensors_w4a16_formula_equals_its_headers() {
    // llm-compressor W4A16 (pack-quantized, symmetric, group 128): weight_packed [out, in/8] i32,
    // weight_scale [out, in/128] bf16, weight_shape [2] i64; lm_head ignored.
    let m = tiny_llama(json!({"quant_method":"compressed-tensors","format":"pack-quantized","ignore":["lm_head"],
        "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"group_size":128,"strategy":"group","symmetric":true,"type":"int"}}}}));
    let t = checkpoint("BF16", |n, out, inp| {
        vec![
            (format!("{n}.weight_packed"), "I32", vec![out, inp / 8]),
            (format!("{n}.weight_scale"), "BF16", vec![out, inp / 128]),
            (format!("{n}.weight_shape"), "I64", vec![2]),
        ]
    });
    assert_eq!(formula(&m), header_bytes(&t) as u128);
}

#[test]
fn compressed_tensors_w8a8_is_one_byte_with_channel_scales() {
    let m = tiny_llama(json!({"quant_method":"compressed-tensors","format":"int-quantized",
        "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"strategy":"channel","symmetric":true,"type":"int"}}}}));
    let t = checkpoint("BF16", |n, out, inp| {
        vec![(format!("{n}.weight"), "I8", vec![out, inp]), (format!("{n}.weight_scale"), "BF16", vec![out, 1])]
    });
    assert_eq!(formula(&m), header_bytes(&t) as u128);
    assert_eq!(Plan::new(m.quantization.as_ref().unwrap()).unwrap().precision(), Precision::Int8);
}

/// One NVFP4 linear as `[packed, weight scalar, input scalar]` names it: U8 [out, in/2], an
/// F8_E4M3 `weight_scale` [out, in/16] and two F32 scalars.
fn nvfp4(n: &str, out: u64, inp: u64, [packed, w, i]: [&str; 3]) -> Vec<(String, &'static str, Vec<u64>)> {
    vec![
        (format!("{n}.{packed}"), "U8", vec![out, inp / 2]),
        (format!("{n}.weight_scale"), "F8_E4M3", vec![out, inp / 16]),
        (format!("{n}.{w}"), "F32", vec![1]),
        (format!("{n}.{i}"), "F32", vec![1]),
    ]
}

/// NVIDIA ModelOpt NVFP4 (`quant_method: modelopt`, `quant_algo: NVFP4`, modelopt's HF export):
/// weight U8 [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_scale_2 and input_scale F32
/// scalars; `exclude_modules` left 16-bit.
#[test]
fn modelopt_nvfp4_formula_equals_its_headers() {
    let m = tiny_llama(json!({"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head"]}));
    let t = checkpoint("BF16", |n, out, inp| nvfp4(n, out, inp, ["weight", "weight_scale_2", "input_scale"]));
    assert_eq!(formula(&m), header_bytes(&t) as u128);
    let plan = Plan::new(m.quantization.as_ref().unwrap()).unwrap();
    assert_eq!(plan.precision(), Precision::Int4);
    assert_eq!(m.quantization.as_ref().unwrap().group_size, Some(16));
}

/// compressed-tensors nvfp4-pack-quantized (llm-compressor's NVFP4 scheme): weight_packed U8
/// [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_global_scale and input_global_scale F32.
#[test]
fn compressed_tensors_nvfp4_formula_equals_its_headers() {
    let m = tiny_llama(json!({"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized","ignore":["lm_head"],
        "config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"group_size":16,"strategy":"tensor_group","symmetric":true,"type":"float"}}}}));
    let t = checkpoint("BF16", |n, out, inp| nvfp4(n, out, inp, ["weight_packed", "weight_global_scale", "input_global_scale"]));
    assert_eq!(formula(&m), header_bytes(&t) as u128);
}

/// ModelOpt FP8 (`quant_algo: FP8`): weight F8_E4M3 [out, in], weight_scale and input_scale F32
/// scalars. A ModelOpt scheme vram does not model is refused by name.
#[test]
fn modelopt_fp8_formula_equals_its_headers_and_other_algos_are_refused() {
    let m = tiny_llama(json!({"quant_method":"modelopt","quant_algo":"FP8","exclude_modules":["lm_head"]}));
    let t = checkpoint("BF16", |n, out, inp| {
        vec![
            (format!("{n}.weight"), "F8_E4M3", vec![out, inp]),
            (format!("{n}.weight_scale"), "F32", vec![1]),
            (format!("{n}.input_scale"), "F32", vec![1]),
        ]
    });
    assert_eq!(formula(&m), header_bytes(&t) as u128);
    let mixed = tiny_llama(json!({"quant_method":"modelopt","quant_algo":"MIXED_PRECISION"}));
    let e = Plan::new(mixed.quantization.as_ref().unwrap()).unwrap_err().to_string();
    assert!(e.contains("MIXED_PRECISION"), "{e}");
}

#[test]
fn parameters_stay_the_logical_count() {
    let plain = tiny_llama(Value::Null);
    let awq = tiny_llama(json!({"bits":4,"group_size":128,"quant_method":"awq"}));
    assert_eq!(awq.parameters(), plain.parameters());
}

#[test]
fn excluded_modules_stay_16_bit() {
    let all = tiny_llama(json!({"bits":4,"group_size":128,"quant_method":"awq"}));
    let no_l1 = tiny_llama(json!({"bits":4,"group_size":128,"quant_method":"awq","modules_to_not_convert":["model.layers.1"]}));
    let one_layer: u128 = LINEARS.iter().map(|(_, o, i)| (o * i) as u128).sum();
    let quantized = one_layer / 2 + one_layer / 128 * 5 / 2;
    assert_eq!(formula(&no_l1) - formula(&all), 2 * one_layer - quantized);
}

fn deepseek_v3(quantized: bool) -> vram_core::Model {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/configs/deepseek-v3.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    if quantized {
        // As deepseek-ai/DeepSeek-V3's config.json ships it.
        cfg["quantization_config"] = json!({"activation_scheme":"dynamic","fmt":"e4m3","quant_method":"fp8","weight_block_size":[128,128]});
    }
    parse_config(cfg.to_string().as_bytes(), "deepseek-v3", "config.json").unwrap()
}

#[test]
fn deepseek_v3_fp8_fits_8_h200_as_stored() {
    // Regression: the fp8 checkpoint was served as bf16 (158 GiB of weights per rank) and did
    // not fit; as stored it is ~671 GB of fp8 plus bf16 embeddings and norms over 8 ranks.
    let h200 = ServeConfig { tp: 8, max_model_len: Some(32_768), ..ServeConfig::new(139_980 << 20) };
    let before = serve(&deepseek_v3(false), &h200).unwrap();
    assert!(!before.fits && before.weights_bytes > 150 * GIB, "{}", before.weights_bytes);
    let m = deepseek_v3(true);
    let after = serve(&m, &ServeConfig { quantization: Quantization::Checkpoint, ..h200 }).unwrap();
    assert!(after.fits, "{after:?}");
    // Whole model: every decoder linear and expert at one byte, the embedding and LM head
    // (2 × 129280 × 7168), the 58 routers (256 × 7168) and the norms (61 × 16384 + 7168) in bf16.
    let plan = Plan::new(m.quantization.as_ref().unwrap()).unwrap();
    let whole = quant::model_bytes(&m, &plan, 2);
    let sixteen: u128 = 1_853_358_080 + 106_430_464 + 1_006_592;
    assert_eq!(whole.weight, (671_026_404_352 - sixteen) + 2 * sixteen);
    // Per rank: an eighth of that, plus what vLLM replicates on every rank (the low-rank
    // q_a_proj / kv_a_proj_with_mqa, norms, routers; ~0.9 GB) and the rotary cache.
    let per_rank = after.weights_bytes as f64 / 1e9;
    assert!((84.0..86.5).contains(&per_rank), "{per_rank} GB per rank");
    // fp32 scale per 128×128 block: 671e9 / 16384 × 4 B ≈ 0.16 GB in all.
    assert!((0.15e9..0.17e9).contains(&(after.quant_scales_bytes as f64 * 8.0)), "{}", after.quant_scales_bytes);
    assert!(after.notes.iter().any(|n| n.contains("fp8 block-quantized [128, 128] as stored")), "{:?}", after.notes);
    // The logical parameter count is the model card's.
    assert_eq!(m.parameters(), 671_026_404_352);
}

#[test]
fn awq_llama_31_8b_weight_bytes() {
    // hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4: decoder linears 6,979,321,856 weights at
    // half a byte, fp16 scale + 4-bit zero per 128 inputs; embeddings, LM head, norms fp16.
    let cfg = json!({"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":4096,"num_hidden_layers":32,
        "num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256,
        "max_position_embeddings":131072,"torch_dtype":"float16",
        "quantization_config":{"bits":4,"group_size":128,"modules_to_not_convert":null,"quant_method":"awq","version":"gemm","zero_point":true}});
    let m = parse_config(cfg.to_string().as_bytes(), "llama-awq", "config.json").unwrap();
    let linears: u128 = 6_979_321_856;
    let sixteen: u128 = 2 * 128_256 * 4096 + 65 * 4096;
    assert_eq!(formula(&m), linears / 2 + linears / 128 * 5 / 2 + 2 * sixteen);
    assert_eq!(formula(&m), 5_727_854_592);
    // Serving: the same bytes plus the rotary cos/sin cache [131072, 128] fp16.
    let r = serve(&m, &ServeConfig { quantization: Quantization::Checkpoint, ..ServeConfig::new(24 * GIB) }).unwrap();
    assert_eq!(r.weights_bytes, 5_727_854_592 + 131_072 * 128 * 2);
    // Inference in transformers: the default precision class (int4) runs the stored layout.
    let e = estimate(&m, &Job { precision: Precision::Int4, ..Job::infer(1, 1024) }).unwrap();
    assert_eq!(e.component("weights") + e.component("quantization scales"), 5_727_854_592);
    assert!(e.notes.iter().any(|n| n.contains("4-bit AWQ packed, group 128 as stored")), "{:?}", e.notes);
    // --precision bf16 on it: dequantized, and said so.
    let bf16 = estimate(&m, &Job::infer(1, 1024)).unwrap();
    assert_eq!(bf16.component("weights"), 2 * m.parameters() as u64);
    assert!(bf16.notes.iter().any(|n| n.contains("dequantized to bf16 at load")), "{:?}", bf16.notes);
}

#[test]
fn unknown_methods_are_errors_not_guesses() {
    let m = tiny_llama(json!({"quant_method":"hqq","nbits":4}));
    assert!(Plan::new(m.quantization.as_ref().unwrap()).is_err());
    assert!(serve(&m, &ServeConfig { quantization: Quantization::Checkpoint, ..ServeConfig::new(24 * GIB) }).is_err());
}

#[test]
fn a_quantized_checkpoint_keeps_its_float_model_dtype() {
    // Regression: packed int32 qweight outnumbering the fp16 tensors made the "stored dtype"
    // int32, and vLLM's auto dtype then fell back to bf16 instead of the checkpoint's fp16.
    let t = vec![
        ("model.layers.0.mlp.up_proj.qweight".to_string(), "I32", vec![4096, 512]),
        ("model.embed_tokens.weight".to_string(), "F16", vec![100, 256]),
    ];
    let (json, data) = header(&t);
    let mut s = CheckpointSummary::default();
    s.add_header(&json, "m", Some(json.len() as u64 + 8 + data)).unwrap();
    assert_eq!(s.main_dtype(), Some(vram_core::DType::F16));
}
