//! `fit` searches the real alternatives and uses the one documented default target.

mod util;

use util::json;

#[test]
fn fit_finds_single_gpu_answers_for_a_full_fine_tune_that_does_not_fit() {
    // Llama-3.1-8B full fine-tune, bf16-mixed AdamW, on an 80 GB card: batch 1 does not fit.
    let v = json(&["fit", "-m", "llama-3.1-8b", "-g", "h100", "-s", "2048"]);
    assert!(v["max_batch_size"].is_null(), "{v}");
    assert_eq!(v["verdict"], "out_of_memory");
    let alts = v["alternatives"].as_array().expect("alternatives listed");
    let single: Vec<_> = alts.iter().filter(|a| a["gpus"] == 1).collect();
    assert!(
        single.iter().any(|a| a["flags"].as_str().unwrap().contains("adamw-8bit") && a["max_batch"].as_u64() >= Some(1)),
        "8-bit AdamW on one GPU is an answer: {alts:?}"
    );
    for a in alts {
        assert!(a["saving"].as_u64().unwrap() > 0, "an option that saves nothing is listed: {a}");
        assert_eq!(a["fits"], true, "{a}");
    }
    // Single-GPU answers rank before adding GPUs.
    let first_multi = alts.iter().position(|a| a["gpus"].as_u64() > Some(1)).unwrap_or(alts.len());
    assert!(alts[first_multi..].iter().all(|a| a["gpus"].as_u64() > Some(1) || a["changes_job"] == true || a["changes_method"] == true));
}

#[test]
fn one_default_target_for_fit_plan_and_tune() {
    let v = json(&["fit", "-m", "qwen2.5-0.5b", "-g", "h100", "-s", "1024"]);
    assert_eq!(v["target_utilization"].as_f64(), Some(vram_core::fit::DEFAULT_TARGET_UTILIZATION));
    for cmd in ["fit", "plan", "tune"] {
        let out = util::vram().args([cmd, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("[default: 0.9]"), "{cmd} --help: {help}");
    }
}

#[test]
fn the_verdict_on_the_chosen_batch_never_says_raise_it() {
    // A small model on a big card: the chosen batch is the largest within target.
    let v = json(&["fit", "-m", "qwen2.5-0.5b", "-g", "h200", "-s", "512", "--global-batch-size", "8"]);
    let verdict = v["verdict"].as_str().unwrap();
    assert_ne!(verdict, "underused", "{v}");
    assert_ne!(verdict, "below_sweet_spot", "{v}");
}
