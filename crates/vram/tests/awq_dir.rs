//! A tiny AutoAWQ GEMM checkpoint directory for the CLI tests: config.json with its
//! quantization_config and one safetensors file (qweight [in, out/8], qzeros [in/128, out/8],
//! scales [in/128, out]), written by the shared safetensors writer.
#![allow(dead_code)]

#[path = "../../vram-core/tests/support/safetensors_writer.rs"]
mod safetensors_writer;

/// Write it into `dir`; returns the bytes of tensor data its header promises.
pub fn write(dir: &std::path::Path) -> u64 {
    let cfg = serde_json::json!({"model_type":"llama","hidden_size":256,"intermediate_size":512,"num_hidden_layers":1,"num_attention_heads":4,
        "num_key_value_heads":2,"vocab_size":1000,"max_position_embeddings":512,"torch_dtype":"float16",
        "quantization_config":{"bits":4,"group_size":128,"quant_method":"awq","version":"gemm","zero_point":true}});
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let mut t: Vec<(String, &str, Vec<u64>)> = vec![
        ("model.embed_tokens.weight".into(), "F16", vec![1000, 256]),
        ("lm_head.weight".into(), "F16", vec![1000, 256]),
        ("model.norm.weight".into(), "F16", vec![256]),
        ("model.layers.0.input_layernorm.weight".into(), "F16", vec![256]),
        ("model.layers.0.post_attention_layernorm.weight".into(), "F16", vec![256]),
    ];
    for (m, out, inp) in [
        ("self_attn.q_proj", 256, 256),
        ("self_attn.k_proj", 128, 256),
        ("self_attn.v_proj", 128, 256),
        ("self_attn.o_proj", 256, 256),
        ("mlp.gate_proj", 512, 256),
        ("mlp.up_proj", 512, 256),
        ("mlp.down_proj", 256, 512),
    ] {
        let n = format!("model.layers.0.{m}");
        t.push((format!("{n}.qweight"), "I32", vec![inp, out / 8]));
        t.push((format!("{n}.qzeros"), "I32", vec![inp / 128, out / 8]));
        t.push((format!("{n}.scales"), "F16", vec![inp / 128, out]));
    }
    let (file, data) = safetensors_writer::file(&t);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    data
}
