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
    /// Full decode graphs (one per capture size a decode batch takes, per LoRA case).
    pub full: u64,
    /// Layer-graphs priced: piecewise × (layers + 1) + full × layers, and a speculative
    /// drafter's piecewise graphs.
    pub layer_graphs: u64,
    /// Of `layer_graphs`, the drafter's.
    pub drafter_layer_graphs: u64,
    /// Tokens a request adds to a decode step: 1, or 1 + k under speculative decoding.
    pub decode_query: u64,
    /// Whether the sizes were rounded up to multiples of `decode_query` (the V1 runner's full
    /// decode graphs under speculative decoding).
    pub rounded: bool,
    /// Whether NCCL's all-reduce is in the graphs (the larger constant).
    pub nccl: bool,
    /// `--cuda-graph-memory` was given: `bytes` is that, not the model.
    pub given: bool,
}

/// 1, 2, 4, then every 8 below 256 and every 16 from 256, up to `max` (`_set_cudagraph_sizes`'
/// grid; its `request_counts` for speculative decode batches is the same).
fn grid(max: u64) -> Vec<u64> {
    let mut sizes: Vec<u64> = [1, 2, 4].into_iter().filter(|&s| s <= max).collect();
    sizes.extend((8..(max + 1).min(256)).step_by(8));
    if max >= 256 {
        sizes.extend((256..=max).step_by(16));
    }
    sizes
}

/// Tokens a request adds to a decode step (vllm/config/vllm.py `uniform_decode_query_len`):
/// 1 + num_speculative_tokens.
fn decode_query_len(cfg: &ServeConfig) -> u64 {
    1 + cfg.speculative.as_ref().map_or(0, |s| s.num_speculative_tokens)
}

/// The batch sizes vLLM captures (`_set_cudagraph_sizes`, read in 0.19.1, 0.25.0, 0.28.0,
/// 0.29.0, 0.31.0 and 0.33.0). Given sizes (`--cudagraph-capture-sizes`) are kept up to
/// max_num_batched_tokens. By default the [`grid`] up to `--max-cudagraph-capture-size` or else
/// min(2 × max_num_seqs × q, 512 — 1024 on data-centre Blackwell from 0.28), q the decode query
/// length ([`decode_query_len`]), and at most max_num_batched_tokens; from 0.25
/// max_num_batched_tokens itself when it falls under that ceiling. When no ceiling is given, the
/// uniform decode sizes join them: from 0.29 under speculative decoding n × q for every request
/// count n of the grid up to max_num_seqs (and max_num_seqs itself), from 0.31 without it
/// max_num_seqs.
///
/// `--performance-mode interactivity` captures every size from 1 to 32 in place of 1, 2, 4.
pub fn capture_sizes(cfg: &ServeConfig, seqs: u64, batched: u64) -> Vec<u64> {
    if let Some(given) = &cfg.cudagraph_capture_sizes {
        let mut sizes: Vec<u64> = given.iter().copied().filter(|&s| s <= batched).collect();
        sizes.sort_unstable();
        sizes.dedup();
        return sizes;
    }
    let v = cfg.vllm_version;
    let blackwell_dc = cfg.gpu_arch.and_then(|a| a.cuda_cc).is_some_and(|(major, _)| major == 10);
    let ceiling = if blackwell_dc && v >= (VllmVersion { major: 0, minor: 28 }) { 1024 } else { 512 };
    let q = decode_query_len(cfg);
    let cap = cfg.max_cudagraph_capture_size.unwrap_or(seqs.saturating_mul(2 * q).min(ceiling));
    let uniform: Vec<u64> = match cfg.max_cudagraph_capture_size {
        Some(_) => Vec::new(),
        None if q > 1 && v >= (VllmVersion { major: 0, minor: 29 }) => {
            let reqs = seqs.min(ceiling);
            grid(reqs).into_iter().chain([reqs]).map(|n| n * q).filter(|&s| s <= cap).collect()
        }
        None if q == 1 && v >= (VllmVersion { major: 0, minor: 31 }) && seqs <= cap => vec![seqs],
        None => Vec::new(),
    };
    let cap = cap.min(batched);
    let mut sizes = grid(cap);
    if cfg.performance_mode == crate::serve::PerformanceMode::Interactivity {
        sizes.retain(|&s| s > 32);
        sizes.extend(1..=cap.min(32));
    }
    if v >= (VllmVersion { major: 0, minor: 25 }) && batched <= cap {
        sizes.push(batched);
    }
    sizes.extend(uniform.into_iter().filter(|&u| u <= batched));
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
///
/// Under speculative decoding the V1 runner rounds every size up to a multiple of the decode
/// query length when it captures full decode graphs (vllm/config/compilation.py
/// `adjust_cudagraph_sizes_for_spec_decode`; from 0.25 not under Model Runner V2, which captures
/// the uniform decode sizes instead), and a drafter captures piecewise graphs of its own layers
/// at every size (v1/spec_decode/eagle.py: piecewise only).
pub fn estimate(
    cfg: &ServeConfig,
    layers: u64,
    seqs: u64,
    batched: u64,
    draft_layers: u64,
    runner: crate::serve::ModelRunner,
) -> CudaGraphs {
    let nccl = cfg.gpu_interconnect.is_some_and(|i| i.nccl_all_reduce(cfg.tp));
    let q = decode_query_len(cfg);
    let mode = cfg.cudagraph_mode.unwrap_or(CudagraphMode::FullAndPiecewise);
    let full_decode = matches!(mode, CudagraphMode::Full | CudagraphMode::FullDecodeOnly | CudagraphMode::FullAndPiecewise);
    let rounded =
        q > 1 && full_decode && (runner == crate::serve::ModelRunner::V1 || cfg.vllm_version < (VllmVersion { major: 0, minor: 25 }));
    let sizes = capture_sizes(cfg, seqs, batched);
    let sizes = if rounded { crate::serve_spec::round_capture_sizes(&sizes, q - 1) } else { sizes };
    let cases = if cfg.lora.is_some() { 2 } else { 1 };
    let decode_tokens = seqs.saturating_mul(q);
    let (all, decode) = (sizes.len() as u64 * cases, sizes.iter().filter(|&&s| s <= decode_tokens).count() as u64 * cases);
    let (piecewise, full) = match mode {
        CudagraphMode::None => (0, 0),
        CudagraphMode::Piecewise => (all, 0),
        CudagraphMode::Full => (0, all),
        CudagraphMode::FullDecodeOnly => (0, decode),
        CudagraphMode::FullAndPiecewise => (all, decode),
    };
    let drafter_layer_graphs = if draft_layers > 0 && piecewise + full > 0 { all * (draft_layers + 1) } else { 0 };
    let layer_graphs = piecewise * (layers + 1) + full * layers + drafter_layer_graphs;
    let per = if nccl { PER_LAYER_GRAPH_NCCL } else { PER_LAYER_GRAPH };
    CudaGraphs {
        bytes: cfg.cuda_graph_memory.unwrap_or(layer_graphs.saturating_mul(per)),
        piecewise,
        full,
        layer_graphs,
        drafter_layer_graphs,
        decode_query: q,
        rounded,
        nccl,
        given: cfg.cuda_graph_memory.is_some(),
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
    ) + &speculation(g)
}

/// What speculative decoding did to the graphs, for the note.
fn speculation(g: &CudaGraphs) -> String {
    let q = g.decode_query;
    if q <= 1 {
        return String::new();
    }
    format!(
        "; speculative decoding: a decode step holds {q} tokens a request, so the ceiling is 2 × max-num-seqs × {q}, {}{}",
        if g.rounded {
            format!("and the V1 runner rounds every size up to a multiple of {q} for its full decode graphs")
        } else {
            format!("and the sizes are not rounded (Model Runner V2 from 0.25, or no full decode graphs); from 0.29 the decode sizes n × {q} join them")
        },
        if g.drafter_layer_graphs > 0 {
            format!("; the drafter's piecewise graphs are {} of the layer-graphs", g.drafter_layer_graphs)
        } else {
            String::new()
        },
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
        let at = |minor: u32| ServeConfig { vllm_version: VllmVersion { major: 0, minor }, ..ServeConfig::new(80 << 30) };
        let s = capture_sizes(&at(22), 256, 8192);
        assert_eq!((s.len(), s.last(), s.iter().filter(|&&x| x <= 256).count()), (51, Some(&512), 35));
        let s = capture_sizes(&at(22), 128, 2048);
        assert_eq!((s.len(), s.last(), s.iter().filter(|&&x| x <= 128).count()), (35, Some(&256), 19));
        // 0.25 adds max_num_batched_tokens under the ceiling; 0.31 max_num_seqs.
        assert!(!capture_sizes(&at(22), 256, 100).contains(&100));
        assert_eq!(capture_sizes(&at(25), 256, 100).last(), Some(&100));
        assert!(!capture_sizes(&at(29), 100, 8192).contains(&100));
        assert!(capture_sizes(&at(31), 100, 8192).contains(&100));
        // Data-centre Blackwell captures to 1024 from 0.28.
        let b200 = |minor: u32| at(minor).with_gpu_traits(&crate::gpu::lookup("b200").unwrap());
        assert_eq!(capture_sizes(&b200(28), 1024, 8192).last(), Some(&1024));
        assert_eq!(capture_sizes(&b200(25), 1024, 8192).last(), Some(&512));
        // Interactivity: 1..=32 every size, then the usual strides (8, 16, 24, 32 already in).
        let s = capture_sizes(&ServeConfig { performance_mode: crate::serve::PerformanceMode::Interactivity, ..at(22) }, 256, 8192);
        // 51 − (1, 2, 4) − (8, 16, 24, 32) + 32 = 76.
        assert_eq!((s.len(), s[..32].to_vec()), (51 - 3 - 4 + 32, (1..=32).collect::<Vec<u64>>()));
    }

    /// Speculative decoding (k = 2, q = 3) at 8 sequences: the ceiling is 2 × 8 × 3 = 48; from
    /// 0.29 the decode sizes n × 3 for n in 1, 2, 4, 8 join the grid (vllm/config/vllm.py
    /// `_set_cudagraph_sizes`).
    #[test]
    fn speculation_widens_the_ceiling_and_adds_decode_sizes() {
        let spec =
            Some(crate::serve_spec::Speculative { method: crate::serve_spec::SpecMethod::Ngram, num_speculative_tokens: 2, draft: None });
        let at = |minor: u32| ServeConfig {
            vllm_version: VllmVersion { major: 0, minor },
            speculative: spec.clone(),
            ..ServeConfig::new(80 << 30)
        };
        assert_eq!(capture_sizes(&at(23), 8, 65_536), vec![1, 2, 4, 8, 16, 24, 32, 40, 48]);
        assert_eq!(capture_sizes(&at(29), 8, 65_536), vec![1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 48]);
        // The V1 runner rounds them for its full decode graphs; Model Runner V2 (from 0.25) does not.
        let v1 = estimate(&at(29), 64, 8, 65_536, 0, crate::serve::ModelRunner::V1);
        let v2 = estimate(&at(29), 64, 8, 65_536, 0, crate::serve::ModelRunner::V2);
        assert!(v1.rounded && !v2.rounded);
        // 3, 6, 9, 12, 18, 24, 33, 42, 48 rounded against the 12 sizes as they are.
        assert_eq!((v1.piecewise, v2.piecewise), (9, 12));
        assert!(note(&v2).contains("not rounded"), "{}", note(&v2));
    }

    #[test]
    fn layer_graphs_and_lora_cases() {
        let cfg = ServeConfig { tp: 1, vllm_version: VllmVersion { major: 0, minor: 22 }, ..ServeConfig::new(80 << 30) };
        let g = estimate(&cfg, 28, 128, 2048, 0, crate::serve::ModelRunner::V1);
        // Qwen2.5-7B, 128 sequences: 35 × 29 + 19 × 28 = 1547 layer-graphs × 251 KiB = 0.37 GiB,
        // the estimate its log printed (graph_memory.jsonl qwen2.5-7b-v0.22).
        assert_eq!((g.piecewise, g.full, g.layer_graphs), (35, 19, 1547));
        assert_eq!(g.bytes, 1547 * 251 * 1024);
        let lora = ServeConfig { lora: Some(crate::serve::ServeLora { max_loras: 1, max_lora_rank: 16, max_cpu_loras: 1 }), ..cfg.clone() };
        assert_eq!(estimate(&lora, 28, 128, 2048, 0, crate::serve::ModelRunner::V1).layer_graphs, 2 * 1547);
        let given = ServeConfig { cuda_graph_memory: Some(1 << 30), ..cfg.clone() };
        assert!(estimate(&given, 28, 128, 2048, 0, crate::serve::ModelRunner::V1).given);
        // The modes keep one kind of graph or the other; FULL captures every size in full.
        let mode = |m: CudagraphMode| {
            let g = estimate(&ServeConfig { cudagraph_mode: Some(m), ..cfg.clone() }, 28, 128, 2048, 0, crate::serve::ModelRunner::V1);
            (g.piecewise, g.full)
        };
        assert_eq!(mode(CudagraphMode::Piecewise), (35, 0));
        assert_eq!(mode(CudagraphMode::FullDecodeOnly), (0, 19));
        assert_eq!(mode(CudagraphMode::Full), (0, 35));
        assert_eq!(mode(CudagraphMode::None), (0, 0));
        // Given sizes replace the list (kept up to max_num_batched_tokens); a given ceiling
        // replaces 2 × max_num_seqs.
        let sizes = ServeConfig { cudagraph_capture_sizes: Some(vec![1, 8, 8, 4096]), ..cfg.clone() };
        assert_eq!(estimate(&sizes, 28, 128, 2048, 0, crate::serve::ModelRunner::V1).piecewise, 2);
        let capped = ServeConfig { max_cudagraph_capture_size: Some(64), ..cfg };
        assert_eq!(estimate(&capped, 28, 128, 2048, 0, crate::serve::ModelRunner::V1).piecewise, 3 + 8);
        assert!(CudagraphMode::parse("full_decode_only").is_ok() && CudagraphMode::parse("partial").is_err());
    }
}
