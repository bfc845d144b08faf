//! vLLM's cache for state-space and hybrid models (Mamba, Mamba-2, Jamba, Bamba, Granite-4.0-H,
//! Nemotron-H, Falcon-H1, Zamba2, Qwen3-Next, Qwen3.5): every mixer layer keeps one recurrent state per
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
//!   `mamba_ssm_cache_dtype` or float32 (float16 before `VllmVersion::NEMOTRON_H_SSM_F32`).
//! - A page holds one layer's whole state (`MambaSpec.page_size_bytes`: the sum of the shapes'
//!   bytes). Beside attention layers the attention block grows until its page covers the state:
//!   block_size = a·⌈state / (a · per-token KV bytes)⌉ with a = max(16, --block-size), and the
//!   state page is padded to the attention page (platforms/interface.py
//!   `_align_hybrid_block_size`; both "Setting attention block size to N tokens" and "Padding
//!   mamba page size by P%" are logged).
//! - A request holds one state block per mixer group (`MambaSpec.max_memory_usage_bytes`: 1 in
//!   mamba-cache mode `none`, 2 in `align`, the prefix-caching mode) whatever its length, and
//!   ⌈len / block_size⌉ blocks per attention group. Prefix caching (mode `align`) is on for hybrids
//!   by default from `VllmVersion::HYBRID_PREFIX_CACHING`; before it, asked for, vLLM picks mode
//!   `all` for Mamba-1/Mamba-2 mixers (not modelled: refused) and `align` for Gated DeltaNet
//!   (model_executor/models/config.py `MambaModelConfig`).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::serve::{auto_dtype, invalid, longest_that_fits, KvGroup, KvPool, PoolSpec, ServeConfig, VllmEngine, VllmVersion};
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
}

/// The mixer whose state a layer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mixer {
    /// Mamba's selective scan (Mamba-1, Jamba).
    #[serde(rename = "mamba")]
    Mamba,
    /// Mamba-2's SSD (Mamba-2, Bamba, Granite-4.0-H, Nemotron-H, Falcon-H1, Zamba2).
    #[serde(rename = "mamba2")]
    Mamba2,
    /// Gated DeltaNet's delta rule (Qwen3-Next, Qwen3.5).
    #[serde(rename = "gated_deltanet")]
    GatedDeltaNet,
}

impl Mixer {
    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Mixer::Mamba => "Mamba",
            Mixer::Mamba2 => "Mamba-2",
            Mixer::GatedDeltaNet => "Gated DeltaNet",
        }
    }
}

/// One rank's recurrent-state cache of a state-space or hybrid model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateCache {
    /// Which mixer.
    pub mixer: Mixer,
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

/// What vram models of serving a state-space or hybrid model: the V1 engine's hybrid manager
/// from `HYBRID_STATES`, one pipeline stage.
pub(crate) fn check(cfg: &ServeConfig) -> Result<()> {
    if cfg.engine != VllmEngine::V1 || cfg.vllm_version < VllmVersion::HYBRID_STATES {
        return Err(invalid(
            "--vllm-version",
            cfg.vllm_version,
            &format!("state-space and hybrid models are modelled on the V1 engine from vLLM {} (its hybrid KV-cache manager keeps the states in the block pool); the V0 engine's separate Mamba cache is not", VllmVersion::HYBRID_STATES),
        ));
    }
    if cfg.pp > 1 {
        return Err(invalid(
            "--pipeline-parallel-size",
            cfg.pp,
            "pipeline parallelism of state-space and hybrid models is not modelled yet (each stage's share of mixer and attention layers); tensor parallelism is",
        ));
    }
    if cfg.lora.is_some() {
        return Err(invalid(
            "--enable-lora",
            "true",
            "LoRA slots on a state-space or hybrid model's mixer layers (which of their projections vLLM adapts, and how it splits them) are not modelled yet; estimate without --enable-lora",
        ));
    }
    Ok(())
}

/// vLLM's state cache of `m` on one tensor-parallel rank of `cfg`, or `None` for a model without
/// mixers.
pub fn state_cache(m: &Model, cfg: &ServeConfig) -> Result<Option<StateCache>> {
    let Some(s) = &m.ssm else { return Ok(None) };
    let bad = |what: String| Error::InvalidValue { what: "model".into(), value: m.model_type.clone(), hint: what };
    if s.mamba1_heads > 1 {
        return Err(bad(format!(
            "{}: vLLM has no model for the first Zamba (its registry serves Zamba2); `vram estimate --mode infer` gives its prefill",
            m.model_type
        )));
    }
    let tp = cfg.tp.max(1);
    let div = |x: u64, what: &str| -> Result<u128> {
        if x % tp == 0 {
            Ok((x / tp) as u128)
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
    let dtype = auto_dtype(m, cfg.dtype);
    // The SSM state's dtype: the flag, else vLLM's per-model rule for the release, else the
    // model's dtype.
    let ssm_dtype = cfg.mamba_ssm_cache_dtype.unwrap_or(match (m.model_type.as_str(), s.cache_state_dtype) {
        ("nemotron_h", Some(d)) => d,
        ("nemotron_h", None) if cfg.vllm_version < VllmVersion::NEMOTRON_H_SSM_F32 => DType::F16,
        ("nemotron_h", None) => DType::F32,
        (t, Some(d)) if t.starts_with("qwen3_5") => d,
        _ => dtype,
    });
    let window = s.d_conv.saturating_sub(1) as u128;
    let (mixer, conv, ssm) = if let Some(dn) = s.delta_net {
        let conv = div(dn.conv_dim(), "Gated DeltaNet conv channels")? * window;
        (Mixer::GatedDeltaNet, conv, div(dn.value_heads, "value heads")? * dn.key_dim as u128 * dn.value_dim as u128)
    } else if let Some(m2) = s.mamba2 {
        let extra = if m2.groups % tp == 0 { 0 } else { tp.saturating_sub(m2.groups) };
        let conv_dim = s.d_inner as u128 + 2 * (m2.groups + extra) as u128 * s.d_state as u128;
        let conv_dim = u64::try_from(conv_dim).map_err(|_| Error::Overflow { what: "Mamba-2 conv channels".into() })?;
        let ssm = div(m2.heads, "Mamba-2 heads")? * m2.head_dim as u128 * s.d_state as u128;
        (Mixer::Mamba2, div(conv_dim, "Mamba-2 conv channels")? * window, ssm)
    } else {
        let d = div(s.d_inner, "Mamba channels")?;
        (Mixer::Mamba, d * window, d * s.d_state as u128)
    };
    let bytes = |n: u128, d: DType| u64::try_from(n * d.bytes() as u128).map_err(|_| Error::Overflow { what: "recurrent state".into() });
    Ok(Some(StateCache {
        mixer,
        attention_layers,
        state_layers,
        conv_bytes: bytes(conv, dtype)?,
        ssm_bytes: bytes(ssm, ssm_dtype)?,
        ssm_dtype,
    }))
}

/// vLLM's mamba-cache mode for `m` (model_executor/models/config.py `MambaModelConfig`): `none`
/// without prefix caching; with it, what `--mamba-cache-mode` says, else `align` from the release
/// that turned prefix caching on for hybrids, and before it `all` for the Mamba families that
/// support it (Mamba-1 and Mamba-2 mixers) and `align` for Gated DeltaNet.
pub(crate) fn cache_mode(m: &Model, cfg: &ServeConfig) -> MambaCacheMode {
    let newer = cfg.vllm_version >= VllmVersion::HYBRID_PREFIX_CACHING;
    if !cfg.prefix_caching.unwrap_or(newer) {
        return MambaCacheMode::None;
    }
    if cfg.vllm_version >= VllmVersion::GDN_PREFILL_CHECKPOINTS {
        // 0.33: `--mamba-cache-mode` has no effect; prefix caching means `align`.
        return MambaCacheMode::Align;
    }
    match cfg.mamba_cache_mode {
        Some(MambaCacheMode::None) | None if newer => MambaCacheMode::Align,
        Some(MambaCacheMode::None) | None if m.ssm.as_ref().is_some_and(|s| s.delta_net.is_some()) => MambaCacheMode::Align,
        Some(MambaCacheMode::None) | None => MambaCacheMode::All,
        Some(mode) => mode,
    }
}

/// Whether `m`'s states export prefill checkpoints ([`VllmVersion::GDN_PREFILL_CHECKPOINTS`]):
/// Gated DeltaNet layers in mamba-cache mode `align` on a GPU where FlashInfer's GDN prefill
/// runs — compute capability 9.0, or a GPU given by size (taken as one); Blackwell's needs a CUDA
/// 13 runtime, which vLLM's Docker image has and its PyPI wheels (CUDA 12.9, its installation
/// guide) do not: vram plans the wheels and says so.
pub(crate) fn prefill_checkpoints(m: &Model, cfg: &ServeConfig) -> bool {
    cfg.vllm_version >= VllmVersion::GDN_PREFILL_CHECKPOINTS
        && m.ssm.as_ref().is_some_and(|s| s.delta_net.is_some())
        && cache_mode(m, cfg) == MambaCacheMode::Align
        && cfg.gpu_arch.is_none_or(|a| a.cuda_cc == Some((9, 0)))
}

/// Tokens of the prefill-checkpoint grid (gdn_attn.py `FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`).
const CHECKPOINT_ALIGNMENT: u64 = 64;

/// The fp32 workspace 0.33's Gated DeltaNet layers size in the profile run for their prefill
/// checkpoints (qwen_gdn_linear_attn.py `_checkpoint_buffer_spec`: ⌈max_num_batched_tokens /
/// grid⌉ × value heads / TP × dv × dk, the grid being the block size), one for all layers (the
/// workspace manager's `get_simultaneous`).
pub(crate) fn checkpoint_workspace(m: &Model, tp: u64, batched: u64, block_size: u64) -> Result<u64> {
    let Some(dn) = m.ssm.as_ref().and_then(|s| s.delta_net) else { return Ok(0) };
    let n =
        batched.div_ceil(block_size.max(1)) as u128 * (dn.value_heads / tp.max(1)) as u128 * dn.value_dim as u128 * dn.key_dim as u128 * 4;
    u64::try_from(n).map_err(|_| Error::Overflow { what: "prefill checkpoint workspace".into() })
}

/// The attention block size that makes an attention page hold a state page
/// (`_align_hybrid_block_size`, mamba-cache modes `none` and `align`): `block_size` when it
/// already does, else a·⌈state / (a · kv_per_token)⌉, a = max(16, block_size) (FlashAttention
/// and FlashInfer take blocks in multiples of 16), and with prefill checkpoints lcm(a, 64).
pub fn aligned_block_size(block_size: u64, state_page: u64, kv_per_token: u64, checkpoints: bool) -> u64 {
    let mut a = block_size.max(16);
    if checkpoints {
        a = a / gcd(a, CHECKPOINT_ALIGNMENT) * CHECKPOINT_ALIGNMENT;
    }
    let need = a * state_page.div_ceil(a * kv_per_token.max(1));
    block_size.max(need)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
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

/// The block pool of a state-space or hybrid model: attention pages of a block grown to hold a
/// state, mixer layers' states padded to that page, the layers of each kind in groups of one
/// size sharing the pool. `kv_per_token`: one attention layer's KV bytes per token on this rank.
pub(crate) fn pool(p: &PoolSpec, mut st: StateCache, kv_per_token: u64) -> Result<KvPool> {
    // A speculative drafter's attention layers (an MTP layer) join the attention layers' groups.
    let target_attention = st.attention_layers;
    st.attention_layers += p.draft_layers;
    if p.mamba_cache_mode == MambaCacheMode::All {
        return Err(invalid(
            "--mamba-cache-mode",
            "all",
            "caching every block's state (vLLM's Mamba-2 prefix-caching mode `all`) is not modelled yet; `align` (the default with prefix caching) and `none` are",
        ));
    }
    let overflow = || Error::Overflow { what: "KV-cache page size".into() };
    let attention = st.attention_layers > 0;
    let bs = if attention { aligned_block_size(p.block_size, st.page_bytes(), kv_per_token, p.prefill_checkpoints) } else { p.block_size };
    let page_size_bytes = if attention { bs.checked_mul(kv_per_token).ok_or_else(overflow)? } else { st.page_bytes() };
    if page_size_bytes == 0 {
        return Err(invalid("model", "without state", "has neither a KV cache nor a recurrent state; nothing to cache"));
    }
    let (size, attn_groups, state_groups) =
        if attention { group_split(st.attention_layers, st.state_layers) } else { (st.state_layers.max(1), 0, 1) };
    // Speculative decoding keeps a state block for each proposed token too (kv_cache_interface.py
    // MambaSpec `num_speculative_blocks` = num_speculative_tokens, mamba/abstract.py).
    let per_state = p.mamba_cache_mode.blocks_per_request() + u64::from(p.prefill_checkpoints) + p.speculative_tokens;
    let need = |len: u64| attn_groups * len.div_ceil(bs) + state_groups * per_state;
    let full = KvGroup { kind: "full", layers: size, window: None, blocks_per_request: p.max_model_len.div_ceil(bs) };
    let state = KvGroup { kind: "state", blocks_per_request: per_state, ..full };
    let groups: Vec<KvGroup> =
        std::iter::repeat_n(full, attn_groups as usize).chain(std::iter::repeat_n(state, state_groups as usize)).collect();
    let num_kv_blocks = p.kv_cache_bytes / page_size_bytes / size;
    let max_concurrency = num_kv_blocks as f64 / need(p.max_model_len) as f64;
    let kv_tokens = if p.tokens_from_concurrency {
        (max_concurrency * p.max_model_len as f64) as u64
    } else {
        // The smallest block size of any group: a state group's is max-model-len in mode `none`
        // and the attention block size in `align` (cache_config.mamba_block_size).
        let state_bs = if p.mamba_cache_mode == MambaCacheMode::Align { bs } else { p.max_model_len };
        let min_bs = if attention { bs.min(state_bs) } else { state_bs };
        num_kv_blocks / groups.len() as u64 * min_bs
    };
    Ok(KvPool {
        draft_bytes_per_token: kv_per_token.saturating_mul(st.attention_layers - target_attention),
        block_size: bs,
        page_size_bytes,
        state: Some(st),
        kv_bytes_per_token: kv_per_token.checked_mul(st.attention_layers).ok_or_else(overflow)?,
        group_size: size,
        groups,
        num_kv_blocks,
        kv_tokens,
        max_concurrency,
        // 0 when not even the states fit: `need` never falls below them.
        max_model_len_that_fits: longest_that_fits(p.max_model_len, num_kv_blocks, need),
    })
}

/// What the report says of a state-space or hybrid model's states.
pub(crate) fn note(m: &Model, pool: &KvPool, cfg: &ServeConfig) -> Option<String> {
    let st = pool.state?;
    let mut s = format!(
        "{} {} layers keep a recurrent state per request instead of a KV cache: {} B of conv state + {} B of {} state per layer on this rank ({}), whatever the context length",
        st.state_layers,
        st.mixer.name(),
        st.conv_bytes,
        st.ssm_bytes,
        st.ssm_dtype.torch_name(),
        if cfg.mamba_ssm_cache_dtype.is_some() { "--mamba-ssm-cache-dtype" } else { "its dtype as this vLLM release picks it" },
    );
    if st.attention_layers > 0 {
        let padded = pool.page_size_bytes.saturating_sub(st.page_bytes());
        s.push_str(&format!(
            "; beside {} attention layers vLLM sets the attention block size to {} tokens so a page holds a state (\"Setting attention block size to {} tokens\"), and pads the state by {:.2}%",
            st.attention_layers,
            pool.block_size,
            pool.block_size,
            padded as f64 / st.page_bytes().max(1) as f64 * 100.0
        ));
    }
    s.push_str(match (cache_mode(m, cfg), prefill_checkpoints(m, cfg)) {
        (MambaCacheMode::Align, true) => "; prefix caching on (mamba-cache mode align) with vLLM ≥ 0.33's FlashInfer GDN prefill checkpoints (compute capability 9.0): the block is a multiple of 64 tokens, three state blocks per request in each state group, and an fp32 checkpoint workspace is kept from the profile run",
        (MambaCacheMode::Align, false) => "; prefix caching on (mamba-cache mode align): two state blocks per request in each state group",
        _ => "; prefix caching off for the states (mamba-cache mode none): one state block per request in each state group",
    });
    let blackwell = cfg.gpu_arch.and_then(|a| a.cuda_cc).is_some_and(|(major, _)| major == 10 || major == 12);
    if blackwell
        && cfg.vllm_version >= VllmVersion::GDN_PREFILL_CHECKPOINTS
        && st.mixer == Mixer::GatedDeltaNet
        && cache_mode(m, cfg) == MambaCacheMode::Align
    {
        s.push_str("; on Blackwell vLLM ≥ 0.33 runs FlashInfer's GDN prefill, with its prefill checkpoints (64-token block grid, a third state block, an fp32 workspace), only under a CUDA 13 runtime: vLLM's Docker image has one, its PyPI wheels (CUDA 12.9) do not, and vram plans the PyPI build");
    }
    if cfg.vllm_version >= VllmVersion::GDN_PREFILL_CHECKPOINTS && cfg.mamba_cache_mode.is_some() {
        s.push_str("; --mamba-cache-mode has no effect from vLLM 0.33 (the mode follows --enable-prefix-caching)");
    }
    s.push_str(match st.mixer {
        // vllm/model_executor/layers/mamba/gdn_linear_attn.py `_forward_core`: "V1 profile run —
        // warm up prefill kernels" on 16–64 dummy tokens and return; the chunked delta rule never
        // sees the profile's tokens.
        Mixer::GatedDeltaNet => "; the profile run's activation is taken from the attention and MLP widths: vLLM's Gated DeltaNet layers skip their recurrent kernels in the profile run (gdn_linear_attn.py warms them on at most 64 dummy tokens), so their projections are the phase counted beside attention and MLP",
        _ => "; the profile run's activation is taken from the attention and MLP widths (the mixer kernels' own workspaces in the profile run are not modelled: a guess)",
    });
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_grows_to_hold_a_state() {
        // Qwen3.5-4B: a state of 49,152 + 2,097,152 B, 4,096 B of KV per token → 528 tokens,
        // padding 0.76% (both lines in vllm-project/vllm#37467 and #40696).
        let state = 49_152 + 2_097_152;
        let bs = aligned_block_size(16, state, 4096, false);
        assert_eq!(bs, 528);
        let pad = (bs * 4096 - state) as f64 / state as f64 * 100.0;
        assert!((pad - 0.76).abs() < 0.005, "{pad}");
        // A larger --block-size that already holds the state is kept.
        assert_eq!(aligned_block_size(1024, state, 4096, false), 1024);
        // A smaller one that does not is raised, in its own multiples.
        assert_eq!(aligned_block_size(32, state, 4096, false), 544);
    }

    #[test]
    fn groups_follow_the_smaller_kind_unless_counts_are_close() {
        assert_eq!(group_split(16, 48), (16, 1, 3)); // Qwen3.5-27B: 16 attention, 48 linear
        assert_eq!(group_split(4, 28), (4, 1, 7)); // Jamba
        assert_eq!(group_split(12, 13), (13, 1, 1)); // gpt-oss-20b + EAGLE's example
        assert_eq!(group_split(36, 36), (36, 1, 1)); // Falcon-H1: both in every layer
    }
}
