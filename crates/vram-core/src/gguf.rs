//! GGUF (llama.cpp, Ollama) headers: metadata and tensor infos, never tensor data; and
//! llama.cpp's GPU memory for a context length and a number of offloaded layers.
//!
//! Layout (ggml/docs/gguf.md): magic `GGUF`, u32 version (2 or 3), u64 tensor count, u64
//! metadata count, the metadata key/values, then per tensor: name, u32 n_dims, u64 dims, u32
//! ggml type, u64 offset. All little-endian.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{Error, Result};

/// ggml's element types: (name, elements per block, bytes per block) by type id
/// (ggml/src/ggml.c `type_traits`, block structs in ggml-common.h).
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// `general.file_type` (llama.h `llama_ftype`): the quantisation mix a file was made with.
const FILE_TYPES: &[(u64, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

/// Name, elements per block and bytes per block of a ggml type id.
pub fn ggml_type(id: u32) -> Option<(&'static str, u64, u64)> {
    TYPES.iter().find(|t| t.0 == id).map(|t| (t.1, t.2, t.3))
}

/// Bytes of `numel` elements of ggml type `id`, or `None` for an unknown type or a count that
/// is not a whole number of blocks.
pub fn tensor_bytes(id: u32, numel: u64) -> Option<u64> {
    let (_, block, bytes) = ggml_type(id)?;
    if numel % block != 0 {
        return None;
    }
    (numel / block).checked_mul(bytes)
}

/// A metadata value. Arrays keep their length and, when numeric and short, their values.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MetaValue {
    /// Any integer type.
    Int(i128),
    /// float32 / float64.
    Float(f64),
    /// bool.
    Bool(bool),
    /// A string (truncated to 4096 bytes).
    Str(String),
    /// An array: its length and numeric values when it has at most 65536 integers.
    Array {
        /// Elements.
        len: u64,
        /// Integer values (empty for strings, floats or long arrays).
        ints: Vec<i128>,
    },
}

impl MetaValue {
    fn as_u64(&self) -> Option<u64> {
        match self {
            MetaValue::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }
}

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorInfo {
    /// Name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
    /// ggml type name.
    pub ggml_type: &'static str,
    /// Elements.
    pub numel: u64,
    /// Bytes in the file (exact per the type's block layout).
    pub bytes: u64,
}

/// A parsed GGUF header.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gguf {
    /// Format version.
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, MetaValue>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Bytes of the header (where tensor data begins, before alignment).
    pub header_bytes: u64,
}

/// Outcome of parsing a prefix of a file.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// The header is complete.
    Complete(Box<Gguf>),
    /// The bytes end inside the header: read more (at least this many in total) and retry.
    NeedMore(u64),
}

/// Largest element count of one array or string accepted (guards hostile headers).
const MAX_ITEMS: u64 = 1 << 28;

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    file: &'a str,
}

/// Truncation inside the header, distinct from malformed input.
enum Fail {
    Short(u64),
    Bad(Error),
}

type R<T> = std::result::Result<T, Fail>;

impl<'a> Reader<'a> {
    fn bad(&self, msg: String) -> Fail {
        Fail::Bad(Error::Gguf { file: self.file.into(), message: msg })
    }
    fn take(&mut self, n: u64) -> R<&'a [u8]> {
        let end = (self.pos as u64).checked_add(n).ok_or_else(|| self.bad("length overflows".into()))?;
        if end > self.b.len() as u64 {
            return Err(Fail::Short(end));
        }
        let s = &self.b[self.pos..end as usize];
        self.pos = end as usize;
        Ok(s)
    }
    fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn string(&mut self, keep: bool) -> R<String> {
        let n = self.u64()?;
        if n > MAX_ITEMS {
            return Err(self.bad(format!("a string claims {n} bytes")));
        }
        let s = self.take(n)?;
        Ok(if keep { String::from_utf8_lossy(&s[..s.len().min(4096)]).into_owned() } else { String::new() })
    }
    /// Scalar of GGUF value type `t`.
    fn scalar(&mut self, t: u32) -> R<MetaValue> {
        Ok(match t {
            0 => MetaValue::Int(self.take(1)?[0] as i128),
            1 => MetaValue::Int(self.take(1)?[0] as i8 as i128),
            2 => MetaValue::Int(u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i128),
            3 => MetaValue::Int(i16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i128),
            4 => MetaValue::Int(self.u32()? as i128),
            5 => MetaValue::Int(self.u32()? as i32 as i128),
            6 => MetaValue::Float(f32::from_le_bytes(self.take(4)?.try_into().expect("4")) as f64),
            7 => MetaValue::Bool(self.take(1)?[0] != 0),
            8 => MetaValue::Str(self.string(true)?),
            10 => MetaValue::Int(self.u64()? as i128),
            11 => MetaValue::Int(self.u64()? as i64 as i128),
            12 => MetaValue::Float(f64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            other => return Err(self.bad(format!("unknown metadata value type {other}"))),
        })
    }
    fn value(&mut self, t: u32, depth: u32) -> R<MetaValue> {
        if t != 9 {
            return self.scalar(t);
        }
        if depth > 2 {
            return Err(self.bad("arrays nested too deeply".into()));
        }
        let et = self.u32()?;
        let len = self.u64()?;
        if len > MAX_ITEMS {
            return Err(self.bad(format!("an array claims {len} elements")));
        }
        let mut ints = Vec::new();
        // Fixed-size element types are skipped in one step.
        let fixed = match et {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        };
        match fixed {
            Some(size) if len > 65_536 || et == 6 || et == 12 || et == 7 => {
                self.take(len * size)?;
            }
            _ => {
                for _ in 0..len {
                    if let MetaValue::Int(i) = self.value(et, depth + 1)? {
                        ints.push(i);
                    }
                }
            }
        }
        Ok(MetaValue::Array { len, ints })
    }
}

/// Parse the header in `bytes` (a prefix of the file is enough). `file` names it in errors.
pub fn parse(bytes: &[u8], file: &str) -> Result<Parsed> {
    let mut r = Reader { b: bytes, pos: 0, file };
    match parse_inner(&mut r) {
        Ok(g) => Ok(Parsed::Complete(Box::new(g))),
        Err(Fail::Short(n)) => Ok(Parsed::NeedMore(n)),
        Err(Fail::Bad(e)) => Err(e),
    }
}

fn parse_inner(r: &mut Reader) -> R<Gguf> {
    let magic = r.take(4)?;
    if magic != b"GGUF" {
        return Err(r.bad("not a GGUF file (the first four bytes are not `GGUF`)".into()));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(r.bad(format!("GGUF version {version} is not supported (2 and 3 are; convert with a recent llama.cpp)")));
    }
    let n_tensors = r.u64()?;
    let n_kv = r.u64()?;
    if n_tensors > 1 << 24 || n_kv > 1 << 24 {
        return Err(r.bad(format!("{n_tensors} tensors / {n_kv} metadata entries is not a real model")));
    }
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string(true)?;
        let t = r.u32()?;
        let v = r.value(t, 0)?;
        metadata.insert(key, v);
    }
    let mut tensors = Vec::with_capacity(n_tensors.min(1 << 16) as usize);
    for _ in 0..n_tensors {
        let name = r.string(true)?;
        let n_dims = r.u32()?;
        if n_dims == 0 || n_dims > 4 {
            return Err(r.bad(format!("tensor `{name}` has {n_dims} dimensions (ggml allows 1 to 4)")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut numel: u64 = 1;
        for _ in 0..n_dims {
            let d = r.u64()?;
            numel = numel.checked_mul(d).ok_or_else(|| r.bad(format!("tensor `{name}` dimensions overflow")))?;
            dims.push(d);
        }
        let t = r.u32()?;
        let _offset = r.u64()?;
        let (tname, _, _) = ggml_type(t).ok_or_else(|| r.bad(format!("tensor `{name}` has unknown ggml type {t}")))?;
        let bytes =
            tensor_bytes(t, numel).ok_or_else(|| r.bad(format!("tensor `{name}`: {numel} elements are not whole {tname} blocks")))?;
        tensors.push(TensorInfo { name, dims, ggml_type: tname, numel, bytes });
    }
    Ok(Gguf { version, metadata, tensors, header_bytes: r.pos as u64 })
}

impl Gguf {
    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        match self.metadata.get("general.architecture") {
            Some(MetaValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The quantisation mix (`Q4_K_M`) from `general.file_type`.
    pub fn file_type(&self) -> Option<&'static str> {
        let id = self.metadata.get("general.file_type")?.as_u64()?;
        FILE_TYPES.iter().find(|f| f.0 == id).map(|f| f.1)
    }

    fn arch_u64(&self, key: &str) -> Option<u64> {
        let arch = self.architecture()?;
        match self.metadata.get(&format!("{arch}.{key}"))? {
            MetaValue::Array { ints, .. } => ints.iter().copied().max().and_then(|i| u64::try_from(i).ok()),
            v => v.as_u64(),
        }
    }

    /// Total bytes of all tensors.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().fold(0u64, |a, t| a.saturating_add(t.bytes))
    }

    /// Bytes per ggml type, largest first.
    pub fn bytes_by_type(&self) -> Vec<(&'static str, u64)> {
        let mut m: BTreeMap<&'static str, u64> = BTreeMap::new();
        for t in &self.tensors {
            let e = m.entry(t.ggml_type).or_default();
            *e = e.saturating_add(t.bytes);
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }

    /// The hyper-parameters llama.cpp reads, with the key named when one is missing.
    pub fn hparams(&self, file: &str) -> Result<HParams> {
        let arch = self.architecture().ok_or_else(|| Error::Gguf { file: file.into(), message: "no general.architecture".into() })?;
        let need = |k: &str| {
            self.arch_u64(k).ok_or_else(|| Error::MissingKey {
                file: file.into(),
                key: format!("{arch}.{k}"),
                why: "plan llama.cpp's KV cache".into(),
            })
        };
        let layers = need("block_count")?;
        let embd = need("embedding_length")?;
        let heads = need("attention.head_count")?;
        let kv_heads = self.arch_u64("attention.head_count_kv").unwrap_or(heads);
        let head_k = self.arch_u64("attention.key_length").unwrap_or(embd.checked_div(heads).unwrap_or(0));
        let head_v = self.arch_u64("attention.value_length").unwrap_or(head_k);
        let vocab = self.arch_u64("vocab_size").or_else(|| match self.metadata.get("tokenizer.ggml.tokens") {
            Some(MetaValue::Array { len, .. }) => Some(*len),
            _ => None,
        });
        let dims = [embd, heads, kv_heads, head_k, head_v, self.arch_u64("feed_forward_length").unwrap_or(0)];
        if layers == 0 || layers > 10_000 || heads == 0 || embd == 0 || dims.iter().any(|&d| d > 1 << 24) {
            return Err(Error::Gguf {
                file: file.into(),
                message: format!("implausible dimensions: {layers} layers, {heads} heads, {embd} wide"),
            });
        }
        Ok(HParams {
            architecture: arch.to_string(),
            layers,
            embd,
            heads,
            kv_heads,
            head_k,
            head_v,
            ff: self.arch_u64("feed_forward_length").unwrap_or(4 * embd),
            vocab: vocab.unwrap_or(0),
            context_length: self.arch_u64("context_length").unwrap_or(0),
            sliding_window: self.arch_u64("attention.sliding_window").filter(|&w| w > 0),
        })
    }
}

/// The hyper-parameters of a GGUF model that memory depends on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HParams {
    /// `general.architecture`.
    pub architecture: String,
    /// Layers.
    pub layers: u64,
    /// Hidden width.
    pub embd: u64,
    /// Query heads.
    pub heads: u64,
    /// KV heads (the largest, when per layer).
    pub kv_heads: u64,
    /// Key head size.
    pub head_k: u64,
    /// Value head size.
    pub head_v: u64,
    /// Feed-forward width.
    pub ff: u64,
    /// Vocabulary.
    pub vocab: u64,
    /// Training context.
    pub context_length: u64,
    /// Sliding window, when the model has one.
    pub sliding_window: Option<u64>,
}

/// llama.cpp launch settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LlamaCppConfig {
    /// `--n-gpu-layers`: layers offloaded (the last ones); above the layer count the output
    /// layer goes too.
    pub n_gpu_layers: u64,
    /// `--ctx-size`.
    pub ctx: u64,
    /// `--ubatch-size`.
    pub ubatch: u64,
    /// `--parallel` sequences.
    pub parallel: u64,
    /// `--flash-attn`: no materialised attention scores.
    pub flash_attn: bool,
    /// Bytes per KV element (`--cache-type-k/v f16` = 2).
    pub kv_bytes: f64,
    /// CUDA context and cuBLAS per process.
    pub cuda_overhead: u64,
}

/// llama.cpp's memory on the GPU and the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaCppPlan {
    /// Layers on the GPU.
    pub gpu_layers: u64,
    /// Whether the output layer (LM head) is on the GPU.
    pub output_on_gpu: bool,
    /// Context after llama.cpp's padding.
    pub ctx: u64,
    /// Tokens each of the `--parallel` sequences can hold: they share the one context
    /// (llama-server `n_ctx_slot = n_ctx / n_parallel`).
    pub ctx_per_sequence: u64,
    /// Model weights in VRAM ("CUDA0 model buffer size").
    pub gpu_weights_bytes: u64,
    /// Model weights left in RAM ("CPU model buffer size"; includes the token embeddings).
    pub cpu_weights_bytes: u64,
    /// KV cache in VRAM ("CUDA0 KV buffer size").
    pub gpu_kv_bytes: u64,
    /// KV cache in RAM (layers not offloaded).
    pub cpu_kv_bytes: u64,
    /// Compute buffer in VRAM ("CUDA0 compute buffer size"), modelled.
    pub gpu_compute_bytes: u64,
    /// CUDA context and libraries.
    pub cuda_overhead_bytes: u64,
    /// Everything on the GPU.
    pub gpu_total_bytes: u64,
}

/// Plan llama.cpp's memory for `g` under `c`.
pub fn llama_cpp(g: &Gguf, hp: &HParams, c: &LlamaCppConfig) -> Result<LlamaCppPlan> {
    if c.ctx == 0 || c.ctx > 1 << 24 || c.ubatch == 0 || c.parallel == 0 || c.parallel > 4096 {
        return Err(Error::InvalidValue {
            what: "llama.cpp settings".into(),
            value: format!("ctx {} ubatch {} parallel {}", c.ctx, c.ubatch, c.parallel),
            hint: "ctx-size 1 to 16M, ubatch-size ≥ 1, parallel 1 to 4096".into(),
        });
    }
    let gpu_layers = c.n_gpu_layers.min(hp.layers);
    // llama.cpp offloads the last n layers; with n > n_layer the output layer too
    // (src/llama-model.cpp load_tensors: i_gpu_start = n_layer − n_gpu_layers).
    let first_gpu = hp.layers - gpu_layers;
    let output_on_gpu = c.n_gpu_layers > hp.layers;
    let (mut gw, mut cw) = (0u64, 0u64);
    for t in &g.tensors {
        let on_gpu = match layer_of(&t.name) {
            Some(i) => i >= first_gpu,
            // Token embeddings stay on the CPU (get_rows runs there); output and output_norm follow -ngl.
            None => output_on_gpu && !t.name.starts_with("token_embd"),
        };
        if on_gpu {
            gw = gw.saturating_add(t.bytes);
        } else {
            cw = cw.saturating_add(t.bytes);
        }
    }
    // n_ctx is padded to 256 (llama-context.cpp: GGML_PAD(n_ctx, 256)).
    let ctx = c.ctx.div_ceil(256) * 256;
    // KV cache per layer: ctx × (n_embd_k_gqa + n_embd_v_gqa) × type size (llama-kv-cache.cpp);
    // Every layer is planned at the full context, which is conservative for sliding-window models
    // (llama-kv-cache-iswa.cpp keeps min(ctx, window × n_seq + ubatch) there).
    let per_tok = (hp.kv_heads * (hp.head_k + hp.head_v)) as f64 * c.kv_bytes;
    let kv_layer = (ctx as f64 * per_tok) as u64;
    let gpu_kv = kv_layer.saturating_mul(gpu_layers);
    let cpu_kv = kv_layer.saturating_mul(first_gpu);
    // Compute buffer (ggml-alloc reserves the worst graph for one ubatch): f32 scores
    // [ctx, ubatch, heads] without flash attention, the FFN intermediates, and the output
    // logits [vocab, ubatch] when the output layer is on the GPU. A model, not a measurement.
    let u = c.ubatch.min(ctx) as f64;
    let attn = if c.flash_attn { u * (hp.heads * hp.head_k) as f64 * 4.0 } else { ctx as f64 * u * hp.heads as f64 * 4.0 };
    let ffn = 3.0 * u * hp.ff as f64 * 4.0;
    let logits = if output_on_gpu { u * hp.vocab as f64 * 4.0 } else { 0.0 };
    let compute = if gpu_layers == 0 && !output_on_gpu { 0 } else { (attn.max(ffn).max(logits) + 4.0 * u * hp.embd as f64 * 4.0) as u64 };
    let total = gw.saturating_add(gpu_kv).saturating_add(compute).saturating_add(c.cuda_overhead);
    Ok(LlamaCppPlan {
        gpu_layers,
        output_on_gpu,
        ctx,
        ctx_per_sequence: ctx / c.parallel,
        gpu_weights_bytes: gw,
        cpu_weights_bytes: cw,
        gpu_kv_bytes: gpu_kv,
        cpu_kv_bytes: cpu_kv,
        gpu_compute_bytes: compute,
        cuda_overhead_bytes: c.cuda_overhead,
        gpu_total_bytes: total,
    })
}

/// `blk.12.attn_q.weight` → 12.
fn layer_of(name: &str) -> Option<u64> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The longest context (a multiple of 256) that fits `budget` bytes of VRAM with `c`'s layers,
/// or `None` when even 256 tokens do not fit.
pub fn max_ctx(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, budget: u64, limit: u64) -> Result<Option<u64>> {
    let fits = |ctx: u64| -> Result<bool> { Ok(llama_cpp(g, hp, &LlamaCppConfig { ctx, ..*c })?.gpu_total_bytes <= budget) };
    if !fits(256)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, limit.max(256) / 256);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid * 256)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(Some(lo * 256))
}
