//! safetensors headers: 8-byte little-endian header length, then a JSON header mapping tensor
//! names to dtype, shape and data offsets. Only the header is read, never tensor data.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::dtype::DType;
use crate::error::{Error, Result};

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

/// Parse the JSON header (the `n` bytes after the length).
pub fn parse_header(json: &[u8], file: &str) -> Result<Vec<TensorInfo>> {
    let bad = |m: String| Error::Safetensors { file: file.into(), message: m };
    let v: Value = serde_json::from_slice(json).map_err(|e| bad(format!("header is not JSON: {e}")))?;
    let obj = v.as_object().ok_or_else(|| bad("header is not a JSON object".into()))?;
    let mut out = Vec::with_capacity(obj.len());
    for (name, info) in obj {
        if name == "__metadata__" {
            continue;
        }
        let dtype = info.get("dtype").and_then(Value::as_str).ok_or_else(|| bad(format!("tensor `{name}` has no dtype")))?;
        let shape = info
            .get("shape")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("tensor `{name}` has no shape")))?
            .iter()
            .map(|d| d.as_u64().ok_or_else(|| bad(format!("tensor `{name}` has a non-integer dimension"))))
            .collect::<Result<Vec<u64>>>()?;
        let t = TensorInfo { name: name.clone(), dtype: dtype.to_string(), shape };
        let numel = t.numel().ok_or_else(|| bad(format!("tensor `{name}` shape overflows")))?;
        if let (Some(d), Some(offs)) = (DType::from_safetensors(dtype), info.get("data_offsets").and_then(Value::as_array)) {
            let o: Vec<u64> = offs.iter().filter_map(Value::as_u64).collect();
            if o.len() != 2 || o[1] < o[0] || Some(o[1] - o[0]) != numel.checked_mul(d.bytes()) {
                return Err(bad(format!("tensor `{name}`: data_offsets do not match its {dtype} shape {:?}", t.shape)));
            }
        }
        out.push(t);
    }
    Ok(out)
}

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
}

impl CheckpointSummary {
    /// Add one file's tensors.
    pub fn add(&mut self, tensors: &[TensorInfo]) -> Result<()> {
        for t in tensors {
            let n = t.numel().unwrap_or(u64::MAX);
            self.parameters = self.parameters.checked_add(n).ok_or_else(|| Error::Overflow { what: "checkpoint parameters".into() })?;
            *self.by_dtype.entry(t.dtype.clone()).or_default() += n;
            self.tensors += 1;
        }
        Ok(())
    }

    /// The dtype holding most elements.
    pub fn main_dtype(&self) -> Option<DType> {
        self.by_dtype.iter().max_by_key(|(_, n)| **n).and_then(|(d, _)| DType::from_safetensors(d))
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
        assert!(parse_header(br#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296]}}"#, "x").is_err());
        assert!(index_files(br#"{"weight_map":{"a":"../etc/passwd"}}"#, "x").is_err());
    }
}
