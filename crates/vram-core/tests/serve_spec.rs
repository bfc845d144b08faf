//! vLLM speculative decoding (`--speculative-config`): the drafter's weights, KV layers,
//! sampler pass and CUDA-graph sizes, held to figures derived by hand from vLLM's source
//! (0.19.1 and 0.33.0 sdists) and a real EAGLE-3 head config (validation/vllm/spec_heads/), and
//! the KV pool of an MTP run against a public start-up log (validation/vllm/spec_logs.jsonl).

use std::path::PathBuf;

use vram_core::serve::{serve, ServeConfig, ServeReport, VllmVersion};
use vram_core::serve_graphs::capture_sizes;
use vram_core::serve_spec::{parse_head_config, round_capture_sizes, SpecMethod, Speculative};
use vram_core::{gpu, parse_config, presets, Model};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn config(path: &str) -> Model {
    let bytes = std::fs::read(root().join(path)).unwrap();
    parse_config(&bytes, path, path).unwrap()
}

fn head() -> Model {
    let path = "validation/vllm/spec_heads/qwen3-32b-eagle3.config.json";
    let bytes = std::fs::read(root().join(path)).unwrap();
    parse_head_config(&bytes, "qwen3-32b-eagle3", path).unwrap()
}

fn h100(minor: u32) -> ServeConfig {
    let g = gpu::lookup("h100").unwrap();
    ServeConfig {
        vllm_version: VllmVersion { major: 0, minor },
        max_model_len: Some(8192),
        ..ServeConfig::new(gpu::cuda_total(&g).0).with_gpu_traits(&g)
    }
}

fn spec(method: SpecMethod, k: u64, draft: Option<Model>) -> Option<Speculative> {
    Some(Speculative { method, num_speculative_tokens: k, draft: draft.map(Box::new) })
}

fn run(m: &Model, cfg: &ServeConfig) -> ServeReport {
    serve(m, cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// The Qwen3-32B EAGLE-3 head (SpecForge's config: hidden 5120, 64 heads of 80, 8 KV heads,
/// intermediate 25,600, draft vocabulary 32,000), counted tensor by tensor as llama_eagle3.py
/// builds it, on one GPU and on two.
#[test]
fn an_eagle3_head_is_priced_tensor_by_tensor() {
    let target = config("validation/vllm/configs/qwen3-32b.config.json");
    let d = head();
    assert_eq!((d.hidden, d.heads, d.kv_heads, d.head_dim, d.layers, d.draft_vocab), (5120, 64, 8, 80, 1, Some(32000)));
    for tp in [1u64, 2] {
        let base = ServeConfig { tp, ..h100(19) };
        let plain = run(&target, &base);
        let r = run(&target, &ServeConfig { speculative: spec(SpecMethod::Eagle3, 3, Some(d.clone())), ..base.clone() });
        // The first (only) layer: q [2h → 64 × 80], k and v [2h → 8 × 80], o [5120 → h], the
        // gated MLP 3 × h × 25,600, and three norms (input, hidden_norm, post-attention); fc
        // [3 × 5120 → h]; the final norm; the LM head [32,000, h] split over TP; d2t int64.
        let h = 5120u64;
        let q = 64 * 80 / tp;
        let kv = 8 * 80 / tp;
        let layer = 2 * h * (q + 2 * kv) + q * h + 3 * h * (25_600 / tp) + 3 * h;
        let params = layer + 3 * h * h + h + 32_000 / tp * h;
        assert_eq!(r.draft_weights_bytes, params * 2 + 32_000 * 8, "tp {tp}");
        assert_eq!(r.weights_bytes - plain.weights_bytes, r.draft_weights_bytes, "tp {tp}");
        // KV: the target's 64 layers of 8 / tp heads × 128, the head's one layer of 8 / tp × 80.
        let target_token = 64 * 2 * (8 / tp) * 128 * 2;
        let draft_token = 2 * (8 / tp) * 80 * 2;
        assert_eq!((plain.pool.kv_bytes_per_token, r.pool.kv_bytes_per_token), (target_token, target_token + draft_token));
        assert_eq!(r.pool.num_kv_blocks, r.kv_cache_bytes / (16 * (target_token + draft_token)), "tp {tp}");
        assert!(r.notes.iter().any(|n| n.contains("EAGLE-3 head") && n.contains("not yet checked against one")), "{:?}", r.notes);
    }
}

/// n-gram drafting runs on the CPU: the weights and the pool per token are unchanged; the V1
/// runner's profile adds the rejection sampler's [2R, V] dummy logits; graphs are captured at
/// multiples of 1 + k up to min(2 × max-num-seqs × (1 + k), 512).
#[test]
fn ngram_changes_the_sampler_and_the_graph_sizes_only() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let cfg = ServeConfig { max_num_seqs: Some(256), max_num_batched_tokens: Some(2048), ..h100(22) };
    let plain = run(&m, &cfg);
    let r = run(&m, &ServeConfig { speculative: spec(SpecMethod::Ngram, 3, None), ..cfg.clone() });
    assert_eq!((r.weights_bytes, r.pool.kv_bytes_per_token), (plain.weights_bytes, plain.pool.kv_bytes_per_token));
    assert_eq!(r.draft_weights_bytes, 0);
    // 0.22's default list up to 512 (256 × 2 × 4 = 2048, capped), rounded to multiples of 4:
    // 4, 8 … 248 (31), 256 … 512 by 16 (17): 49 sizes, every one a decode size (≤ 256 × 4).
    let sizes =
        round_capture_sizes(&capture_sizes(&ServeConfig { speculative: spec(SpecMethod::Ngram, 3, None), ..h100(22) }, 256, 2048), 3);
    assert_eq!(sizes.len(), 49);
    let g = r.cuda_graphs.expect("0.22 estimates its graphs");
    assert_eq!((g.piecewise, g.full), (49, 49));
    assert_eq!(g.layer_graphs, 49 * 33 + 49 * 32);
    // The sampler: the V1 runner's dummy pass over [2 × 256, V] logits and the 256 bonus rows.
    assert!(r.activation_peak_at.starts_with("rejection sampler"), "{}", r.activation_peak_at);
    let (v, rows) = (128_256u64, 256u64);
    let without_graphs = |x: &ServeReport| x.activation_peak_bytes - x.cuda_graph_estimate_bytes;
    // Without speculation the sampler over [256, V] set the peak; the rejection pass holds two
    // more rows of bf16 logits a request (3 R × V against R × V), the rest alike.
    assert!(plain.activation_peak_at.starts_with("sampler"), "{}", plain.activation_peak_at);
    assert_eq!(without_graphs(&r) - without_graphs(&plain), 2 * rows * v * 2);
    // Model Runner V2 (0.33) has no rejection sampler in its profile run.
    let v2 = run(
        &m,
        &ServeConfig {
            speculative: spec(SpecMethod::Ngram, 3, None),
            ..ServeConfig { vllm_version: VllmVersion { major: 0, minor: 33 }, ..cfg.clone() }
        },
    );
    assert!(!v2.activation_peak_at.contains("rejection"), "{}", v2.activation_peak_at);
    // ngram_gpu: the V1 runner's token table on the GPU is not modelled and is refused; Model
    // Runner V2 matches n-grams on the GPU with small buffers either way.
    let e = serve(&m, &ServeConfig { speculative: spec(SpecMethod::NgramGpu, 3, None), ..cfg.clone() }).unwrap_err().to_string();
    assert!(e.contains("token_ids_gpu_tensor"), "{e}");
    let v2 =
        ServeConfig { vllm_version: VllmVersion { major: 0, minor: 33 }, speculative: spec(SpecMethod::NgramGpu, 3, None), ..cfg.clone() };
    assert_eq!(run(&m, &v2).weights_bytes, plain.weights_bytes);
}

/// DeepSeek-V3's MTP module: one decoder layer from the checkpoint (priced as its average
/// layer), eh_proj [2h → h] and three norms; one more MLA layer in the KV cache.
#[test]
fn mtp_loads_the_checkpoints_own_layer() {
    let m = config("validation/configs/deepseek-v3.json");
    assert_eq!(m.mtp_layers, 1);
    let cfg = ServeConfig { tp: 8, ..h100(19) };
    let plain = serve(&m, &cfg).unwrap();
    let r = serve(&m, &ServeConfig { speculative: spec(SpecMethod::Mtp, 1, None), ..cfg.clone() }).unwrap();
    let h = m.hidden;
    // The 61 layers' share of the weights, one of them more, plus eh_proj and the norms (bf16).
    let layers = plain.weights_bytes - plain.rotary_cache_bytes;
    let per_layer_upper = layers / 61;
    assert!(r.draft_weights_bytes > 2 * (2 * h * h + 3 * h), "{}", r.draft_weights_bytes);
    assert!(r.draft_weights_bytes < per_layer_upper + 2 * (2 * h * h + 3 * h), "{} vs {}", r.draft_weights_bytes, per_layer_upper);
    // MLA: one latent of 512 + 64 a token a layer, unsplit by TP.
    assert_eq!(r.pool.kv_bytes_per_token - plain.pool.kv_bytes_per_token, (512 + 64) * 2);
    // A model without MTP layers refuses the method.
    let llama = presets::load("llama-3.1-8b").unwrap();
    let e = serve(&llama, &ServeConfig { speculative: spec(SpecMethod::Mtp, 1, None), ..h100(19) }).unwrap_err().to_string();
    assert!(e.contains("multi-token-prediction"), "{e}");
}

/// A separate draft model: whole, at the target's TP, its own layers in the KV cache with their
/// own page size.
#[test]
fn a_draft_model_adds_its_weights_and_layers() {
    let target = presets::load("llama-3.1-70b").unwrap();
    let draft = presets::load("llama-3.2-1b").unwrap();
    let cfg = ServeConfig { tp: 4, ..h100(19) };
    let alone = run(&draft, &ServeConfig { max_model_len: Some(8192), ..cfg.clone() });
    let r = run(&target, &ServeConfig { speculative: spec(SpecMethod::DraftModel, 5, Some(draft.clone())), ..cfg.clone() });
    assert_eq!(r.draft_weights_bytes, alone.weights_bytes);
    // 16 layers × 2 × (8 / 4) heads × 64 × 2 bytes.
    assert_eq!(r.pool.draft_bytes_per_token, 16 * 2 * 2 * 64 * 2);
    // The vocabulary must match; hybrid targets and pipeline parallelism are refused.
    let qwen = presets::load("qwen2.5-0.5b").unwrap();
    let e =
        serve(&target, &ServeConfig { speculative: spec(SpecMethod::DraftModel, 3, Some(qwen)), ..cfg.clone() }).unwrap_err().to_string();
    assert!(e.contains("vocabulary"), "{e}");
    let e = serve(&target, &ServeConfig { pp: 2, tp: 2, speculative: spec(SpecMethod::DraftModel, 3, Some(draft.clone())), ..cfg.clone() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("pipeline"), "{e}");
    let gemma = presets::load("gemma-2-9b").unwrap();
    let e = serve(&gemma, &ServeConfig { speculative: spec(SpecMethod::Eagle, 3, Some(head())), ..h100(19) }).unwrap_err().to_string();
    assert!(e.contains("sliding-window"), "{e}");
    // n-gram drafting needs no drafter and is modelled there.
    serve(&gemma, &ServeConfig { speculative: spec(SpecMethod::Ngram, 3, None), ..h100(19) }).unwrap();
    let e = serve(&target, &ServeConfig { speculative: spec(SpecMethod::Ngram, 0, None), ..cfg.clone() }).unwrap_err().to_string();
    assert!(e.contains("num_speculative_tokens"), "{e}");
    // --num-gpu-blocks-override with a drafter of its own page size: each block holds the
    // drafter's layers too, and the pool is the blocks asked for.
    let o = run(
        &target,
        &ServeConfig { num_gpu_blocks_override: Some(1000), speculative: spec(SpecMethod::DraftModel, 5, Some(draft)), ..cfg },
    );
    assert_eq!(o.pool.num_kv_blocks, 1000);
    assert_eq!(o.kv_cache_bytes, 1000 * 16 * o.pool.kv_bytes_per_token);
}

/// vLLM's reading of the config (config/speculative.py, 0.33.0): the method it infers, the
/// defaults it takes, and what it refuses.
#[test]
fn the_config_is_read_as_vllm_reads_it() {
    use vram_core::serve_spec::parse_request;
    let llama = presets::load("llama-3.1-8b").unwrap();
    let v3 = config("validation/configs/deepseek-v3.json");
    let read = |m: &Model, j: serde_json::Value| parse_request(&j, m, 1).map(|r| (r.method, r.num_speculative_tokens));
    use serde_json::json;
    assert_eq!(read(&llama, json!({"model": "ngram", "num_speculative_tokens": 3})).unwrap(), (SpecMethod::Ngram, 3));
    assert_eq!(
        read(&llama, json!({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 3})).unwrap(),
        (SpecMethod::Eagle, 3)
    );
    assert_eq!(
        read(&llama, json!({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3})).unwrap(),
        (SpecMethod::Eagle3, 3)
    );
    assert_eq!(
        read(&llama, json!({"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3})).unwrap(),
        (SpecMethod::DraftModel, 3)
    );
    // No model and no method: vLLM refuses, even for a checkpoint with MTP layers.
    assert!(read(&v3, json!({"num_speculative_tokens": 1})).unwrap_err().to_string().contains("without a speculative model"));
    // Defaults: the MTP layers; suffix decoding's tree depth.
    assert_eq!(read(&v3, json!({"method": "mtp"})).unwrap(), (SpecMethod::Mtp, 1));
    assert_eq!(read(&llama, json!({"method": "suffix"})).unwrap(), (SpecMethod::Suffix, 24));
    assert_eq!(read(&llama, json!({"method": "suffix", "suffix_decoding_max_tree_depth": 16})).unwrap(), (SpecMethod::Suffix, 16));
    assert!(read(&llama, json!({"method": "ngram"})).is_err());
    // MTP layers are reused in turn: beyond them the count must be a multiple ("divisible by n_predict").
    let mut two = v3.clone();
    two.mtp_layers = 2;
    assert!(read(&two, json!({"method": "mtp", "num_speculative_tokens": 3})).unwrap_err().to_string().contains("multiple of 2"));
    assert!(read(&two, json!({"method": "mtp", "num_speculative_tokens": 4})).is_ok());
    assert!(read(&two, json!({"method": "mtp", "num_speculative_tokens": 1})).is_ok());
    // A drafter TP other than the target's is refused; the target's is accepted.
    assert!(parse_request(&json!({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}), &llama, 2).is_err());
    assert!(parse_request(&json!({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2}), &llama, 2).is_ok());
}

/// MTP on a Gated DeltaNet hybrid, against a public vLLM start-up log
/// (validation/vllm/spec_logs.jsonl `q36-27b-nvfp4-mtp2-nightly-arm64`: nvidia/Qwen3.6-27B-NVFP4,
/// vLLM 0.23.1rc1.dev531, `{"method":"mtp","num_speculative_tokens":2}`, fp8 KV, prefix caching,
/// max-model-len 262,144). Qwen3.6-27B is read with Qwen3.5-27B's dimensions
/// (validation/configs/ssm/qwen3.5-27b.json): at the log's 1600-token block those give exactly its
/// page, and its "Add 3 padding layers" and pool below follow from them. The pool is the logged
/// "Available KV cache memory: 48.6 GiB" (2 decimals); the block size the logged one (vLLM's
/// attention backend picked its 64-token alignment). What the log checks: the MTP layer joins the
/// 16 attention layers (17 against 48 Gated DeltaNet layers: groups of 17, 3 padding layers),
/// and each state group keeps 2 + k blocks a request in mode align.
#[test]
fn mtp_beside_gated_deltanet_matches_a_logged_pool() {
    let m = config("validation/configs/ssm/qwen3.5-27b.json");
    assert_eq!(m.mtp_layers, 1);
    let cfg = ServeConfig {
        max_model_len: Some(262_144),
        block_size: 1600,
        kv_cache_dtype: Some(vram_core::DType::F8),
        prefix_caching: Some(true),
        kv_cache_memory_bytes: Some((48.6 * (1u64 << 30) as f64) as u64),
        max_num_batched_tokens: Some(65_536),
        max_num_seqs: Some(8),
        vllm_version: VllmVersion { major: 0, minor: 23 },
        speculative: spec(SpecMethod::Mtp, 2, None),
        ..ServeConfig::new(200 << 30)
    };
    let r = run(&m, &cfg);
    assert_eq!(r.pool.block_size, 1600);
    assert_eq!(r.pool.group_size, 17);
    // One attention group and three state groups of 17 slots for 17 + 48 layers: 68 − 65 = 3
    // padding layers, as logged.
    let kinds: Vec<&str> = r.pool.groups.iter().map(|g| g.kind).collect();
    assert_eq!(kinds, ["full", "state", "state", "state"]);
    // ⌈262,144 / 1600⌉ = 164 attention blocks and 3 state groups × (2 + 2) blocks a request.
    assert_eq!(r.pool.blocks_per_request(), 164 + 3 * 4);
    // Logged: "GPU KV cache size: 1,394,129 tokens", "Maximum concurrency … 5.32x".
    assert_eq!(r.pool.num_kv_blocks, 936);
    assert_eq!(r.pool.kv_tokens, 1_394_129);
    assert!((r.pool.max_concurrency - 5.32).abs() < 0.005, "{}", r.pool.max_concurrency);
    // Without speculation the same pool would hold 936 × 17 / 16 blocks of 16-layer groups and
    // 2 state blocks a request: the log is not that.
    let plain = run(&m, &ServeConfig { speculative: None, ..cfg });
    assert_ne!(plain.pool.kv_tokens, 1_394_129);
}

/// The capture sizes of the same logged run: vLLM switched it to PIECEWISE graphs ("FULL_AND_PIECEWISE
/// is not supported with spec-decode for FlashInferBackend"), so the sizes are not rounded to
/// multiples of 1 + k (gpu_model_runner.py rounds for separate full decode graphs only) and the
/// ceiling is 2 × 8 sequences × 3 tokens: "Profiling CUDA graph memory: PIECEWISE=9 (largest=48)".
#[test]
fn piecewise_graphs_under_speculation_keep_the_default_sizes() {
    let cfg = ServeConfig {
        cudagraph_mode: Some(vram_core::serve_graphs::CudagraphMode::Piecewise),
        vllm_version: VllmVersion { major: 0, minor: 23 },
        speculative: spec(SpecMethod::Mtp, 2, None),
        ..ServeConfig::new(80 << 30)
    };
    let g = vram_core::serve_graphs::estimate(&cfg, 64, 8, 65_536, 1, vram_core::serve::ModelRunner::V1);
    assert_eq!((g.piecewise, g.full), (9, 0));
    // With separate full decode graphs the same sizes round to multiples of 3: 3, 6, 9, 18, 24,
    // 33, 42, 48.
    let full = vram_core::serve_graphs::estimate(
        &ServeConfig { cudagraph_mode: None, ..cfg },
        64,
        8,
        65_536,
        1,
        vram_core::serve::ModelRunner::V1,
    );
    assert_eq!(full.piecewise, 8);
}

/// SGLang's EAGLE family (0.5.23, arg_groups/speculative_hook.py, model_executor/pool_configurator.py):
/// NEXTN drafts with DeepSeek-V3's MTP layer, counted in the KV budget; the cell grows by the
/// target's per-layer size; --max-running-requests defaults to 48; each req_to_token row holds
/// the draft tokens too.
#[test]
fn sglang_nextn_and_eagle3_from_source() {
    use vram_core::sglang::{sglang, SglangConfig, SglangSpec};
    let g = gpu::lookup("h200").unwrap();
    let base = SglangConfig {
        tp: 8,
        quantization: vram_core::serve::Quantization::Fp8,
        ..SglangConfig::new(gpu::cuda_total(&g).0, g.memory >> 20)
    };
    let m = config("validation/configs/deepseek-v3.json");
    let plain = sglang(&m, &base).unwrap();
    let nextn = SglangSpec { method: SpecMethod::Mtp, num_steps: None, eagle_topk: None, num_draft_tokens: None, draft: None };
    let r = sglang(&m, &SglangConfig { speculative: Some(nextn.clone()), ..base.clone() }).unwrap();
    // One MLA layer more in the cell: 70,272 / 61 = 1,152 bytes (512 + 64 latent, bf16).
    assert_eq!((plain.cell_bytes, r.cell_bytes, r.draft_cell_bytes), (70_272, 71_424, 1_152));
    assert_eq!(r.weights_bytes - plain.weights_bytes, r.draft_weights_bytes);
    assert!(r.draft_weights_bytes > 0);
    // rest shrinks by the drafter; the pool is rest / cell.
    assert_eq!(plain.rest_bytes - r.rest_bytes, r.draft_weights_bytes);
    assert_eq!(r.max_total_num_tokens, r.rest_bytes / r.cell_bytes);
    assert_eq!(r.max_running_requests, 48);
    // (3, 1, 4) for DeepSeek: rows of context + 4 + 4 int32.
    assert_eq!(r.req_to_token_bytes, 49 * (r.context_len + 8) * 4);
    assert_eq!(nextn.resolved(&m).unwrap(), (3, 1, 4));
    // Given steps need a top-k; a top-k without steps is refused, as SGLang refuses both.
    assert!(SglangSpec { num_steps: Some(3), ..nextn.clone() }.resolved(&m).is_err());
    assert!(SglangSpec { eagle_topk: Some(1), ..nextn.clone() }.resolved(&m).is_err());
    assert_eq!(
        SglangSpec { num_steps: Some(2), eagle_topk: Some(1), num_draft_tokens: Some(9), ..nextn.clone() }.resolved(&m).unwrap(),
        (2, 1, 3)
    );
    // A given limit stands; Llama's auto choice is (5, 4, 8).
    let given = sglang(&m, &SglangConfig { max_running_requests: Some(128), speculative: Some(nextn.clone()), ..base.clone() }).unwrap();
    assert_eq!(given.max_running_requests, 128);
    let llama = presets::load("llama-3.1-8b").unwrap();
    assert_eq!(
        SglangSpec { method: SpecMethod::Eagle3, draft: Some(Box::new(head())), ..nextn.clone() }.resolved(&llama).unwrap(),
        (5, 4, 8)
    );
    // An EAGLE-3 head: the same weights vLLM counts (both shard as vLLM does), and a cell grown
    // by the target's per-layer size (SGLang assumes it), not the head's own 80-wide heads.
    let target = config("validation/vllm/configs/qwen3-32b.config.json");
    let eagle3 = SglangSpec { method: SpecMethod::Eagle3, draft: Some(Box::new(head())), ..nextn.clone() };
    let g1 = SglangConfig { tp: 2, ..SglangConfig::new(gpu::cuda_total(&gpu::lookup("h100").unwrap()).0, 81_559) };
    let s = sglang(&target, &SglangConfig { speculative: Some(eagle3), ..g1.clone() }).unwrap();
    let v = run(&target, &ServeConfig { tp: 2, speculative: spec(SpecMethod::Eagle3, 3, Some(head())), ..h100(19) });
    // SGLang sizes the pool with the draft's own embedding still allocated (151,936 / 2 × 5120
    // bf16 more per GPU).
    assert_eq!(s.draft_weights_bytes, v.draft_weights_bytes + 151_936 / 2 * 5120 * 2);
    assert_eq!(s.draft_cell_bytes, (s.cell_bytes - s.draft_cell_bytes) / 64);
    // Refused: NEXTN on a model without MTP layers, and a hybrid target.
    assert!(sglang(&llama, &SglangConfig { speculative: Some(nextn.clone()), ..g1.clone() }).unwrap_err().to_string().contains("MTP"));
    let hybrid = config("validation/configs/ssm/qwen3.5-27b.json");
    assert!(sglang(&hybrid, &SglangConfig { speculative: Some(nextn), ..g1 }).is_err());
}

/// The EAGLE-3 head as SGLang builds it, against a public log (validation/sglang/spec_logs.jsonl
/// `docs-ci-2025-05-04-llama31-8b-eagle3`: SGLang's docs notebook, Llama-3.1-8B-Instruct in
/// float16 with jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B): the draft's "Load weight end …
/// mem usage=1.77 GB" (SGLang's GB are GiB: get_available_gpu_memory divides by 2^30). vram: the
/// head's layer, fc, norm, its LM head over the draft vocabulary and d2t, plus the draft's own
/// embedding, allocated when the model is built. The head's config is SpecForge's for the same
/// shape (validation/vllm/spec_heads/README.md). The June run of the same cell logged 1.82 GB,
/// 0.05 more, not explained here.
#[test]
fn an_eagle3_head_as_sglang_builds_it_matches_a_logged_load() {
    use vram_core::sglang::{sglang, SglangConfig, SglangSpec};
    let path = "validation/vllm/spec_heads/llama3-8b-eagle3.config.json";
    let bytes = std::fs::read(root().join(path)).unwrap();
    let head = parse_head_config(&bytes, "llama3-8b-eagle3", path).unwrap();
    let target = presets::load("llama-3.1-8b").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let cfg = SglangConfig {
        dtype: Some(vram_core::DType::F16),
        context_length: Some(131_072),
        speculative: Some(SglangSpec {
            method: SpecMethod::Eagle3,
            num_steps: Some(5),
            eagle_topk: Some(8),
            num_draft_tokens: Some(32),
            draft: Some(Box::new(head)),
        }),
        ..SglangConfig::new(gpu::cuda_total(&g).0, g.memory >> 20)
    };
    let r = sglang(&target, &cfg).unwrap();
    let gib = r.draft_weights_bytes as f64 / (1u64 << 30) as f64;
    assert!((gib - 1.77).abs() < 0.005, "{gib:.4} GiB against the logged 1.77");
}
