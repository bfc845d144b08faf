//! Test-side safetensors writer: a header with consecutive data offsets for (name, dtype, shape)
//! tensors, and a whole file (data zeroed). Shared by the core and CLI tests.
#![allow(dead_code)]

use serde_json::{json, Value};

/// Bits per element of the safetensors dtypes the tests use.
fn bits(dtype: &str) -> u64 {
    match dtype {
        "I64" | "F64" => 64,
        "F32" | "I32" | "U32" => 32,
        "F16" | "BF16" | "I16" | "U16" => 16,
        _ => 8,
    }
}

/// The header JSON for `tensors` and the size of the data it promises.
pub fn header(tensors: &[(String, &str, Vec<u64>)]) -> (Vec<u8>, u64) {
    let mut map = serde_json::Map::new();
    let mut at = 0u64;
    for (name, dtype, shape) in tensors {
        let n: u64 = shape.iter().product::<u64>() * bits(dtype) / 8;
        map.insert(name.clone(), json!({"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}));
        at += n;
    }
    (Value::Object(map).to_string().into_bytes(), at)
}

/// A whole safetensors file (8-byte header length, header, zeroed data) and the data size.
pub fn file(tensors: &[(String, &str, Vec<u64>)]) -> (Vec<u8>, u64) {
    let (header, data) = header(tensors);
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(&header);
    f.extend(std::iter::repeat_n(0u8, data as usize));
    (f, data)
}
