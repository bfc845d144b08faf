//! `vram estimate` on a Mamba config: parameters, the PyTorch-path warning, and what is refused.

mod util;

use util::{fails, json};

const MAMBA: &str = "../../validation/configs/ssm/mamba-130m-hf.json";

#[test]
fn a_mamba_config_is_estimated_and_says_which_path() {
    let v = json(&["estimate", "--model", MAMBA, "--batch", "1", "--seq-len", "512"]);
    assert_eq!(v["model"]["parameters"], 129_135_360);
    let warnings = v["model"]["warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("mamba-ssm")), "{warnings:?}");
    let infer = json(&["estimate", "--model", MAMBA, "--mode", "infer", "--batch", "4", "--seq-len", "512"]);
    let names: Vec<&str> = infer["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"conv and SSM state (the cache)") && !names.contains(&"KV cache"), "{names:?}");
}

#[test]
fn what_mamba_does_not_take_is_refused() {
    let e = fails(&["serve", "--model", MAMBA, "-g", "h100"], 2);
    assert!(e.contains("state-space"), "{e}");
    let e = fails(&["estimate", "--model", MAMBA, "--peft", "lora"], 2);
    assert!(e.contains("LoRA"), "{e}");
    let e = fails(&["estimate", "--model", MAMBA, "--precision", "bf16"], 2);
    assert!(e.contains("pure bf16"), "{e}");
    let e = fails(&["plan", "--model", MAMBA, "-g", "h100", "--gpus", "8"], 2);
    assert!(e.contains("state-space"), "{e}");
}
