//! Many GPUs: per-GPU memory of a distributed training job on the engines people run —
//! PyTorch DDP, DeepSpeed ZeRO 0–3 (with CPU offload), PyTorch FSDP/FSDP2 sharding strategies,
//! and Megatron-LM/Megatron-Core tensor, pipeline, sequence, context and expert parallelism —
//! reported for the most loaded rank, with CPU memory per node when offloading.
//!
//! Model states follow each engine's own layout (cited per formula). Activations come from the
//! validated single-GPU model (DDP, DeepSpeed, FSDP run the Hugging Face model) or from
//! Megatron's own formula (Korthikanti et al. 2022, as `theoretical_memory_usage.py` codes it).

use serde::Serialize;

use crate::error::{Error, Result};
use crate::job::{Checkpointing, Job, Mode, Optimizer, Precision};
use crate::memory::{activation_profile, Component, Kind};
use crate::model::{Model, Role};
use crate::units::MIB;

/// Which framework lays out the model states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// PyTorch DistributedDataParallel (or one GPU): full replicas, flat gradient buckets.
    Ddp,
    /// DeepSpeed ZeRO (bf16/fp16 config: 16-bit model, fp32 master weights in the optimizer).
    DeepSpeed,
    /// PyTorch FSDP / FSDP2 with MixedPrecision(param_dtype=bf16), fp32 sharded parameters.
    Fsdp,
    /// Megatron-LM / Megatron-Core (TP, PP, SP, CP, EP; optional distributed optimizer).
    Megatron,
}

impl Engine {
    /// The name users know the engine by.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Ddp => "DDP",
            Engine::DeepSpeed => "DeepSpeed",
            Engine::Fsdp => "FSDP",
            Engine::Megatron => "Megatron-LM",
        }
    }
}

/// FSDP sharding strategy (torch `ShardingStrategy` names, HF `--fsdp` spellings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FsdpStrategy {
    /// Parameters, gradients and optimizer states sharded (ZeRO-3).
    FullShard,
    /// Gradients and optimizer states sharded; parameters kept unsharded between forward and backward (ZeRO-2).
    ShardGradOp,
    /// Full shard within a node, replicated across nodes.
    HybridShard,
    /// No sharding (DDP).
    NoShard,
}

impl FsdpStrategy {
    /// The strategy in words (`full shard`).
    pub fn describe(self) -> &'static str {
        match self {
            FsdpStrategy::FullShard => "full shard",
            FsdpStrategy::ShardGradOp => "shard gradients and optimizer",
            FsdpStrategy::HybridShard => "hybrid shard",
            FsdpStrategy::NoShard => "no shard",
        }
    }

    /// Parse `full_shard`, `shard_grad_op`, `hybrid_shard`, `no_shard`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "full_shard" | "full" => FsdpStrategy::FullShard,
            "shard_grad_op" => FsdpStrategy::ShardGradOp,
            "hybrid_shard" | "hybrid" => FsdpStrategy::HybridShard,
            "no_shard" => FsdpStrategy::NoShard,
            _ => return Err(bad("FSDP strategy", s, "use full_shard, shard_grad_op, hybrid_shard or no_shard")),
        })
    }
}

/// A distributed layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parallel {
    /// Total GPUs.
    pub gpus: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// The engine.
    pub engine: Engine,
    /// DeepSpeed ZeRO stage (0–3).
    pub zero: u8,
    /// FSDP strategy.
    pub fsdp: FsdpStrategy,
    /// Optimizer states (and fp32 master weights) on the CPU.
    pub offload_optimizer: bool,
    /// Parameters on the CPU (ZeRO-3 / FSDP full shard).
    pub offload_params: bool,
    /// Tensor parallel size.
    pub tp: u64,
    /// Pipeline parallel size.
    pub pp: u64,
    /// Megatron sequence parallelism (with TP).
    pub sp: bool,
    /// Context parallel size (sequence split across GPUs).
    pub cp: u64,
    /// Expert parallel size (MoE experts split across data-parallel ranks).
    pub ep: u64,
    /// Virtual pipeline stages per GPU (interleaved 1F1B); 1 = none.
    pub virtual_stages: u64,
    /// Megatron distributed optimizer (optimizer states sharded over data parallel).
    pub distributed_optimizer: bool,
    /// NCCL buffers per communicator (stated assumption).
    pub nccl_buffer: u64,
}

impl Parallel {
    /// One GPU, no parallelism.
    pub fn single() -> Parallel {
        Parallel {
            gpus: 1,
            gpus_per_node: 8,
            engine: Engine::Ddp,
            zero: 0,
            fsdp: FsdpStrategy::NoShard,
            offload_optimizer: false,
            offload_params: false,
            tp: 1,
            pp: 1,
            sp: false,
            cp: 1,
            ep: 1,
            virtual_stages: 1,
            distributed_optimizer: false,
            // NCCL: NCCL_BUFFSIZE 4 MiB × 2 (send/recv) × up to 32 channels on NVLink per
            // communicator (NCCL docs, env NCCL_BUFFSIZE / NCCL_MAX_NCHANNELS): stated assumption.
            nccl_buffer: 256 * MIB,
        }
    }

    /// tp · pp · cp, or `None` when the product overflows.
    fn model_shards(&self) -> Option<u64> {
        self.tp.checked_mul(self.pp)?.checked_mul(self.cp)
    }

    /// Data-parallel size: gpus / (tp · pp · cp) (0 when the layout does not multiply out).
    pub fn dp(&self) -> u64 {
        self.model_shards().filter(|s| *s > 0).map_or(0, |s| self.gpus / s)
    }

    /// Number of nodes.
    pub fn nodes(&self) -> u64 {
        self.gpus.div_ceil(self.gpus_per_node.max(1))
    }

    /// The layout in one line, every parallel dimension named (for the CLI's header), e.g.
    /// `DeepSpeed on 16 GPUs (2 nodes × 8): dp 16 · tp 1 · pp 1 · cp 1 · ep 8 · ZeRO-2`.
    pub fn describe(&self) -> String {
        let n = |count: u64, one: &str, many: &str| format!("{count} {}", if count == 1 { one } else { many });
        let mut s = format!(
            "{} on {} ({} × {}): data parallel {} · tensor parallel {} · pipeline parallel {} · context parallel {}",
            self.label(false),
            n(self.gpus, "GPU", "GPUs"),
            n(self.nodes(), "node", "nodes"),
            n(self.gpus_per_node.min(self.gpus), "GPU", "GPUs"),
            self.dp(),
            self.tp,
            self.pp,
            self.cp,
        );
        if self.ep > 1 {
            s.push_str(&format!(" · expert parallel {}", self.ep));
        }
        s
    }

    /// The engine and its options spelled out (`DeepSpeed ZeRO-2, expert parallel 8`,
    /// `Megatron-LM, sequence parallel, distributed optimizer, 4 virtual pipeline stages`).
    pub fn engine_label(&self) -> String {
        self.label(true)
    }

    fn label(&self, with_ep: bool) -> String {
        let mut parts = vec![match self.engine {
            Engine::DeepSpeed => format!("DeepSpeed ZeRO-{}", self.zero),
            Engine::Fsdp => format!("FSDP {}", self.fsdp.describe()),
            e => e.name().to_string(),
        }];
        if self.sp {
            parts.push("sequence parallel".into());
        }
        if self.distributed_optimizer {
            parts.push("distributed optimizer".into());
        }
        if self.virtual_stages > 1 {
            parts.push(format!("{} virtual pipeline stages", self.virtual_stages));
        }
        if with_ep && self.ep > 1 {
            parts.push(format!("expert parallel {}", self.ep));
        }
        if self.offload_params {
            parts.push("parameters and optimizer offloaded to CPU".into());
        } else if self.offload_optimizer {
            parts.push("optimizer offloaded to CPU".into());
        }
        parts.join(", ")
    }

    /// Check every option-needs-option combination, without a model: the cluster, the engine's
    /// options, and which engine offers offload and expert parallelism.
    pub fn validate_options(&self) -> Result<()> {
        self.validate_cluster()?;
        self.validate_engine()?;
        self.validate_offload()?;
        self.validate_expert_parallel()
    }

    fn validate_cluster(&self) -> Result<()> {
        if self.gpus == 0 || self.gpus > 1 << 20 || self.gpus_per_node == 0 || self.gpus_per_node > 1 << 20 {
            return Err(bad("GPU count", &format!("{} ({} per node)", self.gpus, self.gpus_per_node), "must be between 1 and 1048576"));
        }
        match self.model_shards() {
            Some(s) if s > 0 && self.gpus % s == 0 => Ok(()),
            _ => Err(bad(
                "parallel layout",
                &format!("tp {} × pp {} × cp {}", self.tp, self.pp, self.cp),
                &format!("must divide the {} GPUs", self.gpus),
            )),
        }
    }

    fn validate_engine(&self) -> Result<()> {
        if self.zero > 3 {
            return Err(bad("ZeRO stage", &self.zero.to_string(), "use 0, 1, 2 or 3"));
        }
        if self.engine != Engine::Megatron && (self.tp > 1 || self.pp > 1 || self.cp > 1 || self.sp) {
            return Err(bad(
                "parallel layout",
                "tensor/pipeline/context parallelism with DeepSpeed ZeRO, FSDP or DDP",
                "vram models TP/PP/CP/SP with Megatron (drop --zero/--fsdp); ZeRO and FSDP shard over data parallel",
            ));
        }
        if self.distributed_optimizer && self.engine != Engine::Megatron {
            return Err(bad(
                "distributed optimizer",
                &format!("with {:?}", self.engine),
                "--distributed-optimizer is Megatron's; with DeepSpeed or FSDP the optimizer is sharded by --zero/--fsdp",
            ));
        }
        if self.virtual_stages == 0 || (self.virtual_stages > 1 && self.pp == 1) {
            return Err(bad("virtual pipeline stages", &self.virtual_stages.to_string(), "need --pp > 1 (and at least 1)"));
        }
        Ok(())
    }

    /// Offload exists in DeepSpeed ZeRO (offload_optimizer from stage 1, offload_param at stage 3:
    /// runtime/zero/offload_config.py) and FSDP (CPUOffload moves parameters, gradients and
    /// optimizer step together: torch/distributed/fsdp/api.py). DDP and Megatron have none.
    fn validate_offload(&self) -> Result<()> {
        if !(self.offload_optimizer || self.offload_params) {
            return Ok(());
        }
        let what = if self.offload_params { "params" } else { "optimizer" };
        match self.engine {
            Engine::Ddp => Err(bad(
                "offload",
                what,
                "CPU offload needs a sharding engine: add --zero 1, 2 or 3 (DeepSpeed; --zero 3 for params) or --fsdp full_shard",
            )),
            Engine::Megatron => {
                Err(bad("offload", &format!("{what} with Megatron"), "offload is modelled for DeepSpeed ZeRO (--zero) and FSDP (--fsdp)"))
            }
            Engine::DeepSpeed if self.offload_params && self.zero != 3 => {
                Err(bad("offload", "params", "parameter offload (offload_param) needs --zero 3"))
            }
            Engine::DeepSpeed if self.zero == 0 => Err(bad("offload", "optimizer", "optimizer offload needs --zero 1, 2 or 3")),
            Engine::Fsdp if self.fsdp == FsdpStrategy::NoShard => {
                Err(bad("offload", what, "FSDP CPU offload needs a sharding strategy: --fsdp full_shard"))
            }
            _ => Ok(()),
        }
    }

    /// Expert parallelism: Megatron-Core (--expert-model-parallel-size) and DeepSpeed-MoE with
    /// ZeRO 0–2. DeepSpeed refuses MoE layers at stage 3 (runtime/engine.py,
    /// `_configure_zero_optimizer`: `assert not self.has_moe_layers, "MoE not supported with
    /// Stage 3"`); PyTorch DDP and FSDP/FSDP2 have no expert parallelism of their own.
    fn validate_expert_parallel(&self) -> Result<()> {
        if self.ep <= 1 {
            return if self.ep == 0 { Err(bad("expert parallel size", "0", "must be at least 1")) } else { Ok(()) };
        }
        match self.engine {
            Engine::DeepSpeed if self.zero == 3 => Err(bad(
                "expert parallel size",
                &format!("{} with ZeRO-3", self.ep),
                "DeepSpeed-MoE refuses ZeRO stage 3 (runtime/engine.py: \"MoE not supported with Stage 3\"): use --zero 1 or 2 with --ep, or drop --ep for ZeRO-3",
            )),
            Engine::Fsdp | Engine::Ddp => Err(bad(
                "expert parallel size",
                &format!("{} with {:?}", self.ep, self.engine),
                "PyTorch DDP/FSDP have no expert parallelism: use Megatron (drop --zero/--fsdp) or DeepSpeed-MoE (--zero 1 or 2)",
            )),
            _ if self.dp() % self.ep != 0 => Err(bad(
                "expert parallel size",
                &self.ep.to_string(),
                &format!("must divide the data-parallel size {} (experts are split over data-parallel ranks)", self.dp()),
            )),
            _ => Ok(()),
        }
    }

    /// Check that the layout divides the model and the cluster ([`Parallel::validate_options`] first).
    pub fn validate(&self, m: &Model) -> Result<()> {
        self.validate_options()?;
        if self.tp > 1 && (m.heads % self.tp != 0 || m.kv_heads % self.tp != 0) {
            return Err(bad(
                "tensor parallel size",
                &self.tp.to_string(),
                &format!("must divide the {} attention heads and the {} key/value heads", m.heads, m.kv_heads),
            ));
        }
        if self.pp > m.layers {
            return Err(bad("pipeline parallel size", &self.pp.to_string(), &format!("cannot exceed the {} layers", m.layers)));
        }
        match &m.moe {
            Some(moe) if self.ep > 1 && moe.experts % self.ep != 0 => {
                Err(bad("expert parallel size", &self.ep.to_string(), &format!("must divide the {} experts", moe.experts)))
            }
            None if self.ep > 1 => Err(bad("expert parallel size", &self.ep.to_string(), "the model has no experts")),
            _ if self.virtual_stages > 1 && m.layers % self.pp.saturating_mul(self.virtual_stages) != 0 => Err(bad(
                "virtual pipeline stages",
                &self.virtual_stages.to_string(),
                &format!("pp × virtual stages must divide the {} layers", m.layers),
            )),
            _ => Ok(()),
        }
    }
}

/// The per-GPU answer for the most loaded rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParallelEstimate {
    /// Components on the most loaded rank (allocated, then overheads), summing to `total`.
    pub components: Vec<Component>,
    /// Peak allocated on that rank.
    pub peak_allocated: u64,
    /// Total on that rank (what nvidia-smi shows).
    pub total: u64,
    /// Which rank and why it is the most loaded.
    pub rank: String,
    /// Data-parallel size.
    pub dp: u64,
    /// CPU memory per node when offloading.
    pub cpu_per_node: Option<u64>,
    /// Assumptions and notes.
    pub notes: Vec<String>,
}

/// Parameter counts that the layouts need.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// All parameters.
    pub total: u128,
    /// Token + position embeddings.
    pub embedding: u128,
    /// Untied LM head.
    pub head: u128,
    /// All decoder layers.
    pub layers: u128,
    /// Routed-expert parameters (within `layers`).
    pub experts: u128,
    /// Largest module DeepSpeed ZeRO-3 gathers whole (`largest_layer_params` in its estimator):
    /// the largest single tensor, or an MoE layer's experts module, whose fused 3-D
    /// `gate_up_proj` and `down_proj` (transformers v5 `MixtralExperts`-style) are one module's
    /// own parameters, gathered together at its pre-forward hook.
    pub largest_tensor: u128,
    /// Largest decoder layer (an FSDP unit under transformer auto-wrap).
    pub largest_layer: u128,
}

impl Counts {
    /// Count a model.
    pub fn of(m: &Model) -> Counts {
        // memory::inventory: an approximate model's unmodelled checkpoint parameters included.
        let t = crate::memory::inventory(m);
        let sum = |f: &dyn Fn(Role) -> bool| -> u128 { t.iter().filter(|g| f(g.role)).map(|g| g.numel as u128 * g.count as u128).sum() };
        let total = sum(&|_| true);
        let embedding = sum(&|r| matches!(r, Role::Embedding | Role::Position));
        let head = sum(&|r| r == Role::LmHead);
        let dense = (0..m.layers).find(|i| !m.is_moe_layer(*i)).map_or(0, |i| m.layer_parameters(i) as u128);
        let moe = (0..m.layers).find(|i| m.is_moe_layer(*i)).map_or(0, |i| m.layer_parameters(i) as u128);
        let n_moe = m.moe_layers() as u128;
        let layers = dense * (m.layers as u128 - n_moe) + moe * n_moe;
        Counts {
            total,
            embedding,
            head,
            layers,
            experts: sum(&|r| r == Role::Experts),
            largest_tensor: t
                .iter()
                .filter(|g| g.role != Role::Experts)
                .map(|g| g.numel as u128)
                .max()
                .unwrap_or(0)
                .max(t.iter().filter(|g| g.role == Role::Experts).map(|g| g.numel as u128).sum()),
            largest_layer: dense.max(moe),
        }
    }
}

/// Reference formulas as the frameworks publish them, for tests and for CPU sizing.
pub mod reference {
    /// DeepSpeed `estimate_zero2_model_states_mem_needs` (runtime/zero/stage_1_and_2.py):
    /// GPU = 2Ψ + 18Ψ/N (18 = 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam states);
    /// with CPU offload GPU = 2Ψ and CPU = Ψ · max(4·N, 16) · 1.5. Returns (gpu, cpu) bytes.
    pub fn deepspeed_zero2(params: u128, gpus_per_node: u128, nodes: u128, cpu_offload: bool) -> (u128, u128) {
        let n = gpus_per_node * nodes;
        if cpu_offload {
            (2 * params, params * (4 * n).max(16) * 3 / 2)
        } else {
            (2 * params + 18 * params / n, params * 4 * gpus_per_node * 3 / 2)
        }
    }

    /// DeepSpeed `estimate_zero3_model_states_mem_needs` (runtime/zero/stage3.py), zero_init:
    /// largest_layer_memory = 4 · largest_layer_params; GPU = that + 18Ψ/N, or + 2Ψ/N with
    /// optimizer offload, or alone with parameter offload. CPU per node with the 1.5 buffer factor.
    pub fn deepspeed_zero3(
        params: u128,
        largest_layer: u128,
        gpus_per_node: u128,
        nodes: u128,
        offload_optimizer: bool,
        offload_params: bool,
    ) -> (u128, u128) {
        let n = gpus_per_node * nodes;
        let largest = 4 * largest_layer;
        // gpus_factor = 1 / num_nodes
        if offload_params {
            (largest, params * 18 * 3 / 2 / nodes)
        } else if offload_optimizer {
            (largest + 2 * params / n, params * 16 * 3 / 2 / nodes)
        } else {
            (largest + 18 * params / n, largest_layer * 4 * gpus_per_node * 3 / 2)
        }
    }

    /// Megatron `compute_weight_and_optimizer_memory` (training/theoretical_memory_usage.py):
    /// bytes per parameter on the most loaded shard, 18, or 6 + 12/DP with the distributed optimizer.
    pub fn megatron_bytes_per_param(distributed_optimizer: bool, dp: u128) -> f64 {
        if distributed_optimizer {
            6.0 + 12.0 / dp as f64
        } else {
            18.0
        }
    }

    /// Megatron `compute_activation_memory` (Korthikanti et al. 2022, Table 2, sequence parallel +
    /// selective recompute), for the first pipeline stage: sbh(18 + 4·ffn/h) per layer × layers,
    /// embedding input and dropout for pp microbatches in flight, the interleaving penalty, the
    /// output layer and loss when pp = 1, all divided by TP.
    #[allow(clippy::too_many_arguments)]
    pub fn megatron_activations(
        seq: f64,
        micro: f64,
        hidden: f64,
        ffn: f64,
        layers: f64,
        vocab: f64,
        tp: f64,
        pp: f64,
        virtual_stages: f64,
        microbatches: f64,
    ) -> f64 {
        let mut a = seq * micro * hidden * (18.0 + 4.0 * ffn / hidden) * layers;
        a += 8.0 * seq * micro * pp;
        a += seq * micro * hidden * pp;
        if virtual_stages > 1.0 {
            a *= 1.0 + (pp - 1.0) / (pp * virtual_stages);
        } else if pp > 1.0 {
            a *= (microbatches / pp).min(1.0);
        }
        if pp == 1.0 {
            a += seq * micro * hidden * 4.0 * (1.0 + vocab / hidden);
        }
        a / tp
    }
}

/// Megatron's most loaded rank, as numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MegatronLayout {
    /// Parameters on the most loaded shard.
    pub shard: u128,
    /// fp32 master weights + optimizer states on it.
    pub optimizer: u128,
    /// Activations on the first stage (Megatron's formula).
    pub activations: u128,
    /// Logits and loss on the last stage (pp > 1).
    pub last_logits: u128,
    /// Whether the first stage is the most loaded.
    pub first_loaded: bool,
}

/// Megatron's layout: parameters on the most loaded shard (theoretical_memory_usage.py: layers / pp
/// plus the embedding on the first stage, / tp; the output layer on the last) at 18 B/param or
/// 6 + 12/DP with the distributed optimizer; activations by Korthikanti et al. 2022.
#[allow(clippy::too_many_arguments)]
pub fn megatron_layout(
    m: &Model,
    c: &Counts,
    par: &Parallel,
    batch: u64,
    seq: u64,
    ckpt: Checkpointing,
    eager: bool,
    microbatches: u64,
) -> MegatronLayout {
    let (tp, pp) = (par.tp as u128, par.pp as u128);
    let dp = par.dp() as u128;
    let per_stage_layers = c.layers.div_ceil(pp);
    let experts_share = if par.ep > 1 { c.experts / pp - c.experts / pp / par.ep as u128 } else { 0 };
    let other = c.total - c.layers - c.embedding - c.head; // final norm (last stage)
    let first = (per_stage_layers + c.embedding - experts_share) / tp;
    let last = (per_stage_layers + other + if c.head > 0 { c.head } else { c.embedding } - experts_share) / tp;
    let shard = if pp == 1 { (c.total - experts_share) / tp } else { first.max(last) };
    // Megatron-Core shards the expert parameters' optimizer over the expert-data-parallel group
    // (dp / ep ranks; megatron/core/optimizer/__init__.py builds the expert optimizer on
    // `get_expert_data_parallel_group`), the rest over dp: 12 B/param split accordingly.
    let local_experts = c.experts / pp / par.ep.max(1) as u128 / tp;
    let optimizer = if par.distributed_optimizer {
        let edp = (dp / par.ep.max(1) as u128).max(1);
        12 * (shard.saturating_sub(local_experts) / dp.max(1) + local_experts / edp)
    } else {
        12 * shard
    };
    let acts = megatron_acts(m, par, batch, seq, ckpt, eager, microbatches);
    let last_logits = if pp > 1 { (batch * seq / par.cp) as u128 * m.vocab as u128 * 12 / tp } else { 0 };
    let first_loaded = pp == 1 || 18 * first + acts as u128 >= 18 * last + last_logits;
    MegatronLayout { shard, optimizer, activations: acts as u128, last_logits, first_loaded }
}

/// Megatron activations on the first stage for one micro-batch size and checkpointing mode
/// (Korthikanti et al. 2022 Table 2, as theoretical_memory_usage.py).
fn megatron_acts(m: &Model, par: &Parallel, batch: u64, seq: u64, ckpt: Checkpointing, eager: bool, microbatches: u64) -> f64 {
    let ffn = m.intermediate as f64 * if m.mlp.gated { 1.5 } else { 1.0 };
    let (mb, s, h) = (batch as f64, (seq / par.cp) as f64, m.hidden as f64);
    match (ckpt, par.sp) {
        // Full recompute keeps each layer's input (2sbh per layer, / tp with SP).
        (Checkpointing::Full, _) => s * mb * h * 2.0 * m.layers as f64 / if par.sp { par.tp as f64 } else { 1.0 },
        (_, true) => {
            let base = reference::megatron_activations(
                s,
                mb,
                h,
                ffn,
                m.layers as f64,
                m.vocab as f64,
                par.tp as f64,
                par.pp as f64,
                par.virtual_stages as f64,
                microbatches as f64,
            );
            // No recompute with eager attention adds the 5as/h softmax/dropout term.
            if ckpt == Checkpointing::None && eager {
                base + 5.0 * mb * m.heads as f64 * s * s * m.layers as f64 / par.tp as f64
            } else {
                base
            }
        }
        // Without SP, norms and dropouts are replicated: sbh(10 + 24/t) per layer (Table 2).
        _ => {
            s * mb * h * (10.0 + (8.0 + 4.0 * ffn / h) / par.tp as f64) * m.layers as f64 / par.pp as f64
                * (microbatches.min(par.pp)) as f64
        }
    }
}

/// Model-state bytes on one rank for DeepSpeed and FSDP, as numbers (the planner's hot path
/// and `estimate_parallel` both use this one function).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct States {
    /// Resident parameters (16-bit for DeepSpeed, fp32 shard for FSDP).
    pub params: u128,
    /// Resident gradients.
    pub grads: u128,
    /// DeepSpeed's fp32 gradient copy in the optimizer.
    pub fp32_grads: u128,
    /// fp32 master weights (DeepSpeed).
    pub master: u128,
    /// Optimizer states.
    pub states: u128,
    /// Gathered parameters (ZeRO-3 largest module; FSDP units).
    pub gathered: u128,
    /// Communication buffers (ZeRO reduce / prefetch buckets).
    pub buckets: u128,
}

impl States {
    /// Sum.
    pub fn total(&self) -> u128 {
        self.params + self.grads + self.fp32_grads + self.master + self.states + self.gathered + self.buckets
    }
}

/// Bytes of optimizer state per parameter (Adam-family layout scaled for the others), with fp32
/// parameters.
pub fn state_bytes_per_param(opt: Optimizer) -> u128 {
    match opt {
        Optimizer::Adamw | Optimizer::Adam | Optimizer::PagedAdamw32bit => 8,
        Optimizer::Sgd => 0,
        Optimizer::SgdMomentum | Optimizer::Lion => 4,
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => 2,
        Optimizer::Adafactor => 1, // factored moments: a bound of ~1 B/param
    }
}

/// Bytes of optimizer state per parameter when the parameters are `param_bytes` wide: torch.optim
/// allocates Adam's moments and SGD's/Lion's momentum like the parameter (`torch.zeros_like(p)`,
/// torch/optim/adamw.py `_init_group`); bitsandbytes 8-bit and Adafactor's fp32 factors do not.
pub fn state_bytes_for(opt: Optimizer, param_bytes: u128) -> u128 {
    match opt {
        Optimizer::Adamw | Optimizer::Adam => 2 * param_bytes,
        Optimizer::SgdMomentum | Optimizer::Lion => param_bytes,
        other => state_bytes_per_param(other),
    }
}

/// How a data-parallel engine shards the model states over its group: what the DeepSpeed and
/// FSDP layout functions need (the planner's hot path and `estimate_parallel` share them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    /// Ranks the states are partitioned over (ZeRO's data-parallel group, FSDP's shard group).
    pub n: u128,
    /// Expert-parallel size (DeepSpeed-MoE; 1 = none).
    pub ep: u128,
    /// Bytes per element of the compute copy (the 16-bit model; 4 for fp32 training).
    pub compute_bytes: u128,
    /// Bytes per element of the sharded parameters and gradients (FSDP: 4 for an fp32 model
    /// under MixedPrecision, 2 for `model.to(bfloat16)`).
    pub shard_bytes: u128,
    /// Optimizer-state bytes per parameter.
    pub state_bytes: u128,
    /// Optimizer states (and master weights) on the CPU.
    pub offload_optimizer: bool,
    /// Parameters on the CPU.
    pub offload_params: bool,
}

impl Sharding {
    /// The sharding of `par` for `job`, over `n` ranks. DeepSpeed's bf16/fp16 optimizer keeps fp32
    /// master weights, gradients and states whatever the module's dtype; FSDP shards the
    /// parameters in the model's own dtype (fp32 under MixedPrecision, bf16 after `model.to`).
    pub fn of(job: &Job, par: &Parallel, n: u128) -> Sharding {
        let compute_bytes = if job.precision == Precision::Fp32 { 4 } else { 2 };
        let shard_bytes = if par.engine == Engine::Fsdp { u128::from(job.precision.param_dtype().bytes()) } else { 4 };
        Sharding {
            n: n.max(1),
            ep: u128::from(par.ep.max(1)),
            compute_bytes,
            shard_bytes,
            state_bytes: state_bytes_for(job.optimizer, shard_bytes),
            offload_optimizer: par.offload_optimizer,
            offload_params: par.offload_params,
        }
    }
}

/// Parameters a DeepSpeed-MoE rank holds whole: the non-expert parameters and its `1/ep` of the
/// experts (deepspeed/moe/layer.py: `num_local_experts = num_experts // ep_size`).
fn local_params(c: &Counts, ep: u128) -> u128 {
    c.total - c.experts + c.experts / ep.max(1)
}

/// DeepSpeed ZeRO layout (bf16/fp16 config; runtime/zero/stage_1_and_2.py, stage3.py): 16-bit
/// params and grads on the GPU; fp32 grads, master params and states in the optimizer,
/// partitioned over `s.n` ranks from stage 1 on. With DeepSpeed-MoE the 16-bit copies hold the
/// rank's local experts only, and the expert partitions live in the expert-data-parallel group
/// of `n / ep` ranks (stage_1_and_2.py: `real_dp_process_group[i] = expert_dp_process_group`),
/// so each rank's share of the partitioned states stays `Ψ / n`.
pub fn deepspeed_states(c: &Counts, zero: u8, s: &Sharding) -> States {
    let (p, n, w) = (c.total, s.n, s.compute_bytes);
    let local = local_params(c, s.ep);
    // ZeRO-0 keeps the whole optimizer on every rank (over the local parameters).
    let part = if zero == 0 { local } else { p / n };
    let mut st = States {
        params: if zero == 3 { w * p / n } else { w * local },
        // ZeRO-2 keeps only its 16-bit gradient partition (within DeepSpeed's 18Ψ/N); ZeRO-3's
        // live gradients are those of the gathered module (below).
        grads: match zero {
            0 | 1 => w * local,
            2 => w * p / n,
            _ => 0,
        },
        fp32_grads: 4 * part,
        master: 4 * part,
        states: s.state_bytes * part,
        // ZeRO-3 gathers the largest module's 16-bit params and grads whole (4 · largest_layer_params).
        gathered: if zero == 3 { 2 * w * c.largest_tensor } else { 0 },
        // stage3_prefetch_bucket_size 5e7 / reduce_bucket_size 5e8 elements (runtime/zero/config.py defaults).
        buckets: match zero {
            3 => 50_000_000 * w,
            1 | 2 => 500_000_000 * w,
            _ => 0,
        },
    };
    if s.offload_optimizer {
        st.fp32_grads = 0;
        st.master = 0;
        st.states = 0;
        if zero == 2 {
            st.grads = 0;
        }
    }
    if s.offload_params {
        st.params = 0;
    }
    st
}

/// FSDP layout: sharded parameters, gradients and states (1/`n`) in the model's own dtype
/// (fp32 under MixedPrecision(param_dtype=bf16), bf16 after `model.to(bfloat16)`:
/// torch/distributed/fsdp/_flat_param.py keeps the sharded FlatParameter in the original dtype),
/// plus the gathered compute copies in the compute dtype.
pub fn fsdp_states(c: &Counts, strategy: FsdpStrategy, s: &Sharding) -> States {
    let (p, n) = (c.total, s.n);
    let unit = c.largest_layer.max(c.embedding).max(c.head);
    let gathered = match strategy {
        FsdpStrategy::ShardGradOp => s.compute_bytes * p,
        FsdpStrategy::NoShard => 0,
        // current + prefetched unit, and one unsharded gradient being reduce-scattered
        _ => 3 * s.compute_bytes * unit,
    };
    States {
        params: if s.offload_params { 0 } else { s.shard_bytes * p / n },
        grads: if s.offload_params { 0 } else { s.shard_bytes * p / n },
        states: if s.offload_optimizer || s.offload_params { 0 } else { s.state_bytes * p / n },
        gathered,
        ..States::default()
    }
}

fn bad(what: &str, value: &str, hint: &str) -> Error {
    Error::InvalidValue { what: what.into(), value: value.into(), hint: hint.into() }
}

/// One allocated component before it becomes a [`Component`]: name, bytes, where it comes from.
type Part = (String, u128, String);

/// What one engine puts on its most loaded rank, before the runtime overheads.
struct RankParts {
    parts: Vec<Part>,
    rank: String,
    notes: Vec<String>,
    cpu_per_node: Option<u64>,
}

/// Per-GPU estimate of a distributed training job on its most loaded rank. `microbatches` is the
/// number of micro-batches per optimizer step on each data-parallel rank (gradient accumulation;
/// with pipeline parallelism, the micro-batches in the pipeline).
pub fn estimate_parallel(m: &Model, job: &Job, par: &Parallel, microbatches: u64) -> Result<ParallelEstimate> {
    // DDP replicates the single-GPU job, whose accounting is measured for the Gated DeltaNet
    // hybrids (under autocast); sharding engines compute in pure 16-bit and model parallelism
    // splits the mixer, neither measured on them.
    let replicated = par.engine == Engine::Ddp && par.tp == 1 && par.pp == 1 && par.cp == 1 && par.ep == 1;
    if !(replicated && m.delta_net().is_some()) {
        let what = if m.delta_net().is_some() {
            "multi-GPU training beyond DDP (ZeRO, FSDP, tensor/pipeline/context/expert parallelism)"
        } else {
            "multi-GPU training"
        };
        crate::memory::require_decoder(m, what)?;
    }
    check_request(m, job, par)?;
    // Llama 4's MoE is estimated as transformers runs it (every expert over every token);
    // Megatron-LM and DeepSpeed-MoE replace it with sparse dispatch, not modelled here.
    if m.moe.as_ref().is_some_and(|x| x.dense_dispatch) && (par.engine == Engine::Megatron || par.tp * par.pp * par.cp * par.ep > 1) {
        return Err(Error::InvalidValue {
            what: "parallel layout".into(),
            value: format!("{:?} tp {} pp {} cp {} ep {}", par.engine, par.tp, par.pp, par.cp, par.ep),
            hint: "Llama 4 is estimated as transformers runs its MoE (every expert over every token); Megatron-LM and DeepSpeed-MoE replace it with sparse dispatch, which vram does not model for it: use data parallelism (DDP, --zero, --fsdp)".into(),
        });
    }
    let c = Counts::of(m);
    let mut rank = match par.engine {
        Engine::Ddp => ddp_rank(m, job, par, &c, microbatches)?,
        Engine::DeepSpeed => deepspeed_rank(m, job, par, &c),
        Engine::Fsdp => fsdp_rank(m, job, par, &c),
        Engine::Megatron => megatron_rank(m, job, par, &c, microbatches),
    };
    rank.notes.extend(precision_note(job.precision, par.engine));
    finish(rank, job, par)
}

fn check_request(m: &Model, job: &Job, par: &Parallel) -> Result<()> {
    job.validate()?;
    crate::memory::check_lora(m, job)?;
    if crate::memory::optimizer::paged(job) {
        // Paged states live in unified memory; the engines' layouts here count device states only.
        return Err(bad(
            "optimizer",
            job.optimizer.name(),
            "paged optimizers are modelled on one GPU (their states as unified memory); across GPUs use adamw_bnb_8bit or adamw",
        ));
    }
    par.validate(m)?;
    if job.mode != Mode::Train {
        return Err(bad("mode", "infer", "the parallel model covers training; serving capacity is `vram serve`'s job"));
    }
    if job.lora.is_some() && !matches!(par.engine, Engine::Ddp | Engine::Fsdp) {
        return Err(bad(
            "peft",
            "lora",
            "LoRA is modelled on one GPU, with DDP and with FSDP; DeepSpeed and Megatron layouts of a frozen base are not yet: use --fsdp full_shard or plain --gpus N",
        ));
    }
    if job.lora.is_some() && (par.tp > 1 || par.pp > 1 || par.cp > 1 || par.ep > 1) {
        return Err(bad(
            "peft",
            "lora",
            "LoRA with tensor, pipeline, context or expert parallelism is not modelled: use data parallelism (DDP or FSDP)",
        ));
    }
    if job.seq % par.cp != 0 {
        return Err(bad("context parallel size", &par.cp.to_string(), &format!("must divide the sequence length {}", job.seq)));
    }
    Ok(())
}

/// What a pure 16-bit model (`model.to(bfloat16)`) means on each engine, said in the output.
fn precision_note(precision: Precision, engine: Engine) -> Option<String> {
    if !matches!(precision, Precision::Bf16 | Precision::Fp16) {
        return None;
    }
    Some(match engine {
        Engine::DeepSpeed => "pure 16-bit under DeepSpeed: its bf16/fp16 optimizer keeps fp32 master weights, gradients and \
             optimizer states whatever the module's dtype (bf16_master_weights_and_grads and bf16_optimizer_states \
             default to false, deepspeed/runtime/constants.py), so the states are those of mixed precision"
            .into(),
        Engine::Fsdp => "pure 16-bit under FSDP (model.to(bfloat16), no MixedPrecision): parameters, gradients and \
             optimizer states are sharded in 16-bit (torch.optim states follow the parameter dtype)"
            .into(),
        Engine::Megatron => "pure 16-bit under Megatron: --bf16/--fp16 keep fp32 main parameters and main_grad \
             (megatron/core/optimizer/optimizer.py Float16OptimizerWithFloat16Params), as modelled"
            .into(),
        Engine::Ddp => return None,
    })
}

/// The job each data-parallel replica runs for activations: its micro-batch, its sequence share,
/// in 16-bit (DeepSpeed casts the module; FSDP computes in param_dtype) unless fp32.
fn activation_job(job: &Job, par: &Parallel) -> Job {
    let precision = if job.precision == Precision::Fp32 { Precision::Fp32 } else { Precision::Bf16 };
    Job { batch: job.batch, seq: job.seq / par.cp, precision, grad_accum: 1, ..job.clone() }
}

/// DDP: torch AMP on each replica, exactly as on one GPU, plus DDP's flat gradient buckets: the
/// Reducer keeps its own bucket copy of every gradient unless gradient_as_bucket_view=True
/// (torch/nn/parallel/distributed.py).
fn ddp_rank(m: &Model, job: &Job, par: &Parallel, c: &Counts, microbatches: u64) -> Result<RankParts> {
    let single = crate::memory::estimate(m, &Job { seq: job.seq, grad_accum: microbatches.max(1), ..job.clone() })?;
    let mut parts: Vec<Part> = single
        .components
        .iter()
        .filter(|x| x.kind == Kind::Allocated)
        .map(|comp| (comp.name.clone(), comp.bytes as u128, comp.detail.clone()))
        .collect();
    if par.gpus > 1 {
        // Buckets hold the gradients of what trains: every parameter, or LoRA's adapters (fp32).
        let trainable = match job.lora {
            Some(_) => single.component(crate::memory::ADAPTERS_COMPONENT),
            None => c.total as u64 * job.precision.param_dtype().bytes(),
        };
        let g = single.component("gradients").max(trainable) as u128;
        parts.push((
            "DDP gradient buckets".into(),
            g,
            "flat all-reduce buckets, one copy of every gradient (gradient_as_bucket_view=False, torch's default)".into(),
        ));
    }
    let rank = if par.gpus > 1 { "every rank (replicas are identical)" } else { "the only GPU" };
    Ok(RankParts { parts, rank: rank.into(), notes: Vec::new(), cpu_per_node: None })
}

fn deepspeed_rank(m: &Model, job: &Job, par: &Parallel, c: &Counts) -> RankParts {
    let s = Sharding::of(job, par, par.dp() as u128);
    let st = deepspeed_states(c, par.zero, &s);
    let mut parts = deepspeed_parts(c, par, &s, &st, job.optimizer);
    push_activations(&mut parts, &activation_profile(m, &activation_job(job, par)));
    let mut notes = Vec::new();
    let mut cpu_per_node = None;
    if par.offload_optimizer || par.offload_params {
        cpu_per_node = Some(deepspeed_cpu_per_node(c, par));
        notes.push("CPU memory per node from DeepSpeed's own estimator (additional_buffer_factor 1.5)".into());
    }
    if !matches!(job.optimizer, Optimizer::Adamw | Optimizer::Adam) && par.zero > 0 {
        notes.push(format!("{} with ZeRO: states scaled from Adam's layout", job.optimizer.name()));
    }
    if par.ep > 1 {
        notes.push(format!(
            "DeepSpeed-MoE: {} of the experts' 16-bit weights on each rank; expert optimizer partitions over the \
             expert-data-parallel group of {} ranks (the all-to-all token buffers are not counted)",
            format_args!("1/{}", par.ep),
            par.dp() / par.ep.max(1)
        ));
    }
    RankParts { parts, rank: "every rank (ZeRO partitions evenly)".into(), notes, cpu_per_node }
}

/// The DeepSpeed model-state components, named as DeepSpeed's estimator terms.
fn deepspeed_parts(c: &Counts, par: &Parallel, s: &Sharding, st: &States, opt: Optimizer) -> Vec<Part> {
    let (n, w) = (s.n, s.compute_bytes);
    let part = if par.zero >= 1 { format!(", partitioned / {n}") } else { ", replicated".into() };
    let local = if s.ep > 1 { format!(" ({} local with ep {})", local_params(c, s.ep), s.ep) } else { String::new() };
    vec![
        (
            "parameters (16-bit)".into(),
            st.params,
            format!("{} parameters{local} × {w} B{}", c.total, if par.zero == 3 { format!(" / {n} (ZeRO-3)") } else { String::new() }),
        ),
        ("gradients (16-bit)".into(), st.grads, if par.zero >= 2 { format!("partitioned / {n}") } else { "replicated".into() }),
        ("gradients (fp32, optimizer)".into(), st.fp32_grads, format!("fp32 gradient copy the optimizer steps on{part}")),
        ("fp32 master weights".into(), st.master, format!("fp32 params{part}")),
        ("optimizer states".into(), st.states, format!("{} states{part}", opt.name())),
        (
            "ZeRO-3 gathered largest module".into(),
            st.gathered,
            format!("16-bit params + grads of the largest module ({} parameters) gathered whole", c.largest_tensor),
        ),
        (
            if par.zero == 3 { "ZeRO-3 prefetch bucket" } else { "ZeRO reduce bucket" }.into(),
            st.buckets,
            if par.zero == 3 {
                "stage3_prefetch_bucket_size = 5e7 elements (DeepSpeed default)".into()
            } else {
                "contiguous gradient buffer, reduce_bucket_size = 5e8 elements (DeepSpeed default)".into()
            },
        ),
    ]
}

/// CPU memory per node with offload, from DeepSpeed's own estimators.
fn deepspeed_cpu_per_node(c: &Counts, par: &Parallel) -> u64 {
    let nodes = par.nodes() as u128;
    let gpn = par.gpus_per_node.min(par.gpus) as u128;
    let (_, cpu) = if par.zero == 3 {
        reference::deepspeed_zero3(c.total, c.largest_tensor, gpn, nodes, par.offload_optimizer, par.offload_params)
    } else {
        reference::deepspeed_zero2(c.total, gpn, nodes, true)
    };
    u64::try_from(cpu).unwrap_or(u64::MAX)
}

/// Ranks FSDP shards over: the data-parallel group, the node (hybrid), or none.
fn fsdp_group(par: &Parallel) -> u128 {
    match par.fsdp {
        FsdpStrategy::FullShard | FsdpStrategy::ShardGradOp => par.dp() as u128,
        FsdpStrategy::HybridShard => par.gpus_per_node.min(par.gpus) as u128,
        FsdpStrategy::NoShard => 1,
    }
}

/// FSDP with LoRA (`use_orig_params=True`, as peft's FSDP recipe): the frozen base and the
/// adapters are sharded in their own dtypes, gradients and optimizer states exist for the
/// adapters only, and each unit is all-gathered as stored (packed 4-bit for FSDP-QLoRA with
/// `bnb_4bit_quant_storage`, answer.ai fsdp_qlora).
fn fsdp_lora_rank(m: &Model, job: &Job, par: &Parallel, c: &Counts) -> RankParts {
    let n = fsdp_group(par).max(1);
    let single = crate::memory::lora_states(m, job);
    let unit = c.largest_layer.max(c.embedding).max(c.head);
    let per_param = single.base / c.total.max(1);
    let gathered = match par.fsdp {
        FsdpStrategy::ShardGradOp => single.base,
        FsdpStrategy::NoShard => 0,
        _ => 2 * unit * per_param.max(1),
    };
    let mut parts: Vec<Part> = vec![
        ("parameters (frozen base shard)".into(), single.base / n, format!("{} B of frozen base / {n}", single.base)),
        ("adapter parameters (shard)".into(), single.trainable / n, format!("{} B of fp32 adapters / {n}", single.trainable)),
        ("gradients (adapter shard)".into(), single.trainable / n, format!("adapters only / {n}")),
        ("optimizer states".into(), single.states / n, format!("{} states of the adapters / {n}", job.optimizer.name())),
        (
            "FSDP gathered parameters".into(),
            gathered,
            format!("two all-gathered units (current + prefetch) as stored, ~{per_param} B/param (the base's average)"),
        ),
    ];
    push_activations(&mut parts, &activation_profile(m, &Job { seq: job.seq / par.cp, grad_accum: 1, ..job.clone() }));
    let notes = vec![
        "FSDP with LoRA: use_orig_params=True; the frozen base is sharded as loaded, only adapters have gradients and optimizer states"
            .into(),
    ];
    RankParts { parts, rank: "every rank (FSDP shards evenly)".into(), notes, cpu_per_node: None }
}

fn fsdp_rank(m: &Model, job: &Job, par: &Parallel, c: &Counts) -> RankParts {
    if job.lora.is_some() {
        return fsdp_lora_rank(m, job, par, c);
    }
    let s = Sharding::of(job, par, fsdp_group(par));
    let st = fsdp_states(c, par.fsdp, &s);
    let (n, sb) = (s.n, s.shard_bytes);
    let dtype = if sb == 4 { "fp32" } else { "16-bit" };
    let mut parts: Vec<Part> = vec![
        (format!("parameters ({dtype} shard)"), st.params, format!("{} parameters × {sb} B / {n}", c.total)),
        (format!("gradients ({dtype} shard)"), st.grads, format!("/ {n}")),
        ("optimizer states".into(), st.states, format!("{} states, {} B/param / {n}", job.optimizer.name(), s.state_bytes)),
        (
            "FSDP gathered parameters".into(),
            st.gathered,
            match par.fsdp {
                FsdpStrategy::ShardGradOp => "SHARD_GRAD_OP keeps the 16-bit parameters gathered from forward to backward".to_string(),
                FsdpStrategy::NoShard => "no sharding".to_string(),
                _ => "two all-gathered units (current + prefetch) and one unsharded gradient".to_string(),
            },
        ),
    ];
    push_activations(&mut parts, &activation_profile(m, &activation_job(job, par)));
    let mut notes = Vec::new();
    let mut cpu_per_node = None;
    if par.offload_optimizer || par.offload_params {
        let ranks_per_node = par.gpus_per_node.min(par.gpus) as u128;
        cpu_per_node = Some(u64::try_from(ranks_per_node * (2 * sb + s.state_bytes) * c.total / n).unwrap_or(u64::MAX));
        notes.push("FSDP CPU offload: each rank's parameter shard, gradients and optimizer states in host memory".into());
    }
    RankParts { parts, rank: "every rank (FSDP shards evenly)".into(), notes, cpu_per_node }
}

fn megatron_rank(m: &Model, job: &Job, par: &Parallel, c: &Counts, microbatches: u64) -> RankParts {
    let eager = job.attention == crate::job::AttentionImpl::Eager;
    let ml = megatron_layout(m, c, par, job.batch, job.seq, job.checkpointing, eager, microbatches);
    let (shard, dp) = (ml.shard, par.dp());
    let in_flight = if par.pp > 1 { format!("{} micro-batches", microbatches.min(par.pp)) } else { "1 micro-batch".into() };
    let mut parts: Vec<Part> = vec![
        ("parameters (bf16)".into(), 2 * shard, format!("{shard} parameters on this shard × 2 B")),
        ("gradients (fp32 main_grad)".into(), 4 * shard, "Megatron accumulates gradients in fp32".into()),
        (
            "fp32 master weights + optimizer states".into(),
            ml.optimizer,
            if par.distributed_optimizer {
                format!("12 B/param / DP {dp} (distributed optimizer; experts / expert-DP {})", dp / par.ep.max(1))
            } else {
                "12 B/param".into()
            },
        ),
        (
            "activations (Megatron formula)".into(),
            ml.activations,
            format!("Korthikanti et al. 2022 as Megatron's theoretical_memory_usage.py: {in_flight} in flight on the first stage"),
        ),
    ];
    if !ml.first_loaded {
        parts.push(("logits & loss (last stage)".into(), ml.last_logits, "fp32 logits and their gradient, vocab-parallel / tp".into()));
    }
    RankParts { parts, rank: megatron_rank_name(m, c, par, &ml, microbatches), notes: Vec::new(), cpu_per_node: None }
}

fn megatron_rank_name(m: &Model, c: &Counts, par: &Parallel, ml: &MegatronLayout, microbatches: u64) -> String {
    if par.pp == 1 {
        "every rank".into()
    } else if ml.first_loaded {
        format!(
            "pipeline stage 0: the embedding plus {} layers, and {} micro-batches of activations in flight under 1F1B",
            m.layers.div_ceil(par.pp),
            microbatches.min(par.pp)
        )
    } else {
        format!("the last pipeline stage: the output layer ({} parameters) and the logits", if c.head > 0 { c.head } else { c.embedding })
    }
}

/// Sum the engine's parts, add the runtime overheads (allocator reserve, CUDA context, cuBLAS
/// workspace, one NCCL communicator per parallel dimension larger than 1).
fn finish(r: RankParts, job: &Job, par: &Parallel) -> Result<ParallelEstimate> {
    let groups = [par.dp() > 1, par.tp > 1, par.pp > 1, par.cp > 1, par.ep > 1].iter().filter(|g| **g).count() as u64;
    let allocated = r.parts.iter().try_fold(0u128, |a, p| a.checked_add(p.1));
    let peak_allocated = allocated.and_then(|a| u64::try_from(a).ok()).ok_or_else(|| Error::Overflow { what: "per-GPU memory".into() })?;
    let mut components: Vec<Component> = r
        .parts
        .into_iter()
        .filter(|p| p.1 > 0)
        .map(|(name, bytes, detail)| Component { name, bytes: bytes as u64, kind: Kind::Allocated, detail })
        .collect();
    let o = job.overheads;
    let reserve = (peak_allocated as f64 * o.allocator_reserve).ceil() as u64;
    for (name, bytes, detail) in [
        ("caching allocator reserve", reserve, format!("assumed {:.0}% of peak allocated", o.allocator_reserve * 100.0)),
        ("CUDA context", o.context_for(job.mode), o.context_detail(job.mode)),
        ("cuBLAS workspace", o.cublas_for(job.mode), o.cublas_detail(job.mode)),
        ("NCCL buffers", groups * par.nccl_buffer, format!("{groups} communicators × {} MiB (stated assumption)", par.nccl_buffer / MIB)),
    ] {
        if bytes > 0 {
            components.push(Component { name: name.into(), bytes, kind: Kind::Overhead, detail });
        }
    }
    let total =
        components.iter().try_fold(0u64, |a, x| a.checked_add(x.bytes)).ok_or_else(|| Error::Overflow { what: "per-GPU memory".into() })?;
    let (rank, dp, cpu_per_node, notes) = (r.rank, par.dp(), r.cpu_per_node, r.notes);
    Ok(ParallelEstimate { components, peak_allocated, total, rank, dp, cpu_per_node, notes })
}

/// Activation side of the peak: the saved activations plus whichever is larger of the logits at
/// the start of backward and the widest layer's backward (they do not coexist).
fn push_activations(parts: &mut Vec<Part>, prof: &crate::memory::ActivationProfile) {
    parts.push((
        "activations".into(),
        prof.saved,
        "saved for backward by the Hugging Face model in 16-bit (same formulas as one GPU)".into(),
    ));
    if prof.logits >= prof.backward_transient {
        parts.push(("logits & loss".into(), prof.logits, "fp32 log-softmax and its gradients at the start of backward".into()));
    } else {
        parts.push(("backward temporaries".into(), prof.backward_transient, "widest layer backward (and its recomputation)".into()));
    }
    parts.push(("input batch".into(), prof.input, "input_ids, labels, attention_mask".into()));
}
