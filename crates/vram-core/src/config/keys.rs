//! Reading typed values out of a raw config object, and the model skeleton every family starts from.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::model::{Act, Attention, Block, Mlp, Model, Norm, MAX_LABELS};

use super::{MAX_DIM, MAX_LAYERS};

pub(super) struct Cfg<'a> {
    pub(super) obj: &'a Map<String, Value>,
    pub(super) file: &'a str,
}

impl Cfg<'_> {
    pub(super) fn get(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }
    /// The key is present with the value null (which `get` reads as absent).
    pub(super) fn is_null(&self, key: &str) -> bool {
        matches!(self.obj.get(key), Some(Value::Null))
    }
    pub(super) fn str(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|v| v.as_str()).map(str::to_string)
    }
    /// An optional torch dtype name (`"float32"`, `"bfloat16"`, …); another string is an error.
    pub(super) fn dtype(&self, key: &str) -> Result<Option<crate::dtype::DType>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .and_then(crate::dtype::DType::from_torch_name)
                .map(Some)
                .ok_or_else(|| self.bad(key, v, "expected a torch dtype name (float32, bfloat16, float16)")),
        }
    }
    pub(super) fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.bad(key, v, "expected true or false")),
        }
    }
    pub(super) fn f64(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| self.bad(key, v, "expected a number")),
        }
    }
    /// An optional positive integer; `0` is read as absent only when `zero_ok`.
    pub(super) fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n <= MAX_DIM.max(MAX_LAYERS) * 64 => Ok(Some(n)),
                // Floats with an integral value (some configs write 4096.0).
                _ => match v.as_f64() {
                    Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= 1e12 => Ok(Some(f as u64)),
                    _ => Err(self.bad(key, v, "expected a non-negative integer")),
                },
            },
        }
    }
    /// First present key among `keys`, or a `MissingKey` error naming the first.
    pub(super) fn req(&self, keys: &[&str], why: &str) -> Result<u64> {
        for k in keys {
            if let Some(v) = self.opt_u64(k)? {
                return Ok(v);
            }
        }
        Err(Error::MissingKey { file: self.file.into(), key: keys[0].into(), why: why.into() })
    }
    pub(super) fn opt(&self, keys: &[&str]) -> Result<Option<u64>> {
        for k in keys {
            if let Some(v) = self.opt_u64(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
    pub(super) fn bad(&self, key: &str, v: &Value, hint: &str) -> Error {
        Error::BadKey { file: self.file.into(), key: key.into(), value: v.to_string(), hint: hint.into() }
    }
    /// The first class in `architectures` ("" when there is none).
    pub(super) fn first_architecture(&self) -> String {
        match self.get("architectures") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or_default().to_string(),
            _ => String::new(),
        }
    }
    /// A classifier's classes: `id2label`'s size, else `num_labels`, else 2 (PretrainedConfig's
    /// default); at most [`MAX_LABELS`].
    pub(super) fn labels(&self) -> Result<u64> {
        if let Some(Value::Object(m)) = self.get("id2label") {
            if !m.is_empty() {
                return Ok(m.len() as u64);
            }
        }
        let n = self.opt(&["num_labels"])?.unwrap_or(2);
        if n == 0 || n > MAX_LABELS {
            return Err(self.bad("num_labels", &Value::from(n), &format!("expected 1 to {MAX_LABELS} classes")));
        }
        Ok(n)
    }
    /// The activation a key names (transformers' ACT2FN spelling), else `default`; a name vram
    /// does not model is an error naming the key, never another activation's estimate.
    pub(super) fn act(&self, keys: &[&str], default: Act) -> Result<Act> {
        for k in keys {
            if let Some(name) = self.str(k) {
                return act_from_name(&name).ok_or_else(|| self.bad(k, &Value::from(name.as_str()), UNKNOWN_ACT));
            }
        }
        Ok(default)
    }
    pub(super) fn dropout(&self, keys: &[&str]) -> Result<f64> {
        for k in keys {
            if self.get(k).is_some() {
                return self.f64(k, 0.0);
            }
        }
        Ok(0.0)
    }
}

/// What an unmodelled activation name is told.
pub(super) const UNKNOWN_ACT: &str = "vram models transformers' gelu, gelu_pytorch_tanh, gelu_new/fast/accurate/python, quick_gelu, silu/swish, relu, relu2, relu6, leaky_relu, prelu, hardswish, mish, sigmoid and tanh activations (gelu_10, laplace, sqrtsoftplus and xielu are Python compositions, and linear an identity that saves nothing, which it does not model)";

/// transformers `ACT2FN` names (activations.py ACT2CLS) → how PyTorch evaluates them; None for a
/// name vram does not model.
pub(super) fn act_from_name(s: &str) -> Option<Act> {
    Some(match s {
        "silu" | "swish" => Act::Silu,
        "gelu_new" | "gelu_fast" | "gelu_python" | "gelu_accurate" | "gelu_python_tanh" => Act::GeluPython,
        "relu" => Act::Relu,
        "relu2" => Act::Relu2,
        "quick_gelu" => Act::QuickGelu,
        // One native kernel that saves one tensor of its input's size (its input or output),
        // as native GELU does.
        "gelu" | "gelu_pytorch_tanh" | "relu6" | "leaky_relu" | "prelu" | "hardswish" | "mish" | "sigmoid" | "tanh" => Act::Gelu,
        _ => return None,
    })
}

pub(super) fn base(name: &str) -> Model {
    Model {
        llama4: None,
        name: name.into(),
        model_type: String::new(),
        hidden: 0,
        layers: 0,
        heads: 0,
        kv_heads: 0,
        head_dim: 0,
        vocab: 0,
        intermediate: 0,
        tied_embeddings: false,
        position_embeddings: 0,
        embed_dim: 0,
        norm: Norm::RmsNorm,
        block: Block::Sequential,
        attention: Attention::plain(false, false, false),
        mlp: Mlp { gated: true, fused_gate_up: false, act: Act::Silu, bias: false },
        moe: None,
        final_norm: true,
        lm_head_bias: false,
        sliding_window: None,
        sliding_layers: 0,
        final_softcap: false,
        attention_dropout: 0.0,
        hidden_dropout: 0.0,
        stored_dtype: None,
        use_cache: true,
        checkpoint_parameters: None,
        max_positions: 0,
        rotary_dim: 0,
        warnings: Vec::new(),
        approximation: None,
        quantization: None,
        checkpoint_quantization: None,
        checkpoint_bytes: None,
        mtp_layers: 0,
        draft_vocab: None,
        rope_scaling: None,
        encoder: None,
        multimodal: None,
        vision_unloaded: None,
        vision_warnings: Vec::new(),
        seq2seq: None,
        dual: None,
        ssm: None,
        cross_attention: false,
        k_bias: true,
        embedding_norm: false,
        mlp_dropout: false,
        relative_buckets: 0,
    }
}

/// The dimensions every decoder has, under the names `keys` lists (first present wins):
/// hidden size, layers, heads, vocabulary. Sets MHA defaults (kv heads = heads, head_dim =
/// hidden / heads) that architectures then override.
pub(super) fn core_dims(c: &Cfg, name: &str, hidden: &[&str], layers: &[&str], heads: &[&str]) -> Result<Model> {
    let mut m = base(name);
    m.hidden = c.req(hidden, "size every weight matrix")?;
    m.layers = c.req(layers, "count the decoder layers")?;
    m.heads = c.req(heads, "shape attention")?;
    m.vocab = c.req(&["vocab_size"], "size the embedding and the logits")?;
    m.embed_dim = m.hidden;
    m.kv_heads = m.heads;
    m.head_dim = m.hidden.checked_div(m.heads).unwrap_or(0);
    Ok(m)
}

/// A stack of an encoder-decoder in the BART/Whisper style (modeling_bart.py, modeling_whisper.py):
/// multi-head attention with biased q/k/v/o, LayerNorm with bias, a plain biased MLP (fc1, the
/// config's `activation_function`, fc2), dropout from `dropout`, `attention_dropout` and
/// `activation_dropout`. Callers set positions, the block order and the final norm.
pub(super) fn encdec_stack(c: &Cfg, name: &str, d: u64, layers: u64, heads: u64, ffn: u64) -> Result<Model> {
    let mut m = base(name);
    m.hidden = d;
    m.embed_dim = d;
    m.layers = layers;
    m.heads = heads;
    m.kv_heads = heads;
    m.head_dim = d.checked_div(heads).unwrap_or(0);
    m.intermediate = ffn;
    m.norm = Norm::LayerNorm { bias: true };
    m.attention = Attention::plain(true, true, false);
    m.mlp = Mlp { gated: false, fused_gate_up: false, act: c.act(&["activation_function"], Act::Gelu)?, bias: true };
    m.tied_embeddings = true;
    m.hidden_dropout = c.dropout(&["dropout"])?;
    m.attention_dropout = c.dropout(&["attention_dropout"])?;
    m.mlp_dropout = c.dropout(&["activation_dropout"])? > 0.0;
    Ok(m)
}

/// An encoder-decoder's `architectures` must name a head vram models (`heads`); a checkpoint may
/// list several (facebook/bart-large: the bare model, generation and classification), and is
/// refused only when none is one of them.
pub(super) fn require_head(c: &Cfg, model_type: &str, heads: &[&str], hint: &str) -> Result<()> {
    let Some(Value::Array(a)) = c.get("architectures") else { return Ok(()) };
    let names: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
    match names.iter().find(|n| !heads.contains(n)) {
        Some(arch) if !names.iter().any(|n| heads.contains(n)) => {
            Err(Error::InvalidValue { what: format!("{model_type} head"), value: (*arch).into(), hint: hint.into() })
        }
        _ => Ok(()),
    }
}
