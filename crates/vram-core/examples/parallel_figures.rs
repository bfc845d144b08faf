//! The distributed figures the README quotes (Mixtral EP, pure bf16 under sharding), regenerated:
//! `cargo run -p vram-core --example parallel_figures`.

use vram_core::parallel::{estimate_parallel, Engine, FsdpStrategy, Parallel};
use vram_core::units::gib;
use vram_core::{presets, Job, Precision};

fn main() {
    let mixtral = presets::load("mixtral-8x7b").unwrap();
    for zero in [2u8, 3] {
        for ep in [1u64, 8] {
            let par = Parallel { gpus: 8, engine: Engine::DeepSpeed, zero, ep, ..Parallel::single() };
            match estimate_parallel(&mixtral, &Job::train(1, 4096), &par, 1) {
                Ok(e) => println!("mixtral zero {zero} ep {ep}: {:.2} GiB per GPU", gib(e.total)),
                Err(e) => println!("mixtral zero {zero} ep {ep}: error: {e}"),
            }
        }
    }
    for ep in [1u64, 8] {
        let par = Parallel { gpus: 8, engine: Engine::Megatron, ep, distributed_optimizer: true, ..Parallel::single() };
        let e = estimate_parallel(&mixtral, &Job::train(1, 4096), &par, 1).unwrap();
        println!("mixtral megatron dist-opt ep {ep}: {:.2} GiB per GPU", gib(e.total));
    }
    let llama = presets::load("llama-3.1-8b").unwrap();
    for precision in [Precision::Bf16Mixed, Precision::Bf16] {
        let job = Job { precision, ..Job::train(1, 4096) };
        for (label, par) in [
            ("zero 3", Parallel { gpus: 8, engine: Engine::DeepSpeed, zero: 3, ..Parallel::single() }),
            ("fsdp full_shard", Parallel { gpus: 8, engine: Engine::Fsdp, fsdp: FsdpStrategy::FullShard, ..Parallel::single() }),
        ] {
            let e = estimate_parallel(&llama, &job, &par, 1).unwrap();
            println!("llama-3.1-8b {precision:?} {label}: {:.2} GiB per GPU", gib(e.total));
        }
    }
}
