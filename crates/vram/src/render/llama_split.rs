//! `vram serve` of a .gguf file over several GPUs (`--gpus`, `--tensor-split`, `--split-mode`):
//! the per-GPU table, and the per-GPU comparison with a llama.cpp start-up log. Pure functions.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::llama_split::{SplitMode, SplitPlan};
use vram_core::startup_log::{LlamaCppLog, LogSize};
use vram_core::units::GIB;

use crate::commands::serve::LlamaCppServe;

const MIB: f64 = (1u64 << 20) as f64;

fn gib(b: u64) -> String {
    format!("{:.2}", b as f64 / GIB as f64)
}

/// The per-GPU table.
pub fn text(s: &LlamaCppServe, p: &SplitPlan, fit: Option<u64>) -> String {
    let (hp, c) = (&s.hparams, &s.config);
    let mut out = String::new();
    for n in &s.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(
        out,
        "{} — {} · {} · {} layers · {} KV heads × {} · vocabulary {}",
        s.file,
        hp.architecture,
        s.gguf.file_type().unwrap_or("unknown mix"),
        hp.layers,
        hp.kv_heads,
        hp.head_k,
        hp.vocab
    );
    let m = &p.multi;
    let split = if m.tensor_split.is_empty() && !m.free_memory.is_empty() {
        format!(
            "by free memory, as llama.cpp splits it: {} GiB",
            m.free_memory.iter().map(|b| format!("{:.2}", *b as f64 / GIB as f64)).collect::<Vec<_>>().join(" : ")
        )
    } else if m.tensor_split.is_empty() {
        "even (llama.cpp splits by free memory: equal GPUs assumed)".to_string()
    } else {
        m.tensor_split.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")
    };
    let mode = match m.mode {
        SplitMode::None => format!("none (--main-gpu {})", m.main_gpu),
        SplitMode::Layer => "layer".into(),
        SplitMode::Row => format!("row (--main-gpu {})", m.main_gpu),
    };
    let _ = writeln!(
        out,
        "llama.cpp on {} · --split-mode {mode} · --tensor-split {split} · --n-gpu-layers {} · --ctx-size {} (padded {}) · --ubatch-size {} · --parallel {}",
        if s.device_gpus.is_empty() {
            format!("{} × {}", m.gpus, s.gpu.name)
        } else {
            s.device_gpus.iter().enumerate().map(|(i, g)| format!("CUDA{i} {}", g.name)).collect::<Vec<_>>().join(" + ")
        },
        c.n_gpu_layers,
        c.ctx,
        p.ctx,
        c.ubatch,
        c.parallel
    );
    if p.pipeline_parallel {
        let _ = writeln!(out, "pipeline parallelism: on (llama.cpp keeps 4 copies of the graph inputs per GPU, in the compute buffer)");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<7} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "device", "layers", "model GiB", "split GiB", "KV GiB", "compute", "CUDA ctx", "total GiB"
    );
    for d in &p.devices {
        let _ = writeln!(
            out,
            "  {:<7} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            d.name,
            format!("{}{}", d.layers, if d.output { "+out" } else { "" }),
            gib(d.weights_bytes),
            gib(d.row_split_bytes),
            gib(d.kv_bytes + d.state_bytes),
            gib(d.compute_bytes),
            gib(d.cuda_overhead_bytes),
            gib(d.total_bytes)
        );
    }
    let _ = writeln!(
        out,
        "  {:<7} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "RAM",
        "",
        gib(p.host.weights_bytes),
        "",
        gib(p.cpu_kv_bytes + p.cpu_state_bytes),
        gib(p.host.compute_bytes + p.host.output_bytes),
        "",
        gib(p.host.total_bytes)
    );
    super::serve::host_text(&mut out, &p.host, p.cpu_weights_bytes);
    if hp.recurrent.is_some() {
        let per: Vec<String> = p.devices.iter().map(|d| format!("{} {}", d.name, gib(d.state_bytes))).collect();
        let _ = writeln!(out, "KV GiB includes the recurrent state (llama.cpp's RS buffer, GiB): {}", per.join(" · "));
    }
    if !s.overrides.lora.is_empty() {
        let per: Vec<String> = p
            .devices
            .iter()
            .map(|d| format!("{} {} + {} (products, bound)", d.name, gib(d.lora_bytes), gib(d.lora_compute_bytes)))
            .collect();
        let _ = writeln!(out, "total GiB includes the LoRA adapters (GiB): {}; RAM {}", per.join(" · "), gib(p.host.lora_bytes));
        super::serve::lora_text(&mut out, &s.overrides.lora);
    }
    if c.projector_bytes > 0 {
        let _ = writeln!(
            out,
            "{} total includes the --mmproj projector's {} GiB of weights and {} GiB of vision compute buffer",
            p.devices.first().map_or("CUDA0", |d| d.name.as_str()),
            gib(c.projector_bytes),
            gib(c.projector_compute_bytes)
        );
    }
    let (util, name) = fullest(s, p);
    let verdict = if util <= 1.0 { "fits" } else { "does NOT fit" };
    let _ = writeln!(out, "fullest GPU: {:.1}% of {name} — {verdict}", util * 100.0);
    let _ = writeln!(out, "compute buffers are modelled from llama.cpp's graph and the CUDA context, cuBLAS and pool measured on one H200 (validation/llamacpp); neither is measured over several GPUs");
    match fit {
        Some(n) => {
            let _ = writeln!(out, "longest --ctx-size at which every GPU fits: {n}");
        }
        None => {
            let _ = writeln!(out, "even --ctx-size 256 does not fit every GPU");
        }
    }
    out
}

/// The fullest GPU against its own memory: (used / memory, "CUDAn gpu-name").
fn fullest(s: &LlamaCppServe, p: &SplitPlan) -> (f64, String) {
    p.devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let g = s.device_gpus.get(p.device_index(i)).unwrap_or(&s.gpu);
            (
                d.total_bytes as f64 / g.memory as f64,
                if s.device_gpus.is_empty() { g.name.clone() } else { format!("{} {}", d.name, g.name) },
            )
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, s.gpu.name.clone()))
}

/// The JSON: the one-GPU document with `split` added and `fits` judged GPU by GPU.
pub fn json(s: &LlamaCppServe, p: &SplitPlan, fit: Option<u64>) -> Value {
    let mut v = crate::render::serve::llama_cpp_json(s);
    v["split"] = json!({ "plan": p, "max_ctx_size": fit });
    v["fits"] = json!(fullest(s, p).0 <= 1.0);
    if !s.device_gpus.is_empty() {
        v["gpus"] = json!(s.device_gpus);
    }
    v
}

/// One compared buffer.
struct Cmp {
    device: String,
    buffer: &'static str,
    estimate: u64,
    log: Option<LogSize>,
}

fn rows(p: &SplitPlan, l: &LlamaCppLog) -> Vec<Cmp> {
    let find = |name: &str| l.devices.iter().find(|d| d.name == name);
    let mut out = Vec::new();
    for d in &p.devices {
        let dev = find(&d.name);
        let get = |f: fn(&vram_core::startup_log::LlamaCppDevice) -> &Option<LogSize>| dev.and_then(|x| f(x).clone());
        out.push(Cmp { device: d.name.clone(), buffer: "model", estimate: d.weights_bytes, log: get(|x| &x.model) });
        out.push(Cmp { device: d.name.clone(), buffer: "KV", estimate: d.kv_bytes, log: get(|x| &x.kv) });
        let rs = get(|x| &x.state);
        if d.state_bytes > 0 || rs.is_some() {
            out.push(Cmp { device: d.name.clone(), buffer: "RS", estimate: d.state_bytes, log: rs });
        }
        out.push(Cmp { device: d.name.clone(), buffer: "compute", estimate: d.compute_bytes, log: get(|x| &x.compute) });
        let lora = get(|x| &x.lora);
        if d.lora_bytes > 0 || lora.is_some() {
            out.push(Cmp { device: d.name.clone(), buffer: "LoRA", estimate: d.lora_bytes, log: lora });
        }
    }
    if p.multi.mode == SplitMode::Row {
        let split: u64 = p.devices.iter().map(|d| d.row_split_bytes).sum();
        let log = l.devices.iter().find(|d| d.name.ends_with("_Split")).and_then(|d| d.model.clone());
        out.push(Cmp { device: "CUDA_Split".into(), buffer: "model", estimate: split, log });
    }
    out
}

/// The per-GPU comparison, as text.
pub fn compare_text(p: &SplitPlan, l: &LlamaCppLog, file: &str) -> String {
    let mut out = format!("\ncompared with {file} (llama.cpp, per device):\n");
    if let Some(n) = l.n_ctx.filter(|&n| n != p.ctx) {
        let _ = writeln!(out, "  CONTRADICTION: the log's n_ctx is {n}; the plan is for {}", p.ctx);
    }
    let _ = writeln!(out, "  {:<10} {:<8} {:>14} {:>14} {:>9}", "device", "buffer", "vram MiB", "log MiB", "diff");
    for r in rows(p, l) {
        let est = r.estimate as f64 / MIB;
        let (log, diff) = match &r.log {
            Some(s) => {
                let l = s.gib * 1024.0;
                (format!("{l:.2}"), if est > 0.0 { format!("{:+.1}%", (l - est) / est * 100.0) } else { "—".into() })
            }
            None => ("not printed".into(), String::new()),
        };
        let _ = writeln!(out, "  {:<10} {:<8} {:>14.2} {:>14} {:>9}", r.device, r.buffer, est, log, diff);
    }
    for (name, vram, log) in fit_layers(p, l) {
        let _ = match vram {
            Some(v) => writeln!(
                out,
                "  {name:<10} layers placed by --fit: vram {v}, the log {}{}",
                log.layers,
                if log.layers == v { " (the same)" } else { " — a different placement moves whole layers between these buffers" }
            ),
            None => writeln!(out, "  {name:<10} layers placed by --fit: the log {}; this GPU is not in the plan (--gpus)", log.layers),
        };
    }
    out
}

/// Each device --fit placed in the log: (device, vram's layers on it counting the output as
/// one, as fit.cpp counts, or `None` for a GPU the plan lacks, the log's line).
fn fit_layers<'a>(p: &SplitPlan, l: &'a LlamaCppLog) -> Vec<(String, Option<u64>, &'a vram_core::startup_log::FitLayers)> {
    l.fit_layers
        .iter()
        .map(|f| {
            let vram = p.devices.iter().find(|d| d.name == f.name).map(|d| d.layers + u64::from(d.output));
            (f.name.clone(), vram, f)
        })
        .collect()
}

/// The per-GPU comparison, as JSON.
pub fn compare_json(p: &SplitPlan, l: &LlamaCppLog) -> Value {
    let rows: Vec<Value> = rows(p, l)
        .into_iter()
        .map(|r| {
            let est = r.estimate as f64 / MIB;
            let log = r.log.as_ref().map(|s| s.gib * 1024.0);
            json!({
                "device": r.device,
                "buffer": r.buffer,
                "estimate_mib": est,
                "log_mib": log,
                "percent": log.filter(|_| est > 0.0).map(|l| (l - est) / est * 100.0),
            })
        })
        .collect();
    let fit: Vec<Value> = fit_layers(p, l)
        .into_iter()
        .map(|(name, vram, f)| json!({ "device": name, "estimate_layers": vram, "log_layers": f.layers, "log_overflowing": f.overflowing }))
        .collect();
    json!({ "engine": "llama.cpp", "n_ctx": l.n_ctx, "rows": rows, "fit_layers": fit })
}
