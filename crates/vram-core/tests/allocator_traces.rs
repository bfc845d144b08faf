//! Hold the allocator reserve `estimate` derives to the reserve of real allocation sequences.
//!
//! `validation/alloc_traces.py` records every storage a real transformers model allocates and
//! frees in two training steps or a generation (FakeTensorMode on the CPU, CUDA's choices
//! emulated as in `validation/harness.py`): `validation/fixtures/alloc_traces/*.txt`. Each trace
//! is replayed here through the caching-allocator model (itself held within 0.32% of the
//! recorded segments of real GPU snapshots by `tests/allocator.rs`), which gives the reserved
//! memory of the real sequence. `estimate` has no tensors, only per-phase totals: it derives a
//! sequence from them and runs the same model. This test holds the derived reserve to the real
//! sequence's, on development models and on held-out ones.

use std::path::PathBuf;

use serde_json::Value;
use vram_core::allocator::{simulate, AllocConf, Op};
use vram_core::{estimate, parse_config};

#[path = "support/traces.rs"]
mod traces;
use traces::{job_of, ops, root};

struct Row {
    name: String,
    split: String,
    /// Reserve of the real sequence over its peak allocated.
    real: f64,
    /// The estimate's reserve over its peak allocated.
    derived: f64,
    /// (estimate reserved - replayed reserved) / replayed reserved.
    total_error: f64,
    /// The same with the flat 5% reserve instead.
    flat_error: f64,
}

fn rows() -> Vec<Row> {
    let index = std::fs::read_to_string(root().join("validation/fixtures/alloc_traces.jsonl")).expect("run validation/alloc_traces.py");
    let mut out = Vec::new();
    for line in index.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        if r.get("_meta").is_some() {
            continue;
        }
        let trace = std::fs::read_to_string(root().join("validation").join(r["trace"].as_str().unwrap())).unwrap();
        let real = simulate(&ops(&trace), AllocConf::default(), None).unwrap();
        // The allocator counts unsplit remainders of large blocks as allocated (as
        // max_memory_allocated does); the harness sums rounded requests, as the estimate does.
        let harness_peak = r["peak_allocated"].as_u64().unwrap();
        assert!(real.peak_allocated >= harness_peak, "{}: the trace replays at least to the harness's peak", r["name"]);
        let src = std::fs::read(root().join(r["source"].as_str().unwrap())).unwrap();
        let model = parse_config(&src, r["model"].as_str().unwrap(), "fixture").unwrap();
        let job = job_of(&r);
        if let (Ok(dir), Some(seq)) = (std::env::var("VRAM_DUMP_SEQUENCES"), vram_core::allocation_sequence(&model, &job).ok()) {
            let mut ids = std::collections::HashMap::new();
            let text: String = seq
                .iter()
                .filter_map(|op| match op {
                    Op::Alloc { id, size } => {
                        let n = ids.len() + 1;
                        ids.insert(*id, n);
                        Some(format!("+{size}\n"))
                    }
                    Op::Free { id } => ids.get(id).map(|n| format!("-{n}\n")),
                })
                .collect();
            std::fs::write(PathBuf::from(dir).join(format!("{}.txt", r["name"].as_str().unwrap())), text).unwrap();
        }
        let est = estimate(&model, &job).unwrap();
        let reserve = est.components.iter().find(|c| c.name == "caching allocator reserve").unwrap().bytes;
        let est_reserved = est.peak_allocated + reserve;
        out.push(Row {
            name: r["name"].as_str().unwrap().into(),
            split: r["split"].as_str().unwrap().into(),
            real: (real.peak_reserved - harness_peak) as f64 / harness_peak as f64,
            derived: reserve as f64 / est.peak_allocated as f64,
            total_error: (est_reserved as f64 - real.peak_reserved as f64) / real.peak_reserved as f64,
            flat_error: (est.peak_allocated as f64 * 1.05 - real.peak_reserved as f64) / real.peak_reserved as f64,
        });
    }
    out
}

#[test]
fn derived_reserve_follows_real_sequences() {
    let rows = rows();
    for r in &rows {
        println!(
            "{:<9} {:<60} real {:>6.2}%  derived {:>6.2}%  reserved error {:>+6.2}% (flat 5%: {:>+6.2}%)",
            r.split,
            r.name,
            r.real * 100.0,
            r.derived * 100.0,
            r.total_error * 100.0,
            r.flat_error * 100.0
        );
    }
    let mut stats = Vec::new();
    for split in ["dev", "held-out"] {
        for (what, f) in [("model", (|r: &Row| r.total_error) as fn(&Row) -> f64), ("flat 5%", |r: &Row| r.flat_error)] {
            let mut e: Vec<f64> = rows.iter().filter(|r| r.split == split).map(|r| f(r).abs()).collect();
            e.sort_by(f64::total_cmp);
            let q = |p: f64| e[((e.len() - 1) as f64 * p).round() as usize] * 100.0;
            let mean: f64 = rows.iter().filter(|r| r.split == split).map(f).sum::<f64>() / e.len() as f64 * 100.0;
            println!(
                "{split:<9} {what:<8} n {:>3}  median |err| {:>5.2}%  p90 {:>5.2}%  max {:>5.2}%  mean {:>+5.2}%",
                e.len(),
                q(0.5),
                q(0.9),
                q(1.0),
                mean
            );
            stats.push((split, what, q(0.5), q(0.9), q(1.0)));
        }
    }
    // Bounds on the reserved total (allocated + reserve) against the real sequence's replay; the
    // simulated reserve must beat the flat 5% it replaced, on the models it was not built on.
    let get = |split: &str, what: &str| *stats.iter().find(|s| s.0 == split && s.1 == what).unwrap();
    for split in ["dev", "held-out"] {
        let (_, _, median, p90, max) = get(split, "model");
        assert!(median <= 3.0 && p90 <= 10.0 && max <= 25.0, "{split}: median {median:.2}% p90 {p90:.2}% max {max:.2}%");
        let (_, _, flat_median, flat_p90, _) = get(split, "flat 5%");
        assert!(median < flat_median && p90 < flat_p90, "{split}: the model is no better than the flat 5%");
    }
    assert!(rows.iter().filter(|r| r.split == "held-out").count() >= 45, "held-out traces missing: run validation/alloc_traces.py");
}
