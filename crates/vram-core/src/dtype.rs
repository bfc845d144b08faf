//! Element types and their sizes.

use serde::Serialize;

/// A tensor element type as PyTorch, safetensors and the CLI name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE float32.
    F32,
    /// IEEE float16.
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit float (e4m3 / e5m2).
    F8,
    /// float64.
    F64,
    /// 8-bit integer (also uint8, bool).
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer (token ids, labels).
    I64,
}

impl DType {
    /// Bytes per element.
    pub const fn bytes(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F8 | DType::I8 => 1,
        }
    }

    /// Name as PyTorch prints it (`bfloat16`).
    pub const fn torch_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F8 => "float8",
            DType::F64 => "float64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
        }
    }

    /// Short name as users type it (`bf16`, `fp32`).
    pub const fn short_name(self) -> &'static str {
        match self {
            DType::F32 => "fp32",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
            DType::F8 => "fp8",
            DType::F64 => "fp64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
        }
    }

    /// Parse a config.json `torch_dtype`/`dtype` value (`"bfloat16"`, `"float32"`, `"fp16"` …).
    pub fn from_torch_name(s: &str) -> Option<DType> {
        Some(match s.trim().trim_start_matches("torch.").to_ascii_lowercase().as_str() {
            "float32" | "fp32" | "float" => DType::F32,
            "float16" | "fp16" | "half" => DType::F16,
            "bfloat16" | "bf16" => DType::BF16,
            "float64" | "double" => DType::F64,
            "float8_e4m3fn" | "float8_e5m2" | "fp8" | "float8" => DType::F8,
            _ => return None,
        })
    }

    /// Parse a safetensors header dtype code (`"BF16"`, `"F32"`, `"U8"` …).
    pub fn from_safetensors(s: &str) -> Option<DType> {
        Some(match s {
            "F64" => DType::F64,
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => DType::F8,
            "I8" | "U8" | "BOOL" => DType::I8,
            "I16" | "U16" => DType::I16,
            "I32" | "U32" => DType::I32,
            "I64" | "U64" => DType::I64,
            _ => return None,
        })
    }
}
