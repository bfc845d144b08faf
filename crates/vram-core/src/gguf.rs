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
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            MetaValue::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }
}

/// One tensor's header entry, stored inline (dimensions in a fixed array, no per-tensor
/// vector) so headers with hundreds of thousands of tensors stay small.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorInfo {
    /// Name (`blk.0.attn_q.weight`; ggml allows at most 63 bytes).
    pub name: String,
    /// Dimensions, innermost first; the first `n_dims` are meaningful, the rest 1.
    pub shape: [u64; 4],
    /// Number of dimensions (1 to 4).
    pub n_dims: u8,
    /// ggml type name.
    pub ggml_type: &'static str,
    /// Elements.
    pub numel: u64,
    /// Bytes in the file (exact per the type's block layout).
    pub bytes: u64,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Dimensions, innermost first.
    pub fn dims(&self) -> &[u64] {
        &self.shape[..self.n_dims as usize]
    }
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
    /// `general.alignment` (default 32): data starts and every tensor is padded to it.
    pub alignment: u64,
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
    /// A GGUF string's bytes, borrowed (nothing is allocated until a caller keeps it).
    fn str_bytes(&mut self) -> R<&'a [u8]> {
        let n = self.u64()?;
        if n > MAX_ITEMS {
            return Err(self.bad(format!("a string claims {n} bytes")));
        }
        self.take(n)
    }
    fn string(&mut self) -> R<String> {
        let s = self.str_bytes()?;
        Ok(String::from_utf8_lossy(&s[..s.len().min(4096)]).into_owned())
    }
    /// Skip a value of type `t` without allocating.
    fn skip(&mut self, t: u32, depth: u32) -> R<()> {
        match t {
            8 => {
                self.str_bytes()?;
            }
            9 => {
                let (et, len) = self.array_head(depth)?;
                self.skip_elements(et, len, depth)?;
            }
            _ => {
                let size = fixed_size(t).ok_or_else(|| self.bad(format!("unknown metadata value type {t}")))?;
                self.take(size)?;
            }
        }
        Ok(())
    }
    fn array_head(&mut self, depth: u32) -> R<(u32, u64)> {
        if depth > 2 {
            return Err(self.bad("arrays nested too deeply".into()));
        }
        let et = self.u32()?;
        let len = self.u64()?;
        if len > MAX_ITEMS {
            return Err(self.bad(format!("an array claims {len} elements")));
        }
        if fixed_size(et).is_none() && et != 8 && et != 9 {
            return Err(self.bad(format!("unknown metadata array element type {et}")));
        }
        Ok((et, len))
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
            8 => MetaValue::Str(self.string()?),
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
        let (et, len) = self.array_head(depth)?;
        // Integer and bool arrays up to 65536 long keep their values (per-layer head counts,
        // recurrent-layer flags as 0/1); the rest (token lists, scores, merges) are skipped
        // without allocating.
        if !matches!(et, 0..=5 | 7 | 10 | 11) || len > 65_536 {
            self.skip_elements(et, len, depth)?;
            return Ok(MetaValue::Array { len, ints: Vec::new() });
        }
        let mut ints = Vec::with_capacity(len as usize);
        for _ in 0..len {
            match self.scalar(et)? {
                MetaValue::Int(i) => ints.push(i),
                MetaValue::Bool(b) => ints.push(i128::from(b)),
                _ => {}
            }
        }
        Ok(MetaValue::Array { len, ints })
    }
    fn skip_elements(&mut self, et: u32, len: u64, depth: u32) -> R<()> {
        match fixed_size(et) {
            Some(size) => {
                self.take(len * size)?;
            }
            None => {
                for _ in 0..len {
                    self.skip(et, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

/// Bytes of a fixed-size GGUF value type (gguf.md `gguf_metadata_value_type`).
fn fixed_size(t: u32) -> Option<u64> {
    match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// Parse the header in `bytes` (a prefix of the file is enough). `file` names it in errors.
pub fn parse(bytes: &[u8], file: &str) -> Result<Parsed> {
    parse_with(bytes, file, None)
}

/// [`parse`]; with `file_len` (the whole file's size) the tensor data must fit in the file.
pub fn parse_with(bytes: &[u8], file: &str, file_len: Option<u64>) -> Result<Parsed> {
    let mut r = Reader { b: bytes, pos: 0, file };
    match parse_inner(&mut r) {
        Ok(g) => {
            if let Some(len) = file_len {
                g.check_file_len(len, file)?;
            }
            Ok(Parsed::Complete(Box::new(g)))
        }
        Err(Fail::Short(n)) => match file_len {
            Some(len) if n > len || bytes.len() as u64 >= len => Err(Error::Gguf {
                file: file.into(),
                message: format!("the file ends inside its header ({len} bytes, the header needs at least {n}): truncated download?"),
            }),
            _ => Ok(Parsed::NeedMore(n)),
        },
        Err(Fail::Bad(e)) => Err(e),
    }
}

/// Metadata kept from a header: `general.*`, the architecture's own keys and the tokenizer's
/// model and token count. Everything else (merges, scores, unknown keys) is skipped unread.
fn keep_key(key: &[u8], arch: Option<&[u8]>) -> bool {
    key.starts_with(b"general.")
        || key.starts_with(b"adapter.")
        || key == b"tokenizer.ggml.tokens"
        || key == b"tokenizer.ggml.model"
        || arch.is_some_and(|a| key.len() > a.len() && key.starts_with(a) && key[a.len()] == b'.')
}

/// Most metadata entries kept (real files have well under a hundred).
const MAX_KEPT_KEYS: usize = 1 << 16;
/// ggml's GGML_MAX_NAME: tensor names are shorter than 64 bytes (gguf.cpp refuses longer).
const MAX_NAME: usize = 64;
/// GGUF_DEFAULT_ALIGNMENT (gguf.h).
const DEFAULT_ALIGNMENT: u64 = 32;

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
    let metadata = read_metadata(r, n_kv)?;
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            v.as_u64().filter(|a| a.is_power_of_two()).ok_or_else(|| r.bad(format!("general.alignment {v:?} is not a power of two")))?
        }
    };
    let tensors = read_tensors(r, n_tensors, alignment)?;
    Ok(Gguf { version, metadata, tensors, header_bytes: r.pos as u64, alignment })
}

/// Two passes over the metadata: find `general.architecture`, then keep only what
/// [`keep_key`] selects, allocating nothing for the rest.
fn read_metadata(r: &mut Reader, n_kv: u64) -> R<BTreeMap<String, MetaValue>> {
    let start = r.pos;
    let mut arch = None;
    for _ in 0..n_kv {
        let key = r.str_bytes()?;
        let t = r.u32()?;
        if key == b"general.architecture" && t == 8 {
            arch = Some(r.str_bytes()?);
        } else {
            r.skip(t, 0)?;
        }
    }
    r.pos = start;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.str_bytes()?;
        let t = r.u32()?;
        if !keep_key(key, arch) {
            r.skip(t, 0)?;
            continue;
        }
        let shown = String::from_utf8_lossy(key).into_owned();
        let v = r.value(t, 0)?;
        if metadata.insert(shown.clone(), v).is_some() {
            return Err(r.bad(format!("metadata key `{shown}` appears twice")));
        }
        if metadata.len() > MAX_KEPT_KEYS {
            return Err(r.bad(format!("more than {MAX_KEPT_KEYS} general/architecture metadata keys: not a real model")));
        }
    }
    Ok(metadata)
}

/// Tensor infos, checked as gguf.cpp checks them: names under 64 bytes and unique, 1 to 4
/// dimensions, a known type in whole blocks, and data offsets in order, each tensor starting
/// where the previous one's data (padded to the alignment) ends.
fn read_tensors(r: &mut Reader, n_tensors: u64, alignment: u64) -> R<Vec<TensorInfo>> {
    let mut tensors = Vec::with_capacity(n_tensors.min(1 << 16) as usize);
    let mut expected = 0u64;
    for _ in 0..n_tensors {
        let raw = r.str_bytes()?;
        if raw.len() >= MAX_NAME {
            return Err(r.bad(format!("a tensor name is {} bytes; ggml allows at most {}", raw.len(), MAX_NAME - 1)));
        }
        let name = String::from_utf8_lossy(raw).into_owned();
        let n_dims = r.u32()?;
        if n_dims == 0 || n_dims > 4 {
            return Err(r.bad(format!("tensor `{name}` has {n_dims} dimensions (ggml allows 1 to 4)")));
        }
        let mut shape = [1u64; 4];
        let mut numel: u64 = 1;
        for d in shape.iter_mut().take(n_dims as usize) {
            *d = r.u64()?;
            // gguf.cpp keeps element counts below INT64_MAX.
            numel = numel
                .checked_mul(*d)
                .filter(|n| *n <= i64::MAX as u64)
                .ok_or_else(|| r.bad(format!("tensor `{name}` dimensions overflow")))?;
        }
        let t = r.u32()?;
        let offset = r.u64()?;
        let (tname, _, _) = ggml_type(t).ok_or_else(|| r.bad(format!("tensor `{name}` has unknown ggml type {t}")))?;
        let bytes =
            tensor_bytes(t, numel).ok_or_else(|| r.bad(format!("tensor `{name}`: {numel} elements are not whole {tname} blocks")))?;
        if offset != expected {
            return Err(r.bad(format!(
                "tensor `{name}` has data offset {offset}, expected {expected}: tensor data must follow in order without gaps or overlaps"
            )));
        }
        expected = bytes
            .checked_next_multiple_of(alignment)
            .and_then(|b| b.checked_add(offset))
            .ok_or_else(|| r.bad(format!("tensor `{name}`: data offsets overflow")))?;
        tensors.push(TensorInfo { name, shape, n_dims: n_dims as u8, ggml_type: tname, numel, bytes, offset });
    }
    let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(r.bad(format!("tensor `{}` appears twice", w[0])));
    }
    Ok(tensors)
}

impl Gguf {
    /// Check that the tensor data fits in a file of `file_len` bytes: data starts at the header
    /// end padded to the alignment, and the last tensor ends inside the file.
    pub fn check_file_len(&self, file_len: u64, file: &str) -> Result<()> {
        let data_start = self.header_bytes.checked_next_multiple_of(self.alignment);
        let end = self.tensors.last().map_or(Some(0), |t| t.offset.checked_add(t.bytes));
        let need = data_start.zip(end).and_then(|(a, b)| a.checked_add(b)).unwrap_or(u64::MAX);
        if need > file_len {
            return Err(Error::Gguf {
                file: file.into(),
                message: format!(
                    "tensor data runs past the end of the file (needs {need} bytes, the file has {file_len}): truncated download?"
                ),
            });
        }
        Ok(())
    }

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
        // State-space and hybrid models keep a per-sequence state beside (or instead of) a KV
        // cache, and their per-layer head counts say which layers are attention
        // (llama_recurrent.rs); a model without attention layers has no heads to need.
        if layers == 0 || layers > 10_000 {
            return Err(Error::Gguf { file: file.into(), message: format!("implausible dimensions: {layers} layers") });
        }
        let recurrent = crate::llama_recurrent::read(self, arch, layers, embd, file)?;
        let attention_free = recurrent.as_ref().is_some_and(|r| r.attention_layers == 0);
        let heads = if attention_free { self.arch_u64("attention.head_count").unwrap_or(0) } else { need("attention.head_count")? };
        let kv_heads = self.arch_u64("attention.head_count_kv").unwrap_or(heads);
        if kv_heads == 0 && !attention_free {
            return Err(Error::Gguf {
                file: file.into(),
                message: format!("`{arch}.attention.head_count_kv` is 0: attention needs at least one KV head (the file is corrupt)"),
            });
        }
        let head_k = self.arch_u64("attention.key_length").unwrap_or(embd.checked_div(heads).unwrap_or(0));
        let head_v = self.arch_u64("attention.value_length").unwrap_or(head_k);
        let vocab = self.arch_u64("vocab_size").or_else(|| match self.metadata.get("tokenizer.ggml.tokens") {
            Some(MetaValue::Array { len, .. }) => Some(*len),
            _ => None,
        });
        let dims = [embd, heads, kv_heads, head_k, head_v, self.arch_u64("feed_forward_length").unwrap_or(0)];
        if (heads == 0 && !attention_free) || embd == 0 || dims.iter().any(|&d| d > 1 << 24) {
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
            // A pure state-space model has no MLP (Mamba's mixer is the whole layer).
            ff: self.arch_u64("feed_forward_length").unwrap_or(if attention_free { 0 } else { 4 * embd }),
            vocab: vocab.unwrap_or(0),
            context_length: self.arch_u64("context_length").unwrap_or(0),
            sliding_window: match (arch, self.arch_u64("attention.sliding_window")) {
                // llama-model.cpp load_hparams, LLM_ARCH_LLAMA4: chunked attention of a literal
                // 8192 tokens unless the file sets the window to 0 (then none).
                ("llama4", Some(0)) => None,
                ("llama4", _) => Some(8192),
                (_, w) => w.filter(|&w| w > 0),
            },
            recurrent,
            moe: match (self.arch_u64("expert_count"), self.arch_u64("expert_used_count")) {
                (Some(experts), Some(used)) if experts > 0 && used > 0 && used <= experts && experts <= 1 << 16 => Some(Moe {
                    experts,
                    used,
                    // src/models/qwen3moe.cpp: n_ff_exp, else n_ff / n_expert_used.
                    ff: self
                        .arch_u64("expert_feed_forward_length")
                        .filter(|&f| f > 0 && f <= 1 << 24)
                        .unwrap_or(self.arch_u64("feed_forward_length").unwrap_or(0) / used),
                }),
                _ => None,
            },
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
    /// The recurrent state of a state-space or hybrid model, and which layers have a KV cache.
    pub recurrent: Option<crate::llama_recurrent::Recurrent>,
    /// The routed experts of a mixture-of-experts model.
    pub moe: Option<Moe>,
}

/// A mixture-of-experts model's routed experts (`{arch}.expert_count`, `.expert_used_count`,
/// `.expert_feed_forward_length`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Moe {
    /// Experts per layer.
    pub experts: u64,
    /// Experts each token uses.
    pub used: u64,
    /// One expert's feed-forward width.
    pub ff: u64,
}

/// Architectures whose sliding-window layers llama.cpp sizes by the window, and their pattern
/// (src/llama-model.cpp load_hparams `set_swa_pattern(n)`: layer il is sliding-window when
/// il % n < n − 1): Gemma 2 and gpt-oss alternate, Gemma 3 has 5 sliding layers to 1 global,
/// Command R7B (cohere2) 3 to 1, Llama 4 3 chunked layers to 1 full (its chunks are cached as a
/// window is: llama-kv-cache-iswa.cpp sizes both alike). Other architectures keep every layer at
/// the full context, which over-counts where llama.cpp knows a pattern vram does not.
const SWA_PATTERNS: &[(&str, u64)] = &[("gemma2", 2), ("gemma3", 6), ("gpt-oss", 2), ("cohere2", 4), ("llama4", 4)];

impl HParams {
    /// Whether layer `il` is a sliding-window layer as llama.cpp sizes it.
    pub fn is_swa_layer(&self, il: u64) -> bool {
        self.sliding_window.is_some() && SWA_PATTERNS.iter().find(|(a, _)| *a == self.architecture).is_some_and(|(_, n)| il % n < n - 1)
    }
}

/// llama.cpp launch settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LlamaCppConfig {
    /// `--n-gpu-layers`: the last N of the layers and the output, which llama.cpp counts as the
    /// last layer ([`first_gpu_layer`]).
    pub n_gpu_layers: u64,
    /// `--ctx-size`.
    pub ctx: u64,
    /// `--ubatch-size`.
    pub ubatch: u64,
    /// `--parallel` sequences.
    pub parallel: u64,
    /// One KV cache shared by all sequences (`--kv-unified`; llama-server turns it on with its
    /// default of 4 slots, llama.cpp PR #16736): each may fill the whole context, and a
    /// sliding-window layer holds window × sequences + ubatch cells. Otherwise each sequence has
    /// its own stream of ctx / parallel cells and its own window (llama-kv-cache-iswa.cpp).
    pub unified: bool,
    /// `--flash-attn`: no materialised attention scores.
    pub flash_attn: bool,
    /// Bytes per KV element (`--cache-type-k/v f16` = 2).
    pub kv_bytes: f64,
    /// CUDA context and cuBLAS per process.
    pub cuda_overhead: u64,
    /// A multimodal projector's weights on the GPU (`--mmproj FILE`: llama-server loads the vision
    /// encoder there unless `--no-mmproj-offload`, tools/mtmd/clip.cpp); 0 without one.
    pub projector_bytes: u64,
    /// The vision encoder's compute buffer on the GPU beside its weights (clip.cpp's warm-up
    /// reserve, `crate::clip_buffer`); 0 without `--mmproj` or with `--no-mmproj-offload`.
    pub projector_compute_bytes: u64,
    /// Its buffer in host memory: the graph's inputs, or the whole graph under
    /// `--no-mmproj-offload`.
    pub projector_host_bytes: u64,
    /// Weights in RAM are mapped from the file (llama.cpp's default; `--no-mmap` reads them into
    /// allocated memory instead).
    pub mmap: bool,
    /// `--mlock`: the weights in RAM are locked there (never paged out).
    pub mlock: bool,
    /// `--swa-full`: sliding-window layers cache the whole context, as full-attention layers do
    /// (llama-kv-cache-iswa.cpp: "using full-size SWA cache", `size_swa = size_base`).
    pub swa_full: bool,
    /// Op offload (llama.cpp's default; `--no-op-offload` turns it off): a prompt's products
    /// with weights left in RAM run on the GPU from a copy in its compute buffer
    /// (common/common.cpp `cparams.op_offload`, ggml-backend.cpp).
    pub op_offload: bool,
}

impl LlamaCppConfig {
    /// llama.cpp's defaults for one sequence (`-c 4096 -ub 512 -np 1 -fa on`, f16 KV) with every
    /// layer offloaded (`-ngl 999`) and no CUDA context counted (callers add their own).
    pub const ONE_SEQUENCE: LlamaCppConfig = LlamaCppConfig {
        n_gpu_layers: 999,
        ctx: 4096,
        ubatch: 512,
        parallel: 1,
        unified: true,
        flash_attn: true,
        kv_bytes: 2.0,
        cuda_overhead: 0,
        projector_bytes: 0,
        projector_compute_bytes: 0,
        projector_host_bytes: 0,
        mmap: true,
        mlock: false,
        swa_full: false,
        op_offload: true,
    };

    /// llama.cpp's default logical batch, `--batch-size/-b` (common/common.h `n_batch = 2048`).
    pub const DEFAULT_BATCH: u64 = 2048;

    /// The micro-batch llama.cpp runs for `-ub` and `-b` (`None` = its default): llama-context.cpp
    /// takes n_batch = min(n_ctx, -b) and n_ubatch = min(n_batch, -ub); the context bound is
    /// applied where the plan knows the context.
    pub fn micro_batch(ubatch: u64, batch: Option<u64>) -> u64 {
        ubatch.min(batch.unwrap_or(Self::DEFAULT_BATCH))
    }
}

impl Default for LlamaCppConfig {
    /// [`LlamaCppConfig::ONE_SEQUENCE`].
    fn default() -> Self {
        Self::ONE_SEQUENCE
    }
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
    /// Weights that -ngl alone would put on the GPU but the overrides (`--n-cpu-moe`,
    /// `--cpu-moe`, `-ot …=CPU`) keep in RAM; included in `cpu_weights_bytes`.
    pub overridden_to_cpu_bytes: u64,
    /// Weights that -ngl alone would leave in RAM but `-ot …=CUDA0` puts on the GPU.
    pub overridden_to_gpu_bytes: u64,
    /// Tensors an override matched.
    pub overridden_tensors: u64,
    /// KV cache in VRAM ("CUDA0 KV buffer size").
    pub gpu_kv_bytes: u64,
    /// KV cache in RAM (layers not offloaded).
    pub cpu_kv_bytes: u64,
    /// Recurrent state in VRAM of a state-space or hybrid model ("CUDA0 RS buffer size").
    pub gpu_state_bytes: u64,
    /// Recurrent state in RAM (layers not offloaded).
    pub cpu_state_bytes: u64,
    /// Compute buffer in VRAM ("CUDA0 compute buffer size"), modelled.
    pub gpu_compute_bytes: u64,
    /// `--lora` adapters' matrices in VRAM ("CUDA0 LoRA buffer size"): those of the tensors on
    /// the GPU.
    pub gpu_lora_bytes: u64,
    /// What the adapters' products may add to the compute buffer: a bound, not measured
    /// ([`crate::llama_lora::product_bound`]); 0 without adapters.
    pub gpu_lora_compute_bytes: u64,
    /// CUDA context and libraries.
    pub cuda_overhead_bytes: u64,
    /// Everything on the GPU.
    pub gpu_total_bytes: u64,
    /// What the process holds in RAM.
    pub host: HostMemory,
}

/// llama.cpp's memory in RAM (the process's host side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostMemory {
    /// Weights in RAM as llama.cpp holds them. Mapped (the default): the file's span from the
    /// first to the end of the last tensor kept on the CPU, GPU tensors between them included —
    /// llama.cpp maps that range as one buffer ("CPU_Mapped model buffer size") and unmaps the
    /// rest after loading (llama-model-loader.cpp `load_all_data`: `mmaps_used`,
    /// `unmap_fragment`). `--no-mmap`: the CPU tensors' own bytes, read into allocated memory.
    pub weights_bytes: u64,
    /// Whether `weights_bytes` is file-backed page cache (mmap) rather than allocated memory.
    pub weights_mapped: bool,
    /// Bytes `--mlock` pins in RAM (the weights' buffer; 0 without it).
    pub locked_bytes: u64,
    /// KV cache and recurrent state of the layers left on the CPU.
    pub kv_state_bytes: u64,
    /// The logits buffer ("CUDA_Host output buffer size"): n_vocab f32 per sequence
    /// (llama-context.cpp `output_reserve`: n_outputs_max = max(n_outputs, n_seq_max)).
    pub output_bytes: u64,
    /// The host side of the compute graph ("CUDA_Host compute buffer size"): its inputs — the
    /// token embeddings' rows, [n_embd, ubatch] f32, looked up on the CPU, and each KQ mask,
    /// [KV cells of a stream, ubatch], f16 under flash attention, else f32.
    pub compute_bytes: u64,
    /// Whether `compute_bytes` is the whole host compute buffer: false when layers or experts
    /// run on the CPU, whose own graph buffers are not modelled (it is then a lower bound).
    pub compute_exact: bool,
    /// `--lora` adapters' matrices of the tensors kept in RAM, read into allocated memory (the
    /// adapter file is not mapped).
    pub lora_bytes: u64,
    /// Everything above.
    pub total_bytes: u64,
}

/// Plan llama.cpp's memory for `g` under `c`, with no tensor overrides.
pub fn llama_cpp(g: &Gguf, hp: &HParams, c: &LlamaCppConfig) -> Result<LlamaCppPlan> {
    llama_cpp_with(g, hp, c, &Overrides::default())
}

/// Plan llama.cpp's memory for `g` under `c` and the tensor overrides `o`
/// (`-ot`, `--n-cpu-moe`, `--cpu-moe`).
pub fn llama_cpp_with(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, o: &Overrides) -> Result<LlamaCppPlan> {
    if c.ctx == 0 || c.ctx > 1 << 24 || c.ubatch == 0 || c.parallel == 0 || c.parallel > 4096 {
        return Err(Error::InvalidValue {
            what: "llama.cpp settings".into(),
            value: format!("ctx {} ubatch {} parallel {}", c.ctx, c.ubatch, c.parallel),
            hint: "ctx-size 1 to 16M, ubatch-size ≥ 1, parallel 1 to 4096".into(),
        });
    }
    let first_gpu = first_gpu_layer(hp.layers, c.n_gpu_layers);
    let gpu_layers = hp.layers - first_gpu;
    let output_on_gpu = c.n_gpu_layers >= 1;
    let w = place_weights(g, o, first_gpu, output_on_gpu)?;
    // n_ctx is padded to 256 (llama-context.cpp: GGML_PAD(n_ctx, 256)).
    let ctx = c.ctx.div_ceil(256) * 256;
    // KV cache per layer: ctx × (n_embd_k_gqa + n_embd_v_gqa) × type size (llama-kv-cache.cpp);
    // it follows the layer's device (llama-kv-cache.cpp `model.dev_layer(il)`), never -ot.
    let gpu_kv = kv_layers_bytes(hp, c, ctx, first_gpu, hp.layers);
    let cpu_kv = kv_layers_bytes(hp, c, ctx, 0, first_gpu);
    let state = |from: u64, to: u64| (from..to).fold(0u64, |a, il| a.saturating_add(state_layer_bytes(hp, c, il)));
    let (gpu_state, cpu_state) = (state(first_gpu, hp.layers), state(0, first_gpu));
    let compute = if gpu_layers == 0 && !output_on_gpu { 0 } else { compute_buffer_bytes(hp, c, ctx, output_on_gpu, w.cpu_down_exps) };
    let ub = c.ubatch.min(ctx);
    let lora = crate::llama_lora::place(&o.lora, 1, hp, ub, logits_rows(c, ub), |name| {
        let (by_layer, forced) = placement(name, o, first_gpu, output_on_gpu)?;
        Ok(forced.unwrap_or(by_layer).then_some(0))
    })?;
    let (gpu_lora, gpu_lora_compute) = (lora.gpu_bytes[0], lora.gpu_compute_bytes[0]);
    let total = w
        .gpu
        .saturating_add(gpu_lora)
        .saturating_add(gpu_lora_compute)
        .saturating_add(gpu_kv)
        .saturating_add(gpu_state)
        .saturating_add(compute)
        .saturating_add(c.cuda_overhead)
        .saturating_add(c.projector_bytes)
        .saturating_add(c.projector_compute_bytes);
    // The CPU runs graph work of its own when a layer or an override's tensor stays there
    // (the token embeddings' lookup aside).
    let cpu_compute = first_gpu > 0 || w.to_cpu > 0 || !output_on_gpu;
    let host = host_memory(hp, c, ctx, &w, cpu_kv.saturating_add(cpu_state), cpu_compute, lora.cpu_bytes);
    Ok(LlamaCppPlan {
        host,
        gpu_layers,
        output_on_gpu,
        ctx,
        ctx_per_sequence: if c.unified { ctx } else { ctx / c.parallel },
        gpu_weights_bytes: w.gpu,
        cpu_weights_bytes: w.cpu,
        overridden_to_cpu_bytes: w.to_cpu,
        overridden_to_gpu_bytes: w.to_gpu,
        overridden_tensors: w.overridden,
        gpu_kv_bytes: gpu_kv,
        cpu_kv_bytes: cpu_kv,
        gpu_state_bytes: gpu_state,
        cpu_state_bytes: cpu_state,
        gpu_compute_bytes: compute,
        gpu_lora_bytes: gpu_lora,
        gpu_lora_compute_bytes: gpu_lora_compute,
        cuda_overhead_bytes: c.cuda_overhead,
        gpu_total_bytes: total,
    })
}

/// What a llama.cpp process holds on a GPU beyond its buffers (model, KV, compute): the CUDA
/// context, cuBLAS and ggml-cuda's memory pool once a prompt has run. Measured on an H200
/// (driver 580, CUDA 13.0; validation/llamacpp/h200/runs.jsonl, nvidia-smi per process less the
/// log's CUDA0 buffers): 587–595 MiB after the warm-up in all 19 launches, 600–620 MiB after a
/// 2,004-token prompt with a dense model, 697–704 MiB with routed experts (the pool grows for
/// their matrix products), 750 MiB with flash attention off (one launch, not applied here).
pub fn llama_cuda_overhead(hp: &HParams) -> u64 {
    if hp.moe.is_some() {
        LLAMA_CUDA_OVERHEAD_MOE
    } else {
        LLAMA_CUDA_OVERHEAD
    }
}

/// [`llama_cuda_overhead`] of a dense model: the largest after-prompt figure of the dense
/// launches, 600 MiB (Gemma 3's 610–620 included under the 2% the tests allow).
pub const LLAMA_CUDA_OVERHEAD: u64 = 600 << 20;

/// [`llama_cuda_overhead`] with routed experts: the largest after-prompt figure of the MoE
/// launches (697–704 MiB).
pub const LLAMA_CUDA_OVERHEAD_MOE: u64 = 704 << 20;

/// Whether op offload copies this RAM tensor to the GPU for a prompt, as
/// [`compute_buffer_bytes`] counts it: a down-projection expert tensor (the largest of a
/// layer's three; ggml-backend.cpp copies each MoE weight in its own split).
pub(crate) fn is_offloaded_expert(name: &str) -> bool {
    name.contains("ffn_down_exps")
}

/// The logits of a whole ubatch beyond llama-server's one row per slot: what llama.cpp builds
/// before `n_outputs_max` added to the compute buffer of the GPU holding the output (see
/// [`compute_buffer_bytes`]'s output phase).
pub fn whole_ubatch_logits_extra(hp: &HParams, c: &LlamaCppConfig, ctx: u64) -> u64 {
    let u = c.ubatch.min(ctx);
    u.saturating_sub(logits_rows(c, u)).saturating_mul(hp.vocab).saturating_mul(4)
}

/// The logits rows llama-server reserves for a ubatch of `u` tokens: one per slot
/// (tools/server/server-context.cpp `server_output_limits`, without speculative decoding).
pub(crate) fn logits_rows(c: &LlamaCppConfig, u: u64) -> u64 {
    u.min(c.parallel.max(1))
}

/// What the process holds when llama.cpp measures the GPU's free memory before loading (for
/// `--fit` and the default `--tensor-split`): the CUDA context alone. Measured: 526 MiB in all
/// 19 H200 launches (the log's "CUDA0 (143155 MiB, 142629 MiB free)", validation/llamacpp/h200).
pub const LLAMA_CUDA_CONTEXT_AT_LOAD: u64 = 526 << 20;

/// The first repeating layer `-ngl n` puts on the GPU. llama.cpp counts the output layer as
/// layer `n_layer` and offloads the last `n` of the `n_layer + 1` (src/llama-model.cpp
/// load_tensors: `i_gpu_start = max(n_layer + 1 − n_gpu_layers, 0)`): `-ngl 20` of a 32-layer
/// model is the output and 19 layers ("offloading 19 repeating layers", H200 log
/// validation/llamacpp/h200/logs/llama-ngl20.log), and any `-ngl ≥ 1` offloads the output.
pub fn first_gpu_layer(n_layer: u64, n_gpu_layers: u64) -> u64 {
    (n_layer + 1).saturating_sub(n_gpu_layers).min(n_layer)
}

/// KV cache of layer `il` at padded context `ctx`: cells × (n_embd_k_gqa + n_embd_v_gqa) × type
/// size (llama-kv-cache.cpp), where a sliding-window layer holds only
/// GGML_PAD(min(ctx, n_swa × n_seq + n_ubatch), 256) cells with a unified KV cache
/// (n_seq = --parallel), or n_seq streams of GGML_PAD(min(ctx / n_seq, n_swa + n_ubatch), 256)
/// without (llama-kv-cache-iswa.cpp).
pub fn kv_layer_bytes(hp: &HParams, c: &LlamaCppConfig, ctx: u64, il: u64) -> u64 {
    (kv_layer_cells(hp, c, ctx, il) as f64 * (hp.kv_heads * (hp.head_k + hp.head_v)) as f64 * c.kv_bytes) as u64
}

/// KV cells of layer `il`, over all its streams (see [`kv_layer_bytes`]); 0 for a layer with a
/// recurrent state instead.
fn kv_layer_cells(hp: &HParams, c: &LlamaCppConfig, ctx: u64, il: u64) -> u64 {
    if hp.recurrent.as_ref().is_some_and(|r| !r.has_kv(il)) {
        return 0;
    }
    match hp.sliding_window.filter(|_| !c.swa_full && hp.is_swa_layer(il)) {
        Some(w) if c.unified => w.saturating_mul(c.parallel).saturating_add(c.ubatch).min(ctx).div_ceil(256).saturating_mul(256),
        // One stream per sequence, each of min(ctx / n_seq, window + ubatch) cells, padded.
        Some(w) => w.saturating_add(c.ubatch).min(ctx / c.parallel.max(1)).div_ceil(256).saturating_mul(256).saturating_mul(c.parallel),
        None => ctx,
    }
}

/// The recurrent state of layer `il` (0 for an attention layer or a model without one): one f32
/// state per `--parallel` sequence, on the layer's device (llama_recurrent.rs).
pub fn state_layer_bytes(hp: &HParams, c: &LlamaCppConfig, il: u64) -> u64 {
    hp.recurrent.as_ref().map_or(0, |r| r.layer_bytes(il, c.parallel))
}

/// KV bytes of layers `from..to` (see [`kv_layer_bytes`]).
pub fn kv_layers_bytes(hp: &HParams, c: &LlamaCppConfig, ctx: u64, from: u64, to: u64) -> u64 {
    (from..to).fold(0u64, |a, il| a.saturating_add(kv_layer_bytes(hp, c, ctx, il)))
}

/// One KQ mask, [cells, ubatch]: f16 under flash attention, f32 otherwise (llama-graph.cpp
/// `build_attn_inp_kq_mask`); a graph input every device running attention copies per ubatch.
pub(crate) fn kq_mask_bytes(cells: u64, ubatch: u64, flash_attn: bool) -> u64 {
    cells.saturating_mul(ubatch).saturating_mul(if flash_attn { 2 } else { 4 })
}

/// One hidden state of a ubatch, [n_embd, ubatch] f32 (the layer input, llama-graph.cpp
/// `build_inp_embd`).
pub(crate) fn hidden_bytes(embd: u64, ubatch: u64) -> u64 {
    embd.saturating_mul(ubatch).saturating_mul(4)
}

/// The compute buffer of one GPU at padded context `ctx`: ggml-alloc reserves the worst graph
/// for one ubatch of `u` tokens and reuses a tensor's memory once its last consumer has run, so
/// the buffer is the graph inputs (the KQ masks, alive throughout) plus the largest set of
/// tensors alive at once, in one of these phases (src/llama-graph.cpp):
/// - attention (`build_attn_mha`): without flash attention the f32 scores [ctx, u, n_head]
///   (`ggml_soft_max_ext` runs in place) and 4 hidden states; under flash attention 4 states of
///   the query's width, and, where the KV cache is not f16, ggml-cuda's f16 copies of the K and V
///   of every cell, which the MMA/tile kernels that run a prompt need and
///   `ggml_cuda_flash_attn_ext_get_alloc_size` (ggml-cuda/fattn.cu) adds to the op's own size;
/// - feed-forward: gate, up and their product [n_ff, u] f32 and 3 hidden states; for routed
///   experts one expert width per used expert and two hidden states per used expert (the
///   experts' outputs and their weighted sum, src/llama-graph.cpp `build_moe_ffn`) and two
///   hidden states; when a GPU layer's experts are in RAM (`-ot exps=CPU`, `--n-cpu-moe`),
///   ggml-backend's op offload copies the down-projection experts of the layer to the GPU for a
///   prompt (`cpu_expert_copy`: the largest such tensor), beside one used-expert hidden state;
/// - output, on the GPU holding the output layer: the logits of `min(u, --parallel)` rows
///   (llama-server reserves one output per slot, `n_outputs_max`, tools/server/server-context.cpp
///   `server_output_limits`) and the normed hidden state.
///
/// Checked against llama-server on an H200 (validation/llamacpp/h200, 19 launches of four
/// models): the dense and routed-expert terms, the f16 K/V copies and the one-row-per-slot
/// logits are the graph's tensors whose sizes make those buffers; the dense ones are exact to
/// 0.5 MiB on Llama 3.1 8B and Gemma 3 12B, the routed ones exact on Qwen3-30B-A3B and 8 MiB
/// (−4%) under gpt-oss-20b. The "4 hidden states" of attention without flash attention make
/// Mistral-7B-v0.2's buffers at n_ctx 2048 and 32768 exact (fedora-copr/logdetective#106).
pub fn compute_buffer_bytes(hp: &HParams, c: &LlamaCppConfig, ctx: u64, with_output: bool, cpu_expert_copy: u64) -> u64 {
    let ub = c.ubatch.min(ctx);
    let u = ub as f64;
    let f = |x: u64| x as f64 * u * 4.0;
    // `--no-op-offload`: the CPU multiplies by its own experts, and no copy comes to the GPU.
    let cpu_expert_copy = if c.op_offload { cpu_expert_copy } else { 0 };
    let hidden = hidden_bytes(hp.embd, ub) as f64;
    let has_attention = hp.recurrent.as_ref().is_none_or(|r| r.attention_layers > 0);
    let masks = if has_attention { kq_masks_bytes(hp, c, ctx, ub) as f64 } else { 0.0 };
    let attn = if !has_attention {
        0.0
    } else if c.flash_attn {
        // The f16 copies of one layer's K and V over its cells (the layer with the most).
        let cells = (0..hp.layers).map(|il| kv_layer_cells(hp, c, ctx, il)).max().unwrap_or(0);
        // f16 is the one 2-byte KV type vram accepts (the others: f32, q8_0, q4_0).
        let kv16 = if c.kv_bytes == 2.0 { 0.0 } else { cells as f64 * (hp.kv_heads * (hp.head_k + hp.head_v)) as f64 * 2.0 };
        kv16 + 4.0 * f(hp.embd.max(hp.heads.saturating_mul(hp.head_k)))
    } else {
        ctx as f64 * u * hp.heads as f64 * 4.0 + 4.0 * hidden
    };
    let dense = 3.0 * f(hp.ff) + 3.0 * hidden;
    let ffn = match hp.moe {
        Some(m) => {
            let routed = f(m.used.saturating_mul(m.ff)) + 2.0 * f(m.used.saturating_mul(hp.embd)) + 2.0 * hidden;
            let offloaded = if cpu_expert_copy > 0 {
                cpu_expert_copy as f64 + f(m.used.saturating_mul(m.ff)) + f(m.used.saturating_mul(hp.embd)) + 2.0 * hidden
            } else {
                0.0
            };
            routed.max(offloaded).max(dense)
        }
        None => dense,
    };
    let rows = logits_rows(c, ub);
    let output = if with_output { (rows * hp.vocab) as f64 * 4.0 + hidden } else { 0.0 };
    // A state-space or hybrid model's mixer layers (llama_recurrent.rs; modelled, not checked).
    let mixer = hp.recurrent.as_ref().map_or(0.0, |r| r.mixer_phase_bytes(ub, c.parallel, hp.embd) as f64);
    (masks + attn.max(ffn).max(output).max(mixer)) as u64
}

/// The KQ masks of one ubatch: one per attention kind present (full; sliding window,
/// llama-graph.cpp `build_attn_inp_kv_iswa`), each over a stream's cells,
/// [n_kv, ubatch / streams, 1, streams] (`build_attn_inp_kq_mask`).
fn kq_masks_bytes(hp: &HParams, c: &LlamaCppConfig, ctx: u64, u: u64) -> u64 {
    let streams = if c.unified { 1 } else { c.parallel.max(1) };
    let cells_of = |swa: bool| (0..hp.layers).find(|&il| hp.is_swa_layer(il) == swa && kv_layer_cells(hp, c, ctx, il) > 0);
    [cells_of(false), cells_of(true)]
        .into_iter()
        .flatten()
        .fold(0u64, |a, il| a.saturating_add(kq_mask_bytes(kv_layer_cells(hp, c, ctx, il) / streams, u, c.flash_attn)))
}

/// The host side of a plan (see [`HostMemory`]).
fn host_memory(hp: &HParams, c: &LlamaCppConfig, ctx: u64, w: &Placed, kv_state: u64, cpu_compute: bool, lora: u64) -> HostMemory {
    let weights = match (c.mmap, w.cpu_span) {
        (true, Some((first, end))) => end - first,
        (true, None) => 0,
        (false, _) => w.cpu,
    };
    let output = hp.vocab.saturating_mul(c.parallel).saturating_mul(4);
    let u = c.ubatch.min(ctx);
    let compute = kq_masks_bytes(hp, c, ctx, u).saturating_add(hidden_bytes(hp.embd, u));
    let locked = if c.mlock { weights } else { 0 };
    // The vision encoder's buffer in RAM (`--mmproj`: its graph inputs, or all of it under
    // `--no-mmproj-offload`) is its own row.
    let total = [weights, kv_state, output, compute, c.projector_host_bytes, lora].iter().fold(0u64, |a, b| a.saturating_add(*b));
    HostMemory {
        weights_bytes: weights,
        weights_mapped: c.mmap,
        locked_bytes: locked,
        kv_state_bytes: kv_state,
        output_bytes: output,
        compute_bytes: compute,
        compute_exact: !cpu_compute,
        lora_bytes: lora,
        total_bytes: total,
    }
}

/// Weight bytes by device, and what the overrides moved.
#[derive(Default)]
struct Placed {
    gpu: u64,
    cpu: u64,
    to_cpu: u64,
    to_gpu: u64,
    overridden: u64,
    /// The file range the CPU tensors span: (first offset, last end), data-section relative.
    cpu_span: Option<(u64, u64)>,
    /// The largest down-projection expert tensor left in RAM by an override while its layer is
    /// on the GPU (see [`compute_buffer_bytes`]'s op offload copy).
    cpu_down_exps: u64,
}

/// Place every tensor: an override decides when one matches, else the layer rule of -ngl.
fn place_weights(g: &Gguf, o: &Overrides, first_gpu: u64, output_on_gpu: bool) -> Result<Placed> {
    let mut p = Placed::default();
    for t in &g.tensors {
        let (by_layer, forced) = placement(&t.name, o, first_gpu, output_on_gpu)?;
        let on_gpu = match forced {
            Some(forced) => {
                p.overridden += 1;
                match (by_layer, forced) {
                    (true, false) => p.to_cpu = p.to_cpu.saturating_add(t.bytes),
                    (false, true) => p.to_gpu = p.to_gpu.saturating_add(t.bytes),
                    _ => {}
                }
                forced
            }
            None => by_layer,
        };
        if on_gpu {
            p.gpu = p.gpu.saturating_add(t.bytes);
        } else {
            if by_layer && is_offloaded_expert(&t.name) {
                p.cpu_down_exps = p.cpu_down_exps.max(t.bytes);
            }
            p.cpu = p.cpu.saturating_add(t.bytes);
            let end = t.offset.saturating_add(t.bytes);
            p.cpu_span = Some(p.cpu_span.map_or((t.offset, end), |(a, b)| (a.min(t.offset), b.max(end))));
        }
    }
    if output_on_gpu {
        p.gpu = p.gpu.saturating_add(tied_output_bytes(g));
    }
    Ok(p)
}

/// Where one-GPU placement puts a tensor named `name`: (on the GPU by -ngl's layer rule, on the
/// GPU by an override if one matches).
fn placement(name: &str, o: &Overrides, first_gpu: u64, output_on_gpu: bool) -> Result<(bool, Option<bool>)> {
    let by_layer = match layer_of(name) {
        Some(i) => i >= first_gpu,
        // Token embeddings stay on the CPU (get_rows runs there); output and output_norm follow -ngl.
        None => output_on_gpu && !name.starts_with("token_embd"),
    };
    // Any GPU is the GPU here: the split plan places CUDAn, and the CLI refuses a CUDAn (n ≥ 1)
    // with one GPU.
    Ok((by_layer, o.device_of(name)?.map(|f| f != Forced::Cpu)))
}

/// A file without `output.weight` ties the LM head to the token embeddings: llama.cpp then
/// loads `token_embd.weight` a second time as the output layer, on the output layer's device
/// (src/llama-model.cpp load_tensors: "if output is NULL, init from the input tok embed",
/// `TENSOR_DUPLICATED`). Bytes of that second copy; 0 when the file has its own output.
pub fn tied_output_bytes(g: &Gguf) -> u64 {
    if g.tensors.iter().any(|t| t.name == "output.weight") {
        return 0;
    }
    g.tensors.iter().find(|t| t.name == "token_embd.weight").map_or(0, |t| t.bytes)
}

/// `blk.12.attn_q.weight` → 12.
pub fn layer_of(name: &str) -> Option<u64> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The longest context (a multiple of 256) that fits `budget` bytes of VRAM with `c`'s layers,
/// or `None` when even 256 tokens do not fit.
pub fn max_ctx(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, budget: u64, limit: u64) -> Result<Option<u64>> {
    max_ctx_with(g, hp, c, &Overrides::default(), budget, limit)
}

/// [`max_ctx`] with the tensor overrides `o`, placed as [`llama_cpp_with`] places them.
pub fn max_ctx_with(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, o: &Overrides, budget: u64, limit: u64) -> Result<Option<u64>> {
    longest_ctx(limit, |ctx| Ok(llama_cpp_with(g, hp, &LlamaCppConfig { ctx, ..*c }, o)?.gpu_total_bytes <= budget))
}

/// The longest context, a multiple of 256 (llama.cpp pads to it) up to `limit`, for which `fits`
/// holds, by bisection (fitting shrinks as the context grows); `None` when 256 tokens do not.
pub(crate) fn longest_ctx(limit: u64, fits: impl Fn(u64) -> Result<bool>) -> Result<Option<u64>> {
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

/// llama.cpp's `LLM_FFN_EXPS_REGEX` (common/common.h): the MoE expert weight tensors that
/// `--cpu-moe` / `--n-cpu-moe` keep on the CPU (`blk.N.ffn_{up,down,gate,gate_up}_{,ch}exps`).
const FFN_EXPS: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// Which layers' MoE experts stay in RAM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuMoe {
    /// Neither flag.
    #[default]
    None,
    /// `--n-cpu-moe N`: the experts of layers 0 to N − 1.
    FirstLayers(u64),
    /// `--cpu-moe`: every layer's experts.
    All,
}

/// Where an override puts a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// RAM (`CPU`).
    Cpu,
    /// GPU n (`CUDAn`).
    Gpu(u32),
}

/// One `-ot PATTERN=BUFTYPE` pair.
#[derive(Debug, Clone, Serialize)]
pub struct TensorOverride {
    /// The regular expression, searched (not anchored) in each tensor name.
    pub pattern: String,
    /// The buffer type as given (`CPU`, `CUDA0`, `CUDA1`, …).
    pub buffer_type: String,
    /// The GPU it names (`CUDAn` is GPU n), or `None` for RAM.
    pub device: Option<u32>,
    #[serde(skip)]
    regex: regex::Regex,
}

/// llama.cpp's `--override-kv KEY=TYPE:VALUE[,…]` (common/common.cpp
/// `string_parse_kv_override`): TYPE int, float, bool (true/false) or str, the key under 128
/// bytes and a string value under 128; the loader reads an overridden key's value instead of the
/// file's (llama-model-loader.cpp `get_key`), so every hyper-parameter read after it follows.
pub fn parse_kv_overrides(value: &str) -> Result<Vec<(String, MetaValue)>> {
    let bad = |item: &str, hint: &str| Error::InvalidValue { what: "--override-kv".into(), value: item.into(), hint: hint.into() };
    let mut out = Vec::new();
    for item in value.split(',').filter(|i| !i.is_empty()) {
        let (key, typed) = item.split_once('=').ok_or_else(|| bad(item, "write KEY=TYPE:VALUE, e.g. llama.context_length=int:8192"))?;
        if key.is_empty() || key.len() >= 128 {
            return Err(bad(item, "a key of 1 to 127 bytes"));
        }
        let (ty, v) = typed.split_once(':').ok_or_else(|| bad(item, "TYPE:VALUE with TYPE int, float, bool or str"))?;
        let value = match ty {
            "int" => MetaValue::Int(v.parse::<i64>().map_err(|_| bad(item, "an int value: a whole number"))?.into()),
            "float" => MetaValue::Float(v.parse::<f64>().ok().filter(|f| f.is_finite()).ok_or_else(|| bad(item, "a float value"))?),
            "bool" => match v {
                "true" => MetaValue::Bool(true),
                "false" => MetaValue::Bool(false),
                _ => return Err(bad(item, "a bool value: true or false")),
            },
            "str" if v.len() < 128 => MetaValue::Str(v.to_string()),
            "str" => return Err(bad(item, "a str value under 128 bytes")),
            _ => return Err(bad(item, "TYPE int, float, bool or str")),
        };
        out.push((key.to_string(), value));
    }
    Ok(out)
}

impl Gguf {
    /// Apply `--override-kv` pairs: each key reads as the given value from now on. A key the
    /// header holds as another type is refused, as llama.cpp refuses it when it reads the key
    /// (llama-model-loader.cpp `validate_override`: "tried to override … with wrong type").
    /// Returns the keys the header did not hold (llama.cpp reads those only if the model asks).
    pub fn override_kv(&mut self, overrides: &[(String, MetaValue)]) -> Result<Vec<String>> {
        let mut added = Vec::new();
        for (k, v) in overrides {
            let same = |a: &MetaValue| std::mem::discriminant(a) == std::mem::discriminant(v);
            if let Some(old) = self.metadata.get(k).filter(|old| !same(old)) {
                let kind = |m: &MetaValue| match m {
                    MetaValue::Int(_) => "int",
                    MetaValue::Float(_) => "float",
                    MetaValue::Bool(_) => "bool",
                    MetaValue::Str(_) => "str",
                    MetaValue::Array { .. } => "an array",
                };
                return Err(Error::InvalidValue {
                    what: "--override-kv".into(),
                    value: k.clone(),
                    hint: format!("the file holds it as {}, the override gives {}: llama.cpp refuses a wrong type", kind(old), kind(v)),
                });
            }
            if self.metadata.insert(k.clone(), v.clone()).is_none() {
                added.push(k.clone());
            }
        }
        Ok(added)
    }
}

/// llama.cpp's tensor buffer-type overrides: `-ot` pairs in command-line order, and the MoE
/// flags; and the LoRA adapters, which follow the placement of the tensors they adapt.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overrides {
    /// `-ot` / `--override-tensor` pairs, in order.
    pub tensor: Vec<TensorOverride>,
    /// `--n-cpu-moe` / `--cpu-moe`.
    pub cpu_moe: CpuMoe,
    /// `--lora` adapters: loaded beside the tensors they adapt, wherever those are placed.
    pub lora: Vec<crate::llama_lora::LoraAdapter>,
}

fn bad_override(value: &str, hint: String) -> Error {
    Error::InvalidValue { what: "--override-tensor".into(), value: value.into(), hint }
}

/// Parse one `-ot` value: comma-separated `PATTERN=BUFTYPE` pairs, split as llama.cpp's
/// common/arg.cpp `parse_tensor_buffer_overrides` splits them (on `,`, then the first `=`).
/// Buffer types: `CPU` (RAM) or `CUDAn` (GPU n; a plan of fewer GPUs refuses it). Patterns are Rust `regex`
/// syntax, which agrees with llama.cpp's `std::regex` (ECMAScript) on what `-ot` users write
/// (`.`, `\.`, `*`, `|`, `[0-9]`, groups); lookarounds and backreferences are refused as invalid.
pub fn parse_override_tensor(value: &str) -> Result<Vec<TensorOverride>> {
    let mut out = Vec::new();
    for pair in value.split(',') {
        let (pattern, buft) = pair
            .split_once('=')
            .ok_or_else(|| bad_override(pair, "write PATTERN=BUFTYPE, e.g. `exps=CPU` (llama.cpp: \"invalid value\")".into()))?;
        let device = match buft {
            "CPU" => None,
            b if b.strip_prefix("CUDA").is_some_and(|n| !n.is_empty() && n.len() <= 2 && n.bytes().all(|c| c.is_ascii_digit())) => {
                Some(b[4..].parse::<u32>().map_err(|_| bad_override(pair, format!("`{b}`: not a device number")))?)
            }
            b => {
                return Err(bad_override(pair, format!("unknown buffer type `{b}`: use CPU or CUDAn (llama.cpp's names, case-sensitive)")))
            }
        };
        out.push(TensorOverride::new(pattern, buft, device).map_err(|e| bad_override(pair, e))?);
    }
    Ok(out)
}

impl TensorOverride {
    /// One override of tensors matching `pattern` to `device` (`None`: RAM), as `buffer_type`
    /// names it; `Err` says what is wrong with the pattern.
    pub fn new(pattern: &str, buffer_type: &str, device: Option<u32>) -> std::result::Result<TensorOverride, String> {
        if pattern.is_empty() {
            return Err("the pattern before `=` is empty".into());
        }
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| format!("the pattern is not a valid regular expression: {e}"))?;
        Ok(TensorOverride { pattern: pattern.into(), buffer_type: buffer_type.into(), device, regex })
    }
}

impl Overrides {
    /// The same launch with only MoE flags `cpu_moe` for tensor placement (no `-ot`): what the
    /// expert-offload searches try. The `--lora` adapters stay, as they would on the launch.
    pub fn moe_only(&self, cpu_moe: CpuMoe) -> Overrides {
        Overrides { tensor: Vec::new(), cpu_moe, lora: self.lora.clone() }
    }

    /// Where the overrides send tensor `name`, or `None` when no override matches. llama.cpp
    /// takes the first pattern that matches, in command-line order
    /// (src/llama-model-loader.cpp `create_tensor`: `std::regex_search`, then `break`). vram
    /// does not keep the order between `-ot` and the MoE flags, so a tensor they send to
    /// different devices is refused rather than guessed.
    pub fn device_of(&self, name: &str) -> Result<Option<Forced>> {
        let ot = self.tensor.iter().find(|o| o.regex.is_match(name)).map(|o| o.device.map_or(Forced::Cpu, Forced::Gpu));
        let moe = self.moe_matches(name).then_some(Forced::Cpu);
        match (ot, moe) {
            (Some(Forced::Gpu(n)), Some(Forced::Cpu)) => Err(Error::InvalidValue {
                what: "--override-tensor with --n-cpu-moe/--cpu-moe".into(),
                value: name.into(),
                hint: format!("-ot sends this expert tensor to CUDA{n} and the MoE flag to CPU; llama.cpp takes whichever comes first on its command line. Narrow the -ot pattern or lower --n-cpu-moe"),
            }),
            (Some(d), _) | (None, Some(d)) => Ok(Some(d)),
            (None, None) => Ok(None),
        }
    }

    /// The highest GPU an `-ot` pair names (`CUDAn`), if any.
    pub fn highest_gpu(&self) -> Option<u32> {
        self.tensor.iter().filter_map(|o| o.device).max()
    }

    /// Whether `--cpu-moe` / `--n-cpu-moe` keep `name` on the CPU: `LLM_FFN_EXPS_REGEX` for
    /// `--cpu-moe` (common/common.h `llm_ffn_exps_cpu_override`), `blk\.{i}` + it for each
    /// i < N for `--n-cpu-moe N` (common/common.h `llm_ffn_exps_block_regex`, pushed by
    /// common/arg.cpp's `--n-cpu-moe` handler).
    fn moe_matches(&self, name: &str) -> bool {
        static EXPS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        static BLOCK: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        match self.cpu_moe {
            CpuMoe::None => false,
            CpuMoe::All => EXPS.get_or_init(|| regex::Regex::new(FFN_EXPS).expect("constant regex")).is_match(name),
            CpuMoe::FirstLayers(n) => {
                let block = BLOCK.get_or_init(|| regex::Regex::new(&format!(r"blk\.(\d+){FFN_EXPS}")).expect("constant regex"));
                // `%d` prints no leading zeros, so `blk.05` matches no block regex.
                block.captures_iter(name).any(|c| c[1].parse::<u64>().is_ok_and(|i| i < n && i.to_string() == c[1]))
            }
        }
    }
}
