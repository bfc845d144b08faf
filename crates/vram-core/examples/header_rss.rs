//! Peak memory and time of reading large but allowed headers (issue: a 95 MB safetensors
//! header took 1.68 GiB RSS; a 247 MB GGUF header 1.67 GiB and 13.5 s).
//!
//! `cargo run --release -p vram-core --example header_rss -- write DIR` writes the two files;
//! `… -- safetensors FILE`, `… -- safetensors-value FILE` (the JSON-tree reading vram used
//! before, for comparison) and `… -- gguf FILE` read one and print the peak RSS (Linux
//! `VmHWM`) before and after, and the time. One file per process, so the peaks are separate.

use std::io::Write;
use std::time::Instant;

use vram_core::gguf::{self, Parsed};
use vram_core::safetensors::{self, CheckpointSummary};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches(" kB").parse::<f64>().ok());
    kb.map_or(f64::NAN, |k| k / 1024.0)
}

/// A ~95 MB safetensors header: 900k one-element F32 tensors with realistic names.
fn write_safetensors(path: &str) -> std::io::Result<()> {
    let mut h = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut off = 0u64;
    let mut i = 0u64;
    while h.len() < 95_000_000 {
        h.push_str(&format!(
            ",\"model.layers.{}.mlp.experts.{}.down_proj.weight\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{off},{}]}}",
            i / 256,
            i % 256,
            off + 4
        ));
        off += 4;
        i += 1;
    }
    h.push('}');
    let mut f = std::fs::File::create(path)?;
    f.write_all(&(h.len() as u64).to_le_bytes())?;
    f.write_all(h.as_bytes())?;
    f.write_all(&vec![0u8; off as usize])?;
    eprintln!("{path}: {} tensors, header {} bytes", i, h.len());
    Ok(())
}

/// A ~250 MB GGUF header: 10M one-byte metadata entries and 200k small tensors.
fn write_gguf(path: &str) -> std::io::Result<()> {
    let (n_kv, n_t) = (10_000_000u64, 200_000u64);
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(n_t.to_le_bytes());
    b.extend((n_kv + 1).to_le_bytes());
    let s = |b: &mut Vec<u8>, x: &str| {
        b.extend((x.len() as u64).to_le_bytes());
        b.extend(x.as_bytes());
    };
    s(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes());
    s(&mut b, "llama");
    for i in 0..n_kv {
        s(&mut b, &format!("x.{i:09}"));
        b.extend(0u32.to_le_bytes());
        b.push(1);
    }
    for i in 0..n_t {
        s(&mut b, &format!("blk.{i}.w"));
        b.extend(1u32.to_le_bytes());
        b.extend(8u64.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((i * 32).to_le_bytes());
    }
    eprintln!("{path}: header {} bytes", b.len());
    b.resize(b.len().next_multiple_of(32) + n_t as usize * 32, 0);
    std::fs::write(path, b)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, path) = (args.get(1).map_or("", String::as_str), args.get(2).cloned().unwrap_or_default());
    if mode == "write" {
        write_safetensors(&format!("{path}/big.safetensors")).unwrap();
        write_gguf(&format!("{path}/big.gguf")).unwrap();
        return;
    }
    let bytes = std::fs::read(&path).unwrap();
    let before = peak_rss_mib();
    let t = Instant::now();
    let what = match mode {
        "safetensors" => {
            let n = safetensors::header_len(&bytes, &path).unwrap() as usize;
            let mut s = CheckpointSummary::default();
            s.add_header(&bytes[8..8 + n], &path, Some(bytes.len() as u64)).unwrap();
            format!("{} tensors", s.tensors)
        }
        "safetensors-value" => {
            let n = safetensors::header_len(&bytes, &path).unwrap() as usize;
            let v: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
            format!("{} entries (JSON tree)", v.as_object().map_or(0, |o| o.len()))
        }
        "gguf" => match gguf::parse_with(&bytes, &path, Some(bytes.len() as u64)) {
            Ok(Parsed::Complete(g)) => format!("{} tensors, {} metadata kept", g.tensors.len(), g.metadata.len()),
            other => format!("{other:?}"),
        },
        _ => panic!("mode: write | safetensors | safetensors-value | gguf"),
    };
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{mode}: {what}; file {:.1} MiB; peak RSS {before:.1} MiB after reading the file, {:.1} MiB after parsing; {secs:.2} s",
        bytes.len() as f64 / 1048576.0,
        peak_rss_mib()
    );
}
