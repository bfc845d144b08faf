//! `vram serve` of a state-space or hybrid GGUF under llama.cpp: the KV cache on the attention
//! layers, one f32 recurrent state per `--parallel` sequence on the others (llama.cpp's "RS
//! buffer"), the split over GPUs, a start-up log's RS line, and Ollama refused by name.

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

use util::{fails, json, vram};

/// Per state layer and sequence: (4 − 1) × (2048 + 2 × 16 × 128) + 128 × 2048 f32 values.
const STATE_PER_LAYER_SEQ: u64 = (3 * 6144 + 128 * 2048) * 4;

fn qwen35_file(dir: &tempfile::TempDir) -> String {
    gguf_writer::write_padded(dir.path(), "tiny-qwen35-Q8_0.gguf", &gguf_writer::tiny_qwen35(8))
}

#[test]
fn the_state_is_per_sequence_and_follows_the_layers() {
    let dir = tempfile::tempdir().unwrap();
    let p = qwen35_file(&dir);
    let plan = |extra: &[&str]| json(&[&["serve", "-m", &p, "-g", "24GiB"][..], extra].concat())["plan"].clone();
    let one = plan(&["-c", "8192", "-np", "1"]);
    assert_eq!(one["gpu_state_bytes"], 6 * STATE_PER_LAYER_SEQ);
    // KV on 2 of 8 layers: 8192 × 2 KV heads × 512 × f16.
    assert_eq!(one["gpu_kv_bytes"], 2 * 8192 * 2 * 512 * 2);
    let four = plan(&["-c", "8192", "-np", "4"]);
    assert_eq!(four["gpu_state_bytes"], 4 * 6 * STATE_PER_LAYER_SEQ);
    // The context does not grow the state; llama-server's default 4 slots hold 4 states.
    assert_eq!(plan(&["-c", "65536", "-np", "1"])["gpu_state_bytes"], one["gpu_state_bytes"]);
    assert_eq!(plan(&[])["gpu_state_bytes"], four["gpu_state_bytes"]);
    // -ngl 4: the output layer and the last 3 layers (2 state, 1 attention) on the GPU
    // (llama.cpp counts the output as layer n_layer: load_tensors' i_gpu_start = n_layer + 1 − ngl).
    let half = plan(&["-c", "8192", "-np", "1", "-ngl", "4"]);
    assert_eq!(
        (half["gpu_state_bytes"].as_u64(), half["cpu_state_bytes"].as_u64()),
        (Some(2 * STATE_PER_LAYER_SEQ), Some(4 * STATE_PER_LAYER_SEQ))
    );
    assert_eq!(half["output_on_gpu"], true);
    let text = vram().args(["serve", "-m", &p, "-g", "24GiB"]).output().unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("recurrent state (f32, one per --parallel seq)"), "{out}");
    assert!(out.contains("2 layers with a KV cache · 6 with a recurrent state"), "{out}");
}

#[test]
fn two_gpus_each_hold_their_layers_states() {
    let dir = tempfile::tempdir().unwrap();
    let p = qwen35_file(&dir);
    let v = json(&["serve", "-m", &p, "-g", "24GiB", "--tensor-split", "1,1", "-np", "1"]);
    let devices = v["split"]["plan"]["devices"].as_array().unwrap();
    let states: Vec<u64> = devices.iter().map(|d| d["state_bytes"].as_u64().unwrap()).collect();
    // llama.cpp splits the 8 layers and the output 1:1: layers 0–4 on CUDA0 (states on 0, 1, 2
    // and 4; layer 3 is attention), 5–7 and the output on CUDA1 (states on 5 and 6).
    assert_eq!(devices.iter().map(|d| d["layers"].as_u64().unwrap()).collect::<Vec<_>>(), vec![5, 3]);
    assert_eq!(states, vec![4 * STATE_PER_LAYER_SEQ, 2 * STATE_PER_LAYER_SEQ]);
}

/// `--log` puts the log's RS buffer beside vram's: one sequence (`-np 1`) on 6 state layers is
/// 6 × 280,576 f32 values = 6.42 MiB; the line is shaped as llama-memory-recurrent.cpp prints it.
#[test]
fn a_logged_rs_buffer_is_compared() {
    let dir = tempfile::tempdir().unwrap();
    let p = qwen35_file(&dir);
    let log = dir.path().join("start.log");
    std::fs::write(&log, "llama_memory_recurrent:      CUDA0 RS buffer size =     6.42 MiB\n").unwrap();
    let v = json(&["serve", "-m", &p, "-g", "24GiB", "-np", "1", "--log", log.to_str().unwrap()]);
    let rows = v["comparison"]["rows"].as_array().unwrap();
    let rs = rows.iter().find(|r| r["quantity"] == "RS buffer (recurrent state)").expect("an RS row");
    let mib = (6 * STATE_PER_LAYER_SEQ) as f64 / (1u64 << 20) as f64;
    assert!((rs["estimate"].as_f64().unwrap() - mib).abs() < 1e-9, "{rs}");
    assert_eq!(rs["log"].as_f64(), Some(6.42));
}

#[test]
fn ollama_is_refused_for_hybrids() {
    let dir = tempfile::tempdir().unwrap();
    let p = qwen35_file(&dir);
    let e = fails(&["serve", "-m", &p, "-g", "24GiB", "--engine", "ollama"], 2);
    assert!(e.contains("state-space or hybrid") && e.contains("drop --engine ollama"), "{e}");
}
