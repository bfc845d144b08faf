//! Invariants of the memory model, over randomly drawn jobs (proptest).

use proptest::prelude::*;
use vram_core::fit::{fit, max_batch, max_batch_linear};
use vram_core::units::GIB;
use vram_core::{estimate, presets, AttentionImpl, Checkpointing, Job, Kind, Mode, Optimizer, OptimizerImpl, Precision};

const MODELS: &[&str] = &["gpt2", "qwen2.5-0.5b", "llama-3.2-1b", "mixtral-8x7b", "gemma-2-9b", "phi-3-mini", "mistral-7b"];

fn job_strategy() -> impl Strategy<Value = (usize, Job)> {
    (
        0..MODELS.len(),
        prop_oneof![Just(Mode::Train), Just(Mode::Infer)],
        1u64..64,
        1u64..8192,
        0usize..5,
        0usize..7,
        0usize..3,
        0usize..3,
        1u64..4,
        any::<bool>(),
        0usize..3,
    )
        .prop_map(|(m, mode, batch, seq, p, o, c, a, accum, fused, imp)| {
            let precision = match mode {
                Mode::Train => [Precision::Fp32, Precision::Bf16Mixed, Precision::Fp16Mixed, Precision::Bf16, Precision::Fp16][p],
                Mode::Infer => [Precision::Bf16, Precision::Fp32, Precision::Fp8, Precision::Int8, Precision::Int4][p],
            };
            let optimizer = [
                Optimizer::Adamw,
                Optimizer::Adam,
                Optimizer::Adamw8bit,
                Optimizer::Sgd,
                Optimizer::SgdMomentum,
                Optimizer::Adafactor,
                Optimizer::Lion,
            ][o];
            let mut attention = [AttentionImpl::Sdpa, AttentionImpl::Flash, AttentionImpl::Eager][a];
            if attention == AttentionImpl::Flash && precision == Precision::Fp32 {
                attention = AttentionImpl::Sdpa;
            }
            let job = Job {
                mode,
                batch,
                seq,
                precision,
                optimizer,
                optimizer_impl: [OptimizerImpl::Foreach, OptimizerImpl::Fused, OptimizerImpl::ForLoop][imp],
                checkpointing: [Checkpointing::None, Checkpointing::Full, Checkpointing::Selective][c],
                attention,
                grad_accum: accum,
                fused_cross_entropy: fused,
                ..Job::train(batch, seq)
            };
            (m, job)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn components_sum_to_totals((mi, job) in job_strategy()) {
        let model = presets::load(MODELS[mi]).unwrap();
        let e = estimate(&model, &job).unwrap();
        let all: u64 = e.components.iter().map(|c| c.bytes).sum();
        let alloc: u64 = e.components.iter().filter(|c| c.kind == Kind::Allocated).map(|c| c.bytes).sum();
        prop_assert_eq!(all, e.total);
        prop_assert_eq!(alloc, e.peak_allocated);
        // The peak is the largest phase, and it is the phase reported.
        let max = e.phases.iter().map(|p| p.allocated).max().unwrap();
        prop_assert_eq!(max, e.peak_allocated);
        prop_assert!(e.phases.iter().any(|p| p.phase == e.peak_phase && p.allocated == max));
        prop_assert!(e.total > e.peak_allocated);
    }

    #[test]
    fn monotone_in_batch_and_sequence((mi, job) in job_strategy(), db in 1u64..16, ds in 1u64..2048) {
        let model = presets::load(MODELS[mi]).unwrap();
        let base = estimate(&model, &job).unwrap();
        let more_batch = estimate(&model, &job.with_batch(job.batch + db)).unwrap();
        let longer = Job { seq: job.seq + ds, ..job.clone() };
        let more_seq = estimate(&model, &longer).unwrap();
        // Crossing a sliding window switches kernels for real (an explicit mask makes fp32 GQA run
        // memory-efficient attention instead of math): memory may fall there, and only there.
        let switches = vram_core::memory::activations::sliding_masked(&model, &job, job.seq) != vram_core::memory::activations::sliding_masked(&model, &longer, longer.seq);
        prop_assert!(more_batch.peak_allocated >= base.peak_allocated, "batch {} -> {}: {} -> {}", job.batch, job.batch + db, base.peak_allocated, more_batch.peak_allocated);
        prop_assert!(switches || more_seq.peak_allocated >= base.peak_allocated, "seq {} -> {}: {} -> {}", job.seq, job.seq + ds, base.peak_allocated, more_seq.peak_allocated);
        // Totals: monotone with a flat reserve. The simulated reserve is not (the caching allocator
        // can fragment more at batch 11 than at 12), so it is checked apart, in fit's invariant.
        let flat = |j: &Job| Job { overheads: vram_core::Overheads { allocator: None, ..j.overheads }, ..j.clone() };
        let t = |j: &Job| estimate(&model, &flat(j)).unwrap().total;
        prop_assert!(t(&job.with_batch(job.batch + db)) >= t(&job) && (switches || t(&longer) >= t(&job)));
    }
}

proptest! {
    // Each case scans up to 2 × 256 batches: a third of the cases above keeps this test from
    // being a third of the core suite's time in a debug build (CI), with the same ranges.
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn search_equals_linear_scan(mi in 0..3usize, seq in 128u64..4096, budget_gib in 2u64..40, ckpt in any::<bool>()) {
        let model = presets::load(MODELS[mi]).unwrap();
        let job = Job { checkpointing: if ckpt { Checkpointing::Full } else { Checkpointing::None }, ..Job::train(1, seq) };
        let budget = budget_gib * GIB;
        let limit = 256;
        // With a flat reserve the total is monotone and bisection equals the scan.
        let flat = Job { overheads: vram_core::Overheads { allocator: None, ..job.overheads }, ..job.clone() };
        prop_assert_eq!(max_batch(&model, &flat, budget, limit).unwrap(), max_batch_linear(&model, &flat, budget, limit).unwrap());
        // With the simulated reserve (not monotone in the batch, like PyTorch's allocator), the
        // answer is a batch that fits whose next one does not, and never below the first failure.
        let found = max_batch(&model, &job, budget, limit).unwrap();
        let linear = max_batch_linear(&model, &job, budget, limit).unwrap();
        let total = |b: u64| estimate(&model, &job.with_batch(b)).unwrap().total;
        if let Some(b) = found {
            prop_assert!(total(b) <= budget);
            prop_assert!(b == limit || total(b + 1) > budget);
        }
        prop_assert!(found >= linear);
    }
}

#[test]
fn fit_reports_the_largest_batch_within_target() {
    let model = presets::load("qwen2.5-1.5b").unwrap();
    let job = Job { precision: Precision::Fp16Mixed, ..Job::train(1, 4096) };
    let gpu = vram_core::gpu::lookup("h20").unwrap();
    let f = fit(&model, &job, gpu.memory, 0.9, None).unwrap();
    let b = f.max_batch.expect("fits");
    let chosen = f.chosen.as_ref().unwrap();
    assert!(chosen.total <= f.budget);
    let next = f.next.as_ref().unwrap();
    assert_eq!(next.batch, b + 1);
    assert!(next.total > f.budget);
    assert_eq!(Some(b), max_batch_linear(&model, &job, f.budget, 64).unwrap());
}

#[test]
fn global_batch_uses_divisors_and_accumulation() {
    let model = presets::load("qwen2.5-0.5b").unwrap();
    let job = Job::train(1, 2048);
    let f = fit(&model, &job, 24 * GIB, 0.9, Some(12)).unwrap();
    let b = f.max_batch.unwrap();
    assert_eq!(12 % b, 0);
    assert_eq!(f.chosen.unwrap().grad_accum, 12 / b);
}

#[test]
fn batch_one_too_big_reports_none() {
    let model = presets::load("llama-3.1-70b").unwrap();
    let f = fit(&model, &Job::train(1, 4096), 80 * GIB, 0.9, None).unwrap();
    assert_eq!(f.max_batch, None);
    assert!(f.next.unwrap().total > f.budget);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 60, .. ProptestConfig::default() })]

    /// ZeRO-3 / FSDP first order: per-GPU memory never grows with more GPUs.
    #[test]
    fn sharding_never_increases_memory((mi, job) in job_strategy(), n in 1u64..512) {
        prop_assume!(job.mode == Mode::Train);
        let model = presets::load(MODELS[mi]).unwrap();
        let a = estimate(&model, &Job { model_state_shards: n, ..job.clone() }).unwrap();
        let b = estimate(&model, &Job { model_state_shards: n + 1, ..job.clone() }).unwrap();
        prop_assert!(b.peak_allocated <= a.peak_allocated);
    }
}
