//! Serving capacity as SGLang itself sizes it at start-up (`python -m sglang.launch_server`,
//! `sglang serve`), per GPU, following the rules of SGLang [`SGLANG_VERSION`] (read from the
//! released wheel's source).
//!
//! ```text
//! mem_fraction_static = round((gpu_mem − reserved) / gpu_mem, 3)   (default; arg_groups/memory_hook.py)
//! pre                 = free memory before weights load            (distributed/bootstrap.py)
//! rest                = (pre − weights) − pre × (1 − mem_fraction_static)
//!                                                  (mem_cache/kv_cache_configurator.py _profile_available_bytes)
//! max_total_num_tokens = rest // cell_size // page_size × page_size
//!                                                  (model_executor/pool_configurator.py DefaultPoolConfigurator)
//! ```
//!
//! Everything else SGLang allocates (activations, CUDA graphs, the req_to_token table) lives in
//! the `pre × (1 − mem_fraction_static)` it leaves free.
//!
//! Hybrid models (Gated DeltaNet: Qwen3-Next, Qwen3.5; Mamba-2: Nemotron-H, Falcon-H1,
//! Granite-4.0-H) first take a recurrent-state pool out of `rest`, then size the token pool over
//! their full-attention layers only:
//!
//! ```text
//! per_req              = mixer layers × (conv_dim/tp × (kernel−1) × 2 + heads/tp × head_dim × state × ssm bytes)
//!                                                  (configs/mamba_utils.py mamba_cache_per_req; conv state bf16)
//! max_mamba_cache_size = ⌊(rest × r/(1+r) − per_req) / per_req⌋, r = --mamba-full-memory-ratio 0.9
//!                                                  (mem_cache/kv_cache_configurator.py _handle_max_mamba_cache)
//! rest                −= (max_mamba_cache_size + 1) × per_req      (a padding slot: memory_pool.py MambaPool)
//! max_running_requests = min(…, max_mamba_cache_size // slots), slots = 5 (extra_buffer + overlap, the
//!                        default), 4, 3 (no_buffer) or 1 (no radix cache)   (_calculate_mamba_ratio)
//! ```

use serde::Serialize;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::serve::{auto_dtype, split_rank_weights, Quantization, Split};

/// The SGLang release whose rules are modelled.
pub const SGLANG_VERSION: &str = "0.5.23";

const MIB: u64 = 1 << 20;
/// SGLang's context length for a config that names none (hf_transformers_utils.py
/// `get_context_length`: `return 2048`).
const SGLANG_DEFAULT_CONTEXT: u64 = 2048;
const GIB: u64 = 1 << 30;
/// `--max-prefill-tokens` default (arg_groups/fields/schedule.py `max_prefill_tokens`).
pub const MAX_PREFILL_TOKENS: u64 = 16_384;
/// `--mamba-full-memory-ratio` default: the state pool over the token pool
/// (arg_groups/fields/schedule.py, `mamba_full_memory_ratio` None → 0.9).
pub const MAMBA_FULL_MEMORY_RATIO: f64 = 0.9;
/// The multimodal embedding cache a vision-language model's budget gives up
/// (environ.py `SGLANG_VLM_CACHE_SIZE_MB` = 100; kv_cache_configurator.py mm_runtime_reservation_gb).
const VLM_CACHE_SIZE: u64 = 100 * MIB;
/// req_to_token row headroom beyond the context length without speculative decoding
/// (mem_cache/allocation_sizing.py `get_req_to_token_extra_context_len`: 4 + draft tokens).
const REQ_TO_TOKEN_EXTRA: u64 = 4;

/// Raw settings of an SGLang launch, in SGLang's terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangConfig {
    /// Total memory of one GPU as CUDA reports it, bytes.
    pub gpu_memory: u64,
    /// What nvidia-smi reports as total, MiB: SGLang's defaults are chosen from it
    /// (utils/common.py `get_nvgpu_memory_capacity`).
    pub gpu_memory_smi_mib: u64,
    /// `--tp-size` / `--tp`.
    pub tp: u64,
    /// `--attn-dp-size` (or 0.5.23's deprecated `--dp-size N --enable-dp-attention`): attention
    /// data-parallel groups within the TP group; 1 = none.
    pub attn_dp_size: u64,
    /// `--enable-dp-lm-head`: the LM head split over the attention-TP group, not all of TP.
    pub dp_lm_head: bool,
    /// `--ep-size` (`--ep`): expert parallelism; 1 = none, else it must equal `--tp-size`.
    pub ep_size: u64,
    /// `--dtype`; `None` = auto.
    pub dtype: Option<DType>,
    /// `--quantization` (or the checkpoint's).
    pub quantization: Quantization,
    /// `--kv-cache-dtype`; `None` = auto (the model dtype).
    pub kv_cache_dtype: Option<DType>,
    /// The torch name of an fp8 KV dtype (`float8_e4m3fn`, `float8_e5m2`), for the log line.
    pub kv_cache_dtype_name: Option<String>,
    /// `--context-length`; `None` = the model's.
    pub context_length: Option<u64>,
    /// `--mem-fraction-static`; `None` = SGLang's default for the GPU.
    pub mem_fraction_static: Option<f64>,
    /// `--max-running-requests`.
    pub max_running_requests: Option<u64>,
    /// `--chunked-prefill-size`; `None` = the default for the GPU, ≤ 0 = disabled.
    pub chunked_prefill_size: Option<i64>,
    /// `--cuda-graph-max-bs` (decode); `None` = the default for the GPU.
    pub cuda_graph_max_bs: Option<u64>,
    /// `--disable-cuda-graph`.
    pub disable_cuda_graph: bool,
    /// `--max-total-tokens`: an upper bound on the token pool.
    pub max_total_tokens: Option<u64>,
    /// `--page-size` (default 1 on CUDA: arg_groups/overrides.py `_page_size_default`).
    pub page_size: u64,
    /// Memory taken before the weights load: the CUDA context.
    pub cuda_context: u64,
    /// Memory taken before the weights load at TP ≥ 2: NCCL and custom all-reduce buffers.
    pub distributed: u64,
    /// `--max-mamba-cache-size`: state slots of a hybrid model; `None` = from the memory ratio.
    pub max_mamba_cache_size: Option<u64>,
    /// `--mamba-ssm-dtype`; `None` = the config's `mamba_ssm_dtype` (Qwen3.5), else float32.
    pub mamba_ssm_dtype: Option<DType>,
    /// `--mamba-full-memory-ratio`: state pool ÷ token pool; `None` = 0.9.
    pub mamba_full_memory_ratio: Option<f64>,
    /// `--mamba-radix-cache-strategy`; `None` = auto.
    pub mamba_strategy: Option<MambaStrategy>,
    /// `--disable-radix-cache`.
    pub disable_radix_cache: bool,
    /// `--disable-overlap-schedule`.
    pub disable_overlap_schedule: bool,
    /// `--language-only`: a vision-language checkpoint's language model alone.
    pub language_only: bool,
    /// `--enable-lora` (or `--lora-paths`): the adapter memory pool; `None` without LoRA.
    pub lora: Option<SglangLora>,
    /// `--speculative-algorithm` and its settings; `None` without speculative decoding.
    pub speculative: Option<SglangSpec>,
}

/// SGLang's speculative decoding of the EAGLE family (arg_groups/speculative_hook.py
/// `_handle_eagle_family`, 0.5.23): `NEXTN` is an alias of `EAGLE`, whose drafter is the
/// checkpoint's own MTP layers when no draft path is given for the DeepSeek/GLM family.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangSpec {
    /// The drafter, as vram names it: `Mtp` (the target's MTP layers), `Eagle` (an EAGLE head)
    /// or `Eagle3`.
    pub method: crate::serve_spec::SpecMethod,
    /// `--speculative-num-steps`; `None` = SGLang's choice for the architecture.
    pub num_steps: Option<u64>,
    /// `--speculative-eagle-topk`; `None` = SGLang's choice.
    pub eagle_topk: Option<u64>,
    /// `--speculative-num-draft-tokens`; `None` = SGLang's choice (steps + 1 at top-k 1).
    pub num_draft_tokens: Option<u64>,
    /// The EAGLE head's config (`--speculative-draft-model-path`); `None` for MTP.
    pub draft: Option<Box<Model>>,
}

impl SglangSpec {
    /// (steps, top-k, draft tokens) as SGLang resolves them (`_handle_eagle_family`):
    /// `_auto_choose_speculative_params` when no steps are given ((5, 4, 8) for Llama, else
    /// (3, 1, 4)), which SGLang asserts leaves top-k and draft tokens unset too; given steps need a
    /// top-k (SGLang compares it with numbers), and above top-k 1 the draft tokens; at top-k 1 the
    /// draft tokens are steps + 1.
    pub fn resolved(&self, m: &Model) -> Result<(u64, u64, u64)> {
        let flags = "--speculative-num-steps / --speculative-eagle-topk / --speculative-num-draft-tokens";
        let (steps, topk, tokens) = match (self.num_steps, self.eagle_topk, self.num_draft_tokens) {
            (None, None, None) if m.model_type == "llama" => (5, 4, 8),
            (None, None, None) => (3, 1, 4),
            (None, _, _) => {
                return Err(invalid(flags, "top-k or draft tokens without steps", "all three, or none for SGLang's choice (it asserts so)"))
            }
            (Some(_), None, _) => {
                return Err(invalid(flags, "steps without a top-k", "a top-k with the steps (SGLang compares it with numbers)"))
            }
            (Some(s), Some(1), _) => (s, 1, s + 1),
            (Some(_), Some(_), None) => return Err(invalid(flags, "top-k above 1 without draft tokens", "the draft tokens too")),
            (Some(s), Some(k), Some(t)) => (s, k, t),
        };
        Ok((steps, topk, tokens))
    }
}

/// SGLang's LoRA memory pool (`lora/mem_pool.py` `LoRAMemoryPool.init_buffers`): for each
/// target module and layer, an A and a B buffer of `--max-loras-per-batch` slots at
/// `--max-lora-rank`, in the model's dtype, allocated after the weights load and before the KV
/// cache is sized (`model_runner.py` `initialize` → `maybe_init_lora_manager`), so it comes out
/// of the token pool's budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangLora {
    /// `--max-loras-per-batch` (0.5.23 default 8).
    pub max_loras_per_batch: u64,
    /// `--max-lora-rank`, or the largest `r` of the `--lora-paths` adapters.
    pub max_lora_rank: u64,
    /// SGLang's normalised target modules (`qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`).
    pub target_modules: Vec<String>,
}

/// `--max-loras-per-batch`'s default (arg_groups/fields/lora.py).
pub const MAX_LORAS_PER_BATCH: u64 = 8;
/// The modules SGLang's pool allocates for a dense decoder, in its names: what `all` (on the
/// command line, or `all-linear` in an adapter's config) resolves to — lora/utils.py
/// `auto_detect_lora_target_modules` finds the linear layers, the LM head and the embeddings.
pub const LORA_ALL_MODULES: [&str; 6] = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head"];

/// SGLang's names for PEFT target modules (lora/utils.py `get_normalized_target_modules`):
/// `q_proj`/`k_proj`/`v_proj` → `qkv_proj`, `gate_proj`/`up_proj` → `gate_up_proj`, a prefixed
/// name by its last part, `all`/`all-linear` → [`LORA_ALL_MODULES`]; modules a dense decoder
/// lacks are refused.
pub fn normalize_lora_targets(names: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for raw in names {
        let leaf = raw.rsplit('.').next().unwrap_or(raw);
        let mapped: &[&str] = match leaf {
            "all" | "all-linear" => &LORA_ALL_MODULES,
            "q_proj" | "k_proj" | "v_proj" | "qkv_proj" => &["qkv_proj"],
            "gate_proj" | "up_proj" | "gate_up_proj" => &["gate_up_proj"],
            "o_proj" => &["o_proj"],
            "down_proj" => &["down_proj"],
            "embed_tokens" | "vocab_emb" | "embeddings" | "word_embeddings" => &["embed_tokens"],
            "lm_head" | "output" | "unembed_tokens" => &["lm_head"],
            _ => {
                return Err(invalid(
                    "--lora-target-modules",
                    raw,
                    "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, embed_tokens, lm_head (or all)",
                ))
            }
        };
        for m in mapped {
            if !out.iter().any(|o| o == m) {
                out.push(m.to_string());
            }
        }
    }
    if out.is_empty() {
        return Err(invalid("--lora-target-modules", "(none)", "at least one module"));
    }
    Ok(out)
}

/// Bytes of SGLang's LoRA pool on one TP rank (`LoRAMemoryPool.get_lora_A_shape` /
/// `get_lora_B_shape` with lora/utils.py `get_default_hidden_dim` and `get_stacked_multiply`):
/// per layer and slot, A is [rank × stacked, input] and B [output, rank], the input of the
/// row-parallel `o_proj`/`down_proj` and the output of the others split over TP (`qkv_proj`
/// keeping a whole head of K and V per rank when TP exceeds the KV heads). The embeddings' pair
/// is one buffer each, unsharded ([rank, vocab] and [hidden, rank]); the LM head's B holds this
/// rank's share of the vocabulary (`get_lm_head_lora_b_shard_size`: the base layer's
/// `num_org_elements`, the first rank's here). Tokens an adapter adds to the vocabulary are not
/// counted.
pub fn lora_pool_bytes(m: &Model, l: &SglangLora, tp: u64, dtype_bytes: u64) -> Result<u64> {
    let (h, r, tp) = (m.hidden as u128, l.max_lora_rank as u128, tp.max(1) as u128);
    let hd = m.head_dim as u128;
    let q = m.heads as u128 * hd;
    let kv = m.kv_heads as u128 * hd;
    let inter = m.intermediate as u128;
    let vocab = m.vocab as u128;
    // VocabParallelEmbedding pads the vocabulary and gives each rank an equal part.
    let pad = crate::serve::VOCAB_PAD as u128;
    let shard = vocab.div_ceil(pad) * pad / tp;
    // (elements in every layer, elements once) of each module's A and B.
    let (mut per_layer, mut once) = (0u128, 0u128);
    for t in &l.target_modules {
        match t.as_str() {
            "qkv_proj" => {
                let out = if (m.kv_heads as u128) >= tp { (q + 2 * kv) / tp } else { q / tp + 2 * hd };
                per_layer += 3 * r * h + out * r;
            }
            "o_proj" => per_layer += r * (q / tp) + h * r,
            "gate_up_proj" => per_layer += 2 * r * h + (2 * inter / tp) * r,
            "down_proj" => per_layer += r * (inter / tp) + h * r,
            "embed_tokens" => once += r * vocab + h * r,
            "lm_head" => once += r * h + shard.min(vocab) * r,
            other => return Err(invalid("--lora-target-modules", other, "one of SGLang's normalised modules (normalize_lora_targets)")),
        }
    }
    let total = per_layer
        .checked_mul(m.layers as u128)
        .and_then(|x| x.checked_add(once))
        .and_then(|x| x.checked_mul(l.max_loras_per_batch as u128))
        .and_then(|x| x.checked_mul(dtype_bytes as u128))
        .ok_or_else(|| overflow("LoRA pool"))?;
    u64::try_from(total).map_err(|_| overflow("LoRA pool"))
}

/// SGLang's `--mamba-radix-cache-strategy`: how a hybrid model's states are kept for the radix
/// (prefix) cache, which sets the state slots a running request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MambaStrategy {
    /// One state per request, overlap scheduling off.
    NoBuffer,
    /// Extra tracking slots per request (two with overlap scheduling, one without).
    ExtraBuffer,
    /// One extra tracking slot, allocated lazily.
    ExtraBufferLazy,
}

impl MambaStrategy {
    /// The flag's value (`no_buffer`, `extra_buffer`, `extra_buffer_lazy`; `auto` is `None`).
    pub fn parse(s: &str) -> Option<Option<MambaStrategy>> {
        match s {
            "auto" => Some(None),
            "no_buffer" => Some(Some(MambaStrategy::NoBuffer)),
            "extra_buffer" => Some(Some(MambaStrategy::ExtraBuffer)),
            "extra_buffer_lazy" => Some(Some(MambaStrategy::ExtraBufferLazy)),
            _ => None,
        }
    }

    /// As SGLang names it.
    pub fn name(self) -> &'static str {
        match self {
            MambaStrategy::NoBuffer => "no_buffer",
            MambaStrategy::ExtraBuffer => "extra_buffer",
            MambaStrategy::ExtraBufferLazy => "extra_buffer_lazy",
        }
    }
}

/// A hybrid model's recurrent-state pool on one rank, as SGLang sizes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangStatePool {
    /// Which mixer keeps the states.
    pub mixer: crate::serve_ssm::Mixer,
    /// Layers with a state (mixers).
    pub state_layers: u64,
    /// Layers with a KV cache (full attention): the token pool's cell counts only these.
    pub attention_layers: u64,
    /// One layer's conv state for one request (bf16).
    pub conv_bytes: u64,
    /// One layer's SSM / delta-rule state for one request.
    pub ssm_bytes: u64,
    /// The SSM state's dtype.
    pub ssm_dtype: DType,
    /// All mixer layers' states of one request.
    pub per_request_bytes: u64,
    /// `max_mamba_cache_size`: state slots.
    pub max_mamba_cache_size: u64,
    /// The pool as allocated: (slots + 1) × per request.
    pub pool_bytes: u64,
    /// `--mamba-full-memory-ratio` applied (0 when the slots were given).
    pub memory_ratio: f64,
    /// The radix-cache strategy in force (`None`: the radix cache is off).
    pub strategy: Option<MambaStrategy>,
    /// State slots a running request may take (`_calculate_mamba_ratio`).
    pub slots_per_request: u64,
    /// Whether the state slots, not the token pool, set `max_running_requests`.
    pub caps_requests: bool,
}

impl SglangConfig {
    /// SGLang's defaults on one GPU whose CUDA total is `gpu_memory` bytes and whose nvidia-smi
    /// total is `gpu_memory_smi_mib` MiB, with the engines' assumed CUDA context.
    pub fn new(gpu_memory: u64, gpu_memory_smi_mib: u64) -> SglangConfig {
        SglangConfig {
            gpu_memory,
            gpu_memory_smi_mib,
            tp: 1,
            attn_dp_size: 1,
            dp_lm_head: false,
            ep_size: 1,
            dtype: None,
            quantization: Quantization::None,
            kv_cache_dtype: None,
            kv_cache_dtype_name: None,
            context_length: None,
            mem_fraction_static: None,
            max_running_requests: None,
            chunked_prefill_size: None,
            cuda_graph_max_bs: None,
            disable_cuda_graph: false,
            max_total_tokens: None,
            page_size: 1,
            cuda_context: crate::serve::ENGINE_CUDA_CONTEXT,
            distributed: 0,
            max_mamba_cache_size: None,
            mamba_ssm_dtype: None,
            mamba_full_memory_ratio: None,
            mamba_strategy: None,
            disable_radix_cache: false,
            disable_overlap_schedule: false,
            language_only: false,
            lora: None,
            speculative: None,
        }
    }
}

/// SGLang's sizing of one GPU (every TP rank is the same).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangReport {
    /// The SGLang release whose rules were applied.
    pub sglang_version: String,
    /// Model dtype served.
    pub dtype: DType,
    /// Bytes per KV element.
    pub kv_dtype_bytes: u64,
    /// TP ranks.
    pub tp: u64,
    /// Attention data-parallel groups (1 = none): each holds its own token pool and requests.
    pub attn_dp_size: u64,
    /// `context_len`.
    pub context_len: u64,
    /// `mem_fraction_static` used.
    pub mem_fraction_static: f64,
    /// Whether it is SGLang's default (from the GPU size) rather than given.
    pub mem_fraction_static_default: bool,
    /// SGLang's reserve estimate behind the default, MiB (0 when given).
    pub reserved_mib: f64,
    /// `chunked_prefill_size` (≤ 0 = disabled).
    pub chunked_prefill_size: i64,
    /// Decode CUDA-graph max batch size (0 with graphs disabled).
    pub cuda_graph_max_bs: u64,
    /// Prefill CUDA-graph token buckets captured (0 with graphs disabled).
    pub prefill_graph_buckets: u64,
    /// `max_prefill_tokens`.
    pub max_prefill_tokens: u64,
    /// `page_size`.
    pub page_size: u64,
    /// Weights on one rank, incl. quantisation scales ("Load weight end … mem usage").
    pub weights_bytes: u64,
    /// Of which: quantisation scales and zero points.
    pub quant_scales_bytes: u64,
    /// Free memory before the weights load (`pre_model_load_memory`).
    pub pre_load_bytes: u64,
    /// Free memory after the weights load ("Load weight end … avail mem").
    pub after_weights_bytes: u64,
    /// `pre × (1 − mem_fraction_static)`: what SGLang leaves free for everything else.
    pub slack_bytes: u64,
    /// `rest_memory`: the KV budget (0 when negative).
    pub rest_bytes: u64,
    /// Bytes by which the weights exceed the static budget (0 when they fit).
    pub shortfall_bytes: u64,
    /// The smallest `--mem-fraction-static` SGLang would accept, as its error message computes it.
    pub min_mem_fraction_static: f64,
    /// KV bytes per token on one rank (cell size).
    pub cell_bytes: u64,
    /// `max_total_num_tokens`.
    pub max_total_num_tokens: u64,
    /// The KV pool as allocated: (tokens + page_size) × cell size ("K size" + "V size").
    pub kv_pool_bytes: u64,
    /// `max_running_requests`.
    pub max_running_requests: u64,
    /// The req_to_token table: (requests + 1) × (context_len + 4) int32.
    pub req_to_token_bytes: u64,
    /// What remains of the slack after the req_to_token table: for activations and CUDA graphs.
    pub headroom_bytes: u64,
    /// Requests at the full context length the pool holds at once.
    pub full_context_requests: u64,
    /// Whether the weights fit and the pool holds one full-context request.
    pub fits: bool,
    /// CUDA context per process.
    pub cuda_context_bytes: u64,
    /// Distributed buffers per process (TP ≥ 2).
    pub distributed_bytes: u64,
    /// A hybrid model's recurrent-state pool.
    pub state: Option<SglangStatePool>,
    /// A vision-language model: the multimodal reservation taken from the budget
    /// (`SGLANG_VLM_CACHE_SIZE_MB`, 100 MB), bytes.
    pub mm_reserve_bytes: u64,
    /// The LoRA adapters' memory pool (`--enable-lora`), taken from the budget; 0 without.
    pub lora_pool_bytes: u64,
    /// Of the weights, the speculative drafter's (0 without).
    pub draft_weights_bytes: u64,
    /// Of the cell size, the drafter's layers (0 without).
    pub draft_cell_bytes: u64,
    /// The lines SGLang prints about this, reproduced.
    pub log: Vec<String>,
    /// Stated assumptions and warnings.
    pub notes: Vec<String>,
}

/// The drafter of `sp` on one rank and SGLang's resolved (steps, top-k, draft tokens).
fn speculative_drafter(
    m: &Model,
    cfg: &SglangConfig,
    sp: &SglangSpec,
    split: crate::serve::Split,
    e: u128,
    kv_b: u64,
    unmodelled: bool,
) -> Result<(crate::serve_spec::Drafter, (u64, u64, u64))> {
    use crate::serve_spec::SpecMethod;
    if unmodelled || cfg.lora.is_some() {
        return Err(invalid(
            "--speculative-algorithm",
            sp.method.name(),
            "SGLang's speculative decoding is modelled for attention-only language models without attention DP or LoRA",
        ));
    }
    match (sp.method, &sp.draft) {
        (SpecMethod::Mtp, _) if m.mtp_layers == 0 => {
            return Err(invalid(
                "--speculative-algorithm",
                "NEXTN",
                &format!("{} has no MTP layers (num_nextn_predict_layers): give an EAGLE head with --speculative-draft-model-path", m.name),
            ))
        }
        (SpecMethod::Eagle | SpecMethod::Eagle3, None) => {
            return Err(invalid("--speculative-draft-model-path", "missing", "EAGLE and EAGLE3 need the draft head's checkpoint"))
        }
        (SpecMethod::Mtp | SpecMethod::Eagle | SpecMethod::Eagle3, _) => {}
        (other, _) => return Err(invalid("--speculative-algorithm", other.name(), "EAGLE, EAGLE3 or NEXTN (SGLang's EAGLE family)")),
    }
    let (steps, topk, tokens) = sp.resolved(m)?;
    if steps == 0 || topk == 0 || tokens == 0 || steps > 64 || topk > 64 || tokens > 1024 {
        return Err(invalid(
            "--speculative-num-steps / --speculative-eagle-topk / --speculative-num-draft-tokens",
            format!("{steps} / {topk} / {tokens}"),
            "each at least 1 (steps and top-k at most 64, draft tokens at most 1024)",
        ));
    }
    let generic = crate::serve_spec::Speculative { method: sp.method, num_speculative_tokens: steps, draft: sp.draft.clone() };
    let mut d = crate::serve::drafter_weights(m, cfg.quantization, None, &generic, split, e, kv_b)?;
    // SGLang sizes the KV cache with the draft model as built, before it hands the draft the
    // target's embedding and LM head (managers/scheduler.py `init_memory_pools`: the target pool,
    // then the draft's `alloc_memory_pool` → eagle_worker_v2.py `init_lm_head`); the draft's own
    // VocabParallelEmbedding — and an EAGLE-1 head's or an MTP module's ParallelLMHead — are
    // allocated at construction, so they count. (Two public SGLang logs of mid-2025 show the same
    // composition at the draft's "Load weight end": an EAGLE-3 head at 1.77 GiB and MiMo's MTP at
    // 2.71 GiB; validation/sglang/spec_logs.jsonl.)
    let (vocab, h) = (m.vocab.div_ceil(crate::serve::VOCAB_PAD) * crate::serve::VOCAB_PAD, m.hidden);
    let tables: u128 = if sp.method == SpecMethod::Eagle3 { 1 } else { 2 };
    let own = tables * (vocab / cfg.tp.max(1)) as u128 * h as u128 * e;
    d.weights += own;
    d.what = format!(
        "{}; SGLang sizes the pool before sharing them, so the draft's own embedding{} count ({:.2} GiB)",
        d.what,
        if tables == 2 { " and LM head" } else { "" },
        own as f64 / GIB as f64
    );
    Ok((d, (steps, topk, tokens)))
}

fn invalid(what: &str, value: impl ToString, hint: &str) -> Error {
    Error::InvalidValue { what: what.into(), value: value.to_string(), hint: hint.into() }
}

fn overflow(what: &str) -> Error {
    Error::Overflow { what: what.into() }
}

/// Defaults SGLang picks from the GPU's nvidia-smi size (MiB) and TP: chunked_prefill_size and
/// the decode CUDA-graph max batch size (arg_groups/memory_hook.py `handle_gpu_memory_settings`).
pub fn gpu_defaults(gpu_mib: u64, tp: u64) -> (i64, u64) {
    let small_tp = tp < 4;
    match gpu_mib {
        m if m < 20 * 1024 => (2048, 8),
        m if m < 35 * 1024 => (4096, if small_tp { 48 } else { 160 }),
        m if m < 60 * 1024 => (4096, if small_tp { 32 } else { 160 }),
        m if m < 160 * 1024 => (8192, if small_tp { 256 } else { 512 }),
        _ => (16384, 512),
    }
}

/// Prefill CUDA-graph token buckets up to `max_bs` (arg_groups/cuda_graph_hook.py
/// `generate_prefill_cuda_graph_batch_sizes`).
pub fn prefill_buckets(max_bs: i64) -> u64 {
    let steps: [(i64, i64, i64); 5] = [(4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256)];
    let mut n = 0u64;
    for (lo, hi, step) in steps {
        n += (lo..=hi).step_by(step as usize).filter(|&s| s <= max_bs).count() as u64;
    }
    if max_bs >= 4608 {
        n += ((max_bs - 4608) / 512 + 1) as u64;
    }
    n
}

/// The default `mem_fraction_static` and the reserve behind it, MiB
/// (arg_groups/memory_hook.py `handle_gpu_memory_settings`, `reserve_for_graph_mb`).
#[allow(clippy::too_many_arguments)]
pub fn default_mem_fraction(
    gpu_mib: u64,
    tp: u64,
    cps: i64,
    decode_max_bs: u64,
    prefill_buckets: u64,
    mla: bool,
    graphs: bool,
    attn_dp: u64,
) -> (f64, f64) {
    let tokens = if cps > 0 { cps as f64 } else { MAX_PREFILL_TOKENS as f64 }.max(2048.0);
    // Constant metadata, activations ∝ prefill tokens, parallel slack (pp = 1).
    let mut reserved = 512.0 + tokens * 1.5 + tp as f64 / 8.0 * 1024.0;
    if graphs {
        // Decode graphs: 2 MiB per batch size of the largest; prefill graphs: 8 MiB a bucket, or
        // 1.5 GiB flat on an MLA backend.
        reserved += decode_max_bs as f64 * 2.0;
        reserved += if mla { 1.5 * 1024.0 } else { prefill_buckets as f64 * 8.0 };
    }
    if attn_dp > 1 {
        // Attention DP pads more (reserve_for_graph_mb): 3 MiB per decode batch size and DP
        // group, 1.5 more above 300.
        reserved += decode_max_bs as f64 * attn_dp as f64 * 3.0;
        if decode_max_bs > 300 {
            reserved += decode_max_bs as f64 * attn_dp as f64 * 1.5;
        }
    }
    if gpu_mib > 60 * 1024 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    let g = gpu_mib as f64;
    (((g - reserved) / g * 1000.0).round() / 1000.0, reserved)
}

/// `max_running_requests` from the token pool (mem_cache/kv_cache_configurator.py
/// `resolve_max_num_reqs`): an estimate of pool / context × 512 clamped to 2048..4096, or the
/// request, at most half the pool.
pub fn max_running_requests(tokens: u64, context_len: u64, requested: Option<u64>) -> u64 {
    let half = tokens / 2;
    match requested {
        Some(r) => r.max(1).min(half),
        None => {
            let estimated = (tokens as f64 / context_len.max(1) as f64 * 512.0) as u64;
            estimated.clamp(2048, 4096).min(half)
        }
    }
}

/// KV bytes per token on one TP rank (model_executor/pool_configurator.py
/// `DefaultPoolConfigurator._compute_cell_size`): KV heads on the rank (`max(1, heads // tp)`,
/// configs/model_config.py `get_num_kv_heads`) × (head_dim + v_head_dim) × layers × element size;
/// MLA: (kv_lora_rank + qk_rope_head_dim) × layers × element size, not split over TP.
/// A hybrid model counts its full-attention layers only (pool_configurator.py:
/// `full_attention_layer_ids`), so `layers` is given.
pub fn cell_bytes(m: &Model, tp: u64, elem: u64, layers: u64) -> Result<u64> {
    let per_layer = match m.attention.mla {
        Some(mla) => mla.kv_lora_rank.checked_add(mla.qk_rope_head_dim),
        None => (m.kv_heads / tp.max(1)).max(1).checked_mul(m.head_dim.checked_mul(2).ok_or_else(|| overflow("cell size"))?),
    };
    per_layer.and_then(|x| x.checked_mul(layers)).and_then(|x| x.checked_mul(elem)).ok_or_else(|| overflow("KV cell size"))
}

/// One rank's recurrent-state shape of a hybrid model SGLang serves with a state pool
/// (configs/hybrid_arch.py `mambaish_config`; shapes from configs/mamba_utils.py
/// `Mamba2StateShape.create`, which also serves Gated DeltaNet: intermediate = Hv·dv, groups =
/// Hk, heads = Hv, head_dim = dv, state = dk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HybridShape {
    /// The mixer kind.
    pub mixer: crate::serve_ssm::Mixer,
    /// Full-attention layers: the token pool's cell counts these only.
    pub attention_layers: u64,
    /// Layers holding a recurrent state.
    pub state_layers: u64,
    /// One layer's conv window for one request on one rank, bytes.
    pub conv_bytes: u64,
    /// One layer's SSM (or delta-rule) state for one request on one rank, bytes.
    pub ssm_bytes: u64,
    /// The SSM state's dtype.
    pub ssm_dtype: DType,
}

/// See [`HybridShape`]; refuses the hybrids SGLang's pool is not modelled for.
pub fn hybrid_shape(m: &Model, cfg: &SglangConfig) -> Result<HybridShape> {
    use crate::serve_ssm::Mixer;
    let s = m.ssm.as_ref().ok_or_else(|| overflow("state"))?;
    let t = m.model_type.as_str();
    let refuse = |why: &str| invalid("model", t, &format!("{t}: {why}; `vram serve` (the vLLM engine) gives its serving"));
    let gdn = matches!(t, "qwen3_next" | "qwen3_5_text" | "qwen3_5_moe_text" | "qwen3_5" | "qwen3_5_moe");
    if !gdn && !matches!(t, "nemotron_h" | "falcon_h1" | "granitemoehybrid") {
        return Err(refuse(&format!(
            "SGLang {SGLANG_VERSION}'s hybrid state pool is modelled for Qwen3-Next, Qwen3.5, Nemotron-H, Falcon-H1 and Granite-4.0-H (Jamba has no SGLang model in that release; pure Mamba models, Bamba and the Zambas are not modelled)"
        )));
    }
    let (attention_layers, state_layers) = if s.parallel_attention {
        (m.layers, m.layers)
    } else {
        (s.attention_layers, m.layers.saturating_sub(s.attention_layers + s.mlp_layers))
    };
    if attention_layers == 0 || state_layers == 0 {
        return Err(refuse("SGLang's hybrid pools need both mixer and full-attention layers"));
    }
    let tp = cfg.tp.max(1);
    // (intermediate, groups, heads, head_dim, state) as the shape calculator takes them.
    let (mixer, inter, groups, heads, head_dim, state) = match (s.delta_net, s.mamba2) {
        (Some(dn), _) => (Mixer::GatedDeltaNet, dn.value_heads * dn.value_dim, dn.key_heads, dn.value_heads, dn.value_dim, dn.key_dim),
        (None, Some(m2)) => (Mixer::Mamba2, s.d_inner, m2.groups, m2.heads, m2.head_dim, s.d_state),
        _ => return Err(refuse("a Mamba-1 mixer")),
    };
    // extra_groups_for_head_shards: groups not divisible by TP are replicated up to it.
    let groups = if groups % tp != 0 { tp } else { groups };
    let conv_dim = groups.checked_mul(2 * state).and_then(|g| g.checked_add(inter)).ok_or_else(|| overflow("conv channels"))?;
    let divide = |x: u64, what: &str| -> Result<u64> {
        if x % tp == 0 {
            Ok(x / tp)
        } else {
            Err(invalid(
                "--tp-size",
                tp,
                &format!("SGLang divides the {what} ({x}) of {} over the TP ranks and needs it divisible", m.name),
            ))
        }
    };
    let conv =
        divide(conv_dim, "mixer conv channels")?.checked_mul(s.d_conv.saturating_sub(1) * 2).ok_or_else(|| overflow("conv state"))?;
    // The SSM state: --mamba-ssm-dtype, else the config's `mamba_ssm_dtype` for the model
    // classes that pass it (Qwen3-Next/Qwen3.5), else float32 (mamba_utils.py).
    let ssm_dtype = cfg.mamba_ssm_dtype.or(if gdn { s.cache_state_dtype } else { None }).unwrap_or(DType::F32);
    let ssm = divide(heads, "mixer heads")?
        .checked_mul(head_dim)
        .and_then(|x| x.checked_mul(state))
        .and_then(|x| x.checked_mul(ssm_dtype.bytes()))
        .ok_or_else(|| overflow("SSM state"))?;
    Ok(HybridShape { mixer, attention_layers, state_layers, conv_bytes: conv, ssm_bytes: ssm, ssm_dtype })
}

/// SGLang's default `mem_fraction_static` for a vision-language model: the text default times
/// 0.95 · f, f = clamp(1 − 0.1 · (L·h² / (24·1024²) − 1), 0.8, 1.05) from the tower's layers L
/// and width h (arg_groups/memory_hook.py `adjust_mem_fraction_for_vlm`). L is read as the
/// vision config's `num_hidden_layers`, which SGLang's Qwen3-VL vision config (Qwen3.5's) does
/// not have: 24.
pub fn vlm_fraction_factor(tower_hidden: u64) -> f64 {
    let h = tower_hidden as f64;
    let ratio = 24.0 * h * h / (24.0 * 1024.0 * 1024.0);
    0.95 * (1.0 - 0.1 * (ratio - 1.0)).clamp(0.8, 1.05)
}

/// The smallest `--mem-fraction-static` that leaves a KV budget, from the free memory before
/// (`pre`) and after (`after`) the weights load: `1 − after / pre`, as SGLang's refusal states it
/// (mem_cache/kv_cache_configurator.py `_profile_available_bytes`; it prints this rounded up to 3
/// decimals and unrounded to 4).
pub fn min_mem_fraction(pre: u64, after: u64) -> f64 {
    if pre == 0 {
        1.0
    } else {
        1.0 - after as f64 / pre as f64
    }
}

/// Reproduce SGLang's start-up sizing of `model` under `cfg`.
pub fn sglang(m: &Model, cfg: &SglangConfig) -> Result<SglangReport> {
    // SGLang builds the checkpoint's architecture: a Qwen3.5 config read as its language model
    // (for training) is served as Qwen3_5ForConditionalGeneration, tower included, unless
    // --language-only (`Model::as_served`).
    let served;
    let m = if m.vision_unloaded.is_some() || (cfg.language_only && m.multimodal.is_some()) {
        served = m.as_served(cfg.language_only);
        &served
    } else {
        m
    };
    let vlm = m.multimodal.is_some();
    // Vision-language models are modelled where SGLang's hybrid path and VLM defaults were read:
    // Qwen3.5's (a Gated DeltaNet language model); the rest are refused by require_decoder.
    let gdn_vlm = vlm && m.ssm.as_ref().is_some_and(|s| s.delta_net.is_some());
    let hybrid = match &m.ssm {
        Some(_) if !vlm || gdn_vlm => Some(hybrid_shape(m, cfg)?),
        _ => {
            crate::memory::require_decoder(m, "serving with SGLang")?;
            None
        }
    };
    let tp = cfg.tp;
    if tp == 0 || tp > 1024 {
        return Err(invalid("--tp-size", tp, "between 1 and 1024"));
    }
    if m.heads % tp != 0 {
        return Err(invalid("--tp-size", tp, &format!("SGLang needs it to divide the {} attention heads of {}", m.heads, m.name)));
    }
    let attn_dp = cfg.attn_dp_size;
    if attn_dp == 0 || tp % attn_dp != 0 {
        return Err(invalid(
            "--attn-dp-size",
            attn_dp,
            &format!("a divisor of --tp-size {tp} (arg_groups/parallel_hook.py asserts tp_size % attn_dp_size == 0)"),
        ));
    }
    let attn_tp = tp / attn_dp;
    // Expert parallelism (arg_groups/parallel_hook.py: `ep_size * moe_dp_size == tp_size`, and
    // moe_dp_size is not modelled): each GPU holds num_experts / ep whole experts, the bytes a
    // TP slice of every expert holds when the experts divide.
    if cfg.ep_size > 1 {
        if cfg.ep_size != tp {
            return Err(invalid(
                "--ep-size",
                cfg.ep_size,
                &format!("equal to --tp-size {tp}: SGLang asserts ep_size * moe_dp_size == tp_size"),
            ));
        }
        let experts = m.moe.as_ref().map_or(0, |e| e.experts);
        if experts == 0 || experts % cfg.ep_size != 0 {
            return Err(invalid("--ep-size", cfg.ep_size, &format!("a divisor of {}'s {experts} routed experts (a MoE model)", m.name)));
        }
    }
    if cfg.dp_lm_head && attn_dp == 1 {
        return Err(invalid(
            "--enable-dp-lm-head",
            "given",
            "it needs attention DP (--attn-dp-size, or --dp-size with --enable-dp-attention), as SGLang asserts",
        ));
    }
    if attn_dp > 1 {
        // Read for the MoE model files (deepseek_v2.py, qwen2_moe.py/qwen3_moe.py, glm4_moe.py:
        // the embedding over the attention-TP group); dense model files differ (llama.py keeps
        // it over all of TP).
        // The model files read for it (the attention over `attn_tp_size`, the embedding over
        // the attention-TP group): others (mixtral.py keeps the attention over all of TP) are
        // not modelled.
        const READ: [&str; 7] = ["deepseek_v2", "deepseek_v3", "qwen2_moe", "qwen3_moe", "glm4_moe", "gpt_oss", "minimax_m2"];
        let why = if m.moe.is_none() {
            Some("a dense model: SGLang's dense model files split the embedding differently from one another")
        } else if !READ.contains(&m.model_type.as_str()) {
            Some("this model type: it is modelled for the SGLang model files read (deepseek_v2/v3, qwen2_moe, qwen3_moe, glm4_moe, gpt_oss, minimax_m2)")
        } else if m.ssm.is_some() || vlm {
            Some("a hybrid or vision-language model")
        } else if cfg.lora.is_some() {
            Some("with LoRA")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(invalid(
                "--attn-dp-size",
                attn_dp,
                &format!("attention DP is modelled for MoE language models, not {why}; drop it to see the rest"),
            ));
        }
        if m.kv_heads < attn_tp && attn_tp % m.kv_heads.max(1) != 0 && m.attention.mla.is_none() {
            return Err(invalid(
                "--attn-dp-size",
                attn_dp,
                &format!("the attention-TP group ({attn_tp}) must divide or be a multiple of the {} KV heads", m.kv_heads),
            ));
        }
    }
    if let Some(f) = cfg.mem_fraction_static {
        if !(f > 0.0 && f < 1.0) {
            return Err(invalid("--mem-fraction-static", f, "a fraction in (0, 1)"));
        }
    }
    if cfg.page_size == 0 || cfg.page_size > 4096 {
        return Err(invalid("--page-size", cfg.page_size, "between 1 and 4096 tokens"));
    }
    if cfg.max_running_requests == Some(0) {
        return Err(invalid("--max-running-requests", 0, "at least 1"));
    }
    if cfg.gpu_memory_smi_mib == 0 || cfg.gpu_memory == 0 {
        return Err(invalid("--gpu", 0, "a GPU with memory"));
    }
    if let Some(r) = cfg.mamba_full_memory_ratio {
        if !(r > 0.0 && r.is_finite() && r <= 1000.0) {
            return Err(invalid(
                "--mamba-full-memory-ratio",
                r,
                "a positive ratio of the state pool to the token pool (SGLang's default 0.9)",
            ));
        }
    }
    if cfg.max_mamba_cache_size == Some(0) {
        return Err(invalid("--max-mamba-cache-size", 0, "at least 1 state slot"));
    }
    if hybrid.is_none() {
        let given = [
            (cfg.max_mamba_cache_size.is_some(), "--max-mamba-cache-size"),
            (cfg.mamba_ssm_dtype.is_some(), "--mamba-ssm-dtype"),
            (cfg.mamba_full_memory_ratio.is_some(), "--mamba-full-memory-ratio"),
            (cfg.mamba_strategy.is_some(), "--mamba-radix-cache-strategy"),
        ];
        if let Some((_, flag)) = given.iter().find(|(g, _)| *g) {
            return Err(invalid(flag, "given", &format!("{} has no recurrent state: the flag applies to hybrid models only", m.name)));
        }
    }
    let mut notes = Vec::new();
    let mla = m.attention.mla.is_some();
    let dtype = auto_dtype(m, cfg.dtype);
    let kv_b = cfg.kv_cache_dtype.map_or(dtype.bytes(), DType::bytes);
    // hf_transformers_utils.py `get_context_length`: the config's length times the RoPE
    // factor, unless the scaling names its original length (YaRN) or is Llama-3's; none of its
    // keys in the config → 2048.
    let derived = match &m.rope_scaling {
        Some(r) if matches!(r.kind.as_str(), "linear" | "dynamic" | "ntk") => ((m.max_positions as f64 * r.factor) as u64).min(1 << 24),
        _ => m.max_positions,
    };
    let context_len = match (cfg.context_length, derived) {
        (Some(c), _) => c,
        (None, 0) => {
            notes.push(format!(
                "--context-length {SGLANG_DEFAULT_CONTEXT}: the config names no maximum length, so SGLang takes its default of {SGLANG_DEFAULT_CONTEXT}; pass --context-length for yours"
            ));
            SGLANG_DEFAULT_CONTEXT
        }
        (None, p) => p,
    };
    if context_len == 0 {
        return Err(invalid("--context-length", 0, "a positive number of tokens"));
    }
    if context_len > derived && derived > 0 {
        notes.push(format!(
            "--context-length {context_len} exceeds the model's {derived}: SGLang refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        ));
    }

    // Scheduler and graph defaults from the GPU size (memory_hook.py handle_gpu_memory_settings).
    let (def_cps, def_bs) = gpu_defaults(cfg.gpu_memory_smi_mib, tp);
    let cps = cfg.chunked_prefill_size.unwrap_or(def_cps);
    let graphs = !cfg.disable_cuda_graph;
    let mut max_bs = cfg.cuda_graph_max_bs.unwrap_or(def_bs);
    if cfg.cuda_graph_max_bs.is_none() {
        if let Some(r) = cfg.max_running_requests {
            max_bs = max_bs.min(r);
        }
    }
    // Prefill graphs (breakable, the CUDA default since the prefill phase got graphs): token
    // buckets up to chunked_prefill_size, 8192 at most on MLA, at most --max-total-tokens.
    let mut prefill_max = if mla { cps.min(8192) } else { cps };
    if let Some(t) = cfg.max_total_tokens {
        prefill_max = prefill_max.min(i64::try_from(t).unwrap_or(i64::MAX));
    }
    let buckets = if graphs && cps > 0 { prefill_buckets(prefill_max) } else { 0 };
    let (mfs, reserved, is_default) = match cfg.mem_fraction_static {
        Some(f) => (f, 0.0, false),
        None => {
            let (f, r) = default_mem_fraction(cfg.gpu_memory_smi_mib, tp, cps, max_bs, buckets, mla, graphs, attn_dp);
            if f <= 0.0 {
                return Err(invalid("--gpu", cfg.gpu_memory_smi_mib, "a GPU larger than SGLang's reserve; give --mem-fraction-static"));
            }
            match &m.multimodal {
                // Not re-rounded (memory_hook.py adjust_mem_fraction_for_vlm).
                Some(mm) => (f * vlm_fraction_factor(mm.tower.hidden), r, true),
                None => (f, r, true),
            }
        }
    };
    // Attention DP divides the prefill chunk among its groups and clamps the prefill graphs to
    // it (parallel_hook.py `_handle_data_parallelism`), after the memory defaults above were set
    // from the undivided size.
    let cps_reserve = cps;
    let (cps, buckets) = if attn_dp > 1 && cps > 0 {
        let c = cps / attn_dp as i64;
        (c, if graphs { prefill_buckets(prefill_max.min(c)) } else { 0 })
    } else {
        (cps, buckets)
    };
    // kv_cache_configurator.py mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB (100) for a
    // multimodal model's embedding cache.
    let mm_reserve: u64 = if vlm { VLM_CACHE_SIZE } else { 0 };
    // The LoRA pool, allocated after the weights and before the KV cache is sized.
    let lora_pool = match &cfg.lora {
        None => 0,
        Some(_) if m.moe.is_some() || mla || hybrid.is_some() || vlm => {
            return Err(invalid(
                "--enable-lora",
                &m.name,
                "SGLang's LoRA pool is modelled for dense decoders (MoE expert buffers, MLA's fused projections, hybrid mixers and vision towers are not); drop the LoRA flags to see the rest",
            ))
        }
        Some(l) if l.max_lora_rank == 0 || l.max_lora_rank > 1024 || l.max_loras_per_batch == 0 || l.max_loras_per_batch > 1024 => {
            return Err(invalid(
                "--max-lora-rank / --max-loras-per-batch",
                format!("{} / {}", l.max_lora_rank, l.max_loras_per_batch),
                "each between 1 and 1024",
            ))
        }
        Some(l) => lora_pool_bytes(m, l, tp, dtype.bytes())?,
    };

    // Weights on one rank.
    let split = Split::attention_dp(tp, attn_tp, if cfg.dp_lm_head { attn_tp } else { tp });
    let (w, scales, wnotes) = split_rank_weights(m, cfg.quantization, split, dtype.bytes() as u128)?;
    notes.extend(wnotes);
    // The speculative drafter, loaded before the KV cache is sized and counted in its budget
    // (kv_cache_configurator.py `_profile_available_bytes`: "Loaded weights (target + draft)").
    let spec = match &cfg.speculative {
        None => None,
        Some(sp) => Some(speculative_drafter(m, cfg, sp, split, dtype.bytes() as u128, kv_b, hybrid.is_some() || vlm || attn_dp > 1)?),
    };
    let draft_weights = spec.as_ref().map_or(0, |(d, _)| u64::try_from(d.weights).unwrap_or(u64::MAX));
    let w = w.checked_add(u128::from(draft_weights)).ok_or_else(|| overflow("weights"))?;
    // The vision tower and projector, in the model dtype (quantized checkpoints keep them so).
    let w = w + m.multimodal.as_ref().map_or(0, |mm| crate::serve_mm::rank_weights(mm, m.hidden, tp, dtype.bytes() as u128));
    let weights = u64::try_from(w.checked_add(scales).ok_or_else(|| overflow("weights"))?).map_err(|_| overflow("weights"))?;
    let quant_scales = u64::try_from(scales).map_err(|_| overflow("scales"))?;

    // Free memory before and after loading (distributed/bootstrap.py measure_pre_model_load_memory;
    // model_runner.py "Load weight end").
    let pre = cfg.gpu_memory.saturating_sub(cfg.cuda_context).saturating_sub(cfg.distributed);
    let after = pre.saturating_sub(weights);
    // kv_cache_configurator.py _profile_available_bytes: rest = after − pre × (1 − mfs).
    let slack = (pre as f64 * (1.0 - mfs)) as u64;
    let rest = after.saturating_sub(slack).saturating_sub(mm_reserve).saturating_sub(lora_pool);
    let shortfall = if weights > pre { weights - pre + slack } else { (slack + mm_reserve + lora_pool).saturating_sub(after) };
    let min_mfs = (min_mem_fraction(pre, after.saturating_sub(lora_pool)) * 1000.0).ceil() / 1000.0;

    // A hybrid model's state pool comes out of rest first (_handle_max_mamba_cache).
    let page = cfg.page_size;
    let mut state = None;
    let mut state_short = false;
    let rest = match hybrid {
        None => rest,
        Some(HybridShape { mixer, attention_layers, state_layers, conv_bytes: conv, ssm_bytes: ssm, ssm_dtype }) => {
            let per_req = conv.checked_add(ssm).and_then(|x| x.checked_mul(state_layers)).ok_or_else(|| overflow("state per request"))?;
            let ratio = cfg.mamba_full_memory_ratio.unwrap_or(MAMBA_FULL_MEMORY_RATIO);
            let (slots, memory_ratio) = match (cfg.max_mamba_cache_size, cfg.disable_radix_cache, cfg.max_running_requests) {
                (Some(k), _, _) => (k, 0.0),
                // Radix cache off and a request limit given: one slot per request.
                (None, true, Some(n)) => (n.max(1), 0.0),
                (None, _, _) => {
                    let budget = rest as f64 * ratio / (1.0 + ratio);
                    (((budget - per_req as f64) / per_req as f64).floor().max(0.0) as u64, ratio)
                }
            };
            // MambaPool allocates slots + 1 rows (a padding slot).
            let pool = slots.checked_add(1).and_then(|k| k.checked_mul(per_req)).ok_or_else(|| overflow("state pool"))?;
            state_short = slots == 0 || pool > rest;
            let strategy = if cfg.disable_radix_cache {
                None
            } else {
                // overrides.py: auto resolves to extra_buffer when overlap scheduling is on or the
                // page is larger than one token, else no_buffer (which turns overlap off).
                Some(cfg.mamba_strategy.unwrap_or(if !cfg.disable_overlap_schedule || page > 1 {
                    MambaStrategy::ExtraBuffer
                } else {
                    MambaStrategy::NoBuffer
                }))
            };
            let slots_per_request = match strategy {
                None => 1,
                Some(MambaStrategy::NoBuffer) => 3,
                Some(MambaStrategy::ExtraBufferLazy) => 4,
                Some(MambaStrategy::ExtraBuffer) if cfg.disable_overlap_schedule => 4,
                Some(MambaStrategy::ExtraBuffer) => 5,
            };
            state = Some(SglangStatePool {
                mixer,
                state_layers,
                attention_layers,
                conv_bytes: conv,
                ssm_bytes: ssm,
                ssm_dtype,
                per_request_bytes: per_req,
                max_mamba_cache_size: slots,
                pool_bytes: pool,
                memory_ratio,
                strategy,
                slots_per_request,
                caps_requests: false,
            });
            rest.saturating_sub(pool)
        }
    };

    // Token pool (pool_configurator.py calculate_pool_sizes, kv_cache_configurator.py
    // _apply_token_constraints: --max-total-tokens caps it, then page-aligned again).
    let cell = cell_bytes(m, attn_tp, kv_b, state.as_ref().map_or(m.layers, |s| s.attention_layers))?;
    if cell == 0 {
        return Err(invalid("model", &m.name, "has no KV cache to size"));
    }
    // EAGLE/MTP drafts: the draft pool shares the token count, its per-layer size taken as the
    // target's (pool_configurator.py: cell += int(cell × draft layers / layers)).
    let draft_cell = spec.as_ref().map_or(0, |(d, _)| (cell as u128 * d.kv_layers as u128 / m.layers.max(1) as u128) as u64);
    let cell = cell.checked_add(draft_cell).ok_or_else(|| overflow("cell size"))?;
    let mut tokens = if state_short { 0 } else { rest / cell / page * page };
    if let Some(cap) = cfg.max_total_tokens {
        if cap > tokens {
            notes.push(format!("--max-total-tokens {cap} is larger than the profiled {tokens}: SGLang uses the profiled value"));
        }
        tokens = tokens.min(cap) / page * page;
    }
    // Under attention DP a given limit is shared among the groups (resolve_max_num_reqs:
    // `max_running_requests // attn_dp_size` per worker).
    // Speculative decoding resets an unset --max-running-requests to 48 (_handle_eagle_family).
    let requested = cfg.max_running_requests.or(spec.as_ref().map(|_| 48)).map(|r| (r / attn_dp).max(1));
    let mut mrr = max_running_requests(tokens, context_len, requested);
    if let Some(r) = requested {
        if mrr < r {
            notes.push(format!("--max-running-requests {r} is reduced to {mrr}, half the token pool (resolve_max_num_reqs)"));
        }
    }
    let mut capped_line = None;
    if let Some(st) = state.as_mut() {
        let cap = st.max_mamba_cache_size / st.slots_per_request;
        if mrr > cap {
            mrr = cap;
            st.caps_requests = true;
            capped_line = Some(format!(
                "max_running_requests is capped to {cap} by the mamba state cache (max_mamba_cache_size={}, {} state slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.",
                st.max_mamba_cache_size, st.slots_per_request
            ));
        }
    }
    let kv_pool = tokens.checked_add(page).and_then(|t| t.checked_mul(cell)).ok_or_else(|| overflow("KV pool"))?;
    // ReqToTokenPool: (size + 1) rows of context_len + 4 int32 (mem_cache/memory_pool.py).
    // The row holds 4 + the draft tokens beyond the context (allocation_sizing.py).
    let row_extra = REQ_TO_TOKEN_EXTRA + spec.as_ref().map_or(0, |(_, (_, _, tokens))| *tokens);
    let req_to_token = (mrr + 1)
        .checked_mul(context_len.checked_add(row_extra).ok_or_else(|| overflow("req_to_token"))?)
        .and_then(|x| x.checked_mul(4))
        .ok_or_else(|| overflow("req_to_token"))?;
    let headroom = slack.saturating_sub(req_to_token);
    let full_context_requests = (tokens / context_len).min(mrr);
    let fits = shortfall == 0 && tokens > 0 && mrr > 0;

    let g = |b: u64| b as f64 / GIB as f64;
    // model_runner.py's wording: the elapsed time and the model class are not vram's to say.
    let mut log = vec![format!("Load weight end. elapsed=… s, type=…, avail mem={:.2} GB, mem usage={:.2} GB.", g(after), g(weights))];
    let kv_torch = match (&cfg.kv_cache_dtype_name, kv_b) {
        (Some(n), 1) => format!("torch.{n}"),
        _ => format!("torch.{}", dtype.torch_name()),
    };
    if let Some(l) = capped_line.filter(|_| shortfall == 0 && !state_short) {
        log.push(l);
    }
    if let (Some(st), 0, false) = (&state, shortfall, state_short) {
        let rows = (st.max_mamba_cache_size + 1) as f64 * st.state_layers as f64;
        log.push(format!(
            "Mamba Cache is allocated. max_mamba_cache_size: {}, conv_state size: {:.2}GB, ssm_state size: {:.2}GB",
            st.max_mamba_cache_size,
            rows * st.conv_bytes as f64 / GIB as f64,
            rows * st.ssm_bytes as f64 / GIB as f64
        ));
    }
    if shortfall > 0 {
        log.push(format!(
            "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs}. Raise --mem-fraction-static above {min_mfs:.3}"
        ));
    } else if state_short {
        log.push("RuntimeError: Not enough GPU memory for the hybrid model's state cache: raise --mem-fraction-static or lower --max-mamba-cache-size".to_string());
    } else if mla {
        log.push(format!("KV Cache is allocated. dtype: {kv_torch}, #tokens: {tokens}, KV size: {:.2} GB", g(kv_pool)));
    } else {
        log.push(format!(
            "KV Cache is allocated. dtype: {kv_torch}, #tokens: {tokens}, K size: {:.2} GB, V size: {:.2} GB",
            g(kv_pool / 2),
            g(kv_pool / 2)
        ));
    }
    if shortfall == 0 && !state_short {
        log.push(format!(
            "max_total_num_tokens={tokens}, chunked_prefill_size={cps}, max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={mrr}, context_len={context_len}"
        ));
    }
    if let Some((d, (steps, topk, tokens))) = &spec {
        notes.push(format!(
            "speculative decoding (SGLang {SGLANG_VERSION}'s EAGLE family; NEXTN is EAGLE): {steps} steps, top-k {topk}, {tokens} draft tokens{}; the drafter — {} — {:.2} GiB, loaded before the KV cache is sized and counted in its budget; its {} layer(s) add {} bytes a token to the cell, sized as the target's layers (pool_configurator.py); each req_to_token row holds {tokens} more tokens; {}; the drafter's CUDA graphs come out of the headroom. Read from SGLang's source, not yet checked against a start-up log",
            if cfg.speculative.as_ref().is_some_and(|s| s.num_steps.is_none()) { " (SGLang's choice for the architecture, _auto_choose_speculative_params)" } else { "" },
            d.what,
            d.weights as f64 / GIB as f64,
            d.kv_layers,
            draft_cell,
            if cfg.max_running_requests.is_none() { "--max-running-requests defaults to 48 under speculative decoding" } else { "--max-running-requests as given" }
        ));
    }
    if is_default {
        let vlm_part = match &m.multimodal {
            Some(mm) => format!(
                ", times {:.6} for the vision tower (0.95 · f from its width {}; adjust_mem_fraction_for_vlm)",
                vlm_fraction_factor(mm.tower.hidden),
                mm.tower.hidden
            ),
            None => String::new(),
        };
        notes.push(format!(
            "--mem-fraction-static {} is SGLang {SGLANG_VERSION}'s default for a {} MiB GPU: it reserves {reserved:.0} MiB for activations ({} prefill tokens × 1.5 MiB + 512), TP slack and CUDA graphs{vlm_part}",
            fraction_text(mfs),
            cfg.gpu_memory_smi_mib,
            if cps_reserve > 0 { cps_reserve.max(2048) } else { MAX_PREFILL_TOKENS as i64 }
        ));
    }
    if let Some(st) = &state {
        notes.push(format!(
            "{} {} layers keep a recurrent state per slot ({:.2} MiB a request); {} and only the {} full-attention layers cache tokens",
            st.state_layers,
            st.mixer.name(),
            st.per_request_bytes as f64 / MIB as f64,
            if st.memory_ratio > 0.0 {
                format!("the state pool takes {}/(1 + {}) of the budget left after the weights", st.memory_ratio, st.memory_ratio)
            } else {
                "the state slots are as given".to_string()
            },
            st.attention_layers
        ));
    }
    if tokens > 0 && tokens < context_len {
        notes.push(format!(
            "the pool ({tokens} tokens) is shorter than the context length {context_len}: SGLang starts, but caps a request at the pool size"
        ));
    }
    if let Some(l) = &cfg.lora {
        notes.push(format!(
            "--enable-lora: a pool of {} adapter slots at rank {} for {} ({:.2} GiB on this GPU, in {}) is allocated after the weights and before the KV cache is sized (lora/mem_pool.py), so it comes out of the token pool; the adapters themselves wait in host memory",
            l.max_loras_per_batch,
            l.max_lora_rank,
            l.target_modules.join(", "),
            lora_pool as f64 / GIB as f64,
            dtype.torch_name()
        ));
    }
    if cfg.ep_size > 1 {
        notes.push(format!(
            "--ep-size {}: each GPU holds {} whole experts instead of a 1/{} slice of every expert, the same bytes (MoE all-to-all buffers of --moe-a2a-backend deepep are not modelled and that backend is refused)",
            cfg.ep_size,
            m.moe.as_ref().map_or(0, |e| e.experts) / cfg.ep_size,
            cfg.ep_size
        ));
    }
    if attn_dp > 1 {
        notes.push(format!(
            "attention DP: {attn_dp} groups of {attn_tp} GPU(s); the attention projections, the embedding and the KV heads are split over the {attn_tp} GPU(s) of a group, the experts and dense MLPs over all {tp}, the LM head over {} (--enable-dp-lm-head: the group); each group schedules its own batch from its own token pool, so the pool and max_running_requests shown are per GPU and per group ({}× the requests in all); the prefill chunk is divided by {attn_dp} and the default --mem-fraction-static reserves {} MiB more for DP padding (arg_groups/parallel_hook.py, memory_hook.py reserve_for_graph_mb, SGLang {SGLANG_VERSION}); read from source, not checked against a start-up log",
            if cfg.dp_lm_head { attn_tp } else { tp },
            attn_dp,
            max_bs * attn_dp * 3 + if max_bs > 300 { max_bs * attn_dp * 3 / 2 } else { 0 }
        ));
    }
    notes.push(format!(
        "before the weights load vram assumes the CUDA context ({} MiB){}; SGLang measures this free memory on the GPU",
        cfg.cuda_context / MIB,
        if cfg.distributed > 0 { format!(" and NCCL/all-reduce buffers ({} MiB) are taken", cfg.distributed / MIB) } else { String::new() }
    ));
    Ok(SglangReport {
        draft_weights_bytes: draft_weights,
        draft_cell_bytes: draft_cell,
        sglang_version: SGLANG_VERSION.into(),
        dtype,
        kv_dtype_bytes: kv_b,
        tp,
        attn_dp_size: attn_dp,
        context_len,
        mem_fraction_static: mfs,
        mem_fraction_static_default: is_default,
        reserved_mib: reserved,
        chunked_prefill_size: cps,
        cuda_graph_max_bs: if graphs { max_bs } else { 0 },
        prefill_graph_buckets: buckets,
        max_prefill_tokens: MAX_PREFILL_TOKENS,
        page_size: page,
        weights_bytes: weights,
        quant_scales_bytes: quant_scales,
        pre_load_bytes: pre,
        after_weights_bytes: after,
        slack_bytes: slack,
        rest_bytes: rest,
        shortfall_bytes: shortfall,
        min_mem_fraction_static: min_mfs,
        cell_bytes: cell,
        max_total_num_tokens: tokens,
        kv_pool_bytes: if shortfall > 0 { 0 } else { kv_pool },
        max_running_requests: mrr,
        req_to_token_bytes: req_to_token,
        headroom_bytes: headroom,
        full_context_requests,
        fits,
        cuda_context_bytes: cfg.cuda_context,
        distributed_bytes: cfg.distributed,
        state,
        mm_reserve_bytes: mm_reserve,
        lora_pool_bytes: lora_pool,
        log,
        notes,
    })
}

/// A fraction as SGLang prints it, without float noise (a VLM's adjusted default is not rounded).
pub fn fraction_text(f: f64) -> String {
    let s = format!("{f:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h100_default_fraction_follows_the_reserve() {
        // 81559 MiB (nvidia-smi, H100 80GB), TP 1: cps 8192, decode max bs 256, 58 prefill buckets.
        let (cps, bs) = gpu_defaults(81559, 1);
        assert_eq!((cps, bs), (8192, 256));
        assert_eq!(prefill_buckets(8192), 58);
        let (f, r) = default_mem_fraction(81559, 1, cps, bs, 58, false, true, 1);
        assert_eq!(r, 512.0 + 8192.0 * 1.5 + 128.0 + 512.0 + 58.0 * 8.0);
        assert_eq!(f, 0.83);
    }

    #[test]
    fn small_gpus_get_small_defaults() {
        assert_eq!(gpu_defaults(16 * 1024, 1), (2048, 8));
        assert_eq!(gpu_defaults(24 * 1024, 4), (4096, 160));
        assert_eq!(gpu_defaults(180 * 1024, 1), (16384, 512));
        assert_eq!(prefill_buckets(0), 0);
        assert_eq!(prefill_buckets(4096), 50);
    }

    #[test]
    fn max_running_requests_is_clamped_and_halved() {
        assert_eq!(max_running_requests(400_000, 131_072, None), 2048);
        assert_eq!(max_running_requests(10_000_000, 4096, None), 4096);
        assert_eq!(max_running_requests(3000, 4096, None), 1500);
        assert_eq!(max_running_requests(3000, 4096, Some(64)), 64);
    }
}
