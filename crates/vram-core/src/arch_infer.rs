//! Unknown architectures, read from what is there: the safetensors headers' tensor names and
//! shapes (exact parameters and bytes; layer stacks and widths read from names and shapes) and
//! whatever standard keys the config has. The result is an approximate [`Model`] whose
//! `approximation` says which figures are exact and which are inferred.
//!
//! Pure: takes tensor lists and config bytes, never reads files.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::config::{known_model_types, parse_config};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::safetensors::{CheckpointSummary, TensorInfo};

/// Most tensors accepted (the largest real checkpoints hold under 200 000; 100 MB headers
/// could describe ~1.5 million).
pub const MAX_TENSORS: usize = 2_000_000;
/// Largest dimension accepted from a shape, as for config keys.
const MAX_DIM: u64 = 1 << 24;
/// Largest layer index accepted in a name.
const MAX_INDEX: u64 = 100_000;
/// Most experts accepted (config::validate allows 4096).
const MAX_EXPERTS: u64 = 4096;

/// One repeated block stack: `model.layers.{i}.`, `encoder.layer.{i}.`, `blocks.{i}.` …
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Name prefix before the layer index (`model.layers`).
    pub prefix: String,
    /// Distinct layer indices found (exact, read from the names).
    pub layers: u64,
    /// Whether the indices run 0..layers without gaps.
    pub contiguous: bool,
    /// Elements of all the stack's tensors (exact).
    pub parameters: u64,
    /// Most common dimension of its matrices and vectors (read from shapes).
    pub width: u64,
    /// The other dimension of its largest matrix (read from shapes); `None` without matrices.
    pub mlp_width: Option<u64>,
    /// Routed experts per layer: the leading dimension of 3-D tensors or `experts.{j}.` names.
    pub experts: Option<u64>,
    /// Key projection rows (`k_proj`, `key`, `wk` names), when a tensor says.
    pub kv_width: Option<u64>,
}

impl Stack {
    /// Mean parameters of one layer.
    pub fn layer_parameters(&self) -> u64 {
        self.parameters.checked_div(self.layers).unwrap_or(0)
    }
}

/// A 2-D tensor outside the stacks: the embedding or an untied head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    /// Tensor name.
    pub name: String,
    /// Rows (vocabulary for an embedding).
    pub rows: u64,
    /// Columns (width).
    pub cols: u64,
}

/// What a checkpoint's tensor names and shapes say about its structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure {
    /// Exact element count, bytes and dtypes.
    pub summary: CheckpointSummary,
    /// Block stacks, largest (by parameters) first.
    pub stacks: Vec<Stack>,
    /// The token embedding: the largest vocabulary-like matrix outside the stacks.
    pub embedding: Option<Matrix>,
    /// An untied output head of the embedding's shape.
    pub head: Option<Matrix>,
    /// Elements outside every stack (embeddings, heads, final norms, patch embeddings …).
    pub outside_parameters: u64,
}

/// A tensor name split at its first numbered segment: (`model.layers`, 3, `mlp.up.weight`).
fn split_index(name: &str) -> Option<(&str, u64, &str)> {
    let mut start = 0;
    for seg in name.split('.') {
        let end = start + seg.len();
        if start > 0 && !seg.is_empty() && seg.len() <= 6 && seg.bytes().all(|b| b.is_ascii_digit()) {
            let i: u64 = seg.parse().ok()?;
            let rest = name.get(end + 1..).unwrap_or("");
            return (i <= MAX_INDEX).then_some((&name[..start - 1], i, rest));
        }
        start = end + 1;
    }
    None
}

#[derive(Default)]
struct Acc {
    indices: BTreeSet<u64>,
    parameters: u64,
    dims: BTreeMap<u64, u64>,
    largest: Option<(u64, [u64; 2])>,
    experts: u64,
    kv_rows: BTreeMap<u64, u64>,
}

impl Acc {
    fn add(&mut self, t: &TensorInfo, index: u64, rest: &str, n: u64) -> Result<()> {
        self.indices.insert(index);
        self.parameters = self.parameters.checked_add(n).ok_or_else(overflow)?;
        match t.shape.as_slice() {
            [d] => *self.dims.entry(*d).or_default() += 1,
            [a, b] => {
                *self.dims.entry(*a).or_default() += 1;
                *self.dims.entry(*b).or_default() += 1;
                if self.largest.is_none_or(|(m, _)| n > m) {
                    self.largest = Some((n, [*a, *b]));
                }
                if is_key_projection(rest) {
                    *self.kv_rows.entry(*a).or_default() += 1;
                }
            }
            // 3-D expert stacks [experts, out, in] (transformers 5, gpt-oss, Qwen3-MoE); other
            // 3-D tensors (Mamba's conv1d [channels, 1, kernel]) are not experts.
            [e, a, b] => {
                if rest.contains("expert") {
                    self.experts = self.experts.max(*e);
                }
                *self.dims.entry(*a).or_default() += 1;
                *self.dims.entry(*b).or_default() += 1;
            }
            _ => {}
        }
        if let Some(j) = expert_index(rest) {
            self.experts = self.experts.max(j.saturating_add(1));
        }
        Ok(())
    }

    fn finish(self, prefix: String) -> Option<Stack> {
        let layers = self.indices.len() as u64;
        // A stack repeats: two layers at least (a lone `.0.` is a Sequential's first module).
        if layers < 2 {
            return None;
        }
        let width = self.dims.iter().max_by_key(|(d, c)| (**c, **d)).map(|(d, _)| *d)?;
        let mlp_width = self.largest.and_then(|(_, [a, b])| {
            if a == width {
                Some(b)
            } else if b == width {
                Some(a)
            } else {
                None
            }
        });
        Some(Stack {
            prefix,
            contiguous: self.indices.last() == Some(&(layers - 1)),
            layers,
            parameters: self.parameters,
            width,
            mlp_width,
            experts: (self.experts > 1).then_some(self.experts),
            kv_width: self.kv_rows.into_iter().max_by_key(|(_, c)| *c).map(|(d, _)| d),
        })
    }
}

/// `j` in `…experts.{j}.…` (Mixtral-style numbered experts).
fn expert_index(rest: &str) -> Option<u64> {
    let (_, after) = rest.split_once("experts.")?;
    let seg = after.split('.').next()?;
    (!seg.is_empty() && seg.len() <= 6 && seg.bytes().all(|b| b.is_ascii_digit())).then(|| seg.parse().ok()).flatten()
}

fn is_key_projection(rest: &str) -> bool {
    ["k_proj.weight", "key.weight", "wk.weight", "k.weight"].iter().any(|k| rest.ends_with(k))
}

fn overflow() -> Error {
    Error::Overflow { what: "checkpoint parameters".into() }
}

fn bad(message: String) -> Error {
    Error::Safetensors { file: "checkpoint".into(), message }
}

/// Read the structure of a checkpoint from its tensors (all shards' headers). Unknown names
/// never fail; absurd shapes, too many tensors and overflow are errors.
pub fn infer(tensors: &[TensorInfo]) -> Result<Structure> {
    if tensors.len() > MAX_TENSORS {
        return Err(bad(format!("{} tensors, more than the {MAX_TENSORS} any real checkpoint holds", tensors.len())));
    }
    let mut summary = CheckpointSummary::default();
    summary.add(tensors)?;
    let mut stacks: BTreeMap<&str, Acc> = BTreeMap::new();
    let mut outside: Vec<&TensorInfo> = Vec::new();
    for t in tensors {
        if let Some(d) = t.shape.iter().find(|d| **d > MAX_DIM && t.shape.len() > 1) {
            return Err(bad(format!("tensor `{}` has a dimension of {d}, beyond any real model (limit {MAX_DIM})", t.name)));
        }
        let n = t.numel().ok_or_else(overflow)?;
        match split_index(&t.name) {
            Some((prefix, i, rest)) => stacks.entry(prefix).or_default().add(t, i, rest, n)?,
            None => outside.push(t),
        }
    }
    let mut found: Vec<Stack> = stacks.into_iter().filter_map(|(prefix, acc)| acc.finish(prefix.to_string())).collect();
    // Tensors of one-layer "stacks" count as outside.
    let in_stacks = found.iter().map(|s| s.parameters).fold(0u64, u64::saturating_add);
    found.sort_by(|a, b| b.parameters.cmp(&a.parameters).then(a.prefix.cmp(&b.prefix)));
    let width = found.first().map(|s| s.width);
    let (embedding, head) = embedding_and_head(&outside, width);
    Ok(Structure { outside_parameters: summary.parameters.saturating_sub(in_stacks), summary, stacks: found, embedding, head })
}

/// The embedding: the largest matrix outside the stacks with more rows than columns (a
/// vocabulary), preferring one named an embedding, then one of the main stack's width (an
/// ELECTRA generator's 768-wide word embedding feeds 256-wide layers, and its 768×256 head
/// dense is not a vocabulary); the head: another of its shape.
fn embedding_and_head(outside: &[&TensorInfo], width: Option<u64>) -> (Option<Matrix>, Option<Matrix>) {
    let mats: Vec<Matrix> = outside
        .iter()
        .filter_map(|t| match t.shape.as_slice() {
            [r, c] if r > c => Some(Matrix { name: t.name.clone(), rows: *r, cols: *c }),
            _ => None,
        })
        .collect();
    let named = |m: &Matrix| m.name.contains("embed") || m.name.contains("wte");
    let key = |m: &&Matrix| (named(m), width.is_none_or(|w| m.cols == w), !is_head_name(&m.name), m.rows.saturating_mul(m.cols));
    let Some(emb) = mats.iter().max_by_key(key).cloned() else { return (None, None) };
    let head = mats.iter().find(|m| m.name != emb.name && m.rows == emb.rows && m.cols == emb.cols).cloned();
    (Some(emb), head)
}

fn is_head_name(name: &str) -> bool {
    name.contains("lm_head") || name.contains("head.") || name.starts_with("output.")
}

/// The config keys an approximate estimate reads, under their common spellings, from the top
/// level or a nested `text_config`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigKeys {
    /// `hidden_size` / `n_embd` / `d_model`.
    pub hidden: Option<u64>,
    /// `num_hidden_layers` / `n_layer` / `num_layers`.
    pub layers: Option<u64>,
    /// `num_attention_heads` / `n_head`.
    pub heads: Option<u64>,
    /// `num_key_value_heads`.
    pub kv_heads: Option<u64>,
    /// `head_dim`.
    pub head_dim: Option<u64>,
    /// `intermediate_size` / `ffn_dim` / `n_inner` / `d_ff`.
    pub intermediate: Option<u64>,
    /// `num_local_experts` / `num_experts` / `n_routed_experts`.
    pub experts: Option<u64>,
    /// `num_experts_per_tok`.
    pub top_k: Option<u64>,
    /// `vocab_size`.
    pub vocab: Option<u64>,
    /// `max_position_embeddings` / `n_positions`.
    pub max_positions: Option<u64>,
    /// `model_type` (top level).
    pub model_type: Option<String>,
}

impl ConfigKeys {
    /// Read the keys from a config's JSON object; nested `text_config` fills what the top
    /// level lacks. Values that are not non-negative integers are ignored.
    pub fn read(obj: &Map<String, Value>) -> ConfigKeys {
        let text = obj.get("text_config").and_then(Value::as_object);
        let get = |keys: &[&str]| -> Option<u64> {
            let find = |o: &Map<String, Value>| keys.iter().find_map(|k| o.get(*k).and_then(Value::as_u64));
            find(obj).or_else(|| text.and_then(find))
        };
        ConfigKeys {
            hidden: get(&["hidden_size", "n_embd", "d_model"]),
            layers: get(&["num_hidden_layers", "n_layer", "num_layers"]),
            heads: get(&["num_attention_heads", "n_head", "num_heads", "decoder_attention_heads", "encoder_attention_heads"]),
            kv_heads: get(&["num_key_value_heads"]),
            head_dim: get(&["head_dim"]),
            intermediate: get(&["intermediate_size", "ffn_dim", "n_inner", "d_ff"]),
            experts: get(&["num_local_experts", "num_experts", "n_routed_experts"]),
            top_k: get(&["num_experts_per_tok"]),
            vocab: get(&["vocab_size"]),
            max_positions: get(&["max_position_embeddings", "n_positions"]),
            model_type: obj.get("model_type").and_then(Value::as_str).map(str::to_string),
        }
    }

    /// Parse config bytes; `None` when they are not a JSON object.
    pub fn parse(bytes: &[u8]) -> Option<ConfigKeys> {
        serde_json::from_slice::<Map<String, Value>>(bytes).ok().map(|o| ConfigKeys::read(&o))
    }

    /// The keys an approximate estimate from the config alone needs that this one lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (k, present) in [
            ("hidden_size", self.hidden.is_some()),
            ("num_hidden_layers", self.layers.is_some()),
            ("num_attention_heads", self.heads.is_some()),
            ("intermediate_size", self.intermediate.is_some()),
            ("vocab_size", self.vocab.is_some()),
        ] {
            if !present {
                v.push(k);
            }
        }
        v
    }
}

/// One figure of the approximate decoder and where it came from.
struct Figure {
    value: u64,
    /// `read` (config key or names/shapes, exact) or the reason it was inferred.
    how: String,
    exact: bool,
}

fn read(value: u64, how: impl Into<String>) -> Figure {
    Figure { value, how: how.into(), exact: true }
}

fn guessed(value: u64, how: impl Into<String>) -> Figure {
    Figure { value, how: how.into(), exact: false }
}

/// The dimensions of the Llama-style decoder standing in for the main stack.
struct Dims {
    hidden: Figure,
    layers: Figure,
    vocab: Figure,
    heads: Figure,
    head_dim: Figure,
    kv_heads: Figure,
    /// The MLP width as read (config key, else the largest matrix's other side); reported only,
    /// the stand-in's SwiGLU width is fitted to the layer's parameters.
    mlp: Option<Figure>,
    /// (experts, top-k), when the stack is a mixture of experts.
    moe: Option<(Figure, Figure)>,
    disagreements: Vec<String>,
}

/// A config key wins over the value read from the headers; a disagreement is recorded.
fn prefer(key: &str, config: Option<u64>, from_headers: Option<(u64, &str)>, notes: &mut Vec<String>) -> Option<Figure> {
    match (config, from_headers) {
        (Some(c), Some((h, what))) => {
            if c != h {
                notes.push(format!("config `{key}` = {c} but the headers show {h} ({what}); the config's value is used"));
            }
            Some(read(c, format!("config `{key}` or its alias")))
        }
        (Some(c), None) => Some(read(c, format!("config `{key}` or its alias"))),
        (None, Some((h, what))) => Some(read(h, what.to_string())),
        (None, None) => None,
    }
}

/// Heads when no key says: 128-wide heads when the width allows (Llama, Qwen, Mistral), else
/// 64-wide (GPT-2, BERT), else one head.
fn infer_heads(hidden: u64) -> (u64, u64) {
    for hd in [128, 64] {
        if hidden >= hd && hidden % hd == 0 {
            return (hidden / hd, hd);
        }
    }
    (1, hidden.max(1))
}

/// The stack the stand-in models: the one whose width (and layer count) the config names —
/// CLIP's `text_config` describes its text tower, not the larger vision tower — else the largest.
pub fn main_stack<'a>(s: &'a Structure, cfg: &ConfigKeys) -> Option<&'a Stack> {
    let named = |st: &&Stack| Some(st.width) == cfg.hidden && cfg.layers.is_none_or(|l| l == st.layers);
    s.stacks.iter().find(named).or(s.stacks.first())
}

fn dims(s: &Structure, cfg: &ConfigKeys, source: &str) -> Result<Dims> {
    let mut notes = Vec::new();
    let main = main_stack(s, cfg);
    let hidden = prefer("hidden_size", cfg.hidden, main.map(|m| (m.width, "most common dimension of the stack's shapes")), &mut notes);
    let layers = prefer("num_hidden_layers", cfg.layers, main.map(|m| (m.layers, "layer indices in the tensor names")), &mut notes);
    let vocab = prefer("vocab_size", cfg.vocab, s.embedding.as_ref().map(|e| (e.rows, "rows of the embedding")), &mut notes);
    let mut missing = Vec::new();
    if main.is_none() && (cfg.hidden.is_none() || cfg.layers.is_none()) {
        missing.push(
            "a repeated layer stack in the tensor names (like `model.layers.0.`), or the config keys hidden_size and num_hidden_layers",
        );
    }
    if vocab.is_none() {
        missing.push("the vocabulary: an embedding matrix in the headers or the config key vocab_size");
    }
    let (Some(hidden), Some(layers), Some(vocab), true) = (hidden, layers, vocab, missing.is_empty()) else {
        if hidden_missing(main, cfg) {
            missing.push("the width: config key hidden_size or a layer stack's shapes");
        }
        return Err(Error::NotEnoughStructure { source_name: source.into(), missing: missing.join("; ") });
    };
    let (heads, head_dim) = match (cfg.heads, cfg.head_dim) {
        (Some(h), Some(d)) => (read(h, "config `num_attention_heads`"), read(d, "config `head_dim`")),
        (Some(h), None) => (read(h, "config `num_attention_heads`"), guessed(hidden.value.checked_div(h).unwrap_or(0), "hidden / heads")),
        (None, _) => {
            let (h, d) = infer_heads(hidden.value);
            (guessed(h, "no num_attention_heads key: heads of 128 (else 64) assumed"), guessed(d, "assumed"))
        }
    };
    let kv_heads = match (cfg.kv_heads, main.and_then(|m| m.kv_width)) {
        (Some(k), _) => read(k, "config `num_key_value_heads`"),
        (None, Some(w)) if head_dim.value > 0 && w % head_dim.value == 0 && heads.value % (w / head_dim.value).max(1) == 0 => {
            guessed((w / head_dim.value).max(1), format!("key projection rows {w} / head_dim"))
        }
        (None, _) => guessed(heads.value, "no num_key_value_heads key: as many as query heads"),
    };
    let experts = prefer(
        "num_local_experts",
        cfg.experts,
        main.and_then(|m| m.experts).map(|e| (e, "expert tensors in the names/shapes")),
        &mut notes,
    );
    // Dense stacks only: an MoE layer's largest matrix is a router or shared expert.
    let shapes_mlp = main.filter(|m| m.experts.is_none()).and_then(|m| m.mlp_width).map(|w| (w, "other side of the largest matrix"));
    let mlp = prefer("intermediate_size", cfg.intermediate, shapes_mlp, &mut notes);
    let moe = experts.filter(|e| e.value > 1).map(|e| {
        let k = match cfg.top_k {
            Some(k) => read(k, "config `num_experts_per_tok`"),
            None => guessed(e.value.min(2), "no num_experts_per_tok key: top-2 routing assumed"),
        };
        (e, k)
    });
    Ok(Dims { hidden, layers, vocab, heads, head_dim, kv_heads, mlp, moe, disagreements: notes })
}

fn hidden_missing(main: Option<&Stack>, cfg: &ConfigKeys) -> bool {
    main.is_none() && cfg.hidden.is_none()
}

/// Every figure within what a config may say (config::validate's limits), before any
/// arithmetic on them.
fn check_sizes(d: &Dims, source: &str) -> Result<()> {
    let experts = d.moe.as_ref().map(|(e, _)| ("num_local_experts", e, MAX_EXPERTS));
    let figs = [
        ("hidden_size", &d.hidden, MAX_DIM),
        ("num_hidden_layers", &d.layers, MAX_INDEX),
        ("vocab_size", &d.vocab, MAX_DIM),
        ("num_attention_heads", &d.heads, MAX_DIM),
        ("head_dim", &d.head_dim, MAX_DIM),
        ("num_key_value_heads", &d.kv_heads, MAX_DIM),
    ];
    for (key, f, max) in figs.into_iter().chain(experts) {
        if f.value == 0 || f.value > max {
            return Err(Error::BadKey {
                file: source.into(),
                key: key.into(),
                value: f.value.to_string(),
                hint: format!("from {}; must be between 1 and {max}", f.how),
            });
        }
    }
    Ok(())
}

/// The SwiGLU width (per expert for MoE) that gives one Llama-style layer the stack's exact
/// parameters per layer: attention q,k,v,o + two norms + router, the rest in gate/up/down
/// (`3 · hidden · width`, transformers modeling_llama.py LlamaMLP). At least 1.
fn fitted_width(layer_params: u64, d: &Dims) -> u64 {
    let h = d.hidden.value as u128;
    // Every factor is at most 2^24 (check_sizes), so no product below overflows u128.
    let q = d.heads.value as u128 * d.head_dim.value as u128;
    let kv = d.kv_heads.value as u128 * d.head_dim.value as u128;
    let experts = d.moe.as_ref().map_or(1, |(e, _)| e.value as u128);
    let router = if d.moe.is_some() { experts * h } else { 0 };
    let fixed = 2 * h * q + 2 * h * kv + 2 * h + router;
    let per = 3 * h * experts;
    ((layer_params as u128).saturating_sub(fixed) / per.max(1)).clamp(1, MAX_DIM as u128) as u64
}

/// The synthetic Llama (or Mixtral, for experts) config the stand-in decoder is read from, so
/// it passes the same validation as any config.
fn stand_in_config(d: &Dims, width: u64, tied: bool, cfg: &ConfigKeys) -> Value {
    let mut c = json!({
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": d.hidden.value,
        "num_hidden_layers": d.layers.value,
        "num_attention_heads": d.heads.value,
        "num_key_value_heads": d.kv_heads.value,
        "head_dim": d.head_dim.value,
        "intermediate_size": width,
        "vocab_size": d.vocab.value,
        "tie_word_embeddings": tied,
    });
    if let Some(p) = cfg.max_positions {
        c["max_position_embeddings"] = json!(p);
    }
    if let Some((e, k)) = &d.moe {
        c["model_type"] = json!("mixtral");
        c["architectures"] = json!(["MixtralForCausalLM"]);
        c["num_local_experts"] = json!(e.value.min(MAX_EXPERTS));
        c["num_experts_per_tok"] = json!(k.value);
    }
    c
}

/// An approximate [`Model`] for an architecture vram does not know: a Llama-style decoder of
/// the main stack's dimensions, carrying the checkpoint's exact parameter count and bytes
/// (`checkpoint_parameters`, `checkpoint_bytes`) and an `approximation` that says what was read
/// and what was inferred. `why` says which architecture was not recognised; `config` is the
/// config.json's bytes when there is one.
pub fn approximate_model(name: &str, why: &str, config: Option<&[u8]>, s: &Structure) -> Result<Model> {
    let cfg = config.and_then(ConfigKeys::parse).unwrap_or_default();
    let d = dims(s, &cfg, name)?;
    check_sizes(&d, name)?;
    let main = main_stack(s, &cfg);
    let layer_params = match main {
        Some(st) => st.parameters.checked_div(d.layers.value).unwrap_or(0),
        None => 0,
    };
    let mut width = fitted_width(layer_params, &d);
    let tied = s.head.is_none();
    let file = format!("{name} (structure read from the safetensors headers)");
    let mut m = parse_config(stand_in_config(&d, width, tied, &cfg).to_string().as_bytes(), name, &file)?;
    // The parts outside the layers (final norm, embedding of another width) can push the
    // stand-in past the checkpoint's count: narrow the MLP until it fits, when it can.
    let per_unit = 3 * d.hidden.value * d.layers.value * d.moe.as_ref().map_or(1, |(e, _)| e.value);
    let over = m.parameters().saturating_sub(s.summary.parameters);
    if over > 0 && width > 1 {
        width = width.saturating_sub(over.div_ceil(per_unit.max(1))).max(1);
        m = parse_config(stand_in_config(&d, width, tied, &cfg).to_string().as_bytes(), name, &file)?;
    }
    m.model_type = cfg.model_type.clone().filter(|t| !t.is_empty()).unwrap_or_else(|| "unknown".into());
    m.checkpoint_parameters = Some(s.summary.parameters);
    m.checkpoint_bytes = Some(s.summary.bytes);
    m.stored_dtype = s.summary.main_dtype();
    m.checkpoint_quantization = s.summary.quantized_storage();
    let text = describe(why, s, main, &d, width, m.parameters());
    m.warnings = vec![format!("APPROXIMATE: {text}")];
    m.warnings.extend(d.disagreements.iter().cloned());
    m.approximation = Some(text);
    Ok(m)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// The approximation text: what was not recognised, what is exact, what is inferred, what the
/// estimate assumes and how to get exact numbers.
fn describe(why: &str, s: &Structure, main: Option<&Stack>, d: &Dims, width: u64, template: u64) -> String {
    let sum = &s.summary;
    let dtype = sum.main_dtype().map_or("mixed dtypes".to_string(), |t| t.torch_name().to_string());
    let stacks: Vec<String> = s
        .stacks
        .iter()
        .take(8)
        .map(|st| {
            let experts = st.experts.map_or(String::new(), |e| format!(", {e} experts"));
            format!("`{}` ×{} (width {}, {} parameters per layer{experts})", st.prefix, st.layers, st.width, st.layer_parameters())
        })
        .collect();
    let outside = outside_line(s);
    let (exact, mut inferred) = figure_lines(d);
    inferred.push("attention assumed standard softmax attention with rotary positions".into());
    inferred.push(format!("MLP modelled as a SwiGLU of width {width} holding each layer's parameters"));
    let modelled = main.map_or("the config's dimensions".to_string(), |m| format!("the stack `{}`", m.prefix));
    let more = if s.stacks.len() > 1 { "; the other stacks count in weights, gradients and optimizer states only" } else { "" };
    let over = if template > sum.parameters {
        format!(
            " The Llama-style stand-in holds {template} parameters, more than the checkpoint's {}: its weights are overstated.",
            sum.parameters
        )
    } else {
        String::new()
    };
    format!(
        "{why}. Read exactly from the safetensors headers: {} parameters, {} bytes ({:.2} GiB) in {} tensors, mostly {dtype}; stacks: {}; {outside}. \
         Also exact: {}. Inferred: {}. Estimated as a Llama-style decoder (RMSNorm, SwiGLU, rotary) of {modelled}{more}; \
         weights, gradients and optimizer states use the exact parameter count, while activations and the KV cache follow the \
         Llama-style guess and may be far off (no error bound is claimed).{over} For exact numbers, measure it with `vram.measure` \
         in Python (any nn.Module), or file an issue with its config.json.",
        sum.parameters,
        sum.bytes,
        gib(sum.bytes),
        sum.tensors,
        if stacks.is_empty() { "none found".to_string() } else { stacks.join(", ") },
        if exact.is_empty() { "nothing else".to_string() } else { exact.join(", ") },
        inferred.join(", "),
    )
}

/// The stand-in's figures as text, split into those read exactly and those inferred.
fn figure_lines(d: &Dims) -> (Vec<String>, Vec<String>) {
    let base = [
        ("hidden", &d.hidden),
        ("layers", &d.layers),
        ("vocabulary", &d.vocab),
        ("heads", &d.heads),
        ("head_dim", &d.head_dim),
        ("KV heads", &d.kv_heads),
    ];
    let moe = d.moe.as_ref().map(|(e, k)| [("experts", e), ("experts per token", k)]);
    let all = base.into_iter().chain(d.mlp.as_ref().map(|f| ("MLP width", f))).chain(moe.into_iter().flatten());
    let (mut exact, mut inferred) = (Vec::new(), Vec::new());
    for (what, f) in all {
        let line = format!("{what} {} ({})", f.value, f.how);
        if f.exact {
            exact.push(line);
        } else {
            inferred.push(line);
        }
    }
    (exact, inferred)
}

/// What lies outside the stacks: their parameters, the embedding and an untied head.
fn outside_line(s: &Structure) -> String {
    let mut v = format!("{} parameters outside them", s.outside_parameters);
    if let Some(e) = &s.embedding {
        v.push_str(&format!(" (embedding `{}` {}×{}", e.name, e.rows, e.cols));
        match &s.head {
            Some(h) => v.push_str(&format!(", untied head `{}`)", h.name)),
            None => v.push_str(", no separate head: tied)"),
        }
    }
    v
}

/// Whether `model_type` is one vram reads natively.
pub fn is_known_type(model_type: &str) -> bool {
    known_model_types().contains(&model_type)
}

/// Whether a refusal is for an architecture vram does not recognise at all, rather than a
/// recognised family it cannot estimate yet (encoders, encoder-decoders, vision, state-space)
/// or a known type with another head. Reads the refusal's reason: these two are the reasons
/// `config` gives when `model_type` is in neither its known list nor its families table.
pub fn unrecognised(err: &Error) -> bool {
    match err {
        Error::UnsupportedArchitecture { what, reason, .. } => {
            !what.starts_with("architecture ")
                && (reason == "vram does not know this architecture"
                    || reason.starts_with("multimodal models are not supported yet: the vision tower is not counted"))
        }
        _ => false,
    }
}
