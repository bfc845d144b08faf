//! The alloc-trace points of validation/alloc_traces.py (also run for real by
//! validation/gpu/kit.py): their recorded sequences and their jobs.

use std::path::PathBuf;

use serde_json::Value;
use vram_core::allocator::Op;
use vram_core::peft::{Lora, Method, Targets};
use vram_core::{Checkpointing, Job, Mode, Optimizer, OptimizerImpl, Precision};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `+BYTES` allocates the next id (from 1), `-ID` frees, `=PHASE` marks a phase.
pub fn ops(text: &str) -> Vec<Op> {
    let mut next = 0;
    text.lines()
        .filter(|l| !l.starts_with('='))
        .map(|l| {
            let (sign, n) = l.split_at(1);
            let n: u64 = n.parse().unwrap();
            if sign == "+" {
                next += 1;
                Op::Alloc { id: next, size: n }
            } else {
                Op::Free { id: n }
            }
        })
        .collect()
}

pub fn job_of(r: &Value) -> Job {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    let n = |k: &str| r[k].as_u64().unwrap();
    let mode = if s("mode") == "train" { Mode::Train } else { Mode::Infer };
    let base = if mode == Mode::Train { Job::train(n("batch"), n("seq")) } else { Job::infer(n("batch"), n("seq")) };
    let lora = (s("peft") == "lora").then(|| Lora {
        method: Method::Lora,
        r: n("lora_r"),
        alpha: 2.0 * n("lora_r") as f64,
        dropout: 0.0,
        targets: r["lora_target_modules"].as_str().map_or(Targets::Default, |t| Targets::parse(t).unwrap()),
        modules_to_save: Vec::new(),
    });
    Job {
        lora,
        precision: Precision::parse(&s("precision")).unwrap(),
        optimizer: Optimizer::Adamw,
        optimizer_impl: if r["impl"] == "fused" { OptimizerImpl::Fused } else { OptimizerImpl::Foreach },
        checkpointing: if r["checkpointing"] == true { Checkpointing::Full } else { Checkpointing::None },
        prompt_len: r["prompt_len"].as_u64(),
        ..base
    }
}
