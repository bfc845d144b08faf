//! vLLM's CUDA-graph memory estimate, the term vLLM ≥ 0.20 adds to the profile-run peak before
//! it sizes the KV cache.
//!
//! vLLM measures it on the GPU (vllm/v1/worker/gpu_model_runner.py `profile_cudagraph_memory`;
//! Model Runner V2's vllm/v1/worker/gpu/cudagraph_utils.py): it captures the largest graphs of
//! each mode into a throwaway pool and extrapolates the rest, the first capture plus (n − 1) ×
//! the second, at least 1 MiB a graph. What a capture costs is the CUDA driver's memory for the
//! graph's nodes, which grows with the kernels in it, so vram counts *layer-graphs*:
//! - a piecewise graph of one batch size is split at every attention (or Mamba, or linear
//!   attention) layer (vllm/config/compilation.py `_attention_ops`): layers + 1 pieces;
//! - a full graph of one decode batch size holds every layer once;
//!
//! and prices each at a constant fitted to public start-up logs (validation/vllm/graph_fit.py
//! over graph_memory.jsonl: 251 KiB, or 413 KiB where NCCL's all-reduce is captured into the
//! graphs; held-out median error 7% against 62% for the flat 0.71 GiB vram assumed before). The
//! batch sizes are vLLM's own (vllm/config/vllm.py `_set_cudagraph_sizes`, read in 0.19.1,
//! 0.25.0, 0.28.0, 0.29.0, 0.31.0 and 0.33.0).

use serde::Serialize;

use crate::error::Result;
use crate::serve::{ServeConfig, VllmVersion};

/// vLLM's `compilation_config.cudagraph_mode` (vllm/config/compilation.py `CUDAGraphMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CudagraphMode {
    /// No graphs (as `--enforce-eager`).
    None,
    /// Piecewise graphs only, split at the attention layers.
    Piecewise,
    /// One full graph per capture size, mixed batches included.
    Full,
    /// Full graphs for decode batches only.
    FullDecodeOnly,
    /// vLLM's default: piecewise graphs for mixed batches, full ones for decode.
    FullAndPiecewise,
}

impl CudagraphMode {
    /// vLLM's spelling, any case (`PIECEWISE`, `full_decode_only`).
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "NONE" => CudagraphMode::None,
            "PIECEWISE" => CudagraphMode::Piecewise,
            "FULL" => CudagraphMode::Full,
            "FULL_DECODE_ONLY" => CudagraphMode::FullDecodeOnly,
            "FULL_AND_PIECEWISE" => CudagraphMode::FullAndPiecewise,
            _ => {
                return Err(crate::serve::invalid(
                    "cudagraph_mode",
                    s,
                    "one of NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE (vLLM's CUDAGraphMode)",
                ))
            }
        })
    }
}

const KIB: u64 = 1 << 10;
/// Driver memory per layer-graph, custom all-reduce or one GPU: the median over the five
/// development logs of validation/vllm/graph_memory.jsonl (graph_fit.py prints 251 KiB).
pub const PER_LAYER_GRAPH: u64 = 251 * KIB;
/// The same where NCCL's all-reduce is captured (TP over PCIe above two GPUs, or GeForce cards
/// without peer-to-peer access): one development log, Qwen2.5-72B on four L40S (413 KiB).
pub const PER_LAYER_GRAPH_NCCL: u64 = 413 * KIB;

/// vLLM's estimate for one GPU, and how it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CudaGraphs {
    /// The estimate, bytes.
    pub bytes: u64,
    /// Piecewise graphs (one per capture size, per LoRA case).
    pub piecewise: u64,
    /// Full decode graphs (one per capture size up to `--max-num-seqs`, per LoRA case).
    pub full: u64,
    /// Layer-graphs priced: piecewise × (layers + 1) + full × layers.
    pub layer_graphs: u64,
    /// Whether NCCL's all-reduce is in the graphs (the larger constant).
    pub nccl: bool,
    /// `--cuda-graph-memory` was given: `bytes` is that, not the model.
    pub given: bool,
}

/// The batch sizes vLLM captures (`_set_cudagraph_sizes`). Given sizes (`--cudagraph-capture-
/// sizes`) are kept up to max_num_batched_tokens. By default: 1, 2, 4, then every 8 below 256 and
/// every 16 from 256, up to `max` (`--max-cudagraph-capture-size`) or else min(2 × max_num_seqs,
/// 512 — 1024 on data-centre Blackwell from 0.28), and at most max_num_batched_tokens; from 0.25
/// max_num_batched_tokens itself when it falls under that ceiling, and from 0.31, when no `max`
/// is given, max_num_seqs (the widest uniform decode).
///
/// `interactivity` (`--performance-mode interactivity`) captures every size from 1 to 32 in place
/// of 1, 2, 4.
pub fn capture_sizes(
    v: VllmVersion,
    seqs: u64,
    batched: u64,
    blackwell_dc: bool,
    max: Option<u64>,
    given: Option<&[u64]>,
    interactivity: bool,
) -> Vec<u64> {
    if let Some(given) = given {
        let mut sizes: Vec<u64> = given.iter().copied().filter(|&s| s <= batched).collect();
        sizes.sort_unstable();
        sizes.dedup();
        return sizes;
    }
    let ceiling = if blackwell_dc && v >= (VllmVersion { major: 0, minor: 28 }) { 1024 } else { 512 };
    let cap = max.unwrap_or(seqs.saturating_mul(2).min(ceiling));
    let uniform = (max.is_none() && v >= (VllmVersion { major: 0, minor: 31 }) && seqs <= cap).then_some(seqs);
    let cap = cap.min(batched);
    let mut sizes: Vec<u64> =
        if interactivity { (1..=cap.min(32)).collect() } else { [1, 2, 4].into_iter().filter(|&s| s <= cap).collect() };
    if cap >= 8 {
        sizes.extend((8..(cap + 1).min(256)).step_by(8));
    }
    if cap >= 256 {
        sizes.extend((256..=cap).step_by(16));
    }
    if v >= (VllmVersion { major: 0, minor: 25 }) && batched <= cap {
        sizes.push(batched);
    }
    sizes.extend(uniform.filter(|&u| u <= batched));
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// vLLM's own checks of the capture settings (vllm/config/vllm.py `_set_cudagraph_sizes`): a
/// given list holds at least one size, every size is at least 1, and a given ceiling beside a
/// given list must be the list's largest size under max_num_batched_tokens.
pub fn check(cfg: &ServeConfig, batched: u64) -> Result<()> {
    let bad = |what: &str, v: String, hint: &str| Err(crate::serve::invalid(what, v, hint));
    if let Some(sizes) = &cfg.cudagraph_capture_sizes {
        if sizes.is_empty() || sizes.iter().any(|&s| s == 0 || s > 1 << 20) {
            return bad("--cudagraph-capture-sizes", format!("{sizes:?}"), "one batch size or more, each from 1 to 1048576");
        }
    }
    match (cfg.max_cudagraph_capture_size, &cfg.cudagraph_capture_sizes) {
        (Some(0), _) => bad("--max-cudagraph-capture-size", "0".into(), "at least 1 (or --enforce-eager for no graphs)"),
        (Some(m), Some(sizes)) if Some(m) != sizes.iter().copied().filter(|&s| s <= batched).max() => bad(
            "--max-cudagraph-capture-size",
            m.to_string(),
            "the largest of --cudagraph-capture-sizes (up to max-num-batched-tokens): vLLM refuses a ceiling that differs from the given list",
        ),
        _ => Ok(()),
    }
}

/// The estimate for a stage of `layers` decoder layers at `seqs` sequences and `batched`
/// tokens (vllm/v1/cudagraph_dispatcher.py `initialize_cudagraph_keys`). Under
/// FULL_AND_PIECEWISE, vLLM's default from 0.11: piecewise graphs at every capture size, full
/// graphs at the sizes a decode batch of at most `seqs` requests takes; PIECEWISE keeps the
/// first, FULL_DECODE_ONLY the second, FULL captures every size as one full graph. With LoRA
/// every size is captured twice, without adapters and with `max_loras + 1` active
/// (`_get_lora_cases`, `cudagraph_specialize_lora` on by default).
pub fn estimate(cfg: &ServeConfig, layers: u64, seqs: u64, batched: u64, draft_layers: u64) -> CudaGraphs {
    let nccl = cfg.gpu_interconnect.is_some_and(|i| i.nccl_all_reduce(cfg.tp));
    let blackwell_dc = cfg.gpu_arch.and_then(|a| a.cuda_cc).is_some_and(|(major, _)| major == 10);
    // Speculative decoding: a decode step holds 1 + k tokens a request, so the default ceiling is
    // min(2 × max-num-seqs × (1 + k), 512) (config/vllm.py `_set_cudagraph_sizes`) and every size
    // is rounded up to a multiple of 1 + k (serve_spec::round_capture_sizes).
    let k = cfg.speculative.as_ref().map_or(0, |s| s.num_speculative_tokens);
    let spec_ceiling = (k > 0 && cfg.max_cudagraph_capture_size.is_none() && cfg.cudagraph_capture_sizes.is_none()).then(|| {
        let ceiling = if blackwell_dc && cfg.vllm_version >= (VllmVersion { major: 0, minor: 28 }) { 1024 } else { 512 };
        seqs.saturating_mul(2 * (k + 1)).min(ceiling)
    });
    let sizes = capture_sizes(
        cfg.vllm_version,
        seqs,
        batched,
        blackwell_dc,
        spec_ceiling.or(cfg.max_cudagraph_capture_size),
        cfg.cudagraph_capture_sizes.as_deref(),
        cfg.performance_mode == crate::serve::PerformanceMode::Interactivity,
    );
    // The rounding is for separate full decode graphs only (gpu_model_runner.py: decode mode
    // FULL with a separate routine, i.e. FULL_AND_PIECEWISE or FULL_DECODE_ONLY).
    let mode = cfg.cudagraph_mode.unwrap_or(CudagraphMode::FullAndPiecewise);
    let rounds = matches!(mode, CudagraphMode::FullAndPiecewise | CudagraphMode::FullDecodeOnly);
    let sizes = if k > 0 && rounds { crate::serve_spec::round_capture_sizes(&sizes, k) } else { sizes };
    let cases = if cfg.lora.is_some() { 2 } else { 1 };
    let decode_tokens = seqs.saturating_mul(k + 1);
    let (all, decode) = (sizes.len() as u64 * cases, sizes.iter().filter(|&&s| s <= decode_tokens).count() as u64 * cases);
    let (piecewise, full) = match mode {
        CudagraphMode::None => (0, 0),
        CudagraphMode::Piecewise => (all, 0),
        CudagraphMode::Full => (0, all),
        CudagraphMode::FullDecodeOnly => (0, decode),
        CudagraphMode::FullAndPiecewise => (all, decode),
    };
    // The drafter's own piecewise graphs at every size (v1/spec_decode/eagle.py: piecewise only).
    let drafter = if draft_layers > 0 && piecewise + full > 0 { all * (draft_layers + 1) } else { 0 };
    let layer_graphs = piecewise * (layers + 1) + full * layers + drafter;
    let per = if nccl { PER_LAYER_GRAPH_NCCL } else { PER_LAYER_GRAPH };
    let modelled = layer_graphs.saturating_mul(per);
    match cfg.cuda_graph_memory {
        Some(b) => CudaGraphs { bytes: b, piecewise, full, layer_graphs, nccl, given: true },
        None => CudaGraphs { bytes: modelled, piecewise, full, layer_graphs, nccl, given: false },
    }
}

/// The report's line on the estimate.
pub fn note(g: &CudaGraphs) -> String {
    let gib = g.bytes as f64 / (1u64 << 30) as f64;
    if g.given {
        return format!(
            "vLLM ≥ 0.20 adds its CUDA-graph estimate to the activation peak before sizing the KV cache: {gib:.2} GiB as given (--cuda-graph-memory); vram's model would count {} piecewise and {} full graphs",
            g.piecewise, g.full
        );
    }
    format!(
        "vLLM ≥ 0.20 adds its CUDA-graph estimate to the activation peak before sizing the KV cache: {gib:.2} GiB modelled — {} piecewise graphs (one per capture size, split at every layer) and {} full decode graphs, {} layer-graphs at {} KiB{} (a constant fitted to public start-up logs, validation/vllm/graph_fit.py: held-out median error 7%); vLLM measures it on the GPU and logs \"Estimated CUDA graph memory\" — pass --cuda-graph-memory with that value, or --vllm-version 0.19 for the older accounting",
        g.piecewise,
        g.full,
        g.layer_graphs,
        if g.nccl { PER_LAYER_GRAPH_NCCL } else { PER_LAYER_GRAPH } / KIB,
        if g.nccl { ", NCCL's all-reduce captured into them (no custom all-reduce over this interconnect)" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts vLLM logged ("Profiling CUDA graph memory: PIECEWISE=51 (largest=512),
    /// FULL=35 (largest=256)" at 256 sequences; "PIECEWISE=35 (largest=256), FULL=19
    /// (largest=128)" at 128 sequences and 2048 tokens: validation/vllm/graph_memory.jsonl).
    #[test]
    fn capture_sizes_match_logged_counts() {
        let v = VllmVersion { major: 0, minor: 22 };
        let s = capture_sizes(v, 256, 8192, false, None, None, false);
        assert_eq!((s.len(), s.last(), s.iter().filter(|&&x| x <= 256).count()), (51, Some(&512), 35));
        let s = capture_sizes(v, 128, 2048, false, None, None, false);
        assert_eq!((s.len(), s.last(), s.iter().filter(|&&x| x <= 128).count()), (35, Some(&256), 19));
        // 0.25 adds max_num_batched_tokens under the ceiling; 0.31 max_num_seqs.
        assert!(!capture_sizes(VllmVersion { major: 0, minor: 22 }, 256, 100, false, None, None, false).contains(&100));
        assert_eq!(capture_sizes(VllmVersion { major: 0, minor: 25 }, 256, 100, false, None, None, false).last(), Some(&100));
        assert!(!capture_sizes(VllmVersion { major: 0, minor: 29 }, 100, 8192, false, None, None, false).contains(&100));
        assert!(capture_sizes(VllmVersion { major: 0, minor: 31 }, 100, 8192, false, None, None, false).contains(&100));
        // Data-centre Blackwell captures to 1024 from 0.28.
        assert_eq!(capture_sizes(VllmVersion { major: 0, minor: 28 }, 1024, 8192, true, None, None, false).last(), Some(&1024));
        assert_eq!(capture_sizes(VllmVersion { major: 0, minor: 25 }, 1024, 8192, true, None, None, false).last(), Some(&512));
        // Interactivity: 1..=32 every size, then the usual strides (8, 16, 24, 32 already in).
        let s = capture_sizes(v, 256, 8192, false, None, None, true);
        // 51 − (1, 2, 4) − (8, 16, 24, 32) + 32 = 76.
        assert_eq!((s.len(), s[..32].to_vec()), (51 - 3 - 4 + 32, (1..=32).collect::<Vec<u64>>()));
    }

    #[test]
    fn layer_graphs_and_lora_cases() {
        let cfg = ServeConfig { tp: 1, vllm_version: VllmVersion { major: 0, minor: 22 }, ..ServeConfig::new(80 << 30) };
        let g = estimate(&cfg, 28, 128, 2048, 0);
        // Qwen2.5-7B, 128 sequences: 35 × 29 + 19 × 28 = 1547 layer-graphs × 251 KiB = 0.37 GiB,
        // the estimate its log printed (graph_memory.jsonl qwen2.5-7b-v0.22).
        assert_eq!((g.piecewise, g.full, g.layer_graphs), (35, 19, 1547));
        assert_eq!(g.bytes, 1547 * 251 * 1024);
        let lora = ServeConfig { lora: Some(crate::serve::ServeLora { max_loras: 1, max_lora_rank: 16, max_cpu_loras: 1 }), ..cfg.clone() };
        assert_eq!(estimate(&lora, 28, 128, 2048, 0).layer_graphs, 2 * 1547);
        let given = ServeConfig { cuda_graph_memory: Some(1 << 30), ..cfg.clone() };
        assert!(estimate(&given, 28, 128, 2048, 0).given);
        // The modes keep one kind of graph or the other; FULL captures every size in full.
        let mode = |m: CudagraphMode| {
            let g = estimate(&ServeConfig { cudagraph_mode: Some(m), ..cfg.clone() }, 28, 128, 2048, 0);
            (g.piecewise, g.full)
        };
        assert_eq!(mode(CudagraphMode::Piecewise), (35, 0));
        assert_eq!(mode(CudagraphMode::FullDecodeOnly), (0, 19));
        assert_eq!(mode(CudagraphMode::Full), (0, 35));
        assert_eq!(mode(CudagraphMode::None), (0, 0));
        // Given sizes replace the list (kept up to max_num_batched_tokens); a given ceiling
        // replaces 2 × max_num_seqs.
        let sizes = ServeConfig { cudagraph_capture_sizes: Some(vec![1, 8, 8, 4096]), ..cfg.clone() };
        assert_eq!(estimate(&sizes, 28, 128, 2048, 0).piecewise, 2);
        let capped = ServeConfig { max_cudagraph_capture_size: Some(64), ..cfg };
        assert_eq!(estimate(&capped, 28, 128, 2048, 0).piecewise, 3 + 8);
        assert!(CudagraphMode::parse("full_decode_only").is_ok() && CudagraphMode::parse("partial").is_err());
    }
}
