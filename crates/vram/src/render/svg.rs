//! An SVG chart of memory over time: one line per GPU (the job's memory, or the device's), with
//! the peak marked. Pure: samples in, SVG text out.

use std::fmt::Write;

use vram_core::units::gib;

use crate::measure::timeline::{GpuPeak, Sample};

const W: f64 = 800.0;
const H: f64 = 360.0;
const PAD: f64 = 56.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

/// Text for an SVG text node: XML's special characters escaped, and control characters (which
/// XML 1.0 forbids, §2.2 "Characters"; a command line can carry them) shown as `?`.
fn esc(s: &str) -> String {
    let printable: String = s.chars().map(|c| if c.is_control() && c != '\t' { '?' } else { c }).collect();
    printable.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Render the timeline. `limit`: a horizontal line (GPU memory or the estimate), labelled.
pub fn chart(title: &str, samples: &[Sample], peaks: &[GpuPeak], limit: Option<(u64, &str)>) -> String {
    let t_max = samples.last().map_or(1, |s| s.t_ms.max(1)) as f64;
    let value = |g: &crate::measure::timeline::GpuSample| g.job_used.unwrap_or(g.device_used) as f64;
    let y_max = samples.iter().flat_map(|s| s.gpus.iter().map(value)).fold(limit.map_or(0.0, |l| l.0 as f64), f64::max).max(1.0) * 1.05;
    let x = |t: u64| PAD + (W - 2.0 * PAD) * t as f64 / t_max;
    let y = |b: f64| H - PAD - (H - 2.0 * PAD) * b / y_max;
    let mut o = String::new();
    let _ = writeln!(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">");
    let _ = writeln!(o, "<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>");
    let _ = writeln!(o, "<text x=\"{PAD}\" y=\"24\" font-size=\"15\">{}</text>", esc(title));
    // axes and GiB gridlines
    let _ = writeln!(o, "<line x1=\"{PAD}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>", H - PAD, W - PAD, H - PAD);
    let _ = writeln!(o, "<line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{}\" stroke=\"black\"/>", H - PAD);
    for i in 0..=4 {
        let b = y_max / 1.05 * i as f64 / 4.0;
        let _ = writeln!(o, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.1} GiB</text>", PAD - 6.0, y(b) + 4.0, gib(b as u64));
    }
    let _ = writeln!(o, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds ({:.1} s)</text>", W / 2.0, H - 16.0, t_max / 1000.0);
    if let Some((l, label)) = limit {
        let _ = writeln!(o, "<line x1=\"{PAD}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"gray\" stroke-dasharray=\"6 4\"/><text x=\"{1}\" y=\"{2:.1}\" text-anchor=\"end\" fill=\"gray\">{3}</text>", y(l as f64), W - PAD, y(l as f64) - 4.0, esc(label));
    }
    let gpus: Vec<u32> = peaks.iter().map(|p| p.gpu).collect();
    for (k, gpu) in gpus.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let pts: Vec<String> = samples
            .iter()
            .filter_map(|s| s.gpus.iter().find(|g| g.gpu == *gpu).map(|g| format!("{:.1},{:.1}", x(s.t_ms), y(value(g)))))
            .collect();
        let _ = writeln!(o, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>", pts.join(" "));
        if let Some(p) = peaks.iter().find(|p| p.gpu == *gpu) {
            let (px, py) = (x(p.at_ms), y(p.peak as f64));
            let _ = writeln!(o, "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"4\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">GPU {gpu} peak {:.2} GiB</text>", px + 6.0, py - 6.0, gib(p.peak));
        }
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::timeline::{peaks, GpuSample};

    #[test]
    fn control_characters_do_not_break_the_xml() {
        assert_eq!(esc("a\u{1}b\n<c>&"), "a?b?&lt;c&gt;&amp;");
    }

    #[test]
    fn well_formed_chart() {
        let samples: Vec<Sample> = (0..5)
            .map(|i| Sample {
                t_ms: i * 100,
                host_rss: 0,
                processes: 1,
                gpus: vec![GpuSample { gpu: 0, device_used: i << 30, job_used: Some(i << 30) }],
            })
            .collect();
        let (p, _) = peaks(&samples, &[]);
        let svg = chart("train <b>", &samples, &p, Some((6 << 30, "estimate 6.00 GiB")));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("GPU 0 peak 4.00 GiB"));
        assert!(svg.contains("train &lt;b&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }
}
