//! llama.cpp LoRA adapters (`--lora`): each adapted matrix's pair sits beside its base tensor,
//! held to the LoRA buffer sizes of a public log (validation/logs/llama.cpp/SOURCES.md), and the
//! adapter file checked as llama.cpp checks it.

#[path = "support/gguf_writer.rs"]
mod gguf_writer;

use gguf_writer::{Writer, F16, F32};
use vram_core::gguf::{self, Gguf, LlamaCppConfig, Overrides, Parsed};
use vram_core::llama_lora::{self, LoraAdapter};
use vram_core::llama_split::{plan, MultiGpu, SplitMode};
use vram_core::startup_log::{self, StartupLog};

const MIB: f64 = (1u64 << 20) as f64;

fn parse(w: &Writer, name: &str) -> Gguf {
    match gguf::parse(&w.bytes(), name).unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(n) => panic!("needs {n}"),
    }
}

fn llama3_8b() -> Gguf {
    parse(&gguf_writer::llama3_8b_f16(), "llama3-8b-f16.gguf")
}

/// The log's adapter: rank 32, f16, the seven projections of every layer and the output layer.
fn log_adapter(model: &Gguf) -> LoraAdapter {
    let a = parse(&gguf_writer::llama3_8b_lora_r32(), "ggml-lora-f16.gguf");
    assert_eq!(a.tensors.len(), 450, "the log: loaded 450 tensors from lora file");
    llama_lora::adapter(&a, "ggml-lora-f16.gguf", model).unwrap()
}

fn log_mib(device: &str) -> f64 {
    let path = format!("{}/../../validation/logs/llama.cpp/ngxson-llama.cpp-9-llama3-8b-lora-2gpu.log", env!("CARGO_MANIFEST_DIR"));
    let l = match startup_log::parse(&std::fs::read_to_string(path).unwrap()).unwrap() {
        StartupLog::LlamaCpp(l) => l,
        other => panic!("not llama.cpp: {other:?}"),
    };
    l.devices.iter().find(|d| d.name == device).and_then(|d| d.lora.as_ref()).map(|s| s.gib * 1024.0).unwrap()
}

/// ngxson/llama.cpp#9: LoRA buffers of 110.00 and 40.00 MiB on two GPUs and 18.08 MiB in RAM for
/// the two layers and the output layer left there. Its 2024 build's `-ngl 30` offloaded the last
/// 30 layers and the output only past `-ngl 32`; today's llama.cpp counts the output as a layer
/// (llama-model.cpp `i_gpu_start = n_layer + 1 − ngl`), so the same placement is `-ngl 31` with
/// the output sent to RAM by `-ot`; the log's 22/8 layers are a 22:9 split of those 31 slots.
#[test]
fn lora_buffers_follow_their_layers_over_two_gpus() {
    let g = llama3_8b();
    let hp = g.hparams("llama3-8b-f16.gguf").unwrap();
    let a = log_adapter(&g);
    assert_eq!((a.pairs.len(), a.max_rank()), (225, 32));
    let o = Overrides { tensor: gguf::parse_override_tensor("^output\\.weight$=CPU").unwrap(), lora: vec![a], ..Default::default() };
    let c = LlamaCppConfig { n_gpu_layers: 31, ..Default::default() };
    let m = MultiGpu { gpus: 2, tensor_split: vec![22.0, 9.0], mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() };
    let p = plan(&g, &hp, &c, &o, &m).unwrap();
    assert_eq!((p.devices[0].layers, p.devices[1].layers), (22, 8));
    for d in &p.devices {
        let logged = log_mib(&d.name);
        assert_eq!(d.lora_bytes as f64 / MIB, logged, "{} LoRA buffer", d.name);
        assert!(d.total_bytes >= d.lora_bytes + d.lora_compute_bytes + d.weights_bytes);
    }
    // RAM: the log prints 2 decimals (the CPU-side buffer was CUDA_Host in 2024 builds).
    let host = p.host.lora_bytes as f64 / MIB;
    assert!((host - log_mib("CUDA_Host")).abs() <= 0.005, "host LoRA {host:.3} MiB");
    // The one-GPU plan at the same -ngl holds both GPUs' pairs.
    let one = gguf::llama_cpp_with(&g, &hp, &c, &o).unwrap();
    assert_eq!(one.gpu_lora_bytes, p.devices[0].lora_bytes + p.devices[1].lora_bytes);
    assert_eq!(one.host.lora_bytes, p.host.lora_bytes);
    let bare = gguf::llama_cpp_with(&g, &hp, &c, &Overrides { lora: Vec::new(), ..o.clone() }).unwrap();
    assert_eq!(one.gpu_total_bytes, bare.gpu_total_bytes + one.gpu_lora_bytes + one.gpu_lora_compute_bytes);
    assert_eq!(one.host.total_bytes, bare.host.total_bytes + one.host.lora_bytes);
    // No output layer on the GPU: the bound is the widest projection's, 2 × 14336 + 32 rows of
    // 512 tokens in f32.
    assert_eq!(one.gpu_lora_compute_bytes, (2 * 14336 + 32) * 512 * 4);
}

/// An `-ot` override moves a tensor's pair with it.
#[test]
fn an_override_to_the_cpu_takes_the_pair_along() {
    let g = llama3_8b();
    let hp = g.hparams("llama3-8b-f16.gguf").unwrap();
    let a = log_adapter(&g);
    let c = LlamaCppConfig::default();
    let all = gguf::llama_cpp_with(&g, &hp, &c, &Overrides { lora: vec![a.clone()], ..Default::default() }).unwrap();
    assert_eq!(all.host.lora_bytes, 0);
    assert_eq!(all.gpu_lora_bytes, 32 * (5 << 20) + 8_470_528);
    let ffn = Overrides { tensor: gguf::parse_override_tensor("ffn_down=CPU").unwrap(), lora: vec![a], ..Default::default() };
    let p = gguf::llama_cpp_with(&g, &hp, &c, &ffn).unwrap();
    // ffn_down's pair: 32 × (14336 + 4096) × 2 bytes a layer.
    let down = 32 * 32 * (14336 + 4096) * 2;
    assert_eq!(p.host.lora_bytes, down);
    assert_eq!(p.gpu_lora_bytes, all.gpu_lora_bytes - down);
    // The output layer's products are 2 × 128256 + 32 rows of one logits row (one output per
    // slot, llama-server's n_outputs_max): less than a projection's over 512 tokens.
    assert_eq!(all.gpu_lora_compute_bytes, (2 * 14336 + 32) * 512 * 4);
    let slots = LlamaCppConfig { parallel: 256, ubatch: 256, ..c };
    let wide = gguf::llama_cpp_with(&g, &hp, &slots, &Overrides { lora: vec![log_adapter(&g)], ..Default::default() }).unwrap();
    assert_eq!(wide.gpu_lora_compute_bytes, (2 * 128_256 + 32) * 256 * 4, "256 logits rows: the output's products are the widest");
}

/// `place` counts RAM for `None` only: a device beyond the plan's is an error.
#[test]
fn a_device_outside_the_plan_is_an_error_not_ram() {
    let g = llama3_8b();
    let hp = g.hparams("llama3-8b-f16.gguf").unwrap();
    let a = log_adapter(&g);
    let on = |d: Option<usize>| llama_lora::place(std::slice::from_ref(&a), 2, &hp, 512, 1, |_| Ok(d));
    // Every half of this adapter is a multiple of 128 bytes: no padding either way.
    assert_eq!(on(None).unwrap().cpu_bytes, a.bytes());
    assert_eq!(on(Some(1)).unwrap().gpu_bytes, [0, a.bytes()]);
    assert!(on(Some(2)).unwrap_err().to_string().contains("2 GPU(s)"));
}

#[test]
fn row_split_with_an_adapter_is_refused() {
    let g = llama3_8b();
    let hp = g.hparams("llama3-8b-f16.gguf").unwrap();
    let o = Overrides { lora: vec![log_adapter(&g)], ..Default::default() };
    let m = MultiGpu { gpus: 2, tensor_split: Vec::new(), mode: SplitMode::Row, main_gpu: 0, free_memory: Vec::new() };
    let e = plan(&g, &hp, &LlamaCppConfig::default(), &o, &m).unwrap_err().to_string();
    assert!(e.contains("-sm layer"), "{e}");
}

/// What llama.cpp refuses to load, refused with its reason.
#[test]
fn adapters_llama_cpp_would_refuse_are_refused() {
    let g = llama3_8b();
    let check = |w: &Writer, want: &str| {
        let a = parse(w, "a.gguf");
        let e = llama_lora::adapter(&a, "a.gguf", &g).unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    };
    let pair = |w: &mut Writer, base: &str, i: u64, r: u64, o: u64| {
        w.tensor(&format!("{base}.lora_a"), &[i, r], F16);
        w.tensor(&format!("{base}.lora_b"), &[r, o], F16);
    };
    // (architecture, general.type, the base of a [4096 → 4096] pair, what is refused)
    for (arch, kind, base, want) in [
        ("llama", "model", "blk.0.attn_q.weight", "not a LoRA adapter"),
        ("qwen2", "adapter", "blk.0.attn_q.weight", "mismatch"),
        ("llama", "adapter", "blk.40.attn_q.weight", "does not exist in base model"),
        ("llama", "adapter", "blk.0.attn_k.weight", "incorrect shape"),
    ] {
        let mut w = gguf_writer::lora_header(arch, kind);
        pair(&mut w, base, 4096, 8, 4096);
        check(&w, want);
    }
    // One tensor alone: half a pair, or a name with no .lora_a/.lora_b suffix.
    for (name, want) in [("blk.0.attn_q.weight.lora_a", "missing one component"), ("blk.0.attn_q.weight", "unexpected suffix")] {
        let mut w = gguf_writer::lora_header("llama", "adapter");
        w.tensor(name, &[4096, 8], F16);
        check(&w, want);
    }
    check(&gguf_writer::lora_header("llama", "adapter"), "empty adapter");
    // Norm vectors are skipped, as llama.cpp skips them.
    let mut w = gguf_writer::lora_header("llama", "adapter");
    pair(&mut w, "blk.0.attn_q.weight", 4096, 8, 4096);
    w.tensor("blk.0.attn_norm.weight", &[4096], F32);
    let a = llama_lora::adapter(&parse(&w, "a.gguf"), "a.gguf", &g).unwrap();
    assert_eq!((a.pairs.len(), a.skipped_norms, a.bytes()), (1, 1, 2 * 8 * 8192));
}
