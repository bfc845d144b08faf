//! The planner over its full space for Llama-3.1-405B on 1,024 H100s, single estimates, and
//! `fit`'s alternatives search.
//! Targets (issue 4): ≥ 10 million configurations evaluated per second on one core, the whole
//! search under 100 ms. `cargo bench -p vram-core --bench plan` prints, before criterion's
//! report, one `README:` line per case (median of 21 timed runs after 3 warm-ups, fixed inputs),
//! which a script can paste next to the machine's name.

use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput as Elements};
use vram_core::plan::{prepare, search, PlanRequest, Throughput};
use vram_core::{estimate, gpu, presets, Job};

/// The benchmarked cases: default global batch, and 2048 × 64 sequences.
const CASES: [(&str, Option<u64>); 2] = [("405b-1024gpu-default-batch", None), ("405b-1024gpu-batch-2048x64", Some(2048 * 64))];

fn request<'a>(m: &'a vram_core::Model, job: &'a Job, g: &'a vram_core::gpu::Gpu, global: Option<u64>) -> PlanRequest<'a> {
    PlanRequest {
        model: m,
        job,
        gpu: g,
        gpus: 1024,
        gpus_per_node: 8,
        global_batch: global,
        target: 0.9,
        throughput: Throughput::for_gpu(g),
        keep: 5,
        only: None,
    }
}

/// Median wall time of `f` over 21 runs after 3 warm-ups.
fn median(mut f: impl FnMut()) -> Duration {
    for _ in 0..3 {
        f();
    }
    let mut t: Vec<Duration> = (0..21)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

/// One line per case for the README: whole-search time and configurations per second.
fn readme_lines() {
    let m = presets::load("llama-3.1-405b").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let job = Job::train(1, 8192);
    for (label, global) in CASES {
        let req = request(&m, &job, &g, global);
        let evaluated = search(&req).unwrap().evaluated;
        let whole = median(|| {
            std::hint::black_box(search(std::hint::black_box(&req)).unwrap());
        });
        let prepared = prepare(&req).unwrap();
        let eval = median(|| {
            std::hint::black_box(std::hint::black_box(&prepared).run());
        });
        println!(
            "README: plan {label}: {evaluated} configurations; whole search {:.2} ms (median of 21); \
             evaluation {:.1} M configurations/s; whole search {:.1} M configurations/s",
            whole.as_secs_f64() * 1e3,
            evaluated as f64 / eval.as_secs_f64() / 1e6,
            evaluated as f64 / whole.as_secs_f64() / 1e6,
        );
    }
}

fn planner(c: &mut Criterion) {
    let m = presets::load("llama-3.1-405b").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let job = Job::train(1, 8192);
    for (label, global) in CASES {
        let req = request(&m, &job, &g, global);
        let evaluated = search(&req).unwrap().evaluated;
        let mut group = c.benchmark_group("plan");
        // The whole search, setup included (target < 100 ms), also as configurations/s.
        group.throughput(Elements::Elements(evaluated));
        group.bench_function(format!("{label}/whole-search"), |b| b.iter(|| search(std::hint::black_box(&req)).unwrap()));
        // The evaluation loop over every configuration (target ≥ 10 M configurations/s).
        let prepared = prepare(&req).unwrap();
        group.bench_function(format!("{label}/evaluate"), |b| b.iter(|| std::hint::black_box(&prepared).run()));
        group.finish();
    }
}

fn single_estimate(c: &mut Criterion) {
    let m = presets::load("llama-3.1-8b").unwrap();
    let job = Job::train(4, 4096);
    c.bench_function("estimate/llama-3.1-8b", |b| b.iter(|| estimate(std::hint::black_box(&m), std::hint::black_box(&job)).unwrap()));
}

/// `fit`'s alternatives search (every saver and combination re-estimated), run on every `vram fit`.
fn fit_search(c: &mut Criterion) {
    let budget = (gpu::lookup("h100").unwrap().memory as f64 * vram_core::fit::DEFAULT_TARGET_UTILIZATION) as u64;
    for (name, seq) in [("llama-3.1-8b", 2048), ("qwen2.5-0.5b", 2048), ("llama-3.1-70b", 4096)] {
        let m = presets::load(name).unwrap();
        let job = Job::train(1, seq);
        c.bench_function(&format!("fit-search/{name}-seq{seq}"), |b| {
            b.iter(|| vram_core::advice::search(std::hint::black_box(&m), &job, budget).unwrap())
        });
    }
}

criterion_group!(benches, planner, single_estimate, fit_search);

fn main() {
    // `cargo test --benches` runs this binary with `--test`-like flags: keep that quick.
    if !std::env::args().any(|a| a == "--test" || a == "--list") {
        readme_lines();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
