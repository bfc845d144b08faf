//! llama.cpp alternatives on a generated MoE GGUF: each one re-planned, the offload counts the
//! fewest (or most) that fit.

#[path = "support/gguf_writer.rs"]
mod gguf_writer;
#[path = "support/moe_gguf.rs"]
mod moe_gguf;

use vram_core::gguf::{llama_cpp_with, CpuMoe, Gguf, LlamaCppConfig, Overrides};
use vram_core::serve_advice::{self, ServeChange};

fn moe() -> Gguf {
    moe_gguf::parsed()
}

const CFG: LlamaCppConfig = LlamaCppConfig::ONE_SEQUENCE;

#[test]
fn llama_cpp_alternatives_are_replans_and_offload_is_tight() {
    let g = moe();
    let hp = g.hparams("moe.gguf").unwrap();
    let none = Overrides::default();
    let full = llama_cpp_with(&g, &hp, &CFG, &none).unwrap().gpu_total_bytes;
    let budget = full - full / 10;
    let adv = serve_advice::llama_cpp(&g, &hp, &CFG, &none, budget).unwrap();
    assert!(adv.needed);
    let moe = adv.alternatives.iter().find(|a| a.flags[0].name == "--n-cpu-moe").expect("an --n-cpu-moe alternative");
    let n: u64 = moe.flags[0].value.as_ref().unwrap().parse().unwrap();
    let at = |n: u64| {
        let o = Overrides { tensor: vec![], cpu_moe: CpuMoe::FirstLayers(n), ..Default::default() };
        llama_cpp_with(&g, &hp, &CFG, &o).unwrap().gpu_total_bytes <= budget
    };
    assert!(at(n) && (n == 1 || !at(n - 1)), "{n}");
    let ngl = adv.alternatives.iter().find(|a| a.flags[0].name == "-ngl").expect("an -ngl alternative");
    let k: u64 = ngl.flags[0].value.as_ref().unwrap().parse().unwrap();
    let fits_ngl = |k: u64| llama_cpp_with(&g, &hp, &LlamaCppConfig { n_gpu_layers: k, ..CFG }, &none).unwrap().gpu_total_bytes <= budget;
    assert!(fits_ngl(k) && !fits_ngl(k + 1), "{k}");
    // Each alternative's numbers are a re-plan with its change.
    if let Some(c) = adv.alternatives.iter().find(|a| a.change == ServeChange::MaxModelLen) {
        let ctx: u64 = c.flags[0].value.as_ref().unwrap().parse().unwrap();
        let p = llama_cpp_with(&g, &hp, &LlamaCppConfig { ctx, ..CFG }, &none).unwrap();
        assert_eq!(c.kv_tokens, p.ctx);
        assert!(c.fits && p.gpu_total_bytes <= budget);
    }
    // A fitting alternative serves its own context at least.
    for a in adv.alternatives.iter().filter(|a| a.fits) {
        assert!(a.longest_max_model_len >= a.kv_tokens.min(CFG.ctx) && a.longest_max_model_len > 0, "{a:?}");
    }
    // The same file fits a bigger budget: no advice needed.
    assert!(!serve_advice::llama_cpp(&g, &hp, &CFG, &none, full).unwrap().needed);
}
