//! `vram plan`: enumerate distributed layouts, keep those that fit, rank by estimated step time.
//!
//! Memory uses the same layout functions as [`crate::parallel::estimate_parallel`], evaluated in
//! closed form (activation profiles are computed once per checkpointing mode and scaled by the
//! micro-batch), so the whole space is searched in milliseconds. Step time is a stated model:
//! 6·N·tokens FLOPs (+ recomputation, + causal attention) over GPUs × peak × MFU, the 1F1B
//! pipeline bubble, and communication volume over link bandwidth, partly overlapped.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::job::{Checkpointing, Job, Precision};
use crate::memory::activation_profile;
use crate::model::{Model, Role};
use crate::parallel::{
    deepspeed_states, fsdp_states, megatron_layout, state_bytes_per_param, Counts, Engine, FsdpStrategy, Parallel, Sharding,
};

/// Assumptions of the throughput model, all user-settable.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throughput {
    /// Model FLOPs utilisation of the compute (0.40 is a typical well-tuned LLM run).
    pub mfu: f64,
    /// GPU-to-GPU bandwidth inside a node, GB/s per direction.
    pub intra_node_gbps: f64,
    /// Network bandwidth per GPU between nodes, GB/s (400 Gb/s InfiniBand NDR = 50 GB/s).
    pub inter_node_gbps: f64,
    /// Host-device bandwidth for offload, GB/s (PCIe Gen5 x16 ≈ 50, Gen4 ≈ 25).
    pub pcie_gbps: f64,
    /// Share of data-parallel communication hidden behind backward compute.
    pub dp_overlap: f64,
}

impl Throughput {
    /// Defaults for a GPU: NVLink bandwidth by family, 50 GB/s between nodes.
    pub fn for_gpu(gpu: &Gpu) -> Throughput {
        // NVLink per GPU per direction (NVIDIA datasheets: H100/H200/H20 900 GB/s bidirectional,
        // A100 600, H800/A800 400, B200 1800); PCIe-only cards ~32 GB/s.
        let n = gpu.name.as_str();
        let intra = if n.starts_with("b200") || n.starts_with("gb200") {
            900.0
        } else if n.starts_with("h100-80gb") || n.starts_with("h200") || n.starts_with("h20") || n == "h100-nvl" {
            450.0
        } else if n.starts_with("a100") {
            300.0
        } else if n.starts_with("h800") || n.starts_with("a800") {
            200.0
        } else if n.starts_with("mi300") {
            448.0
        } else {
            32.0
        };
        Throughput { mfu: 0.40, intra_node_gbps: intra, inter_node_gbps: 50.0, pcie_gbps: 25.0, dp_overlap: 0.5 }
    }
}

/// One evaluated layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The layout.
    pub parallel: Parallel,
    /// Micro-batch per GPU.
    pub micro_batch: u64,
    /// Micro-batches per optimizer step per data-parallel rank (gradient accumulation / pipeline).
    pub grad_accum: u64,
    /// Activation checkpointing.
    pub checkpointing: Checkpointing,
    /// Estimated total per GPU (most loaded rank).
    pub per_gpu_bytes: u64,
    /// Estimated seconds per optimizer step.
    pub step_seconds: f64,
    /// Tokens per second over the whole job.
    pub tokens_per_second: f64,
    /// Global batch in sequences.
    pub global_batch: u64,
    /// Why this plan ranks where it does.
    pub reason: String,
}

/// What the search did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanResult {
    /// Configurations evaluated.
    pub evaluated: u64,
    /// Configurations that fit.
    pub fitting: u64,
    /// Global batch in sequences the plans were evaluated at.
    pub global_batch: u64,
    /// Tokens per optimizer step (global batch × sequence length; a float: the product can
    /// exceed u64 for the largest accepted global batches).
    pub global_tokens: f64,
    /// The best plans, fastest first.
    pub top: Vec<Plan>,
    /// Assumptions used.
    pub throughput: Throughput,
}

/// The search request.
#[derive(Debug, Clone)]
pub struct PlanRequest<'a> {
    /// The model.
    pub model: &'a Model,
    /// Sequence length, precision, optimizer, attention (batch and checkpointing are searched).
    pub job: &'a Job,
    /// The GPU.
    pub gpu: &'a Gpu,
    /// GPUs in total.
    pub gpus: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Global batch in sequences; `None`: the smallest multiple of the GPU count with ≥ 4M tokens.
    pub global_batch: Option<u64>,
    /// Share of GPU memory a plan may use.
    pub target: f64,
    /// Throughput assumptions.
    pub throughput: Throughput,
    /// How many plans to keep.
    pub keep: usize,
    /// Only this engine (for `--emit`).
    pub only: Option<Engine>,
}

/// Per-micro-batch activation bytes (saved + max(logits, backward transient) + input) for each
/// checkpointing mode, at micro-batch 1, for a precision and sequence.
fn act_per_mb(m: &Model, job: &Job, precision: Precision, seq: u64) -> [u128; 3] {
    let modes = [Checkpointing::None, Checkpointing::Selective, Checkpointing::Full];
    modes.map(|ck| {
        let p = activation_profile(m, &Job { batch: 1, seq, precision, checkpointing: ck, grad_accum: 1, ..job.clone() });
        p.saved + p.logits.max(p.backward_transient) + p.input
    })
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n % d == 0).collect()
}

/// Largest micro-batch per GPU the search tries.
const MAX_MICRO_BATCH: u64 = 64;
/// Largest gradient accumulation a plan may use: the bound `Job::validate` puts on `--grad-accum`.
const MAX_GRAD_ACCUM: u64 = 1 << 20;

/// A data-parallel layout with its per-rank model-state bytes, its communication seconds per
/// step and whether it runs torch AMP (DDP) rather than a 16-bit module (DeepSpeed, FSDP).
type DpLayout = (Parallel, u128, f64, bool);

/// Everything the search needs that does not depend on the configuration: activation profiles,
/// the data-parallel layouts' state bytes and traffic, the option lists.
pub struct Prepared<'a> {
    req: PlanRequest<'a>,
    c: Counts,
    budget: u128,
    base_overhead: u128,
    nccl: u128,
    global: u64,
    micro_batches: Vec<u64>,
    acts_pure: [u128; 3],
    acts_amp: [u128; 3],
    active: f64,
    attn_flops_per_token: f64,
    peak: f64,
    tp_opts: Vec<u64>,
    pp_opts: Vec<u64>,
    cp_opts: Vec<u64>,
    ep_opts: Vec<u64>,
    groups_dp: u128,
    dp_layouts: Vec<DpLayout>,
}

/// Search the layouts.
pub fn search(req: &PlanRequest) -> Result<PlanResult> {
    if req.job.lora.is_some() {
        return lora_search(req);
    }
    Ok(prepare(req)?.run())
}

/// LoRA / QLoRA layouts: the frozen base replicated on every GPU (DDP) or sharded as loaded
/// (FSDP full_shard, shard_grad_op, hybrid across nodes), with and without checkpointing; for
/// each, the largest micro-batch dividing the per-GPU batch that fits, by the parallel estimator
/// itself (`estimate_parallel`: the same numbers `vram estimate --gpus N` prints). The frozen
/// base has no weight gradients, so a step costs 4·N FLOPs per token (forward and input
/// gradients; 6·N with recomputation) plus attention; FSDP all-gathers the stored base for
/// every micro-batch's forward and backward, DDP all-reduces the adapters' gradients once.
fn lora_search(req: &PlanRequest) -> Result<PlanResult> {
    validate_request(req)?;
    let (m, job) = (req.model, req.job);
    let global = global_batch(req)?;
    if global % req.gpus != 0 {
        return Err(bad(
            "global batch size",
            &global.to_string(),
            &format!("must be a multiple of the {} GPUs: LoRA layouts are data parallel", req.gpus),
        ));
    }
    let per_rank = global / req.gpus;
    let budget = (req.gpu.memory as f64 * req.target) as u64;
    let base = Parallel { gpus: req.gpus, gpus_per_node: req.gpus_per_node.min(req.gpus), ..Parallel::single() };
    let mut layouts = vec![Parallel { engine: Engine::Ddp, ..base.clone() }];
    if req.gpus > 1 {
        for f in [FsdpStrategy::FullShard, FsdpStrategy::ShardGradOp] {
            layouts.push(Parallel { engine: Engine::Fsdp, fsdp: f, ..base.clone() });
        }
        if req.gpus > req.gpus_per_node {
            layouts.push(Parallel { engine: Engine::Fsdp, fsdp: FsdpStrategy::HybridShard, ..base.clone() });
        }
    }
    layouts.retain(|p| req.only.is_none_or(|e| e == p.engine));
    let states = crate::memory::lora_states(m, job);
    let active = active_params(m, &Counts::of(m));
    let peak = req.gpu.tflops_16bit.max(1.0) * 1e12 * req.throughput.mfu;
    let bw = if req.gpus > req.gpus_per_node { req.throughput.inter_node_gbps } else { req.throughput.intra_node_gbps } * 1e9;
    let (mut evaluated, mut fitting, mut plans) = (0u64, 0u64, Vec::new());
    for par in &layouts {
        for ck in [Checkpointing::None, Checkpointing::Full] {
            let mut best: Option<(u64, u64)> = None;
            for mb in micro_batch_options(per_rank) {
                evaluated += 1;
                let accum = per_rank / mb;
                let j = Job { batch: mb, checkpointing: ck, grad_accum: accum, ..job.clone() };
                let total = crate::parallel::estimate_parallel(m, &j, par, accum)?.total;
                if total > budget {
                    break; // memory grows with the micro-batch
                }
                best = Some((mb, total));
            }
            let Some((mb, total)) = best else { continue };
            fitting += 1;
            let accum = per_rank / mb;
            let tokens = global as f64 * job.seq as f64;
            let recompute = if ck == Checkpointing::Full { 6.0 } else { 4.0 };
            let attn = 6.0 * m.layers as f64 * job.seq as f64 * m.q_dim() as f64;
            let compute = (recompute * active + attn) * tokens / (req.gpus as f64 * peak);
            let comm = match par.engine {
                // Forward and backward all-gathers of the stored base, per micro-batch (a third
                // under recomputation), hidden behind compute by the overlap share.
                Engine::Fsdp if par.fsdp != FsdpStrategy::NoShard => {
                    let passes = accum as f64 * if ck == Checkpointing::Full { 3.0 } else { 2.0 };
                    collective(passes, states.base as f64, req.gpus, bw, req.throughput.dp_overlap)
                }
                _ => collective(2.0, states.trainable as f64, req.gpus, bw, req.throughput.dp_overlap),
            };
            let step = compute + comm;
            let reason = format!(
                "{}{}: micro-batch {mb} × {accum} accumulation; frozen base {}",
                match par.engine {
                    Engine::Fsdp => format!("FSDP {}", par.fsdp.describe()),
                    _ => "DDP (base replicated)".to_string(),
                },
                if ck == Checkpointing::Full { " + checkpointing" } else { "" },
                if par.engine == Engine::Fsdp { "sharded as loaded" } else { "on every GPU" },
            );
            plans.push(Plan {
                parallel: par.clone(),
                micro_batch: mb,
                grad_accum: accum,
                checkpointing: ck,
                per_gpu_bytes: total,
                step_seconds: step,
                tokens_per_second: tokens / step,
                global_batch: global,
                reason,
            });
        }
    }
    plans.sort_by(|a, b| b.tokens_per_second.total_cmp(&a.tokens_per_second));
    plans.truncate(req.keep.max(1));
    Ok(PlanResult {
        evaluated,
        fitting,
        global_batch: global,
        global_tokens: global as f64 * job.seq as f64,
        top: plans,
        throughput: req.throughput,
    })
}

/// Validate the request and precompute what every configuration shares.
pub fn prepare<'a>(req: &PlanRequest<'a>) -> Result<Prepared<'a>> {
    validate_request(req)?;
    crate::memory::require_decoder(req.model, "a parallelism plan")?;
    let (m, seq) = (req.model, req.job.seq);
    let c = Counts::of(m);
    let global = global_batch(req)?;
    let o = req.job.overheads;
    let pure = if req.job.precision == Precision::Fp32 { Precision::Fp32 } else { Precision::Bf16 };
    Ok(Prepared {
        c,
        budget: (req.gpu.memory as f64 * req.target) as u128,
        base_overhead: (o.context_for(req.job.mode) + o.cublas_for(req.job.mode)) as u128,
        nccl: Parallel::single().nccl_buffer as u128,
        global,
        micro_batches: micro_batch_options(global),
        acts_pure: act_per_mb(m, req.job, pure, seq),
        acts_amp: act_per_mb(m, req.job, req.job.precision, seq),
        active: active_params(m, &c),
        // 12·L·s·d_q per token for attention scores and values, halved by causality.
        attn_flops_per_token: 6.0 * m.layers as f64 * seq as f64 * m.q_dim() as f64,
        peak: req.gpu.tflops_16bit.max(1.0) * 1e12 * req.throughput.mfu,
        // Llama 4's MoE is estimated as transformers runs it (every expert over every token);
        // Megatron-Core and DeepSpeed-MoE replace it with sparse dispatch, which the estimate
        // does not model: only the data-parallel engines that run transformers' own layers
        // (DDP, ZeRO, FSDP) are searched for it.
        tp_opts: if dense_dispatch(m) { vec![1] } else { tp_options(m, req) },
        pp_opts: if dense_dispatch(m) { vec![1] } else { pp_options(m, req.gpus) },
        cp_opts: if dense_dispatch(m) { vec![1] } else { cp_options(seq) },
        ep_opts: if dense_dispatch(m) { vec![1] } else { ep_options(m, req.gpus) },
        groups_dp: u128::from(req.gpus > 1),
        dp_layouts: dp_layouts(req, &c, global),
        req: req.clone(),
    })
}

fn validate_request(req: &PlanRequest) -> Result<()> {
    req.job.validate()?;
    if req.job.lora.is_some() && matches!(req.only, Some(Engine::DeepSpeed | Engine::Megatron)) {
        return Err(bad(
            "peft",
            "lora",
            "LoRA layouts are planned for DDP and FSDP; DeepSpeed and Megatron layouts of a frozen base are not modelled",
        ));
    }
    if req.gpus == 0 || req.gpus > 1 << 20 || req.gpus_per_node == 0 || req.gpus_per_node > 1 << 20 {
        return Err(bad("GPU count", &format!("{} ({} per node)", req.gpus, req.gpus_per_node), "must be between 1 and 1048576"));
    }
    if !(req.target > 0.0 && req.target <= 1.0) {
        return Err(bad("target utilization", &req.target.to_string(), "must be in (0, 1]"));
    }
    Ok(())
}

/// The global batch in sequences: the user's, bounded by what the GPUs can reach (micro-batch ≤ 64,
/// accumulation ≤ 2^20), or the smallest GPU-count multiple with ≥ 4M tokens, the scale of
/// published LLM pre-training runs (stated in the output).
fn global_batch(req: &PlanRequest) -> Result<u64> {
    let Some(g) = req.global_batch else {
        let want = (4u64 << 20).div_ceil(req.job.seq).max(1);
        let mut g = req.gpus;
        while g < want {
            g = g.saturating_mul(2);
        }
        return Ok(g);
    };
    let reachable = req.gpus.saturating_mul(MAX_MICRO_BATCH).saturating_mul(MAX_GRAD_ACCUM);
    if g == 0 || g > reachable {
        return Err(bad(
            "global batch size",
            &g.to_string(),
            &format!(
                "must be between 1 and {reachable} sequences ({} GPUs × micro-batch ≤ {MAX_MICRO_BATCH} × ≤ {MAX_GRAD_ACCUM} accumulation steps)",
                req.gpus
            ),
        ));
    }
    Ok(g)
}

/// Micro-batches that divide the global batch: at most 64 candidates whatever its size.
fn micro_batch_options(global: u64) -> Vec<u64> {
    (1..=MAX_MICRO_BATCH.min(global)).filter(|b| global % b == 0).collect()
}

/// TP inside a node, dividing the query and key/value heads (Megatron's arguments.py asserts
/// `num_query_groups % tensor_model_parallel_size == 0`).
fn tp_options(m: &Model, req: &PlanRequest) -> Vec<u64> {
    [1, 2, 4, 8, 16].into_iter().filter(|t| *t <= req.gpus_per_node.min(req.gpus) && m.heads % t == 0 && m.kv_heads % t == 0).collect()
}

/// Megatron splits layers evenly or, with --decoder-first/last-pipeline-num-layers, unevenly:
/// any pipeline size up to the layer count is a layout (the largest stage holds ceil(L/pp)).
fn pp_options(m: &Model, gpus: u64) -> Vec<u64> {
    divisors(m.layers)
        .into_iter()
        .chain([2, 4, 8, 16, 32, 64, 128])
        .filter(|p| *p <= gpus && *p <= m.layers.min(128))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Megatron-Core expert parallelism for MoE models: sizes dividing the experts (the data-parallel
/// size is checked per layout); dense models have none.
fn ep_options(m: &Model, gpus: u64) -> Vec<u64> {
    match &m.moe {
        Some(x) => [1, 2, 4, 8, 16, 32, 64, 128].into_iter().filter(|e| *e <= gpus && x.experts % e == 0).collect(),
        None => vec![1],
    }
}

/// Whether the model's MoE runs every expert over every token (Llama 4 in transformers).
fn dense_dispatch(m: &Model) -> bool {
    m.moe.as_ref().is_some_and(|x| x.dense_dispatch)
}

fn cp_options(seq: u64) -> Vec<u64> {
    [1, 2, 4, 8, 16].into_iter().filter(|c| seq % c == 0 && seq / c >= 128).collect()
}

/// Active parameters per token (MoE: shared parts plus top-k of the routed experts).
fn active_params(m: &Model, c: &Counts) -> f64 {
    let active = match &m.moe {
        Some(x) => c.total - c.experts + c.experts * x.top_k as u128 / x.experts.max(1) as u128,
        None => c.total,
    };
    active as f64
}

/// Ring collectives move (n-1)/n of the buffer per rank per pass: an all-reduce is two passes
/// (reduce-scatter + all-gather), ZeRO-3 / FSDP full_shard three (all-gather in forward and in
/// backward, reduce-scatter of gradients). `passes` × size over the bandwidth, partly overlapped.
fn collective(passes: f64, bytes: f64, n: u64, bw: f64, overlap: f64) -> f64 {
    if n > 1 {
        passes * (n - 1) as f64 / n as f64 * bytes / bw * (1.0 - overlap)
    } else {
        0.0
    }
}

/// Offload traffic: the shard over PCIe both ways plus CPU Adam (~2 ns/param, DeepSpeedCPUAdam).
fn offload_seconds(bytes_per_param: f64, params: f64, pcie_gbps: f64) -> f64 {
    2.0 * bytes_per_param * params / (pcie_gbps * 1e9) + params * 2e-9
}

/// Expert all-to-all seconds for `tokens` on a rank: dispatch + combine in forward and again in
/// backward (Megatron-Core moe/token_dispatcher.py; DeepSpeed deepspeed/moe/sharded_moe.py
/// `_AllToAll`), each moving tokens × top-k × hidden × 2 B × (ep-1)/ep per MoE layer, not overlapped.
fn all_to_all_seconds(m: &Model, tokens: f64, ep: u64, moe_layers: f64, bw: f64) -> f64 {
    let Some(moe) = &m.moe else { return 0.0 };
    collective(4.0, tokens * moe.top_k as f64 * m.hidden as f64 * 2.0 * moe_layers, ep, bw, 0.0)
}

/// Data-parallel engines: DDP, DeepSpeed ZeRO 0–3 (with offloads; with EP for MoE), FSDP strategies.
fn dp_layouts(req: &PlanRequest, c: &Counts, global: u64) -> Vec<DpLayout> {
    let base = Parallel { gpus: req.gpus, gpus_per_node: req.gpus_per_node, ..Parallel::single() };
    let mut out = vec![ddp_layout(req, c, &base)];
    out.extend(deepspeed_layouts(req, c, &base, global));
    out.extend(fsdp_layouts(req, c, &base));
    out
}

fn dp_bandwidth(req: &PlanRequest) -> f64 {
    let gbps = if req.gpus <= req.gpus_per_node { req.throughput.intra_node_gbps } else { req.throughput.inter_node_gbps };
    gbps * 1e9
}

/// DDP: fp32 params + grads + states + foreach temp + autocast copies + flat buckets.
fn ddp_layout(req: &PlanRequest, c: &Counts, base: &Parallel) -> DpLayout {
    let matmul: u128 = crate::memory::inventory(req.model)
        .iter()
        .filter(|t| matches!(t.role, Role::Linear | Role::Experts | Role::Router | Role::LmHead))
        .map(|t| t.numel as u128 * t.count as u128)
        .sum();
    let sb = state_bytes_per_param(req.job.optimizer);
    let buckets = if req.gpus > 1 { 4 * c.total } else { 0 };
    let states = (4 + 4 + sb + 4) * c.total + 2 * matmul + buckets;
    let comm = collective(2.0, 4.0 * c.total as f64, req.gpus, dp_bandwidth(req), req.throughput.dp_overlap);
    (base.clone(), states, comm, true)
}

fn deepspeed_layouts(req: &PlanRequest, c: &Counts, base: &Parallel, global: u64) -> Vec<DpLayout> {
    let (p, n, t) = (c.total as f64, req.gpus, req.throughput);
    let mut out = Vec::new();
    // DeepSpeed-MoE expert parallelism (ZeRO 0–2 only: stage 3 refuses MoE layers) for MoE models.
    // (Not for Llama 4's dense-dispatch MoE, which DeepSpeed-MoE would replace: see `prepare`.)
    let eps: Vec<u64> =
        if dense_dispatch(req.model) { vec![1] } else { ep_options(req.model, n).into_iter().filter(|e| n % e == 0).collect() };
    for (zero, ep) in (0..=3u8).flat_map(|z| eps.iter().map(move |e| (z, *e))) {
        for (oo, op) in [(false, false), (true, false), (true, true)] {
            if (oo && zero == 0) || (op && zero != 3) || (ep > 1 && zero == 3) {
                continue;
            }
            let par = Parallel { engine: Engine::DeepSpeed, zero, ep, offload_optimizer: oo, offload_params: op, ..base.clone() };
            let s = Sharding::of(req.job, &par, n as u128);
            let w = s.compute_bytes as f64;
            let passes = if zero == 3 { 3.0 } else { 2.0 };
            let mut comm = collective(passes, w * p, n, dp_bandwidth(req), t.dp_overlap);
            if oo || op {
                comm += offload_seconds(w, p / n as f64, t.pcie_gbps);
            }
            // every token of the step, spread over the ranks, crosses the expert all-to-all
            let tokens_per_rank = global as f64 * req.job.seq as f64 / n as f64;
            let bw = if ep <= req.gpus_per_node { t.intra_node_gbps * 1e9 } else { dp_bandwidth(req) };
            comm += all_to_all_seconds(req.model, tokens_per_rank, ep, req.model.moe_layers() as f64, bw);
            out.push((par, deepspeed_states(c, zero, &s).total(), comm, false));
        }
    }
    out
}

fn fsdp_layouts(req: &PlanRequest, c: &Counts, base: &Parallel) -> Vec<DpLayout> {
    let (p, all, t) = (c.total as f64, req.gpus, req.throughput);
    let (bw, intra) = (dp_bandwidth(req), t.intra_node_gbps * 1e9);
    let mut out = Vec::new();
    for strategy in [FsdpStrategy::FullShard, FsdpStrategy::ShardGradOp, FsdpStrategy::HybridShard] {
        for oo in [false, true] {
            if oo && strategy != FsdpStrategy::FullShard {
                continue;
            }
            let par = Parallel { engine: Engine::Fsdp, fsdp: strategy, offload_params: oo, offload_optimizer: oo, ..base.clone() };
            let n = if strategy == FsdpStrategy::HybridShard { req.gpus_per_node.min(all) } else { all };
            let s = Sharding::of(req.job, &par, n as u128);
            let w = s.compute_bytes as f64;
            let mut comm = match strategy {
                FsdpStrategy::ShardGradOp => collective(2.0, w * p, all, bw, t.dp_overlap),
                // hybrid: shard traffic inside the node, a gradient all-reduce across replicas
                FsdpStrategy::HybridShard => {
                    collective(3.0, w * p, n, intra, t.dp_overlap) + collective(2.0, w * p / n as f64, all / n.max(1), bw, t.dp_overlap)
                }
                _ => collective(3.0, w * p, all, bw, t.dp_overlap),
            };
            if oo {
                comm += offload_seconds(s.shard_bytes as f64, p / n as f64, t.pcie_gbps);
            }
            out.push((par, fsdp_states(c, strategy, &s).total(), comm, false));
        }
    }
    out
}

fn bad(what: &str, value: &str, hint: &str) -> Error {
    Error::InvalidValue { what: what.into(), value: value.into(), hint: hint.into() }
}

/// Checkpointing modes in the order of the activation tables.
const MODES: [Checkpointing; 3] = [Checkpointing::None, Checkpointing::Selective, Checkpointing::Full];

/// What a run has seen so far: counts and the best plans, fastest first.
#[derive(Default)]
struct Tally {
    evaluated: u64,
    fitting: u64,
    best: Vec<(f64, Plan)>,
}

/// One configuration to score: the layout, micro-batch, checkpointing mode (index into
/// [`MODES`]), per-GPU bytes, data-parallel size and communication seconds outside compute.
struct Candidate<'p> {
    par: &'p Parallel,
    mb: u64,
    ck: usize,
    bytes: u128,
    dp: u64,
    comm: f64,
}

impl Prepared<'_> {
    /// Evaluate every configuration; the number evaluated is reported in the result.
    pub fn run(&self) -> PlanResult {
        let mut t = Tally::default();
        self.run_data_parallel(&mut t);
        self.run_megatron(&mut t);
        let mut top: Vec<Plan> = t.best.into_iter().map(|(_, p)| p).collect();
        let leader = top.first().map(|p| p.tokens_per_second).unwrap_or(0.0);
        for p in &mut top {
            p.reason = reason(p, leader, self.req.gpu.memory);
        }
        PlanResult {
            evaluated: t.evaluated,
            fitting: t.fitting,
            global_batch: self.global,
            global_tokens: self.global as f64 * self.req.job.seq as f64,
            top,
            throughput: self.req.throughput,
        }
    }

    /// Allocated bytes plus the allocator reserve and fixed overheads with `groups` communicators.
    fn with_overheads(&self, alloc: u128, groups: u128) -> u128 {
        alloc + (alloc as f64 * self.req.job.overheads.allocator_reserve) as u128 + self.base_overhead + groups * self.nccl
    }

    /// Score one configuration: count it, keep it among the best if it fits and divides the
    /// global batch.
    fn consider(&self, t: &mut Tally, x: Candidate) {
        let req = &self.req;
        if req.only.is_some_and(|e| e != x.par.engine) {
            return;
        }
        t.evaluated += 1;
        if x.bytes > self.budget {
            return;
        }
        t.fitting += 1;
        let global = self.global;
        if global % (x.mb * x.dp) != 0 {
            return;
        }
        let accum = global / (x.mb * x.dp);
        if accum > MAX_GRAD_ACCUM {
            return; // beyond what `--grad-accum` accepts
        }
        let (step, tps) = self.step_time(x.par, accum, MODES[x.ck], x.comm);
        if t.best.len() < req.keep || tps > t.best.last().map_or(0.0, |b| b.0) {
            let plan = Plan {
                parallel: x.par.clone(),
                micro_batch: x.mb,
                grad_accum: accum,
                checkpointing: MODES[x.ck],
                per_gpu_bytes: x.bytes as u64,
                step_seconds: step,
                tokens_per_second: tps,
                global_batch: global,
                reason: String::new(),
            };
            let pos = t.best.partition_point(|b| b.0 >= tps);
            t.best.insert(pos, (tps, plan));
            t.best.truncate(req.keep);
        }
    }

    /// Seconds per step and tokens/s: 6·N·tokens (× recomputation) plus causal attention over
    /// GPUs × peak × MFU, stretched by the 1F1B bubble (p-1)/(m·v + p-1), plus communication.
    fn step_time(&self, par: &Parallel, accum: u64, ck: Checkpointing, comm: f64) -> (f64, f64) {
        let tokens = self.global as f64 * self.req.job.seq as f64;
        let recompute = match ck {
            Checkpointing::Full => 8.0 / 6.0,
            Checkpointing::Selective => 1.02,
            Checkpointing::None => 1.0,
        };
        let compute = (6.0 * self.active * tokens * recompute + self.attn_flops_per_token * tokens) / (self.req.gpus as f64 * self.peak);
        let bubble = if par.pp > 1 { (par.pp - 1) as f64 / (accum as f64 * par.virtual_stages as f64 + (par.pp - 1) as f64) } else { 0.0 };
        let step = compute / (1.0 - bubble) + comm;
        (step, tokens / step)
    }

    fn run_data_parallel(&self, t: &mut Tally) {
        for (par, states, comm, amp) in self.dp_layouts.iter() {
            for &mb in self.micro_batches.iter() {
                for ck in 0..3 {
                    let per_mb = if *amp { self.acts_amp[ck] } else { self.acts_pure[ck] };
                    // one more communicator for the expert all-to-all
                    let groups = self.groups_dp + u128::from(par.ep > 1);
                    let bytes = self.with_overheads(states + per_mb * mb as u128, groups);
                    self.consider(t, Candidate { par, mb, ck, bytes, dp: self.req.gpus, comm: *comm });
                }
            }
        }
    }

    /// Megatron: TP within a node, PP over layers, CP over the sequence, SP with TP, distributed optimizer.
    fn run_megatron(&self, t: &mut Tally) {
        let gpus = self.req.gpus;
        for &tp in self.tp_opts.iter() {
            for &pp in self.pp_opts.iter() {
                for &cp in self.cp_opts.iter() {
                    let shards = tp * pp * cp;
                    if shards > gpus || gpus % shards != 0 {
                        continue;
                    }
                    let dp = gpus / shards;
                    for &ep in self.ep_opts.iter().filter(|e| dp % **e == 0) {
                        for dist in [false, true] {
                            // nothing to distribute over with dp 1
                            if !(dist && dp == 1) {
                                self.run_megatron_variants(t, [tp, pp, cp, ep], dist);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Interleaving (virtual stages 1, 2, 4) and sequence parallelism for one TP × PP × CP × EP layout.
    fn run_megatron_variants(&self, t: &mut Tally, [tp, pp, cp, ep]: [u64; 4], dist: bool) {
        let req = &self.req;
        for (vs, sp) in [(1u64, true), (2, true), (4, true), (1, false)] {
            let bad_interleave = vs > 1 && (pp == 1 || req.model.layers % (pp * vs) != 0);
            // without TP, sequence parallelism means nothing: one variant only
            if bad_interleave || (tp == 1 && !sp) {
                continue;
            }
            let par = Parallel {
                gpus: req.gpus,
                gpus_per_node: req.gpus_per_node,
                engine: Engine::Megatron,
                tp,
                pp,
                cp,
                ep,
                sp: sp && tp > 1,
                distributed_optimizer: dist,
                virtual_stages: vs,
                ..Parallel::single()
            };
            self.run_megatron_batches(t, &par);
        }
    }

    /// Seconds of expert-parallel all-to-all per micro-batch: Megatron-Core's alltoall token
    /// dispatcher sends each token's top-k copies out and back (dispatch + combine) in forward
    /// and again in backward, 4 × tokens × top-k × hidden × 2 B × (ep-1)/ep per MoE layer on
    /// this stage (moe/token_dispatcher.py), at NVLink speed inside a node, not overlapped.
    fn expert_all_to_all(&self, par: &Parallel, mb: u64) -> f64 {
        let (m, tc) = (self.req.model, self.req.throughput);
        let tokens = (mb * self.req.job.seq / par.cp) as f64;
        let bw = if par.ep * par.tp <= self.req.gpus_per_node { tc.intra_node_gbps } else { tc.inter_node_gbps } * 1e9;
        all_to_all_seconds(m, tokens, par.ep, m.moe_layers() as f64 / par.pp as f64, bw)
    }

    /// Every micro-batch and checkpointing mode of one Megatron layout.
    fn run_megatron_batches(&self, t: &mut Tally, par: &Parallel) {
        let (req, m, tc) = (&self.req, self.req.model, self.req.throughput);
        let (tp, pp, cp, dp, seq) = (par.tp, par.pp, par.cp, par.dp(), req.job.seq);
        let groups = [dp > 1, tp > 1, pp > 1, cp > 1, par.ep > 1].iter().filter(|g| **g).count() as u128;
        let dp_bw = if dp * tp * cp <= req.gpus_per_node { tc.intra_node_gbps } else { tc.inter_node_gbps } * 1e9;
        // fp32 gradient all-reduce of this rank's shard (its 1/ep of the experts) over dp.
        let c = &self.c;
        let local = (c.total - c.experts + c.experts / par.ep as u128) as f64;
        let dp_comm = collective(2.0, 4.0 * local / (tp * pp) as f64, dp, dp_bw, tc.dp_overlap);
        for &mb in self.micro_batches.iter() {
            // TP: 4 all-reduces of the activations per layer per micro-batch (Megatron), not overlapped.
            let bytes = (mb * seq / cp) as f64 * m.hidden as f64 * 2.0 * (m.layers / pp) as f64;
            let tp_comm = collective(4.0 * 2.0, bytes, tp, tc.intra_node_gbps * 1e9, 0.0);
            let micro_per_step = (self.global / (mb * dp)).max(1);
            let comm = dp_comm + (tp_comm + self.expert_all_to_all(par, mb)) * micro_per_step as f64;
            for (ck, mode) in MODES.into_iter().enumerate() {
                let ml = megatron_layout(m, &self.c, par, mb, seq, mode, false, micro_per_step);
                let acts = if ml.first_loaded { ml.activations } else { ml.last_logits.max(ml.activations) };
                let bytes = self.with_overheads(6 * ml.shard + ml.optimizer + acts, groups);
                self.consider(t, Candidate { par, mb, ck, bytes, dp, comm });
            }
        }
    }
}

fn reason(p: &Plan, leader: f64, gpu_mem: u64) -> String {
    let mut why = Vec::new();
    let par = &p.parallel;
    why.push(format!("{:.0}% of the GPU", 100.0 * p.per_gpu_bytes as f64 / gpu_mem as f64));
    match par.engine {
        Engine::Ddp => why.push("plain data parallel: no sharding traffic".into()),
        Engine::DeepSpeed => {
            why.push(format!(
                "ZeRO-{} shards {}",
                par.zero,
                ["nothing", "optimizer states", "gradients and optimizer states", "everything"][par.zero as usize]
            ));
            if par.ep > 1 {
                why.push(format!("DeepSpeed-MoE EP {} splits the experts", par.ep));
            }
        }
        Engine::Fsdp => why.push(format!("FSDP {:?}", par.fsdp).to_lowercase()),
        Engine::Megatron => {
            if par.tp > 1 {
                why.push(format!("TP {} inside a node", par.tp));
            }
            if par.pp > 1 {
                let bubble = (par.pp - 1) as f64 / (p.grad_accum as f64 * par.virtual_stages as f64 + (par.pp - 1) as f64);
                why.push(format!("PP {} with a {:.0}% bubble", par.pp, bubble * 100.0));
            }
            if par.cp > 1 {
                why.push(format!("CP {} splits the sequence", par.cp));
            }
            if par.ep > 1 {
                why.push(format!("EP {} splits the experts", par.ep));
            }
            if par.distributed_optimizer {
                why.push("distributed optimizer".into());
            }
        }
    }
    if par.offload_optimizer || par.offload_params {
        why.push("offload trades PCIe time for memory".into());
    }
    match p.checkpointing {
        Checkpointing::Full => why.push("full recomputation (+33% FLOPs)".into()),
        Checkpointing::Selective => why.push("selective recomputation".into()),
        Checkpointing::None => why.push("no recomputation".into()),
    }
    if leader > 0.0 && p.tokens_per_second < leader {
        why.push(format!("{:.0}% of the best throughput", 100.0 * p.tokens_per_second / leader));
    }
    why.join("; ")
}

/// Estimated tokens/s and seconds per step of a single-GPU job (same throughput model as the
/// planner: 6·N·tokens FLOPs plus causal attention and recomputation, over peak × MFU).
pub fn single_gpu_throughput(m: &Model, job: &Job, gpu: &Gpu, mfu: f64) -> (f64, f64) {
    let active = active_params(m, &Counts::of(m));
    let tokens = job.batch as f64 * job.seq as f64 * job.grad_accum as f64;
    let recompute = match job.checkpointing {
        Checkpointing::Full => 8.0 / 6.0,
        Checkpointing::Selective => 1.02,
        Checkpointing::None => 1.0,
    };
    let flops = tokens * (6.0 * active * recompute + 6.0 * m.layers as f64 * job.seq as f64 * m.q_dim() as f64);
    let seconds = flops / (gpu.tflops_16bit.max(1.0) * 1e12 * mfu);
    (tokens / seconds, seconds)
}
