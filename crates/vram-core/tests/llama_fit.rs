//! llama.cpp's `--fit` (common/fit.cpp) on generated GGUFs: the context left unset starts at the
//! training context and is cut by llama.cpp's own interpolation to leave the margin free; past
//! the minimum context, weights go to RAM unless the user placed them.

#[path = "support/gguf_writer.rs"]
mod gguf_writer;
#[path = "support/moe_gguf.rs"]
mod moe_gguf;

use vram_core::gguf::{llama_cpp_with, parse_with, CpuMoe, Gguf, LlamaCppConfig, Overrides, Parsed};
use vram_core::llama_fit::{fit, fit_used, FitAction, FitSettings, DEFAULT_MARGIN};

fn parsed(w: &gguf_writer::Writer) -> Gguf {
    match parse_with(&w.bytes(), "t.gguf", None).unwrap() {
        Parsed::Complete(g) => *g,
        Parsed::NeedMore(_) => panic!("incomplete"),
    }
}

const AUTO: FitSettings = FitSettings { margin: DEFAULT_MARGIN, min_ctx: Some(4096), ctx_auto: true, layers_auto: true };

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
    let f = fit(&g, &hp, &c, &none, 64 << 30, &AUTO).unwrap();
    assert_eq!((f.config.ctx, &f.action), (8192, &FitAction::NoChange));
    let full = used(&g, &LlamaCppConfig { ctx: 8192, ..c }, &none);
    let min = used(&g, &LlamaCppConfig { ctx: 4096, ..c }, &none);
    // Free memory a third of the way between the two: the margin on top of it.
    let target = min + (full - min) / 3;
    let f = fit(&g, &hp, &c, &none, target + DEFAULT_MARGIN, &AUTO).unwrap();
    assert_eq!(f.action, FitAction::ContextReduced { from: 8192 });
    let expect = 4096 + (4096u128 * (target - min) as u128 / (full - min) as u128) as u64;
    assert_eq!(f.config.ctx, expect - expect % 256);
    assert!(used(&g, &f.config, &none) <= target);
    assert_eq!(f.config.n_gpu_layers, c.n_gpu_layers, "layers untouched");
    // -c 0: the training context whatever it costs; a context the user gave is never cut.
    let full_ctx = FitSettings { min_ctx: None, ..AUTO };
    assert_eq!(fit(&g, &hp, &c, &none, target + DEFAULT_MARGIN, &full_ctx).unwrap().config.ctx, 8192);
    let given = FitSettings { ctx_auto: false, ..AUTO };
    let f = fit(&g, &hp, &LlamaCppConfig { ctx: 8192, ..c }, &none, target + DEFAULT_MARGIN, &given).unwrap();
    assert_eq!(f.config.ctx, 8192);
    assert_eq!(f.action, FitAction::WeightsToRam);
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
    let f = fit(&g, &hp, &c, &none, half + DEFAULT_MARGIN, &AUTO).unwrap();
    assert_eq!((f.action.clone(), f.config.ctx), (FitAction::WeightsToRam, 4096));
    assert!(f.config.n_gpu_layers >= 2, "{}", f.config.n_gpu_layers);
    assert!(used(&g, &f.config, &none) <= half);
    assert!(used(&g, &LlamaCppConfig { n_gpu_layers: f.config.n_gpu_layers + 1, ..at_min }, &none) > half);
    let placed = FitSettings { layers_auto: false, ..AUTO };
    let f = fit(&g, &hp, &c, &none, half + DEFAULT_MARGIN, &placed).unwrap();
    assert!(matches!(f.action, FitAction::CannotFit { .. }));
    assert_eq!((f.config.ctx, f.config.n_gpu_layers), (4096, c.n_gpu_layers));
}

/// A MoE model keeps its dense weights on the GPU first: every layer stays, and the experts of
/// as few layers as needed go to RAM (as `--n-cpu-moe N`).
#[test]
fn a_moe_model_moves_experts_before_layers() {
    let g = moe_gguf::parsed();
    let hp = g.hparams("t").unwrap();
    let c = LlamaCppConfig::ONE_SEQUENCE;
    let none = Overrides::default();
    let at_min = LlamaCppConfig { ctx: 4096, n_gpu_layers: hp.layers + 1, ..c };
    let two = Overrides { tensor: Vec::new(), cpu_moe: CpuMoe::FirstLayers(2) };
    let budget = used(&g, &at_min, &two);
    let f = fit(&g, &hp, &c, &none, budget + DEFAULT_MARGIN, &AUTO).unwrap();
    assert_eq!(f.action, FitAction::WeightsToRam);
    assert_eq!(f.overrides.cpu_moe, CpuMoe::FirstLayers(2));
    assert_eq!(f.config.n_gpu_layers, hp.layers + 1);
}
