//! Architectures vram does not model, handled honestly: with safetensors headers, an
//! approximate estimate from what they say (exact parameters and bytes, a Llama-style stand-in
//! for activations, marked APPROXIMATE); without them, an error saying what is missing.

use anyhow::Result;
use vram_core::arch_infer::{approximate_model, infer, unrecognised, ConfigKeys, Structure};
use vram_core::safetensors::TensorInfo;
use vram_core::units::gib;
use vram_core::{parse_config_with, Error, Model, ParseOptions};

use crate::errors::usage;

/// The config was refused (`err`, an unsupported architecture) and `tensors` are the headers'
/// tensors. An unrecognised `model_type` is estimated approximately from them; a recognised but
/// unsupported family only with `--approximate-architecture`, else the refusal names the
/// headers' exact parameter count and bytes.
pub fn from_headers(err: Error, config: &[u8], tensors: &[TensorInfo], name: &str, opts: ParseOptions) -> Result<Model> {
    let s = infer(tensors)?;
    if !unrecognised(&err) && !opts.approximate_unknown {
        return Err(usage(format!("{err}. {}", exact_line(&s))));
    }
    let why = match &err {
        Error::UnsupportedArchitecture { what, reason, .. } => format!("{what}: {reason}"),
        other => other.to_string(),
    };
    Ok(approximate_model(name, &why, Some(config), &s)?)
}

/// A model directory with safetensors but no config.json: the headers alone.
pub fn without_config(name: &str, tensors: &[TensorInfo]) -> Result<Model> {
    let s = infer(tensors)?;
    Ok(approximate_model(name, "no config.json, so the architecture is unknown", None, &s)?)
}

/// The config was refused and no safetensors headers were read: with
/// `--approximate-architecture` the config's standard keys give a Llama-style guess (as
/// before); otherwise the refusal, what an approximate estimate would need, and where to get it.
pub fn config_only(err: Error, config: &[u8], name: &str, file: &str, opts: ParseOptions) -> Result<Model> {
    if opts.approximate_unknown {
        return Ok(parse_config_with(config, name, file, opts)?);
    }
    let missing = ConfigKeys::parse(config).unwrap_or_default().missing();
    let need = if missing.is_empty() {
        "the config has the standard keys, so --approximate-architecture gives a Llama-style guess from them (parameters inferred, not exact)".to_string()
    } else {
        format!("even an approximate estimate needs the safetensors headers or the config keys {}", missing.join(", "))
    };
    Err(usage(format!(
        "{err}. No safetensors headers were read: {need}. Give the model directory (config.json next to its *.safetensors) or its Hub id: the headers give the exact parameter count and bytes"
    )))
}

/// What the headers say exactly, for a refusal.
fn exact_line(s: &Structure) -> String {
    let sum = &s.summary;
    let dtype = sum.main_dtype().map_or("mixed dtypes".to_string(), |d| d.torch_name().to_string());
    format!(
        "Its safetensors headers hold exactly {} parameters ({} bytes = {:.2} GiB, mostly {dtype}) in {} tensors; with --approximate-architecture vram estimates it from them (exact weights, gradients and optimizer states; approximate activations)",
        sum.parameters,
        sum.bytes,
        gib(sum.bytes),
        sum.tensors
    )
}
