//! A tiny HTTP endpoint serving the latest readings in Prometheus text format. It binds where the
//! user says (loopback by default in the docs), answers GET /metrics, and runs on its own thread.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// Shared latest exposition text.
pub type Latest = Arc<Mutex<String>>;

/// Start serving `latest` on `addr` (e.g. 127.0.0.1:9400). Returns the bound address.
pub fn serve(addr: &str, latest: Latest) -> anyhow::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut buf = [0u8; 1024];
            let n = stream.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let ok = req.starts_with("GET /metrics") || req.starts_with("GET / ");
            let body = if ok { latest.lock().map(|s| s.clone()).unwrap_or_default() } else { "not found: GET /metrics\n".into() };
            let status = if ok { "200 OK" } else { "404 Not Found" };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(local)
}
