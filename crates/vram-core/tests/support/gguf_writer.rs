//! A GGUF v3 header writer (ggml/docs/gguf.md) for tests: valid files of several quant types.
#![allow(dead_code)]

/// Writes GGUF v3 headers.
#[derive(Default)]
pub struct Writer {
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<u8>,
    n_tensors: u64,
    /// Where the next tensor's data starts (each padded to the default 32-byte alignment).
    next_offset: u64,
}

/// Bytes of `numel` elements of a ggml type (block sizes of ggml-common.h).
fn type_bytes(ggml_type: u32, numel: u64) -> u64 {
    match ggml_type {
        0 => numel.wrapping_mul(4),
        1 => numel.wrapping_mul(2),
        8 => numel / 32 * 34,
        12 => numel / 256 * 144,
        13 => numel / 256 * 176,
        14 => numel / 256 * 210,
        23 => numel / 256 * 136,
        39 => numel / 32 * 17,
        _ => 0,
    }
}

fn s(out: &mut Vec<u8>, x: &str) {
    out.extend((x.len() as u64).to_le_bytes());
    out.extend(x.as_bytes());
}

impl Writer {
    /// A decoder under `arch`: general.architecture, then `arch`'s block_count, context_length,
    /// embedding_length, feed_forward_length, attention.head_count and attention.head_count_kv.
    pub fn decoder(&mut self, arch: &str, [layers, ctx, embd, ff, heads, kv]: [u32; 6]) -> &mut Self {
        self.str("general.architecture", arch);
        for (key, v) in [
            ("block_count", layers),
            ("context_length", ctx),
            ("embedding_length", embd),
            ("feed_forward_length", ff),
            ("attention.head_count", heads),
            ("attention.head_count_kv", kv),
        ] {
            self.u32(&format!("{arch}.{key}"), v);
        }
        self
    }

    pub fn u32(&mut self, k: &str, v: u32) -> &mut Self {
        s(&mut self.kv, k);
        self.kv.extend(4u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    pub fn f32(&mut self, k: &str, v: f32) -> &mut Self {
        s(&mut self.kv, k);
        self.kv.extend(6u32.to_le_bytes());
        self.kv.extend(v.to_le_bytes());
        self.n_kv += 1;
        self
    }
    pub fn str(&mut self, k: &str, v: &str) -> &mut Self {
        s(&mut self.kv, k);
        self.kv.extend(8u32.to_le_bytes());
        s(&mut self.kv, v);
        self.n_kv += 1;
        self
    }
    /// An array of u32 (a per-layer value such as `attention.head_count_kv`).
    pub fn u32_array(&mut self, k: &str, v: &[u32]) -> &mut Self {
        s(&mut self.kv, k);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(4u32.to_le_bytes());
        self.kv.extend((v.len() as u64).to_le_bytes());
        for x in v {
            self.kv.extend(x.to_le_bytes());
        }
        self.n_kv += 1;
        self
    }
    /// An array of bools (per-layer flags such as `attention.recurrent_layers`).
    pub fn bool_array(&mut self, k: &str, v: &[bool]) -> &mut Self {
        s(&mut self.kv, k);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(7u32.to_le_bytes());
        self.kv.extend((v.len() as u64).to_le_bytes());
        self.kv.extend(v.iter().map(|&b| u8::from(b)));
        self.n_kv += 1;
        self
    }
    pub fn tokens(&mut self, n: usize) -> &mut Self {
        s(&mut self.kv, "tokenizer.ggml.tokens");
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(8u32.to_le_bytes());
        self.kv.extend((n as u64).to_le_bytes());
        for i in 0..n {
            s(&mut self.kv, &format!("tok{i}"));
        }
        self.n_kv += 1;
        self
    }
    /// A sentencepiece ("llama") vocabulary of `n` tokens as llama.cpp's loader needs it: `<unk>`,
    /// `<s>`, `</s>`, the 256 byte tokens `<0x00>`..`<0xFF>` (llama-vocab.cpp's byte_to_token
    /// looks them up), then unique fillers; scores, token types and the special ids.
    pub fn spm_vocab(&mut self, n: usize) -> &mut Self {
        let mut names: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        names.extend((0..256).map(|b| format!("<0x{b:02X}>")));
        let fixed = names.len();
        names.extend((fixed..n).map(|i| format!("t{i:x}")));
        names.truncate(n);
        s(&mut self.kv, "tokenizer.ggml.model");
        self.kv.extend(8u32.to_le_bytes());
        s(&mut self.kv, "llama");
        self.array_head("tokenizer.ggml.tokens", 8, names.len());
        for name in &names {
            s(&mut self.kv, name);
        }
        self.array_head("tokenizer.ggml.scores", 6, names.len());
        for i in 0..names.len() {
            self.kv.extend((-(i as f32)).to_le_bytes());
        }
        // llama.h's llama_token_type: 1 normal, 2 unknown, 3 control, 6 byte.
        self.array_head("tokenizer.ggml.token_type", 5, names.len());
        for i in 0..names.len() {
            let t: i32 = match i {
                0 => 2,
                1 | 2 => 3,
                i if i < fixed => 6,
                _ => 1,
            };
            self.kv.extend(t.to_le_bytes());
        }
        self.n_kv += 4;
        self.u32("tokenizer.ggml.unknown_token_id", 0).u32("tokenizer.ggml.bos_token_id", 1).u32("tokenizer.ggml.eos_token_id", 2)
    }
    /// An array's key, the array type (9), its element type and length; the elements follow.
    fn array_head(&mut self, k: &str, elem_type: u32, len: usize) {
        s(&mut self.kv, k);
        self.kv.extend(9u32.to_le_bytes());
        self.kv.extend(elem_type.to_le_bytes());
        self.kv.extend((len as u64).to_le_bytes());
    }
    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32) -> &mut Self {
        s(&mut self.tensors, name);
        self.tensors.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.tensors.extend(d.to_le_bytes());
        }
        self.tensors.extend(ggml_type.to_le_bytes());
        self.tensors.extend(self.next_offset.to_le_bytes());
        let numel = dims.iter().fold(1u64, |a, d| a.wrapping_mul(*d));
        self.next_offset = self.next_offset.wrapping_add(type_bytes(ggml_type, numel).wrapping_add(31) / 32 * 32);
        self.n_tensors += 1;
        self
    }
    /// The header: magic, version 3, counts, metadata and tensor infos.
    fn header(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(self.n_tensors.to_le_bytes());
        out.extend(self.n_kv.to_le_bytes());
        out.extend(&self.kv);
        out.extend(&self.tensors);
        out
    }
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = self.header();
        // Tensor data would follow; a few bytes of it prove the parser stops at the header.
        out.extend([0xAB; 64]);
        out
    }
}

impl Writer {
    /// The whole file as llama.cpp reads it: the header, zero padding to the 32-byte alignment,
    /// then every tensor's data (zeros, a sparse hole) at the offsets the header gives. Written
    /// to `path`; returns the file's length.
    pub fn write_file(&self, path: &std::path::Path) -> std::io::Result<u64> {
        let mut out = self.header();
        out.resize(out.len().div_ceil(32) * 32, 0);
        let len = out.len() as u64 + self.next_offset;
        std::fs::write(path, out)?;
        std::fs::File::options().write(true).open(path)?.set_len(len)?;
        Ok(len)
    }
}

pub const Q4_K: u32 = 12;
pub const Q6_K: u32 = 14;
pub const Q8_0: u32 = 8;
pub const IQ4_XS: u32 = 23;
pub const F32: u32 = 0;
pub const F16: u32 = 1;
pub const Q5_K: u32 = 13;
pub const MXFP4: u32 = 39;

/// A 4-layer llama-architecture Q4_K_M-style file: attention in Q4_K, FFN down in Q6_K, the rest mixed.
pub fn tiny_llama() -> Writer {
    tiny_llama_layers(4)
}

/// [`tiny_llama`] with `layers` layers.
pub fn tiny_llama_layers(layers: u32) -> Writer {
    let mut w = Writer::default();
    w.decoder("llama", [layers, 8192, 256, 512, 8, 2])
        .str("general.name", "tiny")
        .u32("general.file_type", 15)
        .f32("llama.rope.freq_base", 500000.0)
        .tokens(1024);
    w.tensor("token_embd.weight", &[256, 1024], Q4_K);
    for i in 0..layers {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[256], F32)
            .tensor(&format!("blk.{i}.attn_q.weight"), &[256, 256], Q4_K)
            .tensor(&format!("blk.{i}.attn_k.weight"), &[256, 64], Q4_K)
            .tensor(&format!("blk.{i}.attn_v.weight"), &[256, 64], Q6_K)
            .tensor(&format!("blk.{i}.attn_output.weight"), &[256, 256], Q5_K)
            .tensor(&format!("blk.{i}.ffn_gate.weight"), &[256, 512], IQ4_XS)
            .tensor(&format!("blk.{i}.ffn_up.weight"), &[256, 512], Q8_0)
            .tensor(&format!("blk.{i}.ffn_down.weight"), &[512, 256], Q6_K)
            .tensor(&format!("blk.{i}.ffn_norm.weight"), &[256], F32);
    }
    w.tensor("output_norm.weight", &[256], F32).tensor("output.weight", &[256, 1024], F16);
    w
}

/// A Qwen3.5 GGUF (Gated DeltaNet hybrid; qwen35.* keys as llama.cpp's converter writes them):
/// every 4th layer attention with a KV cache, the others one f32 state per sequence
/// (llama_recurrent.rs), each on its layer's device.
pub fn tiny_qwen35(layers: u32) -> Writer {
    let mut w = Writer::default();
    w.decoder("qwen35", [layers, 262_144, 1024, 3584, 8, 2])
        .u32("qwen35.attention.key_length", 256)
        .u32("qwen35.attention.value_length", 256)
        .u32("qwen35.ssm.conv_kernel", 4)
        .u32("qwen35.ssm.state_size", 128)
        .u32("qwen35.ssm.group_count", 16)
        .u32("qwen35.ssm.time_step_rank", 16)
        .u32("qwen35.ssm.inner_size", 2048)
        .u32("qwen35.full_attention_interval", 4)
        .tokens(1024);
    w.tensor("token_embd.weight", &[1024, 1024], Q8_0);
    for i in 0..layers {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[1024], F32).tensor(&format!("blk.{i}.ffn_down.weight"), &[3584, 1024], Q8_0);
    }
    w.tensor("output.weight", &[1024, 1024], Q8_0);
    w
}

/// [`tiny_llama`] written to `dir` as `tiny.gguf`, padded to 4 MiB so the tensor data its header
/// promises is in the file (the CLI checks that); returns its path.
/// A Gemma 3 vision projector with the hyper-parameters of ggml-org/gemma-3-4b-it-GGUF's mmproj
/// (its warm-up compute buffer is 121.25 MiB under flash attention, llama.cpp PR #22790's log)
/// and one tensor, the patch embedding.
pub fn gemma3_projector() -> Writer {
    let mut w = Writer::default();
    w.str("general.architecture", "clip")
        .str("clip.projector_type", "gemma3")
        .u32("clip.vision.embedding_length", 1152)
        .u32("clip.vision.feed_forward_length", 4304)
        .u32("clip.vision.attention.head_count", 16)
        .u32("clip.vision.block_count", 27)
        .u32("clip.vision.image_size", 896)
        .u32("clip.vision.patch_size", 14)
        .tensor("v.patch_embd.weight", &[14, 14, 3, 1152], F16);
    w
}

pub fn write_tiny_llama(dir: &std::path::Path) -> String {
    write_padded(dir, "tiny.gguf", &tiny_llama())
}

/// A writer's header written to `dir/name`, padded (sparse, at least 4 MiB) so the tensor data
/// its header promises is in the file; returns its path.
pub fn write_padded(dir: &std::path::Path, name: &str, w: &Writer) -> String {
    let path = dir.join(name);
    let bytes = w.bytes();
    let len = (4u64 << 20).max(bytes.len() as u64 + w.next_offset + 64);
    std::fs::write(&path, bytes).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(len).unwrap();
    path.display().to_string()
}

/// Llama-3-8B's projections as (name, input width, output width).
pub const LLAMA3_8B_PROJ: [(&str, u64, u64); 7] = [
    ("attn_q", 4096, 4096),
    ("attn_k", 4096, 1024),
    ("attn_v", 4096, 1024),
    ("attn_output", 4096, 4096),
    ("ffn_gate", 4096, 14336),
    ("ffn_up", 4096, 14336),
    ("ffn_down", 14336, 4096),
];

/// Meta-Llama-3-8B-Instruct in f16: every tensor with its real shape.
pub fn llama3_8b_f16() -> Writer {
    let mut w = Writer::default();
    w.decoder("llama", [32, 8192, 4096, 14336, 32, 8]).tokens(128_256);
    w.tensor("token_embd.weight", &[4096, 128_256], F16);
    for i in 0..32 {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[4096], F32);
        w.tensor(&format!("blk.{i}.ffn_norm.weight"), &[4096], F32);
        for (p, i_w, o_w) in LLAMA3_8B_PROJ {
            w.tensor(&format!("blk.{i}.{p}.weight"), &[i_w, o_w], F16);
        }
    }
    w.tensor("output_norm.weight", &[4096], F32);
    w.tensor("output.weight", &[4096, 128_256], F16);
    w
}

/// A LoRA adapter header for `arch`: `general.type` = `kind` (adapter), `adapter.type` lora.
pub fn lora_header(arch: &str, kind: &str) -> Writer {
    let mut w = Writer::default();
    w.str("general.architecture", arch).str("general.type", kind).str("adapter.type", "lora").f32("adapter.lora.alpha", 16.0);
    w
}

/// The adapter of ngxson/llama.cpp#9's log: rank 32, f16, Llama-3-8B's seven projections of
/// every layer and its output layer (450 tensors).
pub fn llama3_8b_lora_r32() -> Writer {
    let mut w = lora_header("llama", "adapter");
    for i in 0..32 {
        for (p, i_w, o_w) in LLAMA3_8B_PROJ {
            w.tensor(&format!("blk.{i}.{p}.weight.lora_a"), &[i_w, 32], F16);
            w.tensor(&format!("blk.{i}.{p}.weight.lora_b"), &[32, o_w], F16);
        }
    }
    w.tensor("output.weight.lora_a", &[4096, 32], F16);
    w.tensor("output.weight.lora_b", &[32, 128_256], F16);
    w
}
