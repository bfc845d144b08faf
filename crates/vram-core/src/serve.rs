//! Serving capacity as vLLM itself accounts for it (V1 engine, `vllm serve`), per GPU.
//!
//! vLLM sizes its KV-cache pool once at start-up (vllm/v1/worker/gpu_worker.py
//! `determine_available_memory`, vllm/utils/mem_utils.py `memory_profiling`):
//!
//! ```text
//! requested      = total GPU memory × gpu_memory_utilization
//! non_kv         = weights + torch peak increase of the profile run + non-torch increase
//! kv_cache       = requested − non_kv                       ("Available KV cache memory")
//! num_blocks     = kv_cache // page_size // layers_per_group  (v1/core/kv_cache_utils.py)
//! ```
//!
//! The baseline snapshot is taken after the CUDA context and NCCL communicators exist, so
//! those sit outside `requested`; CUDA graphs are captured after the pool is allocated and are
//! not counted either. Both are reported separately as memory beyond the budget.

use serde::Serialize;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::{Model, Role, TensorGroup};

/// The CUDA context a serving engine's process holds before its weights load (vLLM, SGLang;
/// llama.cpp's is measured: crate::gguf::llama_cuda_overhead). 512 MiB is what the engines'
/// start-up logs were checked with (validation/vllm, validation/sglang); the H100 measurement of a PyTorch process (688 MiB after a generation's
/// kernels, crate::job::INFER_CUDA_CONTEXT) is not applied here: the engines measure their own
/// non-torch memory, which `serve` takes from the version's rules. `--cuda-context` changes it.
pub const ENGINE_CUDA_CONTEXT: u64 = 512 << 20;

/// How the checkpoint's linear layers are quantised (`--quantization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Quantization {
    /// Unquantised, in the model dtype.
    None,
    /// AWQ 4-bit, group size 128.
    Awq,
    /// GPTQ 4-bit, group size 128, with `g_idx`.
    Gptq,
    /// FP8 weights with per-tensor scales.
    Fp8,
    /// bitsandbytes NF4 with double quantisation.
    Bnb4bit,
    /// As the checkpoint's `quantization_config` stores the weights (vLLM reads the method from
    /// the checkpoint when `--quantization` is not given: config/model.py `_verify_quantization`).
    Checkpoint,
}

impl Quantization {
    /// Parse vLLM's spelling (`awq`, `gptq`, `fp8`, `bitsandbytes`/`bnb-4bit`).
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "none" | "" => Quantization::None,
            "awq" | "awq_marlin" => Quantization::Awq,
            "gptq" | "gptq_marlin" => Quantization::Gptq,
            "fp8" => Quantization::Fp8,
            "bnb-4bit" | "bitsandbytes" | "bnb" | "nf4" => Quantization::Bnb4bit,
            other => {
                return Err(Error::InvalidValue {
                    what: "quantization".into(),
                    value: other.into(),
                    hint: "use awq, gptq, fp8 or bnb-4bit".into(),
                })
            }
        })
    }
}

impl Quantization {
    /// `--quantization` against the checkpoint: absent, or the engine's name for the
    /// checkpoint's own method (`modelopt_fp4`, `compressed-tensors`, `mxfp4`, `awq_marlin` …),
    /// serves it as stored; a different method is refused, as vLLM and SGLang refuse it
    /// (vllm/config/model.py `_verify_quantization`).
    pub fn resolve(flag: Option<&str>, model: &Model) -> Result<Quantization> {
        let method = |s: &str| match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "modelopt" | "modelopt-fp4" => "modelopt".to_string(),
            "awq-marlin" => "awq".into(),
            "gptq-marlin" => "gptq".into(),
            "bnb-4bit" | "bnb" | "nf4" => "bitsandbytes".into(),
            other => other.to_string(),
        };
        if let (Some(f), Some(q)) = (flag, &model.quantization) {
            if method(f) == method(&q.method) {
                return Ok(Quantization::Checkpoint);
            }
        }
        let given = flag.map(Quantization::parse).transpose()?;
        match (&model.quantization, given) {
            (None, g) => Ok(g.unwrap_or(Quantization::None)),
            (Some(_), None) => Ok(Quantization::Checkpoint),
            (Some(q), Some(_)) => Err(invalid(
                "--quantization",
                flag.unwrap_or_default(),
                &format!(
                    "the checkpoint is already quantized ({}) and the engine (vLLM, SGLang) refuses a different method; drop --quantization to serve it as stored",
                    q.describe()
                ),
            )),
        }
    }
}

/// Which vLLM engine's profile run to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VllmEngine {
    /// The V1 engine (vLLM ≥ 0.8 default; the only one since 0.11).
    V1,
    /// The legacy V0 engine (vLLM ≤ 0.10 with VLLM_USE_V1=0): no chunked prefill by default and
    /// a top-k/top-p sampler in the profile run.
    V0,
}

/// Which of vLLM's GPU model runners runs the profile (V1 engine only): the original
/// `vllm/v1/worker/gpu_model_runner.py` or Model Runner V2, `vllm/v1/worker/gpu/model_runner.py`
/// (`VLLM_USE_V2_MODEL_RUNNER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelRunner {
    /// `gpu_model_runner.py`: the only runner before 0.25; still the default for MoE and
    /// Mamba-hybrid models.
    V1,
    /// Model Runner V2: the default for dense models since vLLM 0.25 (vllm-project/vllm#44443).
    V2,
}

impl ModelRunner {
    /// Parse `v1`/`v2` (also `1`/`2`).
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "v1" | "1" => Ok(ModelRunner::V1),
            "v2" | "2" => Ok(ModelRunner::V2),
            _ => Err(invalid("--model-runner", s, "v1 (gpu_model_runner.py) or v2 (Model Runner V2)")),
        }
    }

    /// The runner in words, with the file its log lines name.
    pub fn describe(self) -> &'static str {
        match self {
            ModelRunner::V1 => "the V1 runner (gpu_model_runner.py)",
            ModelRunner::V2 => "Model Runner V2 (model_runner.py)",
        }
    }

    /// The `--model-runner` spelling, and the `VLLM_USE_V2_MODEL_RUNNER` value that selects it.
    pub fn flag_and_env(self) -> (&'static str, &'static str) {
        match self {
            ModelRunner::V1 => ("v1", "0"),
            ModelRunner::V2 => ("v2", "1"),
        }
    }
}

/// The vLLM release whose start-up accounting to reproduce (`--vllm-version`). Only the rules
/// that change GPU memory are kept per version; each is cited where it is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct VllmVersion {
    /// Major version (0).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl VllmVersion {
    /// The newest release whose rules vram models (the default).
    pub const NEWEST: VllmVersion = VllmVersion { major: 0, minor: 33 };
    /// The oldest release vram reads (V0 engine logs of 0.6.x are in the evidence set).
    pub const OLDEST: VllmVersion = VllmVersion { major: 0, minor: 6 };
    /// First release with the V1 engine on by default.
    pub const V1_DEFAULT: VllmVersion = VllmVersion { major: 0, minor: 8 };
    /// First release that subtracts its CUDA-graph estimate from the KV budget by default
    /// (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, added opt-in by vllm-project/vllm#30515; its
    /// default is "1" in vllm/envs.py of the 0.20.0 sdist and "0" in 0.19.1's, read on
    /// 2026-12-05 — vLLM's own later start-up note says "since v0.21", quoted in
    /// eugr/spark-vllm-docker#396; the default is debated in vllm-project/vllm#45178).
    pub const CUDA_GRAPH_ESTIMATE: VllmVersion = VllmVersion { major: 0, minor: 20 };
    /// First release whose default runner for dense models is Model Runner V2 (release notes of
    /// 0.25: "Model Runner V2 is now the default for all dense models", vllm-project/vllm#44443;
    /// vllm/config/vllm.py `_is_default_v2_model_runner_model`: `... or not model_config.is_moe`).
    pub const MRV2_DEFAULT: VllmVersion = VllmVersion { major: 0, minor: 25 };
    /// The first release whose default runner is Model Runner V2 for every model, MoE, hybrid and
    /// attention-free ones included: 0.29.0's vllm/config/vllm.py `use_v2_model_runner` no longer
    /// calls `_is_default_v2_model_runner_model` (0.28.0's: `is_default_v2_architecture or not
    /// model_config.is_moe`, hybrids and attention-free models excluded) and falls back to V1
    /// only for features V2 lacks (`_get_v2_model_runner_unsupported_features`).
    pub const MRV2_ALL_MODELS: VllmVersion = VllmVersion { major: 0, minor: 29 };
    /// The earliest release whose source vram read with `--gpu-memory-utilization` defaulting to
    /// 0.92 (vllm/config/cache.py of v0.25.0: `Field(default=0.92, gt=0, le=1)`; 0.9 for most of
    /// vLLM's history, and the v0.31 log in validation/vllm/logs.jsonl shows 0.92 with no flag).
    /// The release that changed it is not pinned: earlier 0.2x releases keep 0.9 here.
    pub const GMU_092: VllmVersion = VllmVersion { major: 0, minor: 25 };
    /// The first release vram models state-space and hybrid models in: the V1 engine's hybrid
    /// KV-cache manager with states in the shared block pool and the attention block grown to
    /// hold one (vllm-project/vllm#20016, June 2025; the alignment rule as read from
    /// model_executor/models/config.py `HybridAttentionMambaModelConfig` of 2025, whose 672-token
    /// block for Nemotron-Nano-9B-v2 a September 2025 issue quotes, vllm-project/vllm#24280).
    pub const HYBRID_STATES: VllmVersion = VllmVersion { major: 0, minor: 10 };
    /// The first release whose Nemotron-H SSM state defaults to float32 when the config names no
    /// `mamba_ssm_cache_dtype` (float16 before: vllm-project/vllm#39032, merged 2026-04-05;
    /// assumed to be in 0.19, the release after).
    pub const NEMOTRON_H_SSM_F32: VllmVersion = VllmVersion { major: 0, minor: 19 };
    /// The first release that logs "GPU KV cache size" as max concurrency × max-model-len instead
    /// of num_blocks // groups × the smallest block size (vllm-project/vllm#38364, #40694: the
    /// v0.19.0 log of vllm-project/vllm#40691 still has the old figure, July 2026 logs the new
    /// one). Assumed: the release is not pinned.
    pub const TOKENS_FROM_CONCURRENCY: VllmVersion = VllmVersion { major: 0, minor: 20 };
    /// The first release with prefix caching on by default for hybrid models, in mamba-cache mode
    /// `align` (vllm-project/vllm#50991, merged 2026-08-04: "enable prefix cache for hybrid model
    /// by default and change the default mode to align"). Assumed from the merge date: the
    /// release is not pinned.
    pub const HYBRID_PREFIX_CACHING: VllmVersion = VllmVersion { major: 0, minor: 27 };

    /// The first release whose encoder budget counts a multimodal item by its embeddings (the
    /// encoder's outputs, `PlaceholderRange.get_num_embeds`) rather than by its whole placeholder
    /// with the text tokens around them (vllm-project/vllm#30475, merged December 2025 after
    /// v0.12.0: vllm-project/vllm-ascend#5132 ports it on 2025-12-17 naming v0.12.0 the latest
    /// release). Assumed: the release is not pinned.
    pub const ENCODER_EMBEDS: VllmVersion = VllmVersion { major: 0, minor: 13 };

    /// The first release whose Model Runner V2 start-up logs show a profile-run peak 1.2–2.0 GiB
    /// above the one vram models (Qwen3-14B on an L40S at 0.28 and 0.29, Llama-3.1-8B on an A100
    /// at 0.31; the 0.27.1 logs show none). From 0.29 part of it is the CUDA-graph estimate
    /// ([`Self::MRV2_CUDA_GRAPH_ESTIMATE`]); the rest is not located: the reports say so.
    pub const MRV2_UNPLACED_PEAK: VllmVersion = VllmVersion { major: 0, minor: 28 };

    /// The first release whose Model Runner V2 estimates its CUDA graphs before sizing the KV
    /// cache: `profile_cudagraph_memory` returns 0 in 0.27.1 and 0.28.0 (vllm/v1/worker/gpu/
    /// model_runner.py, "It is TBD whether we keep this API") and from 0.29.0 calls
    /// vllm/v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory` (capture every piecewise
    /// graph and two full ones, extrapolate the rest from the second), which gpu_worker.py adds to
    /// the peak activation memory as for the V1 runner (read in the 0.29.0 and 0.31.0 sdists).
    pub const MRV2_CUDA_GRAPH_ESTIMATE: VllmVersion = VllmVersion { major: 0, minor: 29 };

    /// The first release read whose Model Runner V2 allocates per-request sampling and input state
    /// on the GPU when it builds its sampler (`load_model`), after the start-up snapshot and
    /// before the profile run, so it is part of the memory the log calls "consumed (weights +
    /// non-torch)" ([`mrv2_state_buffers`]; read in the 0.28.0, 0.29.0 and 0.31.0 wheels; the
    /// 0.33.0 sdist still builds the penalty tables, [R, V] and [R, ⌈V/32⌉] int32, in its
    /// `PenaltiesState`, and the smaller tables are taken to be unchanged).
    pub const MRV2_STATE_BUFFERS: VllmVersion = VllmVersion { major: 0, minor: 28 };

    /// The first release whose Model Runner V2 profile run samples a second time with the
    /// warm-up's parameters (vllm/v1/worker/gpu/model_runner.py `_dummy_sampler_run` of 0.33.0:
    /// `SamplingParams.for_sampler_warmup()`, temperature 0.9, top-k 50, top-p 0.9, penalties,
    /// logprobs 5, "so the profiled peak must too"): the logits are copied to fp32, and where the
    /// FlashInfer sampler runs, `top_k_top_p_sampling_from_logits` holds a masked fp32 copy and
    /// its softmax beside it (flashinfer 0.7.2.post1 sampling.py: a per-row top-k tensor skips
    /// the fast path); elsewhere Triton masks in place in a cached [min(next_pow2(min(SMs, R)),
    /// SMs), V] fp32 buffer that stays (topk_topp_triton.py). 0.32's profile is 0.31's.
    pub const MRV2_SAMPLER_WARMUP: VllmVersion = VllmVersion { major: 0, minor: 33 };

    /// The first release that creates the cuBLAS and cuBLASLt handles before its start-up memory
    /// snapshot (vllm/v1/worker/gpu_worker.py of 0.33.0, "so they count as baseline like the NCCL
    /// buffers"): the handle's workspace, which torch takes from its caching allocator (32 MiB
    /// on compute capability 9.0 and later, 8.125 MiB in a 20 MiB segment before), leaves the
    /// memory the profile run consumes.
    pub const CUBLAS_BASELINE: VllmVersion = VllmVersion { major: 0, minor: 33 };

    /// The first release whose Gated DeltaNet layers (Qwen3-Next, Qwen3.5) export prefill
    /// checkpoints where FlashInfer's GDN prefill runs (compute capability 9.0 with no condition;
    /// Blackwell with a CUDA 13 runtime) and prefix caching is on (mamba-cache mode `align`):
    /// the attention block is rounded to lcm(its kernel block, 64)
    /// (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT, platforms/interface.py), each state group holds one
    /// more block per request (`num_prefill_checkpoint_blocks = 1`,
    /// qwen_gdn_linear_attn.py `get_kv_cache_spec`), and the profile run sizes an fp32
    /// checkpoint workspace of ⌈max_num_batched_tokens / block⌉ × value heads/TP × dv × dk
    /// (`_checkpoint_buffer_spec`). The same release ignores `--mamba-cache-mode`: the mode
    /// follows `--enable-prefix-caching` (engine/arg_utils.py, "It has no effect").
    pub const GDN_PREFILL_CHECKPOINTS: VllmVersion = VllmVersion { major: 0, minor: 33 };

    /// vLLM's `--gpu-memory-utilization` default in this release.
    pub fn default_gpu_memory_utilization(self) -> f64 {
        if self >= Self::GMU_092 {
            0.92
        } else {
            0.9
        }
    }

    /// Parse `0.21`, `0.21.1`, `v0.10.2rc1`: the major and minor numbers.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || invalid("--vllm-version", s, "a vLLM release such as 0.10, 0.17 or 0.21");
        let t = s.trim().trim_start_matches('v');
        let mut it = t.split('.');
        let major = it.next().and_then(|x| x.parse::<u32>().ok()).ok_or_else(bad)?;
        let minor_s: String = it.next().ok_or_else(bad)?.chars().take_while(char::is_ascii_digit).collect();
        let minor = minor_s.parse::<u32>().map_err(|_| bad())?;
        let v = VllmVersion { major, minor };
        if v < Self::OLDEST {
            return Err(invalid("--vllm-version", s, "vram models vLLM 0.6 and later"));
        }
        Ok(v)
    }
}

impl std::fmt::Display for VllmVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Raw settings of a `vllm serve` launch, in vLLM's own terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeConfig {
    /// Total memory of one GPU, bytes (what `torch.cuda.mem_get_info` reports as total).
    pub gpu_memory: u64,
    /// Whether the GPU is an A100 (vLLM keeps the small scheduler defaults there).
    pub gpu_is_a100: bool,
    /// Whether the GPU is a Hopper/Blackwell SXM part on an NVSwitch (H100 SXM, H200, H800, H20,
    /// B200, GB200), where NCCL's NVLink-SHARP buffers make TP ≥ 2 non-torch memory large.
    pub gpu_nvswitch: bool,
    /// The GPU's compute capability and multiprocessors, which pick vLLM's sampler kernels;
    /// `None` for a GPU given by size (a CUDA GPU of compute capability 8.0–12.1 is assumed).
    pub gpu_arch: Option<crate::gpu::Arch>,
    /// How the GPUs of a TP group are linked, which decides whether NCCL's all-reduce is
    /// captured into the CUDA graphs; `None` for a GPU given by size (custom all-reduce assumed).
    pub gpu_interconnect: Option<crate::gpu::Interconnect>,
    /// `--gpu-memory-utilization` (vLLM's default: 0.92 from 0.25, 0.9 before).
    pub gpu_memory_utilization: f64,
    /// `--tensor-parallel-size`.
    pub tp: u64,
    /// `--pipeline-parallel-size`.
    pub pp: u64,
    /// `--data-parallel-size`: replicas of the TP × PP group. Each keeps its own attention
    /// weights and KV cache, but a MoE model's experts are spread over all TP × DP GPUs
    /// (vllm/model_executor/layers/fused_moe/config.py `flatten_tp_across_dp_and_pcp`).
    pub dp: u64,
    /// `--enable-expert-parallel`: each of the TP × DP GPUs holds whole experts (a share of
    /// them, the first ranks one more when they do not divide: fused_moe/expert_map_manager.py
    /// `determine_expert_map`) instead of a slice of every expert.
    pub expert_parallel: bool,
    /// `--vllm-version`: whose accounting rules to follow.
    pub vllm_version: VllmVersion,
    /// Override of the CUDA-graph memory estimate vLLM ≥ 0.20 subtracts from the KV budget.
    pub cuda_graph_memory: Option<u64>,
    /// `compilation_config.cudagraph_mode`; `None` = FULL_AND_PIECEWISE, vLLM's default.
    pub cudagraph_mode: Option<crate::serve_graphs::CudagraphMode>,
    /// `--cudagraph-capture-sizes`: the batch sizes captured instead of vLLM's default list.
    pub cudagraph_capture_sizes: Option<Vec<u64>>,
    /// `--max-cudagraph-capture-size`: the ceiling of vLLM's default list.
    pub max_cudagraph_capture_size: Option<u64>,
    /// `--max-model-len`; `None` = the model's `max_position_embeddings`.
    pub max_model_len: Option<u64>,
    /// `--max-model-len auto` (or -1): the longest length whose blocks fit the pool, at most the
    /// model's (vllm/v1/core/kv_cache_utils.py: with auto, max_model_len becomes
    /// `estimate_max_model_len` instead of refusing to start).
    pub max_model_len_auto: bool,
    /// `--dtype`; `None` = auto (the checkpoint's dtype, float32 checkpoints served in bf16).
    pub dtype: Option<DType>,
    /// `--quantization`.
    pub quantization: Quantization,
    /// `--kv-cache-dtype`; `None` = auto (the model dtype).
    pub kv_cache_dtype: Option<DType>,
    /// `--block-size` (default 16).
    pub block_size: u64,
    /// `--max-num-batched-tokens`; `None` = vLLM's default for the GPU.
    pub max_num_batched_tokens: Option<u64>,
    /// `--max-num-seqs`; `None` = vLLM's default for the GPU.
    pub max_num_seqs: Option<u64>,
    /// `--disable-sliding-window`: every layer caches the whole context, and the derived
    /// max-model-len is capped to the window.
    pub disable_sliding_window: bool,
    /// `--enable-chunked-prefill` (V1's default) or `--no-enable-chunked-prefill`: without it the
    /// default batch holds a whole max-model-len prompt.
    pub chunked_prefill: bool,
    /// `--performance-mode` (vLLM ≥ 0.19): `throughput` doubles the default batch and sequences,
    /// `interactivity` captures every CUDA-graph size up to 32.
    pub performance_mode: PerformanceMode,
    /// Whether the V1 runner samples top-k/top-p with FlashInfer (`VLLM_USE_FLASHINFER_SAMPLER`);
    /// `None` = vLLM's default as installed with pip: no before 0.17 (FlashInfer was an optional
    /// extra to 0.11 — used when present, as in the vllm/vllm-openai image — and opt-in from 0.12),
    /// and from 0.17 Triton's kernel, which needs no sort either.
    pub flashinfer_sampler: Option<bool>,
    /// Override of the non-torch increase measured by the profile run.
    pub non_torch_memory: Option<u64>,
    /// CUDA context per process (outside vLLM's budget).
    pub cuda_context: u64,
    /// `--enforce-eager`: no CUDA graphs.
    pub enforce_eager: bool,
    /// Engine generation.
    pub engine: VllmEngine,
    /// `--model-runner` (or `VLLM_USE_V2_MODEL_RUNNER` in a pasted command); `None` = the one
    /// vLLM picks for the version and model (`model_runner`).
    pub model_runner: Option<ModelRunner>,
    /// `--enable-lora` with its slot settings; `None` without LoRA.
    pub lora: Option<ServeLora>,
    /// `--kv-cache-memory-bytes`: the KV pool set directly instead of from
    /// `--gpu-memory-utilization` (vllm/v1/worker/gpu_worker.py determine_available_memory).
    pub kv_cache_memory_bytes: Option<u64>,
    /// `--enable-eplb` with its `--eplb-config`: expert-parallel load balancing; `None` = off.
    pub eplb: Option<Eplb>,
    /// `--num-gpu-blocks-override`: the KV pool's blocks, set directly (the profile still runs).
    pub num_gpu_blocks_override: Option<u64>,
    /// `--cpu-offload-gb` in bytes (vLLM reads GiB): weights moved to pinned host memory per GPU.
    pub cpu_offload_bytes: u64,
    /// `--limit-mm-per-prompt` images; `None` = vLLM's default (999 on V1).
    pub mm_limit_per_prompt: Option<u64>,
    /// `--mm-processor-kwargs '{"max_pixels": N}'` (Qwen2-VL); `None` = the processor's default.
    pub mm_max_pixels: Option<u64>,
    /// `--mm-processor-kwargs '{"size": {"longest_edge": N}}'` (Idefics3/SmolVLM: the edge the
    /// processor resizes to before splitting); `None` = the processor's default.
    pub mm_longest_edge: Option<u64>,
    /// `--language-model-only`: a vision-language checkpoint served as its language model, the
    /// tower never built (vllm/config/multimodal.py `language_model_only`).
    pub language_model_only: bool,
    /// `--enable-prefix-caching` / `--no-enable-prefix-caching`; `None` = the version's default
    /// (it matters for state-space and hybrid models only, whose states it doubles).
    pub prefix_caching: Option<bool>,
    /// `--mamba-cache-mode`; `None` = vLLM's choice.
    pub mamba_cache_mode: Option<crate::serve_ssm::MambaCacheMode>,
    /// `--mamba-ssm-cache-dtype`; `None` = auto (the model's rule, else its dtype).
    pub mamba_ssm_cache_dtype: Option<DType>,
    /// `--speculative-config`; `None` without speculative decoding.
    pub speculative: Option<crate::serve_spec::Speculative>,
}

impl ServeConfig {
    /// What vLLM decides by the GPU's kind rather than its size: the A100's scheduler defaults,
    /// NVSwitch buffers, sampler kernels and the all-reduce in the CUDA graphs.
    pub fn with_gpu_traits(self, g: &crate::gpu::Gpu) -> Self {
        ServeConfig {
            gpu_is_a100: g.name.starts_with("a100"),
            gpu_nvswitch: nvswitch_gpu(&g.name),
            gpu_arch: crate::gpu::arch(g),
            gpu_interconnect: crate::gpu::interconnect(g),
            ..self
        }
    }
}

/// vLLM's `--performance-mode` (vllm/config/vllm.py `PerformanceMode`, from 0.19).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PerformanceMode {
    /// The default.
    Balanced,
    /// CUDA graphs at every batch size up to 32 (vllm/config/vllm.py `_set_cudagraph_sizes`).
    Interactivity,
    /// Twice the default max-num-batched-tokens and max-num-seqs (engine/arg_utils.py
    /// `_set_default_max_num_seqs_and_batched_tokens_args`).
    Throughput,
}

impl PerformanceMode {
    /// vLLM's spelling.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "balanced" => Ok(PerformanceMode::Balanced),
            "interactivity" => Ok(PerformanceMode::Interactivity),
            "throughput" => Ok(PerformanceMode::Throughput),
            _ => Err(invalid("--performance-mode", s, "balanced, interactivity or throughput")),
        }
    }
}

/// vLLM's expert-parallel load balancing (`--enable-eplb`, vllm/config/parallel.py `EPLBConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Eplb {
    /// `num_redundant_experts` (default 0): physical experts beyond the model's.
    pub redundant_experts: u64,
    /// `window_size` (default 1000): steps of expert load kept on the GPU.
    pub window_size: u64,
}

impl Eplb {
    /// EPLB's per-GPU tables (vllm/distributed/eplb/eplb_state.py `add_model`): per MoE layer
    /// the logical-to-physical map [experts, 1024] int64, the physical-to-logical map, the
    /// replica counts (int64) and the pass's expert load (int32), and the load window
    /// [window, layers, physical] int32.
    pub fn buffer_bytes(&self, experts: u64, moe_layers: u64) -> u128 {
        let (e, l, p) = (experts as u128, moe_layers as u128, (experts + self.redundant_experts) as u128);
        l * (e * 1024 * 8 + p * 8 + e * 8 + p * 4) + self.window_size as u128 * l * p * 4
    }
}

/// vLLM's multi-LoRA settings (vllm/config/lora.py `LoRAConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServeLora {
    /// `--max-loras` (default 1): adapters resident on the GPU at once.
    pub max_loras: u64,
    /// `--max-lora-rank` (default 16): every slot is allocated at this rank.
    pub max_lora_rank: u64,
    /// `--max-cpu-loras` (default: max_loras): adapters cached in host memory.
    pub max_cpu_loras: u64,
}

/// Ranks `--max-lora-rank` accepts (vllm/config/lora.py `possible_max_ranks`).
const LORA_RANKS: [u64; 9] = [1, 8, 16, 32, 64, 128, 256, 320, 512];

impl ServeConfig {
    /// vLLM's defaults on a GPU of `gpu_memory` bytes.
    pub fn new(gpu_memory: u64) -> Self {
        ServeConfig {
            gpu_memory,
            gpu_is_a100: false,
            gpu_nvswitch: false,
            gpu_arch: None,
            gpu_interconnect: None,
            gpu_memory_utilization: VllmVersion::NEWEST.default_gpu_memory_utilization(),
            tp: 1,
            pp: 1,
            dp: 1,
            expert_parallel: false,
            vllm_version: VllmVersion::NEWEST,
            cuda_graph_memory: None,
            cudagraph_mode: None,
            cudagraph_capture_sizes: None,
            max_cudagraph_capture_size: None,
            max_model_len: None,
            max_model_len_auto: false,
            dtype: None,
            quantization: Quantization::None,
            kv_cache_dtype: None,
            block_size: 16,
            max_num_batched_tokens: None,
            max_num_seqs: None,
            chunked_prefill: true,
            disable_sliding_window: false,
            performance_mode: PerformanceMode::Balanced,
            flashinfer_sampler: None,
            non_torch_memory: None,
            cuda_context: ENGINE_CUDA_CONTEXT,
            enforce_eager: false,
            engine: VllmEngine::V1,
            model_runner: None,
            lora: None,
            kv_cache_memory_bytes: None,
            num_gpu_blocks_override: None,
            eplb: None,
            cpu_offload_bytes: 0,
            mm_limit_per_prompt: None,
            mm_max_pixels: None,
            mm_longest_edge: None,
            language_model_only: false,
            prefix_caching: None,
            mamba_cache_mode: None,
            mamba_ssm_cache_dtype: None,
            speculative: None,
        }
    }
}

/// What CUDA reports as total memory (`cudaMemGetInfo`, which vLLM uses): see
/// [`crate::gpu::cuda_total`].
pub fn cuda_total(gpu: &crate::gpu::Gpu) -> u64 {
    crate::gpu::cuda_total(gpu).0
}

/// Whether a GPU of vram's table (gpu.rs names) is a Hopper/Blackwell SXM part on an NVSwitch:
/// H100 SXM, H200, H800, H20, B200, GB200 (not the PCIe or NVL-bridge H100).
pub fn nvswitch_gpu(name: &str) -> bool {
    matches!(name, "h100-80gb" | "h200" | "h800" | "h20" | "b200" | "gb200")
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// vLLM pads the vocabulary to a multiple of 64 before splitting it over TP ranks
/// (vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE).
pub(crate) const VOCAB_PAD: u64 = 64;
/// Tokens per fused-MoE chunk (vllm/envs.py VLLM_FUSED_MOE_CHUNK_SIZE default 32768).
const MOE_CHUNK: u64 = 32_768;
/// AWQ/GPTQ group size (the published checkpoints' `group_size`).
const GROUP: u128 = 128;

/// One KV-cache group: layers of one attention type that share a block table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvGroup {
    /// `full` or `sliding`.
    pub kind: &'static str,
    /// Layers in the group (padded to the group size).
    pub layers: u64,
    /// Sliding window, tokens.
    pub window: Option<u64>,
    /// Blocks one request at max-model-len needs in this group.
    pub blocks_per_request: u64,
}

/// vLLM's accounting of one GPU (every TP rank is the same).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeReport {
    /// Model dtype served.
    pub dtype: DType,
    /// Bytes per KV element.
    pub kv_dtype_bytes: u64,
    /// Tensor-parallel ranks.
    pub tp: u64,
    /// Pipeline-parallel stages.
    pub pp: u64,
    /// The pipeline stage this report is for: the one with the fewest KV blocks, which sets every
    /// stage's block count (0 without pipeline parallelism).
    pub pp_rank: u64,
    /// Every pipeline stage (one entry without pipeline parallelism).
    pub pp_ranks: Vec<PpRankReport>,
    /// The vLLM release whose rules were applied.
    pub vllm_version: String,
    /// The GPU model runner whose profile run was reproduced (`None` on the V0 engine).
    pub model_runner: Option<ModelRunner>,
    /// Of the activation peak: the CUDA-graph memory estimate vLLM ≥ 0.20 adds to it before sizing
    /// the KV cache (0 when not applied).
    pub cuda_graph_estimate_bytes: u64,
    /// How that estimate was reached (`None` when not applied).
    pub cuda_graphs: Option<crate::serve_graphs::CudaGraphs>,
    /// Max model length.
    pub max_model_len: u64,
    /// Tokens of the profile run's forward.
    pub max_num_batched_tokens: u64,
    /// Requests of the profile run's sampler.
    pub max_num_seqs: u64,
    /// Block size, tokens.
    pub block_size: u64,
    /// Weights on this rank (vLLM's "Model loading took"), incl. the rotary cos/sin cache.
    pub weights_bytes: u64,
    /// Of which: quantisation scales and zero points.
    pub quant_scales_bytes: u64,
    /// Of which: the rotary cos/sin cache buffer.
    pub rotary_cache_bytes: u64,
    /// Of which: the drafter's weights (speculative decoding).
    pub draft_weights_bytes: u64,
    /// Of which: `--enable-lora`'s stacked adapter slots, allocated at model load.
    pub lora_slots_bytes: u64,
    /// Host memory of `--max-cpu-loras` adapters at the maximum rank (outside the GPU).
    pub lora_cpu_bytes: u64,
    /// Torch peak increase of the profile run.
    pub activation_peak_bytes: u64,
    /// Which moment of the profile run holds that peak.
    pub activation_peak_at: String,
    /// Non-torch memory added by the profile run (kernels loaded, NCCL buffers at TP ≥ 2).
    pub non_torch_bytes: u64,
    /// Buffers the runner keeps from start-up that neither the weights nor the profile run's
    /// peak count: Model Runner V2's per-request state ([`mrv2_state_buffers`]) and 0.33's
    /// cached Triton sampler buffer; 0 when `--non-torch-memory` is given (a logged figure holds
    /// them).
    pub runner_buffers_bytes: u64,
    /// weights + activation peak + non-torch + runner buffers ("Total non KV cache memory").
    pub non_kv_bytes: u64,
    /// total × gpu_memory_utilization.
    pub requested_bytes: u64,
    /// requested − non_kv, floored at 0 ("Available KV cache memory").
    pub kv_cache_bytes: u64,
    /// Bytes by which non_kv exceeds the requested memory (0 when it fits).
    pub shortfall_bytes: u64,
    /// The KV-cache pool built from `kv_cache_bytes`.
    #[serde(flatten)]
    pub pool: KvPool,
    /// Whether one request at max-model-len fits (vLLM refuses to start otherwise).
    pub fits: bool,
    /// CUDA context per process, outside vLLM's budget.
    pub cuda_context_bytes: u64,
    /// Stated assumptions and warnings.
    pub notes: Vec<String>,
}

/// One pipeline stage's share (vllm/distributed/utils.py get_pp_indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PpRankReport {
    /// Stage index.
    pub rank: u64,
    /// Decoder layers on the stage.
    pub layers: u64,
    /// Weights on one GPU of the stage.
    pub weights_bytes: u64,
    /// Profile-run activation peak on the stage (the sampler runs on the last stage only).
    pub activation_peak_bytes: u64,
    /// KV blocks the stage's own memory would allow.
    pub num_kv_blocks: u64,
}

impl ServeReport {
    /// What the process shows in nvidia-smi at least: the budget used plus the context
    /// (CUDA graphs add more unless `--enforce-eager`).
    pub fn process_bytes(&self) -> u64 {
        self.non_kv_bytes.saturating_add(self.kv_cache_bytes).saturating_add(self.cuda_context_bytes)
    }
}

pub(crate) fn invalid(what: &str, value: impl ToString, hint: &str) -> Error {
    Error::InvalidValue { what: what.into(), value: value.to_string(), hint: hint.into() }
}

/// Reproduce vLLM's start-up accounting for `model` under `cfg`.
pub fn serve(m: &Model, cfg: &ServeConfig) -> Result<ServeReport> {
    // `--disable-sliding-window` (vllm/config/model.py): the derived length is capped to the
    // window, then the window is dropped, so every layer caches the whole context.
    if cfg.disable_sliding_window {
        let Some(window) = m.sliding_window.filter(|_| m.sliding_layers > 0) else {
            return Err(invalid("--disable-sliding-window", "given", &format!("{} has no sliding-window layers", m.name)));
        };
        let mut full = m.clone();
        (full.sliding_layers, full.sliding_window) = (0, None);
        let derived = derived_max_len(m);
        let cap = if derived > 0 { derived.min(window) } else { window };
        let given = cfg.max_model_len;
        let mut r = serve(&full, &ServeConfig { disable_sliding_window: false, max_model_len: Some(given.unwrap_or(cap)), ..cfg.clone() })?;
        r.notes.push(format!(
            "--disable-sliding-window: all {} layers cache the whole context, and vLLM caps the derived max-model-len to the {window}-token window (config/model.py _get_and_verify_max_len){}",
            m.layers,
            match given {
                Some(l) if l > cap => format!("; --max-model-len {l} exceeds it, which vLLM refuses unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
                _ => String::new(),
            }
        ));
        return Ok(r);
    }
    let vlm = m.encoder.is_none() && m.seq2seq.is_none();
    // vLLM builds the checkpoint's architecture (`Model::as_served`): a Qwen3.5 config read as
    // its language model (Qwen3_5ForCausalLM, for training) is served as
    // Qwen3_5ForConditionalGeneration, tower included, unless --language-model-only.
    let strips = cfg.language_model_only && vlm && (m.multimodal.is_some() || m.vision_unloaded.is_some());
    let loads = !cfg.language_model_only && m.multimodal.is_none() && m.vision_unloaded.is_some();
    if strips || loads {
        let mut r = serve(&m.as_served(cfg.language_model_only), cfg)?;
        if strips {
            r.notes.push(format!(
                "--language-model-only: vLLM builds {}'s language model alone (no vision tower, no encoder profile); image inputs are refused at run time",
                m.name
            ));
        }
        return Ok(r);
    }
    match &m.multimodal {
        Some(mm) if vlm => {
            crate::serve_mm::check(m, mm, cfg)?;
            if m.ssm.is_some() {
                crate::serve_ssm::check(cfg)?;
            }
        }
        _ if m.ssm.is_some() && m.multimodal.is_none() => crate::serve_ssm::check(cfg)?,
        _ if m.seq2seq.is_some() => crate::serve_encdec::check(m, m.seq2seq.as_deref().expect("seq2seq"), cfg)?,
        // vLLM's encoder-only attention has no KV cache spec (encoder_only_attention.py
        // `get_kv_cache_spec` returns None), so the engine neither profiles nor sizes a pool
        // (v1/engine/core.py `_initialize_kv_caches`: "Attention free models don't need memory
        // for kv cache"): what it holds is the weights and one batch's activations.
        // (The encoders vLLM implements: bert.py, roberta.py — XLM-R too — and modernbert.py.)
        _ if m.encoder.is_some_and(|e| e.vision.is_none()) && matches!(m.model_type.as_str(), "bert" | "roberta" | "xlm-roberta" | "modernbert") => {
            return Err(invalid(
                "model",
                &m.model_type,
                &format!(
                    "{} is an encoder: vLLM serves it (pooling) with no KV cache — its encoder-only attention keeps none, so vLLM profiles nothing and sizes no pool; the GPU holds the weights and one batch's activations, which `vram estimate -m {} --mode infer --batch-size B --seq-len L` gives (the transformers forward, as a proxy for vLLM's)",
                    m.model_type, m.name
                ),
            ))
        }
        _ => crate::memory::require_decoder(m, "serving with vLLM")?,
    }
    // Llama 4's chunked local attention: vLLM turns its hybrid KV cache manager off for it by
    // default ("There is a latency regression when using chunked local attention with the hybrid
    // KV cache manager. Disabling it, by default", vllm/config/vllm.py), and without it every
    // layer's cache is full attention (kv_cache_utils.py unify_hybrid_kv_cache_specs).
    if m.llama4.is_some() && m.sliding_layers > 0 {
        let full = Model { sliding_layers: 0, sliding_window: None, ..m.clone() };
        let mut r = serve(&full, cfg)?;
        r.notes.push(format!(
            "Llama 4: vLLM disables its hybrid KV cache manager for chunked local attention by default, so the {} chunked layers cache the whole context as the {} others do (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 would keep at most a chunk of {} tokens there: not modelled)",
            m.sliding_layers,
            m.layers - m.sliding_layers,
            m.sliding_window.unwrap_or(0)
        ));
        return Ok(r);
    }
    if !cfg.max_model_len_auto {
        return serve_at(m, cfg);
    }
    // auto: the model's length if one request fits, else the longest that does (the pool
    // depends on the length only through sliding-window groups: re-run at the chosen length).
    let first = serve_at(m, &ServeConfig { max_model_len_auto: false, ..cfg.clone() })?;
    if first.fits {
        return Ok(first);
    }
    let longest = first.pool.max_model_len_that_fits;
    if longest == 0 {
        return Ok(first);
    }
    let mut r = serve_at(m, &ServeConfig { max_model_len: Some(longest), max_model_len_auto: false, ..cfg.clone() })?;
    r.notes.insert(
        0,
        format!("--max-model-len auto: {} tokens do not fit one request; the longest that does is {longest}", first.max_model_len),
    );
    Ok(r)
}

/// One pipeline stage: its decoder layers, and whether it holds the input embedding (first) and
/// the final norm, LM head and sampler (last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stage {
    rank: u64,
    /// The index of the stage's first decoder layer.
    start: u64,
    layers: u64,
    first: bool,
    last: bool,
}

impl Stage {
    /// The whole model as one stage (no pipeline parallelism).
    fn whole(m: &Model) -> Stage {
        Stage { rank: 0, start: 0, layers: m.layers, first: true, last: true }
    }
}

/// Layers per pipeline stage, as vllm/distributed/utils.py `get_pp_indices` splits them:
/// `layers // pp` each, and the remainder one each to partitions[-2], [-3], … — never the last
/// stage, which also holds the final norm and the LM head (VLLM_PP_LAYER_PARTITION unset).
pub fn pp_layers(layers: u64, pp: u64) -> Vec<u64> {
    let pp = pp.max(1) as usize;
    let mut parts = vec![layers / pp as u64; pp];
    let rem = (layers % pp as u64) as usize;
    for i in 2..rem + 2 {
        parts[pp - i] += 1;
    }
    parts
}

/// The budget of one GPU of one stage.
struct RankCalc {
    /// The drafter's share of `weights` (speculative decoding).
    draft_weights: u128,
    weights: u128,
    scales: u128,
    rotary: u128,
    lora_slots: u128,
    activation: u64,
    activation_at: String,
    cuda_graph: Option<crate::serve_graphs::CudaGraphs>,
    kept: u64,
    non_kv: u64,
    requested: u64,
    kv_cache: u64,
    shortfall: u64,
    pool: KvPool,
}

fn serve_at(m: &Model, cfg: &ServeConfig) -> Result<ServeReport> {
    let (max_len, mut notes) = validate(m, cfg)?;
    let tp = cfg.tp;
    let dtype = model_dtype(m, cfg);
    let e = dtype.bytes() as u128;
    let kv_b = cfg.kv_cache_dtype.map_or(dtype.bytes(), DType::bytes);
    let (batched, seqs) = scheduler_limits(m, cfg, max_len)?;
    crate::serve_graphs::check(cfg, batched)?;
    let non_torch_bytes =
        cfg.non_torch_memory.unwrap_or(non_torch_default(collective_ranks(m, cfg), cfg.gpu_nvswitch).saturating_sub(cublas_baseline(cfg)));
    let parts = pp_layers(m.layers, cfg.pp);
    let mut ranks = Vec::with_capacity(parts.len());
    for (r, &layers) in parts.iter().enumerate() {
        let stage = Stage { rank: r as u64, start: parts[..r].iter().sum(), layers, first: r == 0, last: r + 1 == parts.len() };
        ranks.push(rank_accounting(m, cfg, &stage, &mut notes, Spec { e, kv_b, batched, seqs, max_len, non_torch_bytes })?);
    }
    // Every stage gets the same number of blocks, the smallest any stage can hold
    // (vllm/v1/core/kv_cache_utils.py unify_kv_cache_configs): report that stage.
    let at = (0..ranks.len()).min_by_key(|&i| (ranks[i].pool.num_kv_blocks, u64::MAX - ranks[i].non_kv)).unwrap_or(0);
    let pp_ranks: Vec<PpRankReport> = ranks
        .iter()
        .zip(&parts)
        .enumerate()
        .map(|(i, (c, &layers))| {
            Ok(PpRankReport {
                rank: i as u64,
                layers,
                weights_bytes: to_u64(c.weights + c.scales + c.rotary + c.lora_slots, "weights")?,
                activation_peak_bytes: c.activation,
                num_kv_blocks: c.pool.num_kv_blocks,
            })
        })
        .collect::<Result<_>>()?;
    let c = ranks.swap_remove(at);
    if cfg.pp > 1 {
        let worst = pp_ranks.iter().max_by_key(|r| r.weights_bytes + r.activation_peak_bytes).map_or(0, |r| r.rank);
        notes.push(format!(
            "pipeline parallelism: layers per stage {:?} (get_pp_indices); embedding on stage 0, final norm, LM head and sampler on stage {}; stage {worst} holds the most non-KV memory; stage {at} has the fewest KV blocks and sets every stage's count",
            parts,
            cfg.pp - 1
        ));
    }
    let weights_bytes = to_u64(c.weights + c.scales + c.rotary + c.lora_slots, "weights")?;
    if let Some(kv) = cfg.kv_cache_memory_bytes {
        notes.push(format!(
            "--kv-cache-memory-bytes {kv}: the KV pool is set directly; --gpu-memory-utilization does not size it, and vLLM does not check that weights + activations + pool fit the GPU (vram does)"
        ));
    } else if let Some(n) = cfg.num_gpu_blocks_override {
        notes.push(format!(
            "--num-gpu-blocks-override {n}: the KV pool is {n} blocks ({:.2} GiB) whatever the profile left (v1/core/kv_cache_planning.py); vLLM does not check that weights + activations + pool fit the GPU (vram does)",
            c.kv_cache as f64 / GIB as f64
        ));
    }
    let fits = c.shortfall == 0 && c.pool.num_kv_blocks >= c.pool.blocks_per_request();
    notes.extend(serve_notes(m, cfg, non_torch_bytes, c.cuda_graph.as_ref(), &c.pool));
    notes.extend(crate::serve_ssm::note(m, &c.pool, cfg));
    Ok(ServeReport {
        dtype,
        kv_dtype_bytes: kv_b,
        tp,
        pp: cfg.pp,
        pp_rank: at as u64,
        pp_ranks,
        vllm_version: cfg.vllm_version.to_string(),
        model_runner: (cfg.engine == VllmEngine::V1).then(|| model_runner(m, cfg)),
        cuda_graph_estimate_bytes: c.cuda_graph.map_or(0, |g| g.bytes),
        cuda_graphs: c.cuda_graph,
        max_model_len: max_len,
        max_num_batched_tokens: batched,
        max_num_seqs: seqs,
        block_size: c.pool.block_size,
        weights_bytes,
        quant_scales_bytes: to_u64(c.scales, "scales")?,
        rotary_cache_bytes: to_u64(c.rotary, "rotary cache")?,
        draft_weights_bytes: to_u64(c.draft_weights, "drafter weights")?,
        lora_slots_bytes: to_u64(c.lora_slots, "LoRA slots")?,
        lora_cpu_bytes: to_u64(
            cfg.lora.map_or(0, |l| c.lora_slots * l.max_cpu_loras as u128 * tp as u128 / l.max_loras.max(1) as u128),
            "CPU LoRA cache",
        )?,
        activation_peak_bytes: c.activation,
        activation_peak_at: c.activation_at,
        non_torch_bytes,
        runner_buffers_bytes: c.kept,
        non_kv_bytes: c.non_kv,
        requested_bytes: c.requested,
        kv_cache_bytes: c.kv_cache,
        shortfall_bytes: c.shortfall,
        pool: c.pool,
        fits,
        cuda_context_bytes: cfg.cuda_context,
        notes,
    })
}

/// What every stage shares.
#[derive(Clone, Copy)]
struct Spec {
    e: u128,
    kv_b: u64,
    batched: u64,
    seqs: u64,
    max_len: u64,
    non_torch_bytes: u64,
}

fn rank_accounting(m: &Model, cfg: &ServeConfig, stage: &Stage, notes: &mut Vec<String>, s: Spec) -> Result<RankCalc> {
    let (tp, e) = (cfg.tp, s.e);
    let split = Split::of(cfg);
    let (weights, scales) = match (cfg.quantization, &m.seq2seq) {
        (_, Some(s2s)) => (crate::serve_encdec::rank_elements(m, s2s, tp) * e, 0),
        (Quantization::Checkpoint, None) => {
            let (w, sc, plan_notes) = checkpoint_rank_weights(m, split, e, stage, Some(mxfp4_alignment(cfg)))?;
            notes.extend(plan_notes);
            (w, sc)
        }
        (q, None) => rank_weights(m, q, split, e, stage),
    };
    let (weights, scales) = cpu_offload(m, cfg, stage, s.e, weights, scales, notes)?;
    let drafter = match &cfg.speculative {
        Some(sp) if stage.last && sp.method.has_drafter() => Some(drafter_on_rank(m, cfg, sp, split, s)?),
        _ => None,
    };
    let rotary = rotary_cache_positions(m) * m.rotary_dim as u128 * e;
    let (lora_slots, lora_buffer) = match cfg.lora {
        Some(l) => lora_slots(m, &l, tp, e, s.batched)?,
        None => (0, 0),
    };
    let vision = match &m.multimodal {
        Some(mm) if stage.first => Some(crate::serve_mm::plan(m, mm, cfg, s.batched, s.seqs, s.max_len, e)?),
        _ => None,
    };
    let weights = weights + vision.as_ref().map_or(0, |v| v.weights + v.buffers) + drafter.as_ref().map_or(0, |d| d.weights);
    let weights_bytes = to_u64(weights + scales + rotary + lora_slots, "weights")?;
    let sampler = match cfg.engine {
        VllmEngine::V0 => Sampler::V0,
        VllmEngine::V1 => match model_runner(m, cfg) {
            // 0.17 added the Triton top-k/top-p kernel (ops/topk_topp_triton.py: absent in the
            // 0.16.0 sdist, present in 0.17.0's), used from 8 rows.
            ModelRunner::V1
                if cfg.flashinfer_sampler != Some(true)
                    && (cfg.vllm_version < (VllmVersion { major: 0, minor: 17 }) || s.seqs.min(s.batched) < 8) =>
            {
                Sampler::V1Sort
            }
            ModelRunner::V1 => Sampler::V1,
            ModelRunner::V2 if cfg.vllm_version >= VllmVersion::MRV2_SAMPLER_WARMUP => Sampler::Mrv2Warmup(flashinfer_sampler(cfg)),
            ModelRunner::V2 => Sampler::Mrv2,
        },
    };
    let rejection = cfg.speculative.is_some() && matches!(sampler, Sampler::V1 | Sampler::V1Sort);
    let (mut act, mut act_at) = profile_peak(m, stage.last.then_some(sampler), s.batched, s.seqs, split, e, rejection);
    // The drafter's forward over the same tokens, the target's hidden states held
    // (gpu_model_runner.py `_dummy_run` → `drafter.dummy_run`).
    if let Some((f, held)) = drafter.as_ref().and_then(|d| d.forward.as_ref().map(|f| (f, d.held_hidden))) {
        let (peak, _) = forward_peak_split(f, s.batched, split, e);
        let held = (1 + held as u128) * s.batched as u128 * m.hidden as u128 * e;
        if peak + held > act {
            (act, act_at) = (peak + held, format!("the drafter's forward of {} tokens, the target's hidden states held", s.batched));
        }
    }
    if let Some(v) = &vision {
        (act, act_at) = vision_peak(v, act, act_at);
        notes.push(vision_note(v));
        if m.multimodal.as_ref().and_then(|mm| mm.anyres.as_ref()).is_some_and(|a| a.max_tiles.is_some()) {
            notes.push(
                "LLaVA-OneVision also takes video (16 frames of 196 pooled tokens: 3137 a video, 11,664 tower patches); vLLM profiles only the modality with the most tokens per item (multimodal/encoder_budget.py get_modality_with_max_tokens), the image, so a video's larger tower pass is not in its budget or here".into(),
            );
        }
    }
    // The encoder's outputs stay in the encoder cache through the decoder's dummy forward and
    // sampler (profile_run resets it after).
    let encoder = m.seq2seq.as_ref().map(|s2s| crate::serve_encdec::encoder_profile(m, s2s, s.batched, s.seqs, tp, e));
    if let Some(enc) = &encoder {
        if enc.encoder_peak > act + enc.outputs {
            (act, act_at) = (enc.encoder_peak, format!("encoder over {} dummy clip(s) of {} positions", enc.items, enc.tokens_per_item));
        } else {
            act += enc.outputs;
            act_at = format!("{act_at}, with {} clip(s) of encoder outputs held", enc.items);
        }
    }
    act += lora_buffer;
    // vLLM ≥ 0.20 adds its CUDA-graph estimate to the peak activation memory before sizing the KV
    // cache (vllm/v1/worker/gpu_worker.py determine_available_memory:
    // `peak_activation_memory = torch_peak_increase + cudagraph_memory_estimate_applied`).
    let cuda_graph = cuda_graph_estimate(m, cfg, stage.layers, s.seqs, s.batched);
    let graph_bytes = cuda_graph.map_or(0, |g| g.bytes);
    act += graph_bytes as u128;
    if graph_bytes > 0 {
        act_at = format!("{act_at}, plus the CUDA-graph estimate {:.2} GiB", graph_bytes as f64 / GIB as f64);
    }
    let activation = to_u64(act, "profile-run activations")?;
    // A sampler buffer the profile run leaves allocated: consumed memory beside the non-torch
    // increase, unless that was given from a log (which holds it).
    let kept = if stage.last && cfg.non_torch_memory.is_none() { sampler_persistent(m, cfg, s.batched, s.seqs) } else { 0 };
    // Model Runner V2's request state, also consumed memory (and in a logged non-torch figure).
    let mrv2 = cfg.engine == VllmEngine::V1 && model_runner(m, cfg) == ModelRunner::V2;
    let state_buffers = if stage.last && mrv2 && cfg.non_torch_memory.is_none() && cfg.vllm_version >= VllmVersion::MRV2_STATE_BUFFERS {
        mrv2_state_buffers(m.vocab, s.seqs, s.batched)
    } else {
        0
    };
    if state_buffers > 0 {
        notes.push(format!(
            "Model Runner V2 keeps its per-request sampling state on the GPU from start-up ({:.2} GiB here: penalty bin counts, {} requests × {} vocabulary int32, and smaller tables; vllm/v1/worker/gpu/sample/penalties.py, built with the sampler after the start-up snapshot): the \"runner buffers\" row, which vLLM's log counts in its \"consumed memory (weights + non-torch)\"",
            state_buffers as f64 / GIB as f64,
            s.seqs,
            m.vocab
        ));
    }
    if kept > 0 {
        notes.push(format!(
            "vLLM ≥ 0.33 samples its warm-up pass with Triton's top-k/top-p on this GPU (no FlashInfer sampler): its cached fp32 buffer, {:.2} GiB, stays allocated and is counted with the non-torch memory",
            kept as f64 / GIB as f64
        ));
    }
    let kept = kept.saturating_add(state_buffers);
    // EPLB's tables, built after the weights load and kept.
    let eplb_tables = match (cfg.eplb, &m.moe) {
        (Some(e), Some(moe)) if cfg.non_torch_memory.is_none() => {
            to_u64(e.buffer_bytes(moe.experts, m.moe_layers() * stage.layers / m.layers.max(1)), "EPLB tables")?
        }
        _ => 0,
    };
    if eplb_tables > 0 {
        notes.push(format!(
            "EPLB: {} redundant experts{}, and its tables ({:.2} GiB per GPU: the logical-to-physical map of 1024 slots an expert, a {}-step load window; distributed/eplb/eplb_state.py) kept from start-up",
            cfg.eplb.map_or(0, |e| e.redundant_experts),
            if cfg.eplb.is_some_and(|e| e.redundant_experts > 0) { " held beside the model's, spread over the expert-parallel GPUs" } else { "" },
            eplb_tables as f64 / GIB as f64,
            cfg.eplb.map_or(0, |e| e.window_size)
        ));
    }
    let kept = kept.saturating_add(eplb_tables);
    let mut staged = m.clone();
    staged.layers = stage.layers;
    if m.ssm.as_ref().is_some_and(|s| s.shared.is_some()) {
        // Zamba2's shared attention caches as many KV heads as query heads (vLLM's
        // Zamba2Attention builds QKVParallelLinear without a KV-head count).
        staged.kv_heads = m.heads;
    }
    if m.sliding_layers >= m.layers {
        staged.sliding_layers = stage.layers;
    }
    let state = crate::serve_ssm::state_cache(m, cfg)?;
    let checkpoints = crate::serve_ssm::prefill_checkpoints(m, cfg);
    let pool_spec = |kv_cache: u64| PoolSpec {
        state,
        mamba_cache_mode: crate::serve_ssm::cache_mode(m, cfg),
        prefill_checkpoints: checkpoints,
        tokens_from_concurrency: cfg.vllm_version >= VllmVersion::TOKENS_FROM_CONCURRENCY,
        draft_bytes_per_token: drafter.as_ref().filter(|d| !d.joins_target_groups).map_or(0, |d| d.kv_bytes_per_token),
        draft_layers: drafter.as_ref().filter(|d| d.joins_target_groups).map_or(0, |d| d.kv_layers),
        speculative_tokens: cfg.speculative.as_ref().map_or(0, |sp| sp.num_speculative_tokens),
        ..PoolSpec::new(kv_cache, s.max_len, s.batched, cfg.block_size, s.kv_b, tp)
    };
    // 0.33's Gated DeltaNet prefill checkpoints: a workspace sized in the profile run and kept.
    let checkpoint_workspace = if checkpoints {
        let bs = kv_pool(&staged, &pool_spec(0))?.block_size;
        crate::serve_ssm::checkpoint_workspace(m, tp, s.batched, bs)?
    } else {
        0
    };
    let non_kv = weights_bytes
        .checked_add(activation)
        .and_then(|x| x.checked_add(s.non_torch_bytes))
        .and_then(|x| x.checked_add(kept))
        .and_then(|x| x.checked_add(checkpoint_workspace))
        .ok_or(Error::Overflow { what: "non-KV memory".into() })?;
    // `--num-gpu-blocks-override N`: the pool is N blocks whatever the profile left
    // (v1/core/kv_cache_planning.py: the available memory becomes N × the bytes of one block).
    let override_bytes = match cfg.num_gpu_blocks_override {
        Some(n) => {
            let spec = pool_spec(0);
            let probe = kv_pool(&staged, &spec)?;
            // A block spans every layer slot of a group, and a drafter's own-shape layers beside it.
            let per_block = probe
                .page_size_bytes
                .checked_mul(probe.group_size.max(1))
                .and_then(|b| b.checked_add(spec.draft_bytes_per_token.checked_mul(probe.block_size)?));
            Some(per_block.and_then(|b| b.checked_mul(n)).ok_or(Error::Overflow { what: "--num-gpu-blocks-override".into() })?)
        }
        None => None,
    };
    let (requested, kv_cache, shortfall) = match cfg.kv_cache_memory_bytes.or(override_bytes) {
        // The pool is what was asked for; the process needs non-KV + pool of the whole GPU.
        Some(kv) => {
            let need = non_kv.saturating_add(kv);
            (need, kv, need.saturating_sub(cfg.gpu_memory.saturating_sub(cfg.cuda_context)))
        }
        None => {
            let requested = (cfg.gpu_memory as f64 * cfg.gpu_memory_utilization) as u64;
            (requested, requested.saturating_sub(non_kv), non_kv.saturating_sub(requested))
        }
    };
    let pool = kv_pool(&staged, &pool_spec(kv_cache))?;
    if let (Some(sp), true) = (&cfg.speculative, stage.last) {
        notes.push(speculative_note(sp, drafter.as_ref(), rejection, cuda_graph.is_some(), &pool));
    }
    if let Some(enc) = &encoder {
        notes.push(crate::serve_encdec::note(enc, &pool, s.max_len));
    }
    Ok(RankCalc {
        draft_weights: drafter.as_ref().map_or(0, |d| d.weights),
        weights,
        scales,
        rotary,
        lora_slots,
        activation,
        kept,
        activation_at: act_at,
        cuda_graph,
        non_kv,
        requested,
        kv_cache,
        shortfall,
        pool,
    })
}

/// What speculative decoding changed, for the report.
fn speculative_note(
    sp: &crate::serve_spec::Speculative,
    d: Option<&crate::serve_spec::Drafter>,
    rejection: bool,
    graphs: bool,
    pool: &KvPool,
) -> String {
    let k = sp.num_speculative_tokens;
    let drafter = match d {
        Some(d) => format!(
            "the drafter — {} — {:.2} GiB of the weights row (\"Model loading took\" holds it, gpu_model_runner.py load_model); its {} attention layer(s) join the KV cache at {} bytes a token, so a block holds the drafter's K and V too ({} bytes a token in all)",
            d.what,
            d.weights as f64 / GIB as f64,
            d.kv_layers,
            d.kv_bytes_per_token,
            pool.kv_bytes_per_token
        ),
        None => "proposals come from the CPU (no drafter weights, no KV layers)".into(),
    };
    format!(
        "--speculative-config method {} with {k} speculative token(s): {drafter}; {}{}{}read in vLLM's source (0.19.1 to 0.33.0 sdists); the drafter's KV layers and state blocks match a public Qwen3.6-27B MTP log (validation/vllm/spec_logs.jsonl), its weights, profile-run peak and graph bytes are not yet checked against one",
        sp.method.name(),
        if rejection { "the V1 runner's profile also runs the rejection sampler over [2 × max-num-seqs, vocabulary] dummy logits; " } else { "" },
        if pool.state.is_some() { format!("each state group keeps {k} more state block(s) a request; ") } else { String::new() },
        if graphs { format!("the CUDA-graph note says what decode batches of 1 + {k} tokens do to the graphs; ") } else { String::new() },
    )
}

/// The drafter of `--speculative-config` on one GPU of the last stage: its weights as stored
/// (an MTP layer priced as the checkpoint's average decoder layer; a draft model as the target
/// is priced, rotary cache included), its KV layers and its forward.
fn drafter_on_rank(
    m: &Model,
    cfg: &ServeConfig,
    sp: &crate::serve_spec::Speculative,
    split: Split,
    s: Spec,
) -> Result<crate::serve_spec::Drafter> {
    drafter_weights(m, cfg.quantization, Some(mxfp4_alignment(cfg)), sp, split, s.e, s.kv_b)
}

/// The drafter of `sp` on one GPU, for vLLM and SGLang alike (both shard as vLLM does):
/// `mxfp4_align` pads MXFP4 experts as vLLM's kernels do (`None` for SGLang).
pub(crate) fn drafter_weights(
    m: &Model,
    quantization: Quantization,
    mxfp4_align: Option<(u64, u64)>,
    sp: &crate::serve_spec::Speculative,
    split: Split,
    e: u128,
    kv_b: u64,
) -> Result<crate::serve_spec::Drafter> {
    use crate::serve_spec::SpecMethod;
    let priced = |d: &Model, quantization: Quantization, stage: &Stage| -> Result<u128> {
        Ok(match quantization {
            Quantization::Checkpoint if d.quantization.is_some() => {
                let (w, sc, _) = checkpoint_rank_weights(d, split, e, stage, mxfp4_align)?;
                w + sc
            }
            Quantization::Checkpoint => {
                let (w, sc) = rank_weights(d, Quantization::None, split, e, stage);
                w + sc
            }
            q => {
                let (w, sc) = rank_weights(d, q, split, e, stage);
                w + sc
            }
        })
    };
    let mtp = if sp.method == SpecMethod::Mtp {
        let stage = Stage { rank: 0, start: m.layers.saturating_sub(m.mtp_layers), layers: m.mtp_layers, first: false, last: false };
        priced(m, quantization, &stage)?
    } else {
        0
    };
    let mut d = crate::serve_spec::drafter(m, sp, split.tp, e, kv_b, mtp);
    if let (SpecMethod::DraftModel, Some(dm)) = (sp.method, sp.draft.as_deref()) {
        // The draft model is loaded as stored, unquantized unless its checkpoint is.
        d.weights = priced(dm, Quantization::Checkpoint, &Stage::whole(dm))? + rotary_cache_positions(dm) * dm.rotary_dim as u128 * e;
    }
    Ok(d)
}

/// Rows of vLLM's rotary cos/sin caches: RotaryEmbedding's `cos_sin_cache` is
/// [positions, rotary_dim] in the model dtype (vllm/model_executor/layers/rotary_embedding.py),
/// measured in "Model loading took"; get_rope keeps one instance per distinct setting per
/// process, so every stage holds each once. Positions: max_position_embeddings, times the factor
/// for linear and dynamic-NTK scaling (`max_position_embeddings * scaling_factor`), the original
/// context times the factor for YaRN; Llama-3's scaling keeps the length. Gemma-3's sliding
/// layers rotate with their own base (`rope_local_base_freq`, unscaled): a second cache. Other
/// kinds (Phi-3's LongRoPE, whose short and long caches are concatenated) are counted at
/// max_position_embeddings, which undercounts them.
fn rotary_cache_positions(m: &Model) -> u128 {
    let base = m.max_positions as u128;
    let scaled = match &m.rope_scaling {
        Some(r) if matches!(r.kind.as_str(), "linear" | "dynamic") => (base as f64 * r.factor) as u128,
        Some(r) if r.kind == "yarn" => (r.native_positions as f64 * r.factor) as u128,
        _ => base,
    };
    let local = if m.model_type.starts_with("gemma3") && m.sliding_layers > 0 { base } else { 0 };
    scaled + local
}

/// A vision-language model's profile peak: the encoder pass over the budget's images, or the
/// language model's dummy forward with the encoder outputs still cached, whichever is larger
/// (gpu_model_runner.py profile_run keeps `encoder_cache` until after the dummy sampler run).
fn vision_peak(v: &crate::serve_mm::VisionServe, lm: u128, lm_at: String) -> (u128, String) {
    let with_outputs = lm + v.outputs;
    if v.encoder_peak > with_outputs {
        (v.encoder_peak, format!("vision encoder over {} image(s) of {} patches", v.items, v.patches_per_item))
    } else {
        (with_outputs, format!("{lm_at}, with {} image(s) of encoder outputs cached", v.items))
    }
}

fn vision_note(v: &crate::serve_mm::VisionServe) -> String {
    let buffers = match v.buffers {
        0 => String::new(),
        b => format!(
            " plus {:.2} GiB of DeepStack input buffers (one per level, max-num-batched-tokens × the text width)",
            b as f64 / GIB as f64
        ),
    };
    format!(
        "vision: the tower and projector take {:.2} GiB per GPU (in the model dtype: quantized checkpoints keep the tower unquantized){buffers}; the encoder cache budget is {} tokens, profiled with {} image(s) of the maximum size ({} tokens, {} patches each) — vLLM logs this line; the encoder pass peaks at {:.2} GiB, modelled from vLLM's model code, not yet checked against a logged profile",
        v.weights as f64 / GIB as f64,
        v.budget,
        v.items,
        v.tokens_per_item,
        v.patches_per_item,
        v.encoder_peak as f64 / GIB as f64
    )
}

/// The CUDA-graph memory vLLM subtracts from the KV budget: from v0.20 on, unless
/// `--enforce-eager` (no graphs) or `--kv-cache-memory-bytes` (no profiling of the budget), on
/// the V1 engine; `None` where it does not apply. The size is modelled per layer-graph
/// ([`crate::serve_graphs`]) unless `--cuda-graph-memory` gives it.
///
/// Model Runner V2 estimates from 0.29 on ([`VllmVersion::MRV2_CUDA_GRAPH_ESTIMATE`]); before,
/// its `profile_cudagraph_memory` returns 0 and its logs size the pool as requested − consumed −
/// peak activation with no graph term (validation/vllm/logs.jsonl, the v0.27 entry).
fn cuda_graph_estimate(m: &Model, cfg: &ServeConfig, layers: u64, seqs: u64, batched: u64) -> Option<crate::serve_graphs::CudaGraphs> {
    let applies = cfg.vllm_version >= VllmVersion::CUDA_GRAPH_ESTIMATE
        && cfg.engine == VllmEngine::V1
        && (model_runner(m, cfg) == ModelRunner::V1 || cfg.vllm_version >= VllmVersion::MRV2_CUDA_GRAPH_ESTIMATE)
        && !cfg.enforce_eager
        && cfg.cudagraph_mode != Some(crate::serve_graphs::CudagraphMode::None)
        && cfg.kv_cache_memory_bytes.is_none();
    let draft_layers = cfg.speculative.as_ref().map_or(0, |s| match s.method {
        crate::serve_spec::SpecMethod::Mtp => m.mtp_layers,
        _ => s.draft.as_ref().map_or(0, |d| d.layers),
    });
    applies.then(|| crate::serve_graphs::estimate(cfg, layers, seqs, batched, draft_layers, model_runner(m, cfg)))
}

/// vllm/config/model.py _resolve_auto_dtype: the checkpoint's dtype; float32 served in bf16.
fn model_dtype(m: &Model, cfg: &ServeConfig) -> DType {
    auto_dtype(m, cfg.dtype)
}

/// `--dtype auto`: the checkpoint's dtype, float32 checkpoints served in bf16 (vLLM's
/// config/model.py _resolve_auto_dtype; SGLang's configs/model_config.py _get_and_verify_dtype
/// does the same for fp16/bf16/fp32 checkpoints).
pub(crate) fn auto_dtype(m: &Model, given: Option<DType>) -> DType {
    given.unwrap_or(match m.stored_dtype {
        Some(DType::F16) => DType::F16,
        _ => DType::BF16,
    })
}

/// `--enable-lora`: every LoRA-capable linear gets `max_loras` slots at `max_lora_rank`, per
/// slice of a merged projection (vllm/lora/layers/base_linear.py `create_lora_weights`:
/// lora_a [max_loras, 1, rank, input] and lora_b [max_loras, 1, output, rank] in the model
/// dtype; column-parallel layers split the output over TP, row-parallel ones the input). The
/// profile run also allocates punica's fp32 shrink buffer [slices, tokens, rank] inside the
/// widest LoRA layer (vllm/lora/punica_wrapper/punica_gpu.py `add_lora_linear`). Returns the
/// slot bytes on one rank and that transient.
fn lora_slots(m: &Model, l: &ServeLora, tp: u64, e: u128, batched: u64) -> Result<(u128, u128)> {
    if l.max_loras == 0 || l.max_loras > 1024 {
        return Err(invalid("--max-loras", l.max_loras, "between 1 and 1024 (vLLM's default is 1)"));
    }
    if !LORA_RANKS.contains(&l.max_lora_rank) {
        return Err(invalid("--max-lora-rank", l.max_lora_rank, "one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (vLLM's LoRAConfig)"));
    }
    if l.max_cpu_loras < l.max_loras {
        return Err(invalid("--max-cpu-loras", l.max_cpu_loras, "at least --max-loras (vLLM refuses fewer)"));
    }
    if m.moe.is_some() {
        return Err(invalid(
            "--enable-lora",
            "true",
            "LoRA slots for fused MoE experts are not modelled yet; estimate without --enable-lora and add the adapters' size by hand",
        ));
    }
    let (n, r, tp) = (l.max_loras as u128, l.max_lora_rank as u128, tp as u128);
    let mut slots = 0u128;
    for t in m.tensors().iter().filter(|t| t.role == Role::Linear && t.name.starts_with("layers.")) {
        let (out, inp) = (t.rows as u128, t.cols as u128);
        let row_parallel = ["o_proj", "down_proj", "fc2"].iter().any(|k| t.name.contains(k));
        let (a_in, b_out) = if row_parallel { (inp / tp, out) } else { (inp, out / tp) };
        slots += t.count as u128 * n * r * (a_in + b_out) * e;
    }
    let slices = if m.attention.fused_qkv { 1 } else { 3 };
    Ok((slots, slices * batched as u128 * r * 4))
}

/// Non-torch increase: lazily loaded kernels and library handles first touched by the profile
/// run (150 MiB, a stated assumption), plus at TP ≥ 2 the buffers of NCCL and of vLLM's custom
/// all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py). Both TP shares are
/// empirical constants from the dev-set logs (validation/vllm/logs.jsonl):
/// - Hopper/Blackwell on an NVSwitch: 1.79 GiB more per GPU — the difference between the
///   non-torch memory vLLM logged for Llama-3-8B on H100 at TP 2 (3.58 GiB) and at TP 1
///   (1.79 GiB), vllm-project/vllm#10511. That NCCL's NVLink-SHARP buffers are the cause is an
///   interpretation (they exist only on NVSwitch systems of that generation).
/// - other GPUs: 256 MiB more, which covers every other multi-GPU log in the set (total 0.34 to
///   0.43 GiB on 4× A100-40GB, vllm-project/vllm#16570; 0.25 GiB on 2× RTX 4090,
///   vllm-project/vllm#13061; 0.20 GiB on RTX 3090s, vllm-project/vllm#14447).
///
/// Override with --non-torch-memory.
pub fn non_torch_default(tp: u64, nvswitch: bool) -> u64 {
    match (tp > 1, nvswitch) {
        (true, true) => 150 * MIB + TP_NON_TORCH,
        (true, false) => 150 * MIB + 256 * MIB,
        _ => 150 * MIB,
    }
}

/// The GPUs one rank runs collectives with in the profile run: its TP group, and for a MoE model
/// over data-parallel ranks every TP × DP GPU (each MoE layer gathers the replicas' tokens). An
/// assumption: NCCL's buffers are taken to be those of a TP group of that size.
fn collective_ranks(m: &Model, cfg: &ServeConfig) -> u64 {
    if m.moe.as_ref().is_some_and(|moe| moe.experts > 0) {
        cfg.tp.saturating_mul(cfg.dp.max(1))
    } else {
        cfg.tp
    }
}

/// 3.58 − 1.79 GiB (see `non_torch_default`).
const TP_NON_TORCH: u64 = 1833 * MIB;

/// The flags vLLM checks before it loads anything, and the context length they imply.
fn validate(m: &Model, cfg: &ServeConfig) -> Result<(u64, Vec<String>)> {
    if !(cfg.gpu_memory_utilization > 0.0 && cfg.gpu_memory_utilization <= 1.0) {
        return Err(invalid("--gpu-memory-utilization", cfg.gpu_memory_utilization, "a fraction in (0, 1]"));
    }
    if cfg.engine == VllmEngine::V0 && cfg.model_runner.is_some() {
        return Err(invalid("--model-runner", "with --vllm-engine v0", "the V1 engine's choice only; the V0 engine has its own runner"));
    }
    if cfg.model_runner == Some(ModelRunner::V2) && cfg.vllm_version < (VllmVersion { major: 0, minor: 16 }) {
        return Err(invalid("--model-runner", "v2", "vLLM 0.16 or later (Model Runner V2 landed in 0.16, vllm-project/vllm#25266)"));
    }
    let tp = cfg.tp;
    if tp == 0 || tp > 1024 {
        return Err(invalid("--tensor-parallel-size", tp, "between 1 and 1024"));
    }
    // vLLM requires the attention heads to split evenly (config/parallel verify_with_parallel_config);
    // a model without attention (Mamba, Mamba-2) splits its mixers' channels instead, which
    // serve_ssm.rs checks.
    let attention_free = m.ssm.as_ref().is_some_and(|s| s.attention_layers == 0 && !s.parallel_attention);
    if m.heads % tp != 0 && !attention_free {
        return Err(invalid(
            "--tensor-parallel-size",
            tp,
            &format!("vLLM needs it to divide the {} attention heads of {}", m.heads, m.name),
        ));
    }
    if cfg.engine == VllmEngine::V1 && cfg.vllm_version < VllmVersion::V1_DEFAULT {
        return Err(invalid(
            "--vllm-version",
            cfg.vllm_version,
            "the V1 engine is modelled from vLLM 0.8; for older releases pass --vllm-engine v0",
        ));
    }
    if let Some(spec) = &cfg.speculative {
        if cfg.engine == VllmEngine::V0 {
            return Err(invalid(
                "--speculative-config",
                "with --vllm-engine v0",
                "the V1 engine's speculative decoding is modelled, not V0's",
            ));
        }
        crate::serve_spec::check(m, spec, cfg.pp)?;
        if spec.method == crate::serve_spec::SpecMethod::NgramGpu && model_runner(m, cfg) == ModelRunner::V1 {
            return Err(invalid(
                "speculative_config.method",
                "ngram_gpu",
                "under the V1 runner it keeps every request's tokens on the GPU ([max-num-seqs, max-model-len] int32, gpu_model_runner.py token_ids_gpu_tensor), which vram does not model; method ngram is, and ngram_gpu under Model Runner V2 (vLLM ≥ 0.29, or --model-runner v2)",
            ));
        }
    }
    let pp = cfg.pp;
    if pp == 0 || pp > m.layers.max(1) {
        return Err(invalid("--pipeline-parallel-size", pp, &format!("between 1 and the {} layers of {}", m.layers, m.name)));
    }
    if pp > 1 {
        let refuse = |why: &str| {
            Err(invalid(
                "--pipeline-parallel-size",
                pp,
                &format!("{why}; vram does not model that split yet (estimate with --pipeline-parallel-size 1)"),
            ))
        };
        if m.sliding_layers > 0 && m.sliding_layers < m.layers {
            return refuse("the model mixes sliding-window and full-attention layers, whose stages hold different mixes");
        }
        if m.moe_layers() > 0 && m.moe_layers() < m.layers {
            return refuse("the model mixes dense and MoE layers, whose stages differ in size");
        }
        if m.embed_dim != m.hidden {
            return refuse("the model projects its embeddings (project_in / project_out)");
        }
        if cfg.lora.is_some() {
            return refuse("with --enable-lora");
        }
        if m.tensors().iter().any(|t| t.name.starts_with("layers.") && t.count % m.layers.max(1) != 0) {
            return refuse("the model's layers are not all alike");
        }
    }
    if cfg.block_size == 0 || cfg.block_size > 4096 {
        return Err(invalid("--block-size", cfg.block_size, "vLLM uses 16 (CUDA); 1 to 4096"));
    }
    let mut notes = Vec::new();
    let derived = derived_max_len(m);
    let max_len = match cfg.max_model_len {
        Some(l) => l,
        None if derived > 0 => derived,
        // vllm/config/model.py `_get_and_verify_max_len`: none of its length keys in the config
        // (max_position_embeddings, n_positions, max_seq_len, seq_length, …) → 2048, with a
        // warning ("Assuming the model's maximum length is 2048").
        None => {
            notes.push(format!(
                "--max-model-len {VLLM_DEFAULT_MAX_LEN}: the config names no maximum length (no max_position_embeddings, n_positions or seq_length), so vLLM assumes {VLLM_DEFAULT_MAX_LEN} and says so in its log; pass --max-model-len for yours"
            ));
            VLLM_DEFAULT_MAX_LEN
        }
    };
    if max_len == 0 || max_len > 1 << 24 {
        return Err(invalid("--max-model-len", max_len, "between 1 and 16777216"));
    }
    if derived > 0 && max_len > derived {
        notes.push(format!(
            "--max-model-len {max_len} exceeds the {derived} tokens vLLM derives from the config (max_position_embeddings{}): vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
            if derived == m.max_positions { String::new() } else { format!(" {} with its RoPE scaling", m.max_positions) }
        ));
    }
    Ok((max_len, notes))
}

/// `--max-num-batched-tokens` and `--max-num-seqs`: the user's, else vLLM's defaults for the
/// engine generation and GPU. A new engine (another vLLM version, SGLang) adds its row here.
fn scheduler_limits(m: &Model, cfg: &ServeConfig, max_len: u64) -> Result<(u64, u64)> {
    // vllm/engine/arg_utils.py get_batch_defaults: `vllm serve` on GPUs with ≥ 70 GiB other than
    // the A100 gets 8192 batched tokens and 1024 sequences, from 0.28 16384 tokens on GPUs with
    // ≥ 160 GiB (B200, MI300X; read in the 0.28.0 and 0.33.0 sources, absent in 0.25.0); smaller
    // GPUs 2048 and 256.
    let big = cfg.gpu_memory >= 70 * GIB && !cfg.gpu_is_a100;
    let huge = cfg.gpu_memory >= 160 * GIB && cfg.vllm_version >= (VllmVersion { major: 0, minor: 28 });
    let (batched, seqs) = match cfg.engine {
        VllmEngine::V1 => (
            if huge {
                16_384
            } else if big {
                8192
            } else {
                2048
            },
            if big || huge { 1024 } else { 256 },
        ),
        // V0 (config.py SchedulerConfig): without chunked prefill, max(max_model_len, 2048)
        // tokens; chunked prefill (on by default past 32K contexts) 2048; 256 sequences.
        VllmEngine::V0 => (if max_len > 32_768 { 2048 } else { max_len.max(2048) }, 256),
    };
    if cfg.performance_mode != PerformanceMode::Balanced && cfg.vllm_version < (VllmVersion { major: 0, minor: 19 }) {
        return Err(invalid(
            "--performance-mode",
            format!("{:?}", cfg.performance_mode).to_lowercase(),
            "a vLLM ≥ 0.19 setting (vllm/config/vllm.py); drop it for older releases",
        ));
    }
    // `throughput` doubles the defaults that were not given (arg_utils.py, from 0.19).
    let twice = if cfg.performance_mode == PerformanceMode::Throughput { 2 } else { 1 };
    let (batched, seqs) = (batched * twice, seqs * twice);
    // Without chunked prefill a default batch holds a whole prompt (arg_utils.py
    // `max(max_model_len, max_num_batched_tokens)`), and vLLM refuses a given one that cannot
    // (config/scheduler.py verify_max_model_len).
    let batched = match (cfg.chunked_prefill, cfg.engine, cfg.max_num_batched_tokens) {
        (false, VllmEngine::V1, None) => batched.max(max_len),
        (false, VllmEngine::V1, Some(b)) if b < max_len => {
            return Err(invalid(
                "--max-num-batched-tokens",
                b,
                &format!("at least max-model-len ({max_len}) without chunked prefill: vLLM refuses a batch that cannot hold one prompt (config/scheduler.py verify_max_model_len); raise it, lower --max-model-len, or keep chunked prefill on"),
            ))
        }
        _ => batched,
    };
    let seqs = cfg.max_num_seqs.unwrap_or(seqs);
    let batched = match (cfg.max_num_batched_tokens, &m.seq2seq) {
        (Some(b), _) => b,
        // Encoder-decoders run without chunked prefill (config/scheduler.py): the default is
        // raised to max_model_len and capped at max_num_seqs × max_model_len
        // (engine/arg_utils.py, "Some models (e.g., Whisper) have embeddings tied to max length").
        (None, Some(_)) => batched.max(max_len).min(seqs.saturating_mul(max_len)),
        (None, None) => batched,
    };
    if batched == 0 || batched > 1 << 22 || seqs == 0 || seqs > 1 << 20 {
        return Err(invalid("--max-num-batched-tokens / --max-num-seqs", format!("{batched} / {seqs}"), "positive and below 4M / 1M"));
    }
    if let Some(s) = &m.seq2seq {
        // compute_mm_encoder_budget refuses an encoder input longer than the batch when chunked
        // multimodal input is off; verify_max_model_len needs the batch to hold max_model_len.
        let need = s.source_tokens.max(max_len);
        if batched < need {
            return Err(invalid(
                "--max-num-batched-tokens",
                batched,
                &format!("at least {need} for {}: vLLM runs one clip's {} encoder positions and a whole max-model-len prompt in one batch (no chunked prefill for encoder-decoders)", m.name, s.source_tokens),
            ));
        }
    }
    Ok((batched, if m.seq2seq.is_some() { seqs.min(batched) } else { seqs }))
}

/// Weight and quantisation-scale bytes on one tensor-parallel rank of one pipeline stage. A stage
/// builds only its own decoder layers (the others are PPMissingLayer); the input embedding lives
/// on the first stage, the final norm and LM head on the last, and a tied embedding also on the
/// last, where it serves as the LM head (vllm/model_executor/models/llama.py LlamaModel and
/// LlamaForCausalLM: `is_first_rank or (tie_word_embeddings and is_last_rank)`).
/// Weights and quantisation scales on one TP rank without pipeline parallelism, with notes on how
/// a pre-quantised checkpoint was read. SGLang shards like vLLM (its layers/linear.py and
/// vocab_parallel_embedding.py keep vLLM's column/row split and the vocabulary padding of 64).
pub(crate) fn split_rank_weights(m: &Model, quantization: Quantization, split: Split, e: u128) -> Result<(u128, u128, Vec<String>)> {
    match quantization {
        // SGLang's MXFP4 paths pad by their own rules, not modelled.
        Quantization::Checkpoint => checkpoint_rank_weights(m, split, e, &Stage::whole(m), None),
        q => {
            let (w, s) = rank_weights(m, q, split, e, &Stage::whole(m));
            Ok((w, s, Vec::new()))
        }
    }
}

/// How one GPU's share of the weights is cut: tensor parallelism for every layer, and for a MoE
/// model's experts the GPUs they are spread over and whether each holds whole experts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Split {
    tp: u64,
    /// GPUs the experts are spread over: TP × DP (`flatten_tp_across_dp_and_pcp`).
    expert_ranks: u64,
    /// Expert parallelism: whole experts per GPU rather than a slice of each.
    ep: bool,
    /// EPLB's redundant experts (`num_redundant_experts`): more physical experts than the
    /// model's, spread with them.
    redundant: u64,
    /// GPUs the attention projections and the input embedding are split over: `tp`, or under
    /// SGLang's attention DP the attention-TP group (tp / attn_dp).
    attn_tp: u64,
    /// GPUs the LM head is split over: `tp`, or the attention-TP group with SGLang's
    /// `--enable-dp-lm-head`.
    head_tp: u64,
}

impl Split {
    pub(crate) fn tp(tp: u64) -> Split {
        Split { tp, expert_ranks: tp, ep: false, redundant: 0, attn_tp: tp, head_tp: tp }
    }

    /// SGLang's attention data parallelism: the attention and the embedding over `attn_tp`,
    /// the MLPs and experts over `tp`, the LM head over `head_tp`.
    pub(crate) fn attention_dp(tp: u64, attn_tp: u64, head_tp: u64) -> Split {
        Split { attn_tp, head_tp, ..Split::tp(tp) }
    }

    fn of(cfg: &ServeConfig) -> Split {
        Split {
            expert_ranks: cfg.tp.saturating_mul(cfg.dp.max(1)),
            ep: cfg.expert_parallel,
            redundant: cfg.eplb.map_or(0, |e| e.redundant_experts),
            ..Split::tp(cfg.tp)
        }
    }
}

fn rank_weights(m: &Model, quantization: Quantization, split: Split, e: u128, stage: &Stage) -> (u128, u128) {
    let (mut weights, mut scales) = (0u128, 0u128);
    // memory::inventory: an approximate model's unmodelled checkpoint parameters included.
    for t in crate::memory::inventory(m) {
        let (num, den) = stage_share(m, &t, stage);
        if num == 0 {
            continue;
        }
        let n = rank_numel(m, &t, split) * t.count as u128 * num / den;
        let quantised = matches!(t.role, Role::Linear | Role::Experts);
        let (w, s) = match quantization {
            _ if !quantised => (n * e, 0),
            Quantization::None | Quantization::Checkpoint => (n * e, 0),
            // AWQ/GPTQ: int4 packed in int32, an fp16 scale and a 4-bit zero per group of 128
            // inputs (vllm/model_executor/layers/quantization/awq.py create_weights); GPTQ adds
            // an int32 g_idx per input feature (gptq.py).
            Quantization::Awq => (n / 2, n.div_ceil(GROUP) * 5 / 2),
            Quantization::Gptq => (n / 2, n.div_ceil(GROUP) * 5 / 2 + 4 * t.cols as u128 * t.count as u128),
            // fp8.py Fp8LinearMethod: one byte per weight, an fp32 scale per logical shard.
            Quantization::Fp8 => (n, 3 * 4 * t.count as u128),
            // bitsandbytes NF4, blocks of 64 with double-quantised absmax: a uint8 per block and
            // an fp32 per 256 blocks (bitsandbytes functional.quantize_4bit, compress_statistics).
            Quantization::Bnb4bit => (n / 2, n.div_ceil(64) + n.div_ceil(64 * 256) * 4),
        };
        weights += w;
        scales += s;
    }
    (weights, scales)
}

/// `--cpu-offload-gb`: vLLM wraps each decoder layer as it is built and moves all its parameters
/// to pinned CPU memory while fewer than the budget's bytes have been moved
/// (vllm/model_executor/models/utils.py `make_layers` → `maybe_offload_to_cpu`), so whole layers
/// go, in order, until the budget is reached or passed. Returns the rank's weights and scales
/// left on the GPU; layers are taken as equal in size (stated where they are not).
fn cpu_offload(
    m: &Model,
    cfg: &ServeConfig,
    stage: &Stage,
    e: u128,
    weights: u128,
    scales: u128,
    notes: &mut Vec<String>,
) -> Result<(u128, u128)> {
    let budget = cfg.cpu_offload_bytes as u128;
    if budget == 0 || stage.layers == 0 {
        return Ok((weights, scales));
    }
    if cfg.quantization == Quantization::Checkpoint {
        return Err(invalid(
            "--cpu-offload-gb",
            format!("{:.2} GiB", budget as f64 / GIB as f64),
            "offloading layers of a pre-quantized checkpoint is not modelled yet; drop --cpu-offload-gb to see the rest",
        ));
    }
    let (outside_w, outside_s) = rank_weights(m, cfg.quantization, Split::of(cfg), e, &Stage { layers: 0, ..*stage });
    let in_layers = (weights + scales).saturating_sub(outside_w + outside_s);
    let per_layer = in_layers / stage.layers as u128;
    if per_layer == 0 {
        return Ok((weights, scales));
    }
    let layers = budget.div_ceil(per_layer).min(stage.layers as u128);
    let moved = layers * per_layer;
    // Weights and scales leave in proportion.
    let keep = |x: u128| x - x * moved / (weights + scales).max(1);
    notes.push(format!(
        "--cpu-offload-gb: {layers} of {} decoder layers ({:.2} GiB per GPU) live in pinned host memory and are streamed to the GPU every forward (vllm/model_executor/models/utils.py maybe_offload_to_cpu; slow: PCIe per token){}",
        stage.layers,
        moved as f64 / GIB as f64,
        if m.moe.is_some() && m.layers > 0 && (0..m.layers).any(|i| !m.is_moe_layer(i)) { "; dense and MoE layers taken as equal in size" } else { "" }
    ));
    Ok((keep(weights), keep(scales)))
}

/// The share of tensor group `t` a pipeline stage holds, as numerator / denominator.
fn stage_share(m: &Model, t: &TensorGroup, stage: &Stage) -> (u128, u128) {
    if t.name.starts_with("layers.") {
        return (stage.layers as u128, m.layers.max(1) as u128);
    }
    let held = match t.role {
        Role::Embedding => stage.first || (m.tied_embeddings && stage.last),
        Role::Position => stage.first,
        // The final norm, the LM head and its bias.
        _ => stage.last,
    };
    (held as u128, 1)
}

/// Weight and scale bytes on one TP rank of one pipeline stage of a pre-quantized checkpoint:
/// each tensor's stored bytes (quant.rs) in the share of its elements the rank holds (vLLM
/// shards qweight, scales and zeros along the same dimension as the weight), of the stage's own
/// decoder layers and the embedding or head it holds (`stage_share`).
///
/// `mxfp4_align` pads MXFP4 experts as vLLM's MoE kernel does ([`mxfp4_alignment`]).
fn checkpoint_rank_weights(
    m: &Model,
    split: Split,
    e: u128,
    stage: &Stage,
    mxfp4_align: Option<(u64, u64)>,
) -> Result<(u128, u128, Vec<String>)> {
    let q = m.quantization.as_ref().ok_or_else(|| {
        invalid(
            "--quantization",
            "checkpoint",
            &format!("{} has no quantization_config; pass --quantization awq|gptq|fp8|bnb-4bit", m.name),
        )
    })?;
    let plan = crate::quant::Plan::new(q)?;
    let (mut weights, mut scales) = (0u128, 0u128);
    let mut padded = None;
    for (t, layer) in crate::quant::layered_tensors(m) {
        let t = match (mxfp4_align, plan.scheme) {
            (Some(align), crate::quant::Scheme::Mxfp4) if t.role == Role::Experts => {
                let p = mxfp4_padded(m, &t, split, align);
                if p.numel != t.numel {
                    padded = Some(align);
                }
                p
            }
            _ => t,
        };
        let held = match layer {
            Some(i) => (stage.start..stage.start + stage.layers).contains(&i),
            None => stage_share(m, &t, stage).0 > 0,
        };
        if !held {
            continue;
        }
        let count = t.count as u128;
        let rank = rank_numel(m, &t, split) * count;
        if plan.quantizes(&t, layer) && t.numel > 0 {
            let whole = plan.stored(&t, e);
            let n = t.numel as u128;
            weights += whole.weight * rank / n;
            scales += whole.scales * rank / n;
        } else {
            weights += rank * e;
        }
    }
    let mut notes = plan.notes.clone();
    notes.push(format!("weights: {} as stored (quantization_config)", plan.describe()));
    if let Some((h, i)) = padded {
        let hidden = if h > 1 { format!("hidden size to a multiple of {h}, ") } else { String::new() };
        notes.push(format!(
            "MXFP4 experts padded for vLLM's MoE kernel on this GPU: {hidden}each rank's intermediate size to a multiple of {i} (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size: Marlin below compute capability 9.0 and on 12.x, Triton on Hopper, FlashInfer TRT-LLM on B200)"
        ));
    }
    Ok((weights, scales, notes))
}

/// The (hidden, per-rank intermediate) alignment vLLM pads MXFP4 experts to for the MoE kernel
/// it picks on this GPU (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py
/// `select_mxfp4_moe_backend` and `mxfp4_round_up_hidden_size_and_intermediate_size` in 0.19.1;
/// the same rules in quantization/mxfp4.py of 0.15.1): Triton's kernels on compute capability
/// 9.x (the intermediate to 64), FlashInfer's TRT-LLM kernels on 10.x (both to 256), Marlin on
/// other CUDA GPUs (hidden to 256, intermediate to 128), ROCm 128 (256 on gfx950, not
/// catalogued). A GPU given by size is taken as Hopper.
fn mxfp4_alignment(cfg: &ServeConfig) -> (u64, u64) {
    match cfg.gpu_arch.map(|a| a.cuda_cc) {
        None | Some(Some((9, _))) => (1, 64),
        Some(Some((10, _))) => (256, 256),
        Some(Some(_)) => (256, 128),
        Some(None) => (128, 128),
    }
}

/// An expert stack with the hidden size and each rank's share of the intermediate size rounded
/// up as vLLM's MXFP4 MoE kernels need (`create_weights` allocates the padded shapes).
fn mxfp4_padded(m: &Model, t: &TensorGroup, split: Split, (h_align, i_align): (u64, u64)) -> TensorGroup {
    let experts = m.moe.as_ref().map_or(1, |moe| moe.experts.max(1));
    let (out, inp) = (t.rows / experts, t.cols / experts);
    // The intermediate size is split over the expert ranks unless whole experts are placed.
    let ranks = if split.ep { 1 } else { split.expert_ranks.max(1) };
    let pad_i = |i: u64| (i / ranks).div_ceil(i_align) * i_align * ranks;
    let pad_h = |h: u64| h.div_ceil(h_align) * h_align;
    let (out, inp) = if t.name.contains("down_proj") { (pad_h(out), pad_i(inp)) } else { (2 * pad_i(out / 2), pad_h(inp)) };
    TensorGroup::matrix(t.name.clone(), experts, out, inp, t.count, t.role)
}

/// The runner vLLM uses for this model and release: `--model-runner` if given; otherwise Model
/// Runner V2 for every model from 0.29 ([`VllmVersion::MRV2_ALL_MODELS`]), for a dense attention
/// model from 0.25 (vllm/config/vllm.py use_v2_model_runner → `_is_default_v2_model_runner_model`:
/// MoE, Mamba-hybrid and attention-free models stay on V1 unless their architecture is listed),
/// and V1 before.
pub fn model_runner(m: &Model, cfg: &ServeConfig) -> ModelRunner {
    if let Some(r) = cfg.model_runner {
        return r;
    }
    // Suffix decoding is not in Model Runner V2 (config/vllm.py
    // `_get_v2_model_runner_unsupported_features`, 0.33.0).
    if cfg.speculative.as_ref().is_some_and(|s| s.method == crate::serve_spec::SpecMethod::Suffix) {
        return ModelRunner::V1;
    }
    let dense = m.moe.is_none() && m.ssm.is_none();
    if cfg.vllm_version >= VllmVersion::MRV2_ALL_MODELS || (cfg.vllm_version >= VllmVersion::MRV2_DEFAULT && dense) {
        ModelRunner::V2
    } else {
        ModelRunner::V1
    }
}

/// Whose dummy sampler the profile run calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sampler {
    V0,
    V1,
    /// The V1 runner's dummy sampler with PyTorch's top-k/top-p sort: before 0.17, and from 0.17
    /// below 8 requests (topk_topp_sampler.py `apply_top_k_top_p`: the Triton path needs 8 rows).
    V1Sort,
    Mrv2,
    /// Model Runner V2 from 0.33, with its second, warm-up-parameter pass: whether FlashInfer's
    /// sampler runs it.
    Mrv2Warmup(bool),
}

/// Whether vLLM samples with FlashInfer on this GPU (vllm/v1/sample/ops/topk_topp_sampler.py
/// `flashinfer_sampler_supported`: CUDA, compute capability 8.0 to 12.1, more than 16
/// multiprocessors, VLLM_USE_FLASHINFER_SAMPLER on by default); assumed for a GPU given by size.
fn flashinfer_sampler(cfg: &ServeConfig) -> bool {
    cfg.gpu_arch.is_none_or(|a| a.cuda_cc.is_some_and(|cc| ((8, 0)..=(12, 1)).contains(&cc)) && a.multiprocessors > 16)
}

/// Bytes that stay allocated after the profile run's sampler, on the last stage: 0.33's Triton
/// top-k/top-p buffer, [min(next_pow2(min(SMs, R)), SMs), V] fp32, cached for the process
/// (vllm/v1/sample/ops/topk_topp_triton.py `apply_top_k_top_p_triton`), where FlashInfer does not
/// sample.
fn sampler_persistent(m: &Model, cfg: &ServeConfig, batched: u64, seqs: u64) -> u64 {
    let mrv2 = cfg.engine == VllmEngine::V1 && model_runner(m, cfg) == ModelRunner::V2;
    if !mrv2 || cfg.vllm_version < VllmVersion::MRV2_SAMPLER_WARMUP || flashinfer_sampler(cfg) {
        return 0;
    }
    let sms = cfg.gpu_arch.map_or(1, |a| a.multiprocessors.max(1) as u64);
    let rows = seqs.min(batched).min(sms).next_power_of_two().min(sms);
    rows.saturating_mul(m.vocab).saturating_mul(4)
}

/// Model Runner V2's per-request state on the GPU, built in `load_model` with its sampler
/// ([`VllmVersion::MRV2_STATE_BUFFERS`]), for R = `--max-num-seqs`, V = the vocabulary, T =
/// `--max-num-batched-tokens` (int32 unless named):
/// - penalties (vllm/v1/worker/gpu/sample/penalties.py `PenaltiesState`): `output_bin_counts`
///   [R, V] and `prompt_bin_mask` [R, ⌈V/32⌉] — the bulk: 594 MiB at R = 1024, V = 152,064;
/// - the structured-output bitmask [R, ⌈V/32⌉] and its indices [R] (gpu/structured_outputs.py);
/// - logit bias (sample/logit_bias.py): allowed ids, biased ids and biases [R, 1024] each (the
///   biases fp32), stop ids [R, 128]; bad words (sample/bad_words.py) [R, 1024] and offsets
///   [R, 129]; logprob token ids (sample/logprob.py) [R, 128];
/// - request state (gpu/states.py): lengths and computed tokens [R] each, the last sampled tokens
///   [R] int64, the next prefill tokens [R]; input buffers (gpu/input_batch.py): ids [T], positions
///   [T] int64, padding flags [T] bool, query starts [R + 1], sequence lengths [R] twice.
///
/// The token ids of every request ([R, max-model-len]) live in pinned host memory, not here.
/// Counted on the last pipeline stage, which builds the sampler.
/// Read from the wheels' source, not measured on a GPU: 144,166,916 bytes at R = 256, V = 128,256,
/// T = 2048, summed table by table in crates/vram-core/tests/serve.rs.
pub fn mrv2_state_buffers(vocab: u64, seqs: u64, batched: u64) -> u64 {
    let (r, v, t) = (seqs as u128, vocab as u128, batched as u128);
    let words = v.div_ceil(32);
    let int32 = r * v + 2 * r * words + r + 3 * r * 1024 + r * 128 + r * 1024 + r * 129 + r * 128 + 2 * r + r + (r + 1) + 2 * r + t;
    let bytes = int32 * 4 + r * 8 + t * 8 + t;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The cuBLAS workspace that 0.33 moves into the start-up baseline ([`VllmVersion::CUBLAS_BASELINE`]):
/// torch's default, 4096 KiB × 8 on compute capability 9.0 and later, else 4096 KiB × 2 + 16 KiB
/// × 8 (aten/src/ATen/cuda/CublasHandlePool.cpp `getChosenWorkspaceSize`), which the caching
/// allocator holds in a 20 MiB segment.
fn cublas_baseline(cfg: &ServeConfig) -> u64 {
    if cfg.engine != VllmEngine::V1 || cfg.vllm_version < VllmVersion::CUBLAS_BASELINE {
        return 0;
    }
    match cfg.gpu_arch.and_then(|a| a.cuda_cc) {
        Some(cc) if cc >= (9, 0) => 32 * MIB,
        Some(_) => 20 * MIB,
        None if cfg.gpu_arch.is_some() => 0,
        // A GPU given by size: the workspace of the GPUs vLLM most runs on (Hopper).
        None => 32 * MIB,
    }
}

/// The profile run's activation peak and where it occurs. Each engine's profiling pass is one
/// arm of the sampler match.
/// `sampler_kind` is `None` on a stage before the last, which runs no sampler.
fn profile_peak(
    m: &Model,
    sampler_kind: Option<Sampler>,
    batched: u64,
    seqs: u64,
    split: Split,
    e: u128,
    rejection: bool,
) -> (u128, String) {
    let tp = split.tp;
    // Profile run (gpu_model_runner.py profile_run): a forward of max_num_batched_tokens tokens,
    // then the sampler over min(max_num_seqs, tokens) requests while the forward's hidden states
    // are still referenced — on the last pipeline stage only (`if get_pp_group().is_last_rank`).
    let (fwd, fwd_at) = forward_peak_split(m, batched, split, e);
    let Some(sampler_kind) = sampler_kind else {
        return (fwd, fwd_at);
    };
    let reqs = seqs.min(batched) as u128;
    let v = m.vocab as u128;
    let vpad = (m.vocab.div_ceil(VOCAB_PAD) * VOCAB_PAD) as u128;
    // compute_logits: the rank's [R, V/tp] slice, gathered to [R, V] on TP > 1.
    let gathered = if tp > 1 { reqs * vpad * e } else { 0 };
    let per_logit: u128 = match sampler_kind {
        // Model Runner V2's sampler (vllm/v1/worker/gpu/sample/sampler.py) copies the logits to
        // one new fp32 tensor and applies penalties, temperature and min-p in place; the Gumbel
        // draw is a Triton kernel with no vocabulary-wide temporaries. Measured: Qwen2.5-0.5B on
        // v0.27.1, 256 requests, 0.25 GiB logged against 0.22 here (validation/vllm/logs.jsonl).
        Sampler::Mrv2 | Sampler::Mrv2Warmup(false) => 4,
        // 0.33's warm-up pass under FlashInfer: the fp32 copy, FlashInfer's masked fp32 logits and
        // their fp32 softmax, with the model-dtype logits ([`VllmVersion::MRV2_SAMPLER_WARMUP`]).
        Sampler::Mrv2Warmup(true) => 12,
        // V1's dummy sampler (temperature 0.5, top_k = vocab − 1, top_p = 0.9: gpu_model_runner.py
        // _dummy_sampler_run) converts to fp32 (v1/sample/sampler.py); from 0.17 Triton masks
        // top-k/top-p in place, then softmax and an exponential of the same shape
        // (topk_topp_sampler.py random_sample): fp32 logits + probabilities + exponential.
        Sampler::V1 => 12,
        // Before 0.17 `apply_top_k_top_p` sorts: at the sort the fp32 logits (4), the sorted
        // values (4) and int64 indices (8) it returns, and torch.sort's own buffers for a
        // segmented radix sort of pairs — an int64 index input (8) and cub's double buffer of
        // keys and values (4 + 8), inferred from PyTorch's CUDA sort rather than read line by
        // line. The 38 bytes a logit with the model-dtype logits match two held-out vLLM 0.10 logs
        // (5.58 GiB at 1,024 × 151,936 logits, 1.40 GiB at 256: 38.5 and 38.6 bytes a logit).
        Sampler::V1Sort => 4 + 4 + 8 + 8 + 4 + 8,
        // V0's profile uses top_k = vocab − 1, top_p = 0.99 (worker/model_runner.py profile_run);
        // _apply_top_k_top_p keeps as locals the fp32 logits, sorted values (4) and int64
        // indices (8), softmax and cumsum (4 + 4), two bool masks (1 + 1), the inverse
        // permutation (8) and the re-gathered logits (4) (model_executor/layers/sampler.py).
        Sampler::V0 => 4 + 4 + 8 + 4 + 4 + 1 + 1 + 8 + 4,
    };
    let held = (batched as u128 + reqs) * m.hidden as u128 * e;
    let sampler = reqs * vpad / tp as u128 * e + gathered + reqs * v * per_logit + held;
    // Speculative decoding on the V1 runner: `_dummy_sampler_run` then draws [2R, V] dummy logits
    // (one draft token a request) and the rejection sampler samples the R bonus rows it gathers
    // from them (v1/sample/rejection_sampler.py `forward`): 3 R × V model-dtype logits beside the
    // sampler's own temporaries.
    let rejection_phase = if rejection { 3 * reqs * v * e + reqs * v * per_logit + held } else { 0 };
    if rejection_phase > fwd && rejection_phase > sampler {
        return (
            rejection_phase,
            format!("rejection sampler over {reqs} requests × 2 rows × {} vocabulary (speculative decoding's dummy pass)", m.vocab),
        );
    }
    if sampler > fwd {
        let how = match sampler_kind {
            Sampler::V1 => "fp32 logits, probabilities, exponential draw",
            Sampler::V1Sort => "fp32 logits and PyTorch's top-k/top-p sort with its buffers",
            Sampler::Mrv2 => "Model Runner V2: logits and one fp32 copy",
            Sampler::Mrv2Warmup(true) => {
                "Model Runner V2's warm-up sampling pass: logits, an fp32 copy, FlashInfer's masked copy and softmax"
            }
            Sampler::Mrv2Warmup(false) => "Model Runner V2's warm-up sampling pass: logits and an fp32 copy masked in place by Triton",
            Sampler::V0 => "top-k/top-p sort, masks and re-gather",
        };
        (sampler, format!("sampler over {reqs} requests × {} vocabulary ({how})", m.vocab))
    } else {
        (fwd, fwd_at)
    }
}

/// The longest context vLLM derives from the config (vllm/config/model.py
/// `_get_and_verify_max_len`): its length times the RoPE scaling factor, except for the types
/// that state their reach already (su, longrope, llama3) and for Gemma-3 (whose 128K is already
/// scaled); YaRN multiplies `original_max_position_embeddings`. 0 when the config names none.
fn derived_max_len(m: &Model) -> u64 {
    // Whisper: `max_target_positions`, the decoder's position table (vLLM's
    // model_arch_config_convertor.py lists it among the length keys, "# Whisper").
    if m.seq2seq.is_some() {
        return m.position_embeddings;
    }
    match &m.rope_scaling {
        Some(r)
            if m.max_positions > 0 && !m.model_type.starts_with("gemma3") && !matches!(r.kind.as_str(), "su" | "longrope" | "llama3") =>
        {
            let start = if r.kind == "yarn" { r.native_positions } else { m.max_positions };
            ((start as f64 * r.factor) as u64).clamp(1, 1 << 24)
        }
        _ => m.max_positions,
    }
}

/// vLLM's maximum length for a config that names none (vllm/config/model.py
/// `_get_and_verify_max_len`: `default_max_len = 2048`).
const VLLM_DEFAULT_MAX_LEN: u64 = 2048;

/// The assumptions the report rests on, said once.
fn serve_notes(
    m: &Model,
    cfg: &ServeConfig,
    non_torch_bytes: u64,
    cuda_graph: Option<&crate::serve_graphs::CudaGraphs>,
    pool: &KvPool,
) -> Vec<String> {
    let mut notes = Vec::new();
    if cfg.non_torch_memory.is_none() {
        let ranks = collective_ranks(m, cfg);
        notes.push(if ranks > 1 && cfg.gpu_nvswitch {
            format!(
                "non-torch increase assumed {} MiB at TP ≥ 2{} on an NVSwitch GPU: 150 MiB of kernels plus 1.79 GiB of NCCL and custom all-reduce buffers, an empirical figure (Llama-3-8B on H100: 3.58 GiB at TP 2 vs 1.79 GiB at TP 1, vllm-project/vllm#10511); pass --non-torch-memory with the value vLLM logs",
                non_torch_bytes / MIB,
                if cfg.tp == 1 { " (here a MoE model's data-parallel group, taken as a TP group of its size)" } else { "" }
            )
        } else if ranks > 1 {
            format!(
                "non-torch increase assumed {} MiB at TP ≥ 2{}: 150 MiB of kernels plus 256 MiB of NCCL buffers, covering the multi-GPU logs without NVSwitch (0.20–0.43 GiB on A100-40GB, RTX 4090, RTX 3090); pass --non-torch-memory with the value vLLM logs",
                non_torch_bytes / MIB,
                if cfg.tp == 1 { " (here a MoE model's data-parallel group, taken as a TP group of its size)" } else { "" }
            )
        } else {
            format!(
                "non-torch increase assumed {} MiB (kernels first loaded by the profile run){}; pass --non-torch-memory with the value vLLM logs",
                non_torch_bytes / MIB,
                if cfg.pp > 1 { "; NCCL send/recv buffers of pipeline parallelism are not in this assumption" } else { "" }
            )
        });
    }
    if cfg.non_torch_memory.is_none() && cublas_baseline(cfg) > 0 {
        notes.push(format!(
            "vLLM ≥ 0.33 creates its cuBLAS handles before the start-up snapshot: their {} MiB workspace is baseline, taken off the non-torch increase above",
            cublas_baseline(cfg) / MIB
        ));
    }
    if let Some(g) = cuda_graph {
        notes.push(crate::serve_graphs::note(g));
    } else if !cfg.enforce_eager {
        notes.push(
            "CUDA graphs are captured after the KV pool is allocated and are not in vLLM's budget (vLLM logs their size at start-up; --enforce-eager skips them)".into(),
        );
    }
    if cfg.vllm_version > VllmVersion::NEWEST {
        notes.push(format!(
            "--vllm-version {}: the rules of {} (the newest vram models) are applied; later changes to vLLM's accounting are not modelled",
            cfg.vllm_version,
            VllmVersion::NEWEST
        ));
    }
    let runner = model_runner(m, cfg);
    if cfg.engine == VllmEngine::V1 && runner == ModelRunner::V2 {
        notes.push(format!(
            "Model Runner V2{}: its profile run samples {}{}; --model-runner v1 (VLLM_USE_V2_MODEL_RUNNER=0) for the older runner",
            if cfg.model_runner.is_some() {
                " as given"
            } else if cfg.vllm_version >= VllmVersion::MRV2_ALL_MODELS {
                ", vLLM ≥ 0.29's default for every model"
            } else {
                ", vLLM ≥ 0.25's default for a dense model"
            },
            match (cfg.vllm_version >= VllmVersion::MRV2_SAMPLER_WARMUP, flashinfer_sampler(cfg)) {
                (true, true) => format!(
                    "twice from 0.33, the second time with the warm-up's top-k/top-p and penalties: the logits, an fp32 copy, FlashInfer's masked fp32 copy and its softmax (14 bytes a logit){}",
                    if cfg.gpu_arch.is_none() { ", FlashInfer's sampler assumed for a GPU given by size" } else { "" }
                ),
                (true, false) => "twice from 0.33, the second time with the warm-up's top-k/top-p and penalties: the logits and an fp32 copy that Triton masks in place (no FlashInfer sampler on this GPU)".into(),
                _ => "with the logits and one fp32 copy".into(),
            },
            if cfg.vllm_version >= VllmVersion::MRV2_CUDA_GRAPH_ESTIMATE {
                ", and from 0.29 it adds its CUDA-graph estimate to the peak as the V1 runner does"
            } else {
                ", and before 0.29 it adds no CUDA-graph estimate before sizing the KV cache (graphs are captured after the pool)"
            }
        ));
        if cfg.vllm_version >= VllmVersion::MRV2_UNPLACED_PEAK {
            notes.push(
                "vLLM ≥ 0.28 with Model Runner V2: three start-up logs (Qwen3-14B on an L40S at 0.28 and 0.29, Llama-3.1-8B on an A100 at 0.31; validation/vllm/logs.jsonl) show a profile-run peak 1.2–2.0 GiB above vLLM's forward and sampler; from 0.29 the CUDA-graph estimate (counted here) is part of it, the rest is not located, so the KV pool shown may be up to ~1 GiB too large; pass --kv-cache-memory-bytes with the figure your log prints to plan on it".into(),
            );
        }
    } else if cfg.engine == VllmEngine::V1 && cfg.model_runner.is_none() && cfg.vllm_version >= VllmVersion::MRV2_DEFAULT {
        notes.push(format!(
            "gpu_model_runner.py (V1 runner): vLLM {} keeps {} models on it unless VLLM_USE_V2_MODEL_RUNNER=1 (vllm/config/vllm.py _is_default_v2_model_runner_model); pass --model-runner v2 if your log names model_runner.py",
            cfg.vllm_version,
            if m.ssm.is_some() { "Mamba-hybrid" } else { "MoE" }
        ));
    }
    if cfg.engine == VllmEngine::V1
        && runner == ModelRunner::V1
        && cfg.flashinfer_sampler.is_none()
        && cfg.vllm_version < (VllmVersion { major: 0, minor: 17 })
    {
        notes.push(format!(
            "vLLM {} samples the profile run's top-k/top-p with PyTorch's sort unless FlashInfer samples it{}: the sampler row counts the sort; pass --flashinfer-sampler on (VLLM_USE_FLASHINFER_SAMPLER=1) for FlashInfer's",
            cfg.vllm_version,
            if cfg.vllm_version < (VllmVersion { major: 0, minor: 12 }) {
                " — which it does by default where FlashInfer is installed: the vllm/vllm-openai image has it, `pip install vllm` does not (the `vllm[flashinfer]` extra); vram assumes pip"
            } else {
                " (opt-in from 0.12)"
            }
        ));
    }
    if m.sliding_layers > 0 && m.sliding_layers < m.layers {
        notes.push(format!(
            "hybrid attention: {} sliding-window layers ({} tokens) and {} full layers share one block pool in {} groups",
            m.sliding_layers,
            m.sliding_window.unwrap_or(0),
            m.layers - m.sliding_layers,
            pool.groups.len()
        ));
    }
    notes
}

/// What the block pool is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    /// Bytes available for the KV cache on one GPU.
    pub kv_cache_bytes: u64,
    /// `--max-model-len`.
    pub max_model_len: u64,
    /// `--max-num-batched-tokens` (sliding-window layers keep window − 1 + this many tokens).
    pub max_num_batched_tokens: u64,
    /// `--block-size`.
    pub block_size: u64,
    /// Bytes per cached element.
    pub kv_dtype_bytes: u64,
    /// Tensor-parallel ranks.
    pub tp: u64,
    /// A state-space or hybrid model's recurrent states (`None` for attention-only models).
    pub state: Option<crate::serve_ssm::StateCache>,
    /// `--mamba-cache-mode` (states only).
    pub mamba_cache_mode: crate::serve_ssm::MambaCacheMode,
    /// "GPU KV cache size" as max concurrency × max-model-len (newer vLLM, every model) rather
    /// than num_blocks // groups × the smallest block size.
    pub tokens_from_concurrency: bool,
    /// Gated DeltaNet layers export prefill checkpoints (vLLM ≥ 0.33, FlashInfer's GDN prefill,
    /// mamba-cache mode `align`): blocks on a 64-token grid, one more state block a request.
    pub prefill_checkpoints: bool,
    /// KV bytes a token costs in a drafter's attention layers (speculative decoding), which
    /// join the target's group: every block holds them too.
    pub draft_bytes_per_token: u64,
    /// A drafter's attention layers of the target's own KV shape (MTP layers), which join its
    /// full-attention groups (padding them as vLLM pads hybrid groups).
    pub draft_layers: u64,
    /// `num_speculative_tokens`: a hybrid model's states keep one block more per proposed token.
    pub speculative_tokens: u64,
}

impl PoolSpec {
    /// An attention-only pool of `kv_cache_bytes` (the older token report).
    pub fn new(
        kv_cache_bytes: u64,
        max_model_len: u64,
        max_num_batched_tokens: u64,
        block_size: u64,
        kv_dtype_bytes: u64,
        tp: u64,
    ) -> PoolSpec {
        PoolSpec {
            kv_cache_bytes,
            max_model_len,
            max_num_batched_tokens,
            block_size,
            kv_dtype_bytes,
            tp,
            state: None,
            mamba_cache_mode: crate::serve_ssm::MambaCacheMode::None,
            prefill_checkpoints: false,
            tokens_from_concurrency: false,
            draft_bytes_per_token: 0,
            draft_layers: 0,
            speculative_tokens: 0,
        }
    }
}

/// vLLM's KV-cache block pool on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvPool {
    /// Tokens per attention block (`--block-size`, raised for a hybrid model's states).
    pub block_size: u64,
    /// Bytes of one block of one layer.
    pub page_size_bytes: u64,
    /// A state-space or hybrid model's recurrent state per layer and request on this rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::serve_ssm::StateCache>,
    /// KV bytes per token over all layers of this rank.
    pub kv_bytes_per_token: u64,
    /// Of `kv_bytes_per_token`, a speculative drafter's layers.
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_bytes_per_token: u64,
    /// Layers per KV-cache group.
    pub group_size: u64,
    /// The groups.
    pub groups: Vec<KvGroup>,
    /// Blocks in the pool ("num_gpu_blocks").
    pub num_kv_blocks: u64,
    /// "GPU KV cache size: N tokens".
    pub kv_tokens: u64,
    /// "Maximum concurrency for max_model_len tokens per request".
    pub max_concurrency: f64,
    /// The longest max-model-len the pool could serve (vLLM's `estimate_max_model_len`).
    pub max_model_len_that_fits: u64,
}

impl KvPool {
    /// Blocks one request at max-model-len needs, over all groups.
    pub fn blocks_per_request(&self) -> u64 {
        self.groups.iter().map(|g| g.blocks_per_request).sum()
    }
}

/// Build the block pool from the available bytes (v1/core/kv_cache_utils.py).
pub fn kv_pool(m: &Model, p: &PoolSpec) -> Result<KvPool> {
    if p.draft_layers > 0 && p.state.is_none() {
        // The drafter's layers are full-attention layers of the target's shape (serve_spec).
        let mut with = m.clone();
        with.layers = m.layers.saturating_add(p.draft_layers);
        let mut pool = kv_pool(&with, &PoolSpec { draft_layers: 0, ..*p })?;
        pool.draft_bytes_per_token = pool.kv_bytes_per_token / with.layers.max(1) * p.draft_layers;
        return Ok(pool);
    }
    // Page size (v1/kv_cache_interface.py AttentionSpec.page_size_bytes): K and V (one latent
    // for MLA) × block_size × KV heads on this rank × head size × dtype bytes. vLLM replicates
    // KV heads when TP exceeds them (max(1, kv_heads // tp)); MLA's latent is not split.
    let overflow = || Error::Overflow { what: "KV-cache page size".into() };
    let per_token_layer = match m.attention.mla {
        Some(mla) => (mla.kv_lora_rank + mla.qk_rope_head_dim).checked_mul(p.kv_dtype_bytes),
        None => (2 * (m.kv_heads / p.tp.max(1)).max(1)).checked_mul(m.head_dim).and_then(|x| x.checked_mul(p.kv_dtype_bytes)),
    }
    .ok_or_else(overflow)?;
    let page_size_bytes = per_token_layer.checked_mul(p.block_size).ok_or_else(overflow)?;
    let kv_bytes_per_token = per_token_layer.checked_mul(m.layers).ok_or_else(overflow)?;
    if page_size_bytes == 0 || p.block_size == 0 {
        return Err(invalid("model", &m.name, "has no KV heads; nothing to cache"));
    }
    if let Some(state) = p.state {
        return crate::serve_ssm::pool(p, state, per_token_layer);
    }
    let bs = p.block_size;
    let (groups, group_size) = kv_groups(m, p.max_model_len, p.max_num_batched_tokens, bs);
    // get_num_blocks: available // page_size // layers per group; a drafter's layers are in
    // the one group too (same page size), or beside it with their own page size
    // (kv_cache_interface.py UniformTypeKVCacheSpecs: blocks = available // Σ page sizes).
    let block_bytes = page_size_bytes
        .checked_mul(group_size)
        .and_then(|b| b.checked_add(p.draft_bytes_per_token.checked_mul(bs)?))
        .ok_or_else(overflow)?;
    let num_kv_blocks = p.kv_cache_bytes / block_bytes;
    // get_max_concurrency_for_kv_cache_config: blocks / blocks one max-length request needs.
    let per_request: u64 = groups.iter().map(|g| g.blocks_per_request).sum();
    let max_concurrency = num_kv_blocks as f64 / per_request as f64;
    // "GPU KV cache size": num_blocks // number of groups × block_size, or in newer vLLM max
    // concurrency × max-model-len (`PoolSpec::tokens_from_concurrency`).
    let kv_tokens = if p.tokens_from_concurrency {
        (max_concurrency * p.max_model_len as f64) as u64
    } else {
        num_kv_blocks / groups.len() as u64 * bs
    };
    let lo = longest_that_fits(p.max_model_len, num_kv_blocks, |len| {
        kv_groups(m, len, p.max_num_batched_tokens, bs).0.iter().map(|g| g.blocks_per_request).sum()
    });
    Ok(KvPool {
        block_size: bs,
        page_size_bytes,
        state: None,
        kv_bytes_per_token: kv_bytes_per_token.saturating_add(p.draft_bytes_per_token),
        draft_bytes_per_token: p.draft_bytes_per_token,
        group_size,
        groups,
        num_kv_blocks,
        kv_tokens,
        max_concurrency,
        max_model_len_that_fits: lo,
    })
}

/// vLLM's `estimate_max_model_len`: the longest length up to `max_len` whose blocks (`need`)
/// fit `blocks`, by binary search.
pub(crate) fn longest_that_fits(max_len: u64, blocks: u64, need: impl Fn(u64) -> u64) -> u64 {
    let (mut lo, mut hi) = (0u64, max_len);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if need(mid) <= blocks {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn to_u64(x: u128, what: &str) -> Result<u64> {
    u64::try_from(x).map_err(|_| Error::Overflow { what: what.into() })
}

/// Elements of one tensor of `t` held by one TP rank (vLLM's column/row-parallel layers).
fn rank_numel(m: &Model, t: &TensorGroup, split: Split) -> u128 {
    // The attention projections split over the attention-TP group (all of TP but under SGLang's
    // attention DP).
    let tp = if t.role == Role::Linear && t.name.contains("self_attn.") { split.attn_tp } else { split.tp };
    let tp128 = tp as u128;
    let kv_rank = (m.kv_heads / tp).max(1) as u128 * m.head_dim as u128;
    let name = t.name.as_str();
    match t.role {
        // Norms, routers and learned positions are replicated.
        Role::Norm | Role::Router | Role::Position => t.numel as u128,
        // VocabParallelEmbedding / ParallelLMHead: padded vocabulary split over ranks.
        Role::Embedding | Role::LmHead => {
            let ranks = if t.role == Role::Embedding { split.attn_tp } else { split.head_tp } as u128;
            (m.vocab.div_ceil(VOCAB_PAD) * VOCAB_PAD) as u128 / ranks * (t.numel / m.vocab.max(1)) as u128
        }
        // QKVParallelLinear replicates KV heads when TP exceeds them.
        Role::Linear if name.ends_with("k_proj.weight") || name.ends_with("v_proj.weight") => {
            if name.contains("kv_a_proj") {
                t.numel as u128
            } else {
                kv_rank * t.cols as u128
            }
        }
        Role::Linear if name.contains("qkv_proj") => (m.q_dim() as u128 / tp128 + 2 * kv_rank) * t.cols as u128,
        // DeepSeek's low-rank down-projections are ReplicatedLinear.
        Role::Linear if name.contains("q_a_proj") || name.contains("kv_a_proj") => t.numel as u128,
        // A stack of experts: whole experts per GPU under expert parallelism (the busiest GPU
        // holds the rounded-up share), else every expert sliced over TP × DP.
        Role::Experts if split.ep => match m.moe.as_ref().map(|moe| moe.experts as u128).filter(|&n| n > 0) {
            // EPLB's redundant experts are physical experts too (fused_moe/layer.py
            // `global_num_experts = num_experts + num_redundant_experts`).
            Some(n) => t.numel as u128 / n * (n + split.redundant as u128).div_ceil(split.expert_ranks as u128),
            None => (t.numel as u128).div_ceil(split.expert_ranks as u128),
        },
        Role::Experts => (t.numel as u128).div_ceil(split.expert_ranks as u128),
        _ => (t.numel as u128).div_ceil(tp128),
    }
}

/// Peak live bytes of the profile forward over `tokens` tokens on one rank (inference mode,
/// vLLM's fused kernels), and where it is.
pub(crate) fn forward_peak(m: &Model, tokens: u64, tp: u64, e: u128) -> (u128, String) {
    forward_peak_split(m, tokens, Split::tp(tp), e)
}

/// [`forward_peak`] with the experts spread as `split` spreads them.
fn forward_peak_split(m: &Model, tokens: u64, split: Split, e: u128) -> (u128, String) {
    let (t, tp, h) = (tokens as u128, split.tp as u128, m.hidden as u128);
    let q = m.q_dim() as u128 / tp;
    let kv = match m.attention.mla {
        // MLA in vLLM decompresses K and V per head for prefill (kv_b_proj output).
        Some(mla) => m.heads as u128 / tp * (mla.qk_nope_head_dim + mla.v_head_dim) as u128,
        None => 2 * (m.kv_heads as u128 / tp).max(1) * m.head_dim as u128,
    };
    // Attention: the layer's input and residual, the qkv projection, the attention output and
    // o_proj's output.
    let attn = t * e * (3 * h + q + kv + q);
    // Dense MLP (LlamaMLP.forward keeps gate_up referenced through down_proj): input, residual,
    // gate_up [T, 2I/tp], act [T, I/tp], down output. Checked against vLLM's logged
    // "peak_torch_memory" for Llama-3.1-8B (validation/vllm/logs.jsonl).
    let i = m.intermediate as u128 / tp;
    let dense = t * e * (3 * h + if m.mlp.gated { 3 * i } else { 2 * i });
    let mlp = match &m.moe {
        Some(moe) if m.moe_layers() > 0 => {
            // fused_moe.py: per chunk of VLLM_FUSED_MOE_CHUNK_SIZE tokens, cache1 [M, k, 2I/tp]
            // (sharing a workspace with cache3 [M, k, h]) and cache2 [M·k, I/tp]; fp32 router logits.
            // Over data-parallel ranks the MoE layer gathers every rank's tokens first (the
            // allgather_reducescatter dispatch, vLLM's default all2all backend) and slices each
            // expert over TP × DP, or keeps whole experts under expert parallelism.
            let dp = (split.expert_ranks / split.tp.max(1)).max(1) as u128;
            let gathered = t * dp;
            let chunk = gathered.min(MOE_CHUNK as u128);
            let ei = if split.ep { moe.expert_intermediate as u128 } else { moe.expert_intermediate as u128 / split.expert_ranks as u128 };
            let k = moe.top_k as u128;
            let routed =
                chunk * k * e * ((2 * ei).max(h) + ei) + gathered * moe.experts as u128 * 4 + if dp > 1 { gathered * e * h } else { 0 };
            let shared = moe.shared_intermediate as u128 / tp;
            let shared_out = if shared > 0 { t * e * h } else { 0 };
            (t * e * 3 * h + routed + shared_out).max(t * e * (3 * h + 3 * shared))
        }
        _ => dense,
    };
    // Gated DeltaNet layers (vllm/model_executor/layers/mamba/gdn_linear_attn.py `forward`): the
    // input and residual, in_proj_qkvz [T, (2·key + 2·value)/tp] and in_proj_ba [T, 2·Hv/tp],
    // core_attn_out zeros [T, value/tp], the gated norm's output and out_proj's; the recurrent
    // kernels themselves skip the profile run (`_forward_core` returns while attn_metadata is None).
    let delta = m.ssm.as_ref().and_then(|s| s.delta_net).map_or(0, |dn| {
        let (key, value) = ((dn.key_heads * dn.key_dim) as u128, (dn.value_heads * dn.value_dim) as u128);
        t * e * (3 * h + (2 * key + 2 * value + 2 * dn.value_heads as u128 + 2 * value) / tp)
    });
    if delta > attn.max(mlp) {
        (delta, format!("forward of {tokens} tokens, Gated DeltaNet projections"))
    } else if attn > mlp {
        (attn, format!("forward of {tokens} tokens, attention projections"))
    } else {
        (mlp, format!("forward of {tokens} tokens, MLP intermediates"))
    }
}

/// KV-cache groups (kv_cache_utils.py `_get_kv_cache_groups_uniform_page_size`): one group when
/// every layer has the same attention type; otherwise each type is cut into groups of one size
/// (`serve_ssm::group_split`), so every group has the same number of layers.
fn kv_groups(m: &Model, max_len: u64, batched: u64, bs: u64) -> (Vec<KvGroup>, u64) {
    let full_blocks = max_len.div_ceil(bs);
    // Cross-attention (Whisper): a group of its own, as many layers as the self-attention group,
    // charged max_num_encoder_input_tokens = max_num_batched_tokens per request
    // (kv_cache_interface.py CrossAttentionSpec.max_memory_usage_bytes, config/scheduler.py).
    if m.cross_attention {
        let f = KvGroup { kind: "full", layers: m.layers, window: None, blocks_per_request: full_blocks };
        let c = KvGroup { kind: "cross", blocks_per_request: batched.div_ceil(bs), ..f.clone() };
        return (vec![f, c], m.layers);
    }
    // SlidingWindowSpec.max_memory_usage_bytes: min(window − 1 + max_num_batched_tokens,
    // max_model_len) tokens, plus one block for a window straddling a block boundary.
    let window = m.sliding_window.filter(|_| m.sliding_layers > 0);
    let sliding_blocks = window.map_or(0, |w| (w.saturating_sub(1) + batched).min(max_len).div_ceil(bs) + 1);
    let sliding = if window.is_some() { m.sliding_layers.min(m.layers) } else { 0 };
    let full = m.layers - sliding;
    if sliding == 0 || full == 0 {
        let (kind, blocks) = if sliding == 0 { ("full", full_blocks) } else { ("sliding", sliding_blocks) };
        let layers = full.max(sliding);
        return (vec![KvGroup { kind, layers, window: if sliding == 0 { None } else { window }, blocks_per_request: blocks }], layers);
    }
    let (size, full_groups, sliding_groups) = crate::serve_ssm::group_split(full, sliding);
    let f = KvGroup { kind: "full", layers: size, window: None, blocks_per_request: full_blocks };
    let w = KvGroup { kind: "sliding", window, blocks_per_request: sliding_blocks, ..f.clone() };
    let groups = std::iter::repeat_n(f, full_groups as usize).chain(std::iter::repeat_n(w, sliding_groups as usize)).collect();
    (groups, size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;

    #[test]
    fn llama_31_8b_weights_match_vllm_log() {
        // "Loading model weights took 14.9888 GB" (vllm-project/vllm#10517, Llama-3.1-8B-Instruct).
        let m = presets::load("llama-3.1-8b").unwrap();
        let r = serve(&m, &ServeConfig::new(24 * GIB)).unwrap();
        let gib = r.weights_bytes as f64 / GIB as f64;
        assert!((gib - 14.9888).abs() < 0.00005, "{gib}");
    }

    #[test]
    fn tp_splits_weights_and_kv_heads() {
        let m = presets::load("llama-3.1-70b").unwrap();
        let one = serve(&m, &ServeConfig { tp: 1, ..ServeConfig::new(80 * GIB) }).unwrap();
        let four = serve(&m, &ServeConfig { tp: 4, ..ServeConfig::new(80 * GIB) }).unwrap();
        assert!(four.weights_bytes * 4 > one.weights_bytes && four.weights_bytes * 4 < one.weights_bytes + one.weights_bytes / 50);
        assert_eq!(four.pool.page_size_bytes * 4, one.pool.page_size_bytes);
        // 8 KV heads over 16 ranks: replicated, one head per rank.
        let sixteen = serve(&m, &ServeConfig { tp: 16, ..ServeConfig::new(80 * GIB) }).unwrap();
        assert_eq!(sixteen.pool.page_size_bytes, 2 * 16 * 128 * 2);
    }

    /// vLLM 0.33's Model Runner V2 profiles a second sampling pass with the warm-up's parameters:
    /// under FlashInfer (an H100) 8 more bytes a logit than 0.32's fp32 copy (a masked fp32 copy
    /// and its softmax) over min(max_num_seqs, max_num_batched_tokens) rows; under Triton (a T4,
    /// compute capability 7.5) the copy is masked in place and a [min(next_pow2(min(SMs, R)),
    /// SMs), V] fp32 buffer stays. Its cuBLAS workspace leaves the consumed memory: 32 MiB on
    /// compute capability 9.0, a 20 MiB segment on 7.5.
    #[test]
    fn the_warm_up_sampling_pass_of_0_33_follows_the_gpu() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let at = |gpu: &str, minor: u32| {
            let g = crate::gpu::lookup(gpu).unwrap();
            let cfg = ServeConfig {
                gpu_arch: crate::gpu::arch(&g),
                max_model_len: Some(8192),
                max_num_seqs: Some(1024),
                max_num_batched_tokens: Some(2048),
                enforce_eager: true,
                vllm_version: VllmVersion { major: 0, minor },
                ..ServeConfig::new(crate::gpu::cuda_total(&g).0)
            };
            serve(&m, &cfg).unwrap()
        };
        let (old, new) = (at("h100", 32), at("h100", 33));
        assert!(old.activation_peak_at.starts_with("sampler"), "{}", old.activation_peak_at);
        assert_eq!(new.activation_peak_bytes - old.activation_peak_bytes, 8 * 1024 * 128_256);
        assert_eq!(old.non_torch_bytes - new.non_torch_bytes, 32 * MIB);
        assert_eq!(new.non_kv_bytes + 32 * MIB - old.non_kv_bytes, new.activation_peak_bytes - old.activation_peak_bytes);
        let (old, new) = (at("t4", 32), at("t4", 33));
        assert_eq!(new.activation_peak_bytes, old.activation_peak_bytes);
        // 40 multiprocessors: min(next_pow2(min(40, 1024)), 40) = 40 rows kept.
        assert_eq!(new.non_kv_bytes + 20 * MIB - old.non_kv_bytes, 40 * 128_256 * 4);
        assert!(new.notes.iter().any(|n| n.contains("Triton")), "{:?}", new.notes);
    }

    #[test]
    fn bad_tp_is_an_error() {
        let m = presets::load("qwen2.5-1.5b").unwrap(); // 12 heads
        assert!(serve(&m, &ServeConfig { tp: 5, ..ServeConfig::new(80 * GIB) }).is_err());
    }
}
