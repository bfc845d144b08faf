//! llama.cpp's `--fit` (common/fit.cpp `common_params_fit_impl`, on by default since
//! ggml-org/llama.cpp#16653, December 2025): before loading, llama-server measures what the
//! model, its context and its compute buffers would take on each GPU and changes the parameters
//! the user left at their defaults until `--fit-target` (1 GiB a GPU) stays free on every GPU.
//!
//! 1. An unset context (`-c` not given, llama.cpp's default 0) is the model's training context
//!    per stream (× `--parallel` when the KV cache is not unified). If every GPU keeps its
//!    margin, nothing changes.
//! 2. If all GPUs together are short, an unset context is reduced: measured again at
//!    `--fit-ctx` (4096, per stream), interpolated linearly between the two measurements to the
//!    summed target and rounded down to a multiple of 256 per stream, never below `--fit-ctx`.
//!    Over several GPUs the target is first lowered by (GPUs + 1) × half a layer's weights
//!    (a sixth for MoE models), the waste of whole layers per GPU. On one GPU that ends the fit
//!    when the target is reached.
//! 3. Otherwise, unless `-ngl`, `-ot`, `--n-cpu-moe`, `--cpu-moe` or `--tensor-split` was given
//!    (or `-sm row` over several GPUs), the layers are placed again, the last GPU first: each
//!    takes the most of the layers not yet placed that keep its margin, found by false position
//!    between none and all of them. A MoE model is placed this way with its experts in RAM
//!    ("dense-only" layers; the first layer of the last GPU keeps its experts, as fit.cpp's
//!    pattern indices place it). The layers no GPU takes stay in RAM.
//! 4. A MoE model whose dense weights then leave room: front to back, each GPU turns dense-only
//!    layers into full ones (experts on the GPU) while its margin holds, then tries one more
//!    layer in part: attention with the up projections (`LAYER_FRACTION_UP`), then with the
//!    gate too (`GATE`), or attention alone (`ATTN`); the rest of that layer goes to the next
//!    GPU, or to RAM from the last.
//!
//! llama.cpp measures each trial with its allocator (`llama_get_memory_breakdown`); vram
//! evaluates its own plan of the same placement, the one-GPU plan on one GPU and the split plan
//! on several, so every step follows fit.cpp and only the per-device figures are vram's.

use crate::error::{Error, Result};
use crate::gguf::{llama_cpp_with, CpuMoe, Gguf, HParams, LlamaCppConfig, LlamaCppPlan, Overrides, TensorOverride};
use crate::llama_split::{MultiGpu, SplitMode};
use serde::Serialize;

/// `--fit-target`'s default: MiB left free per device (common/common.h `fit_params_target`).
pub const DEFAULT_MARGIN: u64 = 1024 << 20;
/// `--fit-ctx`'s default: the smallest context the fit reduces to (`fit_params_min_ctx`).
pub const DEFAULT_MIN_CTX: u64 = 4096;

/// The fit's settings, and which parameters the user left to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitSettings {
    /// Bytes to leave free on each GPU (`--fit-target`): one value is every GPU's, a list is
    /// per GPU, and GPUs past its end keep the default.
    pub margins: Vec<u64>,
    /// The smallest context per stream it reduces to (`--fit-ctx`); `None` when `-c 0` asked for
    /// the full context (llama.cpp's `UINT32_MAX` sentinel).
    pub min_ctx: Option<u64>,
    /// The context was not given: it starts at the training context and may be reduced.
    pub ctx_auto: bool,
    /// `-ngl`, `--tensor-split` and the tensor overrides were not given: layers may move.
    pub layers_auto: bool,
}

impl FitSettings {
    /// The margin of GPU `id`.
    pub fn margin(&self, id: usize) -> u64 {
        match self.margins.as_slice() {
            [] => DEFAULT_MARGIN,
            [one] => *one,
            list => list.get(id).copied().unwrap_or(DEFAULT_MARGIN),
        }
    }
}

/// Which part of a layer stays on its GPU when the rest overflows (common/fit.cpp
/// `common_layer_fraction_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fraction {
    /// Attention only: every `ffn_gate|up|gate_up|down` tensor overflows.
    Attn,
    /// Attention and the up projections: `ffn_gate|gate_up|down` overflow.
    Up,
    /// Attention, up and gate: `ffn_down` overflows.
    Gate,
    /// Everything but the experts: `ffn_(up|down|gate_up|gate)_(ch|)exps` overflow.
    Moe,
}

impl Fraction {
    /// The regular expression of what overflows from layer `il` (fit.cpp `get_overflow_pattern`).
    fn pattern(self, il: u64) -> String {
        let rest = match self {
            Fraction::Attn => r"ffn_(gate|up|gate_up|down).*",
            Fraction::Up => r"ffn_(gate|gate_up|down).*",
            Fraction::Gate => r"ffn_down.*",
            Fraction::Moe => r"ffn_(up|down|gate_up|gate)_(ch|)exps",
        };
        format!(r"blk\.{il}\.{rest}")
    }
}

/// One GPU's layers in the fit (fit.cpp `ngl_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceLayers {
    /// Layers on this GPU (the output layer counts as one on the last).
    pub n_layer: u64,
    /// Of these, layers whose experts (or more) are elsewhere; they follow the full layers.
    pub n_part: u64,
    /// What of the first partial layer stays; the others keep everything but their experts.
    pub overflow: Fraction,
    /// Whether the first partial layer overflows to the next GPU rather than to RAM.
    pub overflow_to_next: bool,
}

impl DeviceLayers {
    const NONE: DeviceLayers = DeviceLayers { n_layer: 0, n_part: 0, overflow: Fraction::Moe, overflow_to_next: false };

    fn n_full(&self) -> u64 {
        self.n_layer.saturating_sub(self.n_part)
    }
}

/// What the fit did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum FitAction {
    /// The initial parameters leave every margin free.
    NoChange,
    /// The context was reduced and everything fits (on several GPUs the layers may also have
    /// been placed again: see `Fitted::layers`).
    ContextReduced {
        /// The training context it started from (all streams).
        from: u64,
    },
    /// The layers were placed again: weights moved to RAM, or between GPUs (after the context
    /// went to its minimum, if it was the fit's).
    LayersPlaced,
    /// Nothing the fit may change makes it fit: llama.cpp warns and loads as set.
    CannotFit {
        /// Why.
        reason: String,
    },
}

/// The fit's outcome: the settings llama.cpp loads with.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// The settings after the fit.
    pub config: LlamaCppConfig,
    /// The overrides after the fit (fit.cpp's per-layer patterns for a MoE model).
    pub overrides: Overrides,
    /// The GPUs after the fit (`--tensor-split` of each GPU's layer count when it placed them).
    pub multi: Option<MultiGpu>,
    /// Each GPU's layers when the fit placed them.
    pub layers: Option<Vec<DeviceLayers>>,
    /// What it did.
    pub action: FitAction,
    /// Bytes the model, context and compute buffers would use at the initial parameters, all
    /// GPUs together.
    pub projected_initial: u64,
    /// Free device memory the fit compares against, all GPUs together (CUDA total − CUDA
    /// context, each).
    pub free: u64,
}

/// What the fit counts on the GPU: model, context (KV and recurrent state) and compute buffers
/// (`llama_memory_breakdown`: `model + context + compute`; the CUDA context and a projector are
/// outside it).
pub fn fit_used(p: &LlamaCppPlan) -> u64 {
    p.gpu_weights_bytes + p.gpu_kv_bytes + p.gpu_state_bytes + p.gpu_compute_bytes
}

/// fit.cpp's partial-layer slots of a placement (`set_ngl_tensor_split_tbo`): each GPU's slots
/// follow its full ones, counted from index layers + 1 − ngl; a GPU's first slot overflows by its
/// fraction (to the next GPU or RAM), the others send their experts to RAM. (index, what
/// overflows, the GPU it goes to or `None` for RAM.) The last GPU's last slot is the output's
/// index, which no `blk.N` tensor has.
fn partial_slots(n_layer: u64, layers: &[DeviceLayers]) -> Vec<(u64, Fraction, Option<u32>)> {
    let ngl: u64 = layers.iter().map(|d| d.n_layer).sum();
    let mut il0 = (n_layer + 1).saturating_sub(ngl);
    let mut out = Vec::new();
    for (id, d) in layers.iter().enumerate() {
        il0 += d.n_full();
        for il in il0..il0 + d.n_part {
            out.push(if il == il0 { (il, d.overflow, d.overflow_to_next.then_some(id as u32 + 1)) } else { (il, Fraction::Moe, None) });
        }
        il0 += d.n_part;
    }
    out
}

impl Fitted {
    /// Layers the fit left partly off their GPU (their experts, or more of the first partial
    /// layer's FFN, elsewhere), not counting fit.cpp's slot at the output's index.
    pub fn partial_layers(&self, n_layer: u64) -> usize {
        self.layers.as_deref().map_or(0, |l| partial_slots(n_layer, l).iter().filter(|(il, _, _)| *il < n_layer).count())
    }
}

/// The fit's view of the model: it evaluates a placement on every GPU.
struct Probe<'a> {
    g: &'a Gguf,
    hp: &'a HParams,
    /// The user's GPUs and split (`None`: one GPU).
    multi: Option<&'a MultiGpu>,
    /// GPUs the model is spread over (1 under `-sm none`).
    nd: usize,
    /// The user's `--lora` adapters: carried into every placement, never counted by the fit
    /// (llama.cpp loads them after `--fit` has placed the model: common/common.cpp
    /// `common_init_from_params`), as [`fit_used`] and `used_on` leave them out.
    lora: &'a [crate::llama_lora::LoraAdapter],
}

impl Probe<'_> {
    /// Bytes per GPU at `c`, `o` on the user's split.
    fn used(&self, c: &LlamaCppConfig, o: &Overrides) -> Result<Vec<u64>> {
        self.used_on(c, o, self.multi)
    }

    fn used_on(&self, c: &LlamaCppConfig, o: &Overrides, m: Option<&MultiGpu>) -> Result<Vec<u64>> {
        match m {
            Some(m) if self.nd > 1 => Ok(crate::llama_split::plan(self.g, self.hp, c, o, m)?
                .devices
                .iter()
                .map(|d| {
                    [d.weights_bytes, d.row_split_bytes, d.kv_bytes, d.state_bytes, d.compute_bytes]
                        .iter()
                        .fold(0u64, |a, b| a.saturating_add(*b))
                })
                .collect()),
            _ => Ok(vec![fit_used(&llama_cpp_with(self.g, self.hp, c, o)?)]),
        }
    }

    /// Weights on the GPUs at `c`, `o` (`mb.model` summed).
    fn model_bytes(&self, c: &LlamaCppConfig, o: &Overrides) -> Result<u64> {
        match self.multi {
            Some(m) if self.nd > 1 => Ok(crate::llama_split::plan(self.g, self.hp, c, o, m)?
                .devices
                .iter()
                .fold(0u64, |a, d| a.saturating_add(d.weights_bytes).saturating_add(d.row_split_bytes))),
            _ => Ok(llama_cpp_with(self.g, self.hp, c, o)?.gpu_weights_bytes),
        }
    }

    /// The settings, overrides and split of a placement (fit.cpp `set_ngl_tensor_split_tbo`):
    /// `-ngl` is the layers placed, the split is each GPU's count, and each GPU's partial layers
    /// (after its full ones) overflow by pattern.
    fn apply(&self, c: &LlamaCppConfig, layers: &[DeviceLayers]) -> Result<(LlamaCppConfig, Overrides, Option<MultiGpu>)> {
        let ngl: u64 = layers.iter().map(|d| d.n_layer).sum();
        let mut tensor = Vec::new();
        for (il, fraction, device) in partial_slots(self.hp.layers, layers) {
            let buft = device.map_or("CPU".to_string(), |n| format!("CUDA{n}"));
            tensor.push(TensorOverride::new(&fraction.pattern(il), &buft, device).map_err(|e| Error::InvalidValue {
                what: "--fit".into(),
                value: fraction.pattern(il),
                hint: e,
            })?);
        }
        // Over several GPUs the split is each GPU's count; `-sm none` keeps its one GPU as given.
        let multi = self.multi.map(|m| match self.nd > 1 {
            true => MultiGpu { tensor_split: layers.iter().map(|d| d.n_layer as f64).collect(), ..m.clone() },
            false => m.clone(),
        });
        Ok((LlamaCppConfig { n_gpu_layers: ngl, ..*c }, Overrides { tensor, cpu_moe: CpuMoe::None, lora: self.lora.to_vec() }, multi))
    }

    /// Bytes per GPU of a placement (fit.cpp `get_memory_for_layers`).
    fn placed(&self, c: &LlamaCppConfig, layers: &[DeviceLayers]) -> Result<Vec<i128>> {
        let (c, o, m) = self.apply(c, layers)?;
        Ok(self.used_on(&c, &o, m.as_ref())?.into_iter().map(i128::from).collect())
    }
}

/// fit.cpp's false-position step: of `delta` layers between what fits (`mem`) and what does
/// not (`high`), how many to try; C++'s `uint32_t` conversion of a negative quotient wraps, so
/// it is clamped to `delta − 1` as there.
fn step(delta: u64, target: i128, mem: i128, high: i128) -> u64 {
    let headroom = high - mem;
    let s = if headroom > 0 { (delta as i128 * (target - mem) / headroom) as i64 as u32 as u64 } else { delta - 1 };
    s.max(1).min(delta - 1)
}

/// Apply llama.cpp's `--fit` to `c` on one GPU (`multi` `None`) or the GPUs of `multi`, GPU i
/// with `free[i]` bytes free (the last figure for GPUs past the list; see the module). `c.ctx`
/// is ignored when `s.ctx_auto`.
pub fn fit(
    g: &Gguf,
    hp: &HParams,
    c: &LlamaCppConfig,
    o: &Overrides,
    multi: Option<&MultiGpu>,
    free: &[u64],
    s: &FitSettings,
) -> Result<Fitted> {
    let (nd, first) = match multi {
        Some(m) if m.mode != SplitMode::None => (m.gpus.max(1) as usize, 0),
        Some(m) => (1, m.main_gpu as usize),
        None => (1, 0),
    };
    let frees: Vec<u64> = (0..nd).map(|id| crate::llama_split::budget_of(free, first + id)).collect();
    let probe = Probe { g, hp, multi, nd, lora: &o.lora };
    let streams = if c.unified { 1 } else { c.parallel.max(1) };
    let train = if hp.context_length > 0 { hp.context_length } else { DEFAULT_MIN_CTX };
    let ctx_max = if s.ctx_auto { train.saturating_mul(streams).min(u32::MAX as u64) } else { c.ctx };
    let mut cfg = LlamaCppConfig { ctx: ctx_max, ..*c };
    let initial = probe.used(&cfg, o)?;
    let projected_initial = initial.iter().fold(0u64, |a, b| a.saturating_add(*b));
    let free_all = frees.iter().fold(0u64, |a, b| a.saturating_add(*b));
    let margins: Vec<i128> = (0..nd).map(|id| s.margin(first + id) as i128).collect();
    let targets: Vec<i128> = frees.iter().zip(&margins).map(|(f, m)| *f as i128 - m).collect();
    let done =
        |config: LlamaCppConfig, overrides: Overrides, multi: Option<MultiGpu>, layers: Option<Vec<DeviceLayers>>, action: FitAction| {
            Fitted { config, overrides, multi, layers, action, projected_initial, free: free_all }
        };
    let user_multi = multi.cloned();
    if initial.iter().zip(&targets).all(|(u, t)| (*u as i128) <= *t) {
        return Ok(done(cfg, o.clone(), user_multi, None, FitAction::NoChange));
    }
    let all_moe = o.moe_only(CpuMoe::All);
    let moe = llama_cpp_with(g, hp, &cfg, &all_moe)?.overridden_tensors > 0;
    // Step 2: reduce a context the user left unset, when all GPUs together are short.
    let surplus = free_all as i128 - projected_initial as i128 - margins.iter().sum::<i128>();
    let mut reduced = false;
    if let (true, true, Some(min_ctx)) = (surplus < 0, s.ctx_auto, s.min_ctx) {
        let ctx_min = min_ctx.saturating_mul(streams).min(u32::MAX as u64);
        if ctx_max > ctx_min {
            let mut sum_target = free_all as i128 - margins.iter().sum::<i128>();
            if nd > 1 {
                // Whole layers (dense) or whole tensors (MoE, ≤ a third of a layer) per GPU: half
                // of one wasted on average, and a little more to be safe.
                let per_layer = probe.model_bytes(&cfg, o)? as i128 / c.n_gpu_layers.min(hp.layers).max(1) as i128;
                sum_target -= (nd as i128 + 1) * per_layer / if moe { 6 } else { 2 };
            }
            let used_min: i128 = probe.used(&LlamaCppConfig { ctx: ctx_min, ..cfg }, o)?.iter().map(|b| *b as i128).sum();
            cfg.ctx = ctx_min;
            if sum_target > used_min && (projected_initial as i128) > used_min {
                // Linear interpolation between the two measurements, rounded down for CUDA.
                let add = (ctx_max - ctx_min) as i128 * (sum_target - used_min) / (projected_initial as i128 - used_min);
                let ctx = ctx_min + add as u64;
                let align = 256 * streams;
                cfg.ctx = (ctx - ctx % align).max(ctx_min);
                reduced = true;
                if nd == 1 {
                    return Ok(done(cfg, o.clone(), user_multi, None, FitAction::ContextReduced { from: ctx_max }));
                }
            }
        }
    }
    let stop = |cfg: LlamaCppConfig, reason: &str| {
        let action = if reduced { FitAction::ContextReduced { from: ctx_max } } else { FitAction::CannotFit { reason: reason.into() } };
        Ok(done(cfg, o.clone(), user_multi.clone(), None, action))
    };
    // Step 3: place the layers, where the user set none of the placement.
    if !s.layers_auto {
        return stop(cfg, "-ngl, --tensor-split or a tensor override was given, so llama.cpp's fit leaves the weights where they are (\"already set by user\")");
    }
    if nd > 1 && multi.is_some_and(|m| m.mode == SplitMode::Row) {
        return stop(cfg, "-sm row: llama.cpp's fit does not move row-split weights (\"not implemented\")");
    }
    let ngl_max = hp.layers + 1;
    // With every expert in RAM, is there room for more (fit.cpp `global_surplus_cpu_moe`)?
    let surplus_cpu_moe = if moe {
        let used = probe.used(&cfg, &all_moe)?;
        used.iter().zip(&targets).map(|(u, t)| t - *u as i128).sum::<i128>()
    } else {
        0
    };
    let mut cur = vec![DeviceLayers::NONE; nd];
    let mut mem = probe.placed(&cfg, &cur)?;
    for id in (0..nd).rev() {
        let unassigned = ngl_max - cur[id + 1..].iter().map(|d| d.n_layer).sum::<u64>();
        let mut high = cur.clone();
        high[id].n_layer = unassigned;
        if moe {
            high[id].n_part = if id < nd - 1 { unassigned } else { unassigned.saturating_sub(1) };
        }
        if high[id].n_layer == 0 {
            continue;
        }
        let mut mem_high = probe.placed(&cfg, &high)?;
        if mem_high[id] <= targets[id] {
            cur = high;
            mem = mem_high;
            continue;
        }
        let mut delta = high[id].n_layer - cur[id].n_layer;
        while delta > 1 {
            let k = step(delta, targets[id], mem[id], mem_high[id]);
            let mut test = cur.clone();
            test[id].n_layer += k;
            if moe {
                test[id].n_part += if id == nd - 1 && test[id].n_part == 0 { k - 1 } else { k };
            }
            let mem_test = probe.placed(&cfg, &test)?;
            if mem_test[id] <= targets[id] {
                (cur, mem) = (test, mem_test);
            } else {
                (high, mem_high) = (test, mem_test);
            }
            delta = high[id].n_layer - cur[id].n_layer;
        }
    }
    if moe && surplus_cpu_moe > 0 {
        fill_experts(&probe, &cfg, &targets, &mut cur, &mut mem)?;
    }
    let (config, overrides, multi) = probe.apply(&cfg, &cur)?;
    let action = if reduced { FitAction::ContextReduced { from: ctx_max } } else { FitAction::LayersPlaced };
    Ok(done(config, overrides, multi, Some(cur), action))
}

/// fit.cpp step 4: front to back, each GPU turns dense-only layers (from the first GPU that has
/// any) into full layers while its target holds, then tries part of one more layer.
fn fill_experts(probe: &Probe, cfg: &LlamaCppConfig, targets: &[i128], cur: &mut Vec<DeviceLayers>, mem: &mut Vec<i128>) -> Result<()> {
    let nd = cur.len();
    let mut dense_start = nd;
    for id in (0..nd).rev() {
        if cur[id].n_layer == 0 {
            break;
        }
        dense_start = id;
    }
    let mut id = 0;
    while id <= dense_start && dense_start < nd {
        let mut high = cur.clone();
        for jd in dense_start..nd {
            let moved = if jd < nd - 1 { high[jd].n_layer } else { high[jd].n_layer.saturating_sub(1) };
            high[id].n_layer += moved;
            high[jd].n_layer -= moved;
            high[jd].n_part = 0;
        }
        let dense_start_high = nd - 1;
        let mut mem_high = probe.placed(cfg, &high)?;
        if mem_high[id] > targets[id] {
            let mut delta = high[id].n_full().saturating_sub(cur[id].n_full());
            while delta > 1 {
                let k = step(delta, targets[id], mem[id], mem_high[id]);
                let mut test = cur.clone();
                let mut start = dense_start;
                let mut converted = 0;
                while start < nd {
                    let n = (k - converted).min(test[start].n_part);
                    test[start].n_layer -= n;
                    test[start].n_part -= n;
                    test[id].n_layer += n;
                    converted += n;
                    if test[start].n_part > 0 {
                        break;
                    }
                    start += 1;
                }
                let mem_test = probe.placed(cfg, &test)?;
                if mem_test[id] <= targets[id] {
                    (*cur, *mem, dense_start) = (test, mem_test, start);
                } else {
                    (high, mem_high) = (test, mem_test);
                }
                delta = high[id].n_full().saturating_sub(cur[id].n_full());
            }
        } else {
            (*cur, *mem, dense_start) = (high, mem_high, dense_start_high);
        }
        // Part of one more layer.
        if dense_start < nd && cur[dense_start].n_layer > if id < nd - 1 { 0 } else { 1 } {
            let mut test = cur.clone();
            let mut start = dense_start;
            test[start].n_layer -= 1;
            test[start].n_part = test[start].n_part.saturating_sub(1);
            test[id].n_layer += 1;
            test[id].n_part += 1;
            if test[start].n_part == 0 {
                start += 1;
            }
            test[id].overflow_to_next = id < nd - 1;
            let fits = |m: &[i128]| m[id] < targets[id] && (id + 1 == nd || m[id + 1] < targets[id + 1]);
            test[id].overflow = Fraction::Up;
            let mem_test = probe.placed(cfg, &test)?;
            if fits(&mem_test) {
                (*cur, *mem, dense_start) = (test.clone(), mem_test, start);
                test[id].overflow = Fraction::Gate;
                let mem_test = probe.placed(cfg, &test)?;
                if fits(&mem_test) {
                    (*cur, *mem) = (test, mem_test);
                }
            } else {
                test[id].overflow = Fraction::Attn;
                let mem_test = probe.placed(cfg, &test)?;
                if fits(&mem_test) {
                    (*cur, *mem, dense_start) = (test, mem_test, start);
                }
            }
        }
        id += 1;
    }
    Ok(())
}

/// The most layers on the GPU, 0 to `max`, for which `fits` holds (0 assumed to): use shrinks
/// as layers leave, so bisect.
pub fn most_layers(max: u64, fits: impl Fn(u64) -> Result<bool>) -> Result<u64> {
    let (mut lo, mut hi) = (0u64, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}
