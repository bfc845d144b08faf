//! Zamba, the first one (transformers models/zamba: `ZambaForCausalLM`, configuration_zamba.py;
//! Glorioso et al. 2024, "Zamba: A Compact 7B SSM Hybrid Model"): a stack of Mamba-1 layers
//! (an RMSNorm and the mixer, no MLP) whose mixers split their channels into `n_mamba_heads`
//! heads, each with its own x_proj, dt_proj and scan; some layers ("hybrid") first run ONE shared
//! transformer block (attention without positions, then a gated MLP, no residual inside) over
//! the residual stream concatenated with the embedding output, whose result, through an unshared
//! `linear`, is added to the mixer's input. Unlike Zamba2 (zamba2.rs, whose layout reader this
//! shares): Mamba-1 mixers, one weight set, no adapters, no rotary positions.

use serde_json::Value;

use super::keys::Cfg;
use crate::error::Result;
use crate::model::{Act, Mlp, Model, SharedBlock, Ssm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let (mixers, invocations) = super::zamba2::hybrid_layers(c, "Zamba", "Mamba", default_layout)?;
    if invocations == 1 {
        // ZambaModel ties every later invocation's block to the first one's by a regex over the
        // other layers' names; with no other invocation transformers 5.23 raises ("There is an
        // issue with your definition of `tie_weights_keys`") and the model cannot be built.
        return Err(c.bad(
            "layers_block_type",
            &Value::from(mixers),
            "transformers cannot build a Zamba with a single \"hybrid\" layer (its tied-weights rule needs a second invocation of the shared block)",
        ));
    }
    // ZambaConfig's defaults (transformers 5.23): Zamba-7B-v1.
    let mut m = super::keys::base(name);
    m.hidden = c.opt(&["hidden_size"])?.unwrap_or(3712);
    m.vocab = c.opt(&["vocab_size"])?.unwrap_or(32000);
    m.embed_dim = m.hidden;
    let h = m.hidden;
    m.heads = c.opt(&["num_attention_heads"])?.unwrap_or(16);
    m.kv_heads = c.opt(&["num_key_value_heads"])?.unwrap_or(16);
    if m.heads == 0 || m.kv_heads == 0 || m.heads % m.kv_heads != 0 {
        return Err(c.bad(
            "num_key_value_heads",
            &Value::from(m.kv_heads),
            "num_attention_heads and num_key_value_heads must be positive, the first a multiple of the second",
        ));
    }
    // ZambaConfig.__post_init__: attention_hidden_size = 2 × hidden (the concatenated input the
    // block's input_layernorm and q/k/v read: any other value cannot run), attention_head_dim =
    // 2 × hidden // heads unless given (`head_dim` is its alias).
    if let Some(a) = c.opt(&["attention_hidden_size"])? {
        if a != 2 * h {
            return Err(c.bad(
                "attention_hidden_size",
                &Value::from(a),
                "must be 2 × hidden_size (the shared block reads the residual stream concatenated with the embedding output)",
            ));
        }
    }
    m.head_dim = match c.opt(&["attention_head_dim", "head_dim"])? {
        Some(d) if d > 0 => d,
        _ => 2 * h / m.heads,
    };
    if m.head_dim == 0 {
        return Err(c.bad("num_attention_heads", &Value::from(m.heads), "must not exceed 2 × hidden_size"));
    }
    super::zamba2::shared_block_stack(c, &mut m, mixers, invocations)?;
    // ZambaMLP: gate_proj, up_proj, down_proj (Mistral's), no bias.
    m.mlp = Mlp { gated: true, fused_gate_up: false, act: c.act(&["hidden_act"], Act::Gelu)?, bias: false };

    // ZambaMambaMixer: Jamba's Mamba-1 keys, its d_inner = mamba_expand × hidden split into
    // n_mamba_heads heads.
    let mixer = super::mamba::mamba1_mixer(c, h)?;
    let heads = c.opt(&["n_mamba_heads"])?.unwrap_or(2);
    if heads == 0 || mixer.d_inner % heads != 0 {
        return Err(c.bad("n_mamba_heads", &Value::from(heads), "n_mamba_heads must divide mamba_expand × hidden_size"));
    }
    match c.str("hidden_mamba_act").as_deref() {
        None | Some("silu" | "swish") => {}
        Some(other) => {
            return Err(c.bad(
                "hidden_mamba_act",
                &Value::from(other),
                "vram models Zamba's mixer with its silu conv activation (every released Zamba)",
            ))
        }
    }
    m.ssm = Some(Ssm {
        attention_layers: invocations,
        shared: Some(SharedBlock { unique: 1, adapter_rank: 0, attention_adapters: false }),
        mamba1_heads: heads,
        ..mixer
    });
    m.warnings.push(format!(
        "Zamba: {mixers} Mamba layers ({heads} scan heads each), {invocations} of them preceded by the one shared attention block (no positions, no adapters); the mixers follow transformers' PyTorch path (without `mamba-ssm` and `causal-conv1d`; with their CUDA kernels training and a prefill hold far less, which vram does not model yet)."
    ));
    Ok(m)
}

/// ZambaConfig.__post_init__'s default layout: two Mamba layers, a hybrid one, then over the
/// remaining `num_hidden_layers` − 3 a hybrid wherever i % attn_layer_period = attn_layer_offset.
fn default_layout(c: &Cfg) -> Result<Vec<bool>> {
    let n = c.opt(&["num_hidden_layers"])?.unwrap_or(76);
    let period = c.opt(&["attn_layer_period"])?.unwrap_or(6);
    let offset = c.opt(&["attn_layer_offset"])?.unwrap_or(4);
    if period == 0 || !(3..=4096).contains(&n) {
        return Err(c.bad(
            "num_hidden_layers",
            &Value::from(n),
            "ZambaConfig builds its default layout from num_hidden_layers (3–4096) and attn_layer_period (above 0)",
        ));
    }
    let mut v = vec![false, false, true];
    v.extend((0..n - 3).map(|i| i % period == offset));
    Ok(v)
}
