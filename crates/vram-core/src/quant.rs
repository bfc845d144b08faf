//! Pre-quantized checkpoints: how a checkpoint's `quantization_config` stores each weight, in
//! exact bytes, so that inference and serving use the checkpoint's own quantization.
//!
//! Each layout is the one the checkpoint's tensors have on disk, which is also what the engines
//! keep on the GPU (vLLM's `create_weights` mirrors the checkpoint tensors; transformers loads
//! them as they are). Only decoder linear layers and experts are quantized; embeddings, the LM
//! head, norms, biases and routers stay in 16-bit, as do modules the config excludes.

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::job::Precision;
use crate::model::{Model, QuantizationConfig, Role, TensorGroup};

/// How a quantized checkpoint stores one linear weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// One byte per weight and an fp32 `weight_scale_inv` per `out × in` block (DeepSeek-V3;
    /// vllm/model_executor/layers/quantization/fp8.py `Fp8LinearMethod.create_weights` with
    /// `weight_block_size`, transformers `quantizers/quantizer_finegrained_fp8.py`).
    Fp8Block {
        /// Block rows (output features).
        out: u64,
        /// Block columns (input features).
        inp: u64,
    },
    /// One byte per weight (fp8 or int8) and one scale per output channel of `scale_bytes`
    /// (compressed-tensors `strategy: channel`; fbgemm_fp8 `weight_scale` [out, 1] fp32).
    PerChannel {
        /// Bytes of one scale.
        scale_bytes: u64,
    },
    /// One byte per weight and one scale per tensor (vLLM fp8 checkpoints `weight_scale` [],
    /// compressed-tensors `strategy: tensor`), plus a static `input_scale` when `static_input`.
    PerTensor {
        /// Bytes of one scale.
        scale_bytes: u64,
        /// Activation scheme `static`: one more fp32 `input_scale` per tensor.
        static_input: bool,
    },
    /// Integers packed into int32 with a scale (and zero point) per group of input features.
    Packed {
        /// Bits per weight.
        bits: u64,
        /// Input features per group; `None` = one group per row (`group_size: -1`).
        group: Option<u64>,
        /// Tensor layout.
        layout: Layout,
        /// An int32 `g_idx` per input feature.
        g_idx: bool,
        /// Packed zero points stored.
        zero_point: bool,
    },
    /// bitsandbytes 4-bit (nf4/fp4): two weights per byte, an absmax per 64 weights.
    Bnb4 {
        /// Nested quantization (`bnb_4bit_use_double_quant`).
        double_quant: bool,
    },
    /// bitsandbytes LLM.int8(): int8 weights and an fp32 `SCB` per output row.
    Bnb8,
    /// MXFP4: 4-bit values in blocks of 32 with one E8M0 (u8) scale each.
    Mxfp4,
    /// NVFP4: 4-bit floats (E2M1) in blocks of 16 with one FP8 (E4M3) scale each, and two fp32
    /// per-tensor scales (ModelOpt's `weight_scale_2` and `input_scale`; compressed-tensors'
    /// `weight_global_scale` and `input_global_scale`).
    Nvfp4,
}

/// Where packed integer weights come from; the tensor shapes differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// AutoAWQ GEMM: `qweight` [in, out·b/32] i32, `qzeros` [in/g, out·b/32] i32, `scales` [in/g, out] f16.
    Awq,
    /// AutoGPTQ/GPTQModel: `qweight` [in·b/32, out] i32, `qzeros` [in/g, out·b/32] i32,
    /// `scales` [in/g, out] f16, `g_idx` [in] i32.
    Gptq,
    /// compressed-tensors pack-quantized: `weight_packed` [out, in·b/32] i32, `weight_scale`
    /// [out, in/g] in the model dtype, `weight_shape` [2] i64, optional `weight_zero_point`
    /// [out·b/32, in/g] i32 and `weight_g_idx` [in] i32.
    CompressedTensors,
}

/// Bytes of one stored tensor: the quantized values and what they need (scales, zero points,
/// indices, lookup tables).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stored {
    /// Quantized values (or 16-bit weights when left unquantized).
    pub weight: u128,
    /// Scales, zero points, `g_idx`, bitsandbytes code tables.
    pub scales: u128,
}

impl Stored {
    /// Both parts.
    pub fn total(&self) -> u128 {
        self.weight + self.scales
    }
    fn add(&mut self, o: Stored) {
        self.weight += o.weight;
        self.scales += o.scales;
    }
    fn times(self, k: u128) -> Stored {
        Stored { weight: self.weight * k, scales: self.scales * k }
    }
}

/// A checkpoint's quantization, resolved: the scheme and which modules it leaves alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The storage of quantized weights.
    pub scheme: Scheme,
    /// Module patterns left unquantized.
    excluded: Vec<String>,
    /// What the user should know (patterns that could not be read).
    pub notes: Vec<String>,
    /// The 8-bit values are floats (fp8), not integers.
    float: bool,
}

fn unsupported(q: &QuantizationConfig, why: &str) -> Error {
    Error::InvalidValue {
        what: "quantization_config".into(),
        value: q.describe(),
        hint: format!("{why}; pass --precision (estimate) or --quantization (serve) to say how the weights are held"),
    }
}

impl Plan {
    /// Resolve a checkpoint's `quantization_config`.
    pub fn new(q: &QuantizationConfig) -> Result<Plan> {
        let scheme = scheme(q)?;
        let mut excluded = Vec::new();
        let mut notes = Vec::new();
        for p in &q.excluded {
            match pattern(p) {
                Some(g) => excluded.push(g),
                None => {
                    notes.push(format!("excluded-module pattern `{p}` is not understood: those modules are counted as quantized (a guess)"))
                }
            }
        }
        Ok(Plan { scheme, excluded, notes, float: is_float(q) })
    }

    /// Whether the tensor `t` (of decoder layer `layer`) is stored quantized.
    pub fn quantizes(&self, t: &TensorGroup, layer: Option<u64>) -> bool {
        if !matches!(t.role, Role::Linear | Role::Experts) {
            return false;
        }
        // MXFP4 checkpoints (gpt-oss) quantize the experts only (transformers
        // integrations/mxfp4.py replaces the experts module; attention is excluded).
        if self.scheme == Scheme::Mxfp4 && t.role != Role::Experts {
            return false;
        }
        let module = module_name(&t.name, layer);
        !self.excluded.iter().any(|p| excludes(p, &module))
    }

    /// Bytes of one tensor of `t` as the checkpoint stores it.
    pub fn stored(&self, t: &TensorGroup, model_dtype_bytes: u128) -> Stored {
        let stack = if t.numel == 0 { 1 } else { (t.rows as u128 * t.cols as u128 / t.numel as u128).max(1) };
        let (out, inp) = (t.rows as u128 / stack, t.cols as u128 / stack);
        tensor_bytes(self.scheme, out, inp, model_dtype_bytes).times(stack)
    }

    /// The inference precision class this scheme belongs to (`--precision` values): 8-bit
    /// float, 8-bit integer, or 4-bit and below.
    pub fn precision(&self) -> Precision {
        match self.scheme {
            Scheme::Fp8Block { .. } => Precision::Fp8,
            Scheme::PerChannel { .. } | Scheme::PerTensor { .. } if self.float => Precision::Fp8,
            Scheme::PerChannel { .. } | Scheme::PerTensor { .. } | Scheme::Bnb8 => Precision::Int8,
            Scheme::Packed { bits, .. } if bits > 4 => Precision::Int8,
            Scheme::Packed { .. } | Scheme::Bnb4 { .. } | Scheme::Mxfp4 | Scheme::Nvfp4 => Precision::Int4,
        }
    }

    /// Whether an explicit `--precision` agrees with the checkpoint: the same class, or one
    /// byte per weight either way (fp8 and int8 store one byte per weight).
    pub fn agrees_with(&self, p: Precision) -> bool {
        let class = self.precision();
        let one_byte = |p: Precision| matches!(p, Precision::Fp8 | Precision::Int8);
        p == class || (one_byte(p) && one_byte(class))
    }

    /// One line for notes: "fp8 block-quantized [128, 128]".
    pub fn describe(&self) -> String {
        match self.scheme {
            Scheme::Fp8Block { out, inp } => format!("fp8 block-quantized [{out}, {inp}]"),
            Scheme::PerChannel { .. } => "8-bit with per-channel scales".into(),
            Scheme::PerTensor { .. } => "8-bit with per-tensor scales".into(),
            Scheme::Packed { bits, group, layout, .. } => {
                let g = group.map_or("per-channel".to_string(), |g| format!("group {g}"));
                format!("{bits}-bit {} packed, {g}", layout_name(layout))
            }
            Scheme::Bnb4 { double_quant } => format!("bitsandbytes 4-bit{}", if double_quant { ", double-quantized" } else { "" }),
            Scheme::Bnb8 => "bitsandbytes int8".into(),
            Scheme::Mxfp4 => "MXFP4 (experts)".into(),
            Scheme::Nvfp4 => "NVFP4 (FP4 in blocks of 16, FP8 scales)".into(),
        }
    }
}

fn layout_name(l: Layout) -> &'static str {
    match l {
        Layout::Awq => "AWQ",
        Layout::Gptq => "GPTQ",
        Layout::CompressedTensors => "compressed-tensors",
    }
}

fn is_float(q: &QuantizationConfig) -> bool {
    q.method.contains("fp8") || ct_weights(q).and_then(|w| w.get("type")).and_then(Value::as_str) == Some("float")
}

/// The compressed-tensors weight scheme: `config_groups.<g>.weights`.
fn ct_weights(q: &QuantizationConfig) -> Option<&Value> {
    q.raw.get("config_groups").and_then(Value::as_object).and_then(|g| g.values().find_map(|v| v.get("weights")))
}

/// Map a `quantization_config` to the storage scheme of its weights.
pub fn scheme(q: &QuantizationConfig) -> Result<Scheme> {
    let flag = |k: &str| q.raw.get(k).and_then(Value::as_bool);
    let group = q.raw.get("group_size").and_then(Value::as_i64).map_or(q.group_size, |g| u64::try_from(g).ok().filter(|g| *g > 0));
    Ok(match q.method.as_str() {
        "fp8" => match q.raw.get("weight_block_size").and_then(Value::as_array).map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>()) {
            Some(b) => match b.as_slice() {
                [Some(o), Some(i)] if *o > 0 && *i > 0 => Scheme::Fp8Block { out: *o, inp: *i },
                _ => return Err(unsupported(q, "weight_block_size must be two positive integers")),
            },
            // vLLM serialised fp8: a scalar fp32 weight_scale per tensor (fp8.py).
            None => {
                Scheme::PerTensor { scale_bytes: 4, static_input: q.raw.get("activation_scheme").and_then(Value::as_str) == Some("static") }
            }
        },
        // fbgemm_fp8: weight_scale [out, 1] fp32 (transformers integrations/fbgemm_fp8.py).
        "fbgemm_fp8" => Scheme::PerChannel { scale_bytes: 4 },
        "awq" => match (q.bits, q.format.as_deref().map(str::to_ascii_lowercase).as_deref()) {
            (Some(4), None | Some("gemm")) => {
                Scheme::Packed { bits: 4, group, layout: Layout::Awq, g_idx: false, zero_point: flag("zero_point").unwrap_or(true) }
            }
            _ => return Err(unsupported(q, "vram reads AWQ 4-bit GEMM checkpoints only")),
        },
        // AutoGPTQ and GPTQModel register g_idx whatever desc_act says (qlinear `g_idx` buffer);
        // qzeros are stored even when sym (v1 format).
        "gptq" => match q.bits {
            Some(b @ (2 | 3 | 4 | 8)) => Scheme::Packed { bits: b, group, layout: Layout::Gptq, g_idx: true, zero_point: true },
            _ => return Err(unsupported(q, "GPTQ bits must be 2, 3, 4 or 8")),
        },
        "bitsandbytes" | "bitsandbytes_4bit" | "bitsandbytes_8bit" => match q.bits {
            Some(4) => Scheme::Bnb4 { double_quant: flag("bnb_4bit_use_double_quant").unwrap_or(false) },
            Some(8) => Scheme::Bnb8,
            _ => return Err(unsupported(q, "bitsandbytes needs load_in_4bit or load_in_8bit")),
        },
        "mxfp4" => Scheme::Mxfp4,
        // NVIDIA ModelOpt (vllm/model_executor/layers/quantization/modelopt.py): `quant_algo`
        // names the scheme; a per-layer MIXED_PRECISION map is not modelled.
        "modelopt" | "modelopt_fp4" => match q.raw.get("quant_algo").and_then(Value::as_str).map(str::to_ascii_uppercase).as_deref() {
            // ModelOptFp8LinearMethod: fp8 weights, an fp32 weight_scale and input_scale per tensor.
            Some("FP8") => Scheme::PerTensor { scale_bytes: 4, static_input: true },
            // ModelOptFp8PcPtLinearMethod: an fp32 weight_scale per output channel.
            Some("FP8_PER_CHANNEL_PER_TOKEN") => Scheme::PerChannel { scale_bytes: 4 },
            Some("NVFP4") => Scheme::Nvfp4,
            other => {
                return Err(unsupported(
                    q,
                    &format!(
                        "ModelOpt quant_algo {} is not modelled (FP8, FP8_PER_CHANNEL_PER_TOKEN and NVFP4 are)",
                        other.unwrap_or("(none)")
                    ),
                ))
            }
        },
        "compressed-tensors" => compressed_tensors(q, group)?,
        _ => return Err(unsupported(q, "this quantization method is not modelled")),
    })
}

/// compressed-tensors: `format` and the first config group's `weights` (num_bits, strategy,
/// group_size, symmetric, actorder); compressed_tensors/quantization/quant_scheme.py.
fn compressed_tensors(q: &QuantizationConfig, group: Option<u64>) -> Result<Scheme> {
    let w = ct_weights(q).ok_or_else(|| unsupported(q, "compressed-tensors config has no config_groups.*.weights"))?;
    // Several groups with different weight schemes (e.g. attention 8-bit, MLP 4-bit) would need a
    // per-module mapping vram does not do: refuse rather than size everything as the first group.
    let groups = q.raw.get("config_groups").and_then(Value::as_object);
    if groups.is_some_and(|g| g.values().filter_map(|v| v.get("weights")).any(|other| other != w)) {
        return Err(unsupported(q, "config_groups hold different weight schemes; mixed compressed-tensors schemes are not modelled"));
    }
    // No `strategy`: "group" when a group_size is given, else "tensor"
    // (compressed_tensors/quantization/quant_args.py, validate_strategy).
    let strategy = w.get("strategy").and_then(Value::as_str).unwrap_or(if group.is_some() { "group" } else { "tensor" });
    let symmetric = w.get("symmetric").and_then(Value::as_bool).unwrap_or(true);
    let actorder = w.get("actorder").is_some_and(|a| a.as_str() == Some("group") || a.as_bool() == Some(true));
    // Scales in the model's dtype (compressed_tensors/quantization/lifecycle/initialize.py).
    let scale_bytes = 2;
    let float = w.get("type").and_then(Value::as_str) == Some("float");
    Ok(match (q.bits, strategy) {
        // nvfp4-pack-quantized: FP4 in groups of 16 with FP8 scales and a global scale per tensor
        // (compressed_tensors/compressors/quantized_compressors/fp4_quantized.py).
        (Some(4), "tensor_group") if float && group.unwrap_or(16) == 16 => Scheme::Nvfp4,
        (Some(8), "tensor") => Scheme::PerTensor { scale_bytes, static_input: false },
        (Some(8), "channel") => Scheme::PerChannel { scale_bytes },
        (Some(8), "block") => {
            match w.get("block_structure").and_then(Value::as_array).map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>()).as_deref() {
                Some([Some(o), Some(i)]) if *o > 0 && *i > 0 => Scheme::Fp8Block { out: *o, inp: *i },
                _ => return Err(unsupported(q, "block strategy without a two-integer block_structure")),
            }
        }
        (Some(b @ (4 | 8)), "group" | "channel") => Scheme::Packed {
            bits: b,
            group: if strategy == "channel" { None } else { group },
            layout: Layout::CompressedTensors,
            g_idx: actorder,
            zero_point: !symmetric,
        },
        _ => {
            return Err(unsupported(q, "only 8-bit tensor/channel/block and 4/8-bit group/channel compressed-tensors schemes are modelled"))
        }
    })
}

/// Bytes of one `out × inp` weight under `s` (model dtype `e` bytes for compressed-tensors
/// scales).
pub fn tensor_bytes(s: Scheme, out: u128, inp: u128, e: u128) -> Stored {
    let n = out * inp;
    match s {
        // weight F8 [out, in] + weight_scale_inv F32 [⌈out/bo⌉, ⌈in/bi⌉].
        Scheme::Fp8Block { out: bo, inp: bi } => Stored { weight: n, scales: out.div_ceil(bo as u128) * inp.div_ceil(bi as u128) * 4 },
        Scheme::PerChannel { scale_bytes } => Stored { weight: n, scales: out * scale_bytes as u128 },
        Scheme::PerTensor { scale_bytes, static_input } => {
            Stored { weight: n, scales: scale_bytes as u128 + if static_input { 4 } else { 0 } }
        }
        Scheme::Packed { bits, group, layout, g_idx, zero_point } => {
            packed_bytes(out, inp, bits as u128, group, layout, g_idx, zero_point, e)
        }
        // bitsandbytes functional.py quantize_4bit (blocksize 64): packed u8 [⌈n/2⌉, 1], absmax per
        // block (fp32, or u8 when nested with fp32 nested_absmax per 256 blocks and a 256-entry
        // fp32 nested code), a 16-entry fp32 quant_map. The JSON `quant_state` blob stays on the CPU.
        Scheme::Bnb4 { double_quant } => {
            let blocks = n.div_ceil(64);
            let absmax = if double_quant { blocks + blocks.div_ceil(256) * 4 + 256 * 4 } else { blocks * 4 };
            Stored { weight: n.div_ceil(2), scales: absmax + 16 * 4 }
        }
        // bitsandbytes Int8Params: int8 weight, fp32 SCB per output row (transformers bnb 8-bit).
        Scheme::Bnb8 => Stored { weight: n, scales: out * 4 },
        // `_blocks` u8 [out, in/32, 16] and `_scales` u8 [out, in/32] (OCP MX v1.0; gpt-oss).
        Scheme::Mxfp4 => Stored { weight: n.div_ceil(2), scales: out * inp.div_ceil(32) },
        // `weight` u8 [out, in/2], `weight_scale` F8_E4M3 [out, in/16], two fp32 scalars.
        Scheme::Nvfp4 => Stored { weight: n.div_ceil(2), scales: out * inp.div_ceil(16) + 8 },
    }
}

/// AWQ/GPTQ/compressed-tensors packed integers. AutoAWQ `WQLinear_GEMM`, AutoGPTQ `QuantLinear`,
/// compressed_tensors/compressors/quantized_compressors/pack_quantized.py.
#[allow(clippy::too_many_arguments)]
fn packed_bytes(out: u128, inp: u128, bits: u128, group: Option<u64>, layout: Layout, g_idx: bool, zero_point: bool, e: u128) -> Stored {
    let groups = group.map_or(1, |g| inp.div_ceil(g as u128));
    // int32 words: 32/bits values each; GPTQ packs along the input, AWQ and compressed-tensors along the output/input row.
    let weight = match layout {
        Layout::Gptq => (inp * bits).div_ceil(32) * out * 4,
        Layout::Awq => (out * bits).div_ceil(32) * inp * 4,
        Layout::CompressedTensors => (inp * bits).div_ceil(32) * out * 4,
    };
    let (scale_b, extra) = match layout {
        Layout::Awq | Layout::Gptq => (2, 0),
        // weight_shape: an int64 pair per tensor.
        Layout::CompressedTensors => (e, 16),
    };
    let zeros = if zero_point { groups * (out * bits).div_ceil(32) * 4 } else { 0 };
    let gidx = if g_idx { inp * 4 } else { 0 };
    Stored { weight, scales: groups * out * scale_b + zeros + gidx + extra }
}

/// The module a tensor belongs to, as the checkpoint names it (`model.layers.3.mlp.up_proj`).
fn module_name(tensor: &str, layer: Option<u64>) -> String {
    let name = match layer {
        Some(i) => tensor.replace("{i}", &i.to_string()),
        None => tensor.to_string(),
    };
    let module = name.strip_suffix(".weight").or_else(|| name.strip_suffix(".bias")).unwrap_or(&name);
    if module.starts_with("lm_head") {
        module.to_string()
    } else {
        format!("model.{module}")
    }
}

/// A glob for an excluded-module pattern: plain names and `*` as written
/// (transformers `modules_to_not_convert`), compressed-tensors `re:` regexes of the common
/// `.*`/`\.`/`$` kind; `None` for anything else.
fn pattern(p: &str) -> Option<String> {
    let Some(re) = p.strip_prefix("re:") else { return Some(p.to_string()) };
    let re = re.strip_prefix('^').unwrap_or(re);
    let (re, anchored) = match re.strip_suffix('$') {
        Some(r) => (r, true),
        None => (re, false),
    };
    let mut g = String::new();
    let mut chars = re.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' if chars.peek() == Some(&'*') => {
                chars.next();
                g.push('*');
            }
            '\\' if chars.peek() == Some(&'.') => {
                chars.next();
                g.push('.');
            }
            '.' => g.push('?'),
            '[' | ']' | '(' | ')' | '{' | '}' | '|' | '+' | '?' | '\\' | '^' | '$' => return None,
            c => g.push(c),
        }
    }
    // re.match anchors at the start only.
    if !anchored {
        g.push('*');
    }
    Some(format!("\u{0}{g}"))
}

/// Whether pattern `p` excludes `module`: a full glob match for regex-derived patterns;
/// otherwise the module or one of its dotted prefixes or suffixes matches the pattern
/// (`lm_head`, `model.layers.*.self_attn`, `mlp.gate`).
fn excludes(p: &str, module: &str) -> bool {
    if let Some(g) = p.strip_prefix('\u{0}') {
        return glob(g.as_bytes(), module.as_bytes());
    }
    // transformers tests `key in module_name` on dotted names; matching whole dotted segments
    // keeps `layers.1` from matching `layers.10`.
    let parts: Vec<&str> = module.split('.').collect();
    (0..parts.len()).any(|i| (i + 1..=parts.len()).any(|j| glob(p.as_bytes(), parts[i..j].join(".").as_bytes())))
}

/// `*` (any run) and `?` (any one character) glob, iterative (no backtracking blow-up).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

/// Every tensor of the model with the decoder layer it belongs to: layer tensors one layer at a
/// time (exclusions can name single layers), the rest once.
pub fn layered_tensors(m: &Model) -> Vec<(TensorGroup, Option<u64>)> {
    let mut v: Vec<(TensorGroup, Option<u64>)> = m.tensors().into_iter().filter(|t| !t.name.contains("{i}")).map(|t| (t, None)).collect();
    for i in 0..m.layers {
        v.extend(m.layer_inventory(i).into_iter().map(|t| (t, Some(i))));
    }
    v
}

/// Bytes of the whole model's weights as the checkpoint stores them, unquantized tensors in
/// `e` bytes per element.
pub fn model_bytes(m: &Model, plan: &Plan, e: u128) -> Stored {
    let mut s = Stored::default();
    for (t, layer) in layered_tensors(m) {
        let count = t.count as u128;
        if plan.quantizes(&t, layer) {
            s.add(plan.stored(&t, e).times(count));
        } else {
            s.weight += t.numel as u128 * count * e;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_exclusions() {
        assert!(excludes("lm_head", "lm_head"));
        assert!(excludes("model.layers.*.self_attn", "model.layers.3.self_attn.q_proj"));
        assert!(excludes("mlp.gate", "model.layers.3.mlp.gate"));
        assert!(!excludes("layers.1", "model.layers.10.mlp.up_proj"));
        assert!(excludes("model.layers.1", "model.layers.1.mlp.up_proj"));
        let re = pattern("re:.*mlp.gate$").unwrap();
        assert!(excludes(&re, "model.layers.2.mlp.gate"));
        assert!(!excludes(&re, "model.layers.2.mlp.gate_proj"));
        assert!(pattern("re:(a|b)").is_none());
    }

    #[test]
    fn mxfp4_and_bnb8_layouts() {
        // gpt-oss down_proj of one expert, 2880 × 2880: `_blocks` [2880, 90, 16], `_scales` [2880, 90].
        assert_eq!(tensor_bytes(Scheme::Mxfp4, 2880, 2880, 2), Stored { weight: 2880 * 90 * 16, scales: 2880 * 90 });
        assert_eq!(tensor_bytes(Scheme::Bnb8, 4096, 1024, 2), Stored { weight: 4096 * 1024, scales: 4096 * 4 });
        // bnb nf4 without nested quantization: fp32 absmax per 64 weights, 16-entry fp32 code.
        assert_eq!(tensor_bytes(Scheme::Bnb4 { double_quant: false }, 64, 64, 2), Stored { weight: 2048, scales: 64 * 4 + 64 });
    }

    #[test]
    fn awq_llama_8b_q_proj_bytes() {
        // 4096×4096 q_proj, group 128: qweight 8 MiB, qzeros 32·512·4 = 64 KiB, scales 32·4096·2.
        let s = Scheme::Packed { bits: 4, group: Some(128), layout: Layout::Awq, g_idx: false, zero_point: true };
        let b = tensor_bytes(s, 4096, 4096, 2);
        assert_eq!(b.weight, 4096 * 4096 / 2);
        assert_eq!(b.scales, 32 * 512 * 4 + 32 * 4096 * 2);
    }
}
