//! The measuring technique itself: real CPU tensors and FakeTensorMode must track the same peak
//! (`validation/check_technique.py` writes `validation/fixtures/technique.jsonl`).

use serde_json::Value;

#[test]
fn real_and_fake_tensors_give_identical_peaks() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../validation/fixtures/technique.jsonl");
    let text = std::fs::read_to_string(path).expect("run validation/check_technique.py");
    let recs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).filter(|v: &Value| v.get("_meta").is_none()).collect();
    assert!(recs.len() >= 25, "only {} technique checks", recs.len());
    for r in &recs {
        assert!(r["real_peak"].as_u64().unwrap() > 0);
        assert_eq!(r["real_peak"], r["fake_peak"], "{r}");
    }
    // Training and generation, several architectures and precisions are covered.
    let distinct = |k: &str| recs.iter().map(|r| r[k].to_string()).collect::<std::collections::BTreeSet<_>>().len();
    assert!(distinct("model") >= 5 && distinct("precision") >= 3 && distinct("mode") == 2);
}
