//! `vram serve` for a vision-language model: vLLM's multimodal flags as vLLM spells them, given
//! directly or in a pasted command.

mod util;

use util::{fails, json};

const QWEN: &str = "../../validation/configs/vlm/Qwen2-VL-2B-Instruct.json";

fn gpu0(v: &serde_json::Value) -> &serde_json::Value {
    &v["gpus"][0]
}

fn vision_note(v: &serde_json::Value) -> String {
    gpu0(v)["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("vision:"))
        .expect("a vision note")
        .to_string()
}

#[test]
fn max_pixels_and_the_image_limit_shape_the_profile() {
    let dflt = json(&["serve", "--model", QWEN, "-g", "h100"]);
    assert!(vision_note(&dflt).contains("16384 tokens, 65536 patches each"), "{}", vision_note(&dflt));
    let capped = json(&["serve", "--model", QWEN, "-g", "h100", "--mm-processor-kwargs", r#"{"max_pixels": 200704}"#]);
    // 200704 = 448²: 1024 patches, 256 tokens; the 8192-token budget holds 32 of them.
    assert!(
        vision_note(&capped).contains("profiled with 32 image(s) of the maximum size (256 tokens, 1024 patches each)"),
        "{}",
        vision_note(&capped)
    );
    let capped_to = |limit: &str| {
        json(&[
            "serve",
            "--model",
            QWEN,
            "-g",
            "h100",
            "--mm-processor-kwargs",
            r#"{"max_pixels": 200704}"#,
            "--limit-mm-per-prompt",
            limit,
            "--max-num-seqs",
            "4",
        ])
    };
    let limited = capped_to("image=1");
    assert!(vision_note(&limited).contains("profiled with 4 image(s)"), "{}", vision_note(&limited));
    // The JSON form vLLM also takes.
    let as_json = capped_to(r#"{"image": 1, "video": 0}"#);
    assert_eq!(gpu0(&as_json)["activation_peak_bytes"], gpu0(&limited)["activation_peak_bytes"]);
}

#[test]
fn a_pasted_vllm_command_with_multimodal_flags_equals_the_flags() {
    let out = util::vram()
        .args([
            "serve",
            "-g",
            "h100",
            "--json",
            "--",
            "vllm",
            "serve",
            QWEN,
            "--limit-mm-per-prompt",
            "image=2",
            "--mm-processor-kwargs",
            r#"{"max_pixels": 1003520}"#,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pasted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let direct = json(&[
        "serve",
        "--model",
        QWEN,
        "-g",
        "h100",
        "--limit-mm-per-prompt",
        "image=2",
        "--mm-processor-kwargs",
        r#"{"max_pixels": 1003520}"#,
    ]);
    assert_eq!(gpu0(&pasted)["kv_tokens"], gpu0(&direct)["kv_tokens"]);
    assert_eq!(gpu0(&pasted)["activation_peak_bytes"], gpu0(&direct)["activation_peak_bytes"]);
}

#[test]
fn bad_multimodal_flags_are_usage_errors() {
    let e = fails(&["serve", "--model", QWEN, "-g", "h100", "--limit-mm-per-prompt", "picture=2"], 2);
    assert!(e.contains("unknown modality `picture`"), "{e}");
    let e = fails(&["serve", "--model", QWEN, "-g", "h100", "--limit-mm-per-prompt", "image=lots"], 2);
    assert!(e.contains("needs a count"), "{e}");
    let e = fails(&["serve", "--model", QWEN, "-g", "h100", "--mm-processor-kwargs", "max_pixels=5"], 2);
    assert!(e.contains("not JSON"), "{e}");
    // A processor key that changes the images in a way not modelled is refused, not ignored;
    // pan-and-scan off (Gemma-3's default) is accepted.
    const GEMMA: &str = "../../validation/configs/vlm/gemma-3-4b-it.json";
    let e = fails(&["serve", "--model", GEMMA, "-g", "h100", "--mm-processor-kwargs", r#"{"do_pan_and_scan": true}"#], 2);
    assert!(e.contains("do_pan_and_scan"), "{e}");
    json(&["serve", "--model", GEMMA, "-g", "h100", "--mm-processor-kwargs", r#"{"do_pan_and_scan": false}"#]);
    // max_pixels is the Qwen processors' cap: on Gemma-3 it would change nothing.
    let e = fails(&["serve", "--model", GEMMA, "-g", "h100", "--mm-processor-kwargs", r#"{"max_pixels": 200704}"#], 2);
    assert!(e.contains("Qwen-VL processors' cap"), "{e}");
    let e = fails(&["serve", "--model", QWEN, "-g", "h100", "--pipeline-parallel-size", "2"], 2);
    assert!(e.contains("vision-language"), "{e}");
}

/// The image flags on a text-only model, or under an engine that has none of them, are refused
/// by name rather than dropped from a plan that then reads as if they applied.
#[test]
fn image_flags_without_a_vision_tower_or_under_other_engines_are_refused() {
    for flags in
        [&["--limit-mm-per-prompt", "image=2"][..], &["--mm-processor-kwargs", r#"{"max_pixels": 200704}"#], &["--language-model-only"]]
    {
        let mut args = vec!["serve", "-m", "llama-3.1-8b", "-g", "h100"];
        args.extend_from_slice(flags);
        let e = fails(&args, 2);
        assert!(e.contains(flags[0]) && e.contains("no vision tower"), "{e}");
        args.extend_from_slice(&["--engine", "sglang"]);
        let e = fails(&args, 2);
        assert!(e.contains(flags[0]) && e.contains("vLLM flag"), "{e}");
        let mut args = vec!["serve", "--model", QWEN, "-g", "h100", "--engine", "sglang"];
        args.extend_from_slice(flags);
        let e = fails(&args, 2);
        assert!(e.contains(flags[0]) && e.contains("vLLM flag"), "{e}");
    }
}

/// Qwen3.5: `vram estimate` reads its config as the language model (what AutoModelForCausalLM
/// trains), `vram serve` as vLLM builds it — tower included — unless `--language-model-only`,
/// given directly or in a pasted command; the training-only warning is not shown for serving.
#[test]
fn qwen35_serves_with_its_tower_and_language_model_only_drops_it() {
    const Q35: &str = "../../validation/configs/vlm/Qwen3.5-27B.json";
    let full = json(&["serve", "--model", Q35, "-g", "h200"]);
    assert!(vision_note(&full).contains("16384 tokens, 65536 patches each"), "{}", vision_note(&full));
    let lm = json(&["serve", "--model", Q35, "-g", "h200", "--language-model-only"]);
    let w = |v: &serde_json::Value| gpu0(v)["weights_bytes"].as_u64().unwrap();
    assert!(w(&full) > w(&lm) + (800 << 20), "the tower is ~0.86 GiB: {} vs {}", w(&full), w(&lm));
    let out = util::vram().args(["serve", "-g", "h200", "--json", "--", "vllm", "serve", Q35, "--language-model-only"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pasted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w(&pasted), w(&lm));
    let text = util::vram().args(["serve", "--model", Q35, "-g", "h200"]).output().unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("warning: Qwen3-VL: a 27-block vision tower"), "{out}");
    assert!(!out.contains("AutoModelForCausalLM"), "{out}");
}

/// `--mm-processor-kwargs '{"size": {"longest_edge": N}}'`, as vLLM's Idefics3 example sets it:
/// Idefics3/SmolVLM's split at N px (3 × 364 → 3 × 3 tiles + the global one, 10 × 169
/// embeddings); N must be a multiple of the tile, as vLLM asserts; elsewhere it is refused (a
/// Qwen-VL processor needs shortest_edge beside it: max_pixels is the key to pass there).
#[test]
fn size_longest_edge_resizes_the_idefics3_split() {
    const IDEFICS3: &str = "../../validation/configs/vlm/Idefics3-8B-Llama3-constructed.json";
    let edge = |n: &str| format!(r#"{{"size": {{"longest_edge": {n}}}}}"#);
    let small = json(&["serve", "--model", IDEFICS3, "-g", "h100", "--mm-processor-kwargs", &edge("1092")]);
    assert!(vision_note(&small).contains("(1690 tokens, 6760 patches each)"), "{}", vision_note(&small));
    let e = fails(&["serve", "--model", IDEFICS3, "-g", "h100", "--mm-processor-kwargs", &edge("1000")], 2);
    assert!(e.contains("multiple of the 364-px tile"), "{e}");
    // A Qwen-VL processor refuses a size without shortest_edge; vram says to pass max_pixels.
    let e = fails(&["serve", "--model", QWEN, "-g", "h100", "--mm-processor-kwargs", &edge("1003520")], 2);
    assert!(e.contains("takes max_pixels"), "{e}");
    const LLAVA: &str = "../../validation/configs/vlm/llava-1.5-7b-hf.json";
    let e = fails(&["serve", "--model", LLAVA, "-g", "h100", "--mm-processor-kwargs", &edge("1092")], 2);
    assert!(e.contains("sizes its images another way"), "{e}");
    let e = fails(&["serve", "--model", IDEFICS3, "-g", "h100", "--mm-processor-kwargs", r#"{"size": {"height": 364}}"#], 2);
    assert!(e.contains("longest_edge"), "{e}");
}
