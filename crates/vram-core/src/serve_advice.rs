//! Ranked alternatives for a serving launch: when the requested length buys less than one
//! request (or the model does not fit), what each single change of the launch would give.
//!
//! Every number is the engine's own accounting re-run with that one change
//! ([`crate::serve::serve`] for vLLM, [`crate::sglang::sglang`] for SGLang); nothing is
//! interpolated. Alternatives are ranked: those that fit first, then the least disruptive
//! change ([`ServeChange`] order), then the most concurrency.

use serde::Serialize;

use crate::dtype::DType;
use crate::error::Result;
use crate::gguf::{llama_cpp_with, max_ctx_with, CpuMoe, Gguf, HParams, LlamaCppConfig, LlamaCppPlan, Overrides};
use crate::model::Model;
use crate::serve::{serve, Quantization, ServeConfig, ServeReport};
use crate::sglang::{sglang, SglangConfig, SglangReport};

const GIB: u64 = 1 << 30;
/// The highest memory fraction offered (vLLM's own docs call 0.9 the default and warn that
/// higher values leave less for CUDA graphs and other processes: vllm/config/cache.py
/// `gpu_memory_utilization`); above it the risk of an OOM at start-up is the user's call.
pub const MAX_MEMORY_FRACTION: f64 = 0.95;
/// The largest tensor-parallel size offered: one 8-GPU node.
pub const MAX_TP: u64 = 8;
/// Bound on the re-runs that shrink a length until one request fits.
const MAX_SHRINK_STEPS: usize = 16;

/// One flag of a launch, in the engine's own spelling; `value` is `None` for a switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Flag {
    /// `--max-model-len`.
    pub name: String,
    /// `8192`.
    pub value: Option<String>,
}

impl Flag {
    /// A flag with a value.
    pub fn new(name: &str, value: impl ToString) -> Self {
        Flag { name: name.into(), value: Some(value.to_string()) }
    }
}

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{} {v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The kind of change, in the order of how much it disrupts the launch (cheapest first): a
/// cache setting, then a riskier memory budget, then more GPUs, then different weights, then a
/// shorter context (the requests the user asked for no longer all fit), then CPU offload (every
/// forward streams weights over PCIe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServeChange {
    /// `--kv-cache-dtype fp8` (SGLang `fp8_e5m2`): half the KV bytes per token.
    KvFp8,
    /// llama.cpp `-ctk q8_0 -ctv q8_0`: a 8.5-bit KV cache.
    KvQ8,
    /// SGLang `--mamba-ssm-dtype bfloat16`: a hybrid's recurrent state in half the bytes.
    StateDtype,
    /// vLLM `--max-num-seqs 256`: fewer rows in the profile run's sampler.
    MaxNumSeqs,
    /// A higher `--gpu-memory-utilization` / `--mem-fraction-static`.
    MemoryFraction,
    /// More tensor parallelism.
    TensorParallel,
    /// FP8 or 4-bit weights.
    QuantizedWeights,
    /// A shorter `--max-model-len` / `--context-length`.
    MaxModelLen,
    /// `--cpu-offload-gb` (vLLM); llama.cpp's `--n-cpu-moe` and fewer `-ngl`.
    CpuOffload,
}

/// One alternative launch and what the engine's accounting gives for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// What kind of change.
    pub change: ServeChange,
    /// The flags that make it, in the engine's spelling (set or replaced in the launch).
    pub flags: Vec<Flag>,
    /// What it does, in words.
    pub description: String,
    /// Whether the engine starts and one request of `max_model_len` tokens fits the pool.
    pub fits: bool,
    /// Tokens the KV pool holds.
    pub kv_tokens: u64,
    /// Requests of `max_model_len` tokens the pool holds at once.
    pub max_concurrency: f64,
    /// The context length of this launch (the requested one, except for a shorter-length change).
    pub max_model_len: u64,
    /// The longest context one request could have in this pool, searched up to the requested
    /// length (as vLLM's `estimate_max_model_len` searches); 0 when none fits.
    pub longest_max_model_len: u64,
    /// GPUs of one replica (TP × PP).
    pub gpus: u64,
    /// A guess: the change needs something vram cannot check exists (a quantized checkpoint).
    pub suggestion: bool,
    /// Risks and conditions, said once each.
    pub caveats: Vec<String>,
}

/// The advice for one launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeAdvice {
    /// Whether the launch as given fails (does not fit, or buys less than one request).
    pub needed: bool,
    /// Requests at the requested length the launch as given buys.
    pub max_concurrency: f64,
    /// Ranked: every alternative when needed; otherwise the few that raise concurrency.
    pub alternatives: Vec<Alternative>,
}

/// How many alternatives to show when the launch already fits.
const WHEN_FITS: usize = 2;

/// Whether a GPU of vram's table (gpu.rs names) has FP8 tensor cores: compute capability ≥ 8.9
/// (Ada, Hopper, Blackwell) or CDNA3, which vLLM requires for FP8 compute
/// (docs/features/quantization/fp8.md: "FP8 computation is supported on NVIDIA GPUs with compute
/// capability >= 8.9"; older GPUs run FP8 checkpoints as weight-only W8A16 through Marlin).
/// `None` for a GPU given only by its size.
pub fn fp8_compute(gpu_name: &str) -> Option<bool> {
    const FP8: [&str; 13] =
        ["b200", "gb200", "h200", "h100-80gb", "h100-pcie", "h100-nvl", "h800", "h20", "l40s", "l40", "l4", "rtx-4090", "rtx-4080"];
    const NO_FP8: [&str; 11] =
        ["a100-80gb", "a100-40gb", "a800", "a10g", "a10", "a6000", "rtx-3090", "rtx-3080", "v100-32gb", "v100-16gb", "t4"];
    match gpu_name {
        n if FP8.contains(&n) || n == "mi300x" => Some(true),
        n if NO_FP8.contains(&n) || n == "mi250x" => Some(false),
        _ => None,
    }
}

/// The caveat an fp8 KV cache carries on this GPU, if any.
fn fp8_kv_caveat(fp8: Option<bool>) -> Option<String> {
    match fp8 {
        Some(true) => None,
        Some(false) => Some("this GPU has no FP8 tensor cores (compute capability < 8.9): an fp8 KV cache is stored and dequantized by the attention backend, which not every backend and release supports (e.g. vllm-project/vllm#7714); check your release".into()),
        None => Some("GPU given by size only: an fp8 KV cache needs an attention backend that supports it on your GPU (native on compute capability ≥ 8.9)".into()),
    }
}

/// An alternative from a re-run vLLM report.
fn from_vllm(change: ServeChange, flags: Vec<Flag>, description: String, r: &ServeReport) -> Alternative {
    Alternative {
        change,
        flags,
        description,
        fits: r.fits,
        kv_tokens: r.pool.kv_tokens,
        max_concurrency: r.pool.max_concurrency,
        max_model_len: r.max_model_len,
        longest_max_model_len: r.pool.max_model_len_that_fits,
        gpus: r.tp.saturating_mul(r.pp),
        suggestion: false,
        caveats: Vec::new(),
    }
}

/// Powers of two above `tp`, at most [`MAX_TP`], that divide the attention heads.
fn tp_candidates(m: &Model, tp: u64) -> Vec<u64> {
    (1..=3).map(|k| 1u64 << k).filter(|&t| t > tp && t <= MAX_TP && m.heads % t == 0).collect()
}

/// The first candidate that fits, else the last one tried (the most that was on offer).
fn first_fitting<T>(tried: Vec<(T, bool)>) -> Option<T> {
    let i = tried.iter().position(|t| t.1).unwrap_or(tried.len().saturating_sub(1));
    tried.into_iter().nth(i).map(|t| t.0)
}

/// Rank: fits first, then the cheaper change, then the most concurrency.
/// Order alternatives: those that fit first, then by kind of change, then by concurrency.
pub fn rank(alts: &mut [Alternative]) {
    alts.sort_by(|a, b| b.fits.cmp(&a.fits).then(a.change.cmp(&b.change)).then(b.max_concurrency.total_cmp(&a.max_concurrency)));
}

/// Keep every alternative when advice is needed; else only the few that raise concurrency
/// without changing the job (no shorter length, no offload).
fn select(mut alts: Vec<Alternative>, needed: bool, base_concurrency: f64) -> Vec<Alternative> {
    if !needed {
        alts.retain(|a| {
            a.fits && a.max_concurrency > base_concurrency && !matches!(a.change, ServeChange::MaxModelLen | ServeChange::CpuOffload)
        });
    }
    rank(&mut alts);
    if !needed {
        alts.truncate(WHEN_FITS);
    }
    alts
}

/// vLLM: each single change of `cfg` re-run through [`serve`]. `base` is `serve(m, cfg)`;
/// `fp8` is [`fp8_compute`] of the GPU.
pub fn vllm(m: &Model, cfg: &ServeConfig, base: &ServeReport, fp8: Option<bool>) -> ServeAdvice {
    let needed = !base.fits || base.pool.max_concurrency < 1.0;
    let run = |c: &ServeConfig| serve(m, c).ok();
    let mut alts = Vec::new();
    if cfg.kv_cache_dtype.is_none() && base.kv_dtype_bytes > 1 {
        if let Some(r) = run(&ServeConfig { kv_cache_dtype: Some(DType::F8), ..cfg.clone() }) {
            let mut a = from_vllm(
                ServeChange::KvFp8,
                vec![Flag::new("--kv-cache-dtype", "fp8")],
                "fp8 KV cache: half the bytes per cached token".into(),
                &r,
            );
            a.caveats.extend(fp8_kv_caveat(fp8));
            alts.push(a);
        }
    }
    // A hybrid's float32 SSM state (Qwen3.5's config, Nemotron-H) in bf16: smaller state pages.
    let f32_state = |r: &ServeReport| r.pool.state.is_some_and(|st| st.ssm_dtype == DType::F32);
    if cfg.mamba_ssm_cache_dtype.is_none() && f32_state(base) {
        if let Some(r) = run(&ServeConfig { mamba_ssm_cache_dtype: Some(DType::BF16), ..cfg.clone() }) {
            let mut a = from_vllm(
                ServeChange::StateDtype,
                vec![Flag::new("--mamba-ssm-cache-dtype", "bfloat16")],
                "bf16 recurrent state: about half the bytes of each mixer layer's state page".into(),
                &r,
            );
            a.caveats.push("the SSM state is kept in bf16 instead of float32 between steps: check output quality on long requests".into());
            alts.push(a);
        }
    }
    alts.extend(vllm_fewer_seqs(m, cfg, base));
    alts.extend(vllm_memory_fraction(m, cfg));
    alts.extend(vllm_tp(m, cfg));
    alts.extend(vllm_quantized(m, cfg, base, fp8));
    if needed && !cfg.max_model_len_auto {
        alts.extend(vllm_shorter(m, cfg, base));
    }
    if needed {
        alts.extend(vllm_offload(m, cfg, base));
    }
    ServeAdvice { needed, max_concurrency: base.pool.max_concurrency, alternatives: select(alts, needed, base.pool.max_concurrency) }
}

/// Sequences vLLM keeps for a GPU under 70 GiB (engine/arg_utils.py's default tier), offered to
/// the larger GPUs' 1024.
const FEWER_SEQS: u64 = 256;

/// `--max-num-seqs 256` where vLLM's default is larger (1024 on a GPU of 70 GiB or more): its
/// profile run samples over min(max-num-seqs, max-num-batched-tokens) rows of the vocabulary
/// (14 bytes a logit in 0.33's Model Runner V2 under FlashInfer), so fewer rows leave the KV pool
/// more; offered only when the pool grows.
fn vllm_fewer_seqs(m: &Model, cfg: &ServeConfig, base: &ServeReport) -> Option<Alternative> {
    if base.max_num_seqs <= FEWER_SEQS {
        return None;
    }
    let r = serve(m, &ServeConfig { max_num_seqs: Some(FEWER_SEQS), ..cfg.clone() }).ok()?;
    if r.kv_cache_bytes <= base.kv_cache_bytes {
        return None;
    }
    let mut a = from_vllm(
        ServeChange::MaxNumSeqs,
        vec![Flag::new("--max-num-seqs", FEWER_SEQS)],
        format!(
            "at most {FEWER_SEQS} requests at once instead of {}: the profile run's sampler covers fewer rows, and the KV pool grows by {:.2} GiB",
            base.max_num_seqs,
            (r.kv_cache_bytes - base.kv_cache_bytes) as f64 / GIB as f64
        ),
        &r,
    );
    a.caveats.push(format!("no more than {FEWER_SEQS} requests decode together: less throughput under heavy load"));
    Some(a)
}

/// `--gpu-memory-utilization 0.95`, marked risky.
fn vllm_memory_fraction(m: &Model, cfg: &ServeConfig) -> Option<Alternative> {
    if cfg.kv_cache_memory_bytes.is_some() || cfg.gpu_memory_utilization >= MAX_MEMORY_FRACTION {
        return None;
    }
    let r = serve(m, &ServeConfig { gpu_memory_utilization: MAX_MEMORY_FRACTION, ..cfg.clone() }).ok()?;
    let mut a = from_vllm(
        ServeChange::MemoryFraction,
        vec![Flag::new("--gpu-memory-utilization", MAX_MEMORY_FRACTION)],
        format!("give vLLM {MAX_MEMORY_FRACTION} of the GPU instead of {}", cfg.gpu_memory_utilization),
        &r,
    );
    a.caveats.push(format!(
        "risky: leaves {:.2} GiB of the GPU for the CUDA context, CUDA graphs and any other process; an OOM at start-up or graph capture is more likely",
        cfg.gpu_memory.saturating_sub(r.requested_bytes) as f64 / GIB as f64
    ));
    Some(a)
}

/// More tensor parallelism: the smallest power of two up to 8 that fits.
fn vllm_tp(m: &Model, cfg: &ServeConfig) -> Option<Alternative> {
    let tried: Vec<(ServeReport, bool)> = tp_candidates(m, cfg.tp)
        .into_iter()
        .filter_map(|tp| serve(m, &ServeConfig { tp, ..cfg.clone() }).ok())
        .map(|r| {
            let fits = r.fits;
            (r, fits)
        })
        .collect();
    let r = first_fitting(tried)?;
    let desc = format!("{} GPUs per replica (tensor parallelism {}) instead of {}", r.tp * r.pp, r.tp, cfg.tp * cfg.pp);
    Some(from_vllm(ServeChange::TensorParallel, vec![Flag::new("--tensor-parallel-size", r.tp)], desc, &r))
}

/// FP8 weights (vLLM quantizes a bf16/fp16 checkpoint online with `--quantization fp8`), and a
/// 4-bit AWQ checkpoint as a suggestion (vram cannot know that one exists).
fn vllm_quantized(m: &Model, cfg: &ServeConfig, base: &ServeReport, fp8: Option<bool>) -> Vec<Alternative> {
    if cfg.quantization != Quantization::None || base.dtype.bytes() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Ok(r) = serve(m, &ServeConfig { quantization: Quantization::Fp8, ..cfg.clone() }) {
        let mut a = from_vllm(
            ServeChange::QuantizedWeights,
            vec![Flag::new("--quantization", "fp8")],
            "FP8 weights: vLLM quantizes this checkpoint at load (or serve an FP8 checkpoint of the model, if one exists)".into(),
            &r,
        );
        a.caveats.push("online quantization: vram counts the FP8 weights after loading; the 16-bit checkpoint is read first".into());
        if fp8 != Some(true) {
            a.caveats.push("without FP8 tensor cores (compute capability < 8.9) vLLM runs FP8 weights as W8A16 through Marlin (docs/features/quantization/fp8.md)".into());
        }
        out.push(a);
    }
    if let Ok(r) = serve(m, &ServeConfig { quantization: Quantization::Awq, ..cfg.clone() }) {
        let mut a = from_vllm(
            ServeChange::QuantizedWeights,
            vec![Flag::new("--model", "<an AWQ 4-bit checkpoint of this model>")],
            "4-bit AWQ weights, group size 128: an AWQ checkpoint of this model (if one exists)".into(),
            &r,
        );
        a.suggestion = true;
        a.caveats.push(
            "a suggestion: vram does not know whether such a checkpoint exists; the number is for AWQ 4-bit weights of this architecture"
                .into(),
        );
        out.push(a);
    }
    out
}

/// The longest `--max-model-len` whose re-run fits (vLLM's `estimate_max_model_len`, re-run
/// because a shorter length also changes the default scheduler limits).
fn vllm_shorter(m: &Model, cfg: &ServeConfig, base: &ServeReport) -> Option<Alternative> {
    let mut len = base.pool.max_model_len_that_fits;
    for _ in 0..MAX_SHRINK_STEPS {
        if len == 0 {
            return None;
        }
        let r = serve(m, &ServeConfig { max_model_len: Some(len), ..cfg.clone() }).ok()?;
        if r.fits {
            let desc = format!("serve at most {len} tokens per request instead of {}", base.max_model_len);
            return Some(from_vllm(ServeChange::MaxModelLen, vec![Flag::new("--max-model-len", len)], desc, &r));
        }
        len = r.pool.max_model_len_that_fits.min(len - 1);
    }
    None
}

/// The fewest whole GiB of `--cpu-offload-gb` that fit (binary search over the weights' GiB).
fn vllm_offload(m: &Model, cfg: &ServeConfig, base: &ServeReport) -> Option<Alternative> {
    if cfg.cpu_offload_bytes > 0 || cfg.quantization == Quantization::Checkpoint {
        return None;
    }
    let at = |gb: u64| serve(m, &ServeConfig { cpu_offload_bytes: gb.saturating_mul(GIB), ..cfg.clone() }).ok();
    let (mut lo, mut hi) = (1u64, base.weights_bytes.div_ceil(GIB).max(1));
    if !at(hi)?.fits {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at(mid).is_some_and(|r| r.fits) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let r = at(lo)?;
    let mut a = from_vllm(
        ServeChange::CpuOffload,
        vec![Flag::new("--cpu-offload-gb", lo)],
        format!("keep {lo} GiB of weights per GPU in pinned host memory"),
        &r,
    );
    a.caveats.push("slow: every forward pass copies the offloaded layers over PCIe".into());
    Some(a)
}

/// An alternative from a re-run SGLang report.
fn from_sglang(change: ServeChange, flags: Vec<Flag>, description: String, r: &SglangReport) -> Alternative {
    let longest = if r.fits { r.max_total_num_tokens.min(r.context_len) } else { 0 };
    Alternative {
        change,
        flags,
        description,
        // SGLang starts with any positive pool; a request of context_len tokens needs that many.
        fits: r.fits && r.max_total_num_tokens >= r.context_len,
        kv_tokens: r.max_total_num_tokens,
        max_concurrency: sglang_concurrency(r),
        max_model_len: r.context_len,
        longest_max_model_len: longest,
        gpus: r.tp,
        suggestion: false,
        caveats: Vec::new(),
    }
}

/// Requests of `context_len` tokens the token pool holds at once, at most the running requests
/// SGLang admits (a hybrid's state slots can cap those below the pool).
pub fn sglang_concurrency(r: &SglangReport) -> f64 {
    (r.max_total_num_tokens as f64 / r.context_len.max(1) as f64).min(r.max_running_requests as f64)
}

/// NCCL and custom all-reduce buffers SGLang holds before the weights load at TP ≥ 2: the TP
/// share of vLLM's non-torch default ([`crate::serve::non_torch_default`]), the same libraries
/// on the same GPUs; a stated assumption. `nvswitch` is [`crate::serve::nvswitch_gpu`].
pub fn sglang_distributed(tp: u64, nvswitch: bool) -> u64 {
    if tp > 1 {
        crate::serve::non_torch_default(tp, nvswitch) - crate::serve::non_torch_default(1, nvswitch)
    } else {
        0
    }
}

/// SGLang: each single change of `cfg` re-run through [`sglang`]. `base` is `sglang(m, cfg)`;
/// `nvswitch` sizes the distributed buffers of a larger TP ([`sglang_distributed`]).
pub fn sglang_alternatives(m: &Model, cfg: &SglangConfig, base: &SglangReport, fp8: Option<bool>, nvswitch: bool) -> ServeAdvice {
    let base_c = sglang_concurrency(base);
    let needed = !base.fits || base_c < 1.0;
    let run = |c: &SglangConfig| sglang(m, c).ok();
    let mut alts = Vec::new();
    if cfg.kv_cache_dtype.is_none() && base.kv_dtype_bytes > 1 {
        let c = SglangConfig { kv_cache_dtype: Some(DType::F8), kv_cache_dtype_name: Some("float8_e5m2".into()), ..cfg.clone() };
        if let Some(r) = run(&c) {
            let mut a = from_sglang(
                ServeChange::KvFp8,
                vec![Flag::new("--kv-cache-dtype", "fp8_e5m2")],
                "fp8 (e5m2) KV cache: half the bytes per cached token".into(),
                &r,
            );
            a.caveats.extend(fp8_kv_caveat(fp8));
            alts.push(a);
        }
    }
    // A hybrid's fp32 SSM state in bf16: SGLang's own hint when its slots cap the requests.
    if let (Some(st), None) = (&base.state, cfg.mamba_ssm_dtype) {
        if st.ssm_dtype == DType::F32 {
            if let Some(r) = run(&SglangConfig { mamba_ssm_dtype: Some(DType::BF16), ..cfg.clone() }) {
                let mut a = from_sglang(
                    ServeChange::StateDtype,
                    vec![Flag::new("--mamba-ssm-dtype", "bfloat16")],
                    "bf16 recurrent state: about half the bytes per state slot, so about twice the slots".into(),
                    &r,
                );
                a.caveats
                    .push("the SSM state is kept in bf16 instead of float32 between steps: check output quality on long requests".into());
                alts.push(a);
            }
        }
    }
    if base.mem_fraction_static < MAX_MEMORY_FRACTION {
        let f = ((base.mem_fraction_static + 0.05).min(MAX_MEMORY_FRACTION) * 100.0).round() / 100.0;
        if let Some(r) = run(&SglangConfig { mem_fraction_static: Some(f), ..cfg.clone() }) {
            let desc = format!("weights + KV pool take {f} of the GPU instead of {}", base.mem_fraction_static);
            let mut a = from_sglang(ServeChange::MemoryFraction, vec![Flag::new("--mem-fraction-static", f)], desc, &r);
            a.caveats.push(format!(
                "risky: {:.2} GiB left for activations and CUDA graphs (SGLang's own default reserves more)",
                r.headroom_bytes as f64 / GIB as f64
            ));
            alts.push(a);
        }
    }
    let tried = tp_candidates(m, cfg.tp)
        .into_iter()
        .filter_map(|tp| run(&SglangConfig { tp, distributed: sglang_distributed(tp, nvswitch), ..cfg.clone() }))
        .map(|r| {
            let f = r.fits;
            (r, f)
        });
    if let Some(r) = first_fitting(tried.collect()) {
        let desc = format!("{} GPUs (tensor parallelism {}) instead of {}", r.tp, r.tp, cfg.tp);
        alts.push(from_sglang(ServeChange::TensorParallel, vec![Flag::new("--tp-size", r.tp)], desc, &r));
    }
    if cfg.quantization == Quantization::None && base.dtype.bytes() >= 2 {
        if let Some(r) = run(&SglangConfig { quantization: Quantization::Fp8, ..cfg.clone() }) {
            let desc =
                "FP8 weights: SGLang quantizes this checkpoint at load (or serve an FP8 checkpoint of the model, if one exists)".into();
            let mut a = from_sglang(ServeChange::QuantizedWeights, vec![Flag::new("--quantization", "fp8")], desc, &r);
            a.caveats.push("online quantization: vram counts the FP8 weights after loading; the 16-bit checkpoint is read first".into());
            alts.push(a);
        }
    }
    if needed && base.max_total_num_tokens > 0 {
        alts.extend(sglang_shorter(m, cfg, base));
    }
    ServeAdvice { needed, max_concurrency: base_c, alternatives: select(alts, needed, base_c) }
}

/// The longest `--context-length` whose re-run holds one full request.
fn sglang_shorter(m: &Model, cfg: &SglangConfig, base: &SglangReport) -> Option<Alternative> {
    let mut len = base.max_total_num_tokens.min(base.context_len.saturating_sub(1));
    for _ in 0..MAX_SHRINK_STEPS {
        if len == 0 {
            return None;
        }
        let r = sglang(m, &SglangConfig { context_length: Some(len), ..cfg.clone() }).ok()?;
        if r.fits && r.max_total_num_tokens >= len {
            let desc = format!("serve at most {len} tokens per request instead of {}", base.context_len);
            return Some(from_sglang(ServeChange::MaxModelLen, vec![Flag::new("--context-length", len)], desc, &r));
        }
        len = r.max_total_num_tokens.min(len - 1);
    }
    None
}

/// An alternative from a llama.cpp plan: the context is the KV pool; `--parallel` slots share
/// it (each slot ctx / N, or all of it with a unified cache), so concurrency is the slot count when
/// the plan fits the GPU and 0 when it does not.
fn from_llama(change: ServeChange, flags: Vec<Flag>, description: String, p: &LlamaCppPlan, c: &LlamaCppConfig, fits: bool) -> Alternative {
    // The context that plan serves; the longest that fits is filled in by `with_longest`.
    Alternative {
        change,
        flags,
        description,
        fits,
        kv_tokens: p.ctx,
        max_concurrency: if fits { c.parallel as f64 } else { 0.0 },
        max_model_len: p.ctx_per_sequence,
        longest_max_model_len: 0,
        gpus: 1,
        suggestion: false,
        caveats: Vec::new(),
    }
}

/// The smallest `n` in `lo..=hi` for which `fits(n)` holds, when `fits(hi)` does (monotone).
pub fn smallest(lo: u64, hi: u64, fits: &dyn Fn(u64) -> Result<bool>) -> Result<Option<u64>> {
    if lo > hi || !fits(hi)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(lo))
}

/// llama.cpp: when the plan does not fit `budget` bytes of VRAM, each single change re-planned
/// through [`llama_cpp_with`]: a q8_0 KV cache, the longest `-c` that fits, the fewest
/// `--n-cpu-moe` layers (MoE files), the most `-ngl` layers that fit.
pub fn llama_cpp(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, o: &Overrides, budget: u64) -> Result<ServeAdvice> {
    let plan = |c: &LlamaCppConfig, o: &Overrides| llama_cpp_with(g, hp, c, o);
    let base = plan(c, o)?;
    let needed = base.gpu_total_bytes > budget;
    let mut alts = Vec::new();
    if !needed {
        return Ok(ServeAdvice { needed, max_concurrency: c.parallel as f64, alternatives: alts });
    }
    // q8_0: 34 bytes per block of 32 (ggml-common.h block_q8_0).
    let q8 = crate::gguf::ggml_type(8).map_or(34.0 / 32.0, |(_, n, b)| b as f64 / n as f64);
    if c.kv_bytes > q8 {
        let cq = LlamaCppConfig { kv_bytes: q8, ..*c };
        let p = plan(&cq, o)?;
        let flags = vec![Flag::new("-ctk", "q8_0"), Flag::new("-ctv", "q8_0")];
        let mut a =
            from_llama(ServeChange::KvQ8, flags, "q8_0 KV cache: 8.5 bits per cached element".into(), &p, &cq, p.gpu_total_bytes <= budget);
        a.caveats.push("a quantized V cache needs flash attention (-fa on)".into());
        alts.push(a);
    }
    if let Some(ctx) = max_ctx_with(g, hp, c, o, budget, c.ctx.saturating_sub(1))? {
        let cc = LlamaCppConfig { ctx, ..*c };
        let p = plan(&cc, o)?;
        let desc = format!("a context of {ctx} tokens instead of {}", c.ctx);
        alts.push(from_llama(ServeChange::MaxModelLen, vec![Flag::new("-c", ctx)], desc, &p, &cc, p.gpu_total_bytes <= budget));
    }
    let all = o.moe_only(CpuMoe::All);
    if o.tensor.is_empty() && o.cpu_moe == CpuMoe::None && plan(c, &all)?.overridden_tensors > 0 {
        let moe = |n: u64| o.moe_only(CpuMoe::FirstLayers(n));
        if let Some(n) = smallest(1, hp.layers, &|n| Ok(plan(c, &moe(n))?.gpu_total_bytes <= budget))? {
            let p = plan(c, &moe(n))?;
            let desc = format!("keep the MoE expert weights of the first {n} layers in RAM");
            let mut a = from_llama(ServeChange::CpuOffload, vec![Flag::new("--n-cpu-moe", n)], desc, &p, c, true);
            a.caveats.push("slower: those experts run on the CPU".into());
            alts.push(a);
        }
    }
    let gpu_layers = |n: u64| LlamaCppConfig { n_gpu_layers: n, ..*c };
    let top = c.n_gpu_layers.min(hp.layers + 1);
    // The most layers that fit = (top − the fewest layers to take off).
    let off = smallest(1, top, &|k| Ok(plan(&gpu_layers(top - k), o)?.gpu_total_bytes <= budget))?;
    if let Some(k) = off {
        let cn = gpu_layers(top - k);
        let p = plan(&cn, o)?;
        let desc = format!("{} of {} layers on the GPU, the rest on the CPU", top - k, hp.layers + 1);
        let mut a = from_llama(ServeChange::CpuOffload, vec![Flag::new("-ngl", top - k)], desc, &p, &cn, true);
        a.caveats.push("slow: the layers left in RAM run on the CPU".into());
        alts.push(a);
    }
    for a in &mut alts {
        a.longest_max_model_len = longest_ctx(g, hp, c, o, budget, a)?;
    }
    Ok(ServeAdvice { needed, max_concurrency: 0.0, alternatives: select(alts, needed, 0.0) })
}

/// The longest `-c` (up to the requested one, in llama.cpp's 256-token steps) that fits with
/// the alternative's change applied; 0 when none does.
fn longest_ctx(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, o: &Overrides, budget: u64, a: &Alternative) -> Result<u64> {
    let (mut c, mut o) = (*c, o.clone());
    for f in &a.flags {
        let n = || f.value.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        match f.name.as_str() {
            "-ctk" => c.kv_bytes = a_kv_bytes(c.kv_bytes, f),
            "-c" => c.ctx = n(),
            "-ngl" => c.n_gpu_layers = n(),
            "--n-cpu-moe" => o.cpu_moe = CpuMoe::FirstLayers(n()),
            _ => {}
        }
    }
    Ok(max_ctx_with(g, hp, &c, &o, budget, c.ctx)?.unwrap_or(0))
}

/// Bytes per KV element of a `-ctk` value this module offers (q8_0), else unchanged.
fn a_kv_bytes(current: f64, f: &Flag) -> f64 {
    match f.value.as_deref() {
        Some("q8_0") => crate::gguf::ggml_type(8).map_or(current, |(_, n, b)| b as f64 / n as f64),
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;

    fn cfg(gib: u64) -> ServeConfig {
        ServeConfig { max_model_len: Some(131_072), ..ServeConfig::new(gib * GIB) }
    }

    #[test]
    fn each_alternative_equals_a_rerun_with_its_change() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let c = cfg(24);
        let base = serve(&m, &c).unwrap();
        assert!(!base.fits, "128k tokens of Llama-3.1-8B on 24 GiB should not fit");
        let adv = vllm(&m, &c, &base, Some(false));
        assert!(adv.needed);
        let len = adv.alternatives.iter().find(|a| a.change == ServeChange::MaxModelLen).expect("a shorter length");
        let n: u64 = len.flags[0].value.as_ref().unwrap().parse().unwrap();
        let again = serve(&m, &ServeConfig { max_model_len: Some(n), ..c.clone() }).unwrap();
        assert!(again.fits && again.pool.max_concurrency >= 1.0);
        assert_eq!(len.kv_tokens, again.pool.kv_tokens);
        // One token more does not fit: it is the longest.
        assert!(!serve(&m, &ServeConfig { max_model_len: Some(n + 1), ..c.clone() }).unwrap().fits);
        let fp8 = adv.alternatives.iter().find(|a| a.change == ServeChange::KvFp8).unwrap();
        let again = serve(&m, &ServeConfig { kv_cache_dtype: Some(DType::F8), ..c }).unwrap();
        assert_eq!(fp8.kv_tokens, again.pool.kv_tokens);
        assert!(!fp8.caveats.is_empty(), "an Ampere-class GPU gets the fp8 KV caveat");
    }

    #[test]
    fn fitting_alternatives_rank_first_then_by_cost() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let c = cfg(24);
        let adv = vllm(&m, &c, &serve(&m, &c).unwrap(), None);
        let a = &adv.alternatives;
        for w in a.windows(2) {
            assert!(w[0].fits >= w[1].fits, "{:?} before {:?}", w[0].change, w[1].change);
            if w[0].fits == w[1].fits {
                assert!(w[0].change <= w[1].change);
            }
        }
    }

    #[test]
    fn tensor_parallelism_divides_the_heads() {
        let m = presets::load("qwen2.5-1.5b").unwrap(); // 12 heads: 2 and 4, not 8
        assert_eq!(tp_candidates(&m, 1), vec![2, 4]);
        assert!(tp_candidates(&m, 4).is_empty());
    }

    #[test]
    fn a_launch_that_fits_gets_at_most_two_that_raise_concurrency() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let c = ServeConfig { max_model_len: Some(8192), ..ServeConfig::new(80 * GIB) };
        let base = serve(&m, &c).unwrap();
        let adv = vllm(&m, &c, &base, Some(true));
        assert!(!adv.needed);
        assert!(adv.alternatives.len() <= WHEN_FITS);
        assert!(adv.alternatives.iter().all(|a| a.fits && a.max_concurrency > base.pool.max_concurrency));
        assert!(adv.alternatives.iter().all(|a| a.change != ServeChange::MaxModelLen));
    }

    #[test]
    fn offload_is_the_fewest_gib_that_fit() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let c = ServeConfig { max_model_len: Some(4096), ..ServeConfig::new(16 * GIB) };
        let base = serve(&m, &c).unwrap();
        assert!(!base.fits);
        let adv = vllm(&m, &c, &base, None);
        let off = adv.alternatives.iter().find(|a| a.change == ServeChange::CpuOffload).expect("offload");
        let gb: u64 = off.flags[0].value.as_ref().unwrap().parse().unwrap();
        let at = |g: u64| serve(&m, &ServeConfig { cpu_offload_bytes: g * GIB, ..c.clone() }).unwrap().fits;
        assert!(at(gb) && !at(gb - 1), "{gb}");
    }

    #[test]
    fn sglang_alternatives_are_reruns_and_a_short_pool_needs_advice() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let c = SglangConfig::new(24 * GIB - 434 * (1 << 20), 24_564);
        let base = sglang(&m, &c).unwrap();
        // SGLang starts (fits) with a pool shorter than one 128k request: advice is still needed.
        assert!(base.fits && base.max_total_num_tokens < base.context_len);
        let adv = sglang_alternatives(&m, &c, &base, Some(true), false);
        assert!(adv.needed);
        let short = adv.alternatives.iter().find(|a| a.change == ServeChange::MaxModelLen).expect("a shorter context");
        let n: u64 = short.flags[0].value.as_ref().unwrap().parse().unwrap();
        let r = sglang(&m, &SglangConfig { context_length: Some(n), ..c.clone() }).unwrap();
        assert!(r.max_total_num_tokens >= n && short.fits);
        assert_eq!(short.kv_tokens, r.max_total_num_tokens);
        assert!(adv.alternatives[0].fits, "a fitting alternative ranks first");
    }

    #[test]
    fn awq_is_a_suggestion_never_a_named_repo() {
        let m = presets::load("llama-3.1-8b").unwrap();
        let c = cfg(24);
        let adv = vllm(&m, &c, &serve(&m, &c).unwrap(), None);
        let awq = adv.alternatives.iter().find(|a| a.suggestion).expect("an AWQ suggestion");
        assert!(awq.flags[0].value.as_deref().unwrap().starts_with('<'));
    }
}
