//! Helpers for the CLI tests: run the real `vram` binary.

use assert_cmd::Command;

/// A `vram` command.
pub fn vram() -> Command {
    Command::cargo_bin("vram").expect("binary built")
}

/// A file of the repository (validation data, fixtures) by its path from the root.
#[allow(dead_code)]
pub fn repo_file(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
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

/// A finished run that must have succeeded: its stdout as JSON.
#[allow(dead_code)]
pub fn ok_json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A finished run that must have failed with exit 2 and no panic: its stderr.
#[allow(dead_code)]
pub fn err_text(out: &std::process::Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!e.contains("panicked"), "{e}");
    e
}

/// Write an HTTP/1.1 response (the loopback servers of the Hub tests).
#[allow(dead_code)]
pub fn respond(mut s: std::net::TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    use std::io::Write;
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
}

/// Read an HTTP request's path and its `Range` and `Authorization` headers (the loopback servers
/// of the Hub tests); `None` when the request line cannot be read.
#[allow(dead_code)]
pub fn read_request(stream: &std::net::TcpStream) -> Option<(String, Option<String>, Option<String>)> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (mut range, mut auth) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((&h, ""));
        match k.to_ascii_lowercase().as_str() {
            "range" => range = Some(v.trim().to_string()),
            "authorization" => auth = Some(v.trim().to_string()),
            _ => {}
        }
    }
    Some((path, range, auth))
}
