//! # vram-wasm
//!
//! `vram-core` behind a tiny C ABI for the browser page (`web/`), loaded with plain
//! `WebAssembly.instantiate`: no wasm-bindgen, no generated glue.
//!
//! One JSON request in, one JSON response out:
//!
//! ```text
//! {"op": "estimate", "model": "qwen2.5-1.5b", "gpu": "h20", "seq_len": 4096, "batch_size": 3, "precision": "fp16-mixed"}
//! → the object `vram estimate … --json` prints, or {"error": "…"}
//! ```
//!
//! `op` is `estimate`, `fit`, `serve`, `presets` or `gpus`; the other keys are the CLI's flag
//! names with underscores (`seq_len`, `target_utilization`, `lora_r` …). The model is a preset
//! (`"model"`) or the text of a config.json (`"config"`, named by `"config_name"`).
//!
//! Memory protocol (all lengths in bytes):
//! 1. `p = vram_alloc(n)`; write the UTF-8 request at `p`;
//! 2. `r = vram_call(p, n)`; then `vram_free(p, n)`;
//! 3. at `r`: a little-endian u32 length `m`, then `m` bytes of UTF-8 JSON; `vram_free(r, 4 + m)`.
//!
//! Bad input is an `{"error": …}` response, never a trap: every path returns a `Result`, and
//! a panic (a bug) is caught on native targets and reported the same way. On
//! `wasm32-unknown-unknown` panics abort, so the panic hook records the message first, for
//! `vram_last_panic` to return after the trap.
#![deny(missing_docs)]

mod fields;
pub mod ops;
pub mod report;
pub mod resolve;

use std::sync::Mutex;

use serde_json::{json, Map, Value};

use fields::Fields;

/// Anything wrong with a request, said so a user can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError(pub String);

impl RequestError {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> RequestError {
        RequestError(msg.into())
    }
}

impl From<vram_core::Error> for RequestError {
    fn from(e: vram_core::Error) -> Self {
        RequestError(e.to_string())
    }
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RequestError {}

/// The operations, for error messages.
const OPS: &str = "estimate, fit, serve, presets or gpus";

/// Answer one request: the CLI's JSON for that command, or `{"error": "…"}`.
pub fn handle(request: &str) -> Value {
    match std::panic::catch_unwind(|| dispatch(request)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => json!({ "error": e.0 }),
        Err(p) => json!({ "error": format!("internal error (a bug in vram; please report it): {}", panic_text(&*p)) }),
    }
}

fn dispatch(request: &str) -> Result<Value, RequestError> {
    let mut map: Map<String, Value> = match serde_json::from_str(request) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(RequestError::new("the request must be a JSON object such as {\"op\": \"presets\"}")),
        Err(e) => return Err(RequestError::new(format!("the request is not valid JSON: {e}"))),
    };
    let op = match map.remove("op") {
        Some(Value::String(s)) => s,
        Some(_) | None => return Err(RequestError::new(format!("the request needs \"op\": {OPS}"))),
    };
    let f = Fields::new(map);
    match op.as_str() {
        "estimate" => ops::estimate_op(f),
        "fit" => ops::fit_op(f),
        "serve" => ops::serve_op(f),
        "presets" | "models" => ops::presets_op(f),
        "gpus" => ops::gpus_op(f),
        other => Err(RequestError::new(format!("unknown op `{other}`: use {OPS}"))),
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The last panic's message, kept for `vram_last_panic` (wasm aborts on panic, so it cannot be
/// returned as a response).
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut last) = LAST_PANIC.try_lock() {
                *last = info.to_string();
            }
            previous(info);
        }));
    });
}

/// A length-prefixed buffer the caller frees with `vram_free(ptr, 4 + len)`.
fn into_buffer(text: &str) -> *mut u8 {
    // A response over 4 GiB cannot be described by the u32 prefix; none comes close.
    let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
    let mut buf = Vec::with_capacity(4 + text.len());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&text.as_bytes()[..len as usize]);
    Box::into_raw(buf.into_boxed_slice()).cast::<u8>()
}

/// Allocate `len` bytes for a request; free them with [`vram_free`]`(ptr, len)`.
#[no_mangle]
pub extern "C" fn vram_alloc(len: usize) -> *mut u8 {
    Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>()
}

/// Free `len` bytes at `ptr` allocated by [`vram_alloc`] or returned by [`vram_call`].
///
/// # Safety
/// `ptr` and `len` must be exactly a pointer and length this module handed out, freed once.
#[no_mangle]
pub unsafe extern "C" fn vram_free(ptr: *mut u8, len: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: the caller passes back a boxed slice of exactly `len` bytes made by this module.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
}

/// Answer the UTF-8 JSON request of `len` bytes at `ptr`: a length-prefixed JSON response.
///
/// # Safety
/// `ptr` must point to `len` readable bytes (from [`vram_alloc`]).
#[no_mangle]
pub unsafe extern "C" fn vram_call(ptr: *const u8, len: usize) -> *mut u8 {
    install_panic_hook();
    let bytes: &[u8] = if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `len` readable bytes at `ptr`.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    };
    let response = match std::str::from_utf8(bytes) {
        Ok(text) => handle(text),
        Err(e) => json!({ "error": format!("the request is not UTF-8: {e}") }),
    };
    into_buffer(&response.to_string())
}

/// The message of the last panic as a length-prefixed buffer (empty when none): after a trap,
/// the page shows it instead of an opaque "unreachable".
#[no_mangle]
pub extern "C" fn vram_last_panic() -> *mut u8 {
    let text = LAST_PANIC.try_lock().map(|s| s.clone()).unwrap_or_default();
    into_buffer(&text)
}

#[cfg(test)]
mod tests;
