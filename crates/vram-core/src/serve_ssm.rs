//! vLLM's cache for state-space and hybrid models (Mamba, Mamba-2, Jamba, Bamba, Granite-4.0-H,
//! Nemotron-H, Falcon-H1, Qwen3-Next, Qwen3.5): every mixer layer keeps one recurrent state per
//! request — its conv window and its SSM (or Gated DeltaNet) state — in a page of the same block
//! pool as the attention layers' KV cache.
//!
//! The rules, from vLLM's source:
//! - The state's shapes per TP rank (model_executor/layers/mamba/mamba_utils.py
//!   `MambaStateShapeCalculator`): Mamba-1 conv (d_inner/tp, conv−1) and SSM (d_inner/tp, N);
//!   Mamba-2 conv (conv−1, (d_inner + 2·G′·N)/tp), G′ = the groups plus those replicated so every
//!   rank's heads have theirs (`extra_groups_for_head_shards`), and SSM (heads/tp, head_dim, N);
//!   Gated DeltaNet conv (conv−1, (2·Hk·dk + Hv·dv)/tp) and state (Hv/tp, dv, dk).
//! - Their dtypes (`MambaStateDtypeCalculator`): the conv state in `--mamba-cache-dtype` (auto:
//!   the model's dtype; `--kv-cache-dtype` does not apply), the SSM state in
//!   `--mamba-ssm-cache-dtype`, whose `auto` is the model's dtype except where vLLM's per-model
//!   config says otherwise (model_executor/models/config.py): Qwen3.5 takes the config's
//!   `mamba_ssm_dtype` (float32 in the released checkpoints), Nemotron-H its
//!   `mamba_ssm_cache_dtype` or float32.
//! - A page holds one layer's whole state (`MambaSpec.page_size_bytes`: the sum of the shapes'
//!   bytes). Beside attention layers the attention block grows until its page covers the state:
//!   block_size = a·⌈state / (a · per-token KV bytes)⌉ with a = max(16, --block-size), and the
//!   state page is padded to the attention page (platforms/interface.py
//!   `_align_hybrid_block_size`; both "Setting attention block size to N tokens" and "Padding
//!   mamba page size by P%" are logged).
//! - A request holds one state block per mixer group (`MambaSpec.max_memory_usage_bytes`: 1 in
//!   mamba-cache mode `none`, 2 in `align`, the prefix-caching mode) whatever its length, and
//!   ⌈len / block_size⌉ blocks per attention group.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::Model;
use serde::Serialize;

/// vLLM's `--mamba-cache-mode`: how recurrent states are kept for prefix caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MambaCacheMode {
    /// Prefix caching off: one state per request.
    None,
    /// Prefix caching with states kept at block boundaries: two blocks per request.
    Align,
    /// Every block's state cached (Mamba-2 family only): a state per block of the request.
    All,
}

impl MambaCacheMode {
    /// The flag's value (`none`, `align`, `all`).
    pub fn parse(s: &str) -> Option<MambaCacheMode> {
        match s {
            "none" => Some(MambaCacheMode::None),
            "align" => Some(MambaCacheMode::Align),
            "all" => Some(MambaCacheMode::All),
            _ => None,
        }
    }

    /// State blocks one request holds in a mixer group (`MambaSpec.max_memory_usage_bytes`
    /// without speculative decoding).
    pub fn blocks_per_request(self) -> u64 {
        match self {
            MambaCacheMode::Align => 2,
            _ => 1,
        }
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            MambaCacheMode::None => "none",
            MambaCacheMode::Align => "align",
            MambaCacheMode::All => "all",
        }
    }
}

/// One rank's recurrent-state cache of a state-space or hybrid model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateCache {
    /// Which mixer: `mamba`, `mamba2` or `gated_deltanet`.
    pub mixer: &'static str,
    /// Layers with a KV cache (attention).
    pub attention_layers: u64,
    /// Layers with a recurrent state (mixers).
    pub state_layers: u64,
    /// Bytes of one layer's conv state for one request on this rank.
    pub conv_bytes: u64,
    /// Bytes of one layer's SSM / delta-rule state for one request on this rank.
    pub ssm_bytes: u64,
    /// The SSM state's dtype.
    pub ssm_dtype: DType,
}

impl StateCache {
    /// Bytes of one layer's whole state (one page before padding).
    pub fn page_bytes(&self) -> u64 {
        self.conv_bytes + self.ssm_bytes
    }
}

/// vLLM's state cache of `m` on one of `tp` ranks, or `None` for a model without mixers.
/// `dtype`: the served model dtype; `ssm_dtype`: `--mamba-ssm-cache-dtype` when given.
pub fn state_cache(m: &Model, tp: u64, dtype: DType, ssm_dtype: Option<DType>) -> Result<Option<StateCache>> {
    let Some(s) = &m.ssm else { return Ok(None) };
    let bad = |what: String| Error::InvalidValue { what: "model".into(), value: m.model_type.clone(), hint: what };
    if s.mamba1_heads > 1 {
        return Err(bad(format!(
            "{}: vLLM has no model for the first Zamba (its registry serves Zamba2); `vram estimate --mode infer` gives its prefill",
            m.model_type
        )));
    }
    let tp = tp.max(1);
    let div = |x: u64, what: &str| -> Result<u64> {
        if x % tp == 0 {
            Ok(x / tp)
        } else {
            Err(bad(format!(
                "vLLM splits the {what} ({x}) over the tensor-parallel ranks and needs it divisible by --tensor-parallel-size {tp}"
            )))
        }
    };
    let (attention_layers, state_layers) = if s.parallel_attention {
        // Falcon-H1: every layer runs attention and the mixer side by side.
        (m.layers, m.layers)
    } else {
        // Zamba2 counts each shared-block invocation as a layer; vLLM gives every invocation a
        // KV cache of its own (zamba2.py Zamba2Attention: one `Attention` per hybrid layer, "KV
        // cache is unique for every attention layer") beside the Mamba-2 layers' states.
        (s.attention_layers, m.layers.saturating_sub(s.attention_layers + s.mlp_layers))
    };
    // The SSM state's dtype: the flag, else vLLM's per-model rule, else the model's dtype.
    let ssm_dtype = ssm_dtype.unwrap_or(match (m.model_type.as_str(), s.cache_state_dtype) {
        ("nemotron_h", d) => d.unwrap_or(DType::F32),
        (t, Some(d)) if t.starts_with("qwen3_5") => d,
        _ => dtype,
    });
    let (c, e) = (dtype.bytes(), ssm_dtype.bytes());
    let window = s.d_conv.saturating_sub(1);
    let (mixer, conv, ssm) = if let Some(dn) = s.delta_net {
        (
            "gated_deltanet",
            div(dn.conv_dim(), "Gated DeltaNet conv channels")? * window,
            div(dn.value_heads, "value heads")? * dn.key_dim * dn.value_dim,
        )
    } else if let Some(m2) = s.mamba2 {
        let extra = if m2.groups % tp == 0 { 0 } else { tp.saturating_sub(m2.groups) };
        let groups = m2.groups + extra;
        let conv_dim = s.d_inner + 2 * groups * s.d_state;
        ("mamba2", div(conv_dim, "Mamba-2 conv channels")? * window, div(m2.heads, "Mamba-2 heads")? * m2.head_dim * s.d_state)
    } else {
        let d = div(s.d_inner, "Mamba channels")?;
        ("mamba", d * window, d * s.d_state)
    };
    let overflow = || Error::Overflow { what: "recurrent state".into() };
    Ok(Some(StateCache {
        mixer,
        attention_layers,
        state_layers,
        conv_bytes: conv.checked_mul(c).ok_or_else(overflow)?,
        ssm_bytes: ssm.checked_mul(e).ok_or_else(overflow)?,
        ssm_dtype,
    }))
}

/// The attention block size that makes an attention page hold a state page
/// (`_align_hybrid_block_size`, mamba-cache modes `none` and `align`): `block_size` when it
/// already does, else a·⌈state / (a · kv_per_token)⌉, a = max(16, block_size) (FlashAttention
/// and FlashInfer take blocks in multiples of 16).
pub fn aligned_block_size(block_size: u64, state_page: u64, kv_per_token: u64) -> u64 {
    let a = block_size.max(16);
    let need = a * state_page.div_ceil(a * kv_per_token.max(1));
    block_size.max(need)
}

/// KV-cache groups of a model with layers of two kinds (`_get_kv_cache_groups_uniform_page_size`):
/// each kind is cut into groups of `size` layers (the last padded), `size` being the smaller
/// kind's count, or the larger's when it is under 1.5 × the smaller (fewer padding layers).
/// Returns (group size, groups of the first kind, groups of the second).
pub fn group_split(a: u64, b: u64) -> (u64, u64, u64) {
    let (lo, hi) = (a.min(b), a.max(b));
    let size = if 2 * hi < 3 * lo { hi } else { lo }.max(1);
    (size, a.div_ceil(size), b.div_ceil(size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_grows_to_hold_a_state() {
        // Qwen3.5-4B: a state of 49,152 + 2,097,152 B, 4,096 B of KV per token → 528 tokens,
        // padding 0.76% (both lines in vllm-project/vllm#37467 and #40696).
        let state = 49_152 + 2_097_152;
        let bs = aligned_block_size(16, state, 4096);
        assert_eq!(bs, 528);
        let pad = (bs * 4096 - state) as f64 / state as f64 * 100.0;
        assert!((pad - 0.76).abs() < 0.005, "{pad}");
        // A larger --block-size that already holds the state is kept.
        assert_eq!(aligned_block_size(1024, state, 4096), 1024);
        // A smaller one that does not is raised, in its own multiples.
        assert_eq!(aligned_block_size(32, state, 4096), 544);
    }

    #[test]
    fn groups_follow_the_smaller_kind_unless_counts_are_close() {
        assert_eq!(group_split(16, 48), (16, 1, 3)); // Qwen3.5-27B: 16 attention, 48 linear
        assert_eq!(group_split(4, 28), (4, 1, 7)); // Jamba
        assert_eq!(group_split(12, 13), (13, 1, 1)); // gpt-oss-20b + EAGLE's example
        assert_eq!(group_split(36, 36), (36, 1, 1)); // Falcon-H1: both in every layer
    }
}
