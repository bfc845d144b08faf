//! `vram estimate --measurement FILE`: a real `vram.measure` measurement (any nn.Module under
//! FakeTensorMode; fixtures written by tests/fixtures/measurements/make.py) read back with the
//! device-level terms added.

mod util;

use serde_json::Value;
use util::vram;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/measurements/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_measurement_gets_the_device_terms_of_an_estimate() {
    let out = vram().args(["estimate", "--measurement", &fixture("unet3d_train.json"), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let file: Value = serde_json::from_str(&std::fs::read_to_string(fixture("unet3d_train.json")).unwrap()).unwrap();
    let peak = file["peak_bytes"].as_u64().unwrap();
    assert_eq!(v["peak_allocated_bytes"], peak);
    let comp = |name: &str| v["components"].as_array().unwrap().iter().find(|c| c["name"] == name).map(|c| c["bytes"].as_u64().unwrap());
    // The measured categories as they were, then 5% reserve, and (a training step: it has a
    // backward) the measured 758 MiB context and two 32 MiB cuBLAS workspaces.
    assert_eq!(comp("activations"), file["categories_at_peak"]["activations"].as_u64());
    let reserve = (peak as f64 * 0.05).ceil() as u64;
    assert_eq!(comp("caching allocator reserve"), Some(reserve));
    assert_eq!(v["total_bytes"], peak + reserve + (758 << 20) + (64 << 20));
    // Phases come back in the order they ran.
    let phases: Vec<&str> = v["measurement"]["phase_peaks"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["setup", "forward0", "backward0", "optimizer0", "forward1", "backward1", "optimizer1"]);
}

#[test]
fn the_gpu_verdict_and_fail_if_oom_apply() {
    let out = vram().args(["estimate", "--measurement", &fixture("cnn_infer.json"), "-g", "rtx-4090"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("on rtx-4090") && text.contains("GiB"), "{text}");
    let out = vram().args(["estimate", "--measurement", &fixture("cnn_infer.json"), "-g", "512MiB", "--fail-if-oom"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn flags_that_would_change_a_measurement_are_refused() {
    // Regression: --seq-len, --mode, --attention and --alloc-conf were silently ignored.
    for extra in [
        &["-b", "4"][..],
        &["--precision", "fp32"],
        &["-m", "gpt2"],
        &["-s", "4096"],
        &["--mode", "infer"],
        &["--attention", "eager"],
        &["--alloc-conf", "expandable_segments:True"],
        &["--padded"],
    ] {
        let out = vram().args(["estimate", "--measurement", &fixture("cnn_infer.json")]).args(extra).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
    }
}

#[test]
fn a_bad_measurement_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let text = std::fs::read_to_string(fixture("cnn_infer.json")).unwrap();
    let cases = [
        ("edited.json", text.replacen("\"peak_bytes\": ", "\"peak_bytes\": 1", 1), "add up"),
        ("empty.json", "{}".to_string(), "peak_bytes"),
        ("list.json", "[1, 2]".to_string(), "object"),
        ("pickle.json", String::from_utf8_lossy(b"\x80\x04\x95").into_owned(), "json"),
    ];
    for (name, body, want) in cases {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let out = vram().args(["estimate", "--measurement", p.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{name}: {err}");
    }
}
