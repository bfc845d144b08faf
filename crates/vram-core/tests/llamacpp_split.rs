//! llama.cpp over several GPUs, held to public start-up logs (validation/logs/llama.cpp/,
//! sources in SOURCES.md there): the layer→device rule, KV per GPU, and the compute buffer
//! under pipeline parallelism.

#[path = "support/gguf_writer.rs"]
mod gguf_writer;

use gguf_writer::{Writer, F32, MXFP4, Q6_K, Q8_0};
use vram_core::gguf::{self, CpuMoe, Gguf, LlamaCppConfig, Overrides, Parsed};
use vram_core::llama_split::{layer_devices, plan, MultiGpu, SplitMode};
use vram_core::startup_log::{self, StartupLog};

const MIB: f64 = (1u64 << 20) as f64;

fn log(name: &str) -> startup_log::LlamaCppLog {
    let path = format!("{}/../../validation/logs/llama.cpp/{name}", env!("CARGO_MANIFEST_DIR"));
    match startup_log::parse(&std::fs::read_to_string(path).unwrap()).unwrap() {
        StartupLog::LlamaCpp(l) => l,
        other => panic!("not llama.cpp: {other:?}"),
    }
}

fn log_mib(l: &startup_log::LlamaCppLog, device: &str, pick: fn(&startup_log::LlamaCppDevice) -> Option<f64>) -> f64 {
    pick(l.devices.iter().find(|d| d.name == device).unwrap()).unwrap() * 1024.0
}

/// c4ai-command-r-v01's shapes (the hyper-parameters its log and model card give): the real
/// token embeddings (Q6_K, 256000 × 8192, as its "CPU buffer size" line shows), no
/// `output.weight` (the LM head is tied), and one small tensor per layer: the layer weights of
/// its Q4_K_S mix are not known here, so only KV, compute and the embeddings are checked.
fn command_r() -> Gguf {
    let mut w = Writer::default();
    w.decoder("command-r", [40, 131072, 8192, 22528, 64, 64]).tokens(256_000);
    w.tensor("token_embd.weight", &[8192, 256_000], Q6_K);
    for i in 0..40 {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[8192], F32);
    }
    w.tensor("output_norm.weight", &[8192], F32);
    match gguf::parse(&w.bytes(), "command-r.gguf").unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(n) => panic!("needs {n}"),
    }
}

/// ggml-org/llama.cpp#6122: 2 GPUs, layer split, no flash attention, pipeline parallelism on.
#[test]
fn command_r_on_two_gpus_kv_per_gpu_and_the_compute_buffer() {
    let l = log("ggml-org-llama.cpp-6122-command-r-2gpu.log");
    let g = command_r();
    let hp = g.hparams("command-r.gguf").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 41, flash_attn: false, ..Default::default() };
    // The log's split is by free memory (not printed); 28:72 puts its 12 layers on CUDA0.
    let m = MultiGpu { gpus: 2, tensor_split: vec![28.0, 72.0], mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() };
    let p = plan(&g, &hp, &c, &Overrides::default(), &m).unwrap();
    assert!(p.pipeline_parallel, "the log says: pipeline parallelism enabled (n_copies=4)");
    assert_eq!((p.devices[0].layers, p.devices[1].layers), (12, 28));
    assert!(p.devices[1].output && !p.devices[0].output);
    for (i, d) in p.devices.iter().enumerate() {
        let logged = log_mib(&l, &format!("CUDA{i}"), |d| d.kv.as_ref().map(|s| s.gib));
        assert_eq!(d.kv_bytes as f64 / MIB, logged, "{} KV", d.name);
    }
    // Token embeddings in RAM ("CPU buffer size"), and their tied copy with the output layer.
    let cpu = log_mib(&l, "CPU", |d| d.model.as_ref().map(|s| s.gib));
    assert!((p.cpu_weights_bytes as f64 / MIB - cpu).abs() <= 0.006, "the log prints 2 decimals");
    // One tensor in RAM: the mapped span is its bytes.
    assert_eq!(p.host.weights_bytes, p.cpu_weights_bytes);
    assert!(p.devices[1].weights_bytes >= p.cpu_weights_bytes && p.devices[0].weights_bytes < p.cpu_weights_bytes);
    // Compute buffer: 656.00 MiB against the logged 672.01 (−2.4%); held within 5%.
    let logged = log_mib(&l, "CUDA0", |d| d.compute.as_ref().map(|s| s.gib));
    let est = p.devices[0].compute_bytes as f64 / MIB;
    let err = (est - logged) / logged;
    assert!(err.abs() < 0.05, "CUDA0 compute: vram {est:.2} MiB, log {logged:.2} MiB ({:+.1}%)", err * 100.0);
}

/// ikawrakow/ik_llama.cpp#239: DeepSeek-R1's 61 layers and output over 16 equal shares; the KV
/// per GPU (9 MiB a layer under its MLA cache) gives the layers each GPU got.
#[test]
fn deepseek_r1_layers_over_sixteen_gpus() {
    let l = log("ik_llama.cpp-239-deepseek-r1-16gpu-kv.log");
    let m = MultiGpu { gpus: 16, tensor_split: vec![24.0; 16], mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() };
    let devs = layer_devices(61, 99, &m.split_points());
    for d in &l.devices {
        let i: usize = d.name.trim_start_matches("CUDA").parse().unwrap();
        let layers = devs[..61].iter().filter(|x| **x == Some(i)).count() as f64;
        assert_eq!(layers * 9.0, d.kv.as_ref().unwrap().gib * 1024.0, "{}", d.name);
    }
    assert_eq!(l.devices.len(), 13, "the thread shows CUDA0–CUDA12");
}

/// One GPU with no split flag gives the one-GPU plan, device for device.
#[test]
fn one_gpu_equals_the_single_plan() {
    let g = command_r();
    let hp = g.hparams("command-r.gguf").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 30, ctx: 8192, cuda_overhead: 1 << 29, ..Default::default() };
    let o = Overrides { tensor: Vec::new(), cpu_moe: CpuMoe::None, ..Default::default() };
    let single = gguf::llama_cpp_with(&g, &hp, &c, &o).unwrap();
    let m = MultiGpu { gpus: 1, tensor_split: Vec::new(), mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() };
    let p = plan(&g, &hp, &c, &o, &m).unwrap();
    let d = &p.devices[0];
    assert_eq!(
        (d.weights_bytes, d.kv_bytes, d.compute_bytes, d.total_bytes),
        (single.gpu_weights_bytes, single.gpu_kv_bytes, single.gpu_compute_bytes, single.gpu_total_bytes)
    );
    assert_eq!((p.cpu_weights_bytes, p.cpu_kv_bytes), (single.cpu_weights_bytes, single.cpu_kv_bytes));
}

/// `-sm none` puts everything on `--main-gpu`; `-sm row` splits the matrices' rows by share.
#[test]
fn split_modes_none_and_row() {
    let g = match gguf::parse(&gguf_writer::tiny_llama().bytes(), "tiny.gguf").unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(n) => panic!("needs {n}"),
    };
    let hp = g.hparams("tiny.gguf").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 99, ..Default::default() };
    let o = Overrides::default();
    let none =
        plan(&g, &hp, &c, &o, &MultiGpu { gpus: 2, tensor_split: Vec::new(), mode: SplitMode::None, main_gpu: 1, free_memory: Vec::new() })
            .unwrap();
    assert_eq!(none.devices.len(), 1);
    assert_eq!((none.devices[0].name.as_str(), none.devices[0].layers), ("CUDA1", 4));
    assert!(!none.pipeline_parallel);
    let row = plan(
        &g,
        &hp,
        &c,
        &o,
        &MultiGpu { gpus: 2, tensor_split: vec![3.0, 1.0], mode: SplitMode::Row, main_gpu: 0, free_memory: Vec::new() },
    )
    .unwrap();
    let (a, b) = (row.devices[0].row_split_bytes, row.devices[1].row_split_bytes);
    assert!(a > 0 && (a as f64 / (a + b) as f64 - 0.75).abs() < 0.01, "{a} {b}");
    assert!(!row.pipeline_parallel);
    // Every byte is somewhere, once.
    let layer = plan(
        &g,
        &hp,
        &c,
        &o,
        &MultiGpu { gpus: 2, tensor_split: Vec::new(), mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() },
    )
    .unwrap();
    let sum = |p: &vram_core::llama_split::SplitPlan| {
        p.cpu_weights_bytes + p.devices.iter().map(|d| d.weights_bytes + d.row_split_bytes).sum::<u64>()
    };
    assert!(sum(&row).abs_diff(g.tensor_bytes()) <= 2 * g.tensors.len() as u64);
    assert_eq!(sum(&layer), g.tensor_bytes());
}

/// Regression: a tied LM head (no `output.weight`) is loaded a second time on the GPU with the
/// output layer; vram used to leave it out of the GPU weights.
#[test]
fn a_tied_output_layer_is_a_second_copy_of_the_embeddings_on_the_gpu() {
    let g = command_r();
    let hp = g.hparams("command-r.gguf").unwrap();
    let embd = g.tensors.iter().find(|t| t.name == "token_embd.weight").unwrap().bytes;
    let c = LlamaCppConfig { n_gpu_layers: 41, ..Default::default() };
    let all = gguf::llama_cpp(&g, &hp, &c).unwrap();
    assert_eq!(all.cpu_weights_bytes, embd);
    // -ngl 1: the output layer alone (llama.cpp counts it as the last layer), the embeddings'
    // second copy and output_norm.
    let head = gguf::llama_cpp(&g, &hp, &LlamaCppConfig { n_gpu_layers: 1, ..c }).unwrap();
    assert!(head.output_on_gpu);
    assert_eq!(head.gpu_weights_bytes, embd + output_norm_bytes(&g));
}

fn output_norm_bytes(g: &Gguf) -> u64 {
    g.tensors.iter().filter(|t| t.name == "output_norm.weight").map(|t| t.bytes).sum()
}

/// Mistral-7B-Instruct-v0.2's shapes (identified in validation/logs/llama.cpp/SOURCES.md).
fn mistral() -> Gguf {
    let mut w = Writer::default();
    w.decoder("llama", [32, 32768, 4096, 14336, 32, 8]).tokens(32_000);
    for i in 0..32 {
        w.tensor(&format!("blk.{i}.attn_norm.weight"), &[4096], F32);
    }
    w.tensor("output_norm.weight", &[4096], F32).tensor("output.weight", &[4096, 32], F32);
    match gguf::parse(&w.bytes(), "mistral.gguf").unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(n) => panic!("needs {n}"),
    }
}

/// fedora-copr/logdetective#106: one GPU, no flash attention, n_ctx 2048 and 32768: KV and the
/// compute buffer, both exact (the compute buffer's attention phase is fixed by these two logs).
#[test]
fn mistral_kv_and_compute_buffer_at_two_contexts() {
    let g = mistral();
    let hp = g.hparams("mistral.gguf").unwrap();
    for (file, ctx) in [("logdetective-106-mistral-7b-ctx2048.log", 2048), ("logdetective-106-mistral-7b-ctx32768.log", 32768)] {
        let l = log(file);
        let c = LlamaCppConfig { n_gpu_layers: 33, ctx, flash_attn: false, ..Default::default() };
        let p = gguf::llama_cpp(&g, &hp, &c).unwrap();
        assert_eq!(p.gpu_kv_bytes as f64 / MIB, log_mib(&l, "CUDA0", |d| d.kv.as_ref().map(|s| s.gib)), "{file}");
        assert_eq!(p.gpu_compute_bytes as f64 / MIB, log_mib(&l, "CUDA0", |d| d.compute.as_ref().map(|s| s.gib)), "{file}");
        // The host side of the graph with every layer on the GPU: the token rows looked up on
        // the CPU ([4096, 512] f32, 8 MiB) and the f32 KQ mask ([n_ctx, 512]): 12.00 and 72.00
        // MiB against the logged 12.01 and 72.01 ("CUDA_Host compute buffer size"; the small
        // position and output-id inputs make the rest).
        let host = log_mib(&l, "CUDA_Host", |d| d.compute.as_ref().map(|s| s.gib));
        let est = p.host.compute_bytes as f64 / MIB;
        assert!(p.host.compute_exact && (host - est) > 0.0 && (host - est) < 0.02, "{file}: host compute {est:.3} MiB, log {host}");
        // "CUDA_Host output buffer size = 0.12 MiB": 32000 f32 logits for one sequence.
        assert_eq!(p.host.output_bytes, 32_000 * 4);
    }
}

/// ggml-org's gpt-oss-20b-mxfp4.gguf, tensor for tensor: the log's type counts (f32 289, q8_0 98,
/// mxfp4 72) and its 459 tensors are this list (llama.cpp's LLM_ARCH_OPENAI_MOE tensors).
fn gpt_oss_20b() -> Gguf {
    let (e, v, x) = (2880u64, 201_088u64, 32u64);
    let mut w = Writer::default();
    w.decoder("gpt-oss", [24, 131072, e as u32, 2880, 64, 8])
        .u32("general.file_type", 38)
        .u32("gpt-oss.attention.key_length", 64)
        .u32("gpt-oss.attention.value_length", 64)
        .u32("gpt-oss.attention.sliding_window", 128)
        .u32("gpt-oss.expert_count", x as u32)
        .u32("gpt-oss.expert_used_count", 4)
        .u32("gpt-oss.expert_feed_forward_length", 2880)
        .tokens(v as usize);
    w.tensor("token_embd.weight", &[e, v], Q8_0);
    for i in 0..24 {
        let t = |n: &str| format!("blk.{i}.{n}");
        w.tensor(&t("attn_norm.weight"), &[e], F32)
            .tensor(&t("attn_q.weight"), &[e, 4096], Q8_0)
            .tensor(&t("attn_q.bias"), &[4096], F32)
            .tensor(&t("attn_k.weight"), &[e, 512], Q8_0)
            .tensor(&t("attn_k.bias"), &[512], F32)
            .tensor(&t("attn_v.weight"), &[e, 512], Q8_0)
            .tensor(&t("attn_v.bias"), &[512], F32)
            .tensor(&t("attn_output.weight"), &[4096, e], Q8_0)
            .tensor(&t("attn_output.bias"), &[e], F32)
            .tensor(&t("attn_sinks.weight"), &[64], F32)
            .tensor(&t("post_attention_norm.weight"), &[e], F32)
            .tensor(&t("ffn_gate_inp.weight"), &[e, x], F32)
            .tensor(&t("ffn_gate_inp.bias"), &[x], F32);
        for p in ["gate", "up", "down"] {
            w.tensor(&t(&format!("ffn_{p}_exps.weight")), &[e, e, x], MXFP4).tensor(&t(&format!("ffn_{p}_exps.bias")), &[e, x], F32);
        }
    }
    w.tensor("output_norm.weight", &[e], F32).tensor("output.weight", &[e, v], Q8_0);
    match gguf::parse(&w.bytes(), "gpt-oss-20b.gguf").unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(n) => panic!("needs {n}"),
    }
}

/// ikawrakow/ik_llama.cpp#822 (a mainline llama.cpp b6699 run): gpt-oss-20b with
/// `-ngl 99 --n-cpu-moe 99 -c 131072 -fa on`. The GPU weights (every expert tensor in RAM) and
/// both KV caches (12 full layers at 131072 cells, 12 sliding-window layers at 768) are exact.
#[test]
fn gpt_oss_20b_with_every_expert_in_ram() {
    let l = log("ik_llama.cpp-822-gpt-oss-20b-n-cpu-moe-99.log");
    let g = gpt_oss_20b();
    assert_eq!(g.tensors.len(), 459);
    let hp = g.hparams("gpt-oss-20b.gguf").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 99, ctx: 131072, ..Default::default() };
    let o = Overrides { tensor: Vec::new(), cpu_moe: CpuMoe::FirstLayers(99), ..Default::default() };
    let p = gguf::llama_cpp_with(&g, &hp, &c, &o).unwrap();
    let cuda0 = |f: fn(&startup_log::LlamaCppDevice) -> Option<f64>| log_mib(&l, "CUDA0", f);
    let (w, lw) = (p.gpu_weights_bytes as f64 / MIB, cuda0(|d| d.model.as_ref().map(|s| s.gib)));
    // 0.02 MiB apart: ggml-cuda pads each quantized tensor whose rows are not a multiple of 512
    // by one partial row and aligns it to 128 bytes (ggml-cuda.cu get_alloc_size), 73 × 256 B here.
    assert!((w - lw).abs() < 0.03, "weights: vram {w:.3} MiB, log {lw}; RAM {:.2} MiB", p.cpu_weights_bytes as f64 / MIB);
    assert_eq!(p.gpu_kv_bytes as f64 / MIB, cuda0(|d| d.kv.as_ref().map(|s| s.gib)));
    // RAM: llama.cpp maps the file's span from the first to the last tensor left on the CPU
    // (token_embd, then every layer's experts with the GPU's attention tensors between them):
    // "CPU_Mapped model buffer size = 10949.33 MiB". This header keeps convert_hf_to_gguf's
    // order as far as the span goes (token_embd before the layers, the output after them).
    let mapped = log_mib(&l, "CPU_Mapped", |d| d.model.as_ref().map(|s| s.gib));
    let span = p.host.weights_bytes as f64 / MIB;
    assert!(p.host.weights_mapped && (span - mapped).abs() / mapped < 0.001, "mapped: vram {span:.2} MiB, log {mapped}");
    assert!(p.host.weights_bytes > p.cpu_weights_bytes, "the span holds the GPU's attention tensors between the experts");
    let no_mmap = gguf::llama_cpp_with(&g, &hp, &LlamaCppConfig { mmap: false, ..c }, &o).unwrap();
    assert_eq!(no_mmap.host.weights_bytes, p.cpu_weights_bytes);
    // "CUDA_Host output buffer size = 0.77 MiB": 201088 f32 logits. The host compute buffer
    // (263.15 MiB) also holds the CPU's expert work, which is not modelled: the graph inputs
    // are a lower bound, and the plan says so.
    assert_eq!(p.host.output_bytes, 201_088 * 4);
    let host = log_mib(&l, "CUDA_Host", |d| d.compute.as_ref().map(|s| s.gib));
    assert!(!p.host.compute_exact && (p.host.compute_bytes as f64 / MIB) < host);
    // The inputs it counts: a mask for each attention kind, the full layers' 131072 cells and
    // the sliding ones' 768 (f16 under -fa on), and the token rows [2880, 512] f32.
    assert_eq!(p.host.compute_bytes, (131_072 + 768) * 512 * 2 + 2880 * 512 * 4);
    // The compute buffer is modelled as current llama-server reserves it: vram's 319.47 MiB is
    // 30% under b6699's logged 456.98. Why that build's is larger is not established: it
    // predates llama-server's one-logits-row-per-slot reserve (`n_outputs_max`), but a whole
    // ubatch's logits (201,088 × 512 f32, 392.75 MiB) would make it larger still. On an H200,
    // current llama.cpp's buffer for the same model with 12 layers' experts in RAM is within
    // 8 MiB of vram's (validation/llamacpp/h200, tests/llamacpp_h200.rs).
    let est = p.gpu_compute_bytes as f64 / MIB;
    let logged = cuda0(|d| d.compute.as_ref().map(|s| s.gib));
    assert!(est < logged && (logged - est) / logged < 0.31, "compute: vram {est:.2} MiB, log {logged:.2} MiB");
}

/// Over two GPUs, op offload runs the RAM experts' products on the first GPU (ggml-backend.cpp
/// gives an offloaded op to the highest-priority backend), so CUDA0's compute buffer holds the
/// copy of the largest down-projection expert tensor left in RAM, and CUDA1's does not.
#[test]
fn ram_experts_are_copied_to_the_first_gpu() {
    let g = gpt_oss_20b();
    let hp = g.hparams("gpt-oss-20b.gguf").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 99, ctx: 8192, ..Default::default() };
    let o = Overrides { tensor: Vec::new(), cpu_moe: CpuMoe::FirstLayers(99), ..Default::default() };
    let m = MultiGpu { gpus: 2, tensor_split: Vec::new(), mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() };
    let p = plan(&g, &hp, &c, &o, &m).unwrap();
    let copy = g.tensors.iter().filter(|t| t.name.contains("ffn_down_exps.weight")).map(|t| t.bytes).max().unwrap();
    let ctx = p.ctx;
    let (d0, d1) = (&p.devices[0], &p.devices[1]);
    assert_eq!(d0.compute_bytes, gguf::compute_buffer_bytes(&hp, &c, ctx, d0.output, copy));
    assert_eq!(d1.compute_bytes, gguf::compute_buffer_bytes(&hp, &c, ctx, d1.output, 0));
    assert!(d0.compute_bytes > d1.compute_bytes + copy / 2, "{} {}", d0.compute_bytes, d1.compute_bytes);
}
