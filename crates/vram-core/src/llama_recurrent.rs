//! llama.cpp's recurrent state for state-space and hybrid GGUF models (Mamba, Mamba-2, Jamba,
//! Falcon-H1, Granite-4.0-H, Nemotron-H, LFM2, Qwen3-Next, Qwen3.5): which layers keep a KV cache
//! and which a per-sequence state, and the state's size.
//!
//! Sources (ggml-org/llama.cpp):
//! - src/llama-model.cpp `create_memory`: a recurrent architecture gets `llama_memory_recurrent`
//!   alone; a hybrid gets `llama_memory_hybrid`, its KV cache on the layers that are not
//!   recurrent and its state on those that are (Falcon-H1: both on every layer; Nemotron-H: only
//!   layers without an MLP take either). The state is `GGML_TYPE_F32` for both of its tensors,
//!   with max(1, n_seq_max) cells (one per sequence: `--parallel`), on the layer's device
//!   (`model.dev_layer(il)`, as the KV cache).
//! - src/llama-memory-recurrent.cpp: per layer, r = n_embd_r × cells and s = n_embd_s × cells
//!   ("RS buffer size"; "R (f32) …, S (f32) …").
//! - src/llama-hparams.cpp `n_embd_r` / `n_embd_s`: the convolution state
//!   (d_conv − 1)·(d_inner + 2·n_group·d_state) — LFM2's short convolution n_embd·(L_cache − 1) —
//!   and the SSM state d_state·d_inner.
//! - src/llama-model.cpp `load_hparams`: which layers are recurrent — every layer of Mamba and
//!   Mamba-2; Jamba, Granite-4.0-H and LFM2: those with no KV heads; Nemotron-H: no KV heads and
//!   no MLP; Qwen3-Next and Qwen3.5: all but every `full_attention_interval`-th.
//!
//! Checked against logs (tests/gguf.rs `qwen36_27b_state_matches_its_log`): Qwen3.6-27B
//! (llama.cpp#23792, "size = 448.88 MiB (3 cells, 65 layers, 3 seqs), R (f32): 16.88 MiB,
//! S (f32): 432.00 MiB").

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, MetaValue};

/// Architectures whose layers are all recurrent (`llm_arch_is_recurrent`) and the hybrids
/// modelled here (`llm_arch_is_hybrid`), with how their layers are told apart.
const MODELLED: &[(&str, Layout)] = &[
    ("mamba", Layout::AllState),
    ("mamba2", Layout::AllState),
    ("jamba", Layout::NoKvHeads),
    ("granitehybrid", Layout::NoKvHeads),
    ("lfm2", Layout::NoKvHeads),
    ("lfm2moe", Layout::NoKvHeads),
    ("falcon-h1", Layout::Parallel),
    ("nemotron_h", Layout::NemotronH),
    ("nemotron_h_moe", Layout::NemotronH),
    ("qwen3next", Layout::Interval),
    ("qwen35", Layout::Interval),
    ("qwen35moe", Layout::Interval),
];

/// How a hybrid's layers divide between attention and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Every layer keeps a state, none a KV cache.
    AllState,
    /// A layer with `attention.head_count_kv` 0 keeps a state, the others a KV cache.
    NoKvHeads,
    /// Every layer runs attention and a mixer side by side: both caches everywhere.
    Parallel,
    /// A layer with neither KV heads nor an MLP keeps a state; with KV heads and no MLP, a KV
    /// cache; an MLP layer neither.
    NemotronH,
    /// The per-layer flags `attention.recurrent_layers` when the file has them, else every
    /// `full_attention_interval`-th layer is attention and the rest keep a state; the
    /// multi-token-prediction layers (`nextn_predict_layers`, at the end) keep no state (the
    /// Qwen3.6-27B log skips it) and are planned with a KV cache, as the full-attention layers
    /// they are (assumed: no log shows their KV).
    Interval,
}

/// The recurrent side of a GGUF model as llama.cpp allocates it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recurrent {
    /// Per layer: whether it has a KV cache.
    #[serde(skip)]
    pub attention: Vec<bool>,
    /// Per layer: whether it keeps a recurrent state.
    #[serde(skip)]
    pub state: Vec<bool>,
    /// Layers with a KV cache.
    pub attention_layers: u64,
    /// Layers with a recurrent state.
    pub state_layers: u64,
    /// f32 values of one sequence's convolution (or token-shift) state per layer.
    pub n_embd_r: u64,
    /// f32 values of one sequence's SSM state per layer.
    pub n_embd_s: u64,
    /// The mixer's inner width (`ssm.inner_size`; the hidden width for LFM2), for the compute
    /// buffer.
    pub d_inner: u64,
    /// The mixer's convolution channels (d_inner + 2·n_group·d_state), for the compute buffer.
    pub conv_channels: u64,
}

/// Recurrent architectures not modelled: RWKV's token-shift and WKV states, PLaMo-2's layer
/// pattern and Kimi's delta attention.
const REFUSED: &[&str] = &["rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "plamo2", "kimi-linear"];

/// Per-layer values of `{arch}.{key}`: an array of `layers` integers, or one value for all;
/// `None` when absent.
fn per_layer(g: &Gguf, arch: &str, key: &str, layers: u64, file: &str) -> Result<Option<Vec<u64>>> {
    let full = format!("{arch}.{key}");
    let bad = |why: String| Error::Gguf { file: file.into(), message: format!("`{full}`: {why}") };
    match g.metadata.get(&full) {
        None => Ok(None),
        Some(MetaValue::Array { len, ints }) => {
            if *len != layers || ints.len() as u64 != layers {
                return Err(bad(format!("{len} values for {layers} layers")));
            }
            ints.iter().map(|&i| u64::try_from(i).map_err(|_| bad(format!("negative value {i}")))).collect::<Result<Vec<_>>>().map(Some)
        }
        Some(MetaValue::Bool(b)) => Ok(Some(vec![u64::from(*b); layers as usize])),
        Some(v) => match v.as_u64() {
            Some(x) => Ok(Some(vec![x; layers as usize])),
            None => Err(bad("not an integer".into())),
        },
    }
}

/// The recurrent layout of a GGUF model, `None` for an attention-only architecture; an error
/// names what is missing or not modelled.
pub fn read(g: &Gguf, arch: &str, layers: u64, embd: u64, file: &str) -> Result<Option<Recurrent>> {
    let keys = ["ssm.conv_kernel", "ssm.state_size", "wkv.head_size", "shortconv.l_cache"];
    let has_keys = keys.iter().any(|k| g.metadata.contains_key(&format!("{arch}.{k}")));
    let layout = match MODELLED.iter().find(|(a, _)| *a == arch) {
        Some((_, l)) => *l,
        None if REFUSED.contains(&arch) || has_keys => {
            return Err(Error::Gguf {
                file: file.into(),
                message: format!(
                    "`{arch}` keeps a recurrent state llama.cpp sizes in a way vram does not model yet (modelled: {}); RWKV's token-shift state, PLaMo-2 and Kimi's delta attention are not",
                    MODELLED.iter().map(|(a, _)| *a).collect::<Vec<_>>().join(", ")
                ),
            })
        }
        None => return Ok(None),
    };
    let n = layers as usize;
    let u = |key: &str| g.metadata.get(&format!("{arch}.{key}")).and_then(MetaValue::as_u64);
    let need = |key: &str| {
        u(key).ok_or_else(|| Error::MissingKey {
            file: file.into(),
            key: format!("{arch}.{key}"),
            why: "size llama.cpp's recurrent state".into(),
        })
    };
    let kv = per_layer(g, arch, "attention.head_count_kv", layers, file)?;
    let ff = per_layer(g, arch, "feed_forward_length", layers, file)?;
    let (attention, state): (Vec<bool>, Vec<bool>) = match layout {
        Layout::AllState => (vec![false; n], vec![true; n]),
        Layout::Parallel => (vec![true; n], vec![true; n]),
        Layout::NoKvHeads => {
            let kv = kv.as_ref().ok_or_else(|| Error::MissingKey {
                file: file.into(),
                key: format!("{arch}.attention.head_count_kv"),
                why: "tell its attention layers (KV heads > 0) from its state layers".into(),
            })?;
            (kv.iter().map(|&k| k > 0).collect(), kv.iter().map(|&k| k == 0).collect())
        }
        Layout::NemotronH => {
            // Both per-layer arrays tell the three kinds of layer apart; without either every layer
            // would read as one kind.
            let missing = |key: &str| Error::MissingKey {
                file: file.into(),
                key: format!("{arch}.{key}"),
                why: "tell Nemotron-H's attention layers (KV heads, no MLP), Mamba-2 layers (neither) and MLP layers apart, per layer"
                    .into(),
            };
            let kv = kv.as_ref().ok_or_else(|| missing("attention.head_count_kv"))?;
            let ff = ff.as_ref().ok_or_else(|| missing("feed_forward_length"))?;
            ((0..n).map(|i| kv[i] > 0 && ff[i] == 0).collect(), (0..n).map(|i| kv[i] == 0 && ff[i] == 0).collect())
        }
        Layout::Interval => {
            // llama-model.cpp (qwen35, qwen3next): the explicit per-layer flags
            // `attention.recurrent_layers` when the file has them, else every
            // `full_attention_interval`-th layer (default 4) is attention; the trailing
            // multi-token-prediction layers are never recurrent.
            let mtp = u("nextn_predict_layers").unwrap_or(0).min(layers);
            let state: Vec<bool> = match per_layer(g, arch, "attention.recurrent_layers", layers, file)? {
                Some(flags) => flags.iter().map(|&f| f != 0).collect(),
                None => {
                    let every = u("full_attention_interval").unwrap_or(4);
                    if every == 0 {
                        return Err(Error::Gguf { file: file.into(), message: format!("`{arch}.full_attention_interval` is 0") });
                    }
                    (0..layers).map(|i| i < layers - mtp && (i + 1) % every != 0).collect()
                }
            };
            (state.iter().map(|s| !s).collect(), state)
        }
    };
    let (n_embd_r, n_embd_s, d_inner, conv_channels) = if arch.starts_with("lfm2") {
        let l_cache = need("shortconv.l_cache")?;
        (embd.saturating_mul(l_cache.saturating_sub(1)), 0, embd, embd)
    } else {
        let (d_conv, d_inner, d_state) = (need("ssm.conv_kernel")?, need("ssm.inner_size")?, need("ssm.state_size")?);
        let groups = u("ssm.group_count").unwrap_or(0);
        let channels = d_inner.saturating_add(groups.saturating_mul(d_state).saturating_mul(2));
        (d_conv.saturating_sub(1).saturating_mul(channels), d_state.saturating_mul(d_inner), d_inner, channels)
    };
    if [n_embd_r, n_embd_s, d_inner].iter().any(|&x| x > 1 << 32) {
        return Err(Error::Gguf {
            file: file.into(),
            message: format!("implausible state size: {n_embd_r} + {n_embd_s} values per layer"),
        });
    }
    let count = |v: &[bool]| v.iter().filter(|&&b| b).count() as u64;
    Ok(Some(Recurrent {
        attention_layers: count(&attention),
        state_layers: count(&state),
        attention,
        state,
        n_embd_r,
        n_embd_s,
        d_inner,
        conv_channels,
    }))
}

impl Recurrent {
    /// Bytes of layer `il`'s state with `parallel` sequences: max(1, n_seq_max) cells of f32
    /// r and s rows (llama-memory-recurrent.cpp).
    pub fn layer_bytes(&self, il: u64, parallel: u64) -> u64 {
        if !self.state.get(il as usize).copied().unwrap_or(false) {
            return 0;
        }
        parallel.max(1).saturating_mul(self.n_embd_r.saturating_add(self.n_embd_s)).saturating_mul(4)
    }

    /// Whether layer `il` has a KV cache.
    pub fn has_kv(&self, il: u64) -> bool {
        self.attention.get(il as usize).copied().unwrap_or(false)
    }

    /// The mixer's share of the compute buffer for one ubatch of `u` tokens over `seqs`
    /// sequences (f32 throughout, src/models/graph-context-mamba.cpp and the delta-net graph):
    /// the input projection (z, x, B, C and the time steps: about 2·d_inner + conv channels per
    /// token), the convolution's input with its d_conv − 1 carried columns and its output, the
    /// scan's output and the states read and written. Modelled from the tensor widths, not
    /// checked against a logged buffer.
    pub fn mixer_phase_bytes(&self, u: u64, seqs: u64, embd: u64) -> u64 {
        let per_token = 2 * self.d_inner + 3 * self.conv_channels + self.d_inner + 2 * embd;
        let states = 2 * seqs.max(1) * (self.n_embd_r + self.n_embd_s);
        u.saturating_mul(per_token).saturating_add(states).saturating_mul(4)
    }
}
