use std::time::Instant;
use vram_core::{memory::activation_profile, parallel::Counts, presets, Job};
fn main() {
    let m = presets::load("llama-3.1-405b").unwrap();
    let t = Instant::now();
    for _ in 0..10 {
        std::hint::black_box(activation_profile(&m, &Job::train(1, 8192)));
    }
    println!("activation_profile {:?}", t.elapsed() / 10);
    let t = Instant::now();
    for _ in 0..10 {
        std::hint::black_box(Counts::of(&m));
    }
    println!("Counts::of {:?}", t.elapsed() / 10);
    let t = Instant::now();
    for _ in 0..10 {
        std::hint::black_box(vram_core::estimate(&m, &Job::train(1, 8192)).unwrap());
    }
    println!("estimate {:?}", t.elapsed() / 10);
}
