//! GGUF headers written by a small generator (the layout of ggml/docs/gguf.md), parsed back:
//! metadata, tensor infos and exact bytes per quantisation type, hostile inputs, and llama.cpp's
//! layer offload plan.

use vram_core::gguf::{self, llama_cpp, max_ctx, LlamaCppConfig, MetaValue, Parsed};

#[path = "support/gguf_writer.rs"]
mod gguf_writer;
use gguf_writer::*;

fn parsed(bytes: &[u8]) -> gguf::Gguf {
    match gguf::parse(bytes, "tiny.gguf").unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(n) => panic!("needs {n} bytes"),
    }
}

#[test]
fn exact_bytes_per_quant_type() {
    let g = parsed(&tiny_llama().bytes());
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture(), Some("llama"));
    assert_eq!(g.file_type(), Some("Q4_K_M"));
    assert_eq!(g.tensors.len(), 1 + 4 * 9 + 2);
    // Block layouts (ggml-common.h): Q4_K 144 B / 256, Q5_K 176 / 256, Q6_K 210 / 256,
    // IQ4_XS 136 / 256, Q8_0 34 / 32, F16 2, F32 4.
    let by_name = |n: &str| g.tensors.iter().find(|t| t.name == n).unwrap().bytes;
    assert_eq!(by_name("blk.0.attn_q.weight"), 65_536 / 256 * 144);
    assert_eq!(by_name("blk.0.attn_v.weight"), 16_384 / 256 * 210);
    assert_eq!(by_name("blk.0.attn_output.weight"), 65_536 / 256 * 176);
    assert_eq!(by_name("blk.0.ffn_gate.weight"), 131_072 / 256 * 136);
    assert_eq!(by_name("blk.0.ffn_up.weight"), 131_072 / 32 * 34);
    assert_eq!(by_name("output.weight"), 262_144 * 2);
    assert_eq!(by_name("output_norm.weight"), 1024);
    let total: u64 = g.bytes_by_type().iter().map(|(_, b)| b).sum();
    assert_eq!(total, g.tensor_bytes());
    let hp = g.hparams("tiny.gguf").unwrap();
    assert_eq!((hp.layers, hp.embd, hp.heads, hp.kv_heads, hp.head_k, hp.vocab, hp.context_length), (4, 256, 8, 2, 32, 1024, 8192));
    assert!(matches!(g.metadata.get("llama.rope.freq_base"), Some(MetaValue::Float(f)) if *f == 500000.0));
    // The header ends before the data.
    assert_eq!(g.header_bytes as usize, tiny_llama().bytes().len() - 64);
}

#[test]
fn every_prefix_asks_for_more_never_errors_or_panics() {
    let bytes = tiny_llama().bytes();
    let header = bytes.len() - 64;
    for cut in (4..header).step_by(7) {
        match gguf::parse(&bytes[..cut], "tiny.gguf").unwrap() {
            Parsed::NeedMore(n) => assert!(n as usize > cut && n as usize <= header),
            Parsed::Complete(_) => panic!("complete at {cut} of {header}"),
        }
    }
}

#[test]
fn hostile_headers_are_clear_errors() {
    let err = |b: &[u8]| gguf::parse(b, "x.gguf").unwrap_err().to_string();
    assert!(err(b"GGML\x03\0\0\0").contains("not a GGUF file"));
    let mut v1 = b"GGUF".to_vec();
    v1.extend(1u32.to_le_bytes());
    assert!(err(&v1).contains("version 1"));
    // Absurd counts.
    let mut huge = b"GGUF".to_vec();
    huge.extend(3u32.to_le_bytes());
    huge.extend(u64::MAX.to_le_bytes());
    huge.extend(0u64.to_le_bytes());
    assert!(err(&huge).contains("not a real model"));
    // A string claiming an exabyte.
    let mut w = Writer::default();
    w.str("general.architecture", "llama");
    let mut b = w.bytes();
    b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(err(&b).contains("claims"));
    // Unknown tensor type, too many dims, partial blocks, overflowing dims.
    let mut w = Writer::default();
    w.tensor("t", &[256], 99);
    assert!(err(&w.bytes()).contains("unknown ggml type 99"));
    let mut w = Writer::default();
    w.tensor("t", &[2, 2, 2, 2, 2], F32);
    assert!(err(&w.bytes()).contains("5 dimensions"));
    let mut w = Writer::default();
    w.tensor("t", &[100], Q4_K);
    assert!(err(&w.bytes()).contains("whole Q4_K blocks"));
    let mut w = Writer::default();
    w.tensor("t", &[u64::MAX, 4], F32);
    assert!(err(&w.bytes()).contains("overflow"));
}

/// A recurrent architecture llama.cpp sizes differently (RWKV), or an unknown one with `ssm.*`
/// keys, is refused by name: read as attention everywhere its KV cache would be wrong.
#[test]
fn unmodelled_recurrent_architectures_are_refused() {
    let mut w = tiny_llama();
    w.u32("llama.ssm.conv_kernel", 4).u32("llama.ssm.state_size", 128);
    let e = parsed(&w.bytes()).hparams("h.gguf").unwrap_err().to_string();
    assert!(e.contains("recurrent state") && e.contains("`llama`"), "{e}");
    let mut w = Writer::default();
    w.str("general.architecture", "rwkv7").u32("rwkv7.block_count", 4).u32("rwkv7.embedding_length", 256);
    let e = parsed(&w.bytes()).hparams("r.gguf").unwrap_err().to_string();
    assert!(e.contains("`rwkv7`") && e.contains("RWKV"), "{e}");
}

#[test]
fn hybrid_gguf_keeps_kv_on_attention_layers_and_a_state_per_sequence() {
    let g = parsed(&tiny_qwen35(8).bytes());
    let hp = g.hparams("q.gguf").unwrap();
    let r = hp.recurrent.as_ref().expect("a recurrent layout");
    assert_eq!((r.attention_layers, r.state_layers), (2, 6));
    // conv: (4 − 1) × (2048 + 2 × 16 × 128); SSM: 128 × 2048.
    assert_eq!((r.n_embd_r, r.n_embd_s), (3 * 6144, 128 * 2048));
    let cfg = LlamaCppConfig { parallel: 2, ..Default::default() };
    let p = llama_cpp(&g, &hp, &cfg).unwrap();
    // KV on layers 3 and 7 only: 2 × 4096 × 2 KV heads × (256 + 256) × 2 bytes.
    assert_eq!(p.gpu_kv_bytes, 2 * 4096 * 2 * 512 * 2);
    // States: 6 layers × 2 sequences × (18432 + 262144) f32, whatever the context.
    let state = 6 * 2 * (3 * 6144 + 128 * 2048) * 4;
    assert_eq!(p.gpu_state_bytes, state);
    assert_eq!(llama_cpp(&g, &hp, &LlamaCppConfig { ctx: 65_536, ..cfg }).unwrap().gpu_state_bytes, state);
    assert_eq!(p.gpu_total_bytes, p.gpu_weights_bytes + p.gpu_kv_bytes + state + p.gpu_compute_bytes);
    // -ngl 5: the output and layers 4–7 on the GPU (3 state layers, 1 attention layer; llama.cpp
    // counts the output as the last of the 5); the rest in RAM.
    let half = llama_cpp(&g, &hp, &LlamaCppConfig { n_gpu_layers: 5, ..cfg }).unwrap();
    assert_eq!((half.gpu_state_bytes, half.cpu_state_bytes), (state / 2, state / 2));
    assert_eq!(half.gpu_kv_bytes * 2, p.gpu_kv_bytes);
    assert!(half.output_on_gpu);
    // A multi-token-prediction layer at the end keeps no state (llama.cpp#23792's Qwen3.6-27B log
    // skips it).
    let mut w = tiny_qwen35(8);
    w.u32("qwen35.nextn_predict_layers", 1);
    let hp = parsed(&w.bytes()).hparams("q.gguf").unwrap();
    assert_eq!(hp.recurrent.as_ref().map(|r| (r.state_layers, r.attention_layers)), Some((6, 2)));
    // A file's explicit per-layer flags win over the interval (llama-model.cpp reads
    // `attention.recurrent_layers` first): here layers 0–5 recurrent, 6 and 7 attention.
    let mut w = tiny_qwen35(8);
    w.bool_array("qwen35.attention.recurrent_layers", &[true, true, true, true, true, true, false, false]);
    let hp = parsed(&w.bytes()).hparams("q.gguf").unwrap();
    let r = hp.recurrent.as_ref().unwrap();
    assert_eq!(r.state, vec![true, true, true, true, true, true, false, false]);
    assert_eq!(r.attention_layers, 2);
    // Without its inner size the state cannot be sized: the key is named.
    let mut w = Writer::default();
    w.decoder("qwen35", [8, 4096, 1024, 3584, 8, 2]).u32("qwen35.ssm.conv_kernel", 4).u32("qwen35.ssm.state_size", 128);
    let e = parsed(&w.bytes()).hparams("q.gguf").unwrap_err().to_string();
    assert!(e.contains("qwen35.ssm.inner_size"), "{e}");
}

/// llama.cpp#23792 logged Qwen3.6-27B's state with 3 sequences: "size = 448.88 MiB (3 cells,
/// 65 layers, 3 seqs), R (f32): 16.88 MiB, S (f32): 432.00 MiB". Its header as that log prints it
/// (qwen35.*: 65 blocks with one multi-token-prediction layer, conv 4, state 128, 16 groups,
/// inner 6144, interval 4) gives all three figures.
#[test]
fn qwen36_27b_state_matches_its_log() {
    let mut w = Writer::default();
    w.decoder("qwen35", [65, 262_144, 5120, 17_408, 24, 4])
        .u32("qwen35.attention.key_length", 256)
        .u32("qwen35.attention.value_length", 256)
        .u32("qwen35.ssm.conv_kernel", 4)
        .u32("qwen35.ssm.state_size", 128)
        .u32("qwen35.ssm.group_count", 16)
        .u32("qwen35.ssm.time_step_rank", 48)
        .u32("qwen35.ssm.inner_size", 6144)
        .u32("qwen35.full_attention_interval", 4)
        .u32("qwen35.nextn_predict_layers", 1)
        .tokens(1024);
    let g = parsed(&w.bytes());
    let hp = g.hparams("q36.gguf").unwrap();
    let r = hp.recurrent.as_ref().unwrap();
    assert_eq!(r.state_layers, 48);
    let mib = |values: u64| format!("{:.2}", (r.state_layers * 3 * values * 4) as f64 / (1u64 << 20) as f64);
    assert_eq!((mib(r.n_embd_r), mib(r.n_embd_s)), ("16.88".to_string(), "432.00".to_string()));
    let p = llama_cpp(&g, &hp, &LlamaCppConfig { parallel: 3, ..Default::default() }).unwrap();
    assert_eq!(format!("{:.2}", p.gpu_state_bytes as f64 / (1u64 << 20) as f64), "448.88");
}

/// A hybrid's scalar keys, leaving its per-layer arrays to the test.
fn bare(arch: &str, layers: u32) -> Writer {
    let mut w = Writer::default();
    w.str("general.architecture", arch)
        .u32(&format!("{arch}.block_count"), layers)
        .u32(&format!("{arch}.context_length"), 131_072)
        .u32(&format!("{arch}.embedding_length"), 1024)
        .u32(&format!("{arch}.attention.head_count"), 8);
    w
}

/// Mamba: no attention at all (its head counts are 0), a state on every layer, no MLP; Jamba and
/// Nemotron-H tell their layers apart by per-layer KV-head (and MLP-width) arrays.
#[test]
fn state_space_and_per_layer_hybrids() {
    let cfg = LlamaCppConfig::default();
    let mut w = Writer::default();
    w.decoder("mamba", [4, 1_048_576, 768, 0, 0, 0])
        .u32("mamba.ssm.conv_kernel", 4)
        .u32("mamba.ssm.inner_size", 1536)
        .u32("mamba.ssm.state_size", 16)
        .u32("mamba.ssm.time_step_rank", 48)
        .tokens(512);
    w.tensor("token_embd.weight", &[768, 512], F32).tensor("blk.0.ssm_in.weight", &[768, 3072], F32);
    let g = parsed(&w.bytes());
    let hp = g.hparams("m.gguf").unwrap();
    assert_eq!(hp.ff, 0);
    let p = llama_cpp(&g, &hp, &cfg).unwrap();
    assert_eq!(p.gpu_kv_bytes, 0);
    assert_eq!(p.gpu_state_bytes, 4 * (3 * 1536 + 16 * 1536) * 4);
    let mut w = bare("jamba", 8);
    w.u32("jamba.feed_forward_length", 4096)
        .u32_array("jamba.attention.head_count_kv", &[0, 0, 0, 2, 0, 0, 0, 2])
        .u32("jamba.ssm.conv_kernel", 4)
        .u32("jamba.ssm.inner_size", 2048)
        .u32("jamba.ssm.state_size", 16)
        .tokens(512);
    let hp = parsed(&w.bytes()).hparams("j.gguf").unwrap();
    assert_eq!(hp.recurrent.as_ref().map(|r| (r.attention_layers, r.state_layers)), Some((2, 6)));
    assert_eq!(hp.kv_heads, 2);
    // Nemotron-H: attention (KV heads, no MLP), Mamba-2 (neither) and MLP layers (an MLP width).
    let mut w = bare("nemotron_h", 6);
    w.u32_array("nemotron_h.attention.head_count_kv", &[0, 0, 2, 0, 0, 0])
        .u32_array("nemotron_h.feed_forward_length", &[0, 4096, 0, 4096, 0, 4096])
        .u32("nemotron_h.ssm.conv_kernel", 4)
        .u32("nemotron_h.ssm.inner_size", 2048)
        .u32("nemotron_h.ssm.state_size", 128)
        .u32("nemotron_h.ssm.group_count", 8)
        .tokens(512);
    let hp = parsed(&w.bytes()).hparams("n.gguf").unwrap();
    let r = hp.recurrent.as_ref().unwrap();
    assert_eq!((r.attention_layers, r.state_layers), (1, 2));
    assert_eq!(r.state, vec![true, false, false, false, true, false]);
    // Without its per-layer MLP widths Nemotron-H's layers cannot be told apart: named, not guessed.
    let mut w = bare("nemotron_h", 6);
    w.u32_array("nemotron_h.attention.head_count_kv", &[0, 0, 2, 0, 0, 0]).u32("nemotron_h.ssm.conv_kernel", 4);
    let e = parsed(&w.bytes()).hparams("n.gguf").unwrap_err().to_string();
    assert!(e.contains("nemotron_h.feed_forward_length"), "{e}");
    // A per-layer array of the wrong length is an error, not a guess.
    let mut w = bare("jamba", 8);
    w.u32_array("jamba.attention.head_count_kv", &[0, 2]).u32("jamba.ssm.conv_kernel", 4);
    let e = parsed(&w.bytes()).hparams("j.gguf").unwrap_err().to_string();
    assert!(e.contains("2 values for 8 layers"), "{e}");
}

#[test]
fn missing_hparams_name_the_key() {
    let mut w = Writer::default();
    w.str("general.architecture", "qwen2").u32("qwen2.block_count", 2);
    let g = parsed(&w.bytes());
    assert!(g.hparams("m.gguf").unwrap_err().to_string().contains("qwen2.embedding_length"));
}

#[test]
fn layer_offload_moves_weights_and_kv_between_gpu_and_cpu() {
    let g = parsed(&tiny_llama().bytes());
    let hp = g.hparams("tiny.gguf").unwrap();
    let cfg = LlamaCppConfig::default();
    let all = llama_cpp(&g, &hp, &cfg).unwrap();
    let embd = g.tensors.iter().find(|t| t.name == "token_embd.weight").unwrap().bytes;
    // Everything but the token embeddings on the GPU.
    assert!(all.output_on_gpu);
    assert_eq!(all.gpu_weights_bytes + embd, g.tensor_bytes());
    assert_eq!(all.cpu_weights_bytes, embd);
    // KV: 4 layers × 4096 × 2 KV heads × (32 + 32) × 2 bytes.
    assert_eq!(all.gpu_kv_bytes, 4 * 4096 * 2 * 64 * 2);
    let none = llama_cpp(&g, &hp, &LlamaCppConfig { n_gpu_layers: 0, ..cfg }).unwrap();
    assert_eq!(none.gpu_weights_bytes + none.gpu_kv_bytes + none.gpu_compute_bytes, 0);
    assert_eq!(none.cpu_weights_bytes, g.tensor_bytes());
    // -ngl 3: the output and the last 2 layers (src/llama-model.cpp load_tensors:
    // i_gpu_start = n_layer + 1 − ngl); -ngl 1 the output alone.
    let half = llama_cpp(&g, &hp, &LlamaCppConfig { n_gpu_layers: 3, ..cfg }).unwrap();
    assert_eq!(half.gpu_kv_bytes * 2, all.gpu_kv_bytes);
    assert!(half.output_on_gpu);
    let head = llama_cpp(&g, &hp, &LlamaCppConfig { n_gpu_layers: 1, ..cfg }).unwrap();
    assert!(head.output_on_gpu && head.gpu_kv_bytes == 0 && head.gpu_weights_bytes > 0);
    // Context is padded to 256 and the longest context that fits grows as layers leave the GPU.
    assert_eq!(llama_cpp(&g, &hp, &LlamaCppConfig { ctx: 1000, ..cfg }).unwrap().ctx, 1024);
    // Parallel sequences share the context; the KV cache does not grow. Each gets a quarter of
    // it in its own stream (`-np 4`), or may fill all of it with one unified cache (llama-server's
    // default, or -kvu).
    let four = llama_cpp(&g, &hp, &LlamaCppConfig { parallel: 4, unified: false, ..cfg }).unwrap();
    assert_eq!((four.ctx_per_sequence, four.gpu_kv_bytes), (1024, all.gpu_kv_bytes));
    let shared = llama_cpp(&g, &hp, &LlamaCppConfig { parallel: 4, unified: true, ..cfg }).unwrap();
    assert_eq!((shared.ctx_per_sequence, shared.gpu_kv_bytes), (4096, all.gpu_kv_bytes));
    let budget = all.gpu_total_bytes;
    let c_all = max_ctx(&g, &hp, &cfg, budget, 1 << 20).unwrap().unwrap();
    let c_half = max_ctx(&g, &hp, &LlamaCppConfig { n_gpu_layers: 3, ..cfg }, budget, 1 << 20).unwrap().unwrap();
    assert_eq!(c_all, 4096);
    assert!(c_half > c_all);
    assert_eq!(max_ctx(&g, &hp, &cfg, 1000, 1 << 20).unwrap(), None);
}

#[test]
fn absurd_hparams_are_refused_not_overflowed() {
    let mut w = Writer::default();
    w.str("general.architecture", "llama")
        .u32("llama.block_count", 4)
        .u32("llama.embedding_length", 256)
        .u32("llama.attention.head_count", 8)
        .u32("llama.attention.head_count_kv", u32::MAX);
    let g = parsed(&w.bytes());
    assert!(g.hparams("x.gguf").unwrap_err().to_string().contains("implausible"));
}

/// Llama 4 under llama.cpp: three chunked layers to one full (set_swa_pattern(4)), chunks of a
/// literal 8192 tokens cached as a window is; a file whose sliding window is 0 has none.
#[test]
fn llama4_chunked_layers_are_cached_as_windows() {
    let build = |window: Option<u32>| {
        let mut w = Writer::default();
        w.decoder("llama4", [8, 131_072, 256, 512, 8, 2]).tokens(1024);
        if let Some(n) = window {
            w.u32("llama4.attention.sliding_window", n);
        }
        w.tensor("token_embd.weight", &[256, 1024], F16);
        parsed(&w.bytes()).hparams("l4.gguf").unwrap()
    };
    let hp = build(None);
    assert_eq!(hp.sliding_window, Some(8192));
    let swa: Vec<bool> = (0..8).map(|il| hp.is_swa_layer(il)).collect();
    assert_eq!(swa, [true, true, true, false, true, true, true, false]);
    let c = LlamaCppConfig { ctx: 65_536, ..Default::default() };
    let per_cell = 2 * 32 * 2 * 2; // K and V, 2 heads of 32, f16
    assert_eq!(gguf::kv_layer_bytes(&hp, &c, 65_536, 0), (8192 + 512) * per_cell);
    assert_eq!(gguf::kv_layer_bytes(&hp, &c, 65_536, 3), 65_536 * per_cell);
    assert_eq!(build(Some(0)).sliding_window, None);
}

/// `--override-kv`: parsed as llama.cpp's `string_parse_kv_override` parses it, and read by the
/// hyper-parameters after it.
#[test]
fn kv_overrides_replace_what_the_header_says() {
    use vram_core::gguf::parse_kv_overrides;
    let o = parse_kv_overrides("llama.context_length=int:4096,general.name=str:x,a=float:0.5,b=bool:true").unwrap();
    assert_eq!(o[0], ("llama.context_length".to_string(), MetaValue::Int(4096)));
    assert_eq!(o[2].1, MetaValue::Float(0.5));
    assert_eq!(o[3].1, MetaValue::Bool(true));
    for bad in ["x", "x=int", "x=int:1.5", "x=float:nan", "x=bool:1", "x=i32:1", &format!("{}=int:1", "k".repeat(128))] {
        assert!(parse_kv_overrides(bad).is_err(), "{bad}");
    }
    let mut g = match vram_core::gguf::parse(&gguf_writer::tiny_llama().bytes(), "tiny.gguf").unwrap() {
        vram_core::gguf::Parsed::Complete(g) => *g,
        vram_core::gguf::Parsed::NeedMore(n) => panic!("needs {n}"),
    };
    assert_eq!(g.hparams("tiny.gguf").unwrap().context_length, 8192);
    assert!(g.override_kv(&parse_kv_overrides("llama.context_length=int:4096").unwrap()).unwrap().is_empty());
    assert_eq!(g.hparams("tiny.gguf").unwrap().context_length, 4096);
    // Another type than the file's is refused, as llama.cpp refuses it.
    let e = g.override_kv(&parse_kv_overrides("llama.context_length=float:4096").unwrap()).unwrap_err().to_string();
    assert!(e.contains("wrong type"), "{e}");
    // A key the header does not hold is added, and said so.
    assert_eq!(g.override_kv(&parse_kv_overrides("llama.context_lenght=int:1").unwrap()).unwrap(), ["llama.context_lenght"]);
}
