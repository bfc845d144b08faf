//! Generate a large synthetic PyTorch memory snapshot and time `snapshot::parse` + `explain`.
//!
//! `cargo run --release -p vram-core --example explain_bench -- [MB | FILE.pickle] [OUT.pickle]`
//!
//! Builds a protocol-4 pickle shaped like `torch.cuda.memory._snapshot()` (strings, frame dicts
//! and frame lists memoized as `pickle.dumps` does) of about MB megabytes (default 100), with a
//! deterministic pseudo-random alloc / free_requested / free_completed workload over 2,000
//! distinct 40-frame stacks (or reads FILE.pickle instead), then prints the time of each phase:
//! `pickle::load` alone, `snapshot::parse` (load + conversion) and `explain`. With OUT it also
//! writes the file, so `vram explain OUT` can be timed end to end
//! (`/usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KB" vram explain OUT`).

use std::collections::HashMap;
use std::time::Instant;

use vram_core::snapshot;

/// A minimal pickler for the plain data a snapshot holds.
struct Pickler {
    out: Vec<u8>,
    memo: HashMap<String, u32>,
    next: u32,
}

impl Pickler {
    fn memoize(&mut self) -> u32 {
        self.out.push(0x94);
        self.next += 1;
        self.next - 1
    }
    fn get(&mut self, idx: u32) {
        if idx < 256 {
            self.out.extend_from_slice(&[b'h', idx as u8]);
        } else {
            self.out.push(b'j');
            self.out.extend_from_slice(&idx.to_le_bytes());
        }
    }
    fn str(&mut self, s: &str) {
        if let Some(&i) = self.memo.get(s) {
            return self.get(i);
        }
        if s.len() < 256 {
            self.out.extend_from_slice(&[0x8c, s.len() as u8]);
        } else {
            self.out.push(b'X');
            self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        self.out.extend_from_slice(s.as_bytes());
        let i = self.memoize();
        self.memo.insert(s.to_owned(), i);
    }
    fn int(&mut self, v: i64) {
        match v {
            0..=255 => self.out.extend_from_slice(&[b'K', v as u8]),
            256..=65535 => {
                self.out.push(b'M');
                self.out.extend_from_slice(&(v as u16).to_le_bytes());
            }
            _ if i32::try_from(v).is_ok() => {
                self.out.push(b'J');
                self.out.extend_from_slice(&(v as i32).to_le_bytes());
            }
            _ => {
                // LONG1 with the shortest two's-complement encoding, as pickle writes it.
                let b = v.to_le_bytes();
                let mut n = 8;
                while n > 1 && ((b[n - 1] == 0 && b[n - 2] & 0x80 == 0) || (b[n - 1] == 0xff && b[n - 2] & 0x80 != 0)) {
                    n -= 1;
                }
                self.out.extend_from_slice(&[0x8a, n as u8]);
                self.out.extend_from_slice(&b[..n]);
            }
        }
    }
    /// An empty list, memoized as pickle does (items follow with MARK ... APPENDS).
    fn list(&mut self) {
        self.out.push(b']');
        self.memoize();
    }
    /// `{k: v, ...}` where each value is written by the closure given with its key.
    fn dict(&mut self, items: &mut dyn FnMut(&mut Self)) {
        self.out.push(b'}');
        self.memoize();
        self.out.push(b'(');
        items(self);
        self.out.push(b'u');
    }
}

/// Deterministic xorshift generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const STACKS: usize = 2000;
const DEPTH: usize = 40;

/// Frame lists, each pickled once and referred to by its memo index afterwards.
fn frames(p: &mut Pickler, memo: &mut [Option<u32>], stack: usize) {
    if let Some(i) = memo[stack] {
        return p.get(i);
    }
    p.out.push(b']');
    let i = p.memoize();
    p.out.push(b'(');
    for d in 0..DEPTH {
        let (name, file) = match (stack + d) % 7 {
            0 => ("forward".to_string(), format!("/home/u/model/layer{}.py", stack % 50)),
            1 => ("_call_impl".to_string(), "/venv/torch/nn/modules/module.py".to_string()),
            2 => ("step".to_string(), "/venv/torch/optim/adamw.py".to_string()),
            3 => ("backward".to_string(), "/venv/torch/autograd/graph.py".to_string()),
            _ => (format!("at::native::kernel_{}(at::Tensor const&)", (stack * 31 + d) % 400), "??".to_string()),
        };
        p.dict(&mut |p| {
            p.str("name");
            p.str(&name);
            p.str("filename");
            p.str(&file);
            p.str("line");
            p.int((stack * 7 + d) as i64 % 900);
        });
    }
    p.out.push(b'e');
    memo[stack] = Some(i);
}

fn event(p: &mut Pickler, memo: &mut [Option<u32>], action: &str, addr: u64, size: u64, time: i64, stack: usize) {
    p.dict(&mut |p| {
        for (k, v) in [("action", None), ("addr", Some(addr as i64)), ("size", Some(size as i64)), ("stream", Some(0))] {
            p.str(k);
            match v {
                Some(v) => p.int(v),
                None => p.str(action),
            }
        }
        p.str("time_us");
        p.int(time);
        p.str("compile_context");
        p.str("N/A");
        p.str("user_metadata");
        p.str("");
        p.str("frames");
        frames(p, memo, stack);
    });
}

/// The trace: allocations over a bounded live set, freed in two steps as the caching allocator records.
fn trace(p: &mut Pickler, target: usize) {
    let (mut rng, mut memo) = (Rng(0x9e37_79b9_7f4a_7c15), vec![None; STACKS]);
    let (mut live, mut next_addr, mut time): (Vec<(u64, u64, usize)>, u64, i64) = (Vec::new(), 0x7f00_0000_0000, 1_700_000_000_000_000);
    p.list();
    p.out.push(b'(');
    let mut batch = 0;
    while p.out.len() < target {
        time += (rng.next() % 50) as i64;
        if live.len() < 500 || (live.len() < 5000 && rng.next() % 2 == 0) {
            let size = (rng.next() % 4096 + 1) * 512;
            let stack = (rng.next() as usize) % STACKS;
            event(p, &mut memo, "alloc", next_addr, size, time, stack);
            live.push((next_addr, size, stack));
            next_addr += size.next_multiple_of(512);
            batch += 1;
        } else {
            let (addr, size, stack) = live.swap_remove((rng.next() as usize) % live.len());
            event(p, &mut memo, "free_requested", addr, size, time, stack);
            event(p, &mut memo, "free_completed", addr, size, time, stack);
            batch += 2;
        }
        if batch >= 1000 {
            // pickle.dumps batches APPENDS by 1000 items.
            p.out.extend_from_slice(b"e(");
            batch = 0;
        }
    }
    p.out.push(b'e');
}

/// The whole snapshot dict of about `target` bytes.
fn generate(target: usize) -> Vec<u8> {
    let mut p = Pickler { out: b"\x80\x04".to_vec(), memo: HashMap::new(), next: 0 };
    p.dict(&mut |p| {
        p.str("segments");
        p.list();
        p.out.push(b'(');
        for s in 0..4u64 {
            p.dict(&mut |p| {
                for (k, v) in [("device", 0), ("address", 0x7e00_0000_0000 + (s << 30)), ("total_size", 1 << 30), ("stream", 0)] {
                    p.str(k);
                    p.int(v as i64);
                }
                p.str("segment_type");
                p.str("large");
                p.str("blocks");
                p.list();
                p.out.push(b'(');
                p.dict(&mut |p| {
                    p.str("size");
                    p.int(1 << 30);
                    p.str("requested_size");
                    p.int(1 << 30);
                    p.str("state");
                    p.str(if s == 0 { "active_allocated" } else { "inactive" });
                    p.str("frames");
                    p.list();
                });
                p.out.push(b'e');
            });
        }
        p.out.push(b'e');
        p.str("device_traces");
        p.list();
        trace(p, target);
        p.out.push(b'a');
        p.str("allocator_settings");
        p.dict(&mut |p| {
            p.str("expandable_segments");
            p.out.push(0x89);
        });
    });
    p.out.push(b'.');
    p.out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = args.get(1).cloned().unwrap_or_else(|| "100".into());
    let t = Instant::now();
    let data = match arg.parse::<usize>() {
        Ok(mb) => generate(mb * 1_000_000),
        Err(_) => std::fs::read(&arg).expect("cannot read the snapshot"),
    };
    eprintln!("{} bytes ready in {:.3} s", data.len(), t.elapsed().as_secs_f64());
    if let Some(out) = args.get(2) {
        std::fs::write(out, &data).expect("cannot write the snapshot");
        eprintln!("wrote {out}");
    }
    let t = Instant::now();
    drop(vram_core::pickle::load(&data).expect("the pickle loads"));
    let load = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let snap = snapshot::parse(&data).expect("the snapshot parses");
    let parse = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let ex = snap.explain(snap.devices()[0]);
    let explain = t.elapsed().as_secs_f64();
    println!(
        "{} bytes, {} trace entries, {} stacks: pickle::load alone {load:.3} s; parse (load + convert) {parse:.3} s, explain {explain:.3} s; peak allocated {} B, peak reserved {} B",
        data.len(),
        ex.events,
        snap.stacks.len(),
        ex.peak_allocated,
        ex.peak_reserved
    );
}
