//! A checkpoint's `quantization_config`.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::QuantizationConfig;

/// The checkpoint's `quantization_config` (transformers `utils/quantization_config.py`).
pub(super) fn quantization(obj: &Map<String, Value>, file: &str) -> Result<Option<QuantizationConfig>> {
    let q = match obj.get("quantization_config") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(q)) => q,
        Some(v) => {
            return Err(Error::BadKey {
                file: file.into(),
                key: "quantization_config".into(),
                value: v.to_string(),
                hint: "expected an object".into(),
            })
        }
    };
    let u = |k: &str| q.get(k).and_then(Value::as_u64);
    let s = |k: &str| q.get(k).and_then(Value::as_str).map(str::to_string);
    let flag = |k: &str| q.get(k).and_then(Value::as_bool).unwrap_or(false);
    // compressed-tensors: config_groups.<g>.weights.{num_bits, group_size}.
    let ct_weights = q.get("config_groups").and_then(Value::as_object).and_then(|g| g.values().find_map(|v| v.get("weights")));
    let ct = |k: &str| ct_weights.and_then(|w| w.get(k)).and_then(Value::as_u64);
    let bnb_bits = if flag("load_in_4bit") {
        Some(4)
    } else if flag("load_in_8bit") {
        Some(8)
    } else {
        None
    };
    let method = s("quant_method")
        .map(|m| m.to_ascii_lowercase())
        .or(bnb_bits.map(|_| "bitsandbytes".to_string()))
        .unwrap_or_else(|| "unknown".into());
    let algo = s("quant_algo").map(|a| a.to_ascii_uppercase());
    let implied_bits = match (method.as_str(), algo.as_deref()) {
        ("fp8" | "fbgemm_fp8", _) => Some(8),
        ("mxfp4", _) => Some(4),
        ("modelopt" | "modelopt_fp4", Some("NVFP4")) => Some(4),
        ("modelopt" | "modelopt_fp4", Some(a)) if a.starts_with("FP8") => Some(8),
        _ => None,
    };
    let block =
        q.get("weight_block_size").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).fold(1u64, u64::saturating_mul));
    // MXFP4 shares one E8M0 scale per 32 values (OCP Microscaling spec v1.0).
    let implied_group = match (method.as_str(), algo.as_deref()) {
        ("mxfp4", _) => Some(32),
        // NVFP4 shares one FP8 scale per 16 values.
        (_, Some("NVFP4")) => Some(16),
        _ => None,
    };
    let mut excluded = Vec::new();
    for k in ["modules_to_not_convert", "ignore", "llm_int8_skip_modules", "ignored_layers", "exclude_modules"] {
        if let Some(Value::Array(a)) = q.get(k) {
            excluded.extend(a.iter().filter_map(Value::as_str).map(str::to_string));
        }
    }
    Ok(Some(QuantizationConfig {
        bits: u("bits").or(u("w_bit")).or(u("weight_bits")).or(bnb_bits).or(ct("num_bits")).or(implied_bits),
        group_size: u("group_size").or(u("q_group_size")).or(ct("group_size")).or(block).or(implied_group),
        format: s("fmt").or(s("bnb_4bit_quant_type")).or(s("format")).or(s("checkpoint_format")).or(s("version")),
        method,
        excluded,
        raw: q.clone(),
    }))
}
