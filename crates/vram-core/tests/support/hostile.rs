//! Hostile inputs for the parsers: truncated, oversized, inconsistent and absurd-number
//! safetensors files, GGUF headers and config.json files. Each case names the words its error
//! must contain, so a test asserts a clear error, never a panic or a silently wrong Model.
#![allow(dead_code)]

use super::gguf_writer::{Writer, F32, Q4_K};

/// One hostile input and what its error must say.
pub struct Case {
    /// What is wrong with it.
    pub name: &'static str,
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// A phrase the error message must contain.
    pub expect: &'static str,
}

fn case(name: &'static str, bytes: Vec<u8>, expect: &'static str) -> Case {
    Case { name, bytes, expect }
}

/// A safetensors file: length, header, then `data` bytes of tensor data.
pub fn safetensors(header: &str, data: usize) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend(std::iter::repeat_n(0u8, data));
    v
}

/// Safetensors files that must be refused.
pub fn safetensors_cases() -> Vec<Case> {
    let ok = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut cut = safetensors(ok, 8);
    cut.truncate(20);
    vec![
        case("shorter than the length", vec![1, 2, 3], "shorter than the 8-byte"),
        case("zero header length", 0u64.to_le_bytes().to_vec(), "outside 1..=100 MB"),
        case("header length of an exabyte", u64::MAX.to_le_bytes().to_vec(), "outside 1..=100 MB"),
        case("header cut short", cut, "truncated file"),
        case("header is not JSON", safetensors("[1, 2]", 0), "does not start with"),
        case("header is JSON cut mid-way", safetensors(r#"{"a":{"dtype":"F32","#, 0), "EOF"),
        case("header is not UTF-8", safetensors("{\"\u{7f}\"", 0).into_iter().map(|b| if b == 0x7f { 0xff } else { b }).collect(), "UTF-8"),
        case("unknown dtype", safetensors(r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}}"#, 1), "unknown dtype `Q4`"),
        case("no data_offsets", safetensors(r#"{"a":{"dtype":"F32","shape":[2]}}"#, 8), "data_offsets"),
        case("float dimension", safetensors(r#"{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,10]}}"#, 10), "invalid type"),
        case("negative dimension", safetensors(r#"{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#, 8), "invalid value"),
        case(
            "shape overflows u64",
            safetensors(r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}"#, 0),
            "overflows",
        ),
        case(
            "offsets disagree with the shape",
            safetensors(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#, 4),
            "do not match",
        ),
        case("offsets reversed", safetensors(r#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}"#, 8), "do not match"),
        case(
            "overlapping tensors",
            safetensors(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                12,
            ),
            "overlaps",
        ),
        case(
            "gap between tensors",
            safetensors(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}"#,
                24,
            ),
            "gap",
        ),
        case(
            "tensor listed twice",
            safetensors(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#,
                16,
            ),
            "listed twice",
        ),
        case("data past the end of the file", safetensors(ok, 4), "past the end of the file"),
        case("bytes after the last tensor", safetensors(ok, 12), "follow the last tensor"),
        case("4-bit tensor of odd length", safetensors(r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#, 1), "do not match"),
        case("metadata is not strings", safetensors(r#"{"__metadata__":{"format":1}}"#, 0), "invalid type"),
        case("trailing garbage", safetensors(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x"#, 8), "trailing"),
    ]
}

fn gguf_prefix(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend(version.to_le_bytes());
    v.extend(n_tensors.to_le_bytes());
    v.extend(n_kv.to_le_bytes());
    v
}

/// One metadata entry of raw type `t` with raw value bytes.
fn kv(out: &mut Vec<u8>, key: &str, t: u32, value: &[u8]) {
    out.extend((key.len() as u64).to_le_bytes());
    out.extend(key.as_bytes());
    out.extend(t.to_le_bytes());
    out.extend(value);
}

/// A tensor info with an explicit offset.
fn tensor_at(out: &mut Vec<u8>, name: &str, dims: &[u64], t: u32, offset: u64) {
    out.extend((name.len() as u64).to_le_bytes());
    out.extend(name.as_bytes());
    out.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        out.extend(d.to_le_bytes());
    }
    out.extend(t.to_le_bytes());
    out.extend(offset.to_le_bytes());
}

/// GGUF files that must be refused. The file length is the byte count given.
pub fn gguf_cases() -> Vec<Case> {
    let mut v = vec![
        case("wrong magic", b"GGML\x03\0\0\0".to_vec(), "not a GGUF file"),
        case("version 1", gguf_prefix(1, 0, 0), "version 1"),
        case("absurd counts", gguf_prefix(3, u64::MAX, 0), "not a real model"),
        case("truncated inside the header", gguf_prefix(3, 1, 1), "truncated"),
    ];
    let mut b = gguf_prefix(3, 0, 1);
    kv(&mut b, "general.name", 8, &u64::MAX.to_le_bytes());
    v.push(case("string of an exabyte", b, "claims"));
    let mut b = gguf_prefix(3, 0, 1);
    kv(&mut b, "x.y", 13, &[0; 8]);
    v.push(case("unknown value type", b, "unknown metadata value type 13"));
    let mut b = gguf_prefix(3, 0, 1);
    let mut arr = 77u32.to_le_bytes().to_vec();
    arr.extend(1u64.to_le_bytes());
    kv(&mut b, "x.y", 9, &arr);
    v.push(case("unknown array element type", b, "array element type 77"));
    let mut b = gguf_prefix(3, 0, 1);
    let mut arr = Vec::new();
    for _ in 0..5 {
        arr.extend(9u32.to_le_bytes());
        arr.extend(1u64.to_le_bytes());
    }
    kv(&mut b, "x.y", 9, &arr);
    v.push(case("arrays nested 5 deep", b, "nested too deeply"));
    let mut b = gguf_prefix(3, 0, 2);
    kv(&mut b, "general.name", 8, &[1, 0, 0, 0, 0, 0, 0, 0, b'a']);
    kv(&mut b, "general.name", 8, &[1, 0, 0, 0, 0, 0, 0, 0, b'b']);
    v.push(case("duplicate metadata key", b, "appears twice"));
    let mut b = gguf_prefix(3, 0, 1);
    kv(&mut b, "general.alignment", 4, &24u32.to_le_bytes());
    v.push(case("alignment not a power of two", b, "power of two"));
    for (name, dims, t, expect) in [
        ("unknown ggml type", vec![256], 99, "unknown ggml type 99"),
        ("five dimensions", vec![2, 2, 2, 2, 2], F32, "5 dimensions"),
        ("partial quant blocks", vec![100], Q4_K, "whole Q4_K blocks"),
        ("dimensions overflow", vec![u64::MAX, 4], F32, "overflow"),
        ("element count past INT64_MAX", vec![1 << 32, 1 << 31], F32, "overflow"),
    ] {
        let mut w = Writer::default();
        w.tensor("t", &dims, t);
        v.push(case(name, header_only(&w), expect));
    }
    let long = "x".repeat(64);
    let mut b = gguf_prefix(3, 1, 0);
    tensor_at(&mut b, &long, &[8], F32, 0);
    v.push(case("tensor name of 64 bytes", b, "at most 63"));
    let mut b = gguf_prefix(3, 2, 0);
    tensor_at(&mut b, "a", &[8], F32, 0);
    tensor_at(&mut b, "a", &[8], F32, 32);
    b.extend([0; 64 + 32]);
    v.push(case("tensor listed twice", b, "appears twice"));
    let mut b = gguf_prefix(3, 2, 0);
    tensor_at(&mut b, "a", &[8], F32, 32);
    tensor_at(&mut b, "b", &[8], F32, 0);
    v.push(case("offsets out of order", b, "expected 0"));
    let mut b = gguf_prefix(3, 2, 0);
    tensor_at(&mut b, "a", &[16], F32, 0);
    tensor_at(&mut b, "b", &[8], F32, 32);
    v.push(case("overlapping tensors", b, "expected 64"));
    let mut w = Writer::default();
    w.tensor("a", &[1024], F32);
    v.push(case("data past the end of the file", w.bytes(), "past the end of the file"));
    v
}

/// The header alone, without the 64 stand-in data bytes `Writer::bytes` appends.
fn header_only(w: &Writer) -> Vec<u8> {
    let mut b = w.bytes();
    b.truncate(b.len() - 64);
    b.extend([0u8; 4096]);
    b
}

/// config.json files (or files given as one) that must be refused.
pub fn config_cases() -> Vec<Case> {
    let llama = |extra: &str| {
        format!(
            r#"{{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128{extra}}}"#
        )
        .into_bytes()
    };
    let mut gguf = Writer::default();
    gguf.str("general.architecture", "llama");
    vec![
        case("empty file", vec![], "is empty"),
        case("a GGUF file", gguf.bytes(), "vram serve --model"),
        case("a safetensors file", safetensors(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, 8), "safetensors weights"),
        case("a pickle", b"\x80\x02}q\x00(X\x05".to_vec(), "pickle"),
        case("a torch zip", b"PK\x03\x04\x14\x00\x00\x00".to_vec(), "zip archive"),
        case("an HTML page", b"<!DOCTYPE html><html><body>Sign in</body></html>".to_vec(), "HTML page"),
        case("a Git LFS pointer", b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 12\n".to_vec(), "git lfs pull"),
        case("JSON cut mid-way", b"{\"model_type\": ".to_vec(), "not valid JSON"),
        case("top level array", b"[1, 2]".to_vec(), "JSON object"),
        case("a safetensors index", br#"{"metadata":{"total_size":16},"weight_map":{"a":"model-00001.safetensors"}}"#.to_vec(), "not a model's config.json"),
        case("YAML", b"model_type: llama\n".to_vec(), "not valid JSON"),
        case("unknown model_type", llama(r#","model_type":"brandnew""#), "vram does not know"),
        case("hidden size 1e30", llama(r#","hidden_size":1e30"#), "hidden_size"),
        case("negative layers", llama(r#","num_hidden_layers":-3"#), "num_hidden_layers"),
        case("layers as a string", llama(r#","num_hidden_layers":"32""#), "num_hidden_layers"),
        case("zero layers", llama(r#","num_hidden_layers":0"#), "num_hidden_layers"),
        case("a million layers", llama(r#","num_hidden_layers":1000000"#), "num_hidden_layers"),
        case("zero vocabulary", llama(r#","vocab_size":0"#), "vocab_size"),
        case("kv heads do not divide heads", llama(r#","num_key_value_heads":3"#), "num_key_value_heads"),
        case("zero kv heads", llama(r#","num_key_value_heads":0"#), "num_key_value_heads"),
        case("bool as a number", llama(r#","tie_word_embeddings":1"#), "tie_word_embeddings"),
        case("rope factor negative", llama(r#","rope_scaling":{"rope_type":"yarn","factor":-4}"#), "rope_scaling.factor"),
        case("quantization_config a string", llama(r#","quantization_config":"fp8""#), "quantization_config"),
        case("a quadrillion parameters", llama(r#","hidden_size":16777216,"intermediate_size":16777216,"num_hidden_layers":10000"#), "beyond any real model"),
        case(
            "a classifier head",
            llama(r#","architectures":["LlamaForSequenceClassification"]"#),
            "sequence-classification head",
        ),
        case(
            "mixtral with more experts per token than experts",
            br#"{"model_type":"mixtral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128,"num_local_experts":2,"num_experts_per_tok":3}"#.to_vec(),
            "num_experts_per_tok",
        ),
        // The families read since issue 15: absurd dimensions are refused, not allocated.
        case("Whisper with a billion encoder layers", br#"{"model_type":"whisper","encoder_layers":1000000000}"#.to_vec(), "num_hidden_layers"),
        case("Whisper with absurd mel bins", br#"{"model_type":"whisper","num_mel_bins":99999999}"#.to_vec(), "num_mel_bins"),
        case("a ViT image smaller than its patch", br#"{"model_type":"vit","image_size":1,"patch_size":16}"#.to_vec(), "image_size"),
        case("a LLaVA tower of 10^8 layers", br#"{"model_type":"llava","text_config":{"model_type":"llama"},"vision_config":{"model_type":"clip_vision_model","num_hidden_layers":100000000}}"#.to_vec(), "num_hidden_layers"),
        case("a BERT with 10^11 token types", br#"{"model_type":"bert","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128,"type_vocab_size":99999999999}"#.to_vec(), "type_vocab_size"),
        case("a BERT classifier with 0 labels", br#"{"model_type":"bert","architectures":["BertForSequenceClassification"],"num_labels":0,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":100,"intermediate_size":128}"#.to_vec(), "num_labels"),
        case("a T5 with a three-part feed_forward_proj", br#"{"model_type":"t5","feed_forward_proj":"gated-gelu-new"}"#.to_vec(), "feed_forward_proj"),
        case("a T5 with 10^12 position buckets", br#"{"model_type":"t5","relative_attention_num_buckets":1000000000000}"#.to_vec(), "relative_attention_num_buckets"),
        case("a BART with a billion encoder layers", br#"{"model_type":"bart","encoder_layers":1000000000}"#.to_vec(), "num_hidden_layers"),
        case("a BART with untied embeddings", br#"{"model_type":"mbart","tie_word_embeddings":false}"#.to_vec(), "tie_word_embeddings"),
        case("a BART summarization classifier", br#"{"model_type":"bart","architectures":["BartForSequenceClassification"]}"#.to_vec(), "BartForSequenceClassification"),
        case("a LLaVA without a vision config", br#"{"model_type":"llava","text_config":{"model_type":"llama"}}"#.to_vec(), "vision_config"),
    ]
}
