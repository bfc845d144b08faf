//! `vram serve` against what vLLM itself logged (validation/vllm/logs.jsonl: real start-up logs
//! quoted from public issues, each with its source) and against numbers derived by hand from
//! vLLM's source.

#[path = "support/readme.rs"]
mod readme;

use std::fmt::Write;
use std::path::PathBuf;

use serde_json::Value;
use vram_core::serve::{
    cuda_total, kv_pool, non_torch_default, nvswitch_gpu, serve, ModelRunner, PoolSpec, Quantization, ServeConfig, VllmEngine, VllmVersion,
};
use vram_core::{gpu, parse_config, presets, Model};

const GIB: f64 = (1u64 << 30) as f64;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model(spec: &str) -> Model {
    if spec.ends_with(".json") {
        let bytes = std::fs::read(root().join(spec)).unwrap();
        parse_config(&bytes, spec, spec).unwrap()
    } else {
        presets::load(spec).unwrap()
    }
}

fn logs() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("validation/vllm/logs.jsonl")).unwrap();
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// The whole accounting for every fully logged start-up: weights, the profile run's activation
/// peak, the CUDA total, and (given the non-torch memory vLLM measured) the KV pool.
#[test]
fn weights_and_profile_activation_match_vllm_logs() {
    let mut checked = 0;
    // Development logs only: the held-out ones are measured by `accuracy_against_logs`, not held
    // to a per-log bound.
    let full =
        |c: &&Value| c["set"] != "heldout" && c["activation_peak_gib"].is_number() && c["model"].is_string() && c["total_gib"].is_number();
    for case in logs().iter().filter(full) {
        let m = model(case["model"].as_str().unwrap());
        let g = gpu::lookup(case["gpu"].as_str().unwrap()).unwrap();
        // The catalogue's CUDA total is the median of public logs (validation/gpu/
        // cuda_totals.jsonl); drivers move it by up to ~0.2 GiB, so each log runs on its own.
        let total = cuda_total(&g) as f64 / GIB;
        let logged_total = case["total_gib"].as_f64().unwrap();
        assert!((total - logged_total).abs() < 0.2, "{}: CUDA total {total:.3} vs logged {logged_total}", case["id"]);
        let cfg = ServeConfig {
            tp: u(case, "tp"),
            max_model_len: Some(u(case, "max_model_len")),
            max_num_batched_tokens: Some(u(case, "max_num_batched_tokens")),
            max_num_seqs: Some(u(case, "max_num_seqs")),
            gpu_memory_utilization: case["gpu_memory_utilization"].as_f64().unwrap(),
            non_torch_memory: Some((case["non_torch_gib"].as_f64().unwrap() * GIB) as u64),
            engine: if case["engine"] == "vllm-v0" { VllmEngine::V0 } else { VllmEngine::V1 },
            ..ServeConfig::new((logged_total * GIB) as u64)
        };
        let r = serve(&m, &cfg).unwrap();
        let w = r.weights_bytes as f64 / GIB;
        let logged_w = case["weights_gib"].as_f64().unwrap();
        // Logged to 4 decimals ("Loading model weights took 14.9888 GB") or to 2.
        let tol = if (logged_w * 100.0).fract().abs() > 1e-9 { 1e-4 } else { 0.006 };
        assert!((w - logged_w).abs() < tol, "{}: weights {w:.4} GiB vs logged {logged_w}", case["id"]);
        if let Some(kv) = case["kv_cache_gib"].as_f64() {
            let got = r.kv_cache_bytes as f64 / GIB;
            assert!((got - kv).abs() / kv < 0.05, "{}: KV pool {got:.2} GiB vs logged {kv}", case["id"]);
        }
        let a = r.activation_peak_bytes as f64 / GIB;
        let logged_a = case["activation_peak_gib"].as_f64().unwrap();
        // Logged to 0.01 GiB; the target is vLLM's own number within 5%.
        assert!((a - logged_a).abs() / logged_a < 0.05, "{}: activation {a:.3} GiB vs logged {logged_a}", case["id"]);
        checked += 1;
    }
    assert!(checked >= 4);
}

#[test]
fn block_pool_matches_vllm_logs() {
    let mut checked = 0;
    // The pool below is one bf16 group at vLLM's defaults: the logs collected on 2026-12-05
    // (hybrid, sliding-window and multi-GPU pools) are measured end to end by
    // `accuracy_against_logs` instead.
    let simple =
        |c: &Value| c["collected"].is_null() && c["max_concurrency"].is_number() && c["kv_cache_gib"].is_number() && c["model"].is_string();
    for case in logs().into_iter().filter(simple) {
        let m = model(case["model"].as_str().unwrap());
        let logged_kv = case["kv_cache_gib"].as_f64().unwrap();
        let max_len = u(&case, "max_model_len");
        // The log rounds the pool to 0.01 GiB: every value inside the rounding interval must give
        // the logged block/token count at one of its ends, and the centre must land within a block.
        let pool = |gib: f64| kv_pool(&m, &PoolSpec::new((gib * GIB) as u64, max_len, 8192, 16, 2, u(&case, "tp"))).unwrap();
        let (lo, mid, hi) = (pool(logged_kv - 0.005), pool(logged_kv), pool(logged_kv + 0.005));
        if let Some(blocks) = case["num_kv_blocks"].as_u64() {
            assert!(lo.num_kv_blocks <= blocks && blocks <= hi.num_kv_blocks, "{}: {} blocks", case["id"], mid.num_kv_blocks);
        }
        if let Some(tokens) = case["kv_tokens"].as_u64() {
            assert!(lo.kv_tokens <= tokens && tokens <= hi.kv_tokens, "{}: {} tokens", case["id"], mid.kv_tokens);
        }
        let conc = case["max_concurrency"].as_f64().unwrap();
        assert!(lo.max_concurrency - 0.006 <= conc && conc <= hi.max_concurrency + 0.006, "{}: {}", case["id"], mid.max_concurrency);
        checked += 1;
    }
    assert_eq!(checked, 8);
}

/// Model Runner V2 start-ups (vLLM ≥ 0.25's default for dense models), each on its own logged
/// CUDA total and non-torch memory: the KV pool is requested − weights − non-torch − peak, the
/// peak including the CUDA-graph estimate from 0.29, and the profile's own peak is the sampler's
/// logits plus one fp32 copy. The Llama
/// log's peak is a known miss (`known_miss` in the data), held here so the README's claim about it
/// stays true.
#[test]
fn model_runner_v2_logs() {
    let mut checked = 0;
    for case in logs().into_iter().filter(|c| c["model_runner"] == "v2") {
        let id = case["id"].as_str().unwrap();
        let m = model(case["model"].as_str().unwrap());
        let total = (case["cuda_total_gib_logged"].as_f64().unwrap() * GIB) as u64;
        let non_torch = case["consumed_gib"].as_f64().unwrap() - case["weights_gib"].as_f64().unwrap();
        let cfg = ServeConfig {
            tp: u(&case, "tp"),
            max_model_len: Some(u(&case, "max_model_len")),
            max_num_batched_tokens: Some(u(&case, "max_num_batched_tokens")),
            max_num_seqs: Some(u(&case, "max_num_seqs")),
            gpu_memory_utilization: case["gpu_memory_utilization"].as_f64().unwrap(),
            non_torch_memory: Some((non_torch * GIB) as u64),
            vllm_version: VllmVersion::parse(case["vllm_version"].as_str().unwrap()).unwrap(),
            ..ServeConfig::new(total)
        };
        let r = serve(&m, &cfg).unwrap();
        assert_eq!(r.model_runner, Some(ModelRunner::V2), "{id}: vLLM's default runner for a dense model");
        // Model Runner V2 estimates its graphs from 0.29 (cudagraph_utils.py), as the V1 runner does.
        let estimates = cfg.vllm_version >= VllmVersion::MRV2_CUDA_GRAPH_ESTIMATE;
        assert_eq!(r.cuda_graph_estimate_bytes > 0, estimates, "{id}");
        let gib = |b: u64| b as f64 / GIB;
        let requested = case["requested_gib"].as_f64().unwrap();
        assert!((gib(r.requested_bytes) - requested).abs() < 0.006, "{id}: requested {:.3} vs {requested}", gib(r.requested_bytes));
        let w = case["weights_gib"].as_f64().unwrap();
        assert!((gib(r.weights_bytes) - w).abs() < 0.035, "{id}: weights {:.3} vs {w}", gib(r.weights_bytes));
        let (act, logged) = (gib(r.activation_peak_bytes), case["activation_peak_gib"].as_f64().unwrap());
        // Given the logged peak, vram's pool is vLLM's: requested − consumed − peak, no graph term.
        let kv = case["kv_cache_gib"].as_f64().unwrap();
        let pool = requested - case["consumed_gib"].as_f64().unwrap() - logged;
        assert!((pool - kv).abs() < 0.015, "{id}: {requested} − consumed − peak = {pool:.3}, logged KV {kv}");
        if case["known_miss"].is_string() {
            assert!(logged - act > 0.4, "{id}: the documented miss closed ({act:.3} vs {logged}): update known_miss and the README");
        } else {
            assert!((act - logged).abs() / logged < 0.15, "{id}: activation {act:.3} GiB vs logged {logged}");
        }
        checked += 1;
    }
    assert_eq!(checked, 2);
}

/// One log's errors: vram's defaults (nothing logged fed back) against what vLLM printed.
#[derive(Default)]
struct Errors {
    non_torch: Option<(f64, f64)>,
    non_kv: Option<(f64, f64)>,
    tokens: Option<(f64, f64)>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The accounting before this change: TP ≥ 2 non-torch 150 + 256 MiB on every GPU, no CUDA-graph
/// estimate (vLLM < 0.20 rules).
fn before(cfg: &ServeConfig) -> ServeConfig {
    let old = if cfg.tp > 1 { (150 + 256) << 20 } else { 150 << 20 };
    ServeConfig { non_torch_memory: Some(old), vllm_version: VllmVersion { major: 0, minor: 19 }, ..cfg.clone() }
}

/// Every log in validation/vllm/logs.jsonl, dev and held-out, against vram's defaults, before and
/// after the version/TP rules. Error bounds (stated, held on both sets):
/// - non-torch memory per GPU: within 0.30 GiB of the log (a GPU-independent constant cannot be
///   closer: TP 1 logs run from 0.03 to 0.35 GiB); logs from before vllm-project/vllm#11809, whose
///   non-torch figure also counts the allocator's free reserve, are left out of this one;
/// - non-KV memory per GPU (weights + activation peak + non-torch, of the rank that sets the
///   pool): within 13% of the log (the two H100 logs of vllm-project/vllm#10511 carry the
///   pre-#11809 non-torch figure, 1.6 GiB above vram's);
/// - KV tokens: within 20% of the log (12% until four held-out logs were added on 2026-11-27:
///   Model Runner V2 on vLLM 0.28 and 0.29, Qwen3-14B on an L40S, came out 13% and 18% high, a
///   profile-run term not yet located that every such report states; the two A100 logs of 0.15
///   and 0.19 came out within 2%). Counting Model Runner V2's request state (read in the 0.28–0.31
///   wheels on 2026-12-05) brought the two L40S logs to 10.3% and 8.9% high.
#[test]
fn accuracy_against_logs() {
    let gib = |b: u64| b as f64 / GIB;
    let mut table = String::from(
        "\n| logged start-up | set | GPU × TP | weights · activation peak (vram vs vLLM, GiB) | non-torch per GPU (vram default vs vLLM) | non-KV per GPU (vram vs vLLM) | KV tokens (vram vs vLLM) |\n|---|---|---|---|---|---|---|\n",
    );
    let mut by_set: std::collections::BTreeMap<String, Vec<Errors>> = Default::default();
    let mut refused: Vec<String> = Vec::new();
    for case in logs() {
        let id = case["id"].as_str().unwrap();
        let set = case["set"].as_str().unwrap_or("dev").to_string();
        let tp = case["tp"].as_u64();
        let multi = tp.map_or(case["multi_gpu"].as_bool().unwrap_or(false), |t| t > 1);
        let gpu_name = case["gpu"].as_str();
        let nvs = gpu_name.is_some_and(nvswitch_gpu);
        let mut e = Errors::default();
        let mut cells = ["—".to_string(), "—".to_string(), "—".to_string(), "—".to_string()];
        if let Some(nt) = case["non_torch_gib"].as_f64().filter(|_| case["non_torch_measure"].is_null()) {
            let tp_eff = if multi { 2 } else { 1 };
            let after = gib(non_torch_default(tp_eff, nvs));
            let old = if multi { (150.0 + 256.0) / 1024.0 } else { 150.0 / 1024.0 };
            e.non_torch = Some((old - nt, after - nt));
            cells[0] = format!("{after:.2} vs {nt} GiB");
        } else if let Some(nt) = case["non_torch_gib"].as_f64() {
            cells[0] = format!("{:.2} vs {nt} GiB (pre-#11809 measure)", gib(non_torch_default(if multi { 2 } else { 1 }, nvs)));
        }
        let g = gpu_name.and_then(|n| gpu::lookup(n).ok());
        if let (Some(spec), Some(g)) = (case["model"].as_str(), g) {
            let m = model(spec);
            let engine = if case["engine"] == "vllm-v0" { VllmEngine::V0 } else { VllmEngine::V1 };
            let version = case["vllm_version"].as_str().map(|v| VllmVersion::parse(v).unwrap()).unwrap_or(match engine {
                VllmEngine::V0 => VllmVersion { major: 0, minor: 6 },
                VllmEngine::V1 => VllmVersion::NEWEST,
            });
            let cfg = ServeConfig {
                tp: tp.unwrap_or(1),
                pp: case["pp"].as_u64().unwrap_or(1),
                expert_parallel: case["expert_parallel"] == true,
                enforce_eager: case["enforce_eager"] == true,
                max_model_len: case["max_model_len"].as_u64(),
                max_num_batched_tokens: case["max_num_batched_tokens"].as_u64(),
                max_num_seqs: case["max_num_seqs"].as_u64(),
                gpu_memory_utilization: case["gpu_memory_utilization"].as_f64().unwrap(),
                // A quantized checkpoint is served as stored (what `vram serve` does without
                // --quantization).
                quantization: match (&m.quantization, case["quantization"].as_str()) {
                    (Some(_), _) => Quantization::Checkpoint,
                    // Online quantization of a 16-bit checkpoint (`--quantization fp8`).
                    (None, Some(q)) => Quantization::parse(q).unwrap(),
                    (None, None) => Quantization::None,
                },
                kv_cache_dtype: case["kv_cache_dtype"].as_str().map(|d| {
                    assert!(d.starts_with("fp8"), "{id}: kv_cache_dtype {d}");
                    vram_core::DType::F8
                }),
                lora: case["lora"].as_object().map(|l| {
                    let n = l["max_loras"].as_u64().unwrap();
                    vram_core::serve::ServeLora { max_loras: n, max_lora_rank: l["max_lora_rank"].as_u64().unwrap(), max_cpu_loras: n }
                }),
                flashinfer_sampler: case["flashinfer_sampler"].as_bool(),
                engine,
                vllm_version: version,
                ..ServeConfig::new(cuda_total(&g)).with_gpu_traits(&g)
            };
            let (a, b) = match (serve(&m, &cfg), serve(&m, &before(&cfg))) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(err), _) | (_, Err(err)) => {
                    // A held-out log vram cannot plan is a result too: shown, never hidden.
                    assert_eq!(set, "heldout", "{id}: {err}");
                    cells[1] = format!("refused: {err}");
                    refused.push(id.to_string());
                    let _ =
                        writeln!(table, "| {id} | {set} | {} × {} | — | — | {} | — |", gpu_name.unwrap_or("?"), tp.unwrap_or(1), cells[1]);
                    by_set.entry(set).or_default().push(e);
                    continue;
                }
            };
            // The logged non-torch figure is consumed memory less the weights: it holds the
            // buffers the runner keeps from start-up (Model Runner V2's request state), so those
            // are compared with it.
            if let (Some(nt), Some((old, _))) =
                (case["non_torch_gib"].as_f64().filter(|_| case["non_torch_measure"].is_null()), e.non_torch)
            {
                if a.runner_buffers_bytes > 0 {
                    let after = gib(a.non_torch_bytes + a.runner_buffers_bytes);
                    e.non_torch = Some((old, after - nt));
                    cells[0] = format!(
                        "{after:.2} vs {nt} GiB (non-torch {:.2} + runner buffers {:.2})",
                        gib(a.non_torch_bytes),
                        gib(a.runner_buffers_bytes)
                    );
                }
            }
            let parts = ["weights_gib", "activation_peak_gib", "non_torch_gib"].map(|k| case[k].as_f64());
            if let (Some(w), Some(act)) = (parts[0], parts[1]) {
                cells[3] = format!("{:.4} vs {w} · {:.3} vs {act}", gib(a.weights_bytes), gib(a.activation_peak_bytes));
            }
            // The logged CUDA total, else the catalogue's for the GPU (the median of public logs,
            // which drivers move by up to 0.2 GiB: under 0.5% of the non-KV figures here).
            let logged_total = case["total_gib"].as_f64().or(case["requested_gib"].as_f64().map(|r| r / cfg.gpu_memory_utilization));
            let logged_non_kv = if let Some(b) = case["bottleneck_non_kv_gib"].as_f64() {
                Some(b)
            } else if parts.iter().all(Option::is_some) {
                Some(parts.iter().flatten().sum::<f64>())
            } else {
                match (logged_total.unwrap_or(gib(cuda_total(&g))), case["kv_cache_gib"].as_f64()) {
                    (t, Some(kv)) => Some(t * cfg.gpu_memory_utilization - kv),
                    _ => None,
                }
            };
            if let Some(l) = logged_non_kv {
                e.non_kv = Some((gib(b.non_kv_bytes) / l - 1.0, gib(a.non_kv_bytes) / l - 1.0));
                cells[1] = format!(
                    "{:.2} vs {l:.2} GiB ({:+.1}%){}",
                    gib(a.non_kv_bytes),
                    (gib(a.non_kv_bytes) / l - 1.0) * 100.0,
                    if logged_total.is_none() && !parts.iter().all(Option::is_some) { " ¹" } else { "" }
                );
            }
            if let Some(t) = case["kv_tokens"].as_u64() {
                let t = t as f64;
                e.tokens = Some((b.pool.kv_tokens as f64 / t - 1.0, a.pool.kv_tokens as f64 / t - 1.0));
                cells[2] = format!("{} vs {t} ({:+.1}%)", a.pool.kv_tokens, (a.pool.kv_tokens as f64 / t - 1.0) * 100.0);
            }
        }
        // Logged block pools of one full-attention group of 16-token blocks (the development
        // logs): concurrency is blocks / blocks one max-model-len request needs.
        if let (Some(blocks), Some(conc), Some(len), true) =
            (case["num_kv_blocks"].as_u64(), case["max_concurrency"].as_f64(), case["max_model_len"].as_u64(), set != "heldout")
        {
            let got = blocks as f64 / len.div_ceil(16) as f64;
            assert!((got - conc).abs() < 0.006, "{id}: {blocks} blocks give {got:.3}x, vLLM logged {conc}x");
        }
        let _ = writeln!(
            table,
            "| {} ({}{}) | {set} | {} × {} | {} | {} | {} | {} |",
            match case["source"].as_str().unwrap() {
                url if url.starts_with("http") => format!("[{id}]({url})"),
                _ => format!("{id} (a public file, quoted in logs.jsonl)"),
            },
            case["engine"].as_str().unwrap(),
            case["vllm_version"].as_str().map(|v| format!(" {v}")).unwrap_or_default(),
            gpu_name.unwrap_or("?"),
            tp.map_or("?".into(), |t| t.to_string()),
            cells[3],
            cells[0],
            cells[1],
            cells[2],
        );
        by_set.entry(set).or_default().push(e);
    }
    let mut summary = String::new();
    for (set, errs) in &by_set {
        let pick = |f: &dyn Fn(&Errors) -> Option<(f64, f64)>, after: bool| -> Vec<f64> {
            errs.iter().filter_map(f).map(|(b, a)| if after { a } else { b }.abs()).collect()
        };
        for (name, f, unit) in [
            ("non-torch", &(|e: &Errors| e.non_torch) as &dyn Fn(&Errors) -> Option<(f64, f64)>, "GiB"),
            ("non-KV", &|e: &Errors| e.non_kv, "%"),
            ("KV tokens", &|e: &Errors| e.tokens, "%"),
        ] {
            let (b, a) = (pick(f, false), pick(f, true));
            if a.is_empty() {
                continue;
            }
            let s = if unit == "%" { 100.0 } else { 1.0 };
            let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
            let _ = writeln!(
                summary,
                "{set} {name} (n={}): median {:.2}{unit} → {:.2}{unit}, max {:.2}{unit} → {:.2}{unit}",
                a.len(),
                median(b.clone()) * s,
                median(a.clone()) * s,
                max(&b) * s,
                max(&a) * s
            );
            // The held-out non-torch bound is wider: Qwen3-235B-FP8 over four PCIe RTX PRO 6000
            // (vLLM 0.27.1, added 2026-12-05) logged 1.70 GiB of consumed memory beyond its
            // weights against vram's 0.40, a figure first seen when it was measured; its non-KV
            // memory is within 1.1% all the same.
            let bound = match (name, set.as_str()) {
                ("non-torch", "heldout") => 1.35,
                ("non-torch", _) => 0.30,
                ("non-KV", _) => 0.13,
                _ => 0.20,
            };
            assert!(max(&a) <= bound, "{set} {name}: max error {:.3} above the stated bound {bound}\n{table}", max(&a));
        }
    }
    eprintln!("{table}\n{summary}");
    table.push_str(&format!(
        "\n¹ The log prints no CUDA total: the catalogue's for the GPU is used (the median of public logs).\n\nvram's defaults, nothing logged fed back (before → after the version and TP rules):\n\n```text\n{summary}```\n"
    ));
    readme::sync_section("<!-- serve:begin -->", "<!-- serve:end -->", &table, "vLLM evidence table");
}

/// Numbers worked by hand from vLLM's source for a Gemma-2-9B on an H100 80GB.
#[test]
fn hybrid_sliding_layers_by_hand() {
    let m = presets::load("gemma-2-9b").unwrap(); // 42 layers, 21 sliding (4096), 8 KV heads × 256
    let p = PoolSpec::new(40 << 30, 8192, 8192, 16, 2, 1);
    let pool = kv_pool(&m, &p).unwrap();
    // page = 2 × 16 × 8 × 256 × 2 = 131072 B; groups of 21 layers: one full, one sliding.
    assert_eq!(pool.page_size_bytes, 131_072);
    assert_eq!(pool.group_size, 21);
    assert_eq!(pool.groups.len(), 2);
    // blocks = 40 GiB // 131072 // 21 = 327680 // 21 = 15603.
    assert_eq!(pool.num_kv_blocks, 15_603);
    // tokens = blocks // 2 groups × 16.
    assert_eq!(pool.kv_tokens, pool.num_kv_blocks / 2 * 16);
    // One request: full 8192/16 = 512 blocks; sliding min(4095 + 8192, 8192)/16 + 1 = 513.
    assert_eq!(pool.groups[0].blocks_per_request + pool.groups[1].blocks_per_request, 1025);
    assert!((pool.max_concurrency - pool.num_kv_blocks as f64 / 1025.0).abs() < 1e-12);
    // Newer vLLM logs max concurrency × max-model-len, truncated: 15603 / 1025 × 8192 = 124,702.7,
    // where the older figure is 15603 // 2 groups × 16 = 124,816.
    let newer = kv_pool(&m, &PoolSpec { tokens_from_concurrency: true, ..p }).unwrap();
    assert_eq!((pool.kv_tokens, newer.kv_tokens), (124_816, 124_702));
}

#[test]
fn mla_caches_one_latent_per_token_unsplit_by_tp() {
    let cfg = r#"{"model_type":"deepseek_v3","hidden_size":7168,"num_hidden_layers":61,"num_attention_heads":128,
        "num_key_value_heads":128,"vocab_size":129280,"intermediate_size":18432,"moe_intermediate_size":2048,
        "n_routed_experts":256,"num_experts_per_tok":8,"n_shared_experts":1,"first_k_dense_replace":3,
        "q_lora_rank":1536,"kv_lora_rank":512,"qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,
        "max_position_embeddings":163840,"torch_dtype":"bfloat16"}"#;
    let m = parse_config(cfg.as_bytes(), "deepseek-v3", "inline").unwrap();
    for tp in [1, 8] {
        let r = serve(&m, &ServeConfig { tp, max_model_len: Some(32768), ..ServeConfig::new(141 << 30) }).unwrap();
        // MLAAttentionSpec: (kv_lora_rank + qk_rope_head_dim) × 16 × 2 bytes, whatever the TP.
        assert_eq!(r.pool.page_size_bytes, (512 + 64) * 16 * 2);
    }
}

#[test]
fn fp8_kv_doubles_the_tokens_and_quantised_weights_shrink() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let base = ServeConfig { max_model_len: Some(8192), ..ServeConfig::new(80 << 30) };
    let bf16 = serve(&m, &base).unwrap();
    let fp8kv = serve(&m, &ServeConfig { kv_cache_dtype: Some(vram_core::DType::F8), ..base.clone() }).unwrap();
    assert_eq!(fp8kv.pool.page_size_bytes * 2, bf16.pool.page_size_bytes);
    assert!(fp8kv.pool.kv_tokens >= 2 * bf16.pool.kv_tokens - 32);
    let awq = serve(&m, &ServeConfig { quantization: Quantization::Awq, ..base.clone() }).unwrap();
    // Embeddings and LM head stay 16-bit (2 × 128256 × 4096 × 2 B ≈ 1.96 GiB); the 6.98B decoder
    // weights drop to ~0.53 B each.
    let gib = awq.weights_bytes as f64 / GIB;
    assert!((5.3..5.6).contains(&gib), "{gib}");
    assert!(awq.quant_scales_bytes > 0);
}

#[test]
fn a_model_that_does_not_fit_says_by_how_much() {
    let m = presets::load("llama-3.1-70b").unwrap();
    let r = serve(&m, &ServeConfig::new(80 << 30)).unwrap();
    assert!(!r.fits);
    assert!(r.shortfall_bytes > 50 << 30);
    assert_eq!(r.kv_cache_bytes, 0);
}

mod properties {
    use proptest::prelude::*;
    use vram_core::serve::{serve, Quantization, ServeConfig};
    use vram_core::{presets, DType};

    const MODELS: &[&str] = &["gpt2", "qwen2.5-0.5b", "llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "gemma-2-9b", "phi-3-mini"];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

        /// Whatever the settings: no panic; the budget adds up; more memory never means fewer
        /// blocks; a longer max-model-len never raises concurrency.
        #[test]
        fn accounting_adds_up(
            mi in 0..MODELS.len(),
            tp in prop_oneof![Just(1u64), Just(2), Just(4), Just(8), Just(3)],
            gib in 8u64..200,
            util in 0.3f64..1.0,
            len in 1u64..200_000,
            q in 0usize..5,
            fp8 in any::<bool>(),
            batched in prop_oneof![Just(None), (1u64..40_000).prop_map(Some)],
        ) {
            let m = presets::load(MODELS[mi]).unwrap();
            let cfg = ServeConfig {
                tp,
                gpu_memory_utilization: util,
                max_model_len: Some(len),
                quantization: [Quantization::None, Quantization::Awq, Quantization::Gptq, Quantization::Fp8, Quantization::Bnb4bit][q],
                kv_cache_dtype: fp8.then_some(DType::F8),
                max_num_batched_tokens: batched,
                ..ServeConfig::new(gib << 30)
            };
            let Ok(r) = serve(&m, &cfg) else { return Ok(()) }; // e.g. TP not dividing the heads
            prop_assert_eq!(r.non_kv_bytes, r.weights_bytes + r.activation_peak_bytes + r.non_torch_bytes + r.runner_buffers_bytes);
            prop_assert_eq!(r.kv_cache_bytes + r.non_kv_bytes - r.shortfall_bytes, r.requested_bytes);
            prop_assert!(r.pool.num_kv_blocks * r.pool.page_size_bytes * r.pool.group_size <= r.kv_cache_bytes);
            prop_assert!(r.pool.max_model_len_that_fits <= len);
            prop_assert_eq!(r.fits, r.pool.max_model_len_that_fits == len && r.shortfall_bytes == 0);
            let bigger = serve(&m, &ServeConfig { gpu_memory: (gib + 16) << 30, ..cfg.clone() }).unwrap();
            prop_assert!(bigger.pool.num_kv_blocks >= r.pool.num_kv_blocks);
            let longer = serve(&m, &ServeConfig { max_model_len: Some(len * 2), ..cfg.clone() }).unwrap();
            prop_assert!(longer.pool.max_concurrency <= r.pool.max_concurrency + 1e-12);
        }
    }
}

/// Pipeline stages: vLLM's layer split, embedding on the first stage, LM head on the last.
mod pipeline {
    use vram_core::presets;
    use vram_core::serve::{pp_layers, serve, ServeConfig};

    #[test]
    fn layers_split_as_get_pp_indices() {
        // vllm/distributed/utils.py get_pp_indices: the remainder goes to partitions[-2], [-3], …
        assert_eq!(pp_layers(80, 2), [40, 40]);
        assert_eq!(pp_layers(61, 4), [15, 15, 16, 15]);
        assert_eq!(pp_layers(32, 3), [11, 11, 10]);
        assert_eq!(pp_layers(28, 1), [28]);
    }

    #[test]
    fn stage_weights_add_up_to_the_model() {
        for (name, tied) in [("llama-3.1-70b", false), ("llama-3.2-1b", true)] {
            let m = presets::load(name).unwrap();
            let base = ServeConfig { max_model_len: Some(8192), ..ServeConfig::new(80 << 30) };
            let one = serve(&m, &base).unwrap();
            let two = serve(&m, &ServeConfig { pp: 2, ..base.clone() }).unwrap();
            let sum: u64 = two.pp_ranks.iter().map(|r| r.weights_bytes).sum();
            // Each stage holds the rotary cache once; a tied embedding is on both ends.
            let embed = if tied { m.vocab.div_ceil(64) * 64 * m.hidden * 2 } else { 0 };
            assert_eq!(sum, one.weights_bytes + one.rotary_cache_bytes + embed, "{name}");
            // The last stage runs the sampler; the first does not.
            assert!(two.pp_ranks[0].activation_peak_bytes <= two.pp_ranks[1].activation_peak_bytes);
            // Half the layers: half the KV bytes per token.
            assert_eq!(two.pool.kv_bytes_per_token * 2, one.pool.kv_bytes_per_token);
        }
    }

    #[test]
    fn unmodelled_splits_are_errors() {
        let gemma = presets::load("gemma-2-9b").unwrap();
        assert!(serve(&gemma, &ServeConfig { pp: 2, ..ServeConfig::new(80 << 30) }).is_err());
        let mixtral = presets::load("mixtral-8x7b").unwrap(); // every layer MoE: fine
        assert!(serve(&mixtral, &ServeConfig { pp: 2, max_model_len: Some(4096), ..ServeConfig::new(80 << 30) }).is_ok());
    }
}

/// A config that names no maximum length (Falcon-7B's RW config: no max_position_embeddings,
/// n_positions or seq_length) is served at the engines' own default of 2048 tokens, which both
/// log, and the report says so; a given length still wins.
#[test]
fn a_config_without_a_length_takes_the_engines_default() {
    let m = model("validation/configs/falcon-7b.json");
    assert_eq!(m.max_positions, 0);
    let r = serve(&m, &ServeConfig::new(80 << 30)).unwrap();
    assert_eq!(r.max_model_len, 2048);
    assert!(r.notes.iter().any(|n| n.starts_with("--max-model-len 2048: the config names no maximum length")), "{:?}", r.notes);
    let given = serve(&m, &ServeConfig { max_model_len: Some(4096), ..ServeConfig::new(80 << 30) }).unwrap();
    assert_eq!(given.max_model_len, 4096);
    assert!(!given.notes.iter().any(|n| n.contains("names no maximum length")));
    let g = gpu::lookup("h100").unwrap();
    let cfg = vram_core::sglang::SglangConfig::new(cuda_total(&g), g.memory >> 20);
    let s = vram_core::sglang::sglang(&m, &cfg).unwrap();
    assert_eq!(s.context_len, 2048);
    assert!(s.notes.iter().any(|n| n.starts_with("--context-length 2048")), "{:?}", s.notes);
}

/// vLLM's default `--max-model-len` applies the config's RoPE scaling
/// (vllm/config/model.py `_get_and_verify_max_len`): Qwen3-8B with the YaRN block Qwen documents
/// for 128K (factor 4 over 32,768) serves at 131,072, a linear factor 4 over Llama-2's 4,096 at
/// 16,384; Llama-3's own scaling keeps its 131,072; SGLang multiplies the linear factor only.
#[test]
fn the_default_length_follows_rope_scaling() {
    let with = |name: &str, rope: serde_json::Value| {
        let mut v: Value = serde_json::from_str(presets::find(name).unwrap().config).unwrap();
        v["rope_scaling"] = rope;
        parse_config(v.to_string().as_bytes(), name, name).unwrap()
    };
    let cfg = ServeConfig::new(80 << 30);
    let yarn = with("qwen3-8b", serde_json::json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}));
    assert_eq!(serve(&yarn, &cfg).unwrap().max_model_len, 131_072);
    let linear = with("llama-2-7b", serde_json::json!({"type": "linear", "factor": 4.0}));
    assert_eq!(serve(&linear, &cfg).unwrap().max_model_len, 16_384);
    assert_eq!(serve(&presets::load("llama-3.1-8b").unwrap(), &cfg).unwrap().max_model_len, 131_072);
    // Past the derived length vLLM refuses without VLLM_ALLOW_LONG_MAX_MODEL_LEN; within it, no note.
    let long = serve(&linear, &ServeConfig { max_model_len: Some(20_000), ..cfg.clone() }).unwrap();
    assert!(long.notes.iter().any(|n| n.contains("exceeds the 16384 tokens vLLM derives")), "{:?}", long.notes);
    let g = gpu::lookup("h100").unwrap();
    let sg = vram_core::sglang::SglangConfig::new(cuda_total(&g), g.memory >> 20);
    assert_eq!(vram_core::sglang::sglang(&linear, &sg).unwrap().context_len, 16_384);
    assert_eq!(vram_core::sglang::sglang(&yarn, &sg).unwrap().context_len, 40_960);
}

/// An encoder vLLM implements (BERT, RoBERTa/XLM-R, ModernBERT) is answered with what vLLM does
/// for it — no KV cache, no profile — and where its memory comes from; one vLLM has no model for
/// (DeBERTa) keeps the plain refusal.
#[test]
fn encoders_are_answered_with_what_vllm_does_for_them() {
    let enc = |f: &str| model(&format!("validation/configs/families/{f}.json"));
    for f in ["bert-base-uncased", "xlm-roberta-base", "modernbert-base"] {
        let e = serve(&enc(f), &ServeConfig::new(80 << 30)).unwrap_err().to_string();
        assert!(e.contains("with no KV cache") && e.contains("--mode infer"), "{f}: {e}");
    }
    let e = serve(&enc("deberta-v3-base"), &ServeConfig::new(80 << 30)).unwrap_err().to_string();
    assert!(e.contains("modelled for decoder language models only"), "{e}");
}

/// The catalogue's CUDA totals are the lower median of the unflagged public hits for each GPU
/// (validation/gpu/cuda_totals.jsonl), and every GPU with such hits has one.
#[test]
fn cuda_totals_are_the_logged_medians() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/gpu/cuda_totals.jsonl")).unwrap();
    let mut by_gpu: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in text.lines().skip(1) {
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(name) = v["vram_gpu"].as_str() {
            assert_eq!(v["flags"], "", "{line}");
            let mib = (v["cuda_total_gib"].as_f64().unwrap() * 1024.0).round() as u64;
            by_gpu.entry(name.to_string()).or_default().push(mib);
        }
    }
    let table = vram_core::gpu::logged_cuda_totals_mib();
    assert_eq!(table.len(), by_gpu.len());
    for (name, mut hits) in by_gpu {
        hits.sort_unstable();
        let median = hits[(hits.len() - 1) / 2];
        let row = table.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("{name} has logged totals but no table row"));
        assert_eq!(row.1, median, "{name}: {hits:?}");
        let g = gpu::lookup(&name).unwrap();
        assert_eq!(vram_core::gpu::cuda_total(&g), (median << 20, vram_core::gpu::CudaTotalSource::Logged));
    }
}

/// Model Runner V2's per-request state, as the 0.28–0.31 wheels allocate it in `load_model`
/// (read from source): at 256 requests, Llama 3's 128,256-token vocabulary and 2,048 batched
/// tokens, table by table, 131,334,144 bytes of them the penalties' bin counts.
#[test]
fn model_runner_v2_keeps_its_request_state_from_start_up() {
    let (r, v, t) = (256u64, 128_256u64, 2048u64);
    let words = v.div_ceil(32);
    let tables = [
        r * v * 4,                  // penalties.py output_bin_counts [R, V] int32
        r * words * 4,              // penalties.py prompt_bin_mask [R, ⌈V/32⌉] int32
        r * words * 4 + r * 4,      // structured_outputs.py bitmask [R, ⌈V/32⌉] and indices [R]
        3 * r * 1024 * 4,           // logit_bias.py allowed ids, biased ids, biases [R, 1024]
        r * 128 * 4,                // logit_bias.py stop ids [R, 128]
        r * 1024 * 4 + r * 129 * 4, // bad_words.py ids [R, 1024] and offsets [R, 129]
        r * 128 * 4,                // logprob.py token ids [R, 128]
        2 * r * 4 + r * 8 + r * 4,  // states.py lengths, computed tokens; last sampled (int64); next prefill
        t * 4 + t * 8 + t,          // input_batch.py ids [T], positions [T] int64, padding flags [T] bool
        (r + 1) * 4 + 2 * r * 4,    // input_batch.py query starts [R + 1], sequence lengths [R] twice
    ];
    assert_eq!(tables[0], 131_334_144);
    assert_eq!(vram_core::serve::mrv2_state_buffers(v, r, t), tables.iter().sum::<u64>());
    assert_eq!(tables.iter().sum::<u64>(), 144_166_916);
    let m = presets::load("llama-3.1-8b").unwrap();
    let g = gpu::lookup("a100-80gb").unwrap();
    let at = |minor: u32, runner: Option<ModelRunner>, non_torch: Option<u64>| {
        serve(
            &m,
            &ServeConfig {
                vllm_version: VllmVersion { major: 0, minor },
                model_runner: runner,
                non_torch_memory: non_torch,
                max_model_len: Some(8192),
                gpu_is_a100: true,
                ..ServeConfig::new(cuda_total(&g))
            },
        )
        .unwrap()
    };
    let v2 = at(31, None, None);
    assert_eq!(v2.runner_buffers_bytes, 144_166_916);
    assert_eq!(v2.non_kv_bytes, v2.weights_bytes + v2.activation_peak_bytes + v2.non_torch_bytes + v2.runner_buffers_bytes);
    // The V1 runner computes its bin counts when it samples: nothing kept.
    assert_eq!(at(31, Some(ModelRunner::V1), None).runner_buffers_bytes, 0);
    // Before 0.28 (not read) and with a logged non-torch figure (which holds them): not added.
    assert_eq!(at(27, Some(ModelRunner::V2), None).runner_buffers_bytes, 0);
    assert_eq!(at(31, None, Some(300 << 20)).runner_buffers_bytes, 0);
}

/// vLLM's CUDA-graph estimate against the curated logs (validation/vllm/graph_memory.jsonl):
/// the constants are the medians graph_fit.py prints over the development logs, the capture
/// counts vram derives are the ones vLLM logged where the log gives the scheduler limits and
/// vLLM's default sizes, and the held-out logs stay within the error the README states.
#[test]
fn cuda_graph_estimate_against_logs() {
    use vram_core::serve_graphs::{capture_sizes, PER_LAYER_GRAPH, PER_LAYER_GRAPH_NCCL};
    let text = std::fs::read_to_string(root().join("validation/vllm/graph_memory.jsonl")).unwrap();
    let entries: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let layer_graphs = |e: &Value| u(e, "piecewise_sizes") * (u(e, "layers") + 1) + u(e, "full_sizes") * u(e, "layers");
    let logged = |e: &Value| e["estimated_gib"].as_f64().or(e["actual_gib"].as_f64()).unwrap();
    for (set, constant) in [("dev", PER_LAYER_GRAPH), ("dev-nccl", PER_LAYER_GRAPH_NCCL)] {
        let per: Vec<f64> = entries.iter().filter(|e| e["set"] == set).map(|e| logged(e) * GIB / layer_graphs(e) as f64 / 1024.0).collect();
        assert_eq!(median(per).round() as u64, constant / 1024, "{set}: graph_fit.py's median KiB per layer-graph");
    }
    let (mut counted, mut errors) = (0, vec![]);
    for e in &entries {
        let version = e["vllm_version"].as_str().and_then(|v| VllmVersion::parse(v.split(' ').next().unwrap()).ok());
        if let (Some(v), Some(seqs)) = (version, e["max_num_seqs"].as_u64()) {
            let cfg = ServeConfig { vllm_version: v, ..ServeConfig::new(80 << 30) };
            let sizes = capture_sizes(&cfg, seqs, e["max_num_batched_tokens"].as_u64().unwrap_or(8192));
            let full = sizes.iter().filter(|&&s| s <= seqs).count() as u64;
            assert_eq!((sizes.len() as u64, full), (u(e, "piecewise_sizes"), u(e, "full_sizes")), "{}", e["id"]);
            counted += 1;
        }
        let per = if e["nccl_in_graphs"] == true { PER_LAYER_GRAPH_NCCL } else { PER_LAYER_GRAPH };
        let err = (layer_graphs(e) * per) as f64 / GIB / logged(e) - 1.0;
        if e["set"] == "heldout" {
            errors.push(err.abs());
        }
    }
    assert!(counted >= 6, "{counted}");
    // README: held-out median 7% (the flat 0.71 GiB before: 62%); the worst, +81%, a 0.18 log of
    // a 2B model whose 51 full graphs are not vLLM's default.
    assert_eq!(errors.len(), 5);
    assert!(median(errors.clone()) < 0.08, "{errors:?}");
}

/// A pre-quantized checkpoint under pipeline parallelism: each stage holds its own layers as
/// stored (block-scaled fp8 here), the embedding on the first, the head on the last; the stages
/// add up to the unsplit model, each with its own rotary cache.
#[test]
fn pipeline_stages_of_a_prequantized_checkpoint_add_up() {
    let m = model("validation/vllm/configs/qwen3-235b-a22b-instruct-2507-fp8.config.json");
    assert!(m.quantization.is_some());
    let cfg = ServeConfig { quantization: Quantization::Checkpoint, max_model_len: Some(32768), ..ServeConfig::new(200 << 30) };
    let one = serve(&m, &cfg).unwrap();
    let four = serve(&m, &ServeConfig { pp: 4, ..cfg.clone() }).unwrap();
    let stages: u64 = four.pp_ranks.iter().map(|r| r.weights_bytes).sum();
    assert_eq!(stages, one.weights_bytes + 3 * one.rotary_cache_bytes);
    // 94 layers: 23, 24, 24, 23 (get_pp_indices gives the remainder to the middle stages).
    assert_eq!(four.pp_ranks.iter().map(|r| r.layers).collect::<Vec<_>>(), [23, 24, 24, 23]);
    assert!(four.pp_ranks[1].weights_bytes > four.pp_ranks[0].weights_bytes);
}

/// vLLM's default batch by GPU and release (engine/arg_utils.py get_batch_defaults): 16384
/// tokens on a GPU of 160 GiB or more from 0.28, 8192 before and on an H100; without chunked
/// prefill the default grows to max-model-len.
#[test]
fn default_batch_follows_the_gpu_and_the_release() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let batched = |gpu: &str, minor: u32, chunked: bool| {
        let g = gpu::lookup(gpu).unwrap();
        let cfg = ServeConfig {
            max_model_len: Some(32768),
            vllm_version: VllmVersion { major: 0, minor },
            chunked_prefill: chunked,
            ..ServeConfig::new(cuda_total(&g)).with_gpu_traits(&g)
        };
        serve(&m, &cfg).unwrap().max_num_batched_tokens
    };
    assert_eq!(batched("b200", 28, true), 16_384);
    assert_eq!(batched("b200", 25, true), 8192);
    assert_eq!(batched("h100", 33, true), 8192);
    assert_eq!(batched("h100", 33, false), 32_768);
    assert_eq!(batched("a100-40gb", 33, true), 2048);
}

/// Pipeline parallelism, held out (validation/vllm/logs.jsonl, the GH200 TP 4 × PP 2 log of
/// Qwen3-30B-A3B-Instruct-2507 under vLLM 0.10.1): both stages hold 24 layers, the first the
/// embedding, the last the final norm, the LM head and the sampler's profile peak, and the log
/// prints each stage's KV budget (76.15 and 70.58 GiB). The GPU's total is not printed (GH200 is
/// not catalogued), but both stages share it, so the difference of their non-KV memory is the
/// difference of their logged KV budgets whatever the total.
#[test]
fn pipeline_stages_differ_as_a_logged_pp2_start_up() {
    let case = logs().into_iter().find(|c| c["id"] == "qwen3-30b-a3b-2507-gh200-tp4pp2-v0.10.1").unwrap();
    let mut m = model(case["model"].as_str().unwrap());
    m.max_positions = u(&case, "max_position_embeddings");
    let cfg = ServeConfig {
        tp: u(&case, "tp"),
        pp: u(&case, "pp"),
        max_model_len: Some(u(&case, "max_model_len")),
        max_num_batched_tokens: Some(u(&case, "max_num_batched_tokens")),
        max_num_seqs: Some(u(&case, "max_num_seqs")),
        gpu_memory_utilization: case["gpu_memory_utilization"].as_f64().unwrap(),
        vllm_version: VllmVersion::parse(case["vllm_version"].as_str().unwrap()).unwrap(),
        ..ServeConfig::new(96 << 30)
    };
    let r = serve(&m, &cfg).unwrap();
    let stage = |i: usize| (r.pp_ranks[i].weights_bytes + r.pp_ranks[i].activation_peak_bytes) as f64 / GIB;
    let logged = case["stage_kv_gib"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect::<Vec<_>>();
    let (got, want) = (stage(1) - stage(0), logged[0] - logged[1]);
    eprintln!("PP 2 stage difference: vram {got:.2} GiB, log {want:.2} GiB");
    // First measured at 1.43 GiB: the log showed the last stage's sampler peak that vram then
    // modelled from vLLM 0.10's source (PyTorch's top-k/top-p sort, `Sampler::V1Sort`), which
    // gives 4.90 GiB; the 0.67 GiB left is not located (README).
    assert!((got - want).abs() < 1.0, "stage 1 − stage 0 non-KV: vram {got:.2} GiB, log {want:.2} GiB");
}

/// The V1 runner's profile sampler by release: PyTorch's top-k/top-p sort before 0.17 (36
/// bytes a logit beside the model-dtype logits), Triton's in-place kernel from 0.17 (12) unless
/// fewer than 8 requests, and FlashInfer's (12) when `VLLM_USE_FLASHINFER_SAMPLER` says so.
#[test]
fn the_v1_samplers_peak_follows_the_release() {
    let m = presets::load("qwen3-8b").unwrap();
    let peak = |minor: u32, seqs: u64, flashinfer: Option<bool>| {
        let cfg = ServeConfig {
            max_model_len: Some(4096),
            max_num_seqs: Some(seqs),
            // A small batch for a few requests, so the sampler rather than the forward peaks.
            max_num_batched_tokens: Some(if seqs < 8 { 16 } else { 2048 }),
            enforce_eager: true,
            vllm_version: VllmVersion { major: 0, minor },
            flashinfer_sampler: flashinfer,
            ..ServeConfig::new(80 << 30)
        };
        serve(&m, &cfg).unwrap().activation_peak_bytes
    };
    let logits = 1024 * 151_936u64;
    assert_eq!(peak(16, 1024, None) - peak(17, 1024, None), 24 * logits);
    assert_eq!(peak(16, 1024, Some(true)), peak(17, 1024, None));
    assert_eq!(peak(20, 1024, Some(false)), peak(17, 1024, None), "from 0.17 Triton's kernel, whatever the variable");
    // Below 8 requests 0.17 sorts too (`logits.shape[0] >= 8` picks Triton).
    let few = 4 * 151_936u64;
    assert_eq!(peak(17, 4, None) - peak(17, 4, Some(true)), 24 * few);
}

/// `--disable-sliding-window` (vllm/config/model.py): Gemma-2-9B's derived length is capped to
/// its 4096-token window and every one of its 42 layers caches the whole context, in one group.
#[test]
fn disabling_the_sliding_window_caps_the_length_and_fills_every_layer() {
    let m = presets::load("gemma-2-9b").unwrap();
    let base = ServeConfig::new(80 << 30);
    let r = serve(&m, &ServeConfig { disable_sliding_window: true, ..base.clone() }).unwrap();
    assert_eq!(r.max_model_len, 4096);
    assert_eq!((r.pool.groups.len(), r.pool.group_size), (1, 42));
    let windowed = serve(&m, &ServeConfig { max_model_len: Some(4096), ..base.clone() }).unwrap();
    assert_eq!(windowed.pool.groups.len(), 2);
    assert!(r.notes.iter().any(|n| n.starts_with("--disable-sliding-window")));
    let llama = presets::load("llama-3.1-8b").unwrap();
    assert!(serve(&llama, &ServeConfig { disable_sliding_window: true, ..base }).unwrap_err().to_string().contains("no sliding-window"));
}

/// `--num-gpu-blocks-override N`: the pool is N blocks of N × page × layers bytes, whatever the
/// budget (v1/core/kv_cache_planning.py), and a pool the GPU cannot hold is a shortfall.
#[test]
fn a_block_override_sets_the_pool() {
    let m = presets::load("llama-3.1-8b").unwrap();
    let cfg = ServeConfig { max_model_len: Some(8192), num_gpu_blocks_override: Some(15_000), ..ServeConfig::new(80 << 30) };
    let r = serve(&m, &cfg).unwrap();
    assert_eq!((r.pool.num_kv_blocks, r.pool.kv_tokens), (15_000, 240_000));
    // 2 × 16 tokens × 8 KV heads × 128 × 2 bytes a layer, 32 layers.
    assert_eq!(r.kv_cache_bytes, 15_000 * 65_536 * 32);
    let huge = serve(&m, &ServeConfig { num_gpu_blocks_override: Some(100_000), ..cfg }).unwrap();
    assert!(!huge.fits && huge.shortfall_bytes > 0);
}

/// EPLB (vllm/distributed/eplb/eplb_state.py, fused_moe/layer.py): redundant experts are
/// physical experts spread with the model's — Qwen3-30B-A3B's 128 plus 32 over 4 GPUs is 40 a
/// GPU instead of 32 — and its tables are kept on every GPU.
#[test]
fn eplb_spreads_redundant_experts_and_keeps_its_tables() {
    use vram_core::serve::Eplb;
    let m = presets::load("qwen3-30b-a3b").unwrap();
    let cfg = ServeConfig { tp: 4, expert_parallel: true, max_model_len: Some(8192), ..ServeConfig::new(80 << 30) };
    let plain = serve(&m, &cfg).unwrap();
    let eplb = |redundant: u64| {
        serve(&m, &ServeConfig { eplb: Some(Eplb { redundant_experts: redundant, window_size: 1000 }), ..cfg.clone() }).unwrap()
    };
    let (none, some) = (eplb(0), eplb(32));
    assert_eq!(none.weights_bytes, plain.weights_bytes);
    let experts: u64 = m.tensors().iter().filter(|t| t.role == vram_core::model::Role::Experts).map(|t| t.numel * t.count).sum();
    // bf16: (40 − 32) of 128 experts' bytes more per GPU.
    assert_eq!(some.weights_bytes - none.weights_bytes, experts * 2 / 128 * 8);
    // 48 MoE layers: 128 × 1024 int64 slots, maps and counts, a 1000-step int32 window of 160.
    let tables = Eplb { redundant_experts: 32, window_size: 1000 }.buffer_bytes(128, 48);
    assert_eq!(tables, 48 * (128 * 1024 * 8 + 160 * 8 + 128 * 8 + 160 * 4) + 1000 * 48 * 160 * 4);
    assert_eq!(some.runner_buffers_bytes - plain.runner_buffers_bytes, tables as u64);
}
