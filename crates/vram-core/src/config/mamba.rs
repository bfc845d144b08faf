//! Mamba and Falcon-Mamba (transformers models/mamba, models/falcon_mamba: `MambaForCausalLM`,
//! `FalconMambaForCausalLM`): token embeddings, layers of an RMSNorm and a selective
//! state-space mixer, a final norm and the LM head (tied by default).

use serde_json::Value;

use super::keys::Cfg;
use crate::error::{Error, Result};
use crate::model::{Act, Mamba2, Model, Norm, Ssm};

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
    let dt_rank = time_step_rank(c, "time_step_rank", h)?;
    let d_state = c.opt(&["state_size", "d_state"])?.unwrap_or(16);
    let d_conv = c.opt(&["conv_kernel", "d_conv"])?.unwrap_or(4);
    if d_inner == 0 || d_state == 0 || d_conv == 0 || dt_rank == 0 || d_state > 1024 || d_conv > 64 {
        return Err(c.bad(
            "state_size",
            &Value::from(d_state),
            "expected positive intermediate_size, state_size (≤ 1024), conv_kernel (≤ 64) and time_step_rank",
        ));
    }
    let path = "Mamba: the estimate follows transformers' PyTorch path (the sequential selective scan, taken when `mamba-ssm` and `causal-conv1d` are not installed); with their CUDA kernels training and a prefill hold far less, which vram does not model yet";
    finish(c, m, Ssm::mixers(d_inner, d_state, d_conv, dt_rank), true, path)
}

/// What Mamba and Mamba-2 share: the mixer's bias flags (`use_conv_bias`, `use_bias`), no
/// attention (one "head" spanning the width keeps the generic checks meaningful), RMSNorm with a
/// final norm, the LM head's tying (default `tie`), and the warning naming the PyTorch path.
fn finish(c: &Cfg, mut m: Model, mut ssm: Ssm, tie: bool, path: &str) -> Result<Model> {
    ssm.conv_bias = c.bool("use_conv_bias", true)?;
    ssm.proj_bias = c.bool("use_bias", false)?;
    m.intermediate = ssm.d_inner;
    m.ssm = Some(ssm);
    m.heads = 1;
    m.kv_heads = 1;
    m.head_dim = m.hidden;
    m.norm = Norm::RmsNorm;
    m.final_norm = true;
    m.tied_embeddings = c.bool("tie_word_embeddings", tie)?;
    m.warnings.push(path.into());
    Ok(m)
}

/// Mamba-2 (transformers models/mamba2: `Mamba2ForCausalLM`; Mamba2Config defaults:
/// num_heads 128, head_dim 64, hidden 4096, state 128, expand 2, n_groups 8, conv 4, chunk 256,
/// 64 layers, vocab 32768, tie_word_embeddings false, use_bias false, use_conv_bias true).
pub(super) fn parse2(c: &Cfg, name: &str, _model_type: &str) -> Result<Model> {
    let mut m = super::keys::base(name);
    m.hidden = c.opt(&["hidden_size"])?.unwrap_or(4096);
    m.layers = c.opt(&["num_hidden_layers"])?.unwrap_or(64);
    m.vocab = c.opt(&["vocab_size"])?.unwrap_or(32768);
    m.embed_dim = m.hidden;
    let expand = c.opt(&["expand"])?.unwrap_or(2);
    let d_inner = expand.saturating_mul(m.hidden);
    let k = Mamba2Keys {
        heads: c.opt(&["num_heads"])?.unwrap_or(128),
        head_dim: c.opt(&["head_dim"])?.unwrap_or(64),
        d_state: c.opt(&["state_size"])?.unwrap_or(128),
        d_conv: c.opt(&["conv_kernel"])?.unwrap_or(4),
        groups: c.opt(&["n_groups"])?.unwrap_or(8),
        chunk: c.opt(&["chunk_size"])?.unwrap_or(256),
    };
    // Mamba2Mixer: intermediate_size = expand × hidden must equal num_heads × head_dim.
    if !k.buildable(d_inner) {
        return Err(c.bad(
            "num_heads",
            &Value::from(k.heads),
            "num_heads × head_dim must equal expand × hidden_size, with n_groups dividing num_heads, state_size 1–1024, conv_kernel 1–64, chunk_size 1–4096",
        ));
    }
    let mixer = k.ssm(d_inner, false, false);
    let path = "Mamba-2: the estimate follows transformers' PyTorch path (`mamba2_chunk_scan` over chunks, taken when `mamba-ssm` and `causal-conv1d` are not installed); with their CUDA kernels training and a prefill hold far less, which vram does not model yet";
    finish(c, m, mixer, false, path)
}

/// Bamba (transformers models/bamba: `BambaForCausalLM`, configuration_bamba.py): a Llama-style
/// decoder (RMSNorm, SwiGLU MLP, rotary GQA attention) whose layers are Mamba-2 mixers except
/// those named in `attn_layer_indices`; every layer keeps its pre-norm MLP (BambaDecoderLayer).
/// The mixer's keys are `mamba_*` (n_heads, d_head "auto" = expand × hidden / n_heads, d_state,
/// n_groups, d_conv, expand, chunk_size, conv_bias, proj_bias).
pub(super) fn parse_bamba(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    // The attention layers, and the Llama parts, read as a Llama decoder reads them.
    let mut m = super::llama::parse(c, name, model_type)?;
    let attention = match c.get("attn_layer_indices") {
        Some(Value::Array(a)) => {
            let idx: Option<Vec<u64>> = a.iter().map(Value::as_u64).collect();
            let idx = idx.ok_or_else(|| c.bad("attn_layer_indices", &Value::Array(a.clone()), "expected layer numbers"))?;
            if idx.iter().any(|&i| i >= m.layers) {
                return Err(c.bad("attn_layer_indices", &Value::Array(a.clone()), "every index below num_hidden_layers"));
            }
            idx.len() as u64
        }
        None | Some(Value::Null) => 0,
        Some(v) => return Err(c.bad("attn_layer_indices", v, "expected a list of layer numbers")),
    };
    if attention == 0 || attention >= m.layers {
        return Err(c.bad(
            "attn_layer_indices",
            &Value::from(attention),
            "vram models Bamba with some attention layers and some Mamba-2 layers",
        ));
    }
    m.ssm = Some(bamba_mixer(c, &m, attention)?);
    m.warnings.push(hybrid_warning(&format!(
        "Bamba: {attention} attention layers and {} Mamba-2 layers, each with its MLP",
        m.layers - attention
    )));
    Ok(m)
}

/// Mamba-1's time-step rank: the key's number, or ⌈hidden / 16⌉ when absent or "auto"
/// (configuration_mamba.py, configuration_jamba.py).
fn time_step_rank(c: &Cfg, key: &str, hidden: u64) -> Result<u64> {
    match c.get(key) {
        Some(Value::String(s)) if s == "auto" => Ok(hidden.div_ceil(16)),
        _ => Ok(c.opt(&[key])?.unwrap_or(hidden.div_ceil(16))),
    }
}

/// A hybrid's layout, and the path its estimate follows.
fn hybrid_warning(layout: &str) -> String {
    format!(
        "{layout}; the mixers follow transformers' PyTorch path (without `mamba-ssm` and `causal-conv1d`; with their CUDA kernels training and a prefill hold far less, which vram does not model yet)."
    )
}

/// The Mamba-2 mixer of Bamba and Granite-4.0-H, from their shared `mamba_*` keys
/// (transformers bamba/configuration_bamba.py, granitemoehybrid/configuration_granitemoehybrid.py).
fn bamba_mixer(c: &Cfg, m: &Model, attention: u64) -> Result<Ssm> {
    let d_inner = c.opt(&["mamba_expand"])?.unwrap_or(2).saturating_mul(m.hidden);
    let k = mamba2_keys(c, d_inner, "mamba_expand × hidden_size")?;
    Ok(Ssm { attention_layers: attention, ..k.ssm(d_inner, c.bool("mamba_conv_bias", true)?, c.bool("mamba_proj_bias", false)?) })
}

/// Mamba-2 mixer keys shared by Bamba, Granite-4.0-H and Falcon-H1 (`mamba_n_heads`,
/// `mamba_d_head` or "auto", `mamba_d_state`, `mamba_d_conv`, `mamba_n_groups`,
/// `mamba_chunk_size`), checked against the mixer width `d_inner`.
fn mamba2_keys(c: &Cfg, d_inner: u64, width_key: &str) -> Result<Mamba2Keys> {
    let heads = c.opt(&["mamba_n_heads"])?.unwrap_or(128);
    let head_dim = match c.get("mamba_d_head") {
        None => d_inner.checked_div(heads).unwrap_or(0),
        Some(Value::String(s)) if s == "auto" => d_inner.checked_div(heads).unwrap_or(0),
        Some(_) => c.req(&["mamba_d_head"], "size the Mamba-2 heads")?,
    };
    let k = Mamba2Keys {
        heads,
        head_dim,
        d_state: c.opt(&["mamba_d_state"])?.unwrap_or(256),
        d_conv: c.opt(&["mamba_d_conv"])?.unwrap_or(4),
        groups: c.opt(&["mamba_n_groups"])?.unwrap_or(1),
        chunk: c.opt(&["mamba_chunk_size"])?.unwrap_or(256),
    };
    if !k.buildable(d_inner) {
        return Err(c.bad(
            "mamba_n_heads",
            &Value::from(k.heads),
            &format!("mamba_n_heads × mamba_d_head must equal {width_key}, with mamba_n_groups dividing the heads"),
        ));
    }
    Ok(k)
}

/// The checked Mamba-2 keys.
pub(super) struct Mamba2Keys {
    pub(super) heads: u64,
    pub(super) head_dim: u64,
    pub(super) d_state: u64,
    pub(super) d_conv: u64,
    pub(super) groups: u64,
    pub(super) chunk: u64,
}

impl Mamba2Keys {
    /// Whether Mamba2Mixer can be built from them (it views x as [.., heads, head_dim], so
    /// heads × head_dim must be the mixer width, the heads split into groups) and they are in
    /// the ranges vram sizes: state 1–1024, conv 1–64, chunk 1–4096.
    pub(super) fn buildable(&self, d_inner: u64) -> bool {
        self.heads > 0
            && self.heads.checked_mul(self.head_dim) == Some(d_inner)
            && self.groups > 0
            && self.heads % self.groups == 0
            && (1..=1024).contains(&self.d_state)
            && (1..=64).contains(&self.d_conv)
            && (1..=4096).contains(&self.chunk)
    }

    fn mixer(&self) -> Mamba2 {
        Mamba2 { heads: self.heads, head_dim: self.head_dim, groups: self.groups, chunk: self.chunk, gated_norm: true }
    }

    /// A stack of these mixers `d_inner` wide, every layer a mixer (hybrids set their layouts
    /// over it).
    pub(super) fn ssm(&self, d_inner: u64, conv_bias: bool, proj_bias: bool) -> Ssm {
        Ssm { conv_bias, proj_bias, mamba2: Some(self.mixer()), ..Ssm::mixers(d_inner, self.d_state, self.d_conv, 0) }
    }
}

/// Granite-4.0-H (`granitemoehybrid`, transformers models/granitemoehybrid): `layer_types` marks
/// each layer "mamba" (a Mamba-2 mixer, the same as Bamba's) or "attention"; every layer has the
/// shared MLP (`shared_mlp`: one `input_linear` to 2 × `shared_intermediate_size`, chunked into
/// gate and up, then `output_linear`); attention without positions unless
/// `position_embedding_type` is "rope". The embedding is multiplied by `embedding_multiplier`,
/// each residual branch by `residual_multiplier`, and the logits divided by `logits_scaling`.
/// With `num_local_experts` > 0 (H-Tiny, H-Small) every layer's MLP is an MoE block with the
/// shared MLP beside it.
pub(super) fn parse_granite_hybrid(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let mut m = super::llama::parse(c, name, model_type)?;
    let types: Vec<String> = match c.get("layer_types") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| c.bad("layer_types", &Value::Array(a.clone()), "expected a list of \"mamba\" and \"attention\""))?,
        // transformers' default: every layer a mixer (configuration_granitemoehybrid.py).
        None => vec!["mamba".to_string(); m.layers as usize],
        Some(v) => return Err(c.bad("layer_types", v, "expected a list of \"mamba\" and \"attention\"")),
    };
    if types.len() as u64 != m.layers {
        return Err(c.bad("layer_types", &Value::from(types.len()), "one entry per layer (num_hidden_layers)"));
    }
    let is_attention = |t: &str| matches!(t, "attention" | "full_attention");
    let is_mamba = |t: &str| matches!(t, "mamba" | "linear_attention");
    if let Some(t) = types.iter().find(|t| !is_attention(t) && !is_mamba(t)) {
        return Err(c.bad("layer_types", &Value::from(t.as_str()), "each entry \"mamba\" or \"attention\""));
    }
    let attention = types.iter().filter(|t| is_attention(t)).count() as u64;
    if attention == 0 {
        // Bamba's mixer layers are the ones counted after the attention layers; a stack of
        // mixers alone (each with the shared MLP) is a layout vram has not built.
        return Err(c.bad(
            "layer_types",
            &Value::from(0),
            "vram models Granite-4.0-H with some \"attention\" layers (a stack of Mamba layers alone is not modelled)",
        ));
    }
    let shared = c.req(&["shared_intermediate_size"], "size the shared MLP")?;
    // GraniteMoeHybridMLP: one input_linear to gate and up together.
    m.mlp.fused_gate_up = true;
    let experts = c.opt(&["num_local_experts"])?.unwrap_or(0);
    if experts == 0 {
        // The only MLP of a dense Granite-4.0-H layer is the shared one.
        m.intermediate = shared;
    } else {
        // GraniteMoeHybridMoE: a router ([E, h], no bias; fp32 logits, top-k, softmax over the
        // k) and experts stored 3-D, as Mixtral's; the shared MLP runs beside them ungated.
        let top_k = c.req(&["num_experts_per_tok"], "route tokens to experts")?;
        if top_k == 0 || top_k > experts || experts > 4096 {
            return Err(c.bad("num_experts_per_tok", &Value::from(top_k), "between 1 and num_local_experts"));
        }
        m.moe = Some(crate::model::Moe {
            experts,
            top_k,
            expert_intermediate: c.req(&["intermediate_size"], "size the experts")?,
            shared_intermediate: shared,
            shared_gate: false,
            sparse_layers: vec![true; m.layers as usize],
            biased: false,
            dense_dispatch: false,
        });
    }
    if attention == m.layers {
        // No mixer: a Granite decoder with the shared MLP, read as a Llama decoder.
        m.warnings.push("Granite-4.0 without Mamba layers: read as a Llama decoder with Granite's shared MLP (and experts); its µP multipliers and logits scaling are not counted, and this layout was not checked against PyTorch".into());
        return Ok(m);
    }
    m.ssm = Some(bamba_mixer(c, &m, attention)?);
    m.warnings.push(hybrid_warning(&format!(
        "Granite-4.0-H: {attention} attention layers and {} Mamba-2 layers, each with its shared MLP",
        m.layers - attention
    )));
    Ok(m)
}

/// Falcon-H1 (transformers models/falcon_h1, configuration_falcon_h1.py): every layer is a
/// Llama layer (RMSNorm, rotary GQA attention, SwiGLU MLP) whose attention runs beside a Mamba-2
/// mixer on the same normed input, the two outputs added (`FalconH1DecoderLayer`). The mixer's
/// width is `mamba_d_ssm` (transformers' default 1024; null: `mamba_expand` × hidden), its gated
/// RMSNorm only with `mamba_rms_norm` (otherwise the scan output times silu(gate)). The µP
/// multipliers (embedding, attention and SSM in/out, key, MLP, LM head) scale tensors in place
/// of none: they change no sizes.
pub(super) fn parse_falcon_h1(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let mut m = super::llama::parse(c, name, model_type)?;
    m.mlp.bias = c.bool("mlp_bias", false)?;
    let d_inner = if c.is_null("mamba_d_ssm") {
        c.opt(&["mamba_expand"])?.unwrap_or(2).saturating_mul(m.hidden)
    } else {
        c.opt(&["mamba_d_ssm"])?.unwrap_or(1024)
    };
    let k = mamba2_keys(c, d_inner, "mamba_d_ssm")?;
    let proj_bias = c.bool("mamba_proj_bias", false)?;
    let out_bias = c.bool("projectors_bias", false)?;
    if out_bias != proj_bias {
        return Err(c.bad(
            "projectors_bias",
            &Value::from(out_bias),
            "vram models Falcon-H1 with the same bias setting on the mixer's in_proj (mamba_proj_bias) and out_proj (projectors_bias)",
        ));
    }
    m.ssm = Some(Ssm {
        mamba2: Some(Mamba2 { gated_norm: c.bool("mamba_rms_norm", false)?, ..k.mixer() }),
        parallel_attention: true,
        ..k.ssm(d_inner, c.bool("mamba_conv_bias", true)?, proj_bias)
    });
    m.warnings.push(hybrid_warning("Falcon-H1: every layer runs attention and a Mamba-2 mixer side by side, then its MLP"));
    Ok(m)
}

/// Jamba (transformers models/jamba, configuration_jamba.py): layers `i % attn_layer_period ==
/// attn_layer_offset` are attention (no positions), the others Mamba mixers (Mamba-1's selective
/// scan with RMSNorms on dt, B and C); every layer ends with its feed-forward block, an MoE of
/// `num_experts` on layers `i % expert_layer_period == expert_layer_offset`, a SwiGLU MLP
/// elsewhere. vram keeps attention layers first (`Ssm::attention_layers`), so the MoE layers
/// are placed in that order.
pub(super) fn parse_jamba(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let mut m = super::llama::parse(c, name, model_type)?;
    let period = |k: &str, d: u64| -> Result<u64> {
        let v = c.opt(&[k])?.unwrap_or(d);
        if v == 0 {
            return Err(c.bad(k, &Value::from(v), "a period of at least 1"));
        }
        Ok(v)
    };
    let (ap, ao) = (period("attn_layer_period", 8)?, c.opt(&["attn_layer_offset"])?.unwrap_or(4));
    let (ep, eo) = (period("expert_layer_period", 2)?, c.opt(&["expert_layer_offset"])?.unwrap_or(1));
    if ao >= ap || eo >= ep {
        return Err(c.bad("attn_layer_offset", &Value::from(ao), "each offset below its period (attn_layer_period, expert_layer_period)"));
    }
    let is_attention = |i: u64| i % ap == ao;
    let attention = (0..m.layers).filter(|&i| is_attention(i)).count() as u64;
    if attention == 0 || attention == m.layers {
        return Err(c.bad("attn_layer_period", &Value::from(ap), "vram models Jamba with some attention layers and some Mamba layers"));
    }
    let experts = c.opt(&["num_experts"])?.unwrap_or(16);
    if experts > 1 {
        let top_k = c.opt(&["num_experts_per_tok"])?.unwrap_or(2);
        if top_k == 0 || top_k > experts || experts > 4096 {
            return Err(c.bad("num_experts_per_tok", &Value::from(top_k), "between 1 and num_experts"));
        }
        // vram's layer order: the attention layers, then the Mamba layers, each in config order.
        let order = (0..m.layers).filter(|&i| is_attention(i)).chain((0..m.layers).filter(|&i| !is_attention(i)));
        m.moe = Some(crate::model::Moe {
            experts,
            top_k,
            expert_intermediate: m.intermediate,
            shared_intermediate: 0,
            shared_gate: false,
            sparse_layers: order.map(|i| i % ep == eo).collect(),
            biased: false,
            dense_dispatch: false,
        });
    }
    m.ssm = Some(Ssm { attention_layers: attention, dt_bc_norms: true, ..mamba1_mixer(c, m.hidden)? });
    m.warnings.push(hybrid_warning(&format!(
        "Jamba: {attention} attention layers and {} Mamba layers (the sequential selective scan), each with its MLP or MoE block",
        m.layers - attention
    )));
    Ok(m)
}

/// Nemotron-H (`nemotron_h`, transformers models/nemotron_h): every layer is one block — a
/// pre-norm, then a Mamba-2 mixer ("M" in `hybrid_override_pattern`, "mamba"/"linear_attention"
/// in `layers_block_type`), attention without positions ("*", "attention"/"full_attention") or
/// a non-gated relu² MLP ("-", "mlp"), then the residual add (`NemotronHBlock`). The mixer is
/// Mamba-2's with `mamba_num_heads` × `mamba_head_dim` channels and a gated RMSNorm per group.
/// MoE blocks ("E", Nemotron-3) are refused.
pub(super) fn parse_nemotron_h(c: &Cfg, name: &str, model_type: &str) -> Result<Model> {
    let kinds: Vec<char> = match (c.get("layers_block_type").or(c.get("layer_types")), c.get("hybrid_override_pattern")) {
        (Some(Value::Array(a)), _) => a
            .iter()
            .map(|t| match t.as_str() {
                Some("mamba" | "linear_attention") => Ok('M'),
                Some("attention" | "full_attention") => Ok('*'),
                Some("mlp") => Ok('-'),
                Some("moe") => Ok('E'),
                _ => Err(c.bad("layers_block_type", t, "each entry \"mamba\", \"attention\", \"mlp\" or \"moe\"")),
            })
            .collect::<Result<_>>()?,
        (_, Some(Value::String(p))) => p.chars().collect(),
        _ => {
            return Err(Error::MissingKey {
                file: c.file.into(),
                key: "hybrid_override_pattern".into(),
                why: "know which layers are Mamba-2, attention and MLP blocks (or layers_block_type)".into(),
            })
        }
    };
    if let Some(k) = kinds.iter().find(|k| !matches!(k, 'M' | '*' | '-')) {
        let why = match k {
            'E' => "Nemotron-H's MoE blocks (Nemotron-3) are not modelled yet: vram models the dense layouts (M, *, -)".to_string(),
            _ => format!("'{k}' is not a Nemotron-H block: M (Mamba-2), * (attention), - (MLP)"),
        };
        return Err(c.bad("hybrid_override_pattern", &Value::from(kinds.iter().collect::<String>()), &why));
    }
    let count = |k: char| kinds.iter().filter(|x| **x == k).count() as u64;
    let (attention, mlps, mixers) = (count('*'), count('-'), count('M'));
    if mixers == 0 || mlps == 0 || attention == 0 {
        return Err(c.bad(
            "hybrid_override_pattern",
            &Value::from(kinds.iter().collect::<String>()),
            "vram models Nemotron-H with Mamba-2 (M), attention (*) and MLP (-) blocks all present",
        ));
    }
    // The attention and the decoder's shared parts are read as a Llama decoder reads them, with
    // the layer count the pattern gives (num_hidden_layers is ignored beside layers_block_type).
    let mut obj = c.obj.clone();
    obj.insert("num_hidden_layers".into(), Value::from(kinds.len()));
    if let Some(v) = c.get("attention_head_dim").filter(|_| c.get("head_dim").is_none()) {
        obj.insert("head_dim".into(), v.clone());
    }
    obj.entry("head_dim").or_insert(Value::from(128));
    let c2 = Cfg { obj: &obj, file: c.file };
    let mut m = super::llama::parse(&c2, name, model_type)?;
    m.mlp = crate::model::Mlp {
        gated: false,
        fused_gate_up: false,
        act: c.act(&["mlp_hidden_act"], Act::Relu2)?,
        bias: c.bool("mlp_bias", false)?,
    };
    // NemotronHMamba2Mixer: the width is mamba_num_heads × mamba_head_dim.
    let k = Mamba2Keys {
        heads: c.opt(&["mamba_num_heads"])?.unwrap_or(128),
        head_dim: c.opt(&["mamba_head_dim"])?.unwrap_or(64),
        d_state: c.opt(&["ssm_state_size"])?.unwrap_or(128),
        d_conv: c.opt(&["conv_kernel"])?.unwrap_or(4),
        groups: c.opt(&["n_groups"])?.unwrap_or(8),
        chunk: c.opt(&["chunk_size"])?.unwrap_or(128),
    };
    let d_inner = k.heads.saturating_mul(k.head_dim);
    if k.head_dim == 0 || !k.buildable(d_inner) {
        return Err(c.bad(
            "mamba_num_heads",
            &Value::from(k.heads),
            "expected mamba_num_heads and mamba_head_dim above 0, n_groups dividing the heads, ssm_state_size 1–1024, conv_kernel 1–64, chunk_size 1–4096",
        ));
    }
    m.ssm = Some(Ssm {
        attention_layers: attention,
        mlp_layers: mlps,
        cache_state_dtype: c.dtype("mamba_ssm_cache_dtype")?,
        ..k.ssm(d_inner, c.bool("use_conv_bias", true)?, c.bool("mamba_proj_bias", false)?)
    });
    m.warnings.push(hybrid_warning(&format!(
        "Nemotron-H: {mixers} Mamba-2 blocks, {attention} attention blocks (no positions) and {mlps} relu² MLP blocks, one per layer"
    )));
    Ok(m)
}

/// A Mamba-1 mixer from the `mamba_*` keys Jamba and the first Zamba share (configuration_jamba.py,
/// configuration_zamba.py): `mamba_expand` × hidden channels, `mamba_d_state`, `mamba_d_conv`,
/// `mamba_dt_rank` ("auto": ceil(hidden / 16)), the conv's bias on and the projections' off by
/// default; every layer a mixer (hybrids set their layouts over it).
pub(super) fn mamba1_mixer(c: &Cfg, hidden: u64) -> Result<Ssm> {
    let d_inner = c.opt(&["mamba_expand"])?.unwrap_or(2).saturating_mul(hidden);
    let d_state = c.opt(&["mamba_d_state"])?.unwrap_or(16);
    let d_conv = c.opt(&["mamba_d_conv"])?.unwrap_or(4);
    let dt_rank = time_step_rank(c, "mamba_dt_rank", hidden)?;
    if d_inner == 0 || d_state == 0 || d_state > 1024 || d_conv == 0 || d_conv > 64 || dt_rank == 0 {
        return Err(c.bad(
            "mamba_d_state",
            &Value::from(d_state),
            "expected mamba_d_state 1–1024, mamba_d_conv 1–64, mamba_expand and mamba_dt_rank above 0",
        ));
    }
    Ok(Ssm {
        conv_bias: c.bool("mamba_conv_bias", true)?,
        proj_bias: c.bool("mamba_proj_bias", false)?,
        ..Ssm::mixers(d_inner, d_state, d_conv, dt_rank)
    })
}
