//! Read the memory lines of a pasted engine start-up log: vLLM (V0 and V1), SGLang, llama.cpp.
//!
//! Only the figures the engine printed are kept, in the unit it printed them; nothing is derived
//! here. Lines a parser does not know are ignored. With tensor parallelism each worker prints its
//! own lines behind a prefix (`(VllmWorker rank=1 pid=…)`, `(Worker_TP1 pid=…)`,
//! `(VllmWorkerProcess pid=…)`, SGLang's `[… TP1]`): rank 0's figure is kept, and the ranks are
//! counted.
//!
//! Units: vLLM prints "GiB" for most figures, but its older "Loading model weights took 14.9888 GB"
//! and "Model loading took 0.4678 GB" divide by 2^30 too (`model_memory_usage / float(2**30)` in
//! vLLM's model runner; validation/vllm/logs.jsonl records 14.9888 GB as `weights_gib`). SGLang's
//! "GB" is also bytes / 2^30 (see `sglang.rs`, which reproduces those lines). llama.cpp prints MiB.
//! So every size here is held in GiB (2^30 bytes), with the text as printed kept beside it.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::serve::ModelRunner;

/// A size as the engine printed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogSize {
    /// The size in GiB (2^30 bytes). Negative where vLLM printed a negative KV budget.
    pub gib: f64,
    /// The figure and unit as printed, e.g. "14.9888 GB".
    pub printed: String,
}

/// The vLLM figures of one start-up.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VllmLog {
    /// Ranks that printed per-rank lines (1 when no worker prefix appears).
    pub ranks: u64,
    /// The log is from the V1 engine ("Available KV cache memory", "GPU KV cache size", EngineCore).
    pub v1: bool,
    /// The log has lines only the V0 engine's worker prints ("Memory profiling results",
    /// "the rest of the memory reserved for KV Cache", "# cuda blocks").
    pub v0: bool,
    /// "Model loading took X GiB", "Loading model weights took X GB" or "model weights take X GiB".
    pub weights: Option<LogSize>,
    /// "total_gpu_memory (X GiB)".
    pub total_gpu_memory: Option<LogSize>,
    /// "gpu_memory_utilization (0.90)".
    pub gpu_memory_utilization: Option<f64>,
    /// "… = X GiB": what this instance may use.
    pub requested: Option<LogSize>,
    /// "non_torch_memory takes X GiB".
    pub non_torch: Option<LogSize>,
    /// "PyTorch activation peak memory takes X GiB".
    pub activation_peak: Option<LogSize>,
    /// "Available KV cache memory: X GiB" or "the rest of the memory reserved for KV Cache is X GiB".
    pub kv_cache: Option<LogSize>,
    /// "GPU KV cache size: N tokens".
    pub kv_tokens: Option<u64>,
    /// "# GPU blocks: N" / "# cuda blocks: N" (vLLM 0.6: "GPU blocks: N").
    pub gpu_blocks: Option<u64>,
    /// The N of "Maximum concurrency for N tokens per request": the max model len.
    pub max_model_len: Option<u64>,
    /// "Maximum concurrency for … tokens per request: X x".
    pub max_concurrency: Option<f64>,
    /// "Graph capturing finished in … secs, took X GiB", or "… and X GiB for CUDAGraph memory"
    /// (vLLM ≥ 0.2x's one-line summary): what the capture took.
    pub cuda_graph: Option<LogSize>,
    /// "CUDA graph pool memory: A GiB (actual), E GiB (estimated)": the estimate vLLM's V1 runner
    /// subtracted from the KV budget.
    pub cuda_graph_estimated: Option<LogSize>,
    /// "Actual usage is X GiB for consumed memory (weights + non-torch)" (vLLM ≥ 0.2x).
    pub consumed: Option<LogSize>,
    /// "Setting attention block size to N tokens to ensure that attention page size is >= mamba
    /// page size": a hybrid model's attention block, grown to hold a recurrent state.
    pub attention_block_size: Option<u64>,
    /// "Padding mamba page size by P% to ensure …": the state page's padding to that block.
    pub mamba_padding_pct: Option<f64>,
    /// The release that printed the log ("vLLM API server version 0.10.1.1", "Initializing a V1
    /// LLM engine (v0.10.1.1)"), as printed.
    pub version: Option<String>,
    /// Whether the sampler is FlashInfer's ("Using FlashInfer for top-p & top-k sampling.") or
    /// PyTorch's ("Falling back to the PyTorch-native implementation of top-p & top-k
    /// sampling", vLLM ≤ 0.16's v1/sample/ops/topk_topp_sampler.py).
    pub flashinfer_sampler: Option<bool>,
    /// "Loading drafter model..." (gpu_model_runner.py `load_model`): the run decodes
    /// speculatively with a drafter on the GPU, which "Model loading took" includes.
    pub drafter: bool,
    /// Which GPU model runner printed the lines: V2 where a line comes from
    /// `[model_runner.py:…]` (Model Runner V2), V1 from `[gpu_model_runner.py:…]`.
    pub model_runner: Option<ModelRunner>,
}

impl VllmLog {
    /// The CUDA-graph figure to hold vram's estimate to: the V1 runner's logged estimate (what
    /// it subtracted from the KV budget) when printed, else what the capture took.
    pub fn cuda_graph_figure(&self) -> &Option<LogSize> {
        if self.cuda_graph_estimated.is_some() {
            &self.cuda_graph_estimated
        } else {
            &self.cuda_graph
        }
    }
}

/// The SGLang figures of one start-up.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SglangLog {
    /// Ranks that printed lines (`[… TPn]` tags; 1 when none appears).
    pub ranks: u64,
    /// `tp_size=N` from the printed server arguments.
    pub tp_size: Option<u64>,
    /// `mem_fraction_static=X` from the printed server arguments.
    pub mem_fraction_static: Option<f64>,
    /// "Load weight end. … mem usage=X GB".
    pub weights: Option<LogSize>,
    /// "Load weight end. … avail mem=X GB".
    pub avail_after_weights: Option<LogSize>,
    /// The speculative draft's "Load weight end. type=…Eagle…/…MTP…/…NextN… mem usage=X GB" (a
    /// second load, after the target's).
    pub draft_weights: Option<LogSize>,
    /// "KV Cache is allocated. … #tokens: N".
    pub kv_tokens: Option<u64>,
    /// "K size: X GB" (or the single "KV size: X GB" of MLA models).
    pub k_size: Option<LogSize>,
    /// "V size: X GB".
    pub v_size: Option<LogSize>,
    /// "max_total_num_tokens=N".
    pub max_total_num_tokens: Option<u64>,
    /// "max_running_requests=N".
    pub max_running_requests: Option<u64>,
    /// "context_len=N".
    pub context_len: Option<u64>,
    /// A hybrid model's "Mamba Cache is allocated. max_mamba_cache_size: N".
    pub mamba_cache_size: Option<u64>,
    /// "… conv_state size: X GB".
    pub conv_state: Option<LogSize>,
    /// "… ssm_state size: X GB".
    pub ssm_state: Option<LogSize>,
}

/// One llama.cpp buffer device ("CUDA0", "CPU", "CUDA_Host", …) and its buffers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LlamaCppDevice {
    /// The device as printed.
    pub name: String,
    /// "load_tensors: CUDA0 model buffer size" / "llm_load_tensors: CUDA0 buffer size".
    pub model: Option<LogSize>,
    /// "llama_kv_cache…: CUDA0 KV buffer size".
    pub kv: Option<LogSize>,
    /// "llama_memory_recurrent: CUDA0 RS buffer size": a state-space or hybrid model's state.
    pub state: Option<LogSize>,
    /// "sched_reserve: / llama_context: / llama_new_context_with_model: CUDA0 compute buffer size".
    pub compute: Option<LogSize>,
    /// "llama_adapter_lora_init_impl: CUDA0 LoRA buffer size" (`--lora`; every adapter's lines
    /// on the device added up).
    pub lora: Option<LogSize>,
}

/// The llama.cpp figures of one start-up.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LlamaCppLog {
    /// "n_ctx = N".
    pub n_ctx: Option<u64>,
    /// The vision encoder's compute buffer on its first non-CPU device (`--mmproj`:
    /// "alloc_compute_meta: CUDA0 compute buffer size = X MiB", tools/mtmd/clip.cpp).
    pub vision_compute: Option<LogSize>,
    /// llama.cpp's `--fit` at the initial settings (common/fit.cpp): "projected to use X MiB of
    /// device memory vs. Y MiB of free device memory" — (X, Y) in MiB, the first such line.
    pub fit_projection: Option<(u64, u64)>,
    /// Where `--fit` placed the layers (common/fit.cpp's "- CUDA0 (…): N layers (K overflowing),
    /// X MiB used, Y MiB free" lines; the last line per device, as the MoE pass prints twice).
    pub fit_layers: Vec<FitLayers>,
    /// Devices in the order they first appear.
    pub devices: Vec<LlamaCppDevice>,
}

/// One device's layers as llama.cpp's `--fit` placed them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FitLayers {
    /// The device ("CUDA0").
    pub name: String,
    /// Layers on it (the output layer counts as one on the last device).
    pub layers: u64,
    /// Of these, layers with part of their weights elsewhere (MoE: "(K overflowing)").
    pub overflowing: Option<u64>,
    /// "X MiB used": the fit's projection for the device.
    pub used_mib: Option<u64>,
}

/// A fit placement line's device and figures: "- CUDA0 (NVIDIA …): 33 layers (2 overflowing),
/// 21000 MiB used, 2900 MiB free".
fn fit_layers_line(line: &str) -> Option<FitLayers> {
    let body = line.split_once("- ")?.1;
    let (name, rest) = body.split_once(" (")?;
    let rest = rest.rsplit_once("):")?.1.trim();
    let (count, rest) = rest.split_once(" layers")?;
    let layers = count.trim().parse::<u64>().ok()?;
    let overflowing = rest.trim_start().strip_prefix('(').and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok());
    let used_mib = rest.find(" MiB used").and_then(|i| rest[..i].rsplit([',', ' ']).next()).and_then(|n| n.trim().parse().ok());
    (!name.contains(' ')).then(|| FitLayers { name: name.trim().to_string(), layers, overflowing, used_mib })
}

/// A parsed start-up log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "engine", rename_all = "kebab-case")]
pub enum StartupLog {
    /// vLLM.
    Vllm(VllmLog),
    /// SGLang.
    Sglang(SglangLog),
    /// llama.cpp.
    LlamaCpp(LlamaCppLog),
}

/// What the error names when nothing is recognised.
const EXPECTED: &str = "vLLM: \"Model loading took X GiB\", \"model weights take X GiB; non_torch_memory takes …\", \
\"Available KV cache memory: X GiB\", \"GPU KV cache size: N tokens\", \"Maximum concurrency for N tokens per request: Xx\"; \
SGLang: \"Load weight end. … mem usage=X GB\", \"Mamba Cache is allocated. …\", \"KV Cache is allocated. … #tokens: N\", \"max_total_num_tokens=N\"; \
llama.cpp: \"load_tensors: CUDA0 model buffer size = X MiB\", \"llama_kv_cache…: CUDA0 KV buffer size = X MiB\", \
\"llama_context: CUDA0 compute buffer size = X MiB\"";

/// Parse a pasted start-up log. The engine is the one whose lines are found (the most, if several).
pub fn parse(text: &str) -> Result<StartupLog> {
    let vllm = parse_vllm(text);
    let sglang = parse_sglang(text);
    let llama = parse_llama_cpp(text);
    let counts = [vllm.1, sglang.1, llama.1];
    let best = counts.iter().copied().max().unwrap_or(0);
    if best == 0 {
        // Current llama-server prints llama.cpp's buffer lines only at verbosity 4: its default,
        // 3, leaves a log of server lines (validation/llamacpp/run.sh records at -lv 4).
        if text.contains("llama_server: ") || text.contains("adjust with the `-lv N` CLI arg") {
            return Err(Error::NotAStartupLog {
                expected: format!(
                    "this is a llama-server log without llama.cpp's buffer lines: current llama-server prints them only at verbosity 4, so start it again with `-lv 4` (or `-v`) and pass that log. {EXPECTED}"
                ),
            });
        }
        return Err(Error::NotAStartupLog { expected: EXPECTED.into() });
    }
    Ok(if counts[2] == best {
        StartupLog::LlamaCpp(llama.0)
    } else if counts[1] == best {
        StartupLog::Sglang(sglang.0)
    } else {
        StartupLog::Vllm(vllm.0)
    })
}

/// Which rank printed a line, and the line without the rank prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rank {
    /// The driver / engine core / rank 0.
    Zero,
    /// Another rank, by its tag.
    Other(String),
}

/// Split vLLM's `(Tag pid=…)` prefix off a line. It may follow a container prefix
/// (`qwen3-1  | (VllmWorker rank=0 pid=105) …`), so the first parenthesis holding `pid=` counts.
fn vllm_rank(line: &str) -> (Rank, &str) {
    let t = line.trim_start();
    let Some(open) = t.find("pid=").and_then(|p| t[..p].rfind('(')) else { return (Rank::Zero, t) };
    let rest = &t[open + 1..];
    let Some(end) = rest.find(')') else { return (Rank::Zero, t) };
    let (tag, body) = (&rest[..end], &rest[end + 1..]);
    let number_after = |key: &str| tag.find(key).map(|i| tag[i + key.len()..].chars().take_while(char::is_ascii_digit).collect::<String>());
    let rank = match number_after("rank=").or_else(|| number_after("_TP")) {
        Some(n) if n == "0" => Rank::Zero,
        Some(n) if !n.is_empty() => Rank::Other(n),
        // V0's worker processes are ranks ≥ 1; the driver (rank 0) prints without a prefix.
        _ if tag.starts_with("VllmWorkerProcess") => Rank::Other(tag.to_string()),
        _ => Rank::Zero,
    };
    (rank, body)
}

/// SGLang's `[<date> <time> TP1]` tag (the rank after the time stamp).
fn sglang_rank(line: &str) -> Rank {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        if let Some(end) = rest.find(']') {
            for w in rest[..end].split_whitespace() {
                if let Some(n) = w.strip_prefix("TP") {
                    if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) {
                        return if n.parse::<u64>() == Ok(0) { Rank::Zero } else { Rank::Other(n.to_string()) };
                    }
                }
            }
        }
    }
    Rank::Zero
}

/// The number at the start of `s` (after spaces; thousands commas allowed), and the rest.
fn number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim_start();
    let end =
        s.char_indices().find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || c == ',' || (c == '-' && i == 0))).map_or(s.len(), |(i, _)| i);
    let text = s[..end].trim_end_matches([',', '.']);
    let v: f64 = text.chars().filter(|&c| c != ',').collect::<String>().parse().ok()?;
    v.is_finite().then_some((v, &s[text.len()..]))
}

/// A whole count (no fraction, not negative).
fn count(s: &str) -> Option<u64> {
    let (v, _) = number(s)?;
    (v >= 0.0 && v.fract() == 0.0 && v < 9.0e15).then_some(v as u64)
}

/// A size: number then unit. GiB, GB (bytes / 2^30 in these engines, see the module docs) and MiB.
fn size(s: &str) -> Option<LogSize> {
    let (v, rest) = number(s)?;
    let r = rest.trim_start();
    let unit = ["GiB", "GB", "MiB"].into_iter().find(|u| r.starts_with(u))?;
    let gib = if unit == "MiB" { v / 1024.0 } else { v };
    let text = s.trim_start();
    let num_text = &text[..text.len() - rest.len()];
    Some(LogSize { gib, printed: format!("{num_text} {unit}") })
}

/// The text after the first `key` in `line`.
fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.find(key).map(|i| &line[i + key.len()..])
}

/// Per-field first-wins store that prefers rank 0: a value from another rank is kept only until a
/// rank-0 value arrives.
fn put<T>(slot: &mut Option<T>, from_zero: &mut bool, rank: &Rank, v: Option<T>) -> bool {
    let Some(v) = v else { return false };
    let zero = *rank == Rank::Zero;
    if slot.is_none() || (zero && !*from_zero) {
        *slot = Some(v);
        *from_zero = zero;
    }
    true
}

fn parse_vllm(text: &str) -> (VllmLog, usize) {
    let mut l = VllmLog::default();
    let mut z = [false; 16];
    let mut found = 0;
    let mut others: Vec<String> = Vec::new();
    let mut zero_seen = false;
    for line in text.lines() {
        let (rank, body) = vllm_rank(line);
        let mut hit = 0;
        let mut per_rank = false;
        if let Some(r) = after(body, "Model loading took").or_else(|| after(body, "Loading model weights took")) {
            hit += put(&mut l.weights, &mut z[0], &rank, size(r)) as usize;
            per_rank = true;
        }
        if let Some(r) = after(body, "model weights take") {
            hit += put(&mut l.weights, &mut z[0], &rank, size(r)) as usize;
            per_rank = true;
        }
        if let Some(r) = after(body, "total_gpu_memory (") {
            hit += put(&mut l.total_gpu_memory, &mut z[1], &rank, size(r)) as usize;
            let gmu = after(r, "gpu_memory_utilization (").and_then(number).map(|(v, _)| v);
            hit += put(&mut l.gpu_memory_utilization, &mut z[2], &rank, gmu) as usize;
            hit += put(&mut l.requested, &mut z[3], &rank, after(r, ") = ").and_then(size)) as usize;
            per_rank = true;
        }
        // vLLM 0.6's one-line form (vllm-project/vllm#10517): key=value pairs. Its peak_torch_memory
        // includes the weights, so no activation figure is read from it.
        if let Some(r) = after(body, "Memory profiling results:") {
            hit += put(&mut l.total_gpu_memory, &mut z[1], &rank, after(r, "total_gpu_memory=").and_then(size)) as usize;
            let gmu = after(r, "gpu_memory_utilization=").and_then(number).map(|(v, _)| v);
            hit += put(&mut l.gpu_memory_utilization, &mut z[2], &rank, gmu) as usize;
            hit += put(&mut l.non_torch, &mut z[4], &rank, after(r, "non_torch_memory=").and_then(size)) as usize;
            hit += put(&mut l.kv_cache, &mut z[6], &rank, after(r, "kv_cache_size=").and_then(size)) as usize;
            per_rank = true;
        }
        if let Some(r) = after(body, "non_torch_memory takes") {
            hit += put(&mut l.non_torch, &mut z[4], &rank, size(r)) as usize;
        }
        if let Some(r) = after(body, "PyTorch activation peak memory takes") {
            hit += put(&mut l.activation_peak, &mut z[5], &rank, size(r)) as usize;
        }
        if let Some(r) = after(body, "the rest of the memory reserved for KV Cache is") {
            hit += put(&mut l.kv_cache, &mut z[6], &rank, size(r)) as usize;
        }
        if let Some(r) = after(body, "Available KV cache memory:") {
            hit += put(&mut l.kv_cache, &mut z[6], &rank, size(r)) as usize;
            l.v1 = true;
            per_rank = true;
        }
        if let Some(r) = after(body, "GPU KV cache size:") {
            hit += put(&mut l.kv_tokens, &mut z[7], &rank, count(r)) as usize;
            l.v1 = true;
        }
        if let Some(r) = ["GPU blocks:", "cuda blocks:", "CUDA blocks:"].iter().find_map(|k| after(body, k)) {
            hit += put(&mut l.gpu_blocks, &mut z[8], &rank, count(r)) as usize;
        }
        if let Some(r) = after(body, "Maximum concurrency for") {
            let len = count(r);
            let x = after(r, "tokens per request:").and_then(number).map(|(v, _)| v);
            if x.is_some() {
                hit += put(&mut l.max_model_len, &mut z[9], &rank, len) as usize;
                hit += put(&mut l.max_concurrency, &mut z[10], &rank, x) as usize;
            }
        }
        if let Some(r) = after(body, "Graph capturing finished in").and_then(|r| after(r, "took")) {
            hit += put(&mut l.cuda_graph, &mut z[11], &rank, size(r)) as usize;
        }
        // vLLM ≥ 0.2x (gpu_worker.py): "Free memory on device (F/T GiB) on startup. Desired GPU
        // memory utilization is (u, R GiB). Actual usage is C GiB for consumed memory (weights +
        // non-torch), P GiB for peak activation, and G GiB for CUDAGraph memory. … Current kv
        // cache memory in use is K GiB."
        if let Some(r) = after(body, "Free memory on device (") {
            hit += put(&mut l.total_gpu_memory, &mut z[1], &rank, r.split_once('/').and_then(|(_, t)| size(t))) as usize;
            per_rank = true;
        }
        if let Some(r) = after(body, "Desired GPU memory utilization is (") {
            let gmu = number(r).map(|(v, _)| v);
            hit += put(&mut l.gpu_memory_utilization, &mut z[2], &rank, gmu) as usize;
            hit += put(&mut l.requested, &mut z[3], &rank, r.split_once(',').and_then(|(_, q)| size(q))) as usize;
        }
        if let Some(r) = after(body, "Actual usage is") {
            if let Some(peak) = after(r, "consumed memory (weights + non-torch),") {
                hit += put(&mut l.consumed, &mut z[12], &rank, size(r)) as usize;
                hit += put(&mut l.activation_peak, &mut z[5], &rank, size(peak)) as usize;
                let graphs = after(r, "peak activation, and").and_then(size);
                hit += put(&mut l.cuda_graph, &mut z[11], &rank, graphs) as usize;
            } else if let Some(peak) = after(r, "for weight,") {
                // vLLM 0.10–0.1x: "Actual usage is W GiB for weight, P GiB for peak activation,
                // N GiB for non-torch memory, and G GiB for CUDAGraph memory."
                hit += put(&mut l.weights, &mut z[0], &rank, size(r)) as usize;
                hit += put(&mut l.activation_peak, &mut z[5], &rank, size(peak)) as usize;
                let non_torch = after(peak, "peak activation,").and_then(size);
                hit += put(&mut l.non_torch, &mut z[4], &rank, non_torch) as usize;
                let graphs = after(peak, "non-torch memory, and").and_then(size);
                hit += put(&mut l.cuda_graph, &mut z[11], &rank, graphs) as usize;
            }
        }
        if let Some(r) = after(body, "Current kv cache memory in use is") {
            // A size, or (0.10–0.1x) a count of bytes.
            let kv = size(r).or_else(|| {
                let (v, rest) = number(r)?;
                rest.trim_start().starts_with("bytes").then(|| LogSize { gib: v / (1u64 << 30) as f64, printed: format!("{v} bytes") })
            });
            hit += put(&mut l.kv_cache, &mut z[6], &rank, kv) as usize;
        }
        if let Some(r) = after(body, "CUDA graph pool memory:").and_then(|r| after(r, "(actual),")) {
            hit += put(&mut l.cuda_graph_estimated, &mut z[13], &rank, size(r)) as usize;
        }
        let printed = after(body, "vLLM API server version ").or_else(|| after(body, "Initializing a V1 LLM engine (v"));
        if let Some(v) = printed.and_then(|r| r.split(|c: char| c.is_whitespace() || c == ')').next()).filter(|v| !v.is_empty()) {
            l.version.get_or_insert_with(|| v.to_string());
            hit += 1;
        }
        if body.contains("Using FlashInfer for top-p & top-k sampling") {
            l.flashinfer_sampler = Some(true);
            hit += 1;
        } else if body.contains("PyTorch-native implementation of top-p & top-k sampling") {
            l.flashinfer_sampler = Some(false);
            hit += 1;
        }
        if body.contains("Loading drafter model") {
            l.drafter = true;
            hit += 1;
        }
        if let Some(r) = after(body, "Setting attention block size to") {
            hit += put(&mut l.attention_block_size, &mut z[14], &rank, count(r)) as usize;
        }
        if let Some(r) = after(body, "Padding mamba page size by") {
            hit += put(&mut l.mamba_padding_pct, &mut z[15], &rank, number(r).map(|(v, _)| v)) as usize;
        }
        if hit > 0 && l.model_runner.is_none() {
            if line.contains("[gpu_model_runner.py:") {
                l.model_runner = Some(ModelRunner::V1);
            } else if line.contains("[model_runner.py:") {
                l.model_runner = Some(ModelRunner::V2);
            }
        }
        if hit > 0 && per_rank {
            match &rank {
                Rank::Zero => zero_seen = true,
                Rank::Other(t) if !others.contains(t) => others.push(t.clone()),
                Rank::Other(_) => {}
            }
        }
        if ["Memory profiling results:", "the rest of the memory reserved for KV Cache", "cuda blocks:"].iter().any(|k| body.contains(k)) {
            l.v0 = true;
        }
        if line.contains("EngineCore") {
            l.v1 = true;
        }
        found += hit;
    }
    l.ranks = (others.len() as u64 + u64::from(zero_seen)).max(1);
    (l, found)
}

fn parse_sglang(text: &str) -> (SglangLog, usize) {
    let mut l = SglangLog::default();
    let mut z = [false; 14];
    let mut found = 0;
    let mut ranks: Vec<Rank> = Vec::new();
    for line in text.lines() {
        let rank = sglang_rank(line);
        let mut hit = 0;
        if let Some(r) = after(line, "Load weight end.") {
            // The draft worker's load names its class: LlamaForCausalLMEagle3, MiMoMTP,
            // DeepseekV3ForCausalLMNextN …
            let class = after(r, "type=").map(|t| t.split([',', ' ']).next().unwrap_or("").to_ascii_lowercase()).unwrap_or_default();
            if ["eagle", "mtp", "nextn"].iter().any(|d| class.contains(d)) {
                hit += put(&mut l.draft_weights, &mut z[13], &rank, after(r, "mem usage=").and_then(size)) as usize;
            } else {
                hit += put(&mut l.weights, &mut z[0], &rank, after(r, "mem usage=").and_then(size)) as usize;
                hit += put(&mut l.avail_after_weights, &mut z[1], &rank, after(r, "avail mem=").and_then(size)) as usize;
            }
        }
        if let Some(r) = after(line, "KV Cache is allocated.") {
            hit += put(&mut l.kv_tokens, &mut z[2], &rank, after(r, "#tokens:").and_then(count)) as usize;
            let k = after(r, "K size:").or_else(|| after(r, "KV size:")).and_then(size);
            hit += put(&mut l.k_size, &mut z[3], &rank, k) as usize;
            hit += put(&mut l.v_size, &mut z[4], &rank, after(r, "V size:").and_then(size)) as usize;
        }
        if let Some(r) = after(line, "Mamba Cache is allocated.") {
            hit += put(&mut l.mamba_cache_size, &mut z[10], &rank, after(r, "max_mamba_cache_size:").and_then(count)) as usize;
            hit += put(&mut l.conv_state, &mut z[11], &rank, after(r, "conv_state size:").and_then(size)) as usize;
            hit += put(&mut l.ssm_state, &mut z[12], &rank, after(r, "ssm_state size:").and_then(size)) as usize;
        }
        if let Some(r) = after(line, "max_total_num_tokens=") {
            hit += put(&mut l.max_total_num_tokens, &mut z[5], &rank, count(r)) as usize;
            let mrr = after(r, "max_running_requests=").and_then(count);
            hit += put(&mut l.max_running_requests, &mut z[6], &rank, mrr) as usize;
            hit += put(&mut l.context_len, &mut z[7], &rank, after(r, "context_len=").and_then(count)) as usize;
        }
        // The server arguments are printed once; they do not count as memory lines.
        if line.contains("ServerArgs(") || line.contains("server_args=") {
            put(&mut l.tp_size, &mut z[8], &rank, after(line, "tp_size=").and_then(count));
            put(&mut l.mem_fraction_static, &mut z[9], &rank, after(line, "mem_fraction_static=").and_then(number).map(|(v, _)| v));
        }
        if hit > 0 && !ranks.contains(&rank) {
            ranks.push(rank);
        }
        found += hit;
    }
    l.ranks = (ranks.len() as u64).max(1);
    (l, found)
}

fn parse_llama_cpp(text: &str) -> (LlamaCppLog, usize) {
    let mut l = LlamaCppLog::default();
    let mut found = 0;
    for line in text.lines() {
        // clip.cpp's own buffer (the vision encoder of `--mmproj`), kept apart from the text
        // model's.
        if let Some(i) = line.find("alloc_compute_meta:") {
            let body = &line[i + "alloc_compute_meta:".len()..];
            if let Some(j) = body.find(" compute buffer size =") {
                let device = body[..j].trim();
                if !device.starts_with("CPU") && l.vision_compute.is_none() {
                    l.vision_compute = size(&body[j + " compute buffer size =".len()..]);
                    found += l.vision_compute.is_some() as usize;
                }
            }
            continue;
        }
        // --fit's placement per device.
        if (line.contains("params_fit_impl:") || line.contains("params_fit:")) && line.contains(" layers") && line.contains("MiB used") {
            if let Some(f) = fit_layers_line(line) {
                l.fit_layers.retain(|x| x.name != f.name);
                l.fit_layers.push(f);
                found += 1;
            }
            continue;
        }
        // --fit's first projection (the initial settings), one GPU or several summed.
        if let Some(i) = line.find("projected to use ") {
            let rest = &line[i + "projected to use ".len()..];
            let num = |s: &str| s.split_whitespace().next().and_then(|w| w.parse::<u64>().ok());
            if let (Some(used), Some(j)) = (num(rest), rest.find(" MiB of device memory vs. ")) {
                let free = num(&rest[j + " MiB of device memory vs. ".len()..]);
                if let (Some(free), None) = (free.filter(|_| rest.contains("MiB of free device memory")), l.fit_projection) {
                    l.fit_projection = Some((used, free));
                    found += 1;
                }
            }
            continue;
        }
        // The function name may follow a timestamp and level ("0.00.329.203 I load_tensors: …")
        // or colour codes: the first `name:` whose name ends in a known function counts.
        let Some((func, body)) = line.match_indices(':').find_map(|(i, _)| {
            let name = line[..i].rsplit(char::is_whitespace).next().unwrap_or("");
            let known = ["load_tensors", "llama_context", "llama_new_context_with_model", "llama_init_from_model", "sched_reserve"]
                .iter()
                .any(|k| name.ends_with(k))
                || name.contains("llama_kv_cache")
                || name.ends_with("llama_memory_recurrent")
                // `--lora`: llama-adapter.cpp's loader, named so since 2025 (before: the
                // "llama_lora_adapter_init_internal" of 2024 builds).
                || name.ends_with("llama_adapter_lora_init_impl")
                || name.ends_with("llama_lora_adapter_init_internal");
            known.then(|| (name, &line[i + 1..]))
        }) else {
            continue;
        };
        if let Some(r) = body.trim_start().strip_prefix("n_ctx") {
            if let Some(v) = r.trim_start().strip_prefix('=').and_then(count) {
                l.n_ctx.get_or_insert(v);
            }
            continue;
        }
        let Some(i) = body.find(" buffer size =") else { continue };
        let words: Vec<&str> = body[..i].split_whitespace().collect();
        let (kind, device) = match words.as_slice() {
            [.., dev, k] if ["model", "KV", "RS", "compute", "LoRA"].contains(k) => (*k, *dev),
            [dev] if func.ends_with("load_tensors") => ("model", *dev),
            _ => continue,
        };
        let Some(s) = size(&body[i + " buffer size =".len()..]) else { continue };
        let d = match l.devices.iter().position(|d| d.name == device) {
            Some(p) => &mut l.devices[p],
            None => {
                l.devices.push(LlamaCppDevice { name: device.to_string(), ..Default::default() });
                l.devices.last_mut().expect("just pushed")
            }
        };
        let slot = match kind {
            "model" => &mut d.model,
            "KV" => &mut d.kv,
            "RS" => &mut d.state,
            "LoRA" => &mut d.lora,
            _ => &mut d.compute,
        };
        // A device may print several buffers of one kind (e.g. per KV-cache type): add them.
        *slot = Some(match slot.take() {
            Some(old) => LogSize { gib: old.gib + s.gib, printed: format!("{} + {}", old.printed, s.printed) },
            None => s,
        });
        found += 1;
    }
    (l, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vllm(text: &str) -> VllmLog {
        match parse(text).unwrap() {
            StartupLog::Vllm(l) => l,
            other => panic!("not vLLM: {other:?}"),
        }
    }

    /// Current llama-server at its default verbosity (3) prints no buffer line: the error says
    /// to start it with -lv 4, at which validation/llamacpp/h200's logs were recorded and parse.
    #[test]
    fn a_llama_server_log_without_buffer_lines_asks_for_lv_4() {
        let quiet = "0.00.004.148 I cmn  common_param: common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)
0.02.078.465 I srv  llama_server: listening on http://127.0.0.1:18080";
        let e = parse(quiet).unwrap_err().to_string();
        assert!(e.contains("start it again with `-lv 4`"), "{e}");
        let loud =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../validation/llamacpp/h200/logs/llama-c8k.log")).unwrap();
        match parse(&loud).unwrap() {
            StartupLog::LlamaCpp(_) => {}
            other => panic!("not llama.cpp: {other:?}"),
        }
        assert!(!parse("nothing here").unwrap_err().to_string().contains("-lv 4"));
    }

    /// vllm-project/vllm#16570 (validation/vllm/logs.jsonl, qwen2.5-vl-72b-a100-40gb-tp4): V0, TP 4,
    /// two worker processes and the driver; rank 0 (no prefix) is kept.
    #[test]
    fn vllm_v0_profile_lines_keep_rank_zero_and_count_ranks() {
        let l = vllm(
            "(VllmWorkerProcess pid=126555) INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use total_gpu_memory (39.38GiB) x gpu_memory_utilization (0.95) = 37.41GiB
(VllmWorkerProcess pid=126555) INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; non_torch_memory takes 0.34GiB; PyTorch activation peak memory takes 2.51GiB; the rest of the memory reserved for KV Cache is 0.13GiB.
INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; non_torch_memory takes 0.43GiB; PyTorch activation peak memory takes 2.51GiB; the rest of the memory reserved for KV Cache is 0.04GiB.
(VllmWorkerProcess pid=126553) INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; non_torch_memory takes 0.38GiB; PyTorch activation peak memory takes 2.51GiB; the rest of the memory reserved for KV Cache is 0.09GiB.",
        );
        assert_eq!(l.ranks, 3);
        assert_eq!(l.non_torch.unwrap().gib, 0.43);
        assert_eq!(l.kv_cache.as_ref().unwrap().printed, "0.04 GiB");
        assert_eq!(l.weights.unwrap().gib, 34.43);
        assert_eq!(l.activation_peak.unwrap().gib, 2.51);
        // Only a worker printed the budget line: its figures stand in.
        assert_eq!(l.total_gpu_memory.unwrap().gib, 39.38);
        assert_eq!(l.gpu_memory_utilization, Some(0.95));
        assert_eq!(l.requested.unwrap().gib, 37.41);
        assert!(!l.v1);
    }

    /// vllm-project/vllm#13882 (logs.jsonl qwen2.5-7b-4060-tp1): "GB" weights, a negative KV budget.
    #[test]
    fn vllm_v0_gb_weights_and_negative_kv() {
        let l = vllm("INFO 02-26 09:54:02 model_runner.py:1115] Loading model weights took 5.2032 GB
INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.
INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681
INFO 02-26 09:54:05 executor_base.py:116] Maximum concurrency for 4096 tokens per request: 0.00x");
        assert_eq!(l.weights.unwrap(), LogSize { gib: 5.2032, printed: "5.2032 GB".into() });
        assert_eq!(l.kv_cache.unwrap().gib, -1.05);
        assert_eq!(l.gpu_blocks, Some(0));
        assert_eq!((l.max_model_len, l.max_concurrency), (Some(4096), Some(0.0)));
        assert_eq!(l.ranks, 1);
    }

    /// vllm-project/vllm#10517 (logs.jsonl llama-3.1-8b-3090-20k): vLLM 0.6's key=value line.
    #[test]
    fn vllm_06_memory_profiling_results() {
        let l = vllm("Loading model weights took 14.9888 GB
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
GPU blocks: 1952, # CPU blocks: 2048
Maximum concurrency for 20000 tokens per request: 1.56x");
        assert_eq!(l.weights.unwrap().gib, 14.9888);
        assert_eq!(l.total_gpu_memory.unwrap().gib, 23.58);
        assert_eq!(l.gpu_memory_utilization, Some(0.9));
        assert_eq!(l.non_torch.unwrap().gib, 0.35);
        assert_eq!(l.kv_cache.unwrap().gib, 3.81);
        assert_eq!(l.activation_peak, None);
        assert!(l.v0 && !l.v1);
        assert_eq!((l.gpu_blocks, l.max_model_len, l.max_concurrency), (Some(1952), Some(20_000), Some(1.56)));
    }

    /// logs.jsonl llama-3.1-8b-a100-v0.31-mrv2: vLLM 0.31's one-line summary, from Model Runner V2.
    #[test]
    fn vllm_actual_usage_summary_and_runner() {
        let l = vllm(
            "(EngineCore pid=326) INFO 10-06 17:00:11 [model_runner.py:407] Model loading took 15.0 GiB memory and 5.420225 seconds
(EngineCore pid=326) INFO 10-06 17:00:33 [kv_cache_utils.py:2464] GPU KV cache size: 460,496 tokens, Maximum concurrency for 131,072 tokens per request: 3.51x
(EngineCore pid=326) INFO 10-06 17:00:41 [gpu_worker.py:955] Free memory on device (78.84/79.25 GiB) on startup. Desired GPU memory utilization is (0.92, 72.91 GiB). Actual usage is 15.26 GiB for consumed memory (weights + non-torch), 1.44 GiB for peak activation, and 0.23 GiB for CUDAGraph memory.
(EngineCore pid=326) INFO 10-06 17:00:33 [gpu_worker.py:692] Available KV cache memory: 56.21 GiB",
        );
        assert_eq!(l.weights.unwrap().gib, 15.0);
        assert_eq!(l.total_gpu_memory.unwrap().gib, 79.25);
        assert_eq!(l.gpu_memory_utilization, Some(0.92));
        assert_eq!(l.requested.unwrap().gib, 72.91);
        assert_eq!(l.consumed.unwrap().gib, 15.26);
        assert_eq!(l.activation_peak.unwrap().gib, 1.44);
        assert_eq!(l.cuda_graph.unwrap().gib, 0.23);
        assert_eq!(l.kv_cache.unwrap().gib, 56.21);
        assert_eq!((l.kv_tokens, l.max_model_len, l.max_concurrency), (Some(460_496), Some(131_072), Some(3.51)));
        assert_eq!(l.model_runner, Some(ModelRunner::V2));
        assert_eq!(l.ranks, 1);
    }

    /// vLLM 0.10's summary line names weights, peak activation, non-torch memory and graphs
    /// apart, and its KV figure in bytes (validation/vllm/logs.jsonl, the LLaVA-NeXT H100 log).
    #[test]
    fn vllm_010_summary_line() {
        let l = vllm(
            "(EngineCore_DP0 pid=3021) INFO 09-23 18:12:39 [gpu_worker.py:391] Free memory on device (78.66/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight, 1.97 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.67 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58333988249` to fit into requested memory, or `--kv-cache-memory=66273897472` to fully utilize gpu memory. Current kv cache memory in use is 59212694937 bytes.",
        );
        assert_eq!(l.weights.unwrap().gib, 14.08);
        assert_eq!(l.activation_peak.unwrap().gib, 1.97);
        assert_eq!(l.non_torch.unwrap().gib, 0.07);
        assert_eq!(l.cuda_graph.unwrap().gib, 0.67);
        assert!(l.consumed.is_none());
        let v = vllm("(APIServer pid=1671) INFO 09-04 01:02:21 [api_server.py:1805] vLLM API server version 0.10.1.1");
        assert_eq!(v.version.as_deref(), Some("0.10.1.1"));
        let v =
            vllm("(EngineCore_0 pid=1812) INFO 09-04 01:02:54 [core.py:74] Initializing a V1 LLM engine (v0.22.1) with config: model='x'");
        assert_eq!(v.version.as_deref(), Some("0.22.1"));
        let f = vllm("(EngineCore_0 pid=1812) INFO 09-04 01:02:57 [topk_topp_sampler.py:50] Using FlashInfer for top-p & top-k sampling.");
        assert_eq!(f.flashinfer_sampler, Some(true));
        let n = vllm("WARNING 09-04 [topk_topp_sampler.py:60] FlashInfer is not available. Falling back to the PyTorch-native implementation of top-p & top-k sampling. For the best performance, please install FlashInfer.");
        assert_eq!(n.flashinfer_sampler, Some(false));
        assert!((l.kv_cache.unwrap().gib - 59_212_694_937.0 / (1u64 << 30) as f64).abs() < 1e-12);
    }

    /// A V1-runner start-up that logs its CUDA-graph estimate beside the capture (a public
    /// serving log of vLLM ≥ 0.21, "CUDA graph pool memory: … (estimated)").
    #[test]
    fn vllm_cuda_graph_estimate_line() {
        let l = vllm(
            "(EngineCore pid=3403212) INFO 08-17 02:54:36 [gpu_model_runner.py:5515] Model loading took 51.1 GiB memory and 41.914650 seconds
(EngineCore pid=3403212) INFO 08-17 02:57:58 [gpu_worker.py:741] CUDA graph pool memory: 0.71 GiB (actual), 1.55 GiB (estimated), difference: 0.84 GiB (119.3%).
(EngineCore pid=3403212) INFO 08-17 02:57:58 [gpu_worker.py:804] Free memory on device (79.99/80.0 GiB) on startup. Desired GPU memory utilization is (0.92, 73.6 GiB). Actual usage is 51.66 GiB for consumed memory (weights + non-torch), 2.4 GiB for peak activation, and 0.71 GiB for CUDAGraph memory. Current kv cache memory in use is 19.54 GiB.",
        );
        assert_eq!(l.cuda_graph_estimated.unwrap().gib, 1.55);
        assert_eq!(l.cuda_graph.unwrap().gib, 0.71);
        assert_eq!(l.kv_cache.unwrap().gib, 19.54);
        assert_eq!(l.activation_peak.unwrap().gib, 2.4);
        assert_eq!(l.model_runner, Some(ModelRunner::V1));
    }

    /// LMCache/LMCache#1739 (logs.jsonl qwen3-14b-32k) and vllm-project/vllm#29137
    /// (gguf-qwen3-graph-capture): V1 lines with thousands commas and the graph capture.
    #[test]
    fn vllm_v1_lines() {
        let l = vllm(
            "[gpu_worker.py:298] Available KV cache memory: 6.51 GiB
[kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens
[kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens per request: 1.30x",
        );
        assert_eq!(l.kv_cache.unwrap().gib, 6.51);
        assert_eq!((l.kv_tokens, l.max_model_len, l.max_concurrency), (Some(42_656), Some(32_768), Some(1.3)));
        assert!(l.v1);
        let l = vllm(
            "(EngineCore_DP0 pid=1206446) INFO 11-21 10:26:22 [kv_cache_utils.py:1234] GPU KV cache size: 611,136 tokens
(EngineCore_DP0 pid=1206446) INFO 11-21 10:26:22 [kv_cache_utils.py:1239] Maximum concurrency for 40,960 tokens per request: 14.92x
(EngineCore_DP0 pid=1206446) INFO 11-21 10:26:25 [gpu_model_runner.py:4245] Graph capturing finished in 3 secs, took 0.71 GiB",
        );
        assert_eq!(l.kv_tokens, Some(611_136));
        assert_eq!(l.cuda_graph.unwrap().printed, "0.71 GiB");
    }

    /// vllm-project/vllm#17469 (Qwen3 under docker compose, TP 4): the container prefix comes first;
    /// rank 0 is kept though rank 2 printed before it.
    #[test]
    fn vllm_worker_prefix_after_a_container_prefix() {
        let l = vllm("qwen3-1  | (VllmWorker rank=2 pid=107) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] Model loading took 14.2474 GiB and 559.045517 seconds
qwen3-1  | (VllmWorker rank=0 pid=105) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] Model loading took 14.2474 GiB and 558.868858 seconds
qwen3-1  | (VllmWorker rank=1 pid=106) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] Model loading took 14.2474 GiB and 559.043662 seconds
qwen3-1  | (VllmWorker rank=3 pid=108) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] Model loading took 14.2474 GiB and 559.041898 seconds");
        assert_eq!(l.ranks, 4);
        assert_eq!(l.weights.unwrap().printed, "14.2474 GiB");
    }

    /// vllm-project/vllm#38820: V1's "Model loading took X GiB memory and … seconds" from
    /// `(Worker_TP0 …)`, which is rank 0.
    #[test]
    fn vllm_hybrid_block_size_lines() {
        // vllm-project/vllm#37467 (a Qwen3.5 start-up on XPU).
        let l = vllm(
            "INFO 03-30 07:05:40 [config.py:228] Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.\n\
             INFO 03-30 07:05:40 [config.py:259] Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.",
        );
        assert_eq!((l.attention_block_size, l.mamba_padding_pct), (Some(528), Some(0.76)));
    }

    #[test]
    fn vllm_v1_model_loading() {
        let l = vllm(
            "(Worker_TP0 pid=34322) INFO 05-06 20:59:57 [default_loader.py:384] Loading weights took 24.84 seconds
(Worker_TP0 pid=34322) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] Model loading took 12.66 GiB memory and 31.657031 seconds",
        );
        assert_eq!(l.weights.unwrap().gib, 12.66);
        assert_eq!(l.ranks, 1);
        // vllm-project/vllm#28228: a `Worker_TP1` prefix is rank 1.
        let (rank, _) = vllm_rank("(Worker_TP1 pid=26348) INFO 11-06 10:51:36 [backends.py:209] Directly load the compiled graph(s)");
        assert_eq!(rank, Rank::Other("1".into()));
    }

    /// kvcache-ai/ktransformers#1870 (SGLang 0.5.9, Qwen3.5-397B-A17B-FP8, TP 2): a hybrid's
    /// state-pool line beside the token pool's.
    #[test]
    fn sglang_hybrid_lines() {
        let log = "[2026-02-27 17:10:28 TP0] Mamba Cache is allocated. max_mamba_cache_size: 82, conv_state size: 0.13GB, ssm_state size: 7.29GB \n\
[2026-02-27 17:10:28 TP0] KV Cache is allocated. #tokens: 580364, K size: 4.15 GB, V size: 4.15 GB";
        let StartupLog::Sglang(l) = parse(log).unwrap() else { panic!("not read as SGLang") };
        assert_eq!((l.mamba_cache_size, l.kv_tokens), (Some(82), Some(580_364)));
        assert_eq!(l.conv_state.unwrap().gib, 0.13);
        assert_eq!(l.ssm_state.unwrap().printed, "7.29 GB");
    }

    /// vllm-project/vllm#21348 and sgl-project/sglang#18263 (validation/sglang/logs.jsonl).
    #[test]
    fn sglang_lines() {
        let StartupLog::Sglang(l) = parse(
            "Load weight end. elapsed=19.09 s, type=Qwen3MoeForCausalLM, avail mem=230.20 GB, mem usage=56.98 GB.
KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1669816, K size: 76.44 GB, V size: 76.44 GB",
        )
        .unwrap() else {
            panic!("not SGLang")
        };
        assert_eq!(l.weights.unwrap(), LogSize { gib: 56.98, printed: "56.98 GB".into() });
        assert_eq!(l.avail_after_weights.unwrap().gib, 230.2);
        assert_eq!(l.kv_tokens, Some(1_669_816));
        assert_eq!(l.k_size.unwrap().gib, 76.44);
        assert_eq!(l.v_size.unwrap().gib, 76.44);
        assert_eq!(l.ranks, 1);
    }

    /// The old spellings (`llm_load_tensors`, `llama_new_context_with_model`), from
    /// ikawrakow/ik_llama.cpp#237 and #235 (a 15-GPU DeepSeek run).
    #[test]
    fn llama_cpp_old_spellings() {
        let StartupLog::LlamaCpp(l) = parse(
            "llm_load_tensors:     CUDA14 buffer size = 12698.93 MiB
llama_new_context_with_model: n_ctx      = 163840
llama_kv_cache_init: layer 0: n_embd_head_qk_rope = 64, kv_lora_rank = 512
llama_new_context_with_model:      CUDA1 compute buffer size =  5718.01 MiB
llama_new_context_with_model:  CUDA_Host compute buffer size =   174.02 MiB",
        )
        .unwrap() else {
            panic!("not llama.cpp")
        };
        assert_eq!(l.n_ctx, Some(163_840));
        let names: Vec<&str> = l.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["CUDA14", "CUDA1", "CUDA_Host"]);
        assert_eq!(l.devices[0].model.as_ref().unwrap().printed, "12698.93 MiB");
        assert_eq!(l.devices[1].compute.as_ref().unwrap().gib, 5718.01 / 1024.0);
    }

    /// llama.cpp's `--fit` lines (a public build-8477 log of Qwen3.5-27B on one Vulkan GPU): the
    /// first projection is the initial settings'; the later context lines do not replace it.
    #[test]
    fn llama_cpp_fit_projection() {
        let StartupLog::LlamaCpp(l) = parse(
            "llama_params_fit_impl: projected to use 35754 MiB of device memory vs. 30733 MiB of free device memory
llama_params_fit_impl: cannot meet free memory target of 400 MiB, need to reduce device memory by 5420 MiB
llama_params_fit_impl: context size reduced from 262144 to 177152 -> need 5421 MiB less memory in total
llama_params_fit_impl: projected to use 30000 MiB of device memory vs. 30733 MiB of free device memory
llama_context: n_ctx         = 177152",
        )
        .unwrap() else {
            panic!("not llama.cpp")
        };
        assert_eq!(l.fit_projection, Some((35_754, 30_733)));
        assert_eq!(l.n_ctx, Some(177_152));
    }

    /// The fit's per-device placement lines, in common/fit.cpp's LOG_TRC formats (the figures
    /// are illustrative; the placement line's shape is the one ggml-org/llama.cpp#18181 prints,
    /// "- CUDA4 (…): 35 layers (0 overflowing), 94327 MiB used, 2360 MiB free"): the last line
    /// per device is kept, and the initial projection lines ("… total, … used, … free vs.
    /// target") are not placements.
    #[test]
    fn llama_cpp_fit_layers() {
        let StartupLog::LlamaCpp(l) = parse(
            "llama_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 3090): 24135 total, 30011 used, -6075 free vs. target of 1024
llama_params_fit_impl: filling dense-only layers back-to-front:
llama_params_fit_impl:   - CUDA1 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition): 48 layers, 20000 MiB used, 77000 MiB free
llama_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 3090): 47 layers,  15000 MiB used,   9000 MiB free
llama_params_fit_impl: converting dense-only layers to full layers and filling them front-to-back with overflow to next device/system memory:
llama_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 3090): 12 layers ( 1 overflowing),  22783 MiB used,   1352 MiB free
llama_params_fit_impl:   - CUDA1 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition): 83 layers (0 overflowing), 94327 MiB used, 2360 MiB free
load_tensors:        CUDA0 model buffer size = 20000.00 MiB",
        )
        .unwrap() else {
            panic!("not llama.cpp")
        };
        let got: Vec<(&str, u64, Option<u64>, Option<u64>)> =
            l.fit_layers.iter().map(|f| (f.name.as_str(), f.layers, f.overflowing, f.used_mib)).collect();
        assert_eq!(got, [("CUDA0", 12, Some(1), Some(22_783)), ("CUDA1", 83, Some(0), Some(94_327))]);
    }

    /// The new spellings behind a timestamp: `load_tensors`, `llama_context`, `llama_kv_cache`,
    /// `sched_reserve` (a llama.cpp log committed in a public repository; the KV line and the
    /// output-buffer line as in ggml-org/llama.cpp#27680). Two KV buffers on one device add up.
    #[test]
    fn llama_cpp_new_spellings() {
        let StartupLog::LlamaCpp(l) = parse(
            "0.00.329.192 I load_tensors: offloading 12 repeating layers to GPU
0.00.329.203 I load_tensors:        CUDA0 model buffer size =    40.73 MiB
0.00.329.204 I load_tensors:   CPU_Mapped model buffer size =    23.11 MiB
0.00.319.984 I llama_context: n_ctx         = 512
0.00.319.984 I llama_context: n_ctx_per_seq = 512
llama_context:  CUDA_Host  output buffer size =     0.49 MiB
0.01.218.542 I llama_kv_cache:      CUDA0 KV buffer size =     8.00 MiB
0.01.219.844 I llama_kv_cache:      CUDA0 KV buffer size =    30.00 MiB
0.01.231.094 I sched_reserve:      CUDA0 compute buffer size =    82.07 MiB",
        )
        .unwrap() else {
            panic!("not llama.cpp")
        };
        assert_eq!(l.n_ctx, Some(512));
        let cuda = &l.devices[0];
        assert_eq!(cuda.name, "CUDA0");
        assert_eq!(cuda.model.as_ref().unwrap().printed, "40.73 MiB");
        assert_eq!(cuda.kv.as_ref().unwrap().gib, 38.0 / 1024.0);
        assert_eq!(cuda.compute.as_ref().unwrap().printed, "82.07 MiB");
        assert_eq!(l.devices[1].name, "CPU_Mapped");
        assert_eq!(l.devices.len(), 2, "the output buffer is not counted: {:?}", l.devices);
    }

    #[test]
    fn no_known_line_is_an_error_naming_the_lines() {
        let e = parse("hello\nINFO nothing here\n").unwrap_err().to_string();
        assert!(e.contains("Model loading took") && e.contains("Load weight end") && e.contains("compute buffer size"), "{e}");
        assert!(parse("").is_err());
    }

    #[test]
    fn garbage_numbers_are_ignored_not_panics() {
        for t in [
            "Model loading took",
            "Model loading took -.- GiB",
            "GPU KV cache size: ,,, tokens",
            "Maximum concurrency for 1e999",
            "load_tensors: CUDA0 model buffer size = NaN MiB",
        ] {
            assert!(parse(t).is_err(), "{t}");
        }
    }

    /// llama.cpp's hybrid memory prints the recurrent state as its own buffer (ggml-org/llama.cpp
    /// src/llama-memory-recurrent.cpp), read beside the KV cache of the attention layers. The lines
    /// are shaped as llama.cpp prints them; the RS figure is llama.cpp#23792's total (that log
    /// split it over a `Meta()` device), the KV and compute figures are made up for the parse.
    #[test]
    fn llama_cpp_recurrent_state_buffer() {
        let text = "0.15.050.780 I llama_memory_recurrent:      CUDA0 RS buffer size =   448.88 MiB
0.15.050.795 I llama_memory_recurrent: size =  448.88 MiB (     3 cells,  65 layers,  3 seqs  0 rs_seq), R (f32):   16.88 MiB, S (f32):  432.00 MiB
0.15.060.001 I llama_kv_cache:      CUDA0 KV buffer size =  4096.00 MiB
0.15.070.001 I sched_reserve:      CUDA0 compute buffer size =   501.00 MiB";
        let StartupLog::LlamaCpp(l) = parse(text).unwrap() else { panic!("not llama.cpp") };
        let d = &l.devices[0];
        assert_eq!(d.state.as_ref().map(|s| s.printed.as_str()), Some("448.88 MiB"));
        assert!(d.kv.is_some() && d.compute.is_some());
    }
}
