//! Mamba and Falcon-Mamba (transformers models/mamba, models/falcon_mamba: `MambaForCausalLM`,
//! `FalconMambaForCausalLM`): token embeddings, layers of an RMSNorm and a selective
//! state-space mixer, a final norm and the LM head (tied by default).

use serde_json::Value;

use super::keys::Cfg;
use crate::error::Result;
use crate::model::{Model, Norm, Ssm};

pub(super) fn parse(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    // MambaConfig: hidden_size 768, num_hidden_layers 32, vocab 50280, expand 2,
    // intermediate_size = expand × hidden, state_size 16, conv_kernel 4,
    // time_step_rank "auto" = ceil(hidden / 16), use_bias false, use_conv_bias true,
    // tie_word_embeddings true (configuration_mamba.py).
    let mut m = super::keys::base(name);
    m.hidden = c.opt(&["hidden_size", "d_model"])?.unwrap_or(768);
    m.layers = c.opt(&["num_hidden_layers", "n_layer"])?.unwrap_or(32);
    m.vocab = c.opt(&["vocab_size"])?.unwrap_or(50280);
    m.embed_dim = m.hidden;
    let h = m.hidden;
    let expand = c.opt(&["expand"])?.unwrap_or(2);
    let d_inner = c.opt(&["intermediate_size", "d_inner"])?.unwrap_or(expand.saturating_mul(h));
    let dt_rank = match c.get("time_step_rank") {
        Some(Value::String(s)) if s == "auto" => h.div_ceil(16),
        _ => c.opt(&["time_step_rank"])?.unwrap_or(h.div_ceil(16)),
    };
    let d_state = c.opt(&["state_size", "d_state"])?.unwrap_or(16);
    let d_conv = c.opt(&["conv_kernel", "d_conv"])?.unwrap_or(4);
    if d_inner == 0 || d_state == 0 || d_conv == 0 || dt_rank == 0 || d_state > 1024 || d_conv > 64 {
        return Err(c.bad(
            "state_size",
            &Value::from(d_state),
            "expected positive intermediate_size, state_size (≤ 1024), conv_kernel (≤ 64) and time_step_rank",
        ));
    }
    m.ssm =
        Some(Ssm { d_inner, d_state, d_conv, dt_rank, conv_bias: c.bool("use_conv_bias", true)?, proj_bias: c.bool("use_bias", false)? });
    m.intermediate = d_inner;
    // No attention: one "head" spanning the width keeps the generic checks meaningful.
    m.heads = 1;
    m.kv_heads = 1;
    m.head_dim = h;
    m.norm = Norm::RmsNorm;
    m.final_norm = true;
    m.tied_embeddings = c.bool("tie_word_embeddings", true)?;
    m.warnings.push(
        "Mamba: the estimate follows transformers' PyTorch path (the sequential selective scan, taken when `mamba-ssm` and `causal-conv1d` are not installed); with their CUDA kernels training saves far less, which vram does not model yet".into(),
    );
    Ok(m)
}
