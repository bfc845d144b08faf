//! `vram serve`: vLLM's accounting or a llama.cpp plan, as text or JSON.

use std::fmt::Write;

use serde_json::{json, Value};
use vram_core::units::{gb, gib};

use super::common::{gib_cell, gpu_json, gpu_line, model_json, model_lines, thousands, verdict};
use crate::commands::serve::{LlamaCppServe, SglangServe, VllmServe};

/// `vram serve` (vLLM) as a table.
pub fn vllm_text(s: &VllmServe) -> String {
    let mut out = String::new();
    model_lines(&mut out, &s.model, None);
    vllm_settings(&mut out, s);
    vllm_budget(&mut out, s);
    vllm_kv(&mut out, s);
    for n in &s.report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// The launch settings, in vLLM's flag spelling.
fn vllm_settings(out: &mut String, s: &VllmServe) {
    let (r, c) = (&s.report, &s.config);
    let kv = if r.kv_dtype_bytes == 1 { "fp8".to_string() } else { r.dtype.torch_name().to_string() };
    let _ = writeln!(
        *out,
        "vLLM serve on {} · --tensor-parallel-size {} · --max-model-len {} · --dtype {} · --kv-cache-dtype {kv}",
        gpu_line(&s.gpu),
        r.tp,
        r.max_model_len,
        r.dtype.torch_name()
    );
    let _ = writeln!(
        *out,
        "--gpu-memory-utilization {} · --max-num-batched-tokens {} · --max-num-seqs {} · --block-size {}{}",
        c.gpu_memory_utilization,
        r.max_num_batched_tokens,
        r.max_num_seqs,
        r.block_size,
        match c.quantization {
            vram_core::serve::Quantization::None | vram_core::serve::Quantization::Checkpoint => String::new(),
            q => format!(
                " · --quantization {}",
                serde_json::to_value(q).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
            ),
        }
    );
}

/// Where the requested memory goes: weights, profile peak, non-torch, the KV pool.
fn vllm_budget(out: &mut String, s: &VllmServe) {
    let (r, c) = (&s.report, &s.config);
    let _ = writeln!(*out);
    let who = match (r.tp, r.pp) {
        (1, 1) => "per GPU".to_string(),
        (tp, 1) => format!("per GPU (each of the {tp} TP ranks)"),
        (tp, pp) => format!("per GPU (the reported stage of {pp} pipeline stages × {tp} TP ranks)"),
    };
    let _ = writeln!(*out, "{who:<44} {:>8}", "GiB");
    let row = |out: &mut String, name: &str, bytes: u64, note: &str| {
        let _ = writeln!(*out, "  {name:<42} {:>8}  {note}", gib_cell(bytes));
    };
    let mut wnote = format!("\"Model loading took\"; rotary cos/sin cache {}", gib_cell(r.rotary_cache_bytes));
    if r.quant_scales_bytes > 0 {
        wnote.push_str(&format!(", quantization scales {}", gib_cell(r.quant_scales_bytes)));
    }
    if let Some(l) = c.lora {
        wnote.push_str(&format!(
            ", LoRA slots {} ({} × rank {}; {} GiB more in host RAM for {} CPU adapters)",
            gib_cell(r.lora_slots_bytes),
            l.max_loras,
            l.max_lora_rank,
            gib_cell(r.lora_cpu_bytes),
            l.max_cpu_loras
        ));
    }
    if let Some(sp) = &c.speculative {
        if r.draft_weights_bytes > 0 {
            wnote.push_str(&format!(", the {} drafter {}", sp.method.name(), gib_cell(r.draft_weights_bytes)));
        }
    }
    row(out, "weights", r.weights_bytes, &wnote);
    row(out, "profile-run activation peak", r.activation_peak_bytes, &r.activation_peak_at);
    row(out, "non-torch increase", r.non_torch_bytes, "kernels, library handles, NCCL at TP ≥ 2");
    if r.runner_buffers_bytes > 0 {
        row(
            out,
            "runner buffers kept from start-up",
            r.runner_buffers_bytes,
            "sampler state and EPLB tables built after the weights (notes); vLLM counts them as consumed memory",
        );
    }
    row(out, "= non-KV memory", r.non_kv_bytes, "vLLM logs it as \"Total non KV cache memory\"");
    if c.kv_cache_memory_bytes.is_some() {
        row(
            out,
            "needed (non-KV + --kv-cache-memory-bytes)",
            r.requested_bytes,
            &format!("of a CUDA total of {:.2} GiB", gib(c.gpu_memory)),
        );
    } else {
        row(
            out,
            &format!("requested ({} × CUDA total {:.2})", c.gpu_memory_utilization, gib(c.gpu_memory)),
            r.requested_bytes,
            &vram_core::gpu::cuda_total(&s.gpu).1.describe(),
        );
    }
    row(out, "KV-cache pool", r.kv_cache_bytes, "\"Available KV cache memory\"");
    let _ = writeln!(
        *out,
        "  beyond vLLM's budget: CUDA context {} GiB{}; the process shows at least {} GiB ({:.2} GB) in nvidia-smi",
        gib_cell(r.cuda_context_bytes),
        // From 0.20 the graphs' estimate is inside the budget (counted above), before it outside.
        if c.enforce_eager || r.cuda_graph_estimate_bytes > 0 { "" } else { " plus CUDA graphs" },
        gib_cell(r.process_bytes()),
        gb(r.process_bytes())
    );
    let _ = writeln!(*out);
    if r.shortfall_bytes > 0 {
        let _ = writeln!(
            out,
            "does NOT fit: non-KV memory exceeds the requested {} GiB by {} GiB — raise --gpu-memory-utilization, add GPUs (--tensor-parallel-size), quantize, or lower --max-num-batched-tokens",
            gib_cell(r.requested_bytes),
            gib_cell(r.shortfall_bytes)
        );
    }
}

/// The KV pool in blocks, tokens and concurrency, and whether one request fits.
fn vllm_kv(out: &mut String, s: &VllmServe) {
    let r = &s.report;
    let p = &r.pool;
    let what = match p.state {
        Some(st) if st.attention_layers == 0 => {
            format!("State cache: page {} bytes (one layer's recurrent state for one request)", thousands(p.page_size_bytes))
        }
        Some(st) => format!(
            "KV cache and states: {} bytes per token on this GPU ({} attention layers) · page {} bytes (block of {} tokens × 1 layer, or one layer's recurrent state for one request)",
            thousands(p.kv_bytes_per_token),
            st.attention_layers,
            thousands(p.page_size_bytes),
            r.block_size
        ),
        None => format!(
            "KV cache: {} bytes per token on this GPU · page {} bytes (block of {} tokens × 1 layer)",
            thousands(p.kv_bytes_per_token),
            thousands(p.page_size_bytes),
            r.block_size
        ),
    };
    let plural = if p.groups.len() == 1 { "" } else { "s" };
    let drafter = if p.draft_bytes_per_token > 0 {
        format!(" · and the drafter's layers ({} bytes per token of the total)", thousands(p.draft_bytes_per_token))
    } else {
        String::new()
    };
    let _ = writeln!(*out, "{what} · {} group{plural} of {} layers{drafter}", p.groups.len(), p.group_size);
    let _ = writeln!(
        *out,
        "  {} blocks · GPU KV cache size: {} tokens · maximum concurrency for {} tokens per request: {:.2}x",
        thousands(p.num_kv_blocks),
        thousands(p.kv_tokens),
        thousands(r.max_model_len),
        p.max_concurrency
    );
    if r.shortfall_bytes == 0 && !r.fits {
        let _ = writeln!(
            *out,
            "does NOT fit: one request of {} tokens needs more KV cache than the pool holds; vLLM would refuse to start. The estimated maximum model length is {}: pass --max-model-len {} or raise --gpu-memory-utilization",
            r.max_model_len,
            p.max_model_len_that_fits,
            p.max_model_len_that_fits
        );
    }
}

/// `vram serve --json` (vLLM): one entry per GPU (every TP rank holds the same).
pub fn vllm_json(s: &VllmServe) -> Value {
    let r = &s.report;
    let mut per_gpu = serde_json::to_value(r).unwrap_or(Value::Null);
    per_gpu["process_bytes_at_least"] = json!(r.process_bytes());
    let gpus: Vec<Value> = (0..r.tp)
        .map(|rank| {
            let mut v = per_gpu.clone();
            v["rank"] = json!(rank);
            v
        })
        .collect();
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "engine": "vllm",
        "model": model_json(&s.model),
        "gpu": gpu_json(&s.gpu),
        "config": s.config,
        "gpus": gpus,
    })
}

/// `vram serve --engine sglang` as a table.
pub fn sglang_text(s: &SglangServe) -> String {
    let (r, c) = (&s.report, &s.config);
    let mut out = String::new();
    model_lines(&mut out, &s.model, None);
    let kv = match (&c.kv_cache_dtype_name, r.kv_dtype_bytes) {
        (Some(n), 1) => n.replace("float8_", "fp8_").replace("fn", ""),
        _ => "auto".into(),
    };
    let _ = writeln!(
        out,
        "SGLang {} rules on {} · --tp-size {}{} · --context-length {} · --dtype {} · --kv-cache-dtype {kv}",
        r.sglang_version,
        gpu_line(&s.gpu),
        r.tp,
        if r.attn_dp_size > 1 { format!(" · --attn-dp-size {}", r.attn_dp_size) } else { String::new() },
        r.context_len,
        r.dtype.torch_name()
    );
    let _ = writeln!(
        out,
        "--mem-fraction-static {}{} · --chunked-prefill-size {} · --cuda-graph-max-bs {} · --page-size {}",
        vram_core::sglang::fraction_text(r.mem_fraction_static),
        match (r.mem_fraction_static_default, r.mm_reserve_bytes > 0) {
            (true, true) => " (default, × 0.95·f for the vision tower)",
            (true, false) => " (default)",
            _ => "",
        },
        r.chunked_prefill_size,
        if r.cuda_graph_max_bs == 0 { "— (graphs disabled)".to_string() } else { r.cuda_graph_max_bs.to_string() },
        r.page_size
    );
    if s.dp > 1 {
        let _ = writeln!(
            out,
            "--dp-size {}: {} replicas of this {}-GPU group ({} GPUs in all), each a whole model with its own KV cache and scheduler (SGLang 0.5.23: dp_size counts replicas); the figures are per GPU of one replica, and its max_running_requests is per replica — {}× the requests in all",
            s.dp,
            s.dp,
            r.tp,
            r.tp.saturating_mul(s.dp),
            s.dp
        );
    }
    let _ = writeln!(out);
    let who = if r.tp == 1 { "per GPU".to_string() } else { format!("per GPU (each of the {} TP ranks)", r.tp) };
    let _ = writeln!(out, "{who:<44} {:>8}", "GiB");
    let row = |out: &mut String, name: &str, bytes: u64, note: &str| {
        let _ = writeln!(*out, "  {name:<42} {:>8}  {note}", gib_cell(bytes));
    };
    row(
        &mut out,
        "free before weights load",
        r.pre_load_bytes,
        &format!("CUDA total {:.2} − CUDA context − NCCL buffers", gib(c.gpu_memory)),
    );
    let mut wnote = "\"Load weight end … mem usage\"".to_string();
    if r.quant_scales_bytes > 0 {
        wnote.push_str(&format!("; quantization scales {}", gib_cell(r.quant_scales_bytes)));
    }
    row(&mut out, "weights", r.weights_bytes, &wnote);
    row(
        &mut out,
        &format!("left free (× (1 − {}))", vram_core::sglang::fraction_text(r.mem_fraction_static)),
        r.slack_bytes,
        "activations, CUDA graphs, req_to_token table",
    );
    if r.mm_reserve_bytes > 0 {
        row(&mut out, "multimodal reservation", r.mm_reserve_bytes, "SGLANG_VLM_CACHE_SIZE_MB (100), taken from the budget");
    }
    if let Some(l) = &c.lora {
        row(
            &mut out,
            "LoRA pool (--enable-lora)",
            r.lora_pool_bytes,
            &format!(
                "{} slots × rank {} × {} layers ({})",
                l.max_loras_per_batch,
                l.max_lora_rank,
                s.model.layers,
                l.target_modules.join(", ")
            ),
        );
    }
    if let Some(st) = r.state.as_ref().filter(|_| r.shortfall_bytes == 0) {
        row(
            &mut out,
            &format!("state pool ({} layers, {})", st.state_layers, st.mixer.name()),
            st.pool_bytes,
            &format!("\"Mamba Cache is allocated\" ({} slots + 1)", thousands(st.max_mamba_cache_size)),
        );
    }
    row(&mut out, "KV-cache pool", r.kv_pool_bytes, "\"KV Cache is allocated\" (tokens + 1 page)");
    row(&mut out, "req_to_token table", r.req_to_token_bytes, &format!("({} requests + 1) × (context + 4) int32", r.max_running_requests));
    row(&mut out, "headroom after it", r.headroom_bytes, "for activations and CUDA graphs");
    let _ = writeln!(out);
    if r.weights_bytes > r.pre_load_bytes {
        let _ = writeln!(
            out,
            "does NOT fit: the weights alone exceed the free memory by {} GiB; add GPUs (--tp-size) or quantize",
            gib_cell(r.weights_bytes - r.pre_load_bytes)
        );
    } else if r.shortfall_bytes > 0 {
        let _ = writeln!(
            out,
            "does NOT fit: the weights leave no KV cache under --mem-fraction-static {} (short by {} GiB); SGLang would refuse: raise it above {:.3}, add GPUs (--tp-size) or quantize",
            vram_core::sglang::fraction_text(r.mem_fraction_static),
            gib_cell(r.shortfall_bytes),
            r.min_mem_fraction_static
        );
    } else if !r.fits && r.state.is_some() {
        let _ = writeln!(
            out,
            "does NOT fit: the budget left after the weights holds no state pool and token pool (SGLang would refuse: \"Not enough GPU memory\"); raise --mem-fraction-static, add GPUs (--tp-size) or quantize"
        );
    } else {
        if let Some(st) = &r.state {
            let _ = writeln!(
                out,
                "recurrent state: {:.2} MiB per request on this GPU ({} {} layers: conv {} B bf16 + state {} B {} each) · {} slots · a running request takes {}{}",
                st.per_request_bytes as f64 / (1u64 << 20) as f64,
                st.state_layers,
                st.mixer.name(),
                thousands(st.conv_bytes),
                thousands(st.ssm_bytes),
                st.ssm_dtype.torch_name(),
                thousands(st.max_mamba_cache_size),
                match st.slots_per_request {
                    1 => "1".to_string(),
                    n => format!("up to {n}"),
                },
                match st.strategy {
                    Some(s) => format!(" (radix cache, {})", s.name()),
                    None => " (radix cache off)".to_string(),
                }
            );
            if st.caps_requests {
                let _ = writeln!(out, "  the state slots, not the token pool, cap max_running_requests at {}", r.max_running_requests);
            }
        }
        let _ = writeln!(
            out,
            "KV cache: {} bytes per token on this GPU · max_total_num_tokens {} · max_running_requests {}",
            thousands(r.cell_bytes),
            thousands(r.max_total_num_tokens),
            r.max_running_requests
        );
        let _ = writeln!(
            out,
            "  requests at the full context of {} tokens held at once: {} ({:.2}x)",
            thousands(r.context_len),
            r.full_context_requests,
            r.max_total_num_tokens as f64 / r.context_len as f64
        );
    }
    let _ = writeln!(out, "SGLang would print:");
    for l in &r.log {
        let _ = writeln!(out, "  {l}");
    }
    let _ = writeln!(out, "(SGLang's \"GB\" is GiB, 2^30 bytes)");
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `vram serve --engine sglang --json`: one entry per GPU (every TP rank holds the same).
pub fn sglang_json(s: &SglangServe) -> Value {
    let r = &s.report;
    let per_gpu = serde_json::to_value(r).unwrap_or(Value::Null);
    let gpus: Vec<Value> = (0..r.tp)
        .map(|rank| {
            let mut v = per_gpu.clone();
            v["rank"] = json!(rank);
            v
        })
        .collect();
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "engine": "sglang",
        "sglang_version": r.sglang_version,
        "model": model_json(&s.model),
        "gpu": gpu_json(&s.gpu),
        "config": s.config,
        "dp_size": s.dp,
        "gpus_in_all": r.tp.saturating_mul(s.dp),
        "gpus": gpus,
    })
}

/// `vram serve` for a GGUF model under llama.cpp.
pub fn llama_cpp_text(s: &LlamaCppServe) -> String {
    let (g, hp, p, c) = (&s.gguf, &s.hparams, &s.plan, &s.config);
    let mut out = String::new();
    for n in &s.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let _ = writeln!(
        out,
        "{} — GGUF v{} · {} · {} · {} tensors, {} GiB ({:.2} GB)",
        s.file,
        g.version,
        hp.architecture,
        g.file_type().unwrap_or("unknown mix"),
        g.tensors.len(),
        gib_cell(g.tensor_bytes()),
        gb(g.tensor_bytes())
    );
    let types: Vec<String> = g.bytes_by_type().iter().map(|(t, b)| format!("{t} {}", gib_cell(*b))).collect();
    let _ = writeln!(out, "by type (GiB): {}", types.join(" · "));
    let _ = writeln!(
        out,
        "{} layers · {} wide · {} heads / {} KV heads × {} · vocabulary {} · trained context {}",
        hp.layers, hp.embd, hp.heads, hp.kv_heads, hp.head_k, hp.vocab, hp.context_length
    );
    if let Some(r) = &hp.recurrent {
        let _ = writeln!(
            out,
            "{} layers with a KV cache · {} with a recurrent state of {} + {} f32 values per sequence (convolution + SSM) instead, whatever the context",
            r.attention_layers, r.state_layers, r.n_embd_r, r.n_embd_s
        );
    }
    let _ = writeln!(
        out,
        "llama.cpp on {} · --n-gpu-layers {} · --ctx-size {} (padded {}) · --ubatch-size {} · --parallel {} ({} tokens each) · flash attention{}{}{}{}",
        gpu_line(&s.gpu),
        c.n_gpu_layers,
        c.ctx,
        p.ctx,
        c.ubatch,
        c.parallel,
        p.ctx_per_sequence,
        if c.flash_attn { "" } else { " off" },
        if c.swa_full { " · --swa-full" } else { "" },
        if c.op_offload { "" } else { " · --no-op-offload" },
        match override_flags(&s.overrides) {
            f if f.is_empty() => f,
            f => format!(" · {f}"),
        }
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<44} {:>8} {:>8}", "", "GPU GiB", "RAM GiB");
    let row = |out: &mut String, name: &str, gpu: u64, cpu: u64| {
        let _ = writeln!(out, "  {name:<42} {:>8} {:>8}", gib_cell(gpu), gib_cell(cpu));
    };
    row(
        &mut out,
        &format!("weights ({} of {} layers on GPU{})", p.gpu_layers, hp.layers, if p.output_on_gpu { ", output too" } else { "" }),
        p.gpu_weights_bytes,
        p.host.weights_bytes,
    );
    override_rows(&mut out, s);
    row(&mut out, "KV cache (f16 unless --kv-cache-dtype)", p.gpu_kv_bytes, p.cpu_kv_bytes);
    if hp.recurrent.is_some() {
        row(&mut out, "recurrent state (f32, one per --parallel seq)", p.gpu_state_bytes, p.cpu_state_bytes);
    }
    row(&mut out, "compute buffer (RAM: graph inputs)", p.gpu_compute_bytes, p.host.compute_bytes);
    if !s.overrides.lora.is_empty() {
        row(&mut out, "LoRA adapters (--lora, beside their tensors)", p.gpu_lora_bytes, p.host.lora_bytes);
        row(&mut out, "LoRA products in the compute buffer (bound)", p.gpu_lora_compute_bytes, 0);
    }
    row(&mut out, "output buffer (logits, pinned RAM)", 0, p.host.output_bytes);
    if c.projector_bytes > 0 || c.projector_host_bytes > 0 {
        row(&mut out, "projector weights (--mmproj)", c.projector_bytes, 0);
        row(&mut out, "projector compute buffer (vision warm-up)", c.projector_compute_bytes, c.projector_host_bytes);
    }
    row(&mut out, "CUDA context, cuBLAS, pool (measured)", p.cuda_overhead_bytes, 0);
    row(&mut out, "total", p.gpu_total_bytes, p.host.total_bytes);
    let util = p.gpu_total_bytes as f64 / s.gpu.memory as f64;
    let _ = writeln!(out, "{:.1}% of {} — {}", util * 100.0, s.gpu.name, verdict(util));
    host_text(&mut out, &p.host, p.cpu_weights_bytes);
    lora_text(&mut out, &s.overrides.lora);
    let _ = writeln!(out);
    offload_text(&mut out, s);
    moe_text(&mut out, s);
    out
}

/// The `--lora` adapters: what each holds, and what the compute row's bound is.
pub(crate) fn lora_text(out: &mut String, adapters: &[vram_core::llama_lora::LoraAdapter]) {
    for a in adapters {
        let _ = writeln!(
            out,
            "--lora {}: {} adapted matrices, rank {}, {:.2} MiB (A and B beside each base tensor, on its device: llama-adapter.cpp){}",
            a.file,
            a.pairs.len(),
            a.max_rank(),
            a.bytes() as f64 / (1u64 << 20) as f64,
            if a.skipped_norms > 0 {
                format!("; {} norm vectors skipped, as llama.cpp skips them", a.skipped_norms)
            } else {
                String::new()
            }
        );
    }
    if !adapters.is_empty() {
        let _ = writeln!(
            out,
            "note: the LoRA products' row is a bound (the widest adapted matrix's [rank] and two [rows] f32 results per token of a micro-batch), not measured: no public log gives a compute buffer with and without an adapter"
        );
    }
}

/// What the RAM column means: mapped or allocated weights, what --mlock pins, and whether the
/// host compute buffer is whole.
pub(crate) fn host_text(out: &mut String, h: &vram_core::gguf::HostMemory, cpu_tensors: u64) {
    let weights = if h.weights_mapped {
        format!(
            "RAM weights: {} GiB mapped from the file (llama.cpp's CPU_Mapped buffer: the span from the first to the last tensor left on the CPU, page cache that the OS may evict and re-read{}); --no-mmap reads the {} GiB of those tensors into allocated RAM instead",
            gib_cell(h.weights_bytes),
            if h.locked_bytes > 0 { ", locked by --mlock" } else { " unless --mlock" },
            gib_cell(cpu_tensors)
        )
    } else {
        format!(
            "RAM weights: {} GiB read into allocated RAM (--no-mmap){}",
            gib_cell(h.weights_bytes),
            if h.locked_bytes > 0 { ", locked by --mlock" } else { "" }
        )
    };
    let _ = writeln!(out, "{weights}");
    if !h.compute_exact {
        let _ = writeln!(
            out,
            "RAM compute buffer: the graph inputs only — the CPU's own buffers for the layers or experts it runs are not modelled, so RAM needs more than shown"
        );
    }
}

/// --n-cpu-moe → GPU total at the given context, and the longest context.
fn moe_text(out: &mut String, s: &LlamaCppServe) {
    if s.moe_table.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n--n-cpu-moe → experts in RAM, GPU total at --ctx-size {}, longest --ctx-size that fits {} (at --n-gpu-layers {}):",
        s.config.ctx, s.gpu.name, s.config.n_gpu_layers
    );
    let _ = writeln!(out, "  {:>11}  {:>11}  {:>13}  {:>12}", "--n-cpu-moe", "RAM GiB", "GPU GiB", "max ctx");
    for r in &s.moe_table {
        let shown = r.max_ctx_size.map_or_else(|| "does not fit".into(), thousands);
        let _ = writeln!(
            out,
            "  {:>11}  {:>11}  {:>13}  {shown:>12}",
            r.n_cpu_moe,
            gib_cell(r.overridden_to_cpu_bytes),
            gib_cell(r.gpu_total_bytes)
        );
    }
}

/// The override flags in llama.cpp's spelling, or "" when none.
fn override_flags(o: &vram_core::gguf::Overrides) -> String {
    use vram_core::gguf::CpuMoe;
    let mut f: Vec<String> = o.tensor.iter().map(|t| format!("-ot {}={}", t.pattern, t.buffer_type)).collect();
    match o.cpu_moe {
        CpuMoe::None => {}
        CpuMoe::FirstLayers(n) => f.push(format!("--n-cpu-moe {n}")),
        CpuMoe::All => f.push("--cpu-moe".into()),
    }
    f.join(" ")
}

/// What the tensor overrides moved, under the weights row.
fn override_rows(out: &mut String, s: &LlamaCppServe) {
    let (o, p) = (&s.overrides, &s.plan);
    let flags = override_flags(o);
    if flags.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "    {:<40} {:>8} {:>8}",
        "moved to RAM by the overrides",
        format!("-{}", gib_cell(p.overridden_to_cpu_bytes)),
        format!("+{}", gib_cell(p.overridden_to_cpu_bytes))
    );
    if p.overridden_to_gpu_bytes > 0 {
        let _ = writeln!(
            out,
            "    {:<40} {:>8} {:>8}",
            "moved to the GPU by -ot …=CUDA0",
            format!("+{}", gib_cell(p.overridden_to_gpu_bytes)),
            format!("-{}", gib_cell(p.overridden_to_gpu_bytes))
        );
    }
    if p.overridden_tensors == 0 {
        let _ =
            writeln!(out, "    note: {flags} matched no tensor of this file (no MoE expert tensors `blk.N.ffn_*_exps`?); nothing moved");
    }
}

/// --n-gpu-layers → longest context, with the RAM the overrides hold at each.
fn offload_text(out: &mut String, s: &LlamaCppServe) {
    let flags = override_flags(&s.overrides);
    let with = if flags.is_empty() { String::new() } else { format!(" with {flags}") };
    let _ = writeln!(out, "--n-gpu-layers → longest --ctx-size that fits {}{with}:", s.gpu.name);
    for r in &s.offload_table {
        let shown = match r.max_ctx_size {
            Some(c) => thousands(c),
            None => "does not fit".into(),
        };
        let n = r.n_gpu_layers;
        let label = if n > s.hparams.layers { format!("{n} (all + output)") } else { n.to_string() };
        // Without overrides the rows read as before (no padding, no RAM column).
        if flags.is_empty() {
            let _ = writeln!(out, "  {label:>16}  {shown}");
        } else {
            let _ = writeln!(out, "  {label:>16}  {shown:>12}  ({} GiB kept in RAM by the overrides)", gib_cell(r.overridden_to_cpu_bytes));
        }
    }
}

/// `vram serve --json` for a GGUF model under llama.cpp.
pub fn llama_cpp_json(s: &LlamaCppServe) -> Value {
    json!({
        "vram_version": env!("CARGO_PKG_VERSION"),
        "engine": "llama.cpp",
        "notes": s.notes,
        "file": s.file,
        "gguf": {
            "version": s.gguf.version,
            "architecture": s.gguf.architecture(),
            "file_type": s.gguf.file_type(),
            "tensors": s.gguf.tensors.len(),
            "tensor_bytes": s.gguf.tensor_bytes(),
            "bytes_by_type": s.gguf.bytes_by_type().iter().map(|(t, b)| json!({"type": t, "bytes": b})).collect::<Vec<_>>(),
            "header_bytes": s.gguf.header_bytes,
        },
        "hparams": s.hparams,
        "gpu": gpu_json(&s.gpu),
        "config": s.config,
        "overrides": s.overrides,
        "plan": s.plan,
        "fits": s.plan.gpu_total_bytes <= s.gpu.memory,
        "offload_table": s.offload_table,
        "n_cpu_moe_table": s.moe_table,
    })
}
