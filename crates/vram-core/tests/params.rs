//! Parameter counts must equal what PyTorch reports for real transformers models built from
//! the same config.json (`validation/param_counts.py` on the meta device wrote the fixture).

use std::path::PathBuf;

use serde_json::Value;
use vram_core::{parse_config, presets};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("validation/fixtures/param_counts.jsonl")).expect("fixture");
    text.lines().map(|l| serde_json::from_str::<Value>(l).expect("json line")).filter(|v| v.get("name").is_some()).collect()
}

#[test]
fn every_preset_and_architecture_matches_pytorch_exactly() {
    let recs = fixture();
    assert!(recs.len() >= 37, "fixture has {} records", recs.len());
    let mut failures = Vec::new();
    for r in &recs {
        let name = r["name"].as_str().unwrap();
        let want = r["parameters"].as_u64().unwrap();
        let bytes = std::fs::read(root().join(r["source"].as_str().unwrap())).unwrap();
        let m = parse_config(&bytes, name, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = m.parameters();
        if got != want {
            failures.push(format!("{name} ({}): vram {got} vs PyTorch {want} (diff {})", m.model_type, got as i128 - want as i128));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn every_preset_is_in_the_fixture() {
    let recs = fixture();
    for p in presets::PRESETS {
        assert!(recs.iter().any(|r| r["name"] == p.name), "{} missing from the fixture: rerun validation/param_counts.py", p.name);
    }
    assert!(presets::PRESETS.len() >= 25);
}

#[test]
fn issue_reference_counts() {
    // Numbers quoted in the issue, as PyTorch reports them.
    for (name, n) in [
        ("llama-2-7b", 6_738_415_616u64),
        ("qwen2.5-1.5b", 1_543_714_304),
        ("mistral-7b", 7_241_732_096),
        ("mixtral-8x7b", 46_702_792_704),
        ("gpt2", 124_439_808),
    ] {
        assert_eq!(presets::load(name).unwrap().parameters(), n, "{name}");
    }
}
