//! `vram serve` of a MoE GGUF with llama.cpp's expert offload flags: `--n-cpu-moe`/`-ncmoe`,
//! `--cpu-moe`/`-cmoe`, `--override-tensor`/`-ot`, spelled as llama.cpp spells them.

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;
#[path = "../../vram-core/tests/support/moe_gguf.rs"]
mod moe_gguf;

use moe_gguf::{EXPERT_BYTES_PER_LAYER, LAYERS};
use util::{fails, json, vram};

/// The MoE header, padded (sparse) so that the tensor data it promises (about 8 MB) is in the file.
fn moe_file(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("tiny-moe-Q4_K_M.gguf");
    std::fs::write(&path, moe_gguf::tiny_moe().bytes()).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(16 << 20).unwrap();
    path.display().to_string()
}

fn moved(v: &serde_json::Value) -> u64 {
    v["plan"]["overridden_to_cpu_bytes"].as_u64().unwrap()
}

#[test]
fn cpu_moe_and_n_cpu_moe_move_exact_expert_bytes_to_ram() {
    let dir = tempfile::tempdir().unwrap();
    let p = moe_file(&dir);
    let base = json(&["serve", "-m", &p, "-g", "24GiB"]);
    assert_eq!(moved(&base), 0);
    for flags in [&["--cpu-moe"][..], &["-cmoe"], &["-ot", "exps=CPU"], &["--override-tensor=exps=CPU"], &["-ncmoe", "99"]] {
        let v = json(&[&["serve", "-m", &p, "-g", "24GiB"][..], flags].concat());
        assert_eq!(moved(&v), LAYERS * EXPERT_BYTES_PER_LAYER, "{flags:?}");
        let gpu = |v: &serde_json::Value| v["plan"]["gpu_weights_bytes"].as_u64().unwrap();
        assert_eq!(gpu(&base) - gpu(&v), LAYERS * EXPERT_BYTES_PER_LAYER, "{flags:?}");
    }
    let three = json(&["serve", "-m", &p, "-g", "24GiB", "--n-cpu-moe", "3"]);
    assert_eq!(moved(&three), 3 * EXPERT_BYTES_PER_LAYER);
    assert_eq!(three["overrides"]["cpu_moe"]["first_layers"], 3);
    // Every row of the offload table is planned with the same overrides.
    let rows = three["offload_table"].as_array().unwrap();
    assert_eq!(rows[0]["overridden_to_cpu_bytes"], 3 * EXPERT_BYTES_PER_LAYER);
    assert_eq!(rows.last().unwrap()["overridden_to_cpu_bytes"], 0);
}

#[test]
fn the_table_says_what_the_overrides_moved() {
    let dir = tempfile::tempdir().unwrap();
    let p = moe_file(&dir);
    let out = vram().args(["serve", "-m", &p, "-g", "rtx-4090", "-ncmoe", "3"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("moved to RAM by the overrides"), "{text}");
    assert!(text.contains("flash attention · --n-cpu-moe 3"), "{text}");
    assert!(text.contains("with --n-cpu-moe 3:"), "{text}");
    assert!(text.contains("kept in RAM by the overrides"), "{text}");
}

#[test]
fn an_override_that_matches_nothing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dense.gguf");
    std::fs::write(&path, gguf_writer::tiny_llama().bytes()).unwrap();
    std::fs::File::options().write(true).open(&path).unwrap().set_len(4 << 20).unwrap();
    let out = vram().args(["serve", "-m", path.to_str().unwrap(), "-g", "h100", "--cpu-moe"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("matched no tensor"));
}

#[test]
fn bad_overrides_exit_2_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let p = moe_file(&dir);
    let serve = |extra: &[&str]| fails(&[&["serve", "-m", &p, "-g", "h100"][..], extra].concat(), 2);
    assert!(serve(&["-ot", "exps=GPU"]).contains("unknown buffer type `GPU`: use CPU or CUDAn"));
    assert!(serve(&["-ot", "exps=CUDA1"]).contains("names GPU 1, but 1 GPU is planned: give --gpus 2"));
    assert!(serve(&["-ot", "exps=CUDA2", "--gpus", "2"]).contains("names GPU 2, but 2 GPUs are planned"));
    assert!(serve(&["-ot", "blk\\.(1=CPU"]).contains("not a valid regular expression"));
    assert!(serve(&["-ot", "exps"]).contains("PATTERN=BUFTYPE"));
    assert!(serve(&["-ot", "exps=CUDA0", "-cmoe"]).contains("command line"));
    // vLLM models do not read them.
    let e = fails(&["serve", "-m", "llama-3-8b", "-g", "h100", "--cpu-moe", "-ncmoe", "2"], 2);
    assert!(e.contains("--n-cpu-moe/-ncmoe, --cpu-moe/-cmoe are llama.cpp flags"), "{e}");
}

/// MoE files get a `--n-cpu-moe` table (0 to all layers), each row placed as llama.cpp places it;
/// dense files do not.
#[test]
fn moe_files_get_an_n_cpu_moe_table() {
    let dir = tempfile::tempdir().unwrap();
    let p = moe_file(&dir);
    let v = json(&["serve", "-m", &p, "-g", "24GiB"]);
    let rows = v["n_cpu_moe_table"].as_array().unwrap();
    assert_eq!(rows.first().unwrap()["n_cpu_moe"], 0);
    assert_eq!(rows.last().unwrap()["n_cpu_moe"], LAYERS);
    for r in rows {
        assert_eq!(r["overridden_to_cpu_bytes"].as_u64().unwrap(), r["n_cpu_moe"].as_u64().unwrap() * EXPERT_BYTES_PER_LAYER);
    }
    let total = |r: &serde_json::Value| r["gpu_total_bytes"].as_u64().unwrap();
    assert_eq!(total(&rows[0]) - total(rows.last().unwrap()), LAYERS * EXPERT_BYTES_PER_LAYER);
    let dense = dir.path().join("dense.gguf");
    std::fs::write(&dense, gguf_writer::tiny_llama().bytes()).unwrap();
    std::fs::File::options().write(true).open(&dense).unwrap().set_len(4 << 20).unwrap();
    let d = json(&["serve", "-m", dense.to_str().unwrap(), "-g", "24GiB"]);
    assert_eq!(d["n_cpu_moe_table"], serde_json::json!([]));
}

/// llama-server's --fit on one GPU for a MoE file: the note says what the plan holds — the
/// layers -ngl puts on the GPU (the output counted as the last layer), and the layers whose
/// experts fit.cpp's per-layer patterns send to RAM (its pattern for the output's index matches
/// no tensor and is not counted).
#[test]
fn the_fit_note_says_what_the_plan_holds() {
    let dir = tempfile::tempdir().unwrap();
    let p = moe_file(&dir);
    for gpu in ["1030MiB", "1036MiB"] {
        let v = json(&["serve", "-m", &p, "-g", gpu, "--fit-target", "500", "-c", "4096", "--cuda-context", "512MiB"]);
        let note = v["notes"].to_string();
        let (on, output) = (v["plan"]["gpu_layers"].as_u64().unwrap(), v["plan"]["output_on_gpu"].as_bool().unwrap());
        assert!(note.contains(&format!("{on} of {LAYERS} layers{} on the GPU", if output { " and the output" } else { "" })), "{note}");
        let blocks: std::collections::BTreeSet<u64> = v["overrides"]["tensor"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| {
                o["pattern"].as_str().unwrap().strip_prefix("blk\\.").and_then(|r| r.split("\\.").next()).and_then(|i| i.parse().ok())
            })
            .filter(|il| *il < LAYERS)
            .collect();
        assert!(!blocks.is_empty(), "{}", v["overrides"]);
        assert!(note.contains(&format!("{} of the GPU layers with their experts in RAM", blocks.len())), "{note}");
    }
}

/// `--override-kv`: the model's metadata as llama.cpp's loader reads it after the override —
/// all 8 experts per token instead of 2, a larger routed-expert compute buffer; typed or pasted
/// alike.
#[test]
fn override_kv_changes_what_the_loader_reads() {
    let dir = tempfile::tempdir().unwrap();
    let p = moe_file(&dir);
    let compute = |v: &serde_json::Value| v["plan"]["gpu_compute_bytes"].as_u64().unwrap();
    let base = json(&["serve", "-m", &p, "-g", "24GiB", "-c", "4096", "-ub", "512"]);
    let eight = json(&["serve", "-m", &p, "-g", "24GiB", "-c", "4096", "-ub", "512", "--override-kv", "qwen3moe.expert_used_count=int:8"]);
    assert!(compute(&eight) > compute(&base), "{} vs {}", compute(&eight), compute(&base));
    // The same override pasted in llama.cpp's spelling, with a second, memory-free one.
    let out = vram()
        .args(["serve", "-g", "24GiB", "--json", "--", "llama-server", "-m", &p, "-c", "4096", "-ub", "512"])
        .args(["--override-kv", "qwen3moe.expert_used_count=int:8,tokenizer.ggml.add_bos_token=bool:false"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pasted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compute(&pasted), compute(&eight));
    // A key of the model's architecture that the file does not hold: said so, not silently kept.
    let out = vram().args(["serve", "-m", &p, "-g", "24GiB", "--override-kv", "qwen3moe.expert_used_cuont=int:8"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("qwen3moe.expert_used_cuont: the file has no such key"));
    for (bad, why) in [
        ("qwen3moe.expert_used_count", "KEY=TYPE:VALUE"),
        ("a=int:two", "whole number"),
        ("a=bool:yes", "true or false"),
        ("a=list:1", "TYPE int"),
    ] {
        let e = fails(&["serve", "-m", &p, "-g", "24GiB", "--override-kv", bad], 2);
        assert!(e.contains(why), "{bad}: {e}");
    }
}
