//! The allocator model and memory_viz accounting, held to the real snapshots committed in
//! validation/snapshots/ (origin in its README; expected peaks from memory_viz_peaks.py).

use std::path::PathBuf;

use vram_core::allocator::{replay, AllocConf};
use vram_core::snapshot::{parse, View};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../validation/snapshots")
}

fn fixtures() -> Vec<(String, serde_json::Value)> {
    let expected: serde_json::Value = serde_json::from_slice(&std::fs::read(dir().join("expected_peaks.json")).unwrap()).unwrap();
    let mut v: Vec<(String, serde_json::Value)> = expected.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 10, "the five public snapshots and five H100 ones are committed");
    v
}

#[test]
fn peaks_match_memory_viz() {
    for (name, exp) in fixtures() {
        let snap = parse(&std::fs::read(dir().join(&name)).unwrap()).unwrap();
        for (dev, e) in exp.as_object().unwrap() {
            let d: usize = dev.parse().unwrap();
            assert_eq!(snap.timeline(d, View::Allocated).peak, e["peak_allocated_bytes"].as_u64().unwrap(), "{name} allocated");
            assert_eq!(snap.timeline(d, View::Reserved).peak, e["peak_reserved_bytes"].as_u64().unwrap(), "{name} reserved");
        }
    }
}

#[test]
fn replayed_reserved_within_5_percent_of_recorded() {
    for (name, _) in fixtures() {
        let snap = parse(&std::fs::read(dir().join(&name)).unwrap()).unwrap();
        for d in snap.devices() {
            let r = replay(&snap, d, AllocConf::default()).unwrap();
            println!(
                "{name} device {d}: replayed {:.3} GiB, recorded {:.3} GiB, error {:+.2}% ({} allocs)",
                vram_core::units::gib(r.model.peak_reserved),
                vram_core::units::gib(r.recorded_peak_reserved),
                r.error() * 100.0,
                r.allocs
            );
            assert!(r.error().abs() <= 0.05, "{name}: {r:?}");
        }
    }
}

#[test]
fn the_reserve_is_simulated_by_default_and_carries_its_reason() {
    use vram_core::{estimate, estimate_with, presets, Job};
    let m = presets::load("gpt2").unwrap();
    let job = Job::train(4, 1024);
    // Default: the allocator model over the job's sequence, with its reason.
    let sim = estimate(&m, &job).unwrap();
    let c = sim.components.iter().find(|c| c.name == "caching allocator reserve").unwrap();
    assert!(c.detail.contains("live blocks") && c.detail.contains("CUDACachingAllocator.cpp"), "{}", c.detail);
    assert!(c.detail.contains("two training steps"), "{}", c.detail);
    assert_ne!(c.bytes, (sim.peak_allocated as f64 * 0.05).ceil() as u64, "not the flat fraction");
    // The reserve is what the simulated segments hold beyond the sequence's own peak: it is the
    // replay of a concrete sequence, so replaying that sequence gives it back.
    let ops = vram_core::allocation_sequence(&m, &job).unwrap();
    let r = vram_core::allocator::simulate(&ops, AllocConf::default(), None).unwrap();
    assert_eq!(c.bytes, r.peak_reserved - vram_core::allocator::peak_requested(&ops));
    // expandable_segments maps only what is used: never more reserved than without it.
    let exp = estimate_with(&m, &job, &AllocConf::parse("expandable_segments:True").unwrap()).unwrap();
    assert!(exp.component("caching allocator reserve") <= c.bytes, "{} vs {}", exp.component("caching allocator reserve"), c.bytes);
    // Inference has its own sequence.
    let inf = estimate(&m, &Job { prompt_len: Some(512), ..Job::infer(4, 1024) }).unwrap();
    let ci = inf.components.iter().find(|c| c.name == "caching allocator reserve").unwrap();
    assert!(ci.detail.contains("a generation"), "{}", ci.detail);
    // --allocator-reserve (allocator None) sets the flat fraction, named as such.
    let mut ten = job.clone();
    ten.overheads.allocator_reserve = 0.10;
    ten.overheads.allocator = None;
    let f = estimate(&m, &ten).unwrap();
    assert_eq!(f.component("caching allocator reserve"), (f.peak_allocated as f64 * 0.10).ceil() as u64);
    // A job without a sequence (gradient accumulation) says why it gets the flat 5%.
    let acc = estimate(&m, &Job { grad_accum: 4, ..job.clone() }).unwrap();
    let ca = acc.components.iter().find(|c| c.name == "caching allocator reserve").unwrap();
    assert!(ca.detail.contains("assumed 5%") && ca.detail.contains("accumulation"), "{}", ca.detail);
}

/// Recorded with `stacks="python"` on an H100: the blocks autograd's backward thread allocates
/// carry no frames at all. They were allocated while recording, so they are not "allocated
/// before recording started" (which only blocks without a trace event are).
#[test]
fn frameless_blocks_of_the_backward_thread_are_not_called_pre_recording() {
    let name = "h100-opt-125m_train_bf16-mixed_1_2048_foreach_False.pickle";
    let snap = parse(&std::fs::read(dir().join(name)).unwrap()).unwrap();
    let e = snap.explain(0);
    let names: Vec<&str> = e.by_category.iter().map(|g| g.key.as_str()).collect();
    assert!(names.iter().any(|n| n.starts_with("unknown (no frames: a C++ thread")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("before recording started")), "{names:?}");
    assert!(names.contains(&"activations") && names.contains(&"optimizer state") && names.contains(&"parameters"), "{names:?}");
}
