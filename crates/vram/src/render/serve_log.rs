//! `vram serve --log FILE`: the estimate beside what a real start-up log printed. Pure: built from
//! the estimate and the parsed log, rendered as text or JSON.

use std::fmt::Write;

use serde::Serialize;
use serde_json::{json, Value};
use vram_core::serve::{ServeReport, VllmEngine, VllmVersion};
use vram_core::startup_log::{LlamaCppLog, LogSize, SglangLog, StartupLog, VllmLog};

use crate::commands::serve::{LlamaCppServe, SglangServe, VllmServe};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// One quantity: vram's figure and the log's, in `unit`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What is compared.
    pub quantity: &'static str,
    /// "GiB", "MiB", "tokens", "blocks", "x" or "%".
    pub unit: &'static str,
    /// vram's figure.
    pub estimate: f64,
    /// The log's figure (None: the log did not print it).
    pub log: Option<f64>,
    /// The log's text as printed.
    pub log_printed: Option<String>,
    /// log − estimate.
    pub difference: Option<f64>,
    /// (log − estimate) / estimate × 100; None where the estimate is 0.
    pub percent: Option<f64>,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// "vllm", "sglang" or "llama.cpp".
    pub engine: &'static str,
    /// Ranks that printed lines.
    pub ranks: u64,
    /// Where the log contradicts the flags: the comparison is then of different set-ups.
    pub contradictions: Vec<String>,
    /// The rows.
    pub rows: Vec<Row>,
    /// The likely reasons for the largest differences, derived from which component differs.
    pub reasons: Vec<String>,
}

fn row(quantity: &'static str, unit: &'static str, estimate: f64, log: Option<f64>, printed: Option<String>) -> Row {
    let difference = log.map(|l| l - estimate);
    let percent = difference.filter(|_| estimate != 0.0).map(|d| d / estimate * 100.0);
    Row { quantity, unit, estimate, log, log_printed: printed, difference, percent }
}

fn gib_row(quantity: &'static str, bytes: u64, log: &Option<LogSize>) -> Row {
    row(quantity, "GiB", bytes as f64 / GIB, log.as_ref().map(|s| s.gib), log.as_ref().map(|s| s.printed.clone()))
}

fn count_row(quantity: &'static str, unit: &'static str, estimate: f64, log: Option<f64>) -> Row {
    row(quantity, unit, estimate, log, log.map(|v| v.to_string()))
}

/// A log size as text, as printed.
fn shown(s: &Option<LogSize>) -> String {
    s.as_ref().map_or_else(|| "not printed".into(), |s| s.printed.clone())
}

/// The memory rows that differ by 5% or more, largest first (at most three).
fn largest(rows: &[Row]) -> Vec<&Row> {
    let mut v: Vec<&Row> =
        rows.iter().filter(|r| r.unit == "GiB" || r.unit == "MiB").filter(|r| r.percent.is_some_and(|p| p.abs() >= 5.0)).collect();
    v.sort_by(|a, b| b.difference.unwrap_or(0.0).abs().total_cmp(&a.difference.unwrap_or(0.0).abs()));
    v.truncate(3);
    v
}

fn wrong_engine(engine: &str, flags: &str) -> Vec<String> {
    vec![format!("the log is from {engine}, but the flags plan {flags}: the figures below compare different engines")]
}

/// The log against a vLLM estimate.
pub fn vllm(s: &VllmServe, l: &VllmLog) -> Comparison {
    let r = &s.report;
    let mut contradictions = Vec::new();
    if l.ranks > r.tp * r.pp {
        contradictions
            .push(format!("the log shows {} ranks but the flags give --tensor-parallel-size {} (× pipeline {})", l.ranks, r.tp, r.pp));
    }
    if let Some(g) = l.gpu_memory_utilization {
        if (g - s.config.gpu_memory_utilization).abs() > 0.005 {
            contradictions
                .push(format!("the log ran at gpu_memory_utilization {g:.2}; the flags give {:.2}", s.config.gpu_memory_utilization));
        }
    }
    if let Some(len) = l.max_model_len.filter(|&n| n != r.max_model_len) {
        contradictions.push(format!("the log's max model len is {len}; the estimate is for {}", r.max_model_len));
    }
    if l.v0 && !l.v1 && s.config.engine == VllmEngine::V1 {
        contradictions.push(
            "the log has lines only vLLM's V0 engine prints; the estimate plans the V1 engine (add --vllm-engine v0 and the log's --vllm-version)".into(),
        );
    }
    if let (Some(log), Some(ours)) = (l.model_runner, r.model_runner) {
        if log != ours {
            let (flag, env) = log.flag_and_env();
            contradictions.push(format!(
                "the log was printed by {} but the estimate follows {} (pass --model-runner {flag}, as VLLM_USE_V2_MODEL_RUNNER={env} does)",
                log.describe(),
                ours.describe()
            ));
        }
    }
    if let Some(v) = &l.version {
        if let Ok(logged) = vram_core::serve::VllmVersion::parse(v) {
            if logged != s.config.vllm_version {
                contradictions.push(format!(
                    "the log was printed by vLLM {v}; the estimate follows vLLM {}'s rules (pass --vllm-version {logged})",
                    s.config.vllm_version
                ));
            }
        }
    }
    // vLLM ≤ 0.16 with the V1 runner: the profile sampler sorts unless FlashInfer samples.
    let sorts_before_017 = s.config.vllm_version < (vram_core::serve::VllmVersion { major: 0, minor: 17 })
        && r.model_runner == Some(vram_core::serve::ModelRunner::V1);
    match (l.flashinfer_sampler, s.config.flashinfer_sampler == Some(true)) {
        (Some(true), false) if sorts_before_017 => contradictions.push(
            "the log samples with FlashInfer (\"Using FlashInfer for top-p & top-k sampling\"); the estimate counts PyTorch's top-k/top-p sort in the profile run (pass --flashinfer-sampler on)".into(),
        ),
        (Some(false), true) => contradictions.push(
            "the log samples with PyTorch's top-k/top-p (FlashInfer not used); the estimate was given --flashinfer-sampler on".into(),
        ),
        _ => {}
    }
    let drafter = s.config.speculative.as_ref().is_some_and(|sp| sp.method.has_drafter());
    if l.drafter && !drafter {
        contradictions.push(
            "the log loads a drafter (\"Loading drafter model...\": speculative decoding), whose weights \"Model loading took\" includes and whose layers share the KV cache; the estimate has none (pass the launch's --speculative-config)".into(),
        );
    } else if drafter && !l.drafter && l.weights.is_some() {
        contradictions.push(
            "the estimate loads a drafter (--speculative-config); the log's start-up shows none (\"Loading drafter model...\" is absent)"
                .into(),
        );
    }
    if let Some(t) = &l.total_gpu_memory {
        let ours = s.config.gpu_memory as f64 / GIB;
        if ((t.gib - ours) / ours).abs() > 0.02 {
            contradictions.push(format!("the log's GPU has total_gpu_memory {}; -g {} gives {ours:.2} GiB", t.printed, s.gpu.name));
        }
    }
    let mut rows = vec![
        gib_row("weights per GPU", r.weights_bytes, &l.weights),
        gib_row("non-torch memory", r.non_torch_bytes, &l.non_torch),
        gib_row("activation peak", r.activation_peak_bytes, &l.activation_peak),
        gib_row("CUDA graphs", r.cuda_graph_estimate_bytes, l.cuda_graph_figure()),
        gib_row("KV cache", r.kv_cache_bytes, &l.kv_cache),
        count_row("KV cache tokens", "tokens", r.pool.kv_tokens as f64, l.kv_tokens.map(|v| v as f64)),
        count_row("KV cache blocks", "blocks", r.pool.num_kv_blocks as f64, l.gpu_blocks.map(|v| v as f64)),
        count_row("max concurrency", "x", r.pool.max_concurrency, l.max_concurrency),
        gib_row("weights + non-torch", r.weights_bytes + r.non_torch_bytes, &l.consumed),
    ];
    // A hybrid model's attention block, grown to hold a recurrent state ("Setting attention
    // block size to N tokens").
    if r.pool.state.is_some() || l.attention_block_size.is_some() || l.mamba_padding_pct.is_some() {
        rows.push(count_row("attention block size", "tokens", r.block_size as f64, l.attention_block_size.map(|v| v as f64)));
        // "Padding mamba page size by P%": the state page's padding to the attention page.
        let padding = r
            .pool
            .state
            .map_or(0.0, |st| r.pool.page_size_bytes.saturating_sub(st.page_bytes()) as f64 / st.page_bytes().max(1) as f64 * 100.0);
        rows.push(count_row("state page padding", "%", padding, l.mamba_padding_pct));
    }
    let g = |b: u64| format!("{:.2} GiB", b as f64 / GIB);
    let mut reasons: Vec<String> = largest(&rows)
        .into_iter()
        .map(|row| match row.quantity {
            "weights per GPU" => format!(
                "weights per GPU: vram counts {} from the parameters and dtype {} split over TP {}; the log measured {} (another dtype or quantisation, or weights vram does not model)",
                g(r.weights_bytes), r.dtype.torch_name(), r.tp, shown(&l.weights)
            ),
            "non-torch memory" => format!(
                "non-torch memory: vram assumes {} at TP {} (CUDA context, NCCL buffers); the log measured {}{}",
                g(r.non_torch_bytes),
                r.tp,
                shown(&l.non_torch),
                if s.config.vllm_version < (VllmVersion { major: 0, minor: 7 }) {
                    " (vLLM before 0.7 also counted the allocator's reserved-but-free memory as non-torch; vllm-project/vllm#11809)"
                } else {
                    ""
                }
            ),
            "activation peak" => format!(
                "activation peak: vram models {} for a profile run of {} tokens; the log measured {}",
                g(r.activation_peak_bytes), r.max_num_batched_tokens, shown(&l.activation_peak)
            ),
            "CUDA graphs" => format!(
                "CUDA graphs: vram assumes {} (vLLM {}); the log measured {}{}",
                g(r.cuda_graph_estimate_bytes),
                r.vllm_version,
                shown(l.cuda_graph_figure()),
                if l.cuda_graph_estimated.is_none() && r.cuda_graph_estimate_bytes > 0 {
                    " — what the capture took after the pool; the estimate vLLM added to the peak is on its \"CUDA graph pool memory: … (estimated)\" line, not in this log"
                } else {
                    ""
                }
            ),
            "weights + non-torch" => format!(
                "weights + non-torch: vram counts {} of weights and assumes {} of non-torch memory; the log's consumed memory is {}",
                g(r.weights_bytes),
                g(r.non_torch_bytes),
                shown(&l.consumed)
            ),
            _ => kv_reason(r, l, &rows),
        })
        .collect();
    if reasons.is_empty() && rows.iter().any(|r| r.log.is_some()) {
        reasons.push("every memory figure the log printed is within 5% of the estimate".into());
    }
    Comparison { engine: "vllm", ranks: l.ranks, contradictions, rows, reasons }
}

/// The KV cache is what the budget leaves after the other items: name the items that moved it.
fn kv_reason(r: &ServeReport, l: &VllmLog, rows: &[Row]) -> String {
    let others = &rows[..4];
    let moved: Vec<String> =
        others.iter().filter_map(|o| o.difference.filter(|d| d.abs() >= 0.005).map(|d| format!("{} {d:+.2} GiB", o.quantity))).collect();
    let unseen: Vec<&str> = others.iter().filter(|o| o.log.is_none()).map(|o| o.quantity).collect();
    let mut s = format!(
        "KV cache: it is the budget ({:.2} GiB in vram{}) less the items above; vram leaves {:.2} GiB, the log {}",
        r.requested_bytes as f64 / GIB,
        l.requested.as_ref().map(|q| format!(", {} in the log", q.printed)).unwrap_or_default(),
        r.kv_cache_bytes as f64 / GIB,
        shown(&l.kv_cache)
    );
    if !moved.is_empty() {
        s += &format!("; the log differs in {}", moved.join(", "));
    }
    if !unseen.is_empty() {
        s += &format!("; the log does not print {}, so their share is unknown", unseen.join(", "));
    }
    s
}

/// The log against an SGLang estimate.
pub fn sglang(s: &SglangServe, l: &SglangLog) -> Comparison {
    let r = &s.report;
    let mut contradictions = Vec::new();
    let tp = l.tp_size.unwrap_or(l.ranks);
    if tp > r.tp || l.tp_size.is_some_and(|t| t != r.tp) {
        contradictions.push(format!("the log shows TP {tp}; the flags give --tp {}", r.tp));
    }
    if let Some(f) = l.mem_fraction_static.filter(|f| (f - r.mem_fraction_static).abs() > 0.0005) {
        contradictions.push(format!("the log ran at mem_fraction_static {f}; the estimate uses {}", r.mem_fraction_static));
    }
    if let Some(c) = l.context_len.filter(|&c| c != r.context_len) {
        contradictions.push(format!("the log's context_len is {c}; the estimate is for {}", r.context_len));
    }
    let tokens = l.max_total_num_tokens.or(l.kv_tokens);
    // A speculative draft loads after the target and prints its own "Load weight end".
    match (l.draft_weights.is_some(), r.draft_weights_bytes > 0) {
        (true, false) => contradictions.push(
            "the log loads a speculative draft (a second \"Load weight end\" of an EAGLE/MTP class); the estimate has none (pass the launch's --speculative-algorithm)".into(),
        ),
        (false, true) if l.weights.is_some() => {
            contradictions.push("the estimate loads a speculative draft; the log shows no draft load".into())
        }
        _ => {}
    }
    let mut rows = vec![
        gib_row("weights per GPU", r.weights_bytes - r.draft_weights_bytes, &l.weights),
        gib_row("free after weights", r.after_weights_bytes + r.draft_weights_bytes, &l.avail_after_weights),
    ];
    if r.draft_weights_bytes > 0 || l.draft_weights.is_some() {
        rows.push(gib_row("draft weights", r.draft_weights_bytes, &l.draft_weights));
    }
    if let Some(st) = &r.state {
        // "Mamba Cache is allocated": (slots + 1) rows of every mixer layer's conv and SSM state.
        let rows_of = |b: u64| (st.max_mamba_cache_size + 1).saturating_mul(st.state_layers).saturating_mul(b);
        rows.push(count_row("state slots", "slots", st.max_mamba_cache_size as f64, l.mamba_cache_size.map(|v| v as f64)));
        rows.push(gib_row("conv_state size", rows_of(st.conv_bytes), &l.conv_state));
        rows.push(gib_row("ssm_state size", rows_of(st.ssm_bytes), &l.ssm_state));
    } else if l.mamba_cache_size.is_some() {
        contradictions.push("the log allocated a Mamba state cache; the estimate's model has no recurrent state".into());
    }
    rows.extend([
        gib_row("K size", r.kv_pool_bytes / 2, &l.k_size),
        count_row("KV cache tokens", "tokens", r.max_total_num_tokens as f64, tokens.map(|v| v as f64)),
        count_row("max running requests", "requests", r.max_running_requests as f64, l.max_running_requests.map(|v| v as f64)),
    ]);
    let g = |b: u64| format!("{:.2} GiB", b as f64 / GIB);
    let mut reasons: Vec<String> = largest(&rows)
        .into_iter()
        .map(|row| match row.quantity {
            "weights per GPU" => format!(
                "weights per GPU: vram counts {} at TP {}; the log measured {}",
                g(r.weights_bytes - r.draft_weights_bytes), r.tp, shown(&l.weights)
            ),
            "free after weights" => format!(
                "free after weights: vram takes the GPU's memory less the CUDA context and distributed buffers, then the weights ({}); the log measured {}",
                g(r.after_weights_bytes + r.draft_weights_bytes), shown(&l.avail_after_weights)
            ),
            "draft weights" => format!(
                "draft weights: vram counts the draft as SGLang builds it, {} (its own embedding included); the log measured {}",
                g(r.draft_weights_bytes), shown(&l.draft_weights)
            ),
            "state slots" | "conv_state size" | "ssm_state size" => format!(
                "{}: the state pool takes --mamba-full-memory-ratio of what the weights leave ({} slots in vram); it follows the free memory after weights and mem_fraction_static, and the slot size the SSM dtype (--mamba-ssm-dtype)",
                row.quantity,
                r.state.as_ref().map_or(0, |s| s.max_mamba_cache_size)
            ),
            _ => format!(
                "K size: follows the token pool ({} tokens in vram); the log allocated {} — it follows the weights and mem_fraction_static",
                r.max_total_num_tokens, shown(&l.k_size)
            ),
        })
        .collect();
    if reasons.is_empty() && rows.iter().any(|r| r.log.is_some()) {
        reasons.push("every memory figure the log printed is within 5% of the estimate".into());
    }
    Comparison { engine: "sglang", ranks: l.ranks, contradictions, rows, reasons }
}

/// The log against a llama.cpp plan: the first GPU device the log names.
pub fn llama_cpp(s: &LlamaCppServe, l: &LlamaCppLog) -> Comparison {
    let p = &s.plan;
    let mut contradictions = Vec::new();
    if let Some(n) = l.n_ctx.filter(|&n| n != p.ctx) {
        contradictions.push(format!("the log's n_ctx is {n}; the plan is for {}", p.ctx));
    }
    let host = |n: &str| n.starts_with("CPU") || n.ends_with("_Host");
    let gpus: Vec<_> = l.devices.iter().filter(|d| !host(&d.name)).collect();
    if gpus.len() > 1 {
        contradictions.push(format!(
            "the log splits the model over {} devices; vram plans one GPU (compared with {})",
            gpus.len(),
            gpus[0].name
        ));
    }
    let dev = gpus.first().copied().cloned().unwrap_or_default();
    let mib = |q: &'static str, bytes: u64, s: &Option<LogSize>| {
        row(q, "MiB", bytes as f64 / MIB, s.as_ref().map(|s| s.gib * 1024.0), s.as_ref().map(|s| s.printed.clone()))
    };
    let mut rows = vec![
        mib("model buffer per device", p.gpu_weights_bytes, &dev.model),
        mib("KV buffer", p.gpu_kv_bytes, &dev.kv),
        mib("compute buffer", p.gpu_compute_bytes, &dev.compute),
    ];
    if p.gpu_state_bytes > 0 || dev.state.is_some() {
        rows.insert(2, mib("RS buffer (recurrent state)", p.gpu_state_bytes, &dev.state));
    }
    if p.gpu_lora_bytes > 0 || dev.lora.is_some() {
        rows.push(mib("LoRA buffer (--lora)", p.gpu_lora_bytes, &dev.lora));
    }
    if let (Some((used, free)), Some((log_used, log_free))) = (s.fit_projection, l.fit_projection) {
        let logged = |m: u64| (Some(m as f64), Some(format!("{m} MiB")));
        let (v, p) = logged(log_used);
        rows.push(row("--fit projection at the initial settings", "MiB", used as f64 / MIB, v, p));
        let (v, p) = logged(log_free);
        rows.push(row("free device memory --fit saw", "MiB", free as f64 / MIB, v, p));
    }
    // --fit's placement on the one GPU: fit.cpp counts the output layer as a layer.
    if let Some(f) = l.fit_layers.first() {
        rows.push(count_row("layers placed by --fit", "layers", (p.gpu_layers + u64::from(p.output_on_gpu)) as f64, Some(f.layers as f64)));
    }
    if s.config.projector_compute_bytes > 0 || l.vision_compute.is_some() {
        rows.push(mib("vision compute buffer (--mmproj)", s.config.projector_compute_bytes, &l.vision_compute));
    }
    // The host side: the weights' buffers in RAM (CPU_Mapped under mmap, else CPU or a pinned
    // *_Host buffer) summed, and the pinned host compute buffer.
    let hosts: Vec<_> = l.devices.iter().filter(|d| host(&d.name)).collect();
    let sum = |f: fn(&vram_core::startup_log::LlamaCppDevice) -> &Option<LogSize>| {
        let sizes: Vec<&LogSize> = hosts.iter().filter_map(|d| f(d).as_ref()).collect();
        (!sizes.is_empty()).then(|| LogSize {
            gib: sizes.iter().map(|s| s.gib).sum(),
            printed: sizes.iter().map(|s| s.printed.clone()).collect::<Vec<_>>().join(" + "),
        })
    };
    let (host_model, host_compute, host_lora) = (sum(|d| &d.model), sum(|d| &d.compute), sum(|d| &d.lora));
    if p.host.lora_bytes > 0 || host_lora.is_some() {
        rows.push(mib("LoRA buffer in RAM", p.host.lora_bytes, &host_lora));
    }
    if p.host.weights_bytes > 0 || host_model.is_some() {
        rows.push(mib("model buffer in RAM", p.host.weights_bytes, &host_model));
    }
    if host_compute.is_some() {
        rows.push(mib(
            if p.host.compute_exact { "host compute buffer" } else { "host compute (inputs only)" },
            p.host.compute_bytes,
            &host_compute,
        ));
    }
    let m = |b: u64| format!("{:.2} MiB", b as f64 / MIB);
    let mut reasons: Vec<String> = largest(&rows)
        .into_iter()
        .map(|row| match row.quantity {
            "model buffer per device" => format!(
                "model buffer: vram puts {} of tensors on the GPU for {} GPU layers; the log's {} buffer is {}",
                m(p.gpu_weights_bytes),
                p.gpu_layers,
                dev.name,
                shown(&dev.model)
            ),
            "KV buffer" => format!("KV buffer: vram sizes {} for n_ctx {}; the log allocated {}", m(p.gpu_kv_bytes), p.ctx, shown(&dev.kv)),
            "model buffer in RAM" => format!(
                "model buffer in RAM: vram holds {} ({}); the log's host buffers are {}",
                m(p.host.weights_bytes),
                if p.host.weights_mapped {
                    "the file's span from the first to the last tensor left on the CPU, mapped"
                } else {
                    "the tensors left on the CPU, read in with --no-mmap"
                },
                shown(&host_model)
            ),
            "host compute (inputs only)" => format!(
                "host compute buffer: vram counts only the graph inputs ({}); the CPU's work on the layers or experts it holds is not modelled, the log allocated {}",
                m(p.host.compute_bytes),
                shown(&host_compute)
            ),
            "host compute buffer" => format!(
                "host compute buffer: vram counts the graph inputs, {}; the log allocated {}",
                m(p.host.compute_bytes),
                shown(&host_compute)
            ),
            "RS buffer (recurrent state)" => format!(
                "RS buffer: vram sizes {} (one f32 state per sequence on each state layer: --parallel sets the sequences); the log allocated {}",
                m(p.gpu_state_bytes),
                shown(&dev.state)
            ),
            "vision compute buffer (--mmproj)" => format!(
                "vision compute buffer: vram models {} for clip.cpp's warm-up image (0 when the projector type is not modelled or no --mmproj is given); the log's alloc_compute_meta reserved {}",
                m(s.config.projector_compute_bytes),
                shown(&l.vision_compute)
            ),
            _ => {
                let mut r = format!("compute buffer: vram models {}; the log allocated {}", m(p.gpu_compute_bytes), shown(&dev.compute));
                // llama.cpp builds before llama-server's n_outputs_max (one logits row per slot)
                // reserved the logits of a whole ubatch: say so when the gap is about that.
                let extra = vram_core::gguf::whole_ubatch_logits_extra(&s.hparams, &s.config, p.ctx);
                let gap = dev.compute.as_ref().map_or(0.0, |c| c.gib * (1u64 << 30) as f64 - p.gpu_compute_bytes as f64);
                if p.output_on_gpu && extra > 0 && gap >= 0.7 * extra as f64 {
                    r.push_str(&format!(
                        "; older llama.cpp builds (before llama-server reserved one logits row per slot, `n_outputs_max`) held the logits of the whole ubatch, {} more here",
                        m(extra)
                    ));
                }
                r
            }
        })
        .collect();
    if reasons.is_empty() && rows.iter().any(|r| r.log.is_some()) {
        reasons.push("every buffer the log printed is within 5% of the plan".into());
    }
    Comparison { engine: "llama.cpp", ranks: 1, contradictions, rows, reasons }
}

/// A log from another engine than the one planned: no rows, only the contradiction.
pub fn mismatch(log: &StartupLog, planned: &str) -> Comparison {
    let (engine, ranks) = match log {
        StartupLog::Vllm(l) => ("vllm", l.ranks),
        StartupLog::Sglang(l) => ("sglang", l.ranks),
        StartupLog::LlamaCpp(_) => ("llama.cpp", 1),
    };
    let contradictions = wrong_engine(engine, planned);
    Comparison { engine, ranks, contradictions, rows: Vec::new(), reasons: Vec::new() }
}

fn fmt(v: f64, unit: &str) -> String {
    match unit {
        "GiB" | "MiB" => format!("{v:.2} {unit}"),
        "x" => format!("{v:.2}x"),
        "%" => format!("{v:.2}%"),
        _ => format!("{v:.0}"),
    }
}

/// The comparison as text, after the estimate's own table.
pub fn text(c: &Comparison, file: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nStart-up log {file}: {}, {} rank{}", c.engine, c.ranks, if c.ranks == 1 { "" } else { "s" });
    for x in &c.contradictions {
        let _ = writeln!(out, "  WARNING: {x}");
    }
    if !c.rows.is_empty() {
        let _ = writeln!(out, "  {:<24} {:>14} {:>14} {:>14} {:>9}", "quantity", "estimate", "log", "difference", "%");
        for r in &c.rows {
            let log = r.log.map_or_else(|| "not printed".into(), |v| fmt(v, r.unit));
            let diff = r.difference.map_or_else(String::new, |d| if d >= 0.0 { format!("+{}", fmt(d, r.unit)) } else { fmt(d, r.unit) });
            let pct = r.percent.map_or_else(String::new, |p| format!("{p:+.1}%"));
            let line = format!("  {:<24} {:>14} {:>14} {:>14} {:>9}", r.quantity, fmt(r.estimate, r.unit), log, diff, pct);
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    for x in &c.reasons {
        let _ = writeln!(out, "  - {x}");
    }
    let _ = writeln!(out, "  GiB = 2^30 bytes, MiB = 2^20; vLLM's and SGLang's \"GB\" are bytes / 2^30 and read as GiB.");
    out
}

/// The estimate's JSON with the log and the comparison beside it.
pub fn json(estimate: Value, log: &StartupLog, c: &Comparison) -> Value {
    json!({ "estimate": estimate, "log": log, "comparison": c })
}
