//! `vram explain` on the real snapshots in validation/snapshots/, and on hostile pickles.

mod util;

use std::path::PathBuf;

use util::{fails, vram};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../validation/snapshots").join(name).display().to_string()
}

fn expected() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixture("expected_peaks.json")).unwrap()).unwrap()
}

#[test]
fn peaks_match_memory_viz_on_every_public_snapshot() {
    let exp = expected();
    for (name, e) in exp.as_object().unwrap() {
        let out = vram().args(["explain", &fixture(name), "--json"]).output().unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["peak_allocated"], e["0"]["peak_allocated_bytes"], "{name}");
        assert_eq!(v["peak_reserved"], e["0"]["peak_reserved_bytes"], "{name}");
        let cats: u64 = v["by_category"].as_array().unwrap().iter().map(|g| g["bytes"].as_u64().unwrap()).sum();
        assert_eq!(cats, v["peak_allocated"].as_u64().unwrap(), "{name}: categories sum to the peak");
    }
}

#[test]
fn text_report_names_peak_and_units() {
    let out = vram().args(["explain", &fixture("cs336-wl_medium_128_training.pickle")]).output().unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("peak allocated      6.53 GiB"), "{s}");
    assert!(s.contains("optimizer state"), "{s}");
    assert!(s.contains("Fragmentation at dump time"), "{s}");
}

#[test]
fn refuses_a_pickle_that_imports_os_system_without_running_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("PWNED");
    let cmd = format!("touch {}", marker.display());
    // GLOBAL os.system + REDUCE (cmd,): what pickle.loads would execute.
    let mut evil = b"\x80\x02cos\nsystem\nq\x00X".to_vec();
    evil.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
    evil.extend_from_slice(cmd.as_bytes());
    evil.extend_from_slice(b"q\x01\x85q\x02Rq\x03.");
    let path = dir.path().join("evil.pickle");
    std::fs::write(&path, &evil).unwrap();
    let err = fails(&["explain", path.to_str().unwrap()], 2);
    assert!(err.contains("refusing to load: pickle imports os.system"), "{err}");
    assert!(!marker.exists(), "the payload must never run");
}

#[test]
fn not_a_snapshot_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("list.pickle");
    std::fs::write(&path, b"\x80\x04]\x94.").unwrap();
    let err = fails(&["explain", path.to_str().unwrap()], 2);
    assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
}

#[test]
fn svg_is_written_and_never_overwritten_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("t.svg");
    let snap = fixture("cs336-kk_ctx128_forward.pickle");
    vram().args(["explain", &snap, "--svg", svg.to_str().unwrap()]).assert().success();
    let body = std::fs::read_to_string(&svg).unwrap();
    assert!(body.starts_with("<svg") && body.contains("polyline"));
    let err = fails(&["explain", &snap, "--svg", svg.to_str().unwrap()], 2);
    assert!(err.contains("--force"), "{err}");
    vram().args(["explain", &snap, "--svg", svg.to_str().unwrap(), "--force"]).assert().success();
}

#[test]
fn estimate_beside_the_snapshot() {
    let snap = fixture("cs336-wl_medium_128_training.pickle");
    let v = util::json(&["explain", &snap, "--model", "gpt2-medium", "--batch-size", "4", "--seq-len", "128", "--precision", "fp32"]);
    let rows = v["comparison"]["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["what"] == "peak allocated" && r["snapshot"] == v["peak_allocated"]));
    assert!(v["comparison"]["verdict"].as_str().unwrap().contains("largest difference"));
}

#[test]
fn the_allocator_model_is_the_default_and_a_flat_reserve_is_opt_in() {
    let detail = |v: &serde_json::Value| {
        v["components"].as_array().unwrap().iter().find(|c| c["name"] == "caching allocator reserve").unwrap()["detail"].to_string()
    };
    let sim = util::json(&["estimate", "-m", "gpt2", "-b", "4", "-s", "1024"]);
    assert!(detail(&sim).contains("live blocks"), "{}", detail(&sim));
    // The old opt-in flag is still accepted and changes nothing.
    assert_eq!(sim, util::json(&["estimate", "-m", "gpt2", "-b", "4", "-s", "1024", "--allocator-model"]));
    let flat = util::json(&["estimate", "-m", "gpt2", "-b", "4", "-s", "1024", "--allocator-reserve", "0.05"]);
    assert!(detail(&flat).contains("assumed 5%"), "{}", detail(&flat));
    // Sharded jobs have no sequence yet: the flat reserve, saying so.
    let fsdp = util::json(&["estimate", "-m", "gpt2", "-b", "4", "-s", "1024", "--gpus", "2", "--zero", "2"]);
    assert!(fsdp.to_string().contains("assumed 5%"), "{fsdp}");
    // Settings change the simulation; both ways of giving them are read, bad ones refused.
    let exp = util::json(&["estimate", "-m", "gpt2", "-b", "4", "-s", "1024", "--alloc-conf", "expandable_segments:True"]);
    assert!(detail(&exp).contains("live blocks"));
    // Where the reserve is flat, the settings would be ignored: refused, or said.
    for args in [
        &["estimate", "-m", "gpt2", "--gpus", "2", "--zero", "2", "--alloc-conf", "expandable_segments:True"][..],
        &["plan", "-m", "gpt2", "-g", "h100", "--gpus", "8", "--alloc-conf", "expandable_segments:True"][..],
    ] {
        assert!(fails(args, 2).contains("--alloc-conf"));
    }
    let acc = util::json(&["estimate", "-m", "gpt2", "--grad-accum", "4", "--alloc-conf", "expandable_segments:True"]);
    assert!(acc.to_string().contains("settings are not applied"), "{acc}");
    let q = util::json(&["estimate", "-m", "llama-3.2-1b", "--peft", "lora", "--load-in-4bit"]);
    assert!(detail(&q).contains("assumed 5%") && detail(&q).contains("QLoRA"), "{}", detail(&q));
    let l = util::json(&["estimate", "-m", "llama-3.2-1b", "--peft", "lora"]);
    assert!(detail(&l).contains("live blocks"), "{}", detail(&l));
    let e = fails(&["estimate", "-m", "gpt2", "--alloc-conf", "roundup_power2_divisions:4"], 2);
    assert!(e.contains("not modelled"), "{e}");
    let out = vram().env("PYTORCH_CUDA_ALLOC_CONF", "bogus:1").args(["estimate", "-m", "gpt2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allocator-reserve"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_bad_alloc_conf_in_the_environment_is_an_error_not_ignored() {
    let snap = fixture("cs336-wl_medium_128_inference.pickle");
    let out = vram().env("PYTORCH_CUDA_ALLOC_CONF", "bogus:1").args(["explain", &snap, "--model", "gpt2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PYTORCH_CUDA_ALLOC_CONF option `bogus:1`"));
}

/// `vram run --snapshot`: the child gets the hook on its PYTHONPATH and the output path; without
/// torch no snapshot is written, and the report says so instead of failing.
#[test]
fn run_snapshot_installs_the_hook_for_the_child_only() {
    if std::process::Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap.pickle");
    let probe = "import os, sitecustomize; print(os.environ['VRAM_SNAPSHOT_OUT']); print(sitecustomize.__file__)";
    let o = util::vram().args(["run", "--snapshot", snap.to_str().unwrap(), "--", "python3", "-c", probe]).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains(snap.to_str().unwrap()) && out.contains("vram-snapshot-hook"), "{out}");
    assert!(err.contains("no memory snapshot"), "{err}");
    // An existing snapshot file is not overwritten without --force.
    std::fs::write(&snap, b"keep").unwrap();
    let o = util::vram().args(["run", "--snapshot", snap.to_str().unwrap(), "--", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}
