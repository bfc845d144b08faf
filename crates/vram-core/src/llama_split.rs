//! llama.cpp over several GPUs: `--tensor-split`/`-ts`, `--split-mode`/`-sm none|layer|row`,
//! `--main-gpu`/`-mg`. Each tensor, KV layer and compute buffer is placed on the device
//! llama.cpp gives it, and the memory is reported per device ("CUDA0 model buffer size", …).
//!
//! Sources (ggml-org/llama.cpp):
//! - src/llama-model.cpp `load_tensors`: split points are the running sum of `tensor_split`
//!   normalised to 1 (all zero: each device's free memory); layer `il` of the offloaded range goes
//!   to the first device whose split point is above `(il − i_gpu_start) / act_gpu_layers`
//!   (`std::upper_bound`), and the output layer is `il = n_layer` of the same rule, so it lands
//!   on the last device that holds layers. The input layer (token embeddings) stays on the CPU.
//! - src/llama.cpp `llama_model_load_from_file_impl`: `-sm none` keeps only `--main-gpu`.
//! - src/llama-model.cpp `make_gpu_buft_list`: with `-sm row` a layer's buffer list starts with
//!   ggml-cuda's split buffer type, which takes the matrix weights (`MUL_MAT`; not the
//!   `MUL_MAT_ID` expert weights) and splits their rows over every GPU by `tensor_split`
//!   (ggml-cuda.cu `get_row_split`; the default split is by total memory).
//! - src/llama-kv-cache.cpp: a layer's KV cache sits on `model.dev_layer(il)`.
//! - src/llama-context.cpp: pipeline parallelism (n_copies = `GGML_SCHED_MAX_COPIES` = 4,
//!   ggml-backend.cpp) when the model spans several devices, every layer and the output are
//!   offloaded, the split mode is `layer` and no tensor override is given; every graph input
//!   (the KQ mask, the layer input) is then held 4 times per device (unslothai/unsloth#7637
//!   traces the same 4× per device to these lines).

use serde::Serialize;

use crate::error::{Error, Result};
use crate::gguf::{
    compute_buffer_bytes, kv_layer_bytes, layer_of, state_layer_bytes, tied_output_bytes, Gguf, HParams, LlamaCppConfig, Overrides,
    TensorInfo,
};

/// How llama.cpp spreads a model over GPUs (`--split-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitMode {
    /// `none`: one GPU, `--main-gpu`.
    None,
    /// `layer` (llama.cpp's default): whole layers per GPU by `--tensor-split`.
    #[default]
    Layer,
    /// `row`: every matrix weight's rows split over the GPUs; the rest by layer.
    Row,
}

impl SplitMode {
    /// Parse `--split-mode` as llama.cpp's common/arg.cpp does (`none`, `layer`, `row`).
    pub fn parse(s: &str) -> Result<SplitMode> {
        match s {
            "none" => Ok(SplitMode::None),
            "layer" => Ok(SplitMode::Layer),
            "row" => Ok(SplitMode::Row),
            other => Err(Error::InvalidValue {
                what: "--split-mode".into(),
                value: other.into(),
                hint: "use none, layer or row (llama.cpp's values; `tensor` is not modelled)".into(),
            }),
        }
    }
}

/// The GPUs and how the model is spread over them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiGpu {
    /// GPUs (CUDA0 … CUDA{n−1}).
    pub gpus: u64,
    /// `--tensor-split` proportions, one per GPU (missing ones are 0, as llama.cpp fills them);
    /// empty or all zero: llama.cpp splits by each GPU's free memory, planned as equal for
    /// identical GPUs (a stated assumption: the free memory is not known here).
    pub tensor_split: Vec<f64>,
    /// `--split-mode`.
    pub mode: SplitMode,
    /// `--main-gpu`: the one GPU of `-sm none`.
    pub main_gpu: u64,
    /// Each GPU's free memory, bytes, for mixed GPUs: with no `--tensor-split` llama.cpp splits
    /// by it (llama-model.cpp `load_tensors`: `ggml_backend_dev_memory` free; ggml-cuda's row
    /// split by total memory, which differs by the CUDA context, the same on each). Empty:
    /// identical GPUs, equal shares.
    pub free_memory: Vec<u64>,
}

/// Most GPUs llama.cpp addresses (llama.h `LLAMA_MAX_DEVICES` is 16 for CUDA builds).
pub const MAX_GPUS: u64 = 16;
/// `GGML_SCHED_MAX_COPIES` (ggml-backend.cpp): input copies per device under pipeline parallelism.
pub const PIPELINE_COPIES: u64 = 4;

impl MultiGpu {
    /// Check the settings as llama.cpp would.
    pub fn validate(&self) -> Result<()> {
        let bad = |value: String, hint: &str| Error::InvalidValue { what: "multi-GPU settings".into(), value, hint: hint.into() };
        if self.gpus == 0 || self.gpus > MAX_GPUS {
            return Err(bad(format!("{} GPUs", self.gpus), "1 to 16 GPUs (llama.cpp's LLAMA_MAX_DEVICES)"));
        }
        if self.tensor_split.len() as u64 > self.gpus {
            return Err(bad(
                format!("--tensor-split with {} values for {} GPUs", self.tensor_split.len(), self.gpus),
                "give at most one proportion per GPU, or raise --gpus",
            ));
        }
        if self.tensor_split.iter().any(|v| !v.is_finite() || *v < 0.0 || *v > 1e9) {
            return Err(bad(format!("--tensor-split {:?}", self.tensor_split), "proportions are numbers ≥ 0, e.g. 3,1"));
        }
        if !self.free_memory.is_empty() && self.free_memory.len() as u64 != self.gpus {
            return Err(bad(format!("{} free-memory figures for {} GPUs", self.free_memory.len(), self.gpus), "one per GPU"));
        }
        if self.main_gpu >= self.gpus {
            return Err(bad(
                format!("--main-gpu {} with {} GPUs", self.main_gpu, self.gpus),
                "llama.cpp: \"invalid value for main_gpu\"; GPUs are numbered from 0",
            ));
        }
        Ok(())
    }

    /// Normalised split points (running sums of the proportions, the last 1.0), in f32 as
    /// llama.cpp computes them; equal shares when no proportion is given.
    pub fn split_points(&self) -> Vec<f32> {
        let n = self.gpus as usize;
        let mut w: Vec<f32> = (0..n).map(|i| self.tensor_split.get(i).copied().unwrap_or(0.0) as f32).collect();
        if w.iter().all(|x| *x == 0.0) {
            w = match self.free_memory.len() == n && self.free_memory.iter().any(|b| *b > 0) {
                true => self.free_memory.iter().map(|b| *b as f32).collect(),
                false => vec![1.0; n],
            };
        }
        let mut sum = 0.0f32;
        for x in w.iter_mut() {
            sum += *x;
            *x = sum;
        }
        w.iter().map(|x| x / sum).collect()
    }

    /// Each GPU's share of the rows of a row-split matrix (differences of the split points).
    fn row_shares(&self) -> Vec<f64> {
        let p = self.split_points();
        (0..p.len()).map(|i| (p[i] - if i == 0 { 0.0 } else { p[i - 1] }) as f64).collect()
    }
}

/// Device of each layer `0..=n_layer` (the last entry is the output layer): `None` is the CPU.
/// load_tensors: i_gpu_start = max(n_layer + 1 − ngl, 0) ([`crate::gguf::first_gpu_layer`]),
/// act_gpu_layers = min(ngl, n_layer + 1), device = upper_bound(split points,
/// (il − i_gpu_start) / act_gpu_layers).
pub fn layer_devices(n_layer: u64, n_gpu_layers: u64, points: &[f32]) -> Vec<Option<usize>> {
    let start = (n_layer + 1).saturating_sub(n_gpu_layers);
    let act = n_gpu_layers.min(n_layer + 1);
    (0..=n_layer)
        .map(|il| {
            if il < start || il - start >= act || points.is_empty() {
                return None;
            }
            let f = (il - start) as f32 / act as f32;
            Some(points.partition_point(|p| *p <= f).min(points.len() - 1))
        })
        .collect()
}

/// One GPU's memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DevicePlan {
    /// llama.cpp's name for it ("CUDA0").
    pub name: String,
    /// Repeating layers placed on it.
    pub layers: u64,
    /// Whether the output layer is on it.
    pub output: bool,
    /// "CUDAn model buffer size": weights on this device (row-split shares excluded).
    pub weights_bytes: u64,
    /// This device's share of the row-split matrices (llama.cpp prints their sum as one
    /// "CUDA_Split" buffer).
    pub row_split_bytes: u64,
    /// "CUDAn KV buffer size".
    pub kv_bytes: u64,
    /// "CUDAn RS buffer size": a state-space or hybrid model's recurrent state.
    pub state_bytes: u64,
    /// The multimodal projector's weights (`--mmproj`), on the first GPU (clip.cpp takes the
    /// first GPU device).
    pub projector_bytes: u64,
    /// "CUDAn compute buffer size", modelled.
    pub compute_bytes: u64,
    /// "CUDAn LoRA buffer size": `--lora` adapters' matrices of the tensors on this device.
    pub lora_bytes: u64,
    /// What the adapters' products may add to its compute buffer (a bound, not measured).
    pub lora_compute_bytes: u64,
    /// CUDA context and libraries.
    pub cuda_overhead_bytes: u64,
    /// Everything on this device.
    pub total_bytes: u64,
}

/// llama.cpp's memory over several GPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitPlan {
    /// The settings.
    pub multi: MultiGpu,
    /// Padded context.
    pub ctx: u64,
    /// Per GPU, CUDA0 first (only `--main-gpu` under `-sm none`).
    pub devices: Vec<DevicePlan>,
    /// Weights left in RAM (token embeddings, layers not offloaded, overrides to CPU).
    pub cpu_weights_bytes: u64,
    /// KV of layers not offloaded.
    pub cpu_kv_bytes: u64,
    /// Recurrent state of layers not offloaded.
    pub cpu_state_bytes: u64,
    /// What the process holds in RAM (the tensors left on the CPU are the one-GPU plan's).
    pub host: crate::gguf::HostMemory,
    /// Whether llama.cpp enables pipeline parallelism (4 copies of the graph inputs per GPU).
    pub pipeline_parallel: bool,
    /// The largest per-GPU total.
    pub max_device_total_bytes: u64,
}

/// Plan `g` over the GPUs of `m` with llama.cpp settings `c` and overrides `o`.
pub fn plan(g: &Gguf, hp: &HParams, c: &LlamaCppConfig, o: &Overrides, m: &MultiGpu) -> Result<SplitPlan> {
    m.validate()?;
    // Validates ctx/ubatch/parallel as the one-GPU plan does, and gives the padded context.
    let single = crate::gguf::llama_cpp_with(g, hp, c, o)?;
    let ctx = single.ctx;
    let (names, points): (Vec<String>, Vec<f32>) = match m.mode {
        SplitMode::None => (vec![format!("CUDA{}", m.main_gpu)], vec![1.0]),
        _ => ((0..m.gpus).map(|i| format!("CUDA{i}")).collect(), m.split_points()),
    };
    let devs = layer_devices(hp.layers, c.n_gpu_layers, &points);
    let mut out: Vec<DevicePlan> = names.into_iter().map(|name| DevicePlan { name, ..Default::default() }).collect();
    let mut cpu_weights = 0u64;
    let shares = if m.mode == SplitMode::Row { m.row_shares() } else { Vec::new() };
    // Op offload runs a RAM expert tensor's product on the first GPU (ggml-backend.cpp: the
    // highest-priority backend that takes the op), whose compute buffer holds its copy: the
    // largest down-projection expert tensor an override left in RAM while its layer is on a GPU
    // (as crate::gguf::compute_buffer_bytes on one GPU).
    let mut offload_copy = 0u64;
    for t in &g.tensors {
        match place(&t.name, &devs, o, hp.layers, out.len())? {
            None => {
                cpu_weights = cpu_weights.saturating_add(t.bytes);
                let on_gpu_layer = layer_of(&t.name).is_some_and(|il| devs.get(il as usize).is_some_and(|d| d.is_some()));
                if on_gpu_layer && crate::gguf::is_offloaded_expert(&t.name) {
                    offload_copy = offload_copy.max(t.bytes);
                }
            }
            Some(_) if !shares.is_empty() && row_split(t) => {
                // ggml-cuda rounds each device's row range to a block of rows: ± one block per tensor.
                for (dev, share) in out.iter_mut().zip(&shares) {
                    dev.row_split_bytes = dev.row_split_bytes.saturating_add((t.bytes as f64 * share) as u64);
                }
            }
            Some(d) => out[d].weights_bytes = out[d].weights_bytes.saturating_add(t.bytes),
        }
    }
    if let Some(Some(d)) = devs.last() {
        out[*d].weights_bytes = out[*d].weights_bytes.saturating_add(tied_output_bytes(g));
    }
    if !o.lora.is_empty() && m.mode == SplitMode::Row {
        return Err(Error::InvalidValue {
            what: "--lora with --split-mode".into(),
            value: "row".into(),
            hint: "llama.cpp would put the adapter's matrices in the row-split buffer beside their base tensors, which vram does not model; use -sm layer".into(),
        });
    }
    let ub = c.ubatch.min(ctx);
    let lora = crate::llama_lora::place(&o.lora, out.len(), hp, ub, crate::gguf::logits_rows(c, ub), |name| {
        place(name, &devs, o, hp.layers, out.len())
    })?;
    for (i, d) in out.iter_mut().enumerate() {
        d.lora_bytes = lora.gpu_bytes[i];
        d.lora_compute_bytes = lora.gpu_compute_bytes[i];
    }
    let (mut cpu_kv, mut cpu_state) = (0u64, 0u64);
    for (il, d) in devs.iter().enumerate().take(hp.layers as usize) {
        let (kv, state) = (kv_layer_bytes(hp, c, ctx, il as u64), state_layer_bytes(hp, c, il as u64));
        match d {
            Some(d) => {
                out[*d].layers += 1;
                out[*d].kv_bytes = out[*d].kv_bytes.saturating_add(kv);
                out[*d].state_bytes = out[*d].state_bytes.saturating_add(state);
            }
            None => {
                cpu_kv = cpu_kv.saturating_add(kv);
                cpu_state = cpu_state.saturating_add(state);
            }
        }
    }
    if let Some(Some(d)) = devs.last() {
        out[*d].output = true;
    }
    let used = out.iter().filter(|d| d.layers > 0 || d.output).count();
    let pipeline = used > 1
        && c.n_gpu_layers > hp.layers
        && m.mode == SplitMode::Layer
        && o.tensor.is_empty()
        && o.cpu_moe == crate::gguf::CpuMoe::None;
    if let Some(first) = out.first_mut() {
        first.projector_bytes = c.projector_bytes.saturating_add(c.projector_compute_bytes);
    }
    for (i, d) in out.iter_mut().enumerate() {
        finish(d, hp, c, ctx, pipeline, if i == 0 { offload_copy } else { 0 });
    }
    let max = out.iter().map(|d| d.total_bytes).max().unwrap_or(0);
    Ok(SplitPlan {
        multi: m.clone(),
        ctx,
        devices: out,
        cpu_weights_bytes: cpu_weights,
        cpu_kv_bytes: cpu_kv,
        cpu_state_bytes: cpu_state,
        host: single.host,
        pipeline_parallel: pipeline,
        max_device_total_bytes: max,
    })
}

/// Compute buffer and totals of one device: every GPU holding a layer or the output has a
/// compute buffer (the first GPU's with op offload's copy, `offload_copy`); the CUDA context is
/// per process and GPU.
fn finish(d: &mut DevicePlan, hp: &HParams, c: &LlamaCppConfig, ctx: u64, pipeline: bool, offload_copy: u64) {
    let holds = d.layers > 0 || d.output || d.row_split_bytes > 0;
    d.compute_bytes = if holds { compute_buffer_bytes(hp, c, ctx, d.output, offload_copy) } else { 0 };
    if pipeline && holds {
        d.compute_bytes = d.compute_bytes.saturating_add((PIPELINE_COPIES - 1).saturating_mul(graph_inputs(hp, c, ctx)));
    }
    d.cuda_overhead_bytes = c.cuda_overhead;
    d.total_bytes = [
        d.weights_bytes,
        d.row_split_bytes,
        d.kv_bytes,
        d.state_bytes,
        d.compute_bytes,
        d.cuda_overhead_bytes,
        d.projector_bytes,
        d.lora_bytes,
        d.lora_compute_bytes,
    ]
    .iter()
    .fold(0u64, |a, b| a.saturating_add(*b));
}

/// The graph inputs one device copies per ubatch: the KQ mask [ctx, ubatch] (f16 under flash
/// attention, f32 otherwise; llama-graph.cpp `build_attn_inp_kq_mask`) and the layer input
/// [n_embd, ubatch] f32.
fn graph_inputs(hp: &HParams, c: &LlamaCppConfig, ctx: u64) -> u64 {
    let u = c.ubatch.min(ctx);
    crate::gguf::kq_mask_bytes(ctx, u, c.flash_attn).saturating_add(crate::gguf::hidden_bytes(hp.embd, u))
}

/// Where one tensor goes: an override first (`CUDA0` is device 0), else its layer's device;
/// token embeddings on the CPU; other non-layer tensors with the output layer.
fn place(name: &str, devs: &[Option<usize>], o: &Overrides, n_layer: u64, devs_count: usize) -> Result<Option<usize>> {
    match o.device_of(name)? {
        Some(crate::gguf::Forced::Cpu) => return Ok(None),
        Some(crate::gguf::Forced::Gpu(n)) if (n as usize) < devs_count => return Ok(Some(n as usize)),
        Some(crate::gguf::Forced::Gpu(n)) => {
            return Err(Error::InvalidValue {
                what: "--override-tensor".into(),
                value: format!("{name} → CUDA{n}"),
                hint: format!("CUDA{n} is GPU {n}, but {devs_count} GPU(s) are planned: raise --gpus or fix the -ot device"),
            })
        }
        None => {}
    }
    Ok(match layer_of(name) {
        Some(i) if i < n_layer => devs.get(i as usize).copied().flatten(),
        Some(_) => None,
        None if name.starts_with("token_embd") => None,
        None => devs.last().copied().flatten(),
    })
}

/// Whether `-sm row` puts `t` in the split buffer: a matrix multiplied with `MUL_MAT`
/// (2-D `.weight`, not the token embeddings, not MoE experts, which use `MUL_MAT_ID`).
fn row_split(t: &TensorInfo) -> bool {
    t.n_dims >= 2 && t.name.ends_with(".weight") && !t.name.starts_with("token_embd") && !t.name.contains("_exps")
}

/// The longest context (a multiple of 256, up to `limit`) at which every GPU fits its budget
/// (`budgets[i]` bytes for GPU i; the last budget for GPUs past the list), or `None` when 256
/// tokens do not fit.
pub fn max_ctx(
    g: &Gguf,
    hp: &HParams,
    c: &LlamaCppConfig,
    o: &Overrides,
    m: &MultiGpu,
    budgets: &[u64],
    limit: u64,
) -> Result<Option<u64>> {
    crate::gguf::longest_ctx(limit, |ctx| Ok(plan(g, hp, &LlamaCppConfig { ctx, ..*c }, o, m)?.fits(budgets)))
}

impl SplitPlan {
    /// Whether every GPU's total is within its budget (`budgets[i]` for GPU i, by its CUDA
    /// number under `-sm none`; the last budget for GPUs past the list).
    pub fn fits(&self, budgets: &[u64]) -> bool {
        self.devices.iter().enumerate().all(|(i, d)| d.total_bytes <= budget_of(budgets, self.device_index(i)))
    }

    /// The CUDA number of the plan's i-th device (the main GPU under `-sm none`).
    pub fn device_index(&self, i: usize) -> usize {
        if self.multi.mode == SplitMode::None {
            self.multi.main_gpu as usize
        } else {
            i
        }
    }
}

/// GPU i's budget from a list (the last for GPUs past it; 0 for an empty list).
pub fn budget_of(budgets: &[u64], i: usize) -> u64 {
    budgets.get(i).or(budgets.last()).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn multi(gpus: u64, ts: &[f64]) -> MultiGpu {
        MultiGpu { gpus, tensor_split: ts.to_vec(), mode: SplitMode::Layer, main_gpu: 0, free_memory: Vec::new() }
    }

    #[test]
    fn even_split_of_32_layers_and_output_over_two_gpus() {
        // (il)/33 < 0.5 for il ≤ 16: layers 0–16 on CUDA0, 17–31 and the output on CUDA1.
        let d = layer_devices(32, 99, &multi(2, &[]).split_points());
        assert_eq!(d.iter().filter(|x| **x == Some(0)).count(), 17);
        assert_eq!(d[32], Some(1));
    }

    #[test]
    fn tensor_split_three_to_one() {
        let d = layer_devices(40, 41, &multi(2, &[3.0, 1.0]).split_points());
        // il/41 < 0.75 for il ≤ 30.
        assert_eq!(d.iter().filter(|x| **x == Some(0)).count(), 31);
    }

    #[test]
    fn partial_offload_keeps_the_first_layers_on_the_cpu() {
        // -ngl 4 of 10 layers: the output (il = 10) and layers 7–9, the output counted as the
        // last of the 4 (load_tensors: i_gpu_start = n_layer + 1 − ngl).
        let d = layer_devices(10, 4, &multi(2, &[]).split_points());
        assert!(d[..7].iter().all(|x| x.is_none()));
        assert_eq!(&d[7..], &[Some(0), Some(0), Some(1), Some(1)]);
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(multi(2, &[1.0, 1.0, 1.0]).validate().is_err());
        assert!(multi(2, &[-1.0]).validate().is_err());
        assert!(MultiGpu { main_gpu: 2, ..multi(2, &[]) }.validate().is_err());
        assert!(multi(0, &[]).validate().is_err());
        assert!(SplitMode::parse("tensor").is_err());
    }
}
