//! safetensors headers: 8-byte little-endian header length, then a JSON header mapping tensor
//! names to dtype, shape and data offsets. Only the header is read, never tensor data.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::Model;

/// Largest header accepted (huggingface_hub refuses headers over 100 MB as well).
pub const MAX_HEADER: u64 = 100_000_000;

/// One tensor described by a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Dtype code as stored (`BF16`, `F32`, `I32` for packed int4 …).
    pub dtype: String,
    /// Shape.
    pub shape: Vec<u64>,
}

impl TensorInfo {
    /// Number of elements, or `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d))
    }
}

/// Read the header length from a file's first 8 bytes.
pub fn header_len(first8: &[u8], file: &str) -> Result<u64> {
    let bytes: [u8; 8] = first8
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| Error::Safetensors { file: file.into(), message: "file shorter than the 8-byte header length".into() })?;
    let n = u64::from_le_bytes(bytes);
    if n == 0 || n > MAX_HEADER {
        return Err(Error::Safetensors {
            file: file.into(),
            message: format!("header length {n} bytes is outside 1..=100 MB; the file is not a safetensors file or is corrupt"),
        });
    }
    Ok(n)
}

/// Bits per element of every safetensors dtype (safetensors `src/tensor.rs` `Dtype::bitsize`).
const DTYPE_BITS: &[(&str, u64)] = &[
    ("BOOL", 8),
    ("F4", 4),
    ("F6_E2M3", 6),
    ("F6_E3M2", 6),
    ("U8", 8),
    ("I8", 8),
    ("F8_E5M2", 8),
    ("F8_E4M3", 8),
    ("F8_E8M0", 8),
    ("I16", 16),
    ("U16", 16),
    ("F16", 16),
    ("BF16", 16),
    ("I32", 32),
    ("U32", 32),
    ("F32", 32),
    ("F64", 64),
    ("I64", 64),
    ("U64", 64),
];

/// Parse a whole safetensors file (or a prefix holding its header, with `file_len` the real
/// size): the length, the header, and the reference reader's checks.
pub fn parse_file(bytes: &[u8], file: &str, file_len: Option<u64>) -> Result<Vec<TensorInfo>> {
    let n = header_len(bytes, file)?;
    let json = bytes.get(8..).and_then(|b| b.get(..n as usize)).ok_or_else(|| Error::Safetensors {
        file: file.into(),
        message: format!("the header claims {n} bytes but only {} follow the length: truncated file?", bytes.len().saturating_sub(8)),
    })?;
    parse_header_with(json, file, file_len)
}

/// Parse the JSON header (the `n` bytes after the length).
pub fn parse_header(json: &[u8], file: &str) -> Result<Vec<TensorInfo>> {
    parse_header_with(json, file, None)
}

/// Parse the JSON header; with `file_len` (the whole file's size) the tensor data must end
/// exactly at the end of the file, as the reference reader requires.
pub fn parse_header_with(json: &[u8], file: &str, file_len: Option<u64>) -> Result<Vec<TensorInfo>> {
    let mut out = Vec::new();
    visit_header(json, file, file_len, |name, dtype, shape| {
        out.push(TensorInfo { name: name.to_string(), dtype: dtype.to_string(), shape: shape.to_vec() })
    })?;
    Ok(out)
}

/// Stream the header's tensors to `each(name, dtype, shape)` without building a JSON tree or
/// copying names, checking what safetensors' `Metadata::validate` checks: known dtypes, data
/// offsets matching the shape, and tensors tiling the data section without gaps or overlaps.
pub fn visit_header(json: &[u8], file: &str, file_len: Option<u64>, each: impl FnMut(&str, &'static str, &[u64])) -> Result<()> {
    let bad = |m: String| Error::Safetensors { file: file.into(), message: m };
    let text = std::str::from_utf8(json).map_err(|e| bad(format!("header is not UTF-8 ({e})")))?;
    if !text.starts_with('{') {
        return Err(bad("header does not start with `{`: not a safetensors file".into()));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let mut spans = de.deserialize_map(HeaderVisitor { each, spans: Vec::new() }).map_err(|e| bad(e.to_string()))?;
    de.end().map_err(|e| bad(format!("trailing bytes after the header: {e}")))?;
    spans.sort_unstable_by_key(|s| (s.start, s.end));
    let mut at = 0u64;
    for s in &spans {
        if s.start != at {
            let how = if s.start < at { "overlaps the previous tensor" } else { "leaves a gap after the previous tensor" };
            return Err(bad(format!("tensor `{}`: data_offsets [{}, {}] {how} (which ends at {at})", s.name, s.start, s.end)));
        }
        at = s.end;
    }
    let mut names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!("tensor `{}` is listed twice", w[0])));
    }
    if let Some(len) = file_len {
        let need = (json.len() as u64).checked_add(8).and_then(|h| h.checked_add(at)).ok_or_else(|| bad("data offsets overflow".into()))?;
        if need > len {
            return Err(bad(format!(
                "tensor data runs past the end of the file (needs {need} bytes, the file has {len}): truncated download?"
            )));
        }
        if need < len {
            return Err(bad(format!(
                "{} bytes follow the last tensor's data (the file has {len}, the header accounts for {need})",
                len - need
            )));
        }
    }
    Ok(())
}

/// A tensor name borrowed from the header when it has no escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(Name(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// One tensor entry as safetensors' `TensorInfo` reads it (unknown fields ignored, as there).
#[derive(serde::Deserialize)]
struct Entry<'a> {
    #[serde(borrow)]
    dtype: Cow<'a, str>,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

struct Span<'a> {
    start: u64,
    end: u64,
    name: Cow<'a, str>,
}

struct HeaderVisitor<'a, F> {
    each: F,
    spans: Vec<Span<'a>>,
}

impl<'de, F: FnMut(&str, &'static str, &[u64])> Visitor<'de> for HeaderVisitor<'de, F> {
    type Value = Vec<Span<'de>>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object of tensors")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
            if name == "__metadata__" {
                map.next_value::<HashMap<Name<'de>, Name<'de>>>()?;
                continue;
            }
            let e: Entry = map.next_value()?;
            let (dtype, bits) = DTYPE_BITS
                .iter()
                .find(|(d, _)| *d == e.dtype)
                .copied()
                .ok_or_else(|| de::Error::custom(format!("tensor `{name}` has unknown dtype `{}`", e.dtype)))?;
            let numel = e.shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d));
            let nbits =
                numel.and_then(|n| n.checked_mul(bits)).ok_or_else(|| de::Error::custom(format!("tensor `{name}` shape overflows")))?;
            let (start, end) = e.data_offsets;
            if nbits % 8 != 0 || end < start || end - start != nbits / 8 {
                return Err(de::Error::custom(format!(
                    "tensor `{name}`: data_offsets [{start}, {end}] do not match its {dtype} shape {:?}",
                    e.shape
                )));
            }
            (self.each)(&name, dtype, &e.shape);
            self.spans.push(Span { start, end, name });
        }
        Ok(self.spans)
    }
}

impl std::hash::Hash for Name<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h)
    }
}
impl PartialEq for Name<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Name<'_> {}

/// The shard file names listed by a `model.safetensors.index.json`.
pub fn index_files(json: &[u8], file: &str) -> Result<Vec<String>> {
    let v: Value = serde_json::from_slice(json).map_err(|e| Error::Json { file: file.into(), message: e.to_string() })?;
    let map = v.get("weight_map").and_then(Value::as_object).ok_or_else(|| Error::MissingKey {
        file: file.into(),
        key: "weight_map".into(),
        why: "list the checkpoint shards".into(),
    })?;
    let mut files: Vec<String> = map.values().filter_map(Value::as_str).map(str::to_string).collect();
    files.sort();
    files.dedup();
    for f in &files {
        if f.contains('/') || f.contains('\\') || f.contains("..") {
            return Err(Error::Safetensors { file: file.into(), message: format!("shard name `{f}` points outside the model directory") });
        }
    }
    Ok(files)
}

/// What a checkpoint's headers say: exact parameter count and bytes per stored dtype.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointSummary {
    /// Sum of elements over all tensors.
    pub parameters: u64,
    /// Elements per dtype code.
    pub by_dtype: BTreeMap<String, u64>,
    /// Number of tensors.
    pub tensors: u64,
    /// Bytes of all tensors (the data section), the exact stored size of the weights.
    pub bytes: u64,
    /// Elements stored quantized, by what gives it away (`F8_E4M3 weights`, `packed int
    /// qweight (GPTQ/AWQ)`, `MXFP4 blocks`).
    pub quantized: BTreeMap<String, u64>,
}

/// Quantized storage a tensor's dtype and name reveal (FP8 weights; GPTQ/AWQ int4 packed in
/// I32 `qweight`; gpt-oss MXFP4 `_blocks` in U8; bitsandbytes U8/I8 weights).
fn storage_quant(name: &str, dtype: &str) -> Option<&'static str> {
    match dtype {
        "F8_E4M3" | "F8_E5M2" => Some("FP8 weights"),
        "F4" | "F6_E2M3" | "F6_E3M2" => Some("FP4/FP6 weights"),
        "I32" | "U32" if name.ends_with("qweight") => Some("int4/int8 packed in 32-bit qweight (GPTQ/AWQ)"),
        "U8" if name.ends_with("_blocks") => Some("MXFP4 blocks"),
        "U8" | "I8" if name.ends_with(".weight") => Some("8-bit or packed 4-bit integer weights (bitsandbytes)"),
        _ => None,
    }
}

impl CheckpointSummary {
    /// Add one file's tensors.
    pub fn add(&mut self, tensors: &[TensorInfo]) -> Result<()> {
        for t in tensors {
            self.add_one(&t.name, &t.dtype, t.numel().unwrap_or(u64::MAX))?;
        }
        Ok(())
    }

    /// Add one file's header (the bytes after the length) without keeping its tensor list:
    /// memory stays proportional to the tensor count, not to a JSON tree.
    pub fn add_header(&mut self, json: &[u8], file: &str, file_len: Option<u64>) -> Result<()> {
        let mut failed = None;
        visit_header(json, file, file_len, |name, dtype, shape| {
            let n = shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d)).unwrap_or(u64::MAX);
            if let Err(e) = self.add_one(name, dtype, n) {
                failed.get_or_insert(e);
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    fn add_one(&mut self, name: &str, dtype: &str, n: u64) -> Result<()> {
        let overflow = || Error::Overflow { what: "checkpoint parameters".into() };
        self.parameters = self.parameters.checked_add(n).ok_or_else(overflow)?;
        let e = self.by_dtype.entry(dtype.to_string()).or_default();
        *e = e.checked_add(n).ok_or_else(overflow)?;
        // Sub-byte dtypes (F4) are rounded up per tensor, as the data offsets require whole bytes.
        let bits = DTYPE_BITS.iter().find(|(d, _)| *d == dtype).map_or(0, |(_, b)| *b);
        let b = n.checked_mul(bits).map(|x| x.div_ceil(8)).ok_or_else(overflow)?;
        self.bytes = self.bytes.checked_add(b).ok_or_else(overflow)?;
        if let Some(q) = storage_quant(name, dtype) {
            let e = self.quantized.entry(q.to_string()).or_default();
            *e = e.saturating_add(n);
        }
        self.tensors += 1;
        Ok(())
    }

    /// One line on quantized storage, when the headers show any.
    pub fn quantized_storage(&self) -> Option<String> {
        if self.quantized.is_empty() {
            return None;
        }
        Some(self.quantized.iter().map(|(what, n)| format!("{what}: {n} elements")).collect::<Vec<_>>().join("; "))
    }

    /// Record on `model` what the headers say: exact element count, stored dtype, quantized
    /// storage (inference and serving use it; a training estimate assumes unquantized weights),
    /// the stored bytes, and any
    /// disagreement with the config's count.
    pub fn apply(&self, model: &mut Model) {
        let from_config = model.parameters();
        model.checkpoint_parameters = Some(self.parameters);
        model.checkpoint_bytes = Some(self.bytes);
        if let Some(d) = self.main_dtype() {
            model.stored_dtype = Some(d);
        }
        if let Some(q) = self.quantized_storage() {
            model.warnings.push(format!(
                "the safetensors hold quantized weights ({q}); inference and serving use the stored quantization, a training estimate assumes UNQUANTIZED weights in the chosen precision"
            ));
            model.checkpoint_quantization = Some(q);
        }
        if self.parameters != from_config {
            model.warnings.push(format!(
                "the safetensors headers hold {} elements, the config implies {} parameters (a duplicated tied lm_head, packed quantised weights, or extra tensors); the memory model uses the config's",
                self.parameters, from_config
            ));
        }
    }

    /// The dtype holding most elements; in a quantized checkpoint, the floating-point dtype of
    /// its unquantized parts (the model dtype engines compute in), not the packed int32 or fp8.
    pub fn main_dtype(&self) -> Option<DType> {
        let float = |d: &str| matches!(d, "F16" | "BF16" | "F32" | "F64");
        self.by_dtype
            .iter()
            .filter(|(d, _)| self.quantized.is_empty() || float(d))
            .max_by_key(|(_, n)| **n)
            .and_then(|(d, _)| DType::from_safetensors(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v
    }

    #[test]
    fn reads_a_real_shaped_header() {
        let f = file(
            r#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"BF16","shape":[4,3],"data_offsets":[0,24]},"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]}}"#,
        );
        let n = header_len(&f, "x").unwrap();
        let t = parse_header(&f[8..8 + n as usize], "x").unwrap();
        let mut s = CheckpointSummary::default();
        s.add(&t).unwrap();
        assert_eq!(s.parameters, 14);
        assert_eq!(s.main_dtype(), Some(DType::BF16));
    }

    #[test]
    fn refuses_hostile_headers() {
        assert!(header_len(&u64::MAX.to_le_bytes(), "x").is_err());
        assert!(header_len(&[1, 2, 3], "x").is_err());
        assert!(parse_header(b"[1,2]", "x").is_err());
        assert!(parse_header(br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#, "x").is_err());
        assert!(parse_header(br#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}}"#, "x").is_err());
        assert!(index_files(br#"{"weight_map":{"a":"../etc/passwd"}}"#, "x").is_err());
    }
}
