//! Distributed layouts against the frameworks' own published formulas, and invariants.

use proptest::prelude::*;
use vram_core::parallel::{estimate_parallel, reference, Counts, Engine, FsdpStrategy, Parallel};
use vram_core::{presets, Checkpointing, Job, Precision};

fn comp(e: &vram_core::parallel::ParallelEstimate, name: &str) -> u128 {
    e.components.iter().filter(|c| c.name == name).map(|c| c.bytes as u128).sum()
}

fn ds(zero: u8, gpus: u64, offload_optimizer: bool, offload_params: bool) -> Parallel {
    Parallel { gpus, engine: Engine::DeepSpeed, zero, offload_optimizer, offload_params, ..Parallel::single() }
}

/// GPU model states of a DeepSpeed estimate, in the estimator's terms.
fn ds_model_states(e: &vram_core::parallel::ParallelEstimate) -> u128 {
    [
        "parameters (16-bit)",
        "gradients (16-bit)",
        "gradients (fp32, optimizer)",
        "fp32 master weights",
        "optimizer states",
        "ZeRO-3 gathered largest module",
    ]
    .iter()
    .map(|n| comp(e, n))
    .sum()
}

#[test]
fn deepspeed_zero2_is_2p_plus_18p_over_n() {
    // DeepSpeed runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs (no offload).
    let m = presets::load("llama-3.1-8b").unwrap();
    let p = Counts::of(&m).total;
    for gpus in [8u64, 16, 64] {
        let e = estimate_parallel(&m, &Job::train(1, 2048), &ds(2, gpus, false, false), 1).unwrap();
        let (gpu, _) = reference::deepspeed_zero2(p, 8, (gpus / 8) as u128, false);
        let mine = ds_model_states(&e);
        assert!(mine.abs_diff(gpu) < gpus as u128 * 8, "{gpus} GPUs: {mine} vs {gpu}");
    }
    // With CPU offload the GPU keeps the 16-bit parameters only (2Ψ).
    let e = estimate_parallel(&m, &Job::train(1, 2048), &ds(2, 8, true, false), 1).unwrap();
    assert_eq!(
        comp(&e, "parameters (16-bit)") + comp(&e, "fp32 master weights") + comp(&e, "optimizer states"),
        reference::deepspeed_zero2(p, 8, 1, true).0
    );
    assert_eq!(e.cpu_per_node.unwrap() as u128, reference::deepspeed_zero2(p, 8, 1, true).1);
}

#[test]
fn deepspeed_zero3_is_4_largest_layer_plus_18p_over_n() {
    // DeepSpeed runtime/zero/stage3.py estimate_zero3_model_states_mem_needs and its offload variants.
    let m = presets::load("llama-3.1-70b").unwrap();
    let c = Counts::of(&m);
    for (oo, op) in [(false, false), (true, false), (true, true)] {
        let e = estimate_parallel(&m, &Job::train(1, 2048), &ds(3, 64, oo, op), 1).unwrap();
        let (gpu, cpu) = reference::deepspeed_zero3(c.total, c.largest_tensor, 8, 8, oo, op);
        let mine = ds_model_states(&e);
        assert!(mine.abs_diff(gpu) < 64 * 8, "offload {oo}/{op}: {mine} vs {gpu}");
        if oo || op {
            assert_eq!(e.cpu_per_node.unwrap() as u128, cpu);
        }
    }
}

#[test]
fn megatron_bytes_per_parameter() {
    // Megatron training/theoretical_memory_usage.py: 18 B/param, or 6 + 12/DP with the distributed optimizer.
    let m = presets::load("llama-3.1-8b").unwrap();
    let c = Counts::of(&m);
    let par = Parallel { gpus: 8, engine: Engine::Megatron, tp: 8, sp: true, ..Parallel::single() };
    let e = estimate_parallel(&m, &Job::train(1, 4096), &par, 1).unwrap();
    let states =
        comp(&e, "parameters (bf16)") + comp(&e, "gradients (fp32 main_grad)") + comp(&e, "fp32 master weights + optimizer states");
    let shard = c.total / 8;
    assert!((states as f64 / shard as f64 - 18.0).abs() < 1e-6);
    let dist = Parallel { gpus: 64, distributed_optimizer: true, ..par.clone() };
    let e = estimate_parallel(&m, &Job::train(1, 4096), &dist, 1).unwrap();
    let states =
        comp(&e, "parameters (bf16)") + comp(&e, "gradients (fp32 main_grad)") + comp(&e, "fp32 master weights + optimizer states");
    assert!((states as f64 / shard as f64 - (6.0 + 12.0 / 8.0)).abs() < 1e-6);
}

#[test]
fn megatron_activations_34_sbh_per_layer() {
    // Korthikanti et al. 2022 (arXiv 2205.05198) Table 2: with sequence parallelism and selective
    // recompute, 34·s·b·h / t bytes per layer (GPT-3 style MLP, ffn = 4h).
    let (s, b, h, t) = (2048.0, 1.0, 12288.0, 8.0);
    let one_layer =
        reference::megatron_activations(s, b, h, 4.0 * h, 1.0, 51200.0, t, 2.0, 1.0, 2.0) - (8.0 * s * b * 2.0 + s * b * h * 2.0) / t;
    assert!((one_layer - 34.0 * s * b * h / t).abs() < 1.0, "{one_layer}");
    // Interleaving (v virtual stages) costs 1 + (p - 1)/(p·v).
    let plain = reference::megatron_activations(s, b, h, 4.0 * h, 96.0, 51200.0, t, 8.0, 1.0, 64.0);
    let inter = reference::megatron_activations(s, b, h, 4.0 * h, 96.0, 51200.0, t, 8.0, 2.0, 64.0);
    assert!((inter / plain - (1.0 + 7.0 / 16.0)).abs() < 1e-9);
}

#[test]
fn tensor_parallel_divides_the_sharded_terms_exactly() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let job = Job::train(1, 4096);
    let at = |tp: u64| {
        let par = Parallel { gpus: tp, engine: Engine::Megatron, tp, sp: true, ..Parallel::single() };
        estimate_parallel(&m, &job, &par, 1).unwrap()
    };
    let (one, four) = (at(1), at(4));
    for name in
        ["parameters (bf16)", "gradients (fp32 main_grad)", "fp32 master weights + optimizer states", "activations (Megatron formula)"]
    {
        let (a, b) = (comp(&one, name), comp(&four, name));
        assert!(a.abs_diff(4 * b) <= 16, "{name}: {a} vs 4 × {b}");
    }
}

#[test]
fn pipeline_names_the_most_loaded_stage() {
    let m = presets::load("llama-3.1-70b").unwrap();
    let par = Parallel { gpus: 64, engine: Engine::Megatron, tp: 8, pp: 8, sp: true, distributed_optimizer: true, ..Parallel::single() };
    let e = estimate_parallel(&m, &Job { checkpointing: Checkpointing::Selective, ..Job::train(1, 4096) }, &par, 32).unwrap();
    assert!(e.rank.contains("stage"), "{}", e.rank);
}

#[test]
fn fsdp_strategies_order() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let job = Job { precision: Precision::Bf16Mixed, ..Job::train(1, 2048) };
    let at = |s: FsdpStrategy| {
        estimate_parallel(&m, &job, &Parallel { gpus: 16, engine: Engine::Fsdp, fsdp: s, ..Parallel::single() }, 1).unwrap().peak_allocated
    };
    assert!(at(FsdpStrategy::FullShard) < at(FsdpStrategy::ShardGradOp));
    assert!(at(FsdpStrategy::FullShard) < at(FsdpStrategy::HybridShard));
    assert!(at(FsdpStrategy::HybridShard) < at(FsdpStrategy::NoShard));
}

#[test]
fn bad_layouts_are_refused() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let job = Job::train(1, 2048);
    let bad = [
        Parallel { gpus: 6, engine: Engine::Megatron, tp: 4, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::Megatron, tp: 3, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 3, tp: 2, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::Megatron, ep: 2, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 2, offload_params: true, ..Parallel::single() },
        Parallel { gpus: 64, engine: Engine::Megatron, pp: 64, ..Parallel::single() },
    ];
    for p in bad {
        assert!(estimate_parallel(&m, &job, &p, 1).is_err(), "{p:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, .. ProptestConfig::default() })]

    /// ZeRO-3: per-GPU memory never grows with more GPUs.
    #[test]
    fn zero3_non_increasing_in_gpus(nodes in 1u64..32, extra in 1u64..8, seq in 256u64..8192) {
        let m = presets::load("llama-3.1-8b").unwrap();
        let job = Job::train(1, seq);
        let a = estimate_parallel(&m, &job, &ds(3, 8 * nodes, false, false), 1).unwrap();
        let b = estimate_parallel(&m, &job, &ds(3, 8 * (nodes + extra), false, false), 1).unwrap();
        prop_assert!(b.peak_allocated <= a.peak_allocated);
    }
}

fn mixtral() -> vram_core::Model {
    presets::load("mixtral-8x7b").unwrap()
}

#[test]
fn fsdp_pure_bf16_shards_params_grads_and_states_in_16_bit() {
    // model.to(bfloat16) without MixedPrecision: the FlatParameter shard, its gradient and
    // torch.optim's Adam moments (zeros_like(p)) are bf16 — half the bytes of bf16-mixed's fp32 shards.
    let m = presets::load("llama-3.1-8b").unwrap();
    let p = Counts::of(&m).total;
    let par = Parallel { gpus: 8, engine: Engine::Fsdp, fsdp: FsdpStrategy::FullShard, ..Parallel::single() };
    let at = |precision| estimate_parallel(&m, &Job { precision, ..Job::train(1, 4096) }, &par, 1).unwrap();
    let (pure, mixed) = (at(Precision::Bf16), at(Precision::Bf16Mixed));
    assert_eq!(comp(&pure, "parameters (16-bit shard)"), 2 * p / 8);
    assert_eq!(comp(&pure, "gradients (16-bit shard)"), 2 * p / 8);
    assert_eq!(comp(&pure, "optimizer states"), 4 * p / 8);
    assert_eq!(comp(&mixed, "parameters (fp32 shard)"), 4 * p / 8);
    assert_eq!(comp(&mixed, "optimizer states"), 8 * p / 8);
    assert!(pure.total < mixed.total);
    assert!(pure.notes.iter().any(|n| n.contains("FSDP")), "{:?}", pure.notes);
}

#[test]
fn deepspeed_pure_bf16_keeps_fp32_master_states_and_says_so() {
    // DeepSpeed's bf16 optimizer keeps fp32 master weights and states unless
    // bf16_master_weights_and_grads / bf16_optimizer_states (default false) are set.
    let m = presets::load("llama-3.1-8b").unwrap();
    let at = |precision| estimate_parallel(&m, &Job { precision, ..Job::train(1, 4096) }, &ds(3, 8, false, false), 1).unwrap();
    let (pure, mixed) = (at(Precision::Bf16), at(Precision::Bf16Mixed));
    assert_eq!(ds_model_states(&pure), ds_model_states(&mixed));
    assert!(pure.notes.iter().any(|n| n.contains("fp32 master") && n.contains("bf16_master_weights_and_grads")), "{:?}", pure.notes);
    assert!(mixed.notes.is_empty(), "{:?}", mixed.notes);
}

#[test]
fn offload_without_a_sharding_engine_is_refused_naming_the_option() {
    let ddp = Parallel { gpus: 8, offload_optimizer: true, ..Parallel::single() };
    let e = ddp.validate_options().unwrap_err().to_string();
    assert!(e.contains("--zero") && e.contains("--fsdp"), "{e}");
    let one_gpu = Parallel { offload_optimizer: true, ..Parallel::single() };
    assert!(one_gpu.validate_options().is_err());
    let bad = [
        Parallel { gpus: 8, engine: Engine::Megatron, offload_optimizer: true, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 0, offload_optimizer: true, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 2, offload_optimizer: true, offload_params: true, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::Fsdp, fsdp: FsdpStrategy::NoShard, offload_optimizer: true, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 2, distributed_optimizer: true, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::Megatron, pp: 1, virtual_stages: 2, ..Parallel::single() },
        Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 2, ep: 0, ..Parallel::single() },
    ];
    for p in bad {
        assert!(p.validate_options().is_err(), "{p:?}");
    }
    for ok in [ds(1, 8, true, false), ds(3, 8, true, true)] {
        ok.validate_options().unwrap();
    }
}

#[test]
fn huge_layout_products_are_errors_not_overflows() {
    let p = Parallel { gpus: 8, engine: Engine::Megatron, tp: u64::MAX / 2, pp: 4, ..Parallel::single() };
    assert!(p.validate_options().is_err());
    assert_eq!(p.dp(), 0);
}

#[test]
fn deepspeed_moe_keeps_only_local_experts_in_16_bit() {
    // deepspeed/moe/layer.py: num_local_experts = num_experts / ep_size; the expert partitions of
    // the optimizer live in the expert-data-parallel group of dp / ep ranks (stage_1_and_2.py).
    let m = mixtral();
    let c = Counts::of(&m);
    let job = Job::train(1, 4096);
    let at = |ep| estimate_parallel(&m, &job, &Parallel { ep, ..ds(2, 8, false, false) }, 1).unwrap();
    let (one, eight) = (at(1), at(8));
    assert_eq!(comp(&one, "parameters (16-bit)"), 2 * c.total);
    assert_eq!(comp(&eight, "parameters (16-bit)"), 2 * (c.total - c.experts + c.experts / 8));
    // ZeRO-2's partitioned states are Ψ/N either way.
    assert_eq!(comp(&one, "optimizer states"), comp(&eight, "optimizer states"));
    assert!(eight.total < one.total);
}

#[test]
fn expert_parallel_is_refused_where_the_engine_has_none() {
    let m = mixtral();
    let job = Job::train(1, 4096);
    // runtime/engine.py: assert not self.has_moe_layers, "MoE not supported with Stage 3".
    let e = estimate_parallel(&m, &job, &Parallel { ep: 8, ..ds(3, 8, false, false) }, 1).unwrap_err().to_string();
    assert!(e.contains("Stage 3"), "{e}");
    let fsdp = Parallel { gpus: 8, engine: Engine::Fsdp, fsdp: FsdpStrategy::FullShard, ep: 8, ..Parallel::single() };
    assert!(estimate_parallel(&m, &job, &fsdp, 1).is_err());
    // ep must divide the experts (8) and the data-parallel size.
    assert!(estimate_parallel(&m, &job, &Parallel { ep: 3, ..ds(2, 12, false, false) }, 1).is_err());
    assert!(estimate_parallel(&m, &job, &Parallel { ep: 16, ..ds(2, 16, false, false) }, 1).is_err());
}

#[test]
fn megatron_distributed_optimizer_shards_experts_over_expert_data_parallel() {
    // Megatron-Core builds the expert optimizer on the expert-data-parallel group (dp / ep ranks).
    let m = mixtral();
    let c = Counts::of(&m);
    let par = Parallel { gpus: 16, engine: Engine::Megatron, ep: 8, distributed_optimizer: true, ..Parallel::single() };
    let e = estimate_parallel(&m, &Job::train(1, 4096), &par, 1).unwrap();
    let local_experts = c.experts / 8;
    let shard = c.total - c.experts + local_experts;
    assert_eq!(comp(&e, "parameters (bf16)"), 2 * shard);
    assert_eq!(comp(&e, "fp32 master weights + optimizer states"), 12 * ((shard - local_experts) / 16 + local_experts / 2));
}

#[test]
fn the_layout_description_names_every_dimension() {
    let par = Parallel { ep: 8, ..ds(2, 16, false, false) };
    let d = par.describe();
    assert!(d.contains("data parallel 16") && d.contains("expert parallel 8") && d.contains("ZeRO-2") && d.contains("2 nodes"), "{d}");
    let meg = Parallel { gpus: 64, engine: Engine::Megatron, tp: 8, pp: 2, sp: true, distributed_optimizer: true, ..Parallel::single() };
    let d = meg.describe();
    assert!(
        d.contains("data parallel 4 · tensor parallel 8 · pipeline parallel 2 · context parallel 1")
            && !d.contains("expert parallel")
            && d.contains("sequence parallel")
            && d.contains("distributed optimizer"),
        "{d}"
    );
}

#[test]
fn zero3_gathers_an_moe_layers_whole_experts_module() {
    // transformers' MixtralExperts owns gate_up_proj (E, 2F, H) and down_proj (E, H, F); ZeRO-3
    // gathers a module's own parameters together: 16-bit params + grads of all 8 experts of a layer.
    let m = mixtral();
    let e = estimate_parallel(&m, &Job::train(1, 4096), &ds(3, 8, false, false), 1).unwrap();
    let experts_module: u128 = 3 * 8 * 14336 * 4096;
    assert_eq!(Counts::of(&m).largest_tensor, experts_module);
    assert_eq!(comp(&e, "ZeRO-3 gathered largest module"), 2 * 2 * experts_module);
}
