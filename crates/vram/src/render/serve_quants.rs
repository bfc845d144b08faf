//! `vram serve --model org/name-GGUF`: every quant of a GGUF repository on one GPU, as text or JSON.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::units::thousands;

use super::common::{gib_cell, gpu_json, gpu_line};
use crate::commands::serve_quants::{QuantTable, RowOutcome};

/// The quant table.
pub fn text(t: &QuantTable) -> String {
    let mut out = String::new();
    for n in &t.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ =
        writeln!(out, "{} (revision {}) — {} GGUF quants, planned under llama.cpp on {}", t.repo, t.rev, t.rows.len(), gpu_line(&t.gpu));
    if let Some(c) = &t.config {
        let _ = writeln!(
            out,
            "--n-gpu-layers {} · --ctx-size {} · --ubatch-size {} · --parallel {} · flash attention{}",
            c.n_gpu_layers,
            if t.ctx_fitted { "per quant (--fit)".to_string() } else { c.ctx.to_string() },
            c.ubatch,
            c.parallel,
            if c.flash_attn { "" } else { " off" }
        );
    }
    let _ = writeln!(out);
    let moe = t.rows.iter().any(|r| matches!(r.outcome, RowOutcome::Planned { min_n_cpu_moe: Some(_), .. }));
    let moe_head = if moe { format!(" {:>20}", "or: min --n-cpu-moe") } else { String::new() };
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>10} {:>10} {:>10} {:>5} {:>15} {:>16}{moe_head}",
        "quant", "file GiB", "-c", "GPU GiB", "RAM GiB", "fits", "longest -c", "if not: max -ngl"
    );
    for r in &t.rows {
        match &r.outcome {
            RowOutcome::Planned { ctx, gpu_total_bytes, cpu_weights_bytes, fits, max_ctx_size, max_n_gpu_layers, min_n_cpu_moe } => {
                let moe_cell = match (moe, fits, min_n_cpu_moe) {
                    (false, _, _) | (true, true, _) => String::new(),
                    (true, false, n) => format!(" {:>20}", n.map_or("none".into(), |n| n.to_string())),
                };
                let _ = writeln!(
                    out,
                    "{:<16} {:>10} {:>10} {:>10} {:>10} {:>5} {:>15} {:>16}{moe_cell}",
                    r.quant,
                    gib_cell(r.file_bytes),
                    thousands(*ctx),
                    gib_cell(*gpu_total_bytes),
                    gib_cell(*cpu_weights_bytes),
                    if *fits { "yes" } else { "no" },
                    max_ctx_size.map_or("none".into(), thousands),
                    if *fits { "".into() } else { max_n_gpu_layers.map_or("none".into(), |n| n.to_string()) },
                );
            }
            RowOutcome::Error { error } => {
                let _ = writeln!(out, "{:<16} {:>10}  not planned: {error}", r.quant, gib_cell(r.file_bytes));
            }
        }
    }
    let _ = writeln!(out);
    match &t.best {
        Some(b) => {
            let _ = writeln!(
                out,
                "best that fits: {b} (the largest file that fits with these flags); its full plan: vram serve --model {}:{b} --gpu {}",
                t.repo, t.gpu.name
            );
        }
        None => {
            let _ = writeln!(out, "no quant fits with these flags: lower --ctx-size, offload layers (the last column), or a larger GPU");
        }
    }
    let _ = writeln!(
        out,
        "GiB = 2^30 bytes. GPU: weights on the GPU + KV cache + compute buffer + CUDA context; RAM: weights left on the host."
    );
    out
}

/// The quant table as JSON.
pub fn json(t: &QuantTable) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "engine": "llama.cpp",
        "notes": t.notes,
        "repo": t.repo,
        "revision": t.rev,
        "gpu": gpu_json(&t.gpu),
        "config": t.config,
        "ctx_fitted": t.ctx_fitted,
        "quants": t.rows,
        "best": t.best,
    })
}
