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
use crate::parallel::{deepspeed_states, fsdp_states, megatron_layout, state_bytes_per_param, Counts, Engine, FsdpStrategy, Parallel};

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

/// Search the layouts.
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
    groups_dp: u128,
    dp_layouts: Vec<(Parallel, u128, f64, bool)>,
}

/// Search the layouts.
pub fn search(req: &PlanRequest) -> Result<PlanResult> {
    Ok(prepare(req)?.run())
}

/// Validate the request and precompute what every configuration shares.
pub fn prepare<'a>(req: &PlanRequest<'a>) -> Result<Prepared<'a>> {
    let m = req.model;
    req.job.validate()?;
    if req.gpus == 0 || req.gpus > 1 << 20 || req.gpus_per_node == 0 {
        return Err(Error::InvalidValue {
            what: "GPU count".into(),
            value: req.gpus.to_string(),
            hint: "must be between 1 and 1048576".into(),
        });
    }
    if !(req.target > 0.0 && req.target <= 1.0) {
        return Err(Error::InvalidValue {
            what: "target utilization".into(),
            value: req.target.to_string(),
            hint: "must be in (0, 1]".into(),
        });
    }
    let c = Counts::of(m);
    let budget = (req.gpu.memory as f64 * req.target) as u128;
    let o = req.job.overheads;
    let base_overhead = (o.cuda_context + o.cublas_workspace) as u128;
    let nccl = Parallel::single().nccl_buffer as u128;
    let seq = req.job.seq;
    let half = req.job.precision != Precision::Fp32;
    let w: u128 = if half { 2 } else { 4 };
    let sb = state_bytes_per_param(req.job.optimizer);
    let pure = if half { Precision::Bf16 } else { Precision::Fp32 };
    let acts_pure = act_per_mb(m, req.job, pure, seq);
    let acts_amp = act_per_mb(m, req.job, req.job.precision, seq);
    let matmul: u128 = m
        .tensors()
        .iter()
        .filter(|t| matches!(t.role, Role::Linear | Role::Experts | Role::Router | Role::LmHead))
        .map(|t| t.numel as u128 * t.count as u128)
        .sum();
    // Active parameters per token (MoE: shared parts plus top-k of the routed experts).
    let active = match &m.moe {
        Some(x) => c.total - c.experts + c.experts * x.top_k as u128 / x.experts.max(1) as u128,
        None => c.total,
    } as f64;
    let attn_flops_per_token = 6.0 * m.layers as f64 * seq as f64 * m.q_dim() as f64; // 12·L·s·d_q, halved by causality
                                                                                      // Without a global batch: the smallest GPU-count multiple of sequences holding ≥ 4M tokens,
                                                                                      // the scale of published LLM pre-training runs (stated in the output).
    let global = req.global_batch.unwrap_or_else(|| {
        let want = (4u64 << 20).div_ceil(seq).max(1);
        let mut g = req.gpus;
        while g < want {
            g *= 2;
        }
        g
    });
    let micro_batches: Vec<u64> = divisors(global).into_iter().filter(|b| *b <= 64).collect();
    let tp_opts: Vec<u64> = [1, 2, 4, 8, 16].into_iter().filter(|t| *t <= req.gpus_per_node.min(req.gpus) && m.heads % t == 0).collect();
    // Megatron splits layers evenly or, with --decoder-first/last-pipeline-num-layers, unevenly:
    // any pipeline size up to the layer count is a layout (the largest stage holds ceil(L/pp)).
    let pp_opts: Vec<u64> = divisors(m.layers)
        .into_iter()
        .chain([2, 4, 8, 16, 32, 64, 128])
        .filter(|p| *p <= req.gpus && *p <= m.layers.min(128))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let cp_opts: Vec<u64> = [1, 2, 4, 8, 16].into_iter().filter(|c| seq % c == 0 && seq / c >= 128).collect();
    let peak = req.gpu.tflops_16bit.max(1.0) * 1e12 * req.throughput.mfu;
    let tp_cfg = req.throughput;

    // Data-parallel engines (DDP, DeepSpeed ZeRO 0–3 and offloads, FSDP strategies).
    let dp_all = req.gpus;
    let dp_bw = if req.gpus <= req.gpus_per_node { tp_cfg.intra_node_gbps } else { tp_cfg.inter_node_gbps } * 1e9;
    // Ring collectives move (n-1)/n of the buffer per rank per pass: an all-reduce is two passes
    // (reduce-scatter + all-gather), ZeRO-3 / FSDP full_shard three (all-gather in forward and in
    // backward, reduce-scatter of gradients). `passes` × size over the bandwidth, partly overlapped.
    let collective = |passes: f64, bytes: f64, n: u64, bw: f64| {
        if n > 1 {
            passes * (n - 1) as f64 / n as f64 * bytes / bw * (1.0 - tp_cfg.dp_overlap)
        } else {
            0.0
        }
    };
    let intra_bw = tp_cfg.intra_node_gbps * 1e9;
    let grad_sync = |bytes: f64, n: u64| collective(2.0, bytes, n, dp_bw);
    let p = c.total as f64;
    let groups_dp = u128::from(dp_all > 1);
    let mut dp_layouts: Vec<(Parallel, u128, f64, bool)> = Vec::new(); // layout, states, comm seconds, runs AMP
    {
        let s = Parallel { gpus: req.gpus, gpus_per_node: req.gpus_per_node, ..Parallel::single() };
        // DDP: fp32 params + grads + states + foreach temp + autocast copies + flat buckets.
        let ddp = (4 + 4 + sb + 4) * c.total + 2 * matmul + if dp_all > 1 { 4 * c.total } else { 0 };
        dp_layouts.push((s.clone(), ddp, grad_sync(4.0 * p, dp_all), true));
        for zero in 0..=3u8 {
            for (oo, op) in [(false, false), (true, false), (true, true)] {
                if (oo && zero == 0) || (op && zero != 3) {
                    continue;
                }
                let par = Parallel { engine: Engine::DeepSpeed, zero, offload_optimizer: oo, offload_params: op, ..s.clone() };
                let st = deepspeed_states(&c, zero, dp_all as u128, w, sb, oo, op).total();
                let mut comm = if zero == 3 { collective(3.0, w as f64 * p, dp_all, dp_bw) } else { grad_sync(w as f64 * p, dp_all) };
                if oo || op {
                    comm += 2.0 * w as f64 * p / dp_all as f64 / (tp_cfg.pcie_gbps * 1e9) + p / dp_all as f64 * 2e-9;
                    // PCIe both ways + CPU Adam (~2 ns/param)
                }
                dp_layouts.push((par, st, comm, false));
            }
        }
        for (strategy, n) in [
            (FsdpStrategy::FullShard, dp_all),
            (FsdpStrategy::ShardGradOp, dp_all),
            (FsdpStrategy::HybridShard, req.gpus_per_node.min(dp_all)),
        ] {
            for oo in [false, true] {
                if oo && strategy != FsdpStrategy::FullShard {
                    continue;
                }
                let par = Parallel { engine: Engine::Fsdp, fsdp: strategy, offload_params: oo, offload_optimizer: oo, ..s.clone() };
                let st = fsdp_states(&c, strategy, n as u128, w, sb, oo, oo).total();
                let mut comm = match strategy {
                    FsdpStrategy::ShardGradOp => collective(2.0, w as f64 * p, dp_all, dp_bw),
                    // hybrid: shard traffic inside the node, a gradient all-reduce across replicas
                    FsdpStrategy::HybridShard => {
                        collective(3.0, w as f64 * p, n, intra_bw) + collective(2.0, w as f64 * p / n as f64, dp_all / n.max(1), dp_bw)
                    }
                    _ => collective(3.0, w as f64 * p, dp_all, dp_bw),
                };
                if oo {
                    comm += 2.0 * 4.0 * p / n as f64 / (tp_cfg.pcie_gbps * 1e9) + p / n as f64 * 2e-9;
                }
                dp_layouts.push((par, st, comm, false));
            }
        }
    }
    Ok(Prepared {
        req: req.clone(),
        c,
        budget,
        base_overhead,
        nccl,
        global,
        micro_batches,
        acts_pure,
        acts_amp,
        active,
        attn_flops_per_token,
        peak,
        tp_opts,
        pp_opts,
        cp_opts,
        groups_dp,
        dp_layouts,
    })
}

impl Prepared<'_> {
    /// Number of configurations a run evaluates is reported in its result.
    pub fn run(&self) -> PlanResult {
        let req = &self.req;
        let m = req.model;
        let c = &self.c;
        let (budget, base_overhead, nccl, global) = (self.budget, self.base_overhead, self.nccl, self.global);
        let (acts_pure, acts_amp, active, attn_flops_per_token, peak) =
            (self.acts_pure, self.acts_amp, self.active, self.attn_flops_per_token, self.peak);
        let (micro_batches, tp_opts, pp_opts, cp_opts) = (&self.micro_batches, &self.tp_opts, &self.pp_opts, &self.cp_opts);
        let (groups_dp, dp_layouts) = (self.groups_dp, &self.dp_layouts);
        let o = req.job.overheads;
        let seq = req.job.seq;
        let tp_cfg = req.throughput;
        let p = c.total as f64;
        let dp_all = req.gpus;
        let modes = [Checkpointing::None, Checkpointing::Selective, Checkpointing::Full];
        let mut evaluated = 0u64;
        let mut fitting = 0u64;
        let mut best: Vec<(f64, Plan)> = Vec::new();
        let only = req.only;
        let mut consider = |par: &Parallel, mb: u64, ck: usize, bytes: u128, dp: u64, extra_comm: f64| {
            if only.is_some_and(|e| e != par.engine) {
                return;
            }
            evaluated += 1;
            if bytes > budget {
                return;
            }
            fitting += 1;
            if global % (mb * dp) != 0 {
                return;
            }
            let accum = global / (mb * dp);
            let tokens = (global * seq) as f64;
            let recompute = match modes[ck] {
                Checkpointing::Full => 8.0 / 6.0,
                Checkpointing::Selective => 1.02,
                Checkpointing::None => 1.0,
            };
            let compute = (6.0 * active * tokens * recompute + attn_flops_per_token * tokens) / (req.gpus as f64 * peak);
            let bubble = if par.pp > 1 { (par.pp - 1) as f64 / ((accum * par.virtual_stages) as f64 + (par.pp - 1) as f64) } else { 0.0 };
            let step = compute / (1.0 - bubble) + extra_comm;
            let tps = tokens / step;
            if best.len() < req.keep || tps > best.last().map_or(0.0, |b| b.0) {
                let plan = Plan {
                    parallel: par.clone(),
                    micro_batch: mb,
                    grad_accum: accum,
                    checkpointing: modes[ck],
                    per_gpu_bytes: bytes as u64,
                    step_seconds: step,
                    tokens_per_second: tps,
                    global_batch: global,
                    reason: String::new(),
                };
                let pos = best.partition_point(|b| b.0 >= tps);
                best.insert(pos, (tps, plan));
                best.truncate(req.keep);
            }
        };

        for (par, states, comm, amp) in dp_layouts.iter() {
            for &mb in micro_batches.iter() {
                for ck in 0..3 {
                    let per_mb = if *amp { acts_amp[ck] } else { acts_pure[ck] };
                    let alloc = states + per_mb * mb as u128;
                    let total = alloc + (alloc as f64 * o.allocator_reserve) as u128 + base_overhead + groups_dp * nccl;
                    consider(par, mb, ck, total, dp_all, *comm);
                }
            }
        }

        // Megatron: TP within a node, PP over layers, CP over the sequence, SP with TP, distributed optimizer.
        for &tp in tp_opts.iter() {
            for &pp in pp_opts.iter() {
                for &cp in cp_opts.iter() {
                    let shards = tp * pp * cp;
                    if shards > req.gpus || req.gpus % shards != 0 {
                        continue;
                    }
                    let dp = req.gpus / shards;
                    for dist in [false, true] {
                        if dist && dp == 1 {
                            continue; // nothing to distribute over
                        }
                        for (vs, sp) in [(1u64, true), (2, true), (4, true), (1, false)] {
                            let bad_interleave = vs > 1 && (pp == 1 || m.layers % (pp * vs) != 0);
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
                                sp: sp && tp > 1,
                                distributed_optimizer: dist,
                                virtual_stages: vs,
                                ..Parallel::single()
                            };
                            let groups = [dp > 1, tp > 1, pp > 1, cp > 1].iter().filter(|g| **g).count() as u128;
                            let dp_bw_m =
                                if dp * tp * cp <= req.gpus_per_node { tp_cfg.intra_node_gbps } else { tp_cfg.inter_node_gbps } * 1e9;
                            let shard_params = p / (tp * pp) as f64;
                            let dp_comm = if dp > 1 {
                                2.0 * (dp - 1) as f64 / dp as f64 * 4.0 * shard_params / dp_bw_m * (1.0 - tp_cfg.dp_overlap)
                            } else {
                                0.0
                            };
                            for &mb in micro_batches.iter() {
                                // TP: 4 all-reduces of the activations per layer per micro-batch (Megatron).
                                let tp_comm = if tp > 1 {
                                    4.0 * 2.0 * (tp - 1) as f64 / tp as f64
                                        * (mb * seq / cp) as f64
                                        * m.hidden as f64
                                        * 2.0
                                        * (m.layers / pp) as f64
                                        / (tp_cfg.intra_node_gbps * 1e9)
                                } else {
                                    0.0
                                };
                                for ck in 0..3 {
                                    let micro_per_step = (global / (mb * dp)).max(1);
                                    let ml = megatron_layout(
                                        m,
                                        c,
                                        &par,
                                        mb,
                                        seq,
                                        [Checkpointing::None, Checkpointing::Selective, Checkpointing::Full][ck],
                                        false,
                                        micro_per_step,
                                    );
                                    let states = 2 * ml.shard + 4 * ml.shard + ml.optimizer;
                                    let alloc = states + if ml.first_loaded { ml.activations } else { ml.last_logits.max(ml.activations) };
                                    let total = alloc + (alloc as f64 * o.allocator_reserve) as u128 + base_overhead + groups * nccl;
                                    consider(&par, mb, ck, total, dp, dp_comm + tp_comm * micro_per_step as f64);
                                }
                            }
                        }
                    }
                }
            }
        }
        let mut top: Vec<Plan> = best.into_iter().map(|(_, p)| p).collect();
        let leader = top.first().map(|p| p.tokens_per_second).unwrap_or(0.0);
        for p in &mut top {
            p.reason = reason(p, leader, req.gpu.memory);
        }
        PlanResult { evaluated, fitting, global_batch: global, top, throughput: req.throughput }
    }
}
fn reason(p: &Plan, leader: f64, gpu_mem: u64) -> String {
    let mut why = Vec::new();
    let par = &p.parallel;
    why.push(format!("{:.0}% of the GPU", 100.0 * p.per_gpu_bytes as f64 / gpu_mem as f64));
    match par.engine {
        Engine::Ddp => why.push("plain data parallel: no sharding traffic".into()),
        Engine::DeepSpeed => why.push(format!(
            "ZeRO-{} shards {}",
            par.zero,
            ["nothing", "optimizer states", "gradients and optimizer states", "everything"][par.zero as usize]
        )),
        Engine::Fsdp => why.push(format!("FSDP {:?}", par.fsdp).to_lowercase()),
        Engine::Megatron => {
            if par.tp > 1 {
                why.push(format!("TP {} inside a node", par.tp));
            }
            if par.pp > 1 {
                let bubble = (par.pp - 1) as f64 / ((p.grad_accum * par.virtual_stages) as f64 + (par.pp - 1) as f64);
                why.push(format!("PP {} with a {:.0}% bubble", par.pp, bubble * 100.0));
            }
            if par.cp > 1 {
                why.push(format!("CP {} splits the sequence", par.cp));
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
    let c = Counts::of(m);
    let active = match &m.moe {
        Some(x) => c.total - c.experts + c.experts * x.top_k as u128 / x.experts.max(1) as u128,
        None => c.total,
    } as f64;
    let tokens = (job.batch * job.seq * job.grad_accum) as f64;
    let recompute = match job.checkpointing {
        Checkpointing::Full => 8.0 / 6.0,
        Checkpointing::Selective => 1.02,
        Checkpointing::None => 1.0,
    };
    let flops = tokens * (6.0 * active * recompute + 6.0 * m.layers as f64 * job.seq as f64 * m.q_dim() as f64);
    let seconds = flops / (gpu.tflops_16bit.max(1.0) * 1e12 * mfu);
    (tokens / seconds, seconds)
}
