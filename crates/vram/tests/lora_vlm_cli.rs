//! `vram estimate --peft lora` on a vision-language model: adapters on the language model, the
//! vision tower and projector frozen; what is not modelled is refused.

mod util;

use util::{fails, json};

const QWEN: &str = "../../validation/configs/vlm/Qwen2-VL-2B-Instruct.json";

#[test]
fn lora_on_a_vlm_trains_the_language_model_only() {
    let full = json(&["estimate", "--model", QWEN, "--seq-len", "2048"]);
    let lora = json(&["estimate", "--model", QWEN, "--seq-len", "2048", "--peft", "lora"]);
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
    };
    // No optimizer states or gradients for the tower and projector, no autocast copies of them.
    assert!(names(&full).iter().any(|n| n == "vision tower + projector optimizer states"), "{:?}", names(&full));
    for n in names(&lora) {
        assert!(!n.contains("projector optimizer states") && !n.contains("projector gradients"), "{n}");
    }
    assert!(lora["peak_allocated_bytes"].as_u64() < full["peak_allocated_bytes"].as_u64());
    assert!(lora["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("language model only")));
}

#[test]
fn what_vlm_lora_does_not_model_is_refused() {
    // 4-bit QLoRA is modelled (validation/vlm_lora.py); 8-bit was never measured.
    let q = json(&["estimate", "--model", QWEN, "--seq-len", "2048", "--peft", "lora", "--load-in-4bit"]);
    assert!(q["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("QLoRA: transformers' bitsandbytes rule")));
    let e = fails(&["estimate", "--model", QWEN, "--peft", "lora", "--load-in-8bit"], 2);
    assert!(e.contains("8-bit (LLM.int8) QLoRA"), "{e}");
    let e = fails(&["estimate", "--model", QWEN, "--peft", "dora"], 2);
    assert!(e.contains("DoRA"), "{e}");
}
