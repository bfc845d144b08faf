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
