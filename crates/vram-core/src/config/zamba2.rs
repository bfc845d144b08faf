//! Zamba2 (transformers models/zamba2: `Zamba2ForCausalLM`, configuration_zamba2.py; Glorioso et
//! al. 2024, "The Zamba2 Suite"): a stack of Mamba-2 layers (`layers_block_type` "mamba" /
//! "linear_attention": an RMSNorm and the mixer, no MLP), some of which ("hybrid") first run a
//! shared transformer block over the residual stream concatenated with the embedding output,
//! whose result, through an unshared `linear`, is added to the mixer's input. The block's
//! weights cycle through `num_mem_blocks` sets; each invocation has its own low-rank adapters.

use serde_json::Value;

use super::keys::Cfg;
use super::mamba::Mamba2Keys;
use crate::error::{Error, Result};
use crate::model::{Act, Mlp, Model, Norm, SharedBlock, Ssm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let (mixers, invocations) = hybrid_layers(c, "Zamba2", "Mamba-2", default_layout)?;
    // Zamba2Config's defaults (transformers 5.23): the "Zamba2-2.7B style" configuration.
    let mut m = super::keys::base(name);
    m.hidden = c.opt(&["hidden_size"])?.unwrap_or(2560);
    m.vocab = c.opt(&["vocab_size"])?.unwrap_or(32000);
    m.embed_dim = m.hidden;
    let h = m.hidden;
    m.heads = c.opt(&["num_attention_heads"])?.unwrap_or(32);
    m.kv_heads = c.opt(&["num_key_value_heads"])?.unwrap_or(m.heads);
    // Zamba2Config.__post_init__: attention_hidden_size = 2 × hidden, attention_head_dim =
    // 2 × hidden // heads (the config's own head_dim is overwritten), intermediate_size
    // defaults to 4 × hidden.
    if m.heads == 0 || (2 * h) % m.heads != 0 {
        return Err(c.bad(
            "num_attention_heads",
            &Value::from(m.heads),
            "must divide 2 × hidden_size (Zamba2's attention reads the concatenated 2 × hidden input)",
        ));
    }
    m.head_dim = 2 * h / m.heads;
    shared_block_stack(c, &mut m, mixers, invocations)?;
    let bias = c.bool("add_bias_linear", false)?;
    // Zamba2MLP: gate_up_proj → chunk → act(gate) · up → down_proj.
    m.mlp = Mlp { gated: true, fused_gate_up: true, act: c.act(&["hidden_act"], Act::Gelu)?, bias };
    // Rotary positions only with `use_mem_rope` (the rotary width is set with the other
    // families' in positions.rs).
    let rope = c.bool("use_mem_rope", false)?;

    // Zamba2MambaMixer: d_inner = mamba_expand × hidden, n_mamba_heads heads of
    // d_inner / n_mamba_heads (mamba_headdim is recomputed from them), conv bias always on;
    // checked as the other Mamba-2 mixers are.
    let d_inner = c.opt(&["mamba_expand"])?.unwrap_or(2).saturating_mul(h);
    let heads = c.opt(&["n_mamba_heads"])?.unwrap_or(8);
    let k = Mamba2Keys {
        heads,
        head_dim: d_inner.checked_div(heads).unwrap_or(0),
        d_state: c.opt(&["mamba_d_state"])?.unwrap_or(64),
        d_conv: c.opt(&["mamba_d_conv"])?.unwrap_or(4),
        groups: c.opt(&["mamba_ngroups"])?.unwrap_or(1),
        chunk: c.opt(&["chunk_size"])?.unwrap_or(256),
    };
    if k.head_dim == 0 || !k.buildable(d_inner) {
        return Err(c.bad(
            "n_mamba_heads",
            &Value::from(heads),
            "n_mamba_heads must divide mamba_expand × hidden_size, with mamba_ngroups dividing the heads, mamba_d_state 1–1024, mamba_d_conv 1–64, chunk_size 1–4096",
        ));
    }
    let unique = c.opt(&["num_mem_blocks"])?.unwrap_or(1);
    let adapter_rank = c.opt(&["adapter_rank"])?.unwrap_or(128);
    let attention_adapters = c.bool("use_shared_attention_adapter", false)?;
    if unique == 0 || unique > invocations || adapter_rank == 0 || adapter_rank > 1 << 16 {
        return Err(c.bad(
            "num_mem_blocks",
            &Value::from(unique),
            &format!("num_mem_blocks must be between 1 and the {invocations} hybrid layers, adapter_rank between 1 and 65536"),
        ));
    }
    if attention_adapters && m.kv_heads != m.heads {
        // The k and v adapters return 2 × hidden, which only matches k_proj's output without GQA.
        return Err(c.bad(
            "num_key_value_heads",
            &Value::from(m.kv_heads),
            "use_shared_attention_adapter needs num_key_value_heads = num_attention_heads (the k/v adapters return 2 × hidden_size)",
        ));
    }
    m.ssm = Some(Ssm {
        attention_layers: invocations,
        shared: Some(SharedBlock { unique, adapter_rank, attention_adapters }),
        ..k.ssm(d_inner, true, bias)
    });
    m.warnings.push(format!(
        "Zamba2: {mixers} Mamba-2 layers, {invocations} of them preceded by the shared attention block ({unique} weight set{}, {}per-invocation rank-{adapter_rank} adapters on its MLP{}); the mixers follow transformers' PyTorch path (without `mamba-ssm` and `causal-conv1d`; with their CUDA kernels training and a prefill hold far less, which vram does not model yet).",
        if unique == 1 { "" } else { "s" },
        if rope { "rotary positions, " } else { "no positions, " },
        if attention_adapters { " and on q, k, v" } else { "" }
    ));
    Ok(m)
}

/// Zamba2Config.__post_init__'s default 54-layer layout.
fn default_layout(_c: &Cfg) -> Result<Vec<bool>> {
    let mut v = vec![false];
    for _ in 0..7 {
        v.extend([false; 5]);
        v.push(true);
    }
    v.extend([false; 4]);
    v.push(true);
    v.extend([false; 3]);
    v.push(true);
    v.extend([false; 2]);
    Ok(v)
}

/// A Zamba model's layers: (mixer layers, shared-block invocations), from `layers_block_type`
/// (or `layer_types`), else the family's `default` layout; one without a hybrid layer is
/// refused. Shared by Zamba and Zamba2.
pub(super) fn hybrid_layers(c: &Cfg, family: &str, mixer: &str, default: fn(&Cfg) -> Result<Vec<bool>>) -> Result<(u64, u64)> {
    let kinds = layout(c, mixer, default)?;
    let invocations = kinds.iter().filter(|h| **h).count() as u64;
    let mixers = kinds.len() as u64;
    if invocations == 0 {
        return Err(c.bad(
            "layers_block_type",
            &Value::from(mixers),
            &format!("vram models {family} with some \"hybrid\" layers (the shared attention block); every layer given is a {mixer} layer"),
        ));
    }
    Ok((mixers, invocations))
}

/// What Zamba and Zamba2 share once their widths are read: the shared block's MLP of
/// `intermediate_size` (4 × hidden when absent or 0, as both configs' `__post_init__` set it),
/// the mixers plus one layer per block invocation, RMSNorm with a final norm, the tied head,
/// the attention dropout and `use_cache`.
pub(super) fn shared_block_stack(c: &Cfg, m: &mut Model, mixers: u64, invocations: u64) -> Result<()> {
    m.intermediate = match c.opt(&["intermediate_size"])? {
        Some(i) if i > 0 => i,
        _ => 4 * m.hidden,
    };
    m.layers = mixers + invocations;
    m.norm = Norm::RmsNorm;
    m.final_norm = true;
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.use_cache = c.bool("use_cache", true)?;
    Ok(())
}

/// Which layers are hybrid (`true`) and which a `mixer` layer alone.
fn layout(c: &Cfg, mixer: &str, default: fn(&Cfg) -> Result<Vec<bool>>) -> Result<Vec<bool>> {
    let key = if c.get("layers_block_type").is_some_and(|v| !v.is_null()) { "layers_block_type" } else { "layer_types" };
    let kinds: Vec<bool> = match c.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| match t.as_str() {
                Some("mamba" | "linear_attention") => Ok(false),
                Some("hybrid") => Ok(true),
                _ => Err(c.bad(key, t, "each entry \"mamba\" (or \"linear_attention\") or \"hybrid\"")),
            })
            .collect::<Result<_>>()?,
        None | Some(Value::Null) => default(c)?,
        Some(v) => return Err(c.bad(key, v, "expected a list of \"mamba\" / \"hybrid\" entries")),
    };
    if kinds.is_empty() {
        return Err(Error::MissingKey {
            file: c.file.into(),
            key: key.into(),
            why: format!("know which layers are {mixer} and which run the shared attention block"),
        });
    }
    if let Some(n) = c.opt(&["num_hidden_layers"])? {
        if n != kinds.len() as u64 {
            return Err(c.bad(
                "num_hidden_layers",
                &Value::from(n),
                &format!("must equal the {} entries of {key} (transformers builds one layer per entry)", kinds.len()),
            ));
        }
    }
    Ok(kinds)
}
