//! vLLM speculative decoding (`--speculative-config`), as the V1 engine sizes it.
//!
//! What a drafter changes in vLLM's start-up accounting (read in the 0.19.1 and 0.33.0 sdists):
//! - **weights**: the drafter is built inside the same `DeviceMemoryProfiler` as the target
//!   (v1/worker/gpu_model_runner.py `load_model`: "Loading drafter model..."), so "Model loading
//!   took" holds both. EAGLE heads and MTP modules share the target's embedding and LM head
//!   where the checkpoint has none or an identical copy (v1/spec_decode/eagle.py
//!   `_maybe_share_embeddings`, `_maybe_share_lm_head`); an EAGLE-3 head keeps its own LM head over
//!   its draft vocabulary; a separate draft model keeps all of its own;
//! - **KV cache**: every attention layer the drafter registers is a layer of the KV cache
//!   (`get_kv_cache_spec` walks all attention layers), so a token costs the draft layers' K and V
//!   too and the pool holds fewer tokens;
//! - **profile run**: the drafter's forward runs over the same max-num-batched-tokens after the
//!   target's (`self.drafter.dummy_run`, with the target's hidden states held); the V1 runner's
//!   dummy sampler then runs the rejection sampler over [2R, V] dummy logits (one draft token a
//!   request, `_dummy_sampler_run`), Model Runner V2 samples the draft's logits inside `propose`;
//! - **CUDA graphs**: decode batches hold 1 + k tokens a request, so the capture ceiling is
//!   min(2 × max-num-seqs × (1 + k), 512) and every size is rounded up to a multiple of 1 + k
//!   (config/vllm.py `_set_cudagraph_sizes`, config/compilation.py
//!   `adjust_cudagraph_sizes_for_spec_decode`); the drafter captures piecewise graphs of its own
//!   layers at the same sizes.
//!
//! n-gram and suffix drafting run on the CPU: only the sampler and the graph sizes change.

use serde::Serialize;

use crate::error::Result;
use crate::model::Model;
use crate::serve::invalid;

/// `speculative_config.method`, after vLLM's aliases (config/speculative.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecMethod {
    /// Prompt-lookup n-grams (`ngram`): on the CPU under the V1 runner; Model Runner V2 matches
    /// them on the GPU with buffers of a few MiB ([max-num-seqs, max-model-len / 256] int64).
    Ngram,
    /// `ngram_gpu`: the V1 runner keeps every request's tokens on the GPU for the match
    /// ([max-num-seqs, max-model-len] int32, gpu_model_runner.py `token_ids_gpu_tensor`), not
    /// modelled there; under Model Runner V2 it is `ngram`.
    NgramGpu,
    /// Suffix decoding (Arctic Inference), on the CPU; Model Runner V1 only.
    Suffix,
    /// EAGLE-1 heads (`eagle`): decoder layers over the target's hidden states.
    Eagle,
    /// EAGLE-3 heads (`eagle3`): one layer over three of the target's hidden states, its own
    /// LM head over a draft vocabulary.
    Eagle3,
    /// The checkpoint's own multi-token-prediction layers (`mtp`, and the per-family names
    /// `deepseek_mtp`, `glm4_moe_mtp`, `mimo_mtp`, `ernie_mtp`, `longcat_flash_mtp`, …).
    Mtp,
    /// A separate, smaller model of the same vocabulary (`draft_model`).
    DraftModel,
}

impl SpecMethod {
    /// vLLM's spelling; methods vram does not model are refused by name.
    pub fn parse(s: &str) -> Result<SpecMethod> {
        let s = s.trim().to_ascii_lowercase();
        Ok(match s.as_str() {
            "ngram" | "[ngram]" => SpecMethod::Ngram,
            "ngram_gpu" => SpecMethod::NgramGpu,
            "suffix" => SpecMethod::Suffix,
            "eagle" => SpecMethod::Eagle,
            "eagle3" => SpecMethod::Eagle3,
            "draft_model" => SpecMethod::DraftModel,
            m if m == "mtp" || m.ends_with("_mtp") => SpecMethod::Mtp,
            _ => {
                return Err(invalid(
                    "speculative_config.method",
                    &s,
                    "ngram, ngram_gpu, suffix, eagle, eagle3, mtp (or a family's *_mtp) or draft_model; vram does not model medusa, mlp_speculator, dflash and the other drafters' memory",
                ))
            }
        })
    }

    /// Whether the method loads a drafter onto the GPU.
    pub fn has_drafter(self) -> bool {
        !matches!(self, SpecMethod::Ngram | SpecMethod::NgramGpu | SpecMethod::Suffix)
    }

    /// vLLM's name for the method.
    pub fn name(self) -> &'static str {
        match self {
            SpecMethod::Ngram => "ngram",
            SpecMethod::NgramGpu => "ngram_gpu",
            SpecMethod::Suffix => "suffix",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Eagle3 => "eagle3",
            SpecMethod::Mtp => "mtp",
            SpecMethod::DraftModel => "draft_model",
        }
    }
}

/// vLLM's `--speculative-config`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Speculative {
    /// `method`.
    pub method: SpecMethod,
    /// `num_speculative_tokens` (k): tokens proposed a step.
    pub num_speculative_tokens: u64,
    /// The drafter's config for `eagle`, `eagle3` and `draft_model` (its `model`); `None`
    /// otherwise.
    pub draft: Option<Box<Model>>,
}

/// `--speculative-config` as given, before its drafter is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecRequest {
    /// The method, given or picked as vLLM picks it.
    pub method: SpecMethod,
    /// `num_speculative_tokens` (for MTP without it, the checkpoint's MTP layers).
    pub num_speculative_tokens: u64,
    /// `model`: the EAGLE head or draft model to load.
    pub model: Option<String>,
}

/// Read vLLM's `--speculative-config` JSON object (config/speculative.py `SpeculativeConfig`,
/// read in the 0.33.0 sdist) for `target` on a TP group of `tp`. Without `method`, vLLM's choice:
/// `ngram` for the model "ngram", else a draft model, taken for an EAGLE head when its name holds
/// "eagle-" and an EAGLE-3 head when it holds "eagle3"; with no `model` either vLLM refuses the
/// config, and so does vram. `num_speculative_tokens` defaults, as vLLM's, to the checkpoint's MTP
/// layers for `mtp` and to `suffix_decoding_max_tree_depth` (24) for `suffix`. Keys that change no
/// memory are accepted; keys that would (a drafter's own quantization or KV dtype, parallel
/// drafting, a drafter TP other than the target's) are refused by name.
pub fn parse_request(v: &serde_json::Value, target: &Model, tp: u64) -> Result<SpecRequest> {
    const EXAMPLE: &str = r#"e.g. {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}"#;
    let Some(obj) = v.as_object() else {
        return Err(invalid("--speculative-config", v, &format!("a JSON object; {EXAMPLE}")));
    };
    let model = match obj.get("model") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(invalid("speculative_config.model", other, "a string: a Hub id, a local directory or a preset")),
    };
    let method = match obj.get("method") {
        Some(serde_json::Value::String(m)) => SpecMethod::parse(m)?,
        Some(other) if !other.is_null() => return Err(invalid("speculative_config.method", other, "a string")),
        _ => match model.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None => {
                return Err(invalid(
                    "--speculative-config",
                    v,
                    &format!("a `method` (ngram, suffix, eagle, eagle3, mtp, draft_model) or a `model`: vLLM refuses speculative tokens without a speculative model; {EXAMPLE}"),
                ))
            }
            Some("ngram" | "[ngram]") => SpecMethod::Ngram,
            Some(m) if m.contains("eagle-") => SpecMethod::Eagle,
            Some(m) if m.contains("eagle3") => SpecMethod::Eagle3,
            Some(_) => SpecMethod::DraftModel,
        },
    };
    let k = match (obj.get("num_speculative_tokens").filter(|n| !n.is_null()), method) {
        (Some(n), _) => {
            n.as_u64().ok_or_else(|| invalid("speculative_config.num_speculative_tokens", n, "a whole number from 1 to 128"))?
        }
        (None, SpecMethod::Mtp) if target.mtp_layers > 0 => target.mtp_layers,
        (None, SpecMethod::Suffix) => match obj.get("suffix_decoding_max_tree_depth").filter(|n| !n.is_null()) {
            Some(n) => n.as_u64().ok_or_else(|| invalid("speculative_config.suffix_decoding_max_tree_depth", n, "a whole number"))?,
            None => 24,
        },
        (None, _) => {
            return Err(invalid("speculative_config.num_speculative_tokens", "missing", &format!("required for method {}", method.name())))
        }
    };
    // MTP layers are reused in turn: vLLM refuses a count beyond them that they do not divide.
    let n = target.mtp_layers;
    if method == SpecMethod::Mtp && n > 0 && k > n && k % n != 0 {
        return Err(invalid(
            "speculative_config.num_speculative_tokens",
            k,
            &format!("at most {n} or a multiple of {n}, the checkpoint's MTP layers (vLLM: \"must be divisible by n_predict\")"),
        ));
    }
    // A key set to null is left at vLLM's default, which is what vram models.
    for (key, value) in obj.iter().filter(|(_, v)| !v.is_null()) {
        match key.as_str() {
            "method" | "model" | "num_speculative_tokens" => {}
            // The drafter on the target's TP group is what vLLM does by default.
            "draft_tensor_parallel_size" if value.as_u64() == Some(tp) => {}
            // Proposal and acceptance settings, and the drafter's revision: no memory.
            "prompt_lookup_max" | "prompt_lookup_min" | "disable_padded_drafter_batch" | "disable_by_batch_size" | "acceptance_method"
            | "posterior_threshold" | "posterior_alpha" | "revision" | "code_revision" | "max_model_len" | "disable_log_stats"
            | "suffix_decoding_max_tree_depth" | "suffix_decoding_max_cached_requests" | "suffix_decoding_max_spec_factor"
            | "suffix_decoding_min_token_prob" | "speculative_token_tree" | "rejection_sample_method" => {}
            _ => {
                return Err(invalid(
                    &format!("speculative_config.{key}"),
                    value,
                    "a key that changes memory in a way vram does not model (it models method, model, num_speculative_tokens, draft_tensor_parallel_size equal to --tensor-parallel-size, and keys that change no memory)",
                ))
            }
        }
    }
    Ok(SpecRequest { method, num_speculative_tokens: k, model })
}

/// vLLM's bound on proposed tokens (v1/sample/rejection_sampler.py `MAX_SPEC_LEN`).
pub const MAX_SPEC_LEN: u64 = 128;

/// The drafter's shape in the target's terms, on one TP rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Drafter {
    /// Weight bytes on the rank.
    pub weights: u128,
    /// Attention layers it adds to the KV cache.
    pub kv_layers: u64,
    /// KV bytes one token costs in those layers on the rank.
    pub kv_bytes_per_token: u64,
    /// A model standing for the drafter's forward (its layers over max-num-batched-tokens).
    pub forward: Option<Model>,
    /// [T, hidden] tensors held beside the target's own hidden states while the drafter runs:
    /// EAGLE's input (1), EAGLE-3's three auxiliary states (3), an MTP module's embeddings and
    /// hidden states (2); a draft model holds none of the target's.
    pub held_hidden: u64,
    /// Its attention layers have the target's KV shape, so they join the target's groups (vLLM
    /// groups layers of one spec); otherwise they sit beside them with their own page size.
    pub joins_target_groups: bool,
    /// What the weights are.
    pub what: String,
}

/// Refuse what is not modelled; `tp`/`pp` as given.
pub(crate) fn check(m: &Model, s: &Speculative, pp: u64) -> Result<()> {
    let k = s.num_speculative_tokens;
    if k == 0 || k > MAX_SPEC_LEN {
        return Err(invalid("speculative_config.num_speculative_tokens", k, "from 1 to 128 (vLLM's MAX_SPEC_LEN)"));
    }
    if pp > 1 {
        return Err(invalid(
            "--speculative-config",
            "with --pipeline-parallel-size > 1",
            "speculative decoding under pipeline parallelism is not modelled (the drafter sits on the last stage)",
        ));
    }
    // A drafter whose layers differ in KV shape sits beside a single full-attention group only;
    // beside sliding-window or state-space groups vLLM would regroup every layer by page size.
    let grouped = m.sliding_layers > 0 || m.ssm.is_some() || m.cross_attention;
    if s.method.has_drafter() && grouped && !s.draft.as_deref().is_none_or(|d| same_kv_shape(m, d)) {
        return Err(invalid(
            "--speculative-config",
            s.method.name(),
            &format!(
                "a drafter of another KV shape than {}'s beside its {} is not modelled (vLLM regroups the layers by page size); MTP layers and n-gram drafting are",
                m.name,
                if m.ssm.is_some() { "state-space layers" } else { "sliding-window layers" }
            ),
        ));
    }
    if m.cross_attention {
        return Err(invalid("--speculative-config", s.method.name(), "speculative decoding of an encoder-decoder model is not modelled"));
    }
    match (s.method, &s.draft) {
        (SpecMethod::Mtp, _) if m.mtp_layers == 0 => Err(invalid(
            "speculative_config.method",
            "mtp",
            &format!("{}'s config has no multi-token-prediction layers (num_nextn_predict_layers / mtp_num_hidden_layers)", m.name),
        )),
        (SpecMethod::Eagle | SpecMethod::Eagle3 | SpecMethod::DraftModel, None) => Err(invalid(
            "speculative_config.model",
            "missing",
            &format!("method {} needs the drafter's checkpoint (a Hub id, a local directory or a preset)", s.method.name()),
        )),
        (SpecMethod::Eagle | SpecMethod::Eagle3 | SpecMethod::DraftModel, Some(d)) if d.vocab == 0 || d.hidden == 0 || d.layers == 0 => {
            Err(invalid("speculative_config.model", &d.name, "has no hidden size, layers or vocabulary in its config"))
        }
        (SpecMethod::DraftModel, Some(d)) if d.vocab != m.vocab => Err(invalid(
            "speculative_config.model",
            &d.name,
            &format!("a draft model must share the target's vocabulary ({} against {}'s {})", d.vocab, m.name, m.vocab),
        )),
        (SpecMethod::DraftModel, Some(d)) if d.moe.is_some() || d.ssm.is_some() || d.sliding_layers > 0 || d.multimodal.is_some() => {
            Err(invalid(
                "speculative_config.model",
                &d.name,
                "a draft model with experts, state-space, sliding-window layers or a vision tower is not modelled",
            ))
        }
        _ => Ok(()),
    }
}

/// Whether a drafter's attention layer caches what one of the target's does (KV heads, head
/// size, MLA latent), so vLLM puts it in the target's groups.
fn same_kv_shape(m: &Model, d: &Model) -> bool {
    (d.kv_heads, d.head_dim, d.attention.mla) == (m.kv_heads, m.head_dim, m.attention.mla)
}

/// Parameters of one Llama-style decoder layer on one TP rank, its attention input `h_in` wide
/// (vLLM's QKVParallelLinear/RowParallelLinear/MergedColumnParallelLinear: heads, KV heads —
/// replicated when fewer than the ranks — and the MLP split over TP; norms whole).
fn llama_layer_rank_params(d: &Model, h_in: u64, tp: u64, extra_norms: u64) -> u128 {
    let (h, hd, tp) = (d.hidden as u128, d.head_dim as u128, tp.max(1) as u128);
    let q = d.heads as u128 / tp * hd;
    let kv = (d.kv_heads as u128 / tp).max(1) * hd;
    let i = d.intermediate as u128 / tp;
    let attn = h_in as u128 * (q + 2 * kv) + q * h;
    let mlp = if d.mlp.gated { 3 * h * i } else { 2 * h * i };
    attn + mlp + (2 + extra_norms as u128) * h
}

/// The drafter of `s` for target `m` on one TP rank of a TP group of `tp`: weights, KV layers,
/// and the forward it runs in the profile. `mtp_weights` prices the target's own MTP layers
/// (an average decoder layer of the checkpoint, as stored), given by the caller.
pub(crate) fn drafter(m: &Model, s: &Speculative, tp: u64, e: u128, kv_dtype_bytes: u64, mtp_weights: u128) -> Drafter {
    let per_layer_kv = |d: &Model| -> u64 {
        match d.attention.mla {
            Some(mla) => (mla.kv_lora_rank + mla.qk_rope_head_dim) * kv_dtype_bytes,
            None => 2 * (d.kv_heads / tp.max(1)).max(1) * d.head_dim * kv_dtype_bytes,
        }
    };
    let h = m.hidden as u128;
    match (s.method, s.draft.as_deref()) {
        (SpecMethod::Mtp, _) => {
            let n = m.mtp_layers;
            // deepseek_mtp.py DeepSeekMultiTokenPredictorLayer: a decoder layer, enorm, hnorm and
            // the shared head's norm, and eh_proj, a replicated nn.Linear(2h, h).
            let extra = n as u128 * (2 * h * h + 3 * h) * e;
            let mut fwd = m.clone();
            fwd.layers = n;
            Drafter {
                weights: mtp_weights + extra,
                kv_layers: n,
                kv_bytes_per_token: n * per_layer_kv(m),
                forward: Some(fwd),
                held_hidden: 2,
                joins_target_groups: true,
                what: format!(
                    "{n} MTP layer{} from the checkpoint (an average decoder layer each, with eh_proj and its norms; embedding and LM head shared with the target)",
                    if n == 1 { "" } else { "s" }
                ),
            }
        }
        (SpecMethod::Eagle, Some(d)) => {
            // llama_eagle.py: decoder layers and fc, a ReplicatedLinear(2h, h); the embedding and
            // LM head are the target's.
            let layers = d.layers as u128 * llama_layer_rank_params(d, d.hidden, tp, 0);
            let fc = 2 * d.hidden as u128 * d.hidden as u128;
            Drafter {
                weights: (layers + fc) * e,
                kv_layers: d.layers,
                kv_bytes_per_token: d.layers * per_layer_kv(d),
                forward: Some(d.clone()),
                held_hidden: 1,
                joins_target_groups: same_kv_shape(m, d),
                what: format!("EAGLE head {}: {} decoder layer(s) and fc (embedding and LM head shared with the target)", d.name, d.layers),
            }
        }
        (SpecMethod::Eagle3, Some(d)) => {
            // llama_eagle3.py: the first layer's attention reads [embeds, hidden] (2h) and has a
            // hidden_norm; fc is a ReplicatedLinear(3 × target hidden, h); the final norm; its own
            // LM head, ParallelLMHead(draft_vocab, h) split over TP, and the draft-to-target map
            // (int64). The embedding is the target's.
            let dh = d.hidden as u128;
            let first = llama_layer_rank_params(d, 2 * d.hidden, tp, 1);
            let rest = d.layers.saturating_sub(1) as u128 * llama_layer_rank_params(d, d.hidden, tp, 0);
            let fc = 3 * h * dh;
            let draft_vocab = d.draft_vocab.unwrap_or(d.vocab) as u128;
            let head = draft_vocab.div_ceil(tp.max(1) as u128) * dh;
            Drafter {
                weights: (first + rest + fc + dh + head) * e + draft_vocab * 8,
                kv_layers: d.layers,
                kv_bytes_per_token: d.layers * per_layer_kv(d),
                forward: Some(d.clone()),
                held_hidden: 3,
                joins_target_groups: same_kv_shape(m, d),
                what: format!(
                    "EAGLE-3 head {}: {} decoder layer(s), fc over three target layers, its own LM head over {} draft tokens (embedding shared with the target)",
                    d.name,
                    d.layers,
                    draft_vocab
                ),
            }
        }
        (SpecMethod::DraftModel, Some(d)) => Drafter {
            weights: 0, // the caller prices a whole draft model as it prices the target
            kv_layers: d.layers,
            kv_bytes_per_token: d.layers * per_layer_kv(d),
            forward: Some(d.clone()),
            held_hidden: 0,
            joins_target_groups: same_kv_shape(m, d),
            what: format!("draft model {} (its own embedding and LM head)", d.name),
        },
        _ => Drafter {
            weights: 0,
            kv_layers: 0,
            kv_bytes_per_token: 0,
            forward: None,
            held_hidden: 0,
            joins_target_groups: false,
            what: "on the CPU".into(),
        },
    }
}

/// An EAGLE head's config.json as vLLM reads it: a Llama-style decoder whose `architectures`
/// name the head class (`LlamaForCausalLMEagle3`, `Eagle3LlamaForCausalLM`, `EagleLlamaForCausalLM`
/// …, which vLLM maps to its own llama_eagle*.py), so the class is set aside and the
/// dimensions are read as the `model_type`'s (`llama` when none is named). The speculators
/// library's format keeps the decoder under `transformer_layer_config` beside
/// `draft_vocab_size` (vllm/transformers_utils/configs/speculators/algos.py): read from there.
pub fn parse_head_config(bytes: &[u8], name: &str, file: &str) -> Result<Model> {
    let root: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| crate::error::Error::Json { file: file.into(), message: e.to_string() })?;
    let serde_json::Value::Object(mut obj) = root else {
        return Err(crate::error::Error::Json { file: file.into(), message: "the top level must be a JSON object".into() });
    };
    if let Some(serde_json::Value::Object(inner)) = obj.get("transformer_layer_config").cloned() {
        let draft_vocab = obj.get("draft_vocab_size").cloned();
        obj = inner;
        if let Some(v) = draft_vocab {
            obj.insert("draft_vocab_size".into(), v);
        }
    }
    obj.remove("architectures");
    obj.entry("model_type").or_insert_with(|| serde_json::Value::String("llama".into()));
    let bytes = serde_json::to_vec(&serde_json::Value::Object(obj))
        .map_err(|e| crate::error::Error::Json { file: file.into(), message: e.to_string() })?;
    crate::config::parse_config(&bytes, name, file)
}

/// CUDA-graph capture sizes under speculative decoding: each rounded up to a multiple of 1 + k,
/// kept while it stays within the largest of the list (compilation.py
/// `adjust_cudagraph_sizes_for_spec_decode`).
pub fn round_capture_sizes(sizes: &[u64], k: u64) -> Vec<u64> {
    let q = k + 1;
    let Some(&max) = sizes.iter().max() else { return Vec::new() };
    let mut out: Vec<u64> = sizes.iter().map(|s| s.div_ceil(q) * q).filter(|&s| s <= max).collect();
    out.sort_unstable();
    out.dedup();
    if out.is_empty() && q <= max {
        out.push(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_aliases() {
        assert_eq!(SpecMethod::parse("deepseek_mtp").unwrap(), SpecMethod::Mtp);
        assert_eq!(SpecMethod::parse("EAGLE3").unwrap(), SpecMethod::Eagle3);
        assert_eq!(SpecMethod::parse("ngram_gpu").unwrap(), SpecMethod::NgramGpu);
        let e = SpecMethod::parse("medusa").unwrap_err().to_string();
        assert!(e.contains("medusa") && e.contains("eagle3"), "{e}");
    }

    /// The speculators library's format keeps the decoder under `transformer_layer_config`:
    /// RedHatAI/gemma-4-31B-it-speculator.eagle3's config.json, as a public repository's test
    /// quotes it (the library's find_string id 62209048472; abridged to the keys read).
    #[test]
    fn a_speculators_config_is_read_from_its_layer_config() {
        let text = br#"{
            "architectures": ["Eagle3DraftModel"], "draft_vocab_size": 32000, "dtype": "bfloat16",
            "speculators_model_type": "eagle3", "target_hidden_size": null,
            "transformer_layer_config": {
                "attention_bias": false, "head_dim": 256, "hidden_act": "silu", "hidden_size": 5376,
                "intermediate_size": 21504, "max_position_embeddings": 262144, "model_type": "llama",
                "num_attention_heads": 32, "num_hidden_layers": 1, "num_key_value_heads": 16,
                "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "vocab_size": 262144
            }
        }"#;
        let d = parse_head_config(text, "gemma-4-31b-eagle3", "config.json").unwrap();
        assert_eq!((d.hidden, d.layers, d.heads, d.kv_heads, d.head_dim, d.intermediate), (5376, 1, 32, 16, 256, 21504));
        assert_eq!((d.vocab, d.draft_vocab), (262_144, Some(32_000)));
        assert!(parse_head_config(b"[1]", "x", "config.json").is_err());
    }

    #[test]
    fn capture_sizes_round_to_the_decode_query() {
        // k = 3: multiples of 4 up to the largest size.
        assert_eq!(round_capture_sizes(&[1, 2, 4, 8, 16], 3), vec![4, 8, 16]);
        // Rounding past the ceiling drops a size: 512 stays, 510 → 512 merges.
        assert_eq!(round_capture_sizes(&[500, 510, 512], 1), vec![500, 510, 512]);
        assert_eq!(round_capture_sizes(&[1, 2, 3], 2), vec![3]);
        assert_eq!(round_capture_sizes(&[1, 2], 3), Vec::<u64>::new());
    }
}
