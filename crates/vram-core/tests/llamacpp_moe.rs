//! llama.cpp tensor overrides (`--n-cpu-moe`, `--cpu-moe`, `-ot`) on a generated MoE GGUF:
//! exact per-tensor bytes moved between VRAM and RAM.

#[path = "support/gguf_writer.rs"]
mod gguf_writer;
#[path = "support/moe_gguf.rs"]
mod moe_gguf;

use moe_gguf::{EXPERT_BYTES_PER_LAYER, LAYERS, TOKEN_EMBD_BYTES};
use vram_core::gguf::{llama_cpp, llama_cpp_with, max_ctx_with, parse_override_tensor, CpuMoe, Gguf, LlamaCppConfig, Overrides};

fn moe() -> Gguf {
    moe_gguf::parsed()
}

const CFG: LlamaCppConfig = LlamaCppConfig::ONE_SEQUENCE;

fn plan(o: Overrides) -> vram_core::gguf::LlamaCppPlan {
    let g = moe();
    llama_cpp_with(&g, &g.hparams("moe.gguf").unwrap(), &CFG, &o).unwrap()
}

fn ot(v: &str) -> Overrides {
    Overrides { tensor: parse_override_tensor(v).unwrap(), cpu_moe: CpuMoe::None, ..Default::default() }
}

/// The expert bytes per layer are what the header says: sum the file's own tensor infos.
#[test]
fn the_fixture_expert_bytes_match_the_header() {
    let g = moe();
    let l0: u64 = g.tensors.iter().filter(|t| t.name.starts_with("blk.0.") && t.name.contains("_exps")).map(|t| t.bytes).sum();
    assert_eq!(l0, EXPERT_BYTES_PER_LAYER);
}

#[test]
fn cpu_moe_moves_every_layers_experts_to_ram_and_nothing_else() {
    let g = moe();
    let base = llama_cpp(&g, &g.hparams("moe.gguf").unwrap(), &CFG).unwrap();
    let p = plan(Overrides { tensor: vec![], cpu_moe: CpuMoe::All, ..Default::default() });
    assert_eq!(p.overridden_to_cpu_bytes, LAYERS * EXPERT_BYTES_PER_LAYER);
    assert_eq!(p.overridden_tensors, 3 * LAYERS);
    assert_eq!(p.gpu_weights_bytes, base.gpu_weights_bytes - LAYERS * EXPERT_BYTES_PER_LAYER);
    assert_eq!(p.cpu_weights_bytes, TOKEN_EMBD_BYTES + LAYERS * EXPERT_BYTES_PER_LAYER);
    // The KV cache follows the layers, not the overrides.
    assert_eq!((p.gpu_kv_bytes, p.cpu_kv_bytes), (base.gpu_kv_bytes, base.cpu_kv_bytes));
    assert_eq!(p.gpu_total_bytes, base.gpu_total_bytes - LAYERS * EXPERT_BYTES_PER_LAYER);
}

/// `--n-cpu-moe 2` is `blk\.0\.ffn_…_exps` and `blk\.1\.ffn_…_exps`: layers 10 and 11 are not
/// caught by a prefix match on `blk.1`.
#[test]
fn n_cpu_moe_takes_exactly_the_first_n_layers() {
    let p = plan(Overrides { tensor: vec![], cpu_moe: CpuMoe::FirstLayers(2), ..Default::default() });
    assert_eq!(p.overridden_to_cpu_bytes, 2 * EXPERT_BYTES_PER_LAYER);
    assert_eq!(p.overridden_tensors, 6);
    // More than the layer count is every layer, as in llama.cpp.
    let all = plan(Overrides { tensor: vec![], cpu_moe: CpuMoe::FirstLayers(1000), ..Default::default() });
    assert_eq!(all.overridden_to_cpu_bytes, LAYERS * EXPERT_BYTES_PER_LAYER);
}

#[test]
fn override_tensor_regexes_place_what_they_match() {
    assert_eq!(plan(ot("exps=CPU")).overridden_to_cpu_bytes, LAYERS * EXPERT_BYTES_PER_LAYER);
    // Layers 10 and 11, as users write it.
    assert_eq!(plan(ot(r"blk\.(1[0-9])\.ffn_.*_exps=CPU")).overridden_to_cpu_bytes, 2 * EXPERT_BYTES_PER_LAYER);
    // Two pairs in one value; the first match wins, so `exps=CUDA0` keeps layer 0's experts on the GPU.
    let p = plan(ot(r"blk\.0\.ffn_.*_exps=CUDA0,exps=CPU"));
    assert_eq!(p.overridden_to_cpu_bytes, (LAYERS - 1) * EXPERT_BYTES_PER_LAYER);
    // The token embeddings, on the CPU by default, can be sent to the GPU.
    let e = plan(ot("token_embd=CUDA0"));
    assert_eq!((e.overridden_to_gpu_bytes, e.overridden_to_cpu_bytes, e.cpu_weights_bytes), (TOKEN_EMBD_BYTES, 0, 0));
}

/// With -ngl 6 only the output and layers 7 to 11 are on the GPU (llama.cpp counts the output
/// as the last of the 6): experts of CPU layers are not "moved".
#[test]
fn experts_of_layers_already_in_ram_are_not_counted_as_moved() {
    let g = moe();
    let hp = g.hparams("moe.gguf").unwrap();
    let c = LlamaCppConfig { n_gpu_layers: 6, ..CFG };
    let p = llama_cpp_with(&g, &hp, &c, &Overrides { tensor: vec![], cpu_moe: CpuMoe::All, ..Default::default() }).unwrap();
    assert_eq!(p.overridden_to_cpu_bytes, 5 * EXPERT_BYTES_PER_LAYER);
    let base = llama_cpp(&g, &hp, &c).unwrap();
    assert_eq!(p.cpu_weights_bytes, base.cpu_weights_bytes + 5 * EXPERT_BYTES_PER_LAYER);
}

#[test]
fn max_ctx_uses_the_same_placement() {
    let g = moe();
    let hp = g.hparams("moe.gguf").unwrap();
    let all = Overrides { tensor: vec![], cpu_moe: CpuMoe::All, ..Default::default() };
    // A budget 256 tokens of everything-on-GPU cannot meet, but the same plan without the experts can.
    let with = llama_cpp_with(&g, &hp, &LlamaCppConfig { ctx: 256, ..CFG }, &all).unwrap().gpu_total_bytes;
    assert_eq!(max_ctx_with(&g, &hp, &CFG, &Overrides::default(), with, 1 << 20).unwrap(), None);
    assert_eq!(max_ctx_with(&g, &hp, &CFG, &all, with, 1 << 20).unwrap(), Some(256));
}

#[test]
fn bad_override_values_are_clear_errors() {
    for (v, says) in [
        ("exps", "PATTERN=BUFTYPE"),
        ("exps=GPU", "unknown buffer type `GPU`"),
        ("exps=cpu", "unknown buffer type `cpu`"),
        ("exps=CUDA", "unknown buffer type `CUDA`"),
        ("exps=CUDA123", "unknown buffer type `CUDA123`"),
        ("blk\\.(1[0-9]=CPU", "not a valid regular expression"),
        ("=CPU", "empty"),
        ("exps=CPU,", "PATTERN=BUFTYPE"),
    ] {
        let e = parse_override_tensor(v).unwrap_err().to_string();
        assert!(e.contains(says), "{v}: {e}");
    }
}

/// llama.cpp resolves `-ot exps=CUDA0` against `--cpu-moe` by command-line order, which vram
/// does not keep: the conflict is refused, not guessed.
#[test]
fn a_gpu_override_that_contradicts_the_moe_flags_is_refused() {
    let g = moe();
    let o = Overrides { tensor: parse_override_tensor("exps=CUDA0").unwrap(), cpu_moe: CpuMoe::FirstLayers(1), ..Default::default() };
    let e = llama_cpp_with(&g, &g.hparams("moe.gguf").unwrap(), &CFG, &o).unwrap_err().to_string();
    assert!(e.contains("blk.0.ffn_gate_exps.weight") && e.contains("command line"), "{e}");
}

/// The routed experts are read from the header (`expert_count`, `expert_used_count`,
/// `expert_feed_forward_length`), and sending a GPU layer's experts to RAM grows the GPU's
/// compute buffer by op offload's copy of the largest down-projection expert tensor held there
/// (validation/llamacpp/h200: Qwen3-30B-A3B and gpt-oss-20b with `-ot exps=CPU`/`--n-cpu-moe`).
#[test]
fn routed_experts_are_read_and_ram_experts_add_the_offload_copy() {
    let g = moe();
    let hp = g.hparams("moe.gguf").unwrap();
    let m = hp.moe.expect("a MoE header");
    assert_eq!((m.experts, m.used, m.ff), (8, 2, 128));
    let gpu = llama_cpp(&g, &hp, &CFG).unwrap();
    let ram = llama_cpp_with(&g, &hp, &CFG, &Overrides { tensor: vec![], cpu_moe: CpuMoe::All, ..Default::default() }).unwrap();
    // Here the copy (one layer's 278,528-byte down experts) is below the attention phase.
    assert!(ram.gpu_compute_bytes >= gpu.gpu_compute_bytes);
    // The copy's term: the copy, one expert width and one hidden state per used expert, and two
    // hidden states, all f32 over the 512-token ubatch, beside the KQ mask (4096 × 512 f16).
    let ctx = 4096;
    let copy = 1u64 << 30;
    let with = vram_core::gguf::compute_buffer_bytes(&hp, &CFG, ctx, true, copy);
    let per_token = m.used * m.ff + m.used * hp.embd + 2 * hp.embd;
    assert_eq!(with, 4096 * 512 * 2 + copy + 512 * 4 * per_token);
    assert!(vram_core::gguf::compute_buffer_bytes(&hp, &CFG, ctx, true, 0) < copy);
    // A dense header has none.
    let dense = {
        let b = gguf_writer::tiny_llama().bytes();
        match vram_core::gguf::parse(&b, "tiny.gguf").unwrap() {
            vram_core::gguf::Parsed::Complete(g) => *g,
            vram_core::gguf::Parsed::NeedMore(n) => panic!("needs {n}"),
        }
    };
    assert!(dense.hparams("tiny.gguf").unwrap().moe.is_none());
}
