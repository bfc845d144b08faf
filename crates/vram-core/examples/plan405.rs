//! Time one full plan search for Llama-3.1-405B on 1,024 H100s.
use std::time::Instant;
use vram_core::plan::{search, PlanRequest, Throughput};
use vram_core::{gpu, presets, Job};
fn main() {
    let m = presets::load("llama-3.1-405b").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let job = Job::train(1, 8192);
    let req = PlanRequest {
        model: &m,
        job: &job,
        gpu: &g,
        gpus: 1024,
        gpus_per_node: 8,
        global_batch: None,
        target: 0.9,
        throughput: Throughput::for_gpu(&g),
        keep: 5,
    };
    let t = Instant::now();
    let r = search(&req).unwrap();
    let dt = t.elapsed();
    println!("{} configs, {} fit, {:?} => {:.1} M configs/s", r.evaluated, r.fitting, dt, r.evaluated as f64 / dt.as_secs_f64() / 1e6);
    for p in &r.top {
        println!(
            "{:?} tp{} pp{} cp{} dp{} mb{} acc{} {:?} {:.1} GiB {:.0} tok/s | {}",
            p.parallel.engine,
            p.parallel.tp,
            p.parallel.pp,
            p.parallel.cp,
            p.parallel.dp(),
            p.micro_batch,
            p.grad_accum,
            p.checkpointing,
            p.per_gpu_bytes as f64 / 2f64.powi(30),
            p.tokens_per_second,
            p.reason
        );
    }
}
