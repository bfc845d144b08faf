//! Human-readable tables. Sizes in GiB (2^30) with the GB (10^9) figure beside totals.

use std::fmt::Write;

use vram_core::gpu::{Gpu, MemorySource};
use vram_core::units::{gb, gib};
use vram_core::{Job, Kind, Mode, Model};

use super::{EstimateReport, FitReport};

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn job_line(model: &Model, job: &Job) -> String {
    match job.mode {
        Mode::Train => format!(
            "train · batch {} × seq {} · {} · {} ({}) · checkpointing {} · attention {}{}{}",
            job.batch,
            job.seq,
            job.precision.name(),
            job.optimizer.name(),
            format!("{:?}", job.optimizer_impl).to_ascii_lowercase(),
            format!("{:?}", job.checkpointing).to_ascii_lowercase(),
            format!("{:?}", job.attention).to_ascii_lowercase(),
            if job.grad_accum > 1 { format!(" · grad accum {}", job.grad_accum) } else { String::new() },
            if job.fused_cross_entropy { " · fused cross-entropy" } else { "" },
        ),
        Mode::Infer => format!(
            "infer · batch {} × context {}{} · weights {} · KV {}",
            job.batch,
            job.seq,
            job.prompt_len.map_or(String::new(), |p| format!(" (prompt {p})")),
            job.precision.name(),
            job.kv_dtype.map_or_else(|| "auto".to_string(), |d| d.torch_name().to_string()),
        ),
    }
    .replace("train", if model.moe.is_some() { "train (MoE)" } else { "train" })
}

fn header(out: &mut String, model: &Model, job: &Job) {
    model_lines(out, model, Some(&job_line(model, job)));
}

/// The model's title line, an optional line under it, then its warnings.
fn model_lines(out: &mut String, model: &Model, under: Option<&str>) {
    let _ = writeln!(
        out,
        "{} — {} parameters ({}{})",
        model.name,
        thousands(model.parameters()),
        model.model_type,
        model.stored_dtype.map_or(String::new(), |d| format!(", stored {}", d.torch_name()))
    );
    if let Some(line) = under {
        let _ = writeln!(out, "{line}");
    }
    for w in &model.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
}

fn gpu_line(gpu: &Gpu) -> String {
    let src = match gpu.memory_source {
        MemorySource::NvidiaSmi => "nvidia-smi total",
        MemorySource::Nominal => "nominal",
        MemorySource::User => "as given",
    };
    format!("{} ({:.2} GiB = {:.2} GB, {src})", gpu.name, gib(gpu.memory), gb(gpu.memory))
}

/// GiB with two decimals; amounts that would print as 0.00 show as `<0.01`.
fn gib_cell(bytes: u64) -> String {
    if bytes > 0 && gib(bytes) < 0.005 {
        "<0.01".into()
    } else {
        format!("{:.2}", gib(bytes))
    }
}

/// Verdict for a utilisation: the 85–95% sweet spot.
pub fn verdict(util: f64) -> &'static str {
    if util > 1.0 {
        "does NOT fit: out of memory"
    } else if util > 0.95 {
        "fits, but above 95%: likely to OOM on longer samples or fragmentation"
    } else if util >= 0.85 {
        "fits, in the 85–95% sweet spot"
    } else if util >= 0.70 {
        "fits, below the 85% sweet spot"
    } else {
        "fits, under 70%: the card is underused (raise the batch)"
    }
}

/// `vram estimate` as a table.
pub fn estimate(r: &EstimateReport) -> String {
    let e = r.estimate;
    let mut out = String::new();
    header(&mut out, r.model, r.job);
    let _ = writeln!(out, "attention kernel: {:?} · peak at: {}", e.attention_kernel, e.peak_phase.describe());
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<50} {:>10} {:>7}", "component", "GiB", "share");
    let total = e.total.max(1) as f64;
    let mut shown_overhead_rule = false;
    for c in &e.components {
        if c.kind == Kind::Overhead && !shown_overhead_rule {
            let _ = writeln!(
                out,
                "  {:<50} {:>10.2} {:>6.1}%",
                "peak allocated (torch.cuda.max_memory_allocated)",
                gib(e.peak_allocated),
                e.peak_allocated as f64 / total * 100.0
            );
            shown_overhead_rule = true;
        }
        let _ = writeln!(out, "  {:<50} {:>10} {:>6.1}%", c.name, gib_cell(c.bytes), c.bytes as f64 / total * 100.0);
    }
    let _ = writeln!(out, "  {:<50} {:>10.2} {:>7}", "total (what nvidia-smi shows)", gib(e.total), "100%");
    let _ = writeln!(out, "  = {} bytes = {:.2} GiB = {:.2} GB", thousands(e.total), gib(e.total), gb(e.total));
    if let Some(g) = r.gpu {
        let util = e.total as f64 / g.memory as f64;
        let _ = writeln!(out);
        let _ = writeln!(out, "on {}: {:.1}% — {}", gpu_line(g), util * 100.0, verdict(util));
    }
    let _ = writeln!(out);
    let phases: Vec<String> = e.phases.iter().map(|p| format!("{} {:.2}", p.phase.describe(), gib(p.allocated))).collect();
    let _ = writeln!(out, "allocated by phase (GiB): {}", phases.join(" · "));
    for n in e.notes.iter().chain(r.advice.iter()) {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `vram fit` as a table.
pub fn fit(r: &FitReport) -> String {
    let f = r.fit;
    let mut out = String::new();
    header(&mut out, r.model, r.job);
    let _ = writeln!(out, "GPU: {} · target {:.0}% = {:.2} GiB", gpu_line(r.gpu), f.target_utilization * 100.0, gib(f.budget));
    let _ = writeln!(out);
    let accum = r.global_batch.is_some();
    let _ =
        writeln!(out, "  {:>6} {:>7} {:>14} {:>12} {:>8}", "batch", if accum { "accum" } else { "" }, "allocated GiB", "total GiB", "util");
    for row in &f.rows {
        let mark = if Some(row.batch) == f.max_batch {
            "  ← largest within target"
        } else if row.utilization > 1.0 {
            "  OOM"
        } else {
            ""
        };
        let acc = if accum { row.grad_accum.to_string() } else { String::new() };
        let _ = writeln!(
            out,
            "  {:>6} {:>7} {:>14.2} {:>12.2} {:>7.1}%{mark}",
            row.batch,
            acc,
            gib(row.peak_allocated),
            gib(row.total),
            row.utilization * 100.0
        );
    }
    let _ = writeln!(out);
    match (&f.chosen, f.max_batch) {
        (Some(c), Some(b)) => {
            let _ = write!(out, "largest micro-batch: {b} ({:.1}% of the GPU, {:.2} GiB)", c.utilization * 100.0, gib(c.total));
            if accum {
                let _ = write!(out, " with gradient accumulation {} (global batch {})", c.grad_accum, r.global_batch.unwrap_or(b));
            }
            let _ = writeln!(out);
            if let Some(n) = &f.next {
                let _ = writeln!(out, "next size {} would need {:.2} GiB ({:.1}%)", n.batch, gib(n.total), n.utilization * 100.0);
            }
            let _ = writeln!(out, "verdict: {}", verdict(c.utilization));
            if r.job.mode == Mode::Train {
                let _ = writeln!(
                    out,
                    "HF Trainer: --per_device_train_batch_size {b}{}",
                    if accum { format!(" --gradient_accumulation_steps {}", c.grad_accum) } else { String::new() }
                );
            }
            if let Some(e) = r.chosen {
                let _ = writeln!(out, "peak at: {} · attention kernel {:?}", e.peak_phase.describe(), e.attention_kernel);
            }
        }
        _ => {
            let need = f.next.as_ref().map_or(0, |n| n.total);
            let _ = writeln!(out, "batch 1 does not fit: it needs {:.2} GiB, the target allows {:.2} GiB", gib(need), gib(f.budget));
            if !r.alternatives.is_empty() {
                let _ = writeln!(out, "what would change it (total per GPU at batch 1):");
                for a in &r.alternatives {
                    let _ = writeln!(out, "  {:>9.2} GiB  {}  {}", gib(a.total), if a.fits { "fits   " } else { "too big" }, a.change);
                }
            }
        }
    }
    out
}

/// `vram models`.
pub fn models(rows: &[(String, String, String, u64)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<16} {:<12} {:>18}  Hugging Face config", "preset", "model_type", "parameters");
    for (name, mt, hf, p) in rows {
        let _ = writeln!(out, "{name:<16} {mt:<12} {:>18}  {hf}", thousands(*p));
    }
    out
}

/// `vram gpus`.
pub fn gpus(list: &[Gpu]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<11} {:>10} {:>9}  {:<17} {:>8}  name", "gpu", "GiB", "GB", "memory source", "TFLOP/s");
    for g in list {
        let src = match g.memory_source {
            MemorySource::NvidiaSmi => "nvidia-smi total",
            MemorySource::Nominal => "nominal",
            MemorySource::User => "as given",
        };
        let _ = writeln!(
            out,
            "{:<11} {:>10.2} {:>9.2}  {:<17} {:>8.0}  {}",
            g.name,
            gib(g.memory),
            gb(g.memory),
            src,
            g.tflops_16bit,
            g.display
        );
    }
    let _ = writeln!(
        out,
        "TFLOP/s: dense bf16/fp16 tensor throughput from the datasheet, no sparsity. `--gpu` also takes a size: 24GiB, 80GB."
    );
    out
}

/// `vram estimate` with a distributed layout: the most loaded rank.
pub fn parallel(
    model: &Model,
    job: &Job,
    par: &vram_core::parallel::Parallel,
    e: &vram_core::parallel::ParallelEstimate,
    gpu: Option<&Gpu>,
) -> String {
    let mut out = String::new();
    header(&mut out, model, job);
    let _ = writeln!(
        out,
        "{:?} on {} GPUs ({} nodes × {}): dp {} · tp {} · pp {} · cp {}{}{}{}",
        par.engine,
        par.gpus,
        par.nodes(),
        par.gpus_per_node.min(par.gpus),
        e.dp,
        par.tp,
        par.pp,
        par.cp,
        if par.engine == vram_core::parallel::Engine::DeepSpeed { format!(" · ZeRO-{}", par.zero) } else { String::new() },
        if par.engine == vram_core::parallel::Engine::Fsdp { format!(" · {:?}", par.fsdp) } else { String::new() },
        if par.offload_optimizer || par.offload_params { " · CPU offload" } else { "" }
    );
    let _ = writeln!(out, "most loaded rank: {}", e.rank);
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<50} {:>10} {:>7}", "component (per GPU)", "GiB", "share");
    let total = e.total.max(1) as f64;
    for c in &e.components {
        let _ = writeln!(out, "  {:<50} {:>10} {:>6.1}%", c.name, gib_cell(c.bytes), c.bytes as f64 / total * 100.0);
    }
    let _ = writeln!(out, "  {:<50} {:>10.2}", "peak allocated per GPU", gib(e.peak_allocated));
    let _ = writeln!(out, "  {:<50} {:>10.2}    = {:.2} GB", "total per GPU (what nvidia-smi shows)", gib(e.total), gb(e.total));
    if let Some(cpu) = e.cpu_per_node {
        let _ = writeln!(out, "  {:<50} {:>10.2}    = {:.2} GB", "CPU memory per node (offload)", gib(cpu), gb(cpu));
    }
    if let Some(g) = gpu {
        let util = e.total as f64 / g.memory as f64;
        let _ = writeln!(out);
        let _ = writeln!(out, "on {}: {:.1}% — {}", gpu_line(g), util * 100.0, verdict(util));
    }
    for n in &e.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `vram plan`.
pub fn plan(model: &Model, job: &Job, gpu: &Gpu, r: &vram_core::plan::PlanResult) -> String {
    let mut out = String::new();
    header(&mut out, model, job);
    let t = &r.throughput;
    let _ = writeln!(
        out,
        "searched {} layouts, {} fit; global batch {} sequences ({:.1}M tokens)",
        r.evaluated,
        r.fitting,
        r.global_batch,
        (r.global_batch * job.seq) as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "assumed: MFU {:.0}%, {} GB/s in a node, {} GB/s between nodes, {:.0}% of data-parallel traffic overlapped",
        t.mfu * 100.0,
        t.intra_node_gbps,
        t.inter_node_gbps,
        t.dp_overlap * 100.0
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:>2}  {:<22} {:>3} {:>3} {:>3} {:>5} {:>3} {:>6} {:<10} {:>9} {:>9} {:>12}",
        "#", "engine", "tp", "pp", "cp", "dp", "mb", "accum", "recompute", "GiB/GPU", "s/step", "tokens/s"
    );
    for (i, p) in r.top.iter().enumerate() {
        let par = &p.parallel;
        let engine = match par.engine {
            vram_core::parallel::Engine::Ddp => "DDP".to_string(),
            vram_core::parallel::Engine::DeepSpeed => format!(
                "DeepSpeed ZeRO-{}{}",
                par.zero,
                if par.offload_params {
                    "+off(p)"
                } else if par.offload_optimizer {
                    "+off(o)"
                } else {
                    ""
                }
            ),
            vram_core::parallel::Engine::Fsdp => {
                format!("FSDP {}{}", format!("{:?}", par.fsdp).to_lowercase(), if par.offload_params { "+off" } else { "" })
            }
            vram_core::parallel::Engine::Megatron => format!(
                "Megatron{}{}{}",
                if par.sp { " SP" } else { "" },
                if par.distributed_optimizer { " DO" } else { "" },
                if par.virtual_stages > 1 { format!(" v{}", par.virtual_stages) } else { String::new() }
            ),
        };
        let _ = writeln!(
            out,
            "  {:>2}  {:<22} {:>3} {:>3} {:>3} {:>5} {:>3} {:>6} {:<10} {:>9.2} {:>9.2} {:>12.0}",
            i + 1,
            engine,
            par.tp,
            par.pp,
            par.cp,
            par.dp(),
            p.micro_batch,
            p.grad_accum,
            format!("{:?}", p.checkpointing).to_lowercase(),
            gib(p.per_gpu_bytes),
            p.step_seconds,
            p.tokens_per_second
        );
        let _ = writeln!(out, "      why: {}", p.reason);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "on {} · write the best as a config: --emit deepspeed | accelerate | torchrun", gpu_line(gpu));
    out
}

/// `vram serve` (vLLM) as a table.
pub fn serve(s: &crate::serve::VllmServe) -> String {
    let (m, r, c) = (&s.model, &s.report, &s.config);
    let mut out = String::new();
    model_lines(&mut out, m, None);
    let kv = if r.kv_dtype_bytes == 1 { "fp8".to_string() } else { r.dtype.torch_name().to_string() };
    let _ = writeln!(
        out,
        "vLLM serve on {} · --tensor-parallel-size {} · --max-model-len {} · --dtype {} · --kv-cache-dtype {kv}",
        gpu_line(&s.gpu),
        r.tp,
        r.max_model_len,
        r.dtype.torch_name()
    );
    let _ = writeln!(
        out,
        "--gpu-memory-utilization {} · --max-num-batched-tokens {} · --max-num-seqs {} · --block-size {}{}",
        c.gpu_memory_utilization,
        r.max_num_batched_tokens,
        r.max_num_seqs,
        r.block_size,
        match c.quantization {
            vram_core::serve::Quantization::None => String::new(),
            q => format!(
                " · --quantization {}",
                serde_json::to_value(q).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
            ),
        }
    );
    let _ = writeln!(out);
    let who = if r.tp > 1 { format!("per GPU (each of the {} TP ranks)", r.tp) } else { "per GPU".to_string() };
    let _ = writeln!(out, "{who:<44} {:>8}", "GiB");
    let row = |out: &mut String, name: &str, bytes: u64, note: &str| {
        let _ = writeln!(out, "  {name:<42} {:>8}  {note}", gib_cell(bytes));
    };
    let mut wnote = format!("\"Model loading took\"; rotary cos/sin cache {}", gib_cell(r.rotary_cache_bytes));
    if r.quant_scales_bytes > 0 {
        wnote.push_str(&format!(", quantization scales {}", gib_cell(r.quant_scales_bytes)));
    }
    row(&mut out, "weights", r.weights_bytes, &wnote);
    row(&mut out, "profile-run activation peak", r.activation_peak_bytes, &r.activation_peak_at);
    row(&mut out, "non-torch increase", r.non_torch_bytes, "kernels, library handles, NCCL at TP ≥ 2");
    row(&mut out, "= non-KV memory", r.non_kv_bytes, "vLLM logs it as \"Total non KV cache memory\"");
    row(
        &mut out,
        &format!("requested ({} × CUDA total {:.2})", c.gpu_memory_utilization, gib(c.gpu_memory)),
        r.requested_bytes,
        "CUDA total = nvidia-smi total − 434 MiB kept by the driver",
    );
    row(&mut out, "KV-cache pool", r.kv_cache_bytes, "\"Available KV cache memory\"");
    let _ = writeln!(
        out,
        "  beyond vLLM's budget: CUDA context {} GiB{}; the process shows at least {} GiB ({:.2} GB) in nvidia-smi",
        gib_cell(r.cuda_context_bytes),
        if c.enforce_eager { "" } else { " plus CUDA graphs" },
        gib_cell(r.process_bytes()),
        gb(r.process_bytes())
    );
    let _ = writeln!(out);
    if r.shortfall_bytes > 0 {
        let _ = writeln!(
            out,
            "does NOT fit: non-KV memory exceeds the requested {} GiB by {} GiB — raise --gpu-memory-utilization, add GPUs (--tensor-parallel-size), quantize, or lower --max-num-batched-tokens",
            gib_cell(r.requested_bytes),
            gib_cell(r.shortfall_bytes)
        );
    }
    let p = &r.pool;
    let _ = writeln!(
        out,
        "KV cache: {} bytes per token on this GPU · page {} bytes (block of {} tokens × 1 layer) · {} group{} of {} layers",
        thousands(p.kv_bytes_per_token),
        thousands(p.page_size_bytes),
        r.block_size,
        p.groups.len(),
        if p.groups.len() == 1 { "" } else { "s" },
        p.group_size
    );
    let _ = writeln!(
        out,
        "  {} blocks · GPU KV cache size: {} tokens · maximum concurrency for {} tokens per request: {:.2}x",
        thousands(p.num_kv_blocks),
        thousands(p.kv_tokens),
        thousands(r.max_model_len),
        p.max_concurrency
    );
    if r.shortfall_bytes == 0 && !r.fits {
        let _ = writeln!(
            out,
            "does NOT fit: one request of {} tokens needs more KV cache than the pool holds; vLLM would refuse to start. The estimated maximum model length is {}: pass --max-model-len {} or raise --gpu-memory-utilization",
            r.max_model_len,
            p.max_model_len_that_fits,
            p.max_model_len_that_fits
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// `vram serve` for a GGUF model under llama.cpp.
pub fn llama_cpp(s: &crate::serve::LlamaCppServe) -> String {
    let (g, hp, p, c) = (&s.gguf, &s.hparams, &s.plan, &s.config);
    let mut out = String::new();
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
    let _ = writeln!(
        out,
        "llama.cpp on {} · --n-gpu-layers {} · --ctx-size {} (padded {}) · --ubatch-size {} · --parallel {} ({} tokens each) · flash attention",
        gpu_line(&s.gpu),
        c.n_gpu_layers,
        c.ctx,
        p.ctx,
        c.ubatch,
        c.parallel,
        p.ctx_per_sequence
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
        p.cpu_weights_bytes,
    );
    row(&mut out, "KV cache (f16 unless --kv-cache-dtype)", p.gpu_kv_bytes, p.cpu_kv_bytes);
    row(&mut out, "compute buffer (modelled)", p.gpu_compute_bytes, 0);
    row(&mut out, "CUDA context + cuBLAS (assumed)", p.cuda_overhead_bytes, 0);
    row(&mut out, "total", p.gpu_total_bytes, p.cpu_weights_bytes + p.cpu_kv_bytes);
    let util = p.gpu_total_bytes as f64 / s.gpu.memory as f64;
    let _ = writeln!(out, "{:.1}% of {} — {}", util * 100.0, s.gpu.name, verdict(util));
    let _ = writeln!(out);
    let _ = writeln!(out, "--n-gpu-layers → longest --ctx-size that fits {}:", s.gpu.name);
    for (n, ctx) in &s.offload_table {
        let shown = match ctx {
            Some(c) => thousands(*c),
            None => "does not fit".into(),
        };
        let label = if *n > hp.layers { format!("{n} (all + output)") } else { n.to_string() };
        let _ = writeln!(out, "  {label:>16}  {shown}");
    }
    out
}
