//! `vram explain SNAPSHOT.pickle`: what a PyTorch memory snapshot says, without running Python.
//!
//! Reads the file written by `torch.cuda.memory._dump_snapshot()` with vram-core's pickle reader
//! (plain data only: a pickle that imports anything is refused before anything runs), and shows
//! the peaks exactly as pytorch.org/memory_viz computes them, what was live at the peak by
//! category and by stack frame, fragmentation by segment, a timeline (`--svg`) and, with
//! `--model`, the estimate beside it. Also the hook `vram run --snapshot` uses to record one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use vram_core::snapshot::{self, compare, CompareRow, Explanation};

use crate::cli::JobArgs;
use crate::resolve::UsageError;

/// `vram explain` flags.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A snapshot from `torch.cuda.memory._dump_snapshot("snap.pickle")`.
    pub snapshot: PathBuf,
    /// CUDA device to explain (default: the first one with a trace or segments).
    #[arg(long)]
    pub device: Option<usize>,
    /// Write the memory timeline (allocated and reserved) as an SVG chart.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Overwrite the --svg file if it exists.
    #[arg(long)]
    pub force: bool,
    /// The job that produced the snapshot (`--model` puts the estimate beside it).
    #[command(flatten)]
    pub job: JobArgs,
}

/// Run `vram explain`.
pub fn run(a: ExplainArgs) -> Result<()> {
    let ex = explain_file(&a.snapshot, a.device)?;
    let cmp = match &a.job.model {
        Some(_) => {
            let (model, job) = crate::resolve::resolve(&a.job)?;
            let est = vram_core::estimate(&model, &job)?;
            Some((model.name.clone(), compare(&est, &ex)))
        }
        None => None,
    };
    if let Some(path) = &a.svg {
        write_new(path, svg(&ex, &a.snapshot.display().to_string()).as_bytes(), a.force)?;
    }
    let text = if a.job.json {
        format!("{}\n", serde_json::to_string_pretty(&to_json(&ex, cmp.as_ref()))?)
    } else {
        text(&ex, &a.snapshot.display().to_string(), cmp.as_ref())
    };
    crate::commands::emit(&text)
}

/// The caching-allocator settings of a job: `flag` (e.g. `--alloc-conf`) when given, else the
/// `PYTORCH_CUDA_ALLOC_CONF` environment variable PyTorch itself reads, else PyTorch's defaults.
pub fn alloc_conf(flag: Option<&str>) -> Result<vram_core::AllocConf> {
    let env = std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok();
    match (flag, env.as_deref()) {
        (Some(s), _) => Ok(vram_core::AllocConf::parse(s)?),
        (None, Some(s)) => vram_core::AllocConf::parse(s).map_err(|e| {
            crate::errors::UsageError(format!(
                "PYTORCH_CUDA_ALLOC_CONF={s}: {e}; the allocator model reads it to simulate the reserve — unset it, set --alloc-conf, or pass --allocator-reserve 0.05 for a flat reserve"
            ))
            .into()
        }),
        (None, None) => Ok(vram_core::AllocConf::default()),
    }
}

/// Parse a snapshot file and explain one device.
pub fn explain_file(path: &Path, device: Option<usize>) -> Result<Explanation> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let snap = snapshot::parse(&data).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let devices = snap.devices();
    let d = match device {
        Some(d) if devices.contains(&d) => d,
        Some(d) => {
            return Err(UsageError(format!("{}: device {d} recorded nothing (devices with data: {devices:?})", path.display())).into())
        }
        None => *devices.first().ok_or_else(|| {
            UsageError(format!(
                "{}: the snapshot has no segments and no trace: was torch.cuda.memory._record_memory_history() called before the work?",
                path.display()
            ))
        })?,
    };
    Ok(snap.explain(d))
}

/// Refuse to overwrite an existing file unless forced.
fn write_new(path: &Path, bytes: &[u8], force: bool) -> Result<()> {
    if path.exists() && !force {
        return Err(UsageError(format!("{} exists; pass --force to overwrite it", path.display())).into());
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// Bytes with their binary unit (GiB = 2^30, MiB = 2^20, KiB = 2^10).
fn size(b: u64) -> String {
    match b {
        _ if b >= 1 << 30 => format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64),
        _ if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        _ if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{b} B"),
    }
}

fn when(ex: &Explanation) -> String {
    match (ex.peak_allocated_event, ex.peak_allocated_after_us) {
        (Some(i), Some(us)) => format!("at trace entry {i} of {}, {:.3} s after the first", ex.events, us as f64 / 1e6),
        (Some(i), None) => format!("at trace entry {i} of {}", ex.events),
        _ => "before any traced event".into(),
    }
}

/// The text report.
pub fn text(ex: &Explanation, name: &str, cmp: Option<&(String, (Vec<CompareRow>, String))>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{name}: device {}, {} trace entries (accounting as pytorch.org/memory_viz)", ex.device, ex.events);
    let _ = writeln!(s, "  peak allocated  {:>12}  {}", size(ex.peak_allocated), when(ex));
    let _ = writeln!(
        s,
        "  reserved then   {:>12}  ({} cached by the allocator beside live tensors)",
        size(ex.reserved_at_peak),
        size(ex.reserved_at_peak.saturating_sub(ex.peak_allocated))
    );
    let _ = writeln!(s, "  peak reserved   {:>12}  (segments from cudaMalloc; nvidia-smi adds the CUDA context)", size(ex.peak_reserved));
    let _ = writeln!(s, "\nLive at the peak, by category (inferred from stack frames: a guess):");
    for g in &ex.by_category {
        let _ = writeln!(s, "  {:>12}  {:>6} {}  {}", size(g.bytes), g.count, if g.count == 1 { "alloc " } else { "allocs" }, g.key);
    }
    let _ = writeln!(s, "\nLive at the peak, by allocating frame (top {}):", ex.by_frame.len());
    for g in &ex.by_frame {
        let _ = writeln!(s, "  {:>12}  {:>6} {}  {}", size(g.bytes), g.count, if g.count == 1 { "alloc " } else { "allocs" }, g.key);
    }
    let _ = writeln!(s, "\nLargest live allocations at the peak:");
    for (b, c, f) in &ex.largest {
        let _ = writeln!(s, "  {:>12}  {:<16} {}", size(*b), c.describe(), f);
    }
    let _ = writeln!(
        s,
        "\nFragmentation at dump time: {} reserved in {} segments, {} active, {} cached free",
        size(ex.final_reserved),
        ex.segments,
        size(ex.final_active),
        size(ex.final_reserved.saturating_sub(ex.final_active))
    );
    for g in ex.fragmented_segments.iter().filter(|g| g.free > 0) {
        let _ = writeln!(
            s,
            "  segment {:#x} ({}): {} total, {} free in {} {}",
            g.address,
            g.pool,
            size(g.total),
            size(g.free),
            g.blocks,
            if g.blocks == 1 { "block" } else { "blocks" }
        );
    }
    if let Some((model, (rows, verdict))) = cmp {
        let _ = writeln!(s, "\nEstimate for {model} beside the snapshot's peak:");
        let _ = writeln!(s, "  {:<22} {:>12} {:>12}", "", "estimate", "snapshot");
        for r in rows {
            let _ = writeln!(s, "  {:<22} {:>12} {:>12}", r.what, size(r.estimate), size(r.snapshot));
        }
        let _ = writeln!(s, "  {verdict}");
    }
    s
}

/// The JSON report.
pub fn to_json(ex: &Explanation, cmp: Option<&(String, (Vec<CompareRow>, String))>) -> serde_json::Value {
    let mut v = serde_json::to_value(ex).unwrap_or_default();
    if let Some((model, (rows, verdict))) = cmp {
        v["comparison"] = json!({ "model": model, "rows": rows, "verdict": verdict });
    }
    v
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The timeline chart: allocated and reserved bytes over trace entries.
pub fn svg(ex: &Explanation, title: &str) -> String {
    let (w, h, pad) = (900.0, 320.0, 50.0);
    let max_x = ex.timeline.last().map_or(1, |p| p.0).max(1) as f64;
    let max_y = ex.peak_reserved.max(ex.peak_allocated).max(1) as f64;
    let pt =
        |i: usize, y: u64| format!("{:.1},{:.1}", pad + i as f64 / max_x * (w - 2.0 * pad), h - pad - y as f64 / max_y * (h - 2.0 * pad));
    let line = |sel: fn(&(usize, u64, u64)) -> u64| ex.timeline.iter().map(|p| pt(p.0, sel(p))).collect::<Vec<_>>().join(" ");
    let mut s =
        format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n");
    let _ = writeln!(s, "<text x=\"{pad}\" y=\"20\">{} — device {}</text>", xml_escape(title), ex.device);
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"36\">peak allocated {} (blue), peak reserved {} (orange); x: trace entries</text>",
        size(ex.peak_allocated),
        size(ex.peak_reserved)
    );
    let _ = writeln!(s, "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>", h - pad, w - pad, h - pad);
    let _ = writeln!(s, "<text x=\"4\" y=\"{}\">{}</text>", pad + 4.0, size(max_y as u64));
    let _ = writeln!(s, "<polyline fill=\"none\" stroke=\"#f28e2b\" stroke-width=\"1.5\" points=\"{}\"/>", line(|p| p.2));
    let _ = writeln!(s, "<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"1.5\" points=\"{}\"/>", line(|p| p.1));
    s.push_str("</svg>\n");
    s
}

/// The Python startup hook `vram run --snapshot` puts on the child's PYTHONPATH.
pub const SNAPSHOT_HOOK: &str = include_str!("snapshot_hook/sitecustomize.py");

/// Environment for a PyTorch child that should record a snapshot into `out` (a file path):
/// writes the hook into `hook_dir` and returns the variables to set. Existing PYTHONPATH entries
/// are kept after the hook's directory; a user's own sitecustomize is chained by the hook.
pub fn snapshot_env(hook_dir: &Path, out: &Path) -> Result<Vec<(String, String)>> {
    std::fs::create_dir_all(hook_dir).with_context(|| format!("cannot create {}", hook_dir.display()))?;
    std::fs::write(hook_dir.join("sitecustomize.py"), SNAPSHOT_HOOK)
        .with_context(|| format!("cannot write the snapshot hook in {}", hook_dir.display()))?;
    let mut path = hook_dir.display().to_string();
    if let Ok(old) = std::env::var("PYTHONPATH") {
        if !old.is_empty() {
            path = format!("{path}:{old}");
        }
    }
    Ok(vec![("PYTHONPATH".into(), path), ("VRAM_SNAPSHOT_OUT".into(), out.display().to_string())])
}

/// After `vram run --snapshot`: the explanation of what the child dumped, as text (or a line
/// saying why there is none — the child may not use PyTorch or CUDA).
pub fn explain_after_run(path: &Path) -> String {
    if !path.exists() {
        return format!("no memory snapshot at {} (the child did not import torch with CUDA, or was killed before exit)\n", path.display());
    }
    match explain_file(path, None) {
        Ok(ex) => text(&ex, &path.display().to_string(), None),
        Err(e) => format!("memory snapshot {}: {e:#}\n", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_env_installs_the_hook() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("snap.pickle");
        let env = snapshot_env(&dir.path().join("hook"), &out).unwrap();
        assert!(env[0].1.starts_with(&dir.path().join("hook").display().to_string()));
        assert_eq!(env[1], ("VRAM_SNAPSHOT_OUT".to_string(), out.display().to_string()));
        let hook = std::fs::read_to_string(dir.path().join("hook/sitecustomize.py")).unwrap();
        assert!(hook.contains("_record_memory_history"));
        assert!(explain_after_run(&out).contains("no memory snapshot"));
    }

    #[test]
    fn sizes_name_their_unit() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 << 20), "3.0 MiB");
        assert_eq!(size(3 << 30), "3.00 GiB");
    }
}
