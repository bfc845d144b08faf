//! The planner over its full space for Llama-3.1-405B on 1,024 H100s, and single estimates.
//! Targets (issue 4): ≥ 10 million configurations evaluated per second on one core, the whole
//! search under 100 ms. `cargo bench -p vram-core --bench plan`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput as Elements};
use vram_core::plan::{prepare, search, PlanRequest, Throughput};
use vram_core::{estimate, gpu, presets, Job};

fn planner(c: &mut Criterion) {
    let m = presets::load("llama-3.1-405b").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let job = Job::train(1, 8192);
    for (label, global) in [("405b-1024gpu-default-batch", None), ("405b-1024gpu-batch-2048x64", Some(2048 * 64))] {
        let req = PlanRequest {
            model: &m,
            job: &job,
            gpu: &g,
            gpus: 1024,
            gpus_per_node: 8,
            global_batch: global,
            target: 0.9,
            throughput: Throughput::for_gpu(&g),
            keep: 5,
            only: None,
        };
        let evaluated = search(&req).unwrap().evaluated;
        let mut group = c.benchmark_group("plan");
        // The whole search, setup included (target < 100 ms).
        group.bench_function(format!("{label}/whole-search"), |b| b.iter(|| search(std::hint::black_box(&req)).unwrap()));
        // The evaluation loop over every configuration (target ≥ 10 M configurations/s).
        let prepared = prepare(&req).unwrap();
        group.throughput(Elements::Elements(evaluated));
        group.bench_function(format!("{label}/evaluate"), |b| b.iter(|| std::hint::black_box(&prepared).run()));
        group.finish();
    }
}

fn single_estimate(c: &mut Criterion) {
    let m = presets::load("llama-3.1-8b").unwrap();
    let job = Job::train(4, 4096);
    c.bench_function("estimate/llama-3.1-8b", |b| b.iter(|| estimate(std::hint::black_box(&m), std::hint::black_box(&job)).unwrap()));
}

criterion_group!(benches, planner, single_estimate);
criterion_main!(benches);
