//! `vram serve` (vLLM) for vision-language models: the tower and projector on every TP rank,
//! the encoder budget of the profile run, and what is refused.

use vram_core::config::parse_config;
use vram_core::model::Model;
use vram_core::serve::{serve, ModelRunner, Quantization, ServeConfig, ServeLora, VllmEngine, VllmVersion};

const GIB: f64 = (1u64 << 30) as f64;

fn config(path: &str) -> Model {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    parse_config(&std::fs::read(&p).unwrap(), path, path).unwrap()
}

fn h100() -> ServeConfig {
    ServeConfig::new(79_220_000_000)
}

/// Qwen2.5-VL-72B at TP 4 on A100-40GB (vllm-project/vllm#16570, validation/vllm/logs.jsonl
/// `qwen2.5-vl-72b-a100-40gb-tp4`): "model weights take 34.43GiB" per rank. The config is
/// written key by key from the Hub layout (validation/vllm/SOURCES.md).
#[test]
fn qwen25_vl_72b_weights_per_rank_match_the_log() {
    let m = config("validation/vllm/qwen2.5-vl-72b.config.json");
    let cfg = ServeConfig {
        tp: 4,
        max_model_len: Some(8192),
        max_num_seqs: Some(2),
        gpu_memory_utilization: 0.95,
        mm_max_pixels: Some(1280),
        ..ServeConfig::new(42_500_000_000)
    };
    let r = serve(&m, &cfg).unwrap();
    let got = r.weights_bytes as f64 / GIB;
    assert!((got / 34.43 - 1.0).abs() < 0.01, "weights {got:.2} GiB per rank, log 34.43");
    // The tower is split over the ranks: unsplit it would add ~1 GiB per rank.
    let lm = serve(&m.language_model(), &cfg).unwrap();
    let tower = (r.weights_bytes - lm.weights_bytes) as f64 / GIB;
    assert!(tower > 0.3 && tower < 0.4, "tower + merger {tower:.3} GiB per rank");
}

/// "Encoder cache will be initialized with a budget of 16384 tokens, and profiled with 1 image
/// items of the maximum feature size" (a Qwen-VL start-up log, vllm-project/vllm#27706): the
/// processor's max_pixels 12845056 make one 3584² image of 16384 tokens.
#[test]
fn qwen_profile_encodes_one_maximum_image() {
    let m = config("validation/configs/vlm/Qwen2-VL-2B-Instruct.json");
    let r = serve(&m, &h100()).unwrap();
    let note = r.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
    assert!(note.contains("budget is 16384 tokens, profiled with 1 image(s)"), "{note}");
    assert!(note.contains("65536 patches"), "{note}");
    // A 2B language model's 8192-token forward is smaller than 65536 patches through the tower.
    assert!(r.activation_peak_at.starts_with("vision encoder"), "{}", r.activation_peak_at);
    // Capping max_pixels moves the peak back to the language model, with the outputs cached,
    // where the V1 runner's sampler (fp32 logits, probabilities, exponential draw over 1024
    // requests) outweighs 32 small images through the tower.
    let small = serve(&m, &ServeConfig { mm_max_pixels: Some(448 * 448), model_runner: Some(ModelRunner::V1), ..h100() }).unwrap();
    assert!(small.activation_peak_at.contains("encoder outputs cached"), "{}", small.activation_peak_at);
    let full_v1 = serve(&m, &ServeConfig { model_runner: Some(ModelRunner::V1), ..h100() }).unwrap();
    assert!(small.activation_peak_bytes < full_v1.activation_peak_bytes);
    assert_eq!(small.weights_bytes, r.weights_bytes);
}

#[test]
fn the_vision_tower_adds_weights_and_lowers_the_pool() {
    let m = config("validation/configs/vlm/Qwen2.5-VL-7B-Instruct.json");
    let vlm = serve(&m, &h100()).unwrap();
    let lm = serve(&m.language_model(), &h100()).unwrap();
    let tower = vlm.weights_bytes - lm.weights_bytes;
    // 669M tower + merger parameters in bf16.
    let params = m.parameters() - m.language_model().parameters();
    assert_eq!(tower, 2 * params);
    assert!(vlm.kv_cache_bytes < lm.kv_cache_bytes);
}

/// AWQ checkpoints of VLMs keep the tower in 16 bits: only the language model shrinks.
#[test]
fn quantization_leaves_the_tower_alone() {
    let m = config("validation/configs/vlm/Qwen2.5-VL-7B-Instruct.json");
    let full = serve(&m, &h100()).unwrap();
    let awq = serve(&m, &ServeConfig { quantization: Quantization::Awq, ..h100() }).unwrap();
    let full_lm = serve(&m.language_model(), &h100()).unwrap();
    let awq_lm = serve(&m.language_model(), &ServeConfig { quantization: Quantization::Awq, ..h100() }).unwrap();
    assert_eq!(full.weights_bytes - full_lm.weights_bytes, awq.weights_bytes - awq_lm.weights_bytes);
}

/// LLaVA builds its CLIP tower only up to vision_feature_layer −2: 23 of 24 layers, no post
/// LayerNorm (vllm/model_executor/models/llava.py `_get_num_hidden_layers`).
#[test]
fn llava_loads_the_tower_up_to_the_feature_layer() {
    let m = config("validation/configs/vlm/llava-1.5-7b-hf.json");
    let vlm = serve(&m, &h100()).unwrap();
    let lm = serve(&m.language_model(), &h100()).unwrap();
    let tower_all = m.multimodal.as_ref().unwrap().tower.parameters();
    let layer = tower_all.div_ceil(24) as i64;
    let loaded = ((vlm.weights_bytes - lm.weights_bytes) / 2) as i64;
    let projector = m.multimodal.as_ref().unwrap().projector_parameters(m.hidden) as i64;
    let dropped = tower_all as i64 + projector - loaded;
    assert!((dropped - layer).abs() < layer / 20, "dropped {dropped} parameters, a layer is ~{layer}");
}

#[test]
fn unmodelled_combinations_are_refused() {
    let m = config("validation/configs/vlm/Qwen2.5-VL-7B-Instruct.json");
    for (cfg, flag) in [
        (ServeConfig { pp: 2, ..h100() }, "--pipeline-parallel-size"),
        (ServeConfig { lora: Some(ServeLora { max_loras: 1, max_lora_rank: 16, max_cpu_loras: 1 }), ..h100() }, "--enable-lora"),
        (ServeConfig { engine: VllmEngine::V0, ..h100() }, "--vllm-engine"),
        (ServeConfig { mm_limit_per_prompt: Some(0), ..h100() }, "--limit-mm-per-prompt"),
    ] {
        let e = serve(&m, &cfg).unwrap_err().to_string();
        assert!(e.contains(flag), "{flag}: {e}");
    }
}

/// LLaVA-OneVision (llava_onevision.py, read in the 0.31.0 and 0.33.0 sdists): vLLM's dummy
/// image is 1153×944, the 3×4-tile pinpoint (1152×1536) plus the base: 13 crops of 729 patches
/// through the tower, and 729 + 81·98 + 81 = 8748 tokens after unpadding (no anyres_max_9
/// downscale: the ratio is 1.0999). The image outranks a 16-frame video (3137 tokens), so one
/// image is profiled, with a budget of max(8192, 8748). The projector is two plain nn.Linear,
/// whole on every rank; the tower (26 layers, post-norm dropped) is split.
#[test]
fn llava_onevision_profiles_one_8748_token_image() {
    for file in ["llava-onevision-qwen2.5-0.5b-constructed", "llava-onevision-qwen2.5-1.5b-constructed"] {
        let m = config(&format!("validation/configs/vlm/{file}.json"));
        let r = serve(&m, &h100()).unwrap();
        let note = r.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
        assert!(
            note.contains("budget is 8748 tokens, profiled with 1 image(s) of the maximum size (8748 tokens, 9477 patches each)"),
            "{file}: {note}"
        );
        assert!(r.notes.iter().any(|n| n.contains("also takes video")), "{file}");
        // Tower split over TP 2, projector and image_newline whole: the vision part of a rank
        // is half the tower plus the whole projector (within the tower's replicated norms and
        // embeddings).
        let mm = m.multimodal.as_ref().unwrap();
        let projector = mm.projector_parameters(m.hidden) as i64 * 2;
        let lm = |tp| serve(&m.language_model(), &ServeConfig { tp, ..h100() }).unwrap().weights_bytes as i64;
        let vis = |tp| serve(&m, &ServeConfig { tp, ..h100() }).unwrap().weights_bytes as i64 - lm(tp);
        let tower1 = vis(1) - projector;
        let tower2 = vis(2) - projector;
        // What TP does not halve: the patch embedding, position table and norms (~3.3 MB);
        // a split projector would take its own size off this.
        let whole = tower2 * 2 - tower1;
        assert!(whole > 0 && whole < 4 << 20, "{file}: {whole} bytes not halved (tower {tower1} at TP 1, {tower2} at TP 2)");
        // Images off: vLLM would profile two videos, not modelled.
        let e = serve(&m, &ServeConfig { mm_limit_per_prompt: Some(0), ..h100() }).unwrap_err().to_string();
        assert!(e.contains("--limit-mm-per-prompt"), "{e}");
    }
}

/// Qwen3-VL: the processor's 4096² `longest_edge` with 16-px patches merged 2×2 gives one
/// 65536-patch image of 16384 tokens — the line vLLM printed for Qwen3-VL-2B ("Encoder cache
/// will be initialized with a budget of 16384 tokens, and profiled with 1 image items of the
/// maximum feature size", vllm-project/vllm#27706). DeepStack: three (max-num-batched-tokens ×
/// text width) input buffers built with the model, and encoder outputs four text widths wide.
#[test]
fn qwen3_vl_profiles_one_4096_px_image_and_holds_deepstack_buffers() {
    let m = config("validation/configs/vlm/Qwen3-VL-2B-Instruct.json");
    let r = serve(&m, &h100()).unwrap();
    let note = r.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
    assert!(
        note.contains("budget is 16384 tokens, profiled with 1 image(s) of the maximum size (16384 tokens, 65536 patches each)"),
        "{note}"
    );
    let levels = m.multimodal.as_ref().unwrap().merger.unwrap().deepstack;
    assert_eq!(levels, 3);
    let lm = serve(&m.language_model(), &h100()).unwrap();
    let batched = 8192u64; // vLLM V1's default for online serving
    let buffers = 3 * batched * m.hidden * 2;
    let params = m.parameters() - m.language_model().parameters();
    assert_eq!(r.weights_bytes - lm.weights_bytes, 2 * params + buffers, "tower + merger + DeepStack buffers");
    assert!(note.contains(&format!("{:.2} GiB of DeepStack input buffers", buffers as f64 / GIB)), "{note}");
}

/// The DeepStack levels ride with the cached encoder outputs: with a language model whose
/// forward outweighs the encoder, the cached outputs are 4 × tokens × text width.
#[test]
fn qwen3_vl_caches_deepstack_levels_with_the_outputs() {
    let m = config("validation/configs/vlm/Qwen3-VL-30B-A3B-Instruct.json");
    let cfg = ServeConfig { model_runner: Some(ModelRunner::V1), ..h100() };
    let r = serve(&m, &cfg).unwrap();
    assert!(r.activation_peak_at.contains("encoder outputs cached"), "{}", r.activation_peak_at);
    let lm = serve(&m.language_model(), &cfg).unwrap();
    // One 16384-token image, its merger output and three DeepStack levels, in bf16.
    let outputs = 16_384 * m.hidden * 4 * 2;
    assert_eq!(r.activation_peak_bytes - lm.activation_peak_bytes, outputs);
}

/// Qwen3.5's checkpoints are vision-language models: vram reads the config as its language
/// model for training (AutoModelForCausalLM), but vLLM builds Qwen3_5ForConditionalGeneration,
/// tower included, unless --language-model-only.
#[test]
fn qwen35_is_served_with_its_tower_unless_language_model_only() {
    let m = config("validation/configs/vlm/Qwen3.5-27B.json");
    assert!(m.multimodal.is_none() && m.vision_unloaded.is_some());
    let cfg = ServeConfig { vllm_version: vram_core::serve::VllmVersion { major: 0, minor: 19 }, ..h100() };
    let with_tower = serve(&m, &cfg).unwrap();
    let lm_only = serve(&m, &ServeConfig { language_model_only: true, ..cfg.clone() }).unwrap();
    let mut vl = m.clone();
    vl.load_vision();
    let tower = vl.parameters() - m.parameters();
    // No DeepStack in Qwen3.5's tower: the weights grow by the tower and merger alone.
    assert_eq!(with_tower.weights_bytes - lm_only.weights_bytes, 2 * tower);
    assert!(with_tower.notes.iter().any(|n| n.starts_with("vision:") && n.contains("16384 tokens, 65536 patches")));
    assert!(lm_only.notes.iter().any(|n| n.starts_with("--language-model-only")));
    assert!(!lm_only.notes.iter().any(|n| n.starts_with("vision:")));
    // Images off without --language-model-only is refused, naming the flag that serves the
    // language model alone.
    let e = serve(&m, &ServeConfig { mm_limit_per_prompt: Some(0), ..cfg }).unwrap_err().to_string();
    assert!(e.contains("--language-model-only"), "{e}");
}

/// Gemma-3: the SigLIP tower over 896² images (4096 patches), pooled 4×4 into 256 embeddings
/// between `<start_of_image>` and `<end_of_image>` (258 tokens an image, gemma3_mm.py
/// `get_num_image_tokens`): from vLLM 0.13 the 8192-token budget counts the 256 embeddings and
/// profiles 32 images, before it the whole placeholder and 31. The tower's linears are split over
/// the ranks, the projector matrix is not (a plain parameter). Two rotary caches: the global
/// layers' (linear ×8: 8 × 131072 positions) and the sliding layers' own base.
#[test]
fn gemma3_profiles_32_pooled_images_and_keeps_its_projector_whole() {
    use vram_core::model::Role;
    let m = config("validation/configs/vlm/gemma-3-27b-it.json");
    let r = serve(&m, &h100()).unwrap();
    let note = r.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
    assert!(
        note.contains("budget is 8192 tokens, profiled with 32 image(s) of the maximum size (256 tokens, 4096 patches each)"),
        "{note}"
    );
    // Until 0.32 the encoder pass is the peak; from 0.33 Model Runner V2's warm-up sampling pass
    // over 1024 requests × Gemma's 262,208-entry vocabulary (14 bytes a logit) outgrows it.
    let v032 = serve(&m, &ServeConfig { vllm_version: VllmVersion { major: 0, minor: 32 }, ..h100() }).unwrap();
    assert!(v032.activation_peak_at.starts_with("vision encoder over 32 image(s)"), "{}", v032.activation_peak_at);
    assert!(r.activation_peak_at.contains("warm-up sampling pass"), "{}", r.activation_peak_at);
    assert!(r.activation_peak_bytes - r.cuda_graph_estimate_bytes > 14 * 1024 * 262_208, "{}", r.activation_peak_bytes);
    let old = serve(&m, &ServeConfig { vllm_version: VllmVersion { major: 0, minor: 12 }, ..h100() }).unwrap();
    let note = old.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
    assert!(note.contains("profiled with 31 image(s) of the maximum size (258 tokens"), "{note}");
    let vis = |tp: u64| {
        let cfg = ServeConfig { tp, ..h100() };
        serve(&m, &cfg).unwrap().weights_bytes - serve(&m.language_model(), &cfg).unwrap().weights_bytes
    };
    let mm = m.multimodal.as_ref().unwrap();
    let linear: u64 = mm
        .tower
        .tensors()
        .iter()
        .filter(|t| t.role == Role::Linear && !t.name.contains("patch_embeddings"))
        .map(|t| t.numel * t.count)
        .sum();
    // bf16: half the linears leave each of two ranks; the projector stays whole.
    assert_eq!(vis(1) - vis(2), linear);
    assert_eq!(r.rotary_cache_bytes, (8 * 131_072 + 131_072) * 128 * 2);
}

/// Llama 4: vLLM's dummy image is 16 tiles tall and one wide (mllama4.py), so 16 tiles plus the
/// global one, 144 embeddings each after the pixel shuffle (2448), plus a separator per tile row
/// and three image markers in the placeholder (2467 tokens, what vLLM before 0.13 counted):
/// three images in the 8192-token budget either way, 17 × 577 tower tokens each (the class token
/// included). The tower, its pixel-shuffle MLP and the projector load in bf16
/// beside the language model.
#[test]
fn llama4_profiles_three_16_tile_images() {
    let m = config("validation/configs/vlm/llama-4-scout-17b-16e.json");
    let cfg = ServeConfig { tp: 4, ..ServeConfig::new(150_000_000_000) };
    let r = serve(&m, &cfg).unwrap();
    let note = r.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
    assert!(
        note.contains("budget is 8192 tokens, profiled with 3 image(s) of the maximum size (2448 tokens, 9809 patches each)"),
        "{note}"
    );
    let old = serve(&m, &ServeConfig { vllm_version: VllmVersion { major: 0, minor: 12 }, ..cfg.clone() }).unwrap();
    let note = old.notes.iter().find(|n| n.starts_with("vision:")).expect("a vision note");
    assert!(note.contains("profiled with 3 image(s) of the maximum size (2467 tokens, 9809 patches each)"), "{note}");
    let lm = serve(&m.language_model(), &ServeConfig { tp: 1, ..cfg.clone() }).unwrap();
    let vlm = serve(&m, &ServeConfig { tp: 1, ..cfg }).unwrap();
    assert_eq!(vlm.weights_bytes - lm.weights_bytes, 2 * (m.parameters() - m.language_model().parameters()));
}

/// The tower's linear weights (bf16 bytes) that leave each of two ranks, over its first `layers`
/// layers.
fn half_tower_linears(m: &Model, layers: u64) -> u64 {
    use vram_core::model::Role;
    let mm = m.multimodal.as_ref().unwrap();
    mm.tower
        .tensors()
        .iter()
        .filter(|t| t.role == Role::Linear && !t.name.contains("patch_embeddings"))
        .map(|t| t.numel * if t.count == mm.tower.layers { layers } else { t.count })
        .sum()
}

fn vision_weights(m: &Model, tp: u64) -> u64 {
    let cfg = ServeConfig { tp, ..h100() };
    serve(m, &cfg).unwrap().weights_bytes - serve(&m.language_model(), &cfg).unwrap().weights_bytes
}

fn vision_note(m: &Model, cfg: &ServeConfig) -> String {
    serve(m, cfg).unwrap().notes.into_iter().find(|n| n.starts_with("vision:")).expect("a vision note")
}

/// LLaVA-NeXT (llava_next.py): the dummy image is the pinpoint with the most features — 672×672
/// for llava-v1.6-mistral's pinpoints, a 2×2 grid of 336-px tiles plus the base: 576 base
/// tokens + 48 rows × (48 + 1 newline) = 2928, the number vLLM's `get_num_image_tokens` gives;
/// two fit the 8192-token budget, 5 × 577 tower tokens each. The tower is built to its
/// feature layer (−2: 23 of 24 layers, no post-norm); the projector's linears are split over the
/// ranks, `image_newline` is not.
#[test]
fn llava_next_profiles_two_672_px_images() {
    let m = config("validation/configs/vlm/llava-v1.6-mistral-7b-hf.json");
    let note = vision_note(&m, &h100());
    assert!(
        note.contains("budget is 8192 tokens, profiled with 2 image(s) of the maximum size (2928 tokens, 2885 patches each)"),
        "{note}"
    );
    let mm = m.multimodal.as_ref().unwrap();
    let (w, t) = (mm.tower.hidden, m.hidden);
    let projector_linears = w * t + t * t;
    // bf16 (2 bytes) halves: the 23 built layers' linears and the projector's two matrices (and
    // biases) lose half on each of two ranks; the newline vector stays whole.
    let biases = 2 * t;
    assert_eq!(vision_weights(&m, 1) - vision_weights(&m, 2), half_tower_linears(&m, 23) + projector_linears + biases);
}

/// Idefics3 / SmolVLM (idefics3.py): the dummy image is resized to the processor's longest
/// edge and split into 4 × 4 tiles plus the global one; every tile is (image / patch)² tower
/// tokens and image_seq_len embeddings after the pixel shuffle. Idefics3-8B: 17 × 676 patches,
/// 17 × 169 = 2873 embeddings; the placeholder adds 39 text tokens (a fake-image marker and a
/// row/column tag per grid tile, a newline per row, the global tile's two markers and a closing
/// one), the 2912 vLLM before 0.13 counted. The connector's linear is a `ReplicatedLinear`,
/// whole on every rank.
#[test]
fn idefics3_profiles_17_tile_images_and_keeps_its_connector_whole() {
    let m = config("validation/configs/vlm/Idefics3-8B-Llama3-constructed.json");
    let note = vision_note(&m, &h100());
    assert!(note.contains("profiled with 2 image(s) of the maximum size (2873 tokens, 11492 patches each)"), "{note}");
    let old = vision_note(&m, &ServeConfig { vllm_version: VllmVersion { major: 0, minor: 12 }, ..h100() });
    assert!(old.contains("(2912 tokens, 11492 patches each)"), "{old}");
    let layers = m.multimodal.as_ref().unwrap().tower.layers;
    assert_eq!(vision_weights(&m, 1) - vision_weights(&m, 2), half_tower_linears(&m, layers));
    // SmolVLM-256M: 512-px tiles of 16-px patches (1024 each), folded 4 × 4 into 64 embeddings:
    // 17 × 64 = 1088 an image, seven in the budget.
    let small = config("validation/configs/vlm/SmolVLM-256M-Instruct-constructed.json");
    let note = vision_note(&small, &h100());
    assert!(note.contains("profiled with 7 image(s) of the maximum size (1088 tokens, 17408 patches each)"), "{note}");
}

/// PaliGemma (paligemma.py): one image of the tower's size a prompt (`get_supported_mm_limits`),
/// 256 image tokens at 224 px inserted with a `<bos>` after them; the budget holds 32 images but
/// no more than one per sequence, and the projector (`nn.Linear`) is whole on every rank.
#[test]
fn paligemma_profiles_one_image_a_sequence() {
    let m = config("validation/configs/vlm/paligemma-3b-pt-224-constructed.json");
    let r = serve(&m, &h100()).unwrap();
    assert_eq!(r.max_model_len, 8192, "GemmaConfig's default max_position_embeddings");
    let note = vision_note(&m, &h100());
    assert!(note.contains("profiled with 32 image(s) of the maximum size (256 tokens, 256 patches each)"), "{note}");
    let four = vision_note(&m, &ServeConfig { max_num_seqs: Some(4), ..h100() });
    assert!(four.contains("profiled with 4 image(s)"), "{four}");
    let old = vision_note(&m, &ServeConfig { vllm_version: VllmVersion { major: 0, minor: 12 }, ..h100() });
    assert!(old.contains("profiled with 31 image(s) of the maximum size (257 tokens"), "{old}");
    let layers = m.multimodal.as_ref().unwrap().tower.layers;
    assert_eq!(vision_weights(&m, 1) - vision_weights(&m, 2), half_tower_linears(&m, layers));
}
