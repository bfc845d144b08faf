//! `vram serve`: the ranked alternatives, as text or JSON. Pure.

use std::fmt::Write;

use serde_json::Value;
use vram_core::serve_advice::ServeAdvice;

use super::common::thousands;

/// The alternatives as a table under the estimate, when the launch needs them (it does not fit,
/// or buys less than one request); `engine` names whose accounting re-ran them. A launch that
/// fits already shows the concurrency its length buys; the changes that would raise it are in
/// `--json` only.
pub fn text(a: &ServeAdvice, engine: &str) -> String {
    let mut out = String::new();
    if !a.needed {
        return out;
    }
    if a.alternatives.is_empty() {
        let _ = writeln!(out, "\nno single change vram tries (fp8 KV cache, memory fraction, more tensor parallelism up to 8, FP8/AWQ weights, shorter context, CPU offload) makes this launch fit.");
        return out;
    }
    let _ = writeln!(
        out,
        "\nalternatives (each one change, re-run through {engine}'s accounting; ranked: fits first, least disruptive, most concurrency):"
    );
    let _ = writeln!(
        out,
        "  {:>2}  {:<50} {:>4}  {:>11}  {:>24}  {:>11}  {:>4}",
        "#", "flag", "fits", "KV tokens", "concurrency @ length", "longest", "GPUs"
    );
    for (i, alt) in a.alternatives.iter().enumerate() {
        let flags = alt.flags.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(" ");
        let _ = writeln!(
            out,
            "  {:>2}  {:<50} {:>4}  {:>11}  {:>24}  {:>11}  {:>4}",
            i + 1,
            flags,
            if alt.fits { "yes" } else { "no" },
            thousands(alt.kv_tokens),
            format!("{:.2}x @ {}", alt.max_concurrency, thousands(alt.max_model_len)),
            thousands(alt.longest_max_model_len),
            alt.gpus
        );
        let _ = writeln!(out, "      {}{}", if alt.suggestion { "SUGGESTION: " } else { "" }, alt.description);
        for c in &alt.caveats {
            let _ = writeln!(out, "      note: {c}");
        }
    }
    let formats = if engine == "llama.cpp" { "llama-server|docker|k8s" } else { "vllm|sglang|docker|k8s" };
    let _ = writeln!(out, "  (--emit {formats} --emit-alternative N writes the launch with alternative N)");
    out
}

/// The alternatives as JSON: `{needed, max_concurrency, alternatives: [{change, flags, fits, …}]}`.
pub fn json(a: &ServeAdvice) -> Value {
    vram_core::report::serve_advice_json(a)
}
