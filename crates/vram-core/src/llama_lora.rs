//! LoRA adapters on llama.cpp (`--lora FILE`, `--lora-scaled FILE SCALE`).
//!
//! llama.cpp loads each adapted matrix's A and B beside the model tensor they adapt, in that
//! tensor's buffer type: on the GPU holding the layer, or in RAM for a layer (or an `-ot`/
//! `--n-cpu-moe` tensor) kept on the CPU (src/llama-adapter.cpp `llama_adapter_lora_init_impl`:
//! `ggml_backend_buffer_get_type(model_tensor->buffer)`, one "LoRA buffer" per buffer type). The
//! file is checked as llama.cpp checks it before loading: `general.type` = adapter,
//! `adapter.type` = lora, the model's architecture, `.lora_a`/`.lora_b` pairs (norm vectors
//! skipped), each pair's base tensor present and its shapes matching.
//!
//! Held to ggml-org/llama.cpp PR "fix lora issues" (ngxson/llama.cpp#9, slaren's log): a rank-32
//! f16 adapter of Llama-3-8B's seven projections and its output layer at `-ngl 30` over two GPUs
//! gives "CUDA0 LoRA buffer size = 110.00 MiB", "CUDA1 … = 40.00 MiB" and 18.08 MiB in RAM
//! (crates/vram-core/tests/llamacpp_lora.rs).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, HParams, MetaValue, TensorInfo};

/// One adapted matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoraPair {
    /// The model tensor it adapts (`blk.3.attn_q.weight`).
    pub base: String,
    /// `lora_a`'s bytes.
    pub a_bytes: u64,
    /// `lora_b`'s bytes.
    pub b_bytes: u64,
    /// Its rank (`lora_a`'s second dimension).
    pub rank: u64,
    /// The base tensor's output rows (its second dimension), for [`product_bound`].
    pub out_rows: u64,
    /// Whether the base is a stack of routed experts (3-D: `build_lora_mm_id`).
    pub routed: bool,
}

/// A LoRA adapter as llama.cpp would load it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoraAdapter {
    /// The file, as named.
    pub file: String,
    /// Its pairs, by base tensor name (llama.cpp keeps them in a `std::map` by that name).
    pub pairs: Vec<LoraPair>,
    /// Norm vectors in the file, which llama.cpp skips ("TODO: add support for norm vector").
    pub skipped_norms: u64,
}

impl LoraAdapter {
    /// Every pair's bytes.
    pub fn bytes(&self) -> u64 {
        self.pairs.iter().fold(0u64, |a, p| a.saturating_add(p.a_bytes).saturating_add(p.b_bytes))
    }

    /// The largest rank.
    pub fn max_rank(&self) -> u64 {
        self.pairs.iter().map(|p| p.rank).max().unwrap_or(0)
    }
}

/// ggml-cuda's buffer alignment (`ggml_backend_cuda_buffer_type_get_alignment`: 128): each
/// adapter tensor on a GPU starts on a multiple of it.
pub const GPU_ALIGNMENT: u64 = 128;
/// The CPU buffer's (ggml-backend.cpp `TENSOR_ALIGNMENT`: 32).
pub const CPU_ALIGNMENT: u64 = 32;

fn bad(file: &str, message: String) -> Error {
    Error::Gguf { file: file.into(), message }
}

fn meta_str<'a>(g: &'a Gguf, key: &str) -> &'a str {
    match g.metadata.get(key) {
        Some(MetaValue::Str(s)) => s,
        _ => "",
    }
}

/// Read the adapter `a` (file `file`) for `model`, refusing what llama.cpp refuses.
pub fn adapter(a: &Gguf, file: &str, model: &Gguf) -> Result<LoraAdapter> {
    let general_type = meta_str(a, "general.type");
    if general_type != "adapter" {
        return Err(bad(file, format!("general.type is `{general_type}`, not `adapter`: not a LoRA adapter GGUF (convert one with llama.cpp's convert_lora_to_gguf.py)")));
    }
    let adapter_type = meta_str(a, "adapter.type");
    if adapter_type != "lora" {
        return Err(bad(file, format!("adapter.type is `{adapter_type}`, not `lora` (llama.cpp loads only LoRA adapters with --lora)")));
    }
    let (arch, model_arch) = (a.architecture().unwrap_or(""), model.architecture().unwrap_or(""));
    if arch != model_arch {
        return Err(bad(
            file,
            format!("an adapter for `{arch}` on a `{model_arch}` model: llama.cpp refuses it (\"model arch and LoRA arch mismatch\")"),
        ));
    }
    // Each base's lora_a and lora_b (llama-adapter.cpp `ab_map`).
    let mut halves: BTreeMap<&str, (Option<&TensorInfo>, Option<&TensorInfo>)> = BTreeMap::new();
    let mut skipped_norms = 0u64;
    for t in &a.tensors {
        let (base, is_a) = if let Some(b) = t.name.strip_suffix(".lora_a") {
            (b, true)
        } else if let Some(b) = t.name.strip_suffix(".lora_b") {
            (b, false)
        } else if t.name.ends_with("_norm.weight") {
            skipped_norms += 1;
            continue;
        } else {
            return Err(bad(
                file,
                format!("tensor `{}` is neither a .lora_a nor a .lora_b (llama.cpp: \"has unexpected suffix\")", t.name),
            ));
        };
        let half = halves.entry(base).or_default();
        if is_a {
            half.0 = Some(t);
        } else {
            half.1 = Some(t);
        }
    }
    if halves.is_empty() {
        return Err(bad(file, "no .lora_a/.lora_b tensors: an empty adapter".into()));
    }
    let tied = crate::gguf::tied_output_bytes(model) > 0;
    let tensors: HashMap<&str, &TensorInfo> = model.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut pairs = Vec::with_capacity(halves.len());
    for (base, (la, lb)) in halves {
        let (Some(la), Some(lb)) = (la, lb) else {
            return Err(bad(file, format!("`{base}` has only one of lora_a and lora_b (llama.cpp: \"missing one component\")")));
        };
        // A tied LM head is the embeddings' second copy, which llama.cpp names output.weight.
        let lookup = if base == "output.weight" && tied { "token_embd.weight" } else { base };
        let Some(&m) = tensors.get(lookup) else {
            return Err(bad(
                file,
                format!(
                    "`{base}` is not a tensor of the model (llama.cpp: \"does not exist in base model (hint: maybe wrong base model?)\")"
                ),
            ));
        };
        let dim = |t: &TensorInfo, i: usize| t.dims().get(i).copied().unwrap_or(1);
        let fits = if base.ends_with("token_embd.weight") {
            // The embeddings' pair is stored flipped (llm_build_inp_embd).
            dim(m, 0) == dim(lb, 1) && dim(m, 1) == dim(la, 1)
        } else {
            dim(m, 0) == dim(la, 0) && dim(m, 1) == dim(lb, 1) && dim(la, 1) == dim(lb, 0)
        };
        if !fits {
            return Err(bad(
                file,
                format!(
                    "`{base}` is {:?} in the model but its lora_a is {:?} and lora_b {:?} (llama.cpp: \"incorrect shape (hint: maybe wrong base model?)\")",
                    m.dims(),
                    la.dims(),
                    lb.dims()
                ),
            ));
        }
        pairs.push(LoraPair {
            base: base.to_string(),
            a_bytes: la.bytes,
            b_bytes: lb.bytes,
            rank: dim(la, 1),
            out_rows: dim(m, 1),
            routed: m.n_dims >= 3,
        });
    }
    Ok(LoraAdapter { file: file.into(), pairs, skipped_norms })
}

/// A pair's bytes in a buffer of `alignment`: ggml allocates each tensor at a multiple of it
/// (ggml-alloc.c `ggml_backend_alloc_ctx_tensors_from_buft`, `GGML_PAD(size, alignment)`).
fn padded(p: &LoraPair, alignment: u64) -> u64 {
    let pad = |b: u64| b.div_ceil(alignment).saturating_mul(alignment);
    pad(p.a_bytes).saturating_add(pad(p.b_bytes))
}

/// What the adapters put where: their pairs' bytes per GPU and in RAM, and the products' bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoraPlacement {
    /// Bytes per GPU (index = device).
    pub gpu_bytes: Vec<u64>,
    /// The graph's extra products per GPU: a bound, see [`product_bound`].
    pub gpu_compute_bytes: Vec<u64>,
    /// Bytes in RAM.
    pub cpu_bytes: u64,
}

/// Place every adapter's pairs with their base tensors over `devices` GPUs: `device_of` says
/// where the model tensor of that name is (`Some(i)`: GPU i, `None`: RAM, `Err`: the placement
/// rules refuse it); `tokens` is the micro-batch and `output_rows` the rows the LM head computes.
pub fn place(
    adapters: &[LoraAdapter],
    devices: usize,
    hp: &HParams,
    tokens: u64,
    output_rows: u64,
    mut device_of: impl FnMut(&str) -> Result<Option<usize>>,
) -> Result<LoraPlacement> {
    let mut out = LoraPlacement { gpu_bytes: vec![0; devices], gpu_compute_bytes: vec![0; devices], cpu_bytes: 0 };
    for a in adapters {
        for p in &a.pairs {
            match device_of(&p.base)? {
                None => out.cpu_bytes = out.cpu_bytes.saturating_add(padded(p, CPU_ALIGNMENT)),
                Some(d) if d < devices => {
                    out.gpu_bytes[d] = out.gpu_bytes[d].saturating_add(padded(p, GPU_ALIGNMENT));
                    let bound = product_bound(p, hp, tokens, output_rows);
                    out.gpu_compute_bytes[d] = out.gpu_compute_bytes[d].max(bound);
                }
                // The placement rules refuse such a device first; never count it as RAM.
                Some(d) => {
                    return Err(Error::InvalidValue {
                        what: "--lora".into(),
                        value: format!("{} → GPU {d}", p.base),
                        hint: format!("{devices} GPU(s) are planned"),
                    })
                }
            }
        }
    }
    Ok(out)
}

/// A bound on what one adapted product adds to the compute buffer: llama.cpp's graph computes
/// `scale × B(A x)` beside the base product and adds it (llama-graph.cpp `build_lora_mm`), so at
/// most the [rank, tokens] middle and two [rows, tokens] f32 results are alive at once; routed
/// experts multiply the tokens by the experts each uses (`build_lora_mm_id`). Not checked
/// against a log: no public log gives a compute buffer with and without an adapter.
pub fn product_bound(p: &LoraPair, hp: &HParams, tokens: u64, output_rows: u64) -> u64 {
    let n = if p.base == "output.weight" {
        output_rows
    } else if p.routed {
        tokens.saturating_mul(hp.moe.map_or(1, |moe| moe.used))
    } else {
        tokens
    };
    p.out_rows.saturating_mul(2).saturating_add(p.rank).saturating_mul(n).saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_rounds_each_half_up() {
        let p = LoraPair { base: "x".into(), a_bytes: 128, b_bytes: 256, rank: 8, out_rows: 256, routed: false };
        assert_eq!(padded(&p, 128), 384);
        let q = LoraPair { base: "x".into(), a_bytes: 100, b_bytes: 100, rank: 8, out_rows: 12, routed: false };
        assert_eq!(padded(&q, 128), 256);
        assert_eq!(padded(&q, 32), 256);
    }
}
