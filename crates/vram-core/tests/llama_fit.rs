//! llama.cpp's `--fit` (common/fit.cpp) on generated GGUFs: the context left unset starts at the
//! training context and is cut by llama.cpp's own interpolation to leave the margin free; past
//! the minimum context, weights go to RAM unless the user placed them.

#[path = "support/gguf_writer.rs"]
mod gguf_writer;
#[path = "support/moe_gguf.rs"]
mod moe_gguf;

use vram_core::gguf::{llama_cpp_with, parse_override_tensor, parse_with, CpuMoe, Gguf, LlamaCppConfig, Overrides, Parsed};
use vram_core::llama_fit::{fit, fit_used, FitAction, FitSettings, Fraction, DEFAULT_MARGIN};
use vram_core::llama_split::{plan, MultiGpu, SplitMode};

fn parsed(w: &gguf_writer::Writer) -> Gguf {
    match parse_with(&w.bytes(), "t.gguf", None).unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(_) => panic!("incomplete"),
    }
}

fn auto() -> FitSettings {
    FitSettings { margins: vec![DEFAULT_MARGIN], min_ctx: Some(4096), ctx_auto: true, layers_auto: true }
}

fn used(g: &Gguf, c: &LlamaCppConfig, o: &Overrides) -> u64 {
    fit_used(&llama_cpp_with(g, &g.hparams("t").unwrap(), c, o).unwrap())
}

/// Plenty of memory: the training context (8192 for this file), unchanged. Too little for it:
/// common/fit.cpp's interpolation between the training context and --fit-ctx, rounded down to
/// 256, which leaves the margin free; `-c 0` asks for the whole training context and gets it.
#[test]
fn an_unset_context_is_the_training_context_cut_to_leave_the_margin() {
    let g = parsed(&gguf_writer::tiny_llama());
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig::ONE_SEQUENCE;
    let none = Overrides::default();
    let f = fit(&g, &hp, &c, &none, None, &[64 << 30], &auto()).unwrap();
    assert_eq!((f.config.ctx, &f.action), (8192, &FitAction::NoChange));
    let full = used(&g, &LlamaCppConfig { ctx: 8192, ..c }, &none);
    let min = used(&g, &LlamaCppConfig { ctx: 4096, ..c }, &none);
    // Free memory a third of the way between the two: the margin on top of it.
    let target = min + (full - min) / 3;
    let f = fit(&g, &hp, &c, &none, None, &[target + DEFAULT_MARGIN], &auto()).unwrap();
    assert_eq!(f.action, FitAction::ContextReduced { from: 8192 });
    let expect = 4096 + (4096u128 * (target - min) as u128 / (full - min) as u128) as u64;
    assert_eq!(f.config.ctx, expect - expect % 256);
    assert!(used(&g, &f.config, &none) <= target);
    assert_eq!(f.config.n_gpu_layers, c.n_gpu_layers, "layers untouched");
    // -c 0: the training context whatever it costs; a context the user gave is never cut.
    let full_ctx = FitSettings { min_ctx: None, ..auto() };
    assert_eq!(fit(&g, &hp, &c, &none, None, &[target + DEFAULT_MARGIN], &full_ctx).unwrap().config.ctx, 8192);
    let given = FitSettings { ctx_auto: false, ..auto() };
    let f = fit(&g, &hp, &LlamaCppConfig { ctx: 8192, ..c }, &none, None, &[target + DEFAULT_MARGIN], &given).unwrap();
    assert_eq!(f.config.ctx, 8192);
    assert_eq!(f.action, FitAction::LayersPlaced);
    assert!(f.config.n_gpu_layers < hp.layers + 1);
}

/// Even --fit-ctx does not leave the margin: a dense model keeps the most layers that do (and
/// one more does not); with -ngl set the fit stops and says why.
#[test]
fn past_the_minimum_context_layers_go_to_ram_unless_the_user_placed_them() {
    let g = parsed(&gguf_writer::tiny_llama());
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig::ONE_SEQUENCE;
    let none = Overrides::default();
    let at_min = LlamaCppConfig { ctx: 4096, ..c };
    let half = used(&g, &LlamaCppConfig { n_gpu_layers: 2, ..at_min }, &none);
    let f = fit(&g, &hp, &c, &none, None, &[half + DEFAULT_MARGIN], &auto()).unwrap();
    assert_eq!((f.action.clone(), f.config.ctx), (FitAction::LayersPlaced, 4096));
    assert!(f.config.n_gpu_layers >= 2, "{}", f.config.n_gpu_layers);
    assert!(used(&g, &f.config, &none) <= half);
    assert!(used(&g, &LlamaCppConfig { n_gpu_layers: f.config.n_gpu_layers + 1, ..at_min }, &none) > half);
    let placed = FitSettings { layers_auto: false, ..auto() };
    let f = fit(&g, &hp, &c, &none, None, &[half + DEFAULT_MARGIN], &placed).unwrap();
    assert!(matches!(f.action, FitAction::CannotFit { .. }));
    assert_eq!((f.config.ctx, f.config.n_gpu_layers), (4096, c.n_gpu_layers));
}

/// A MoE model keeps its dense weights on the GPU first, then as many layers' experts as fit,
/// the front layers first (common/fit.cpp steps 3 and 4): the back layers' experts go to RAM by
/// per-layer patterns, one more layer may keep part of its FFN, and one more full layer would
/// not fit.
#[test]
fn a_moe_model_moves_experts_before_layers() {
    let g = moe_gguf::parsed();
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig::ONE_SEQUENCE;
    let none = Overrides::default();
    let at_min = LlamaCppConfig { ctx: 4096, n_gpu_layers: hp.layers + 1, ..c };
    // Experts of layers 7–11 in RAM: a budget between dense-only and everything.
    let back = |from: u64| Overrides {
        tensor: parse_override_tensor(&format!(
            "blk\\.({})\\.ffn_.*_exps=CPU",
            (from..hp.layers).map(|i| i.to_string()).collect::<Vec<_>>().join("|")
        ))
        .unwrap(),
        cpu_moe: CpuMoe::None,
        ..Default::default()
    };
    let budget = used(&g, &at_min, &back(7));
    let f = fit(&g, &hp, &c, &none, None, &[budget + DEFAULT_MARGIN], &auto()).unwrap();
    assert_eq!(f.action, FitAction::LayersPlaced);
    assert_eq!(f.config.n_gpu_layers, hp.layers + 1);
    let layers = f.layers.clone().unwrap();
    assert_eq!(layers.len(), 1);
    // 13 "layers" with the output; the full ones are the front 7, the output layer's pattern
    // (blk.12) matches nothing.
    assert_eq!((layers[0].n_layer, layers[0].n_layer - layers[0].n_part), (13, 7), "{layers:?}");
    let patterns: Vec<&str> = f.overrides.tensor.iter().map(|o| o.pattern.as_str()).collect();
    assert!(patterns.first().unwrap().starts_with(r"blk\.7\.") && patterns.last().unwrap().starts_with(r"blk\.12\."), "{patterns:?}");
    assert!(used(&g, &f.config, &f.overrides) <= budget);
    assert!(used(&g, &at_min, &back(8)) > budget, "one more full layer does not fit");
    // The first partial layer keeps part of its FFN only if that fits: under the budget either way.
    // The first partial layer's pattern follows its fraction: only the experts (MOE), or more of
    // its FFN when part of the layer stays (ATTN/UP/GATE).
    assert_eq!(patterns[0].ends_with("_(ch|)exps"), layers[0].overflow == Fraction::Moe, "{patterns:?} {layers:?}");
    // Enough for every expert: no change at all.
    let all = used(&g, &at_min, &none);
    let f = fit(&g, &hp, &c, &none, None, &[all + DEFAULT_MARGIN], &FitSettings { ctx_auto: false, ..auto() }).unwrap();
    assert_eq!(f.action, FitAction::NoChange);
    assert!(f.overrides.tensor.is_empty());
}

fn two_gpus() -> MultiGpu {
    MultiGpu { gpus: 2, tensor_split: Vec::new(), mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() }
}

fn device_used(g: &Gguf, c: &LlamaCppConfig, o: &Overrides, m: &MultiGpu) -> Vec<u64> {
    plan(g, &g.hparams("t").unwrap(), c, o, m)
        .unwrap()
        .devices
        .iter()
        .map(|d| d.weights_bytes + d.row_split_bytes + d.kv_bytes + d.state_bytes + d.compute_bytes)
        .collect()
}

/// Two GPUs that cannot hold a 12-layer dense model: the last GPU takes the most layers (the
/// output among them) that keep its margin, the first the most of the rest, and the front
/// layers stay in RAM; the split is the layer counts, as fit.cpp writes --tensor-split.
#[test]
fn over_two_gpus_the_last_fills_first() {
    let g = parsed(&gguf_writer::tiny_llama_layers(12));
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig { ctx: 4096, n_gpu_layers: 99, ..LlamaCppConfig::ONE_SEQUENCE };
    let none = Overrides::default();
    let m = two_gpus();
    let given = FitSettings { ctx_auto: false, ..auto() };
    // Each GPU a third of the model: about 8 of the 13 layers fit in all.
    let whole = device_used(&g, &c, &none, &m).iter().sum::<u64>();
    let free = whole / 3 + DEFAULT_MARGIN;
    let f = fit(&g, &hp, &c, &none, Some(&m), &[free], &given).unwrap();
    assert_eq!(f.action, FitAction::LayersPlaced);
    let layers = f.layers.clone().unwrap();
    let (k0, k1) = (layers[0].n_layer, layers[1].n_layer);
    assert!(k0 > 0 && k1 > 0 && k0 + k1 < 13, "{layers:?}");
    let fm = f.multi.clone().unwrap();
    assert_eq!(fm.tensor_split, vec![k0 as f64, k1 as f64]);
    assert_eq!(f.config.n_gpu_layers, k0 + k1);
    let target = free - DEFAULT_MARGIN;
    let at = |a: u64, b: u64| {
        let m = MultiGpu { tensor_split: vec![a as f64, b as f64], ..two_gpus() };
        device_used(&g, &LlamaCppConfig { n_gpu_layers: a + b, ..c }, &none, &m)
    };
    let u = at(k0, k1);
    assert!(u[0] <= target && u[1] <= target, "{u:?} vs {target}");
    assert!(at(k0, k1 + 1)[1] > target, "CUDA1 holds the most it can");
    assert!(at(k0 + 1, k1)[0] > target, "CUDA0 holds the most it can");
    // A split the user gave is theirs: the fit says so and leaves it.
    let ts = MultiGpu { tensor_split: vec![1.0, 1.0], ..two_gpus() };
    let f = fit(&g, &hp, &c, &none, Some(&ts), &[free], &FitSettings { layers_auto: false, ..given.clone() }).unwrap();
    assert!(matches!(f.action, FitAction::CannotFit { .. }));
    assert_eq!(f.multi.unwrap().tensor_split, vec![1.0, 1.0]);
    // -sm row over two GPUs: fit.cpp does not move row-split weights.
    let row = MultiGpu { mode: SplitMode::Row, ..two_gpus() };
    let row_free = device_used(&g, &c, &none, &row).into_iter().max().unwrap() / 2 + DEFAULT_MARGIN;
    let f = fit(&g, &hp, &c, &none, Some(&row), &[row_free], &given).unwrap();
    assert!(matches!(f.action, FitAction::CannotFit { .. }), "{:?} {:?}", f.action, device_used(&g, &c, &none, &row));
}

/// Over several GPUs the context cut sets aside (GPUs + 1) × half a layer's weights for the
/// waste of whole layers per GPU before it interpolates, then places the layers again.
#[test]
fn over_two_gpus_the_context_cut_sets_aside_whole_layer_waste() {
    let g = parsed(&gguf_writer::tiny_llama_layers(12));
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 99, ..LlamaCppConfig::ONE_SEQUENCE };
    let none = Overrides::default();
    let m = two_gpus();
    let full_c = LlamaCppConfig { ctx: 8192, ..c };
    let min_c = LlamaCppConfig { ctx: 4096, ..c };
    let full: u64 = device_used(&g, &full_c, &none, &m).iter().sum();
    let min: u64 = device_used(&g, &min_c, &none, &m).iter().sum();
    let model: u64 = plan(&g, &hp, &full_c, &none, &m).unwrap().devices.iter().map(|d| d.weights_bytes).sum();
    let set_aside = 3 * (model / 12) / 2;
    let round = |ctx: u64| (ctx - ctx % 256).max(4096);
    let interpolate = |target: u64| round(4096 + (4096u128 * (target - min) as u128 / (full - min) as u128) as u64);
    // Free memory between the minimum and the full context, at a point where the set-aside
    // changes the rounded context (so this test can tell).
    let free_total = (1..20u64)
        .map(|k| (min + set_aside + (full - min - set_aside) * k / 20) / 2 * 2)
        .find(|t| interpolate(t - set_aside) != interpolate(*t))
        .unwrap();
    let free = free_total / 2 + DEFAULT_MARGIN;
    let f = fit(&g, &hp, &c, &none, Some(&m), &[free], &auto()).unwrap();
    assert_eq!(f.action, FitAction::ContextReduced { from: 8192 });
    assert_eq!(f.config.ctx, interpolate(free_total - set_aside));
    assert!(f.layers.is_some(), "the layers are placed again after the cut");
}

/// A MoE model over two GPUs: the dense weights of every layer go to the GPUs first, then the
/// first GPU takes experts front to back; every GPU keeps its margin.
#[test]
fn a_moe_model_over_two_gpus_keeps_every_margin() {
    let g = moe_gguf::parsed();
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig { ctx: 4096, n_gpu_layers: 99, ..LlamaCppConfig::ONE_SEQUENCE };
    let none = Overrides::default();
    let m = two_gpus();
    let given = FitSettings { ctx_auto: false, ..auto() };
    let whole: u64 = device_used(&g, &c, &none, &m).iter().sum();
    let free = whole * 26 / 100 + DEFAULT_MARGIN;
    let f = fit(&g, &hp, &c, &none, Some(&m), &[free], &given).unwrap();
    assert_eq!(f.action, FitAction::LayersPlaced);
    assert_eq!(f.config.n_gpu_layers, hp.layers + 1, "every layer's dense weights on a GPU");
    let layers = f.layers.clone().unwrap();
    // Real experts (blk.0–11, not the output layer's empty blk.12 pattern) in RAM.
    assert!(f.overrides.tensor.iter().any(|o| o.buffer_type == "CPU" && !o.pattern.starts_with(r"blk\.12\.")), "{layers:?}");
    let u = device_used(&g, &f.config, &f.overrides, f.multi.as_ref().unwrap());
    assert!(u.iter().all(|b| *b <= free - DEFAULT_MARGIN), "{u:?}");
    // An overflow to the next GPU is an -ot pattern naming CUDA1.
    for o in &f.overrides.tensor {
        assert!(o.buffer_type == "CPU" || o.buffer_type == "CUDA1", "{}", o.buffer_type);
    }
}
