//! Helpers for the CLI tests: run the real `vram` binary.

use assert_cmd::Command;

/// A `vram` command.
pub fn vram() -> Command {
    Command::cargo_bin("vram").expect("binary built")
}

/// Run `vram` with args, expect success, parse stdout as JSON.
#[allow(dead_code)]
pub fn json(args: &[&str]) -> serde_json::Value {
    let out = vram().args(args).arg("--json").output().expect("runs");
    assert!(out.status.success(), "vram {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// Run `vram` with args, expect failure with `code`; return stderr.
#[allow(dead_code)]
pub fn fails(args: &[&str], code: i32) -> String {
    let out = vram().args(args).output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(code),
        "vram {args:?}: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "vram {args:?} panicked: {err}");
    assert!(err.starts_with("error"), "error output should start with `error`: {err}");
    err
}
