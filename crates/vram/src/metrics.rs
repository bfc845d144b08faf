//! A tiny HTTP endpoint serving the latest readings in Prometheus text format. It binds where the
//! user says (and warns when that is reachable from other machines), answers GET /metrics, and
//! serves each connection on its own thread with read/write timeouts, so an idle or slow client
//! never holds up a scrape; connections beyond a bound are turned away at once.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::measure::{procs, GpuReading};

/// Shared latest exposition text.
pub type Latest = Arc<Mutex<String>>;

/// Connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send its request, or to take the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request head read.
const MAX_REQUEST: usize = 8192;

/// The exposition text of `gpus`: processes named by their executable; with `command_label`,
/// also by their full command line (opt-in: it can carry paths and secrets).
pub fn render(gpus: &[GpuReading], command_label: bool) -> String {
    let cmd = |p: u32| procs::cmdline(p);
    crate::render::prometheus::render(gpus, &|p| procs::name(p), command_label.then_some(&cmd as &dyn Fn(u32) -> Option<String>))
}

/// Start serving `latest` on `addr` (e.g. 127.0.0.1:9400). Returns the bound address.
pub fn serve(addr: &str, latest: Latest) -> anyhow::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        eprintln!(
            "vram: warning: the metrics on {local} can be read from other machines (GPU processes, their names and memory); \
             bind 127.0.0.1 unless that is intended"
        );
    }
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                active.fetch_sub(1, Ordering::SeqCst);
                let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                let _ = respond(&stream, "503 Service Unavailable", "too many connections\n");
                continue;
            }
            let (latest, active) = (latest.clone(), active.clone());
            std::thread::spawn(move || {
                handle(stream, &latest);
                active.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(local)
}

/// Answer one connection: read the request head (bounded in size and time), answer, close.
fn handle(mut stream: TcpStream, latest: &Latest) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while req.len() < MAX_REQUEST && !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let ok = req.starts_with(b"GET /metrics") || req.starts_with(b"GET / ");
    if ok {
        let body = latest.lock().map(|s| s.clone()).unwrap_or_default();
        let _ = respond(&stream, "200 OK", &body);
    } else {
        let _ = respond(&stream, "404 Not Found", "not found: GET /metrics\n");
    }
}

fn respond(mut stream: &TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
