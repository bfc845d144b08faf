//! Replay an allocation trace from validation/alloc_traces.py through the caching-allocator
//! model and say where the reserved peak falls: `cargo run --release -p vram-core --example
//! trace_replay -- validation/fixtures/alloc_traces/NAME.txt`.
use std::collections::HashMap;

use vram_core::allocator::{AllocConf, Allocator};

fn main() {
    let path = std::env::args().nth(1).expect("a trace file");
    let text = std::fs::read_to_string(&path).expect("readable trace");
    let mut a = Allocator::new(AllocConf::default(), None);
    let (mut addrs, mut sizes) = (HashMap::new(), HashMap::new());
    let (mut next, mut phase, mut live) = (0u64, String::from("init"), 0u64);
    let (mut peak_res, mut at, mut live_at) = (0u64, String::new(), 0u64);
    let (mut peak_live, mut live_phase) = (0u64, String::new());
    let mut cached = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let (sign, rest) = l.split_at(1);
        match sign {
            "=" => phase = rest.to_string(),
            "+" => {
                next += 1;
                let n: u64 = rest.parse().unwrap();
                addrs.insert(next, a.malloc(n, 0).unwrap());
                let r = vram_core::allocator::round_size(n);
                sizes.insert(next, r);
                live += r;
                if live > peak_live {
                    peak_live = live;
                    live_phase = phase.clone();
                }
                if a.reserved() > peak_res {
                    peak_res = a.reserved();
                    at = format!("{phase} line {i} (alloc of {:.1} MiB)", n as f64 / 1048576.0);
                    live_at = live;
                    cached = a.cached_blocks();
                }
            }
            _ => {
                let id: u64 = rest.parse().unwrap();
                a.free(addrs.remove(&id).unwrap()).unwrap();
                live -= sizes.remove(&id).unwrap();
            }
        }
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    println!("peak live {:.3} GiB in {live_phase}", gib(peak_live));
    println!(
        "peak reserved {:.3} GiB at {at}; live then {:.3} GiB; reserve over peak live {:.2}%",
        gib(peak_res),
        gib(live_at),
        (peak_res as f64 / peak_live as f64 - 1.0) * 100.0
    );
    println!("{:?}", a.report());
    let mib = |b: u64| b as f64 / 1048576.0;
    let total: u64 = cached.iter().map(|c| c.1).sum();
    println!("cached at the reserved peak: {:.1} MiB in {} blocks; largest:", mib(total), cached.len());
    for (seg, b) in cached.iter().take(12) {
        println!("  {:>9.1} MiB free in a {:>9.1} MiB segment", mib(*b), mib(*seg));
    }
}
