//! Which modules LoRA adapts and how many parameters that trains, held to peft itself:
//! `validation/fixtures/peft_targets.json` records, for every preset and validation config, peft
//! 0.21's default targets per model_type and the trainable parameters `get_peft_model` reports
//! (LoRA and DoRA, r 8 and 16, default targets and all-linear) on the real transformers model
//! built on the meta device — or the error peft raises. vram must give the same count or refuse.

use std::path::PathBuf;

use serde_json::Value;
use vram_core::parse_config;
use vram_core::peft::{default_targets, resolve, Lora, Method, Targets};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn trainable_parameters_and_refusals_match_peft() {
    let text =
        std::fs::read_to_string(root().join("validation/fixtures/peft_targets.json")).expect("run validation/lora_matrix.py --targets");
    let v: Value = serde_json::from_str(&text).unwrap();
    for (model_type, targets) in v["default_targets"].as_object().unwrap() {
        let ours = default_targets(model_type).map(|d| d.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let theirs = targets.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>());
        assert_eq!(ours, theirs, "default targets of {model_type}");
    }
    let mut checked = 0;
    for (path, entry) in v["configs"].as_object().unwrap() {
        let bytes = std::fs::read(root().join(path)).unwrap();
        let model = parse_config(&bytes, path, path).unwrap();
        for (key, targets) in [("default", Targets::Default), ("all-linear", Targets::AllLinear)] {
            let e = &entry[key];
            for (method, m) in [("lora", Method::Lora), ("dora", Method::Dora)] {
                for r in [8u64, 16] {
                    let lora = Lora { method: m, r, targets: targets.clone(), ..Lora::default() };
                    let ours = resolve(&model, &lora);
                    match e[format!("trainable_{method}_r{r}")].as_u64() {
                        Some(n) => {
                            let got =
                                ours.unwrap_or_else(|err| panic!("{path} {key} {method} r{r}: vram refuses ({err}) where peft trains {n}"));
                            assert_eq!(got.adapter_parameters, n, "{path} {key} {method} r{r}");
                            checked += 1;
                        }
                        None => {
                            let why = e[format!("{method}_error")]
                                .as_str()
                                .unwrap_or_else(|| panic!("{path} {key} {method}: neither a count nor an error"));
                            assert!(ours.is_err(), "{path} {key} {method} r{r}: peft refuses ({why}) but vram resolves");
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked >= 200, "only {checked} cases");
}
