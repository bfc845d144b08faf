//! `vram web`: serve the browser page (`web/`: index.html, app.js, style.css and the vram.wasm
//! that scripts/build-web.sh builds) on 127.0.0.1 only. A tiny static file server on
//! `std::net`: GET and HEAD, one thread per connection, `Connection: close`, a path that leaves
//! the directory (`..`, a backslash, a symlink pointing out) refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::emit;
use crate::errors::usage;

/// `vram web` flags.
#[derive(Debug, clap::Args)]
pub struct WebArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Directory holding index.html, app.js and vram.wasm [default: the repository's web/].
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The repository's web/ as seen from this crate at build time.
const DEFAULT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../web");

/// Longest request head read (request line and headers).
const MAX_HEAD: u64 = 16 * 1024;

/// Find the page, bind, print the URL, serve until killed.
pub fn run(a: &WebArgs) -> Result<()> {
    let dir = page_dir(a.dir.as_deref())?;
    let listener = TcpListener::bind(("127.0.0.1", a.port))
        .with_context(|| format!("cannot listen on 127.0.0.1:{} (in use? pass --port N, or --port 0 for any free port)", a.port))?;
    let addr = listener.local_addr()?;
    emit(&format!("serving {} at http://{addr}/ (Ctrl-C stops)\n", dir.display()))?;
    serve(listener, dir);
    Ok(())
}

/// The page directory: `--dir`, else the repository's web/; it must hold index.html and the
/// built vram.wasm.
fn page_dir(given: Option<&Path>) -> Result<PathBuf> {
    let dir = given.map_or_else(|| PathBuf::from(DEFAULT_DIR), Path::to_path_buf);
    let shown = given.map_or_else(|| format!("the repository's web/ ({})", dir.display()), |d| d.display().to_string());
    if !dir.join("index.html").is_file() {
        return Err(usage(format!("{shown} has no index.html: pass --dir with the page's directory (web/ in the vram repository)")));
    }
    if !dir.join("vram.wasm").is_file() {
        return Err(usage(format!(
            "{shown} has no vram.wasm: build it with scripts/build-web.sh (it needs `rustup target add wasm32-unknown-unknown`), or pass --dir"
        )));
    }
    dir.canonicalize().with_context(|| format!("cannot resolve {}", dir.display()))
}

/// Accept connections forever, one thread each (browsers open idle speculative connections,
/// which must not block the others).
fn serve(listener: TcpListener, dir: PathBuf) {
    for stream in listener.incoming().flatten() {
        let dir = dir.clone();
        std::thread::spawn(move || {
            // A client that goes away mid-answer is not an error worth reporting.
            let _ = handle(stream, &dir);
        });
    }
}

/// What to answer for one request.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    File(PathBuf),
    Status(u16, &'static str),
}

fn handle(mut stream: TcpStream, dir: &Path) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut line = String::new();
    let mut reader = BufReader::new((&stream).take(MAX_HEAD));
    reader.read_line(&mut line)?;
    // Drain the headers (nothing in them changes the answer).
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let head = method == "HEAD";
    let answer = if method != "GET" && !head { Answer::Status(405, "Method Not Allowed") } else { resolve(dir, target) };
    match answer {
        Answer::File(path) => match std::fs::read(&path) {
            Ok(body) => respond(&mut stream, 200, "OK", content_type(&path), &body, head),
            Err(_) => respond(&mut stream, 404, "Not Found", "text/plain; charset=utf-8", b"404 not found\n", head),
        },
        Answer::Status(code, reason) => {
            respond(&mut stream, code, reason, "text/plain; charset=utf-8", format!("{code} {}\n", reason.to_lowercase()).as_bytes(), head)
        }
    }
}

fn respond(stream: &mut TcpStream, code: u16, reason: &str, ctype: &str, body: &[u8], head: bool) -> std::io::Result<()> {
    let allow = if code == 405 { "Allow: GET, HEAD\r\n" } else { "" };
    let headers = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(headers.as_bytes())?;
    if !head {
        stream.write_all(body)?;
    }
    stream.flush()
}

/// Map a request target to a file under `dir`, refusing anything that would leave it.
fn resolve(dir: &Path, target: &str) -> Answer {
    let path = target.split(['?', '#']).next().unwrap_or("");
    if !path.starts_with('/') {
        return Answer::Status(400, "Bad Request");
    }
    let Some(decoded) = percent_decode(path) else { return Answer::Status(400, "Bad Request") };
    let mut file = dir.to_path_buf();
    for seg in decoded.split('/').filter(|s| !s.is_empty()) {
        if seg == ".." || seg == "." || seg.contains(['\\', '\0', ':']) {
            return Answer::Status(403, "Forbidden");
        }
        file.push(seg);
    }
    if file.is_dir() {
        file.push("index.html");
    }
    // A symlink inside the directory could still point out of it.
    match file.canonicalize() {
        Ok(real) if real.starts_with(dir) && real.is_file() => Answer::File(real),
        Ok(real) if !real.starts_with(dir) => Answer::Status(403, "Forbidden"),
        _ => Answer::Status(404, "Not Found"),
    }
}

/// `%xx` decoding; `None` for a malformed escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Content-Type by extension; `application/wasm` lets browsers compile the module streaming.
fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") | Some("mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("txt") | Some("md") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("index.html"), "<!doctype html>").unwrap();
        std::fs::write(d.path().join("vram.wasm"), b"\0asm\x01\0\0\0").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/app.js"), "1").unwrap();
        d
    }

    fn get(addr: std::net::SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn paths_stay_inside_the_directory() {
        let d = page();
        let dir = d.path().canonicalize().unwrap();
        assert_eq!(resolve(&dir, "/"), Answer::File(dir.join("index.html")));
        assert_eq!(resolve(&dir, "/?model=gpt2&gpu=h100#config=e30"), Answer::File(dir.join("index.html")));
        assert_eq!(resolve(&dir, "/sub/app.js"), Answer::File(dir.join("sub/app.js")));
        assert_eq!(resolve(&dir, "/sub/"), Answer::Status(404, "Not Found"));
        assert_eq!(resolve(&dir, "/missing.js"), Answer::Status(404, "Not Found"));
        for bad in ["/../etc/passwd", "/sub/../../x", "/%2e%2e/x", "/%2E%2E%2Fx", "/..%5cx", "/a\\b", "/./index.html", "/c:x"] {
            assert_eq!(resolve(&dir, bad), Answer::Status(403, "Forbidden"), "{bad}");
        }
        assert_eq!(resolve(&dir, "index.html"), Answer::Status(400, "Bad Request"));
        assert_eq!(resolve(&dir, "/%zz"), Answer::Status(400, "Bad Request"));
        assert_eq!(resolve(&dir, "/%ff"), Answer::Status(400, "Bad Request"));
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_out_is_refused() {
        let d = page();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("link")).unwrap();
        let dir = d.path().canonicalize().unwrap();
        assert_eq!(resolve(&dir, "/link"), Answer::Status(403, "Forbidden"));
    }

    #[test]
    fn content_types() {
        assert_eq!(content_type(Path::new("vram.wasm")), "application/wasm");
        assert_eq!(content_type(Path::new("index.html")), "text/html; charset=utf-8");
        assert_eq!(content_type(Path::new("app.js")), "text/javascript; charset=utf-8");
        assert_eq!(content_type(Path::new("style.css")), "text/css; charset=utf-8");
        assert_eq!(content_type(Path::new("blob")), "application/octet-stream");
    }

    #[test]
    fn the_page_dir_needs_the_built_wasm() {
        let d = page();
        assert!(page_dir(Some(d.path())).is_ok());
        std::fs::remove_file(d.path().join("vram.wasm")).unwrap();
        let e = page_dir(Some(d.path())).unwrap_err().to_string();
        assert!(e.contains("scripts/build-web.sh"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        assert!(page_dir(Some(empty.path())).unwrap_err().to_string().contains("index.html"));
    }

    #[test]
    fn serves_over_http() {
        let d = page();
        let dir = page_dir(Some(d.path())).unwrap();
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(listener, dir));
        // An idle connection (a browser's speculative one) does not block the others.
        let _idle = TcpStream::connect(addr).unwrap();
        let wasm = get(addr, "GET /vram.wasm HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(wasm.starts_with("HTTP/1.1 200 OK\r\n"), "{wasm}");
        assert!(wasm.contains("Content-Type: application/wasm\r\n"));
        assert!(wasm.contains("Content-Length: 8\r\n"));
        assert!(wasm.ends_with("\0asm\x01\0\0\0"));
        let head = get(addr, "HEAD / HTTP/1.1\r\n\r\n");
        assert!(head.contains("Content-Type: text/html") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(get(addr, "GET /../Cargo.toml HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 403"));
        assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        let post = get(addr, "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"), "{post}");
    }
}
