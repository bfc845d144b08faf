//! Where the validation fixtures are: `validation/fixtures/`, or `$VRAM_FIXTURES` (to hold the
//! estimate to another set of measurements, e.g. a held-back one).
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of fixture `name`, with the script that writes it named when it is missing.
pub fn fixture(name: &str, script: &str) -> String {
    let path = std::env::var("VRAM_FIXTURES").map_or_else(|_| root().join("validation/fixtures"), PathBuf::from).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run {script})", path.display()))
}

/// A CLIP/SigLIP dual-encoder config's vision tower as its own config (`vision_config` with the
/// tower's model_type), as validation/vision.py builds it; any other config unchanged.
pub fn vision_part(src: &[u8]) -> Vec<u8> {
    use serde_json::{Map, Value};
    let mut raw: Map<String, Value> = serde_json::from_slice(src).unwrap();
    let outer = raw["model_type"].as_str().unwrap().to_string();
    if outer != "clip" && outer != "siglip" {
        return src.to_vec();
    }
    let Some(Value::Object(mut v)) = raw.remove("vision_config") else { panic!("no vision_config") };
    v.insert("model_type".into(), Value::from(format!("{outer}_vision_model")));
    v.remove("architectures");
    serde_json::to_vec(&v).unwrap()
}
