//! Serving state-space and hybrid models on vLLM (src/serve_ssm.rs): the recurrent states in the
//! block pool, the attention block grown to hold one, the groups, the states per request, held
//! to what vLLM logged where a public log exists.

use std::path::PathBuf;

use vram_core::dtype::DType;
use vram_core::serve::{kv_pool, serve, PoolSpec, ServeConfig, VllmVersion};
use vram_core::serve_ssm::{state_cache, MambaCacheMode, Mixer};
use vram_core::{gpu, parse_config, Model};

const GIB: u64 = 1 << 30;

fn model(name: &str) -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../validation/configs/ssm/{name}.json"));
    let text = std::fs::read(&path).unwrap();
    parse_config(&text, name, &path.display().to_string()).unwrap()
}

fn v(minor: u32) -> VllmVersion {
    VllmVersion { major: 0, minor }
}

/// vLLM's defaults on an 80 GiB GPU, over `tp` ranks, with `--mamba-ssm-cache-dtype` when given.
fn cfg(tp: u64, ssm_dtype: Option<DType>) -> ServeConfig {
    ServeConfig { tp, mamba_ssm_cache_dtype: ssm_dtype, ..ServeConfig::new(80 * GIB) }
}

/// vllm-project/vllm#40691 (vLLM 0.19.0, "Hardware: H20"): `vllm serve Qwen3.5-27B
/// --max-model-len 32768 --max-num-seqs 16 --max-num-batched-token 16384` logged "GPU KV cache
/// size: 290,864 tokens" and "Maximum concurrency for 32,768 tokens per request: 33.04x". One
/// block count must give both: 16 attention and 48 Gated DeltaNet layers in four groups of 16,
/// 784-token blocks, 42 + 3 blocks per request (one state each, prefix caching off for hybrids in
/// 0.19), tokens = blocks // 4 groups × 784.
#[test]
fn qwen35_27b_pool_gives_both_logged_figures() {
    let m = model("qwen3.5-27b");
    let st = state_cache(&m, &cfg(1, None)).unwrap().unwrap();
    assert_eq!((st.attention_layers, st.state_layers), (16, 48));
    // conv (3, 2·16·128 + 48·128) bf16 + state (48, 128, 128) float32 (the config's mamba_ssm_dtype).
    assert_eq!((st.conv_bytes, st.ssm_bytes, st.ssm_dtype), (3 * 10_240 * 2, 48 * 128 * 128 * 4, DType::F32));
    let page = 784 * 2 * 4 * 256 * 2; // 784 tokens × K and V × 4 KV heads × 256 × bf16
    let pool_of =
        |blocks: u64| kv_pool(&m, &PoolSpec { state: Some(st), ..PoolSpec::new(blocks * page * 16, 32_768, 16_384, 16, 2, 1) }).unwrap();
    let p = pool_of(1487);
    assert_eq!((p.block_size, p.page_size_bytes, p.group_size, p.groups.len()), (784, page, 16, 4));
    assert_eq!(p.blocks_per_request(), 45);
    assert_eq!(p.num_kv_blocks, 1487);
    assert_eq!(p.kv_tokens, 290_864);
    assert_eq!(format!("{:.2}", p.max_concurrency), "33.04");
    // No neighbouring count gives both figures.
    for b in [1484, 1485, 1486, 1488] {
        let q = pool_of(b);
        assert!(q.kv_tokens != 290_864 || format!("{:.2}", q.max_concurrency) != "33.04", "{b}");
    }
}

/// The same launch end to end. The log's H20 is the 141 GB part (the 96 GB one cannot hold its
/// 71 GiB pool beside 50 GiB of weights); its CUDA total is assumed to be the H200's, whose
/// memory it shares. vLLM builds Qwen3_5ForConditionalGeneration, so the vision tower (0.86 GiB)
/// and the encoder outputs of one 16384-token image cached through the profile are in its
/// non-KV memory. vram's pool: 1,517 blocks against the 1,487 logged (+2.0%: its non-KV memory
/// 1.4 GiB below vLLM's; the Gated DeltaNet kernels' profile-run activations are not modelled).
/// Without the tower it was 1,538 (+3.4%).
#[test]
fn qwen35_27b_on_vllm_019_end_to_end() {
    let m = model("qwen3.5-27b");
    let g = gpu::lookup("h200").unwrap();
    let cfg = ServeConfig {
        vllm_version: v(19),
        gpu_memory_utilization: 0.9,
        max_model_len: Some(32_768),
        max_num_seqs: Some(16),
        max_num_batched_tokens: Some(16_384),
        ..ServeConfig::new(vram_core::serve::cuda_total(&g))
    };
    let r = serve(&m, &cfg).unwrap();
    assert_eq!(r.block_size, 784);
    let err = (r.pool.num_kv_blocks as f64 - 1487.0) / 1487.0;
    println!("Qwen3.5-27B on vLLM 0.19: {} blocks (log 1,487): {:+.1}%", r.pool.num_kv_blocks, err * 100.0);
    assert!(err.abs() < 0.05, "{err}");
    assert!(r.notes.iter().any(|n| n.contains("Setting attention block size to 784 tokens")));
}

/// Prefix caching and the mamba-cache mode: off for hybrids by default before 0.27 (one state
/// per request), on in mode `align` from 0.27 (two); asked for on an older release, Mamba-2
/// models take mode `all` (every block's state: refused, not modelled) and Gated DeltaNet
/// `align`.
#[test]
fn prefix_caching_doubles_the_states() {
    let g = gpu::lookup("h100").unwrap();
    let base = ServeConfig { max_model_len: Some(32_768), ..ServeConfig::new(vram_core::serve::cuda_total(&g)) };
    let granite = model("granite-4.0-h-tiny"); // 4 attention, 36 Mamba-2 layers
    let state_blocks = |cfg: &ServeConfig| {
        let r = serve(&granite, cfg).unwrap();
        r.pool.groups.iter().filter(|g| g.kind == "state").map(|g| g.blocks_per_request).collect::<Vec<_>>()
    };
    assert_eq!(state_blocks(&ServeConfig { vllm_version: v(26), ..base.clone() }), vec![1; 9]);
    assert_eq!(state_blocks(&ServeConfig { vllm_version: v(27), ..base.clone() }), vec![2; 9]);
    assert_eq!(state_blocks(&ServeConfig { prefix_caching: Some(false), ..base.clone() }), vec![1; 9]);
    let all = ServeConfig { vllm_version: v(26), prefix_caching: Some(true), ..base.clone() };
    let e = serve(&granite, &all).unwrap_err().to_string();
    assert!(e.contains("--mamba-cache-mode") && e.contains("not modelled"), "{e}");
    let align = ServeConfig { mamba_cache_mode: Some(MambaCacheMode::Align), ..all.clone() };
    assert_eq!(state_blocks(&align), vec![2; 9]);
    let next = model("qwen3-next-80b-a3b");
    let r = serve(&next, &ServeConfig { tp: 4, ..all }).unwrap();
    assert!(r.pool.groups.iter().any(|g| g.kind == "state" && g.blocks_per_request == 2));
}

/// The states' dtypes and shapes per rank as vLLM's MambaStateShapeCalculator and its per-model
/// configs give them.
#[test]
fn state_shapes_and_dtypes() {
    // Nemotron-H: float32 SSM state by default (NemotronHForCausalLMConfig), the flag overrides.
    let n = model("nemotron-h-8b");
    let st = state_cache(&n, &cfg(1, None)).unwrap().unwrap();
    assert_eq!(st.ssm_dtype, DType::F32);
    assert_eq!(state_cache(&n, &cfg(1, Some(DType::BF16))).unwrap().unwrap().ssm_dtype, DType::BF16);
    // Mamba-1 (mamba-130m: d_inner 1536, N 16, conv 4): conv (1536, 3) and state (1536, 16) in bf16.
    let m = model("mamba-130m-hf");
    let st = state_cache(&m, &cfg(1, None)).unwrap().unwrap();
    assert_eq!((st.mixer, st.attention_layers, st.state_layers), (Mixer::Mamba, 0, 24));
    assert_eq!((st.conv_bytes, st.ssm_bytes), (1536 * 3 * 2, 1536 * 16 * 2));
    // Mamba-2 with one group over 2 ranks: the group is replicated (extra_groups_for_head_shards).
    let g = model("granite-4.0-h-tiny");
    let s = g.ssm.as_ref().unwrap();
    let m2 = s.mamba2.unwrap();
    assert_eq!(m2.groups, 1);
    let st2 = state_cache(&g, &cfg(2, None)).unwrap().unwrap();
    assert_eq!(st2.conv_bytes, (s.d_conv - 1) * ((s.d_inner + 2 * 2 * s.d_state) / 2) * 2);
    assert_eq!(st2.ssm_bytes, m2.heads / 2 * m2.head_dim * s.d_state * 2);
    // Falcon-H1 runs attention and the mixer in every layer: two groups of all the layers.
    let f = model("falcon-h1-3b");
    let st = state_cache(&f, &cfg(1, None)).unwrap().unwrap();
    assert_eq!((st.attention_layers, st.state_layers), (f.layers, f.layers));
}

/// vllm-project/vllm#24280 (September 2025): "672 tokens for NVIDIA-Nemotron-Nano-9B-v2". Its
/// Mamba-2 state (conv (3, 10240 + 2·8·128) + SSM (128, 80, 128)) in float16, Nemotron-H's
/// default then, and 8 KV heads of 128: 16·⌈2,695,168 / (16 · 4,096)⌉ = 672. From 0.19 the default
/// is float32, and the block 1,312.
#[test]
fn nemotron_nano_9b_v2_block_size() {
    let m = model("nemotron-nano-9b-v2-layout");
    let g = gpu::lookup("h100").unwrap();
    let at = |minor: u32| {
        let cfg = ServeConfig { vllm_version: v(minor), max_model_len: Some(8192), ..ServeConfig::new(vram_core::serve::cuda_total(&g)) };
        serve(&m, &cfg).unwrap()
    };
    let old = at(10);
    assert_eq!(old.block_size, 672);
    let st = old.pool.state.unwrap();
    assert_eq!((st.attention_layers, st.state_layers, st.ssm_dtype), (4, 27, DType::F16));
    assert_eq!(st.page_bytes(), 2_695_168);
    assert_eq!(at(19).block_size, 1312);
}

/// Zamba2: a KV cache per shared-block invocation (6 in the 1.2B, 32 heads of 2 × 2048 / 32)
/// beside the 38 Mamba-2 layers' states.
#[test]
fn zamba2_caches_each_invocation() {
    let m = model("zamba2-1.2b");
    let g = gpu::lookup("h100").unwrap();
    let r = serve(&m, &ServeConfig { max_model_len: Some(8192), ..ServeConfig::new(vram_core::serve::cuda_total(&g)) }).unwrap();
    let st = r.pool.state.unwrap();
    assert_eq!((st.attention_layers, st.state_layers), (6, 38));
    assert_eq!(r.pool.kv_bytes_per_token, 6 * 2 * 32 * 128 * 2);
    assert_eq!(r.block_size % 16, 0);
    assert!(r.block_size * 2 * 32 * 128 * 2 >= st.page_bytes());
}

/// What is not modelled is refused by name: Zamba's shared blocks, pipeline stages, the V0
/// engine; the pool's figures are per rank and bytes are exact.
#[test]
fn refusals() {
    let g = gpu::lookup("h100").unwrap();
    let base = ServeConfig { max_model_len: Some(8192), ..ServeConfig::new(vram_core::serve::cuda_total(&g)) };
    let e = serve(&model("zamba-7b-v1"), &base).unwrap_err().to_string();
    assert!(e.contains("first Zamba"), "{e}");
    // A Mamba (no attention) splits its channels over TP, which must divide them.
    let mamba = model("mamba-370m-hf");
    assert!(serve(&mamba, &ServeConfig { tp: 2, ..base.clone() }).is_ok());
    let e = serve(&mamba, &ServeConfig { tp: 3, ..base.clone() }).unwrap_err().to_string();
    assert!(e.contains("Mamba channels (2048)"), "{e}");
    let lora = Some(vram_core::serve::ServeLora { max_loras: 1, max_lora_rank: 16, max_cpu_loras: 1 });
    let e = serve(&model("granite-4.0-h-1b"), &ServeConfig { lora, ..base.clone() }).unwrap_err().to_string();
    assert!(e.contains("--enable-lora") && e.contains("not modelled"), "{e}");
    let e = serve(&model("qwen3.5-27b"), &ServeConfig { pp: 2, ..base.clone() }).unwrap_err().to_string();
    assert!(e.contains("pipeline"), "{e}");
    let e = serve(&model("qwen3.5-27b"), &ServeConfig { vllm_version: v(9), ..base.clone() }).unwrap_err().to_string();
    assert!(e.contains("0.10"), "{e}");
    // A pool of 0 bytes: no blocks, and the report says the request does not fit.
    let r = serve(&model("qwen3.5-27b"), &ServeConfig { kv_cache_memory_bytes: Some(GIB / 1024), ..base }).unwrap();
    assert!(!r.fits && r.pool.max_model_len_that_fits == 0);
}

/// vLLM's Gated DeltaNet layers skip their recurrent kernels in the profile run
/// (gdn_linear_attn.py `_forward_core` returns while attn_metadata is None), but their
/// projections run: on Qwen3.5-0.8B (hidden 1024, 16 key and 16 value heads of 128, MLP 3584)
/// that phase is wider than the MLP's. Per token: input, residual and output (3 × 1024),
/// in_proj_qkvz (2 × 2048 + 2 × 2048), in_proj_ba (2 × 16), core_attn_out and the gated norm's
/// output (2 × 2048), in bf16.
#[test]
fn gated_deltanet_projections_are_a_profile_phase() {
    let m = model("qwen3.5-0.8b");
    let g = gpu::lookup("h100").unwrap();
    let cfg = ServeConfig {
        max_num_seqs: Some(1),
        language_model_only: true,
        vllm_version: v(19),
        ..ServeConfig::new(vram_core::serve::cuda_total(&g))
    };
    let r = serve(&m, &cfg).unwrap();
    assert_eq!(r.activation_peak_at, "forward of 8192 tokens, Gated DeltaNet projections");
    let per_token = 3 * 1024 + 4 * 2048 + 2 * 16 + 2 * 2048;
    // The default 8192 batched tokens; the MLP phase would be 3 × 1024 + 3 × 3584 per token.
    assert!(per_token > 3 * 1024 + 3 * 3584);
    assert_eq!(r.activation_peak_bytes, 8192 * 2 * per_token as u64);
}

/// A hybrid whose SSM state is float32 (Qwen3.5's config) is offered vLLM's
/// `--mamba-ssm-cache-dtype bfloat16`, re-run through the accounting: smaller state pages, more
/// tokens in the same pool.
#[test]
fn bf16_state_is_offered_for_a_float32_state() {
    use vram_core::serve_advice::{vllm, ServeChange};
    let m = model("qwen3.5-27b");
    let c = ServeConfig { max_model_len: Some(32_768), ..cfg(1, None) };
    let base = serve(&m, &c).unwrap();
    assert_eq!(base.pool.state.unwrap().ssm_dtype, DType::F32);
    let adv = vllm(&m, &c, &base, None);
    let a = adv.alternatives.iter().find(|a| a.change == ServeChange::StateDtype).expect("bf16 state offered");
    assert_eq!(a.flags[0].name, "--mamba-ssm-cache-dtype");
    assert!(a.kv_tokens > base.pool.kv_tokens, "{} vs {}", a.kv_tokens, base.pool.kv_tokens);
}
