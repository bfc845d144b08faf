//! Shared pieces of the renderers: number formats, the model and GPU lines, the verdict, and
//! the JSON objects every command embeds.

use std::fmt::Write;

use vram_core::gpu::{Gpu, MemorySource};
use vram_core::units::{gb, gib};
use vram_core::{Job, Mode, Model};

pub use vram_core::units::thousands;

pub fn job_line(model: &Model, job: &Job) -> String {
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
        Mode::Infer if !model.is_plain_decoder() => {
            format!("infer · batch {} × seq {} · weights {} · one forward pass", job.batch, job.seq, job.precision.name())
        }
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
        + &family_line(model, job)
        + &peft_line(model, job)
}

/// What the sequence means for models that are not plain decoders, on a second line.
fn family_line(model: &Model, job: &Job) -> String {
    if let Some(d) = &model.dual {
        let v = d.vision.encoder.and_then(|e| e.vision).expect("a dual encoder's vision tower");
        return format!(
            "\nimage-text pairs: captions of {} tokens · images {}×{} px, patch {} → {} tokens · vision tower {} · {} loss",
            job.seq,
            v.image_size,
            v.image_size,
            v.patch,
            v.tokens(v.image_size),
            if d.tower_frozen { "frozen" } else { "trained" },
            match d.family {
                vram_core::model::DualFamily::Clip => "CLIP contrastive",
                vram_core::model::DualFamily::Siglip => "SigLIP sigmoid",
            }
        );
    }
    if let Some(v) = model.encoder.and_then(|e| e.vision) {
        return format!(
            "\nimages: {}×{} px, patch {} → {} tokens per image ({})",
            v.image_size,
            v.image_size,
            v.patch,
            job.seq,
            model.encoder.map_or("", |e| e.head.task())
        );
    }
    if let Some(e) = model.encoder {
        return format!("\ntask: {}{}", e.head.task(), if job.padded { " · padded batches" } else { "" });
    }
    if let Some(mm) = &model.multimodal {
        return format!(
            "\nimages: {} per sample × {} tokens (inside the {}-token sequence) · vision tower {}",
            mm.images,
            mm.image_tokens,
            job.seq,
            if mm.tower_frozen || job.lora.is_some() { "frozen" } else { "trained" }
        );
    }
    if let Some(s) = &model.seq2seq {
        return match s.frontend {
            vram_core::Frontend::Audio { .. } => {
                format!("\nencoder: {} positions from {} mel frames · decoder: {} label tokens", s.source_tokens, s.frames(), job.seq)
            }
            vram_core::Frontend::Text => {
                format!("\nencoder: {} source tokens (--source-len) · decoder: {} target tokens (--seq-len)", s.source_tokens, job.seq)
            }
        };
    }
    String::new()
}

/// The adapters of a LoRA job on a second line: method, rank, what is adapted, what trains.
fn peft_line(model: &Model, job: &Job) -> String {
    let Some(l) = &job.lora else { return String::new() };
    let Ok(r) = vram_core::peft::resolve_model(model, l) else { return String::new() };
    let mut names: Vec<&str> = r.adapted.iter().map(|a| a.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let method = match l.method {
        vram_core::peft::Method::Lora => "LoRA",
        vram_core::peft::Method::Dora => "DoRA",
    };
    let base = job.base.map_or_else(|| format!("{} (frozen)", vram_core::memory::base_dtype_name(job)), |b| b.describe());
    format!(
        "\n{method} r {} on {} ({} modules){}{} · {} trainable parameters · base {base}",
        l.r,
        names.join(","),
        r.modules(),
        if l.dropout > 0.0 { format!(" · dropout {}", l.dropout) } else { String::new() },
        if l.modules_to_save.is_empty() { String::new() } else { format!(" · trains {}", l.modules_to_save.join(",")) },
        thousands(r.adapter_parameters + r.saved_module_parameters),
    )
}

pub fn header(out: &mut String, model: &Model, job: &Job) {
    model_lines(out, model, Some(&job_line(model, job)));
}

/// The model's title line, an optional line under it, then its warnings.
pub fn model_lines(out: &mut String, model: &Model, under: Option<&str>) {
    let _ = writeln!(
        out,
        "{}{} — {} parameters ({}{})",
        if model.approximation.is_some() { "APPROXIMATE: " } else { "" },
        model.name,
        thousands(model.parameters() + vram_core::memory::unmodelled_parameters(model)),
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

pub fn gpu_line(gpu: &Gpu) -> String {
    let src = match gpu.memory_source {
        MemorySource::NvidiaSmi => "nvidia-smi total",
        MemorySource::Nominal => "nominal",
        MemorySource::User => "as given",
    };
    format!("{} ({:.2} GiB = {:.2} GB, {src})", gpu.name, gib(gpu.memory), gb(gpu.memory))
}

/// GiB with two decimals; amounts that would print as 0.00 show as `<0.01`.
pub fn gib_cell(bytes: u64) -> String {
    if bytes > 0 && gib(bytes) < 0.005 {
        "<0.01".into()
    } else {
        format!("{:.2}", gib(bytes))
    }
}

/// Verdict for a utilisation: the 85–95% sweet spot (the scale lives in the core).
pub fn verdict(util: f64) -> &'static str {
    vram_core::fit::Verdict::of_utilization(util).describe()
}

pub use vram_core::report::{estimate_body, gpu_json, job_json, model_json};

/// The component table of an estimate or a measurement: allocated components, the
/// peak-allocated rule before the first device overhead, the overheads, the total in GiB and GB,
/// and the share and verdict on `gpu`.
pub fn component_table(
    out: &mut String,
    components: &[vram_core::Component],
    labels: (&str, &str),
    peak: u64,
    total: u64,
    gpu: Option<&Gpu>,
) {
    use std::fmt::Write as _;
    let (peak_label, total_label) = labels;
    let _ = writeln!(out, "  {:<50} {:>10} {:>7}", "component", "GiB", "share");
    let share = total.max(1) as f64;
    let mut ruled = false;
    for c in components {
        if c.kind == vram_core::Kind::Overhead && !ruled {
            let _ = writeln!(out, "  {:<50} {:>10.2} {:>6.1}%", peak_label, gib(peak), peak as f64 / share * 100.0);
            ruled = true;
        }
        let _ = writeln!(out, "  {:<50} {:>10} {:>6.1}%", c.name, gib_cell(c.bytes), c.bytes as f64 / share * 100.0);
    }
    let _ = writeln!(out, "  {:<50} {:>10.2} {:>7}", total_label, gib(total), "100%");
    let _ = writeln!(out, "  = {} bytes = {:.2} GiB = {:.2} GB", thousands(total), gib(total), gb(total));
    if let Some(g) = gpu {
        let util = total as f64 / g.memory as f64;
        let _ = writeln!(out);
        let _ = writeln!(out, "on {}: {:.1}% — {}", gpu_line(g), util * 100.0, verdict(util));
    }
}
