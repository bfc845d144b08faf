//! `vram serve` of a .gguf file over several GPUs: `--gpus`, `--tensor-split`/`-ts`,
//! `--split-mode`/`-sm`, `--main-gpu`/`-mg`, typed or pasted in a `llama-server` command.

mod util;

#[path = "../../vram-core/tests/support/gguf_writer.rs"]
mod gguf_writer;

use util::{fails, json, vram};

/// The 4-layer test file, padded so the tensor data it promises is in the file.
fn tiny(dir: &tempfile::TempDir) -> String {
    gguf_writer::write_tiny_llama(dir.path())
}

/// A 12-layer variant of the test file: enough layers for the fit to split them.
fn tiny12(dir: &tempfile::TempDir) -> String {
    gguf_writer::write_padded(dir.path(), "tiny12.gguf", &gguf_writer::tiny_llama_layers(12))
}

fn devices(v: &serde_json::Value) -> Vec<(String, u64)> {
    v["split"]["plan"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["name"].as_str().unwrap().to_string(), d["layers"].as_u64().unwrap()))
        .collect()
}

#[test]
fn two_gpus_split_the_layers_and_print_a_row_per_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    // 4 layers + output over two equal shares: il/5 < 0.5 → layers 0–2 on CUDA0.
    let v = json(&["serve", "-m", &p, "-g", "rtx-3090", "--gpus", "2"]);
    assert_eq!(devices(&v), [("CUDA0".to_string(), 3), ("CUDA1".to_string(), 1)]);
    assert_eq!(v["split"]["plan"]["pipeline_parallel"], true);
    assert!(v["split"]["max_ctx_size"].as_u64().unwrap() >= 8192);
    let out = vram().args(["serve", "-m", &p, "-g", "rtx-3090", "--tensor-split", "1,3"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("CUDA1") && text.contains("--tensor-split 1,3") && text.contains("fullest GPU"), "{text}");
}

#[test]
fn a_pasted_llama_server_command_reads_ts_sm_mg() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let pasted = |args: &[&str]| -> serde_json::Value {
        let out = vram().args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = pasted(&["serve", "-g", "rtx-3090", "--json", "--", "llama-server", "-m", &p, "-ts", "3,1", "-ngl", "99"]);
    assert_eq!(devices(&v)[0].1, 4);
    let v = pasted(&["serve", "-g", "rtx-3090", "--gpus", "2", "--json", "--", "llama-server", "-m", &p, "-sm", "none", "-mg", "1"]);
    assert_eq!(devices(&v), [("CUDA1".to_string(), 4)]);
}

#[test]
fn bad_split_settings_exit_2_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let serve = |extra: &[&str]| fails(&[&["serve", "-m", &p, "-g", "rtx-3090"][..], extra].concat(), 2);
    assert!(serve(&["--gpus", "2", "--tensor-split", "1,1,1"]).contains("at most one proportion per GPU"));
    assert!(serve(&["--gpus", "0"]).contains("1 to 16 GPUs"));
    assert!(serve(&["--tensor-split", "3,x"]).contains("is not a number"));
    assert!(serve(&["--split-mode", "tensor"]).contains("none, layer or row"));
    assert!(serve(&["--gpus", "2", "--main-gpu", "2"]).contains("main_gpu"));
    // A vLLM model does not read them.
    assert!(fails(&["serve", "-m", "llama-3-8b", "-g", "h100", "--tensor-split", "1,1"], 2).contains("--tensor-split/-ts"));
}

#[test]
fn a_pasted_llama_server_reads_fa_and_the_cache_types() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let run = |extra: &[&str]| -> serde_json::Value {
        let out =
            vram().args([&["serve", "-g", "rtx-3090", "--json", "--", "llama-server", "-m", &p][..], extra].concat()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = run(&["-fa", "off", "-ctk", "q8_0", "-ctv", "q8_0"]);
    assert_eq!(v["config"]["flash_attn"], false);
    assert!((v["config"]["kv_bytes"].as_f64().unwrap() - 34.0 / 32.0).abs() < 1e-9);
    // `-fa` without a value (older llama.cpp) is on, and the next flag is still read.
    let v = run(&["-fa", "-c", "2048"]);
    assert_eq!((v["config"]["flash_attn"].as_bool(), v["config"]["ctx"].as_u64()), (Some(true), Some(2048)));
    let e = fails(&["serve", "-g", "rtx-3090", "--", "llama-server", "-m", &p, "-ctk", "q8_0"], 2);
    assert!(e.contains("K as q8_0 and V as f16"), "{e}");
}

/// llama-server's --fit over two GPUs (common/fit.cpp): when the even split leaves a GPU short
/// of its --fit-target, the last GPU takes the most layers that keep the margin, then the
/// first, and the front layers stay in RAM; the plan shown is the split it loads with. A split
/// the user gave is left as given, and `--fit off` plans the launch as written.
#[test]
fn fit_over_two_gpus_places_the_layers_back_to_front() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny12(&dir);
    let args = ["serve", "-m", &p, "-g", "1040MiB", "--gpus", "2", "--fit-target", "512", "--cuda-context", "512MiB"];
    let v = json(&args);
    let layers = devices(&v);
    // Each GPU holds layers and the front ones stay in RAM (CUDA1 also holds the output).
    let (k0, k1) = (layers[0].1, layers[1].1);
    assert!(k0 > 0 && k1 > 0 && k0 + k1 < 12, "{layers:?}");
    let notes = v["notes"].to_string();
    // fit.cpp counts the output as one more layer on the last GPU.
    assert!(notes.contains(&format!("--tensor-split {k0},{}", k1 + 1)) && notes.contains("the last GPU first"), "{notes}");
    for d in v["split"]["plan"]["devices"].as_array().unwrap() {
        assert!(d["total_bytes"].as_u64().unwrap() <= (1040 - 512) << 20, "{d}");
    }
    // One value per GPU is llama.cpp's list form.
    let listed = json(&["serve", "-m", &p, "-g", "1040MiB", "--gpus", "2", "--fit-target", "512,512", "--cuda-context", "512MiB"]);
    assert_eq!(devices(&listed), layers);
    // The user's split is kept, and the fit says why it cannot help.
    let given = json(&[&args[..], &["--tensor-split", "1,1"]].concat());
    assert!(given["notes"].to_string().contains("already set by user"), "{}", given["notes"]);
    let off = json(&[&args[..], &["--fit", "off"]].concat());
    assert_eq!(devices(&off), [("CUDA0".to_string(), 7), ("CUDA1".to_string(), 5)]);
}

/// The engines' multi-letter single-dash spellings typed to `vram serve` (not pasted) read as
/// their long forms: `-mg 1` once parsed as `-m g1`, `-tp 2` as an unknown `-t`.
#[test]
fn typed_engine_spellings_read_as_the_long_flags() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let short = json(&[
        "serve", "-m", &p, "-g", "rtx-3090", "--gpus", "2", "-sm", "none", "-mg", "1", "-ub", "256", "-fa", "off", "-kvu", "-fit", "off",
    ]);
    let long = json(&[
        "serve",
        "-m",
        &p,
        "-g",
        "rtx-3090",
        "--gpus",
        "2",
        "--split-mode",
        "none",
        "--main-gpu",
        "1",
        "--ubatch-size",
        "256",
        "--flash-attn",
        "off",
        "--kv-unified",
        "--fit",
        "off",
    ]);
    assert_eq!(devices(&short), [("CUDA1".to_string(), 4)]);
    assert_eq!(short["split"], long["split"]);
    let kv = json(&["serve", "-m", &p, "-g", "rtx-3090", "-ctk", "q8_0", "-ctv", "q8_0", "-c", "4096"]);
    let kv_long = json(&["serve", "-m", &p, "-g", "rtx-3090", "--kv-cache-dtype", "q8_0", "-c", "4096"]);
    assert_eq!(kv["plan"], kv_long["plan"]);
    assert!(fails(&["serve", "-m", &p, "-g", "rtx-3090", "-ctk", "q8_0", "-ctv", "f16"], 2).contains("K as q8_0 and V as f16"));
    let ts = json(&["serve", "-m", &p, "-g", "rtx-3090", "-ts", "3,1", "-fitt", "256", "-fitc", "2048"]);
    assert_eq!(devices(&ts)[0].1, 4);
    let tp = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "-tp", "2"]);
    let tp_long = json(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "--tensor-parallel-size", "2"]);
    assert_eq!(tp["plan"], tp_long["plan"]);
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "h100", "-ctk", "q8_0", "-ctv", "q8_0"], 2).contains("llama.cpp flag"));
}

/// Mixed GPUs, `--gpu rtx-4090,rtx-3080-12gb`: llama.cpp splits by each GPU's free memory when
/// no --tensor-split is given, each GPU is judged against its own memory, and --fit uses each
/// one's free memory; a list elsewhere (vLLM) is refused.
#[test]
fn mixed_gpus_split_by_free_memory_and_fit_each_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny12(&dir);
    let v = json(&["serve", "-m", &p, "-g", "rtx-4090,rtx-3080", "--fit", "off"]);
    let m = &v["split"]["plan"]["multi"];
    assert_eq!(m["gpus"], 2);
    let free: Vec<u64> = m["free_memory"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect();
    assert!(free[0] > free[1] * 3 / 2, "{free:?}");
    // 13 layers by free memory ≈ 24:10: CUDA0 takes about two thirds.
    let layers = devices(&v);
    assert!(layers[0].1 >= 7 && layers[0].1 > layers[1].1, "{layers:?}");
    assert_eq!(v["gpus"][1]["name"], "rtx-3080");
    let text =
        String::from_utf8_lossy(&vram().args(["serve", "-m", &p, "-g", "rtx-4090,rtx-3080", "--fit", "off"]).output().unwrap().stdout)
            .to_string();
    assert!(text.contains("CUDA0 rtx-4090 + CUDA1 rtx-3080") && text.contains("by free memory, as llama.cpp splits it"), "{text}");
    // --fit leaves its margin on each GPU against that GPU's own free memory.
    let f = json(&["serve", "-m", &p, "-g", "1040MiB,1100MiB", "--fit-target", "512", "--cuda-context", "512MiB"]);
    let placed = devices(&f);
    assert!(f["notes"].to_string().contains("places the layers again"), "{}", f["notes"]);
    for (d, mib) in f["split"]["plan"]["devices"].as_array().unwrap().iter().zip([1040u64, 1100]) {
        assert!(d["total_bytes"].as_u64().unwrap() <= (mib - 512) << 20, "{d}");
    }
    let even = json(&["serve", "-m", &p, "-g", "1040MiB", "--gpus", "2", "--fit-target", "512", "--cuda-context", "512MiB"]);
    assert!(devices(&even)[1].1 < placed[1].1, "the larger CUDA1 takes more: {placed:?} vs {:?}", devices(&even));
    // A --gpus count that disagrees with the list, and a list under vLLM: exit 2.
    assert!(fails(&["serve", "-m", &p, "-g", "rtx-4090,rtx-3080", "--gpus", "3"], 2).contains("--gpu lists 2 GPUs"));
    assert!(fails(&["serve", "-m", "llama-3.1-8b", "-g", "rtx-4090,rtx-3080"], 2).contains("mixed GPUs"));
}

/// `--log` with llama.cpp's --fit placement lines: each GPU's layers as the fit placed them in
/// the log beside vram's placement (fit.cpp counts the output layer as one on the last GPU).
/// The log text is in fit.cpp's line format with illustrative figures: this checks the reading
/// and the report, not vram's accuracy.
#[test]
fn a_fit_log_is_compared_layer_by_layer() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny12(&dir);
    let log = dir.path().join("fit.log");
    std::fs::write(
        &log,
        "llama_params_fit_impl: filling dense layers back-to-front:
llama_params_fit_impl:   - CUDA1 (NVIDIA GeForce RTX 3090):  7 layers,    520 MiB used,      8 MiB free
llama_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 3090):  4 layers,    515 MiB used,     13 MiB free
load_tensors:        CUDA0 model buffer size =     2.00 MiB
",
    )
    .unwrap();
    let args = [
        "serve",
        "-m",
        &p,
        "-g",
        "1040MiB",
        "--gpus",
        "2",
        "--fit-target",
        "512",
        "--cuda-context",
        "512MiB",
        "--log",
        log.to_str().unwrap(),
    ];
    let v = json(&args);
    let fit = v["log"]["fit_layers"].as_array().unwrap();
    let got: Vec<(String, u64, u64)> = fit
        .iter()
        .map(|f| (f["device"].as_str().unwrap().to_string(), f["estimate_layers"].as_u64().unwrap(), f["log_layers"].as_u64().unwrap()))
        .collect();
    // vram's side is its own plan's placement, counted as fit.cpp counts (the output is one
    // more layer on the last GPU); the log's side is the two lines above.
    let placed = devices(&v);
    let estimate = |name: &str| placed.iter().find(|d| d.0 == name).unwrap().1 + u64::from(name == "CUDA1");
    assert_eq!(got, [("CUDA1".to_string(), estimate("CUDA1"), 7), ("CUDA0".to_string(), estimate("CUDA0"), 4)]);
    let text = String::from_utf8_lossy(&vram().args(args).output().unwrap().stdout).to_string();
    assert!(text.contains(&format!("CUDA0      layers placed by --fit: vram {}, the log 4", estimate("CUDA0"))), "{text}");
    // One GPU: a row of the comparison.
    let one =
        json(&["serve", "-m", &p, "-g", "1040MiB", "--fit-target", "512", "--cuda-context", "512MiB", "--log", log.to_str().unwrap()]);
    let rows = one["comparison"]["rows"].as_array().unwrap();
    let row = rows.iter().find(|r| r["quantity"] == "layers placed by --fit").unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(row["log"], 7.0, "the first placement line, CUDA1's here");
    assert!(row["estimate"].as_f64().unwrap() >= 1.0);
}

/// `--emit` over several GPUs writes the launch as given: the split flags, and the GPU count in
/// the container's device request.
#[test]
fn emit_over_several_gpus_writes_the_split() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny(&dir);
    let out = vram().args(["serve", "-m", &p, "-g", "rtx-3090", "-ts", "3,1", "--emit", "llama-server"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("-ts 3,1"), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let docker = vram().args(["serve", "-m", &p, "-g", "rtx-4090,rtx-3080", "--emit", "docker"]).output().unwrap();
    let text = String::from_utf8_lossy(&docker.stdout);
    assert!(docker.status.success() && text.contains("count: 2"), "{text}{}", String::from_utf8_lossy(&docker.stderr));
    assert!(fails(&["serve", "-m", &p, "-g", "rtx-3090", "--gpus", "2", "--emit", "llama-server", "--emit-alternative", "1"], 2)
        .contains("one GPU"));
}

/// `-ngl auto` (-1, llama.cpp's default) leaves the layers to --fit; `-ngl all` (-2) is every
/// layer, set by the user, which --fit leaves where it is; both read typed and pasted.
#[test]
fn ngl_auto_and_all_read_as_llama_cpp_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny12(&dir);
    let base = ["serve", "-m", &p, "-g", "1040MiB", "--fit-target", "512", "-c", "4096"];
    let plain = json(&base);
    let auto = json(&[&base[..], &["-ngl", "auto"]].concat());
    let minus_one = json(&[&base[..], &["-ngl", "-1"]].concat());
    assert_eq!(auto["plan"], plain["plan"]);
    assert_eq!(minus_one["plan"], plain["plan"]);
    assert!(plain["plan"]["gpu_layers"].as_u64().unwrap() < 12, "the fit moved layers: {}", plain["plan"]);
    let all = json(&[&base[..], &["-ngl", "all"]].concat());
    assert_eq!(all["plan"]["gpu_layers"], 12);
    assert!(all["notes"].to_string().contains("already set by user"), "{}", all["notes"]);
    let pasted = vram()
        .args(["serve", "-g", "1040MiB", "--json", "--", "llama-server", "-m", &p, "-ngl", "all", "-fitt", "512", "-c", "4096"])
        .output()
        .unwrap();
    assert!(pasted.status.success(), "{}", String::from_utf8_lossy(&pasted.stderr));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&pasted.stdout).unwrap()["plan"]["gpu_layers"], 12);
    assert!(fails(&[&base[..], &["-ngl", "most"]].concat(), 2).contains("auto or all"));
}

/// `-sm none -mg 1` is one GPU to the fit: the layers it places stay on CUDA1.
#[test]
fn the_fit_under_split_mode_none_keeps_the_main_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny12(&dir);
    let v = json(&["serve", "-m", &p, "-g", "1030MiB", "--gpus", "2", "-sm", "none", "-mg", "1", "--fit-target", "500", "-c", "4096"]);
    let d = devices(&v);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].0, "CUDA1");
    assert!(d[0].1 < 12, "the fit moved layers to RAM: {d:?} {}", v["notes"]);
}
