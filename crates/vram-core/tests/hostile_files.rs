//! Every hostile file from `support/hostile.rs` gets a clear error: never a panic, never a
//! Model or tensor list built from nonsense.

mod support {
    pub mod gguf_writer;
    pub mod hostile;
}

use support::gguf_writer;
use support::hostile::{config_cases, gguf_cases, safetensors_cases, Case};
use vram_core::gguf::{self, Parsed};
use vram_core::{parse_config, safetensors};

fn check(kind: &str, cases: Vec<Case>, run: impl Fn(&[u8]) -> Result<String, String>) {
    let mut wrong = Vec::new();
    for c in cases {
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&c.bytes)));
        match got {
            Err(_) => wrong.push(format!("{kind} `{}`: panicked", c.name)),
            Ok(Ok(what)) => wrong.push(format!("{kind} `{}`: accepted ({what})", c.name)),
            Ok(Err(e)) if !e.contains(c.expect) => wrong.push(format!("{kind} `{}`: error lacks `{}`: {e}", c.name, c.expect)),
            // VRAM_SHOW_ERRORS=1 prints every message for review.
            Ok(Err(e)) if std::env::var_os("VRAM_SHOW_ERRORS").is_some() => eprintln!("{kind} `{}`: {e}", c.name),
            Ok(Err(_)) => {}
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn hostile_safetensors_files_are_clear_errors() {
    check("safetensors", safetensors_cases(), |b| {
        safetensors::parse_file(b, "m.safetensors", Some(b.len() as u64)).map(|t| format!("{} tensors", t.len())).map_err(|e| e.to_string())
    });
}

#[test]
fn hostile_safetensors_headers_are_refused_by_the_streaming_summary_too() {
    check("safetensors summary", safetensors_cases(), |b| {
        let n = safetensors::header_len(b, "m.safetensors").map_err(|e| e.to_string())?;
        let json = b.get(8..8 + n as usize).ok_or("truncated file")?;
        let mut s = safetensors::CheckpointSummary::default();
        s.add_header(json, "m.safetensors", Some(b.len() as u64)).map_err(|e| e.to_string())?;
        Ok(format!("{} parameters", s.parameters))
    });
}

#[test]
fn hostile_gguf_files_are_clear_errors() {
    check("gguf", gguf_cases(), |b| match gguf::parse_with(b, "m.gguf", Some(b.len() as u64)) {
        Ok(Parsed::Complete(g)) => Ok(format!("{} tensors", g.tensors.len())),
        Ok(Parsed::NeedMore(n)) => Ok(format!("asked for {n} bytes of a {}-byte file", b.len())),
        Err(e) => Err(e.to_string()),
    });
}

#[test]
fn hostile_configs_are_clear_errors() {
    check("config", config_cases(), |b| {
        parse_config(b, "m", "config.json").map(|m| format!("{} parameters", m.parameters())).map_err(|e| e.to_string())
    });
}

#[test]
fn a_zero_kv_head_count_in_gguf_is_refused() {
    // Regression: head_count_kv 0 was accepted and planned a KV cache of 0 bytes.
    let mut w = gguf_writer::Writer::default();
    w.str("general.architecture", "llama")
        .u32("llama.block_count", 4)
        .u32("llama.embedding_length", 256)
        .u32("llama.attention.head_count", 8)
        .u32("llama.attention.head_count_kv", 0);
    let Parsed::Complete(g) = gguf::parse(&w.bytes(), "m.gguf").unwrap() else { panic!("incomplete") };
    assert!(g.hparams("m.gguf").unwrap_err().to_string().contains("head_count_kv` is 0"));
}

#[test]
fn valid_files_still_parse_with_their_length() {
    let b = support::hostile::safetensors(
        r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[8,12]},"a.qweight":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#,
        12,
    );
    let t = safetensors::parse_file(&b, "m", Some(b.len() as u64)).unwrap();
    assert_eq!(t.len(), 2);
    let mut s = safetensors::CheckpointSummary::default();
    s.add_header(&b[8..b.len() - 12], "m", Some(b.len() as u64)).unwrap();
    assert_eq!((s.parameters, s.tensors), (6, 2));
    let q = s.quantized_storage().unwrap();
    assert!(q.contains("FP8 weights: 4") && q.contains("qweight (GPTQ/AWQ): 2"), "{q}");
    let g = gguf_writer::tiny_llama().bytes();
    // The writer pads each tensor to 32 bytes but writes only 64 stand-in data bytes.
    assert!(matches!(gguf::parse_with(&g, "m", None).unwrap(), Parsed::Complete(_)));
    let Parsed::Complete(p) = gguf::parse(&g, "m").unwrap() else { panic!() };
    let last = p.tensors.last().unwrap();
    let full = p.header_bytes.next_multiple_of(32) + last.offset + last.bytes;
    p.check_file_len(full, "m").unwrap();
    assert!(p.check_file_len(full - 1, "m").is_err());
}
