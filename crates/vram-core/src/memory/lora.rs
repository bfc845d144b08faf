//! LoRA / DoRA / QLoRA training: what a frozen base plus adapters holds, as peft + HF Trainer
//! run it. The step's timeline is the full fine-tuning one (train.rs); this file supplies the
//! model-state side (frozen weights, trainable adapters, their gradients) and the facts the
//! activation model needs (which linears save an input, what dtype the residual stream has).

use super::activations::Bytes;
use super::optimizer;
use super::train::ModelStates;
use crate::dtype::DType;
use crate::job::{Job, Precision};
use crate::model::{Model, Role, TensorGroup};
use crate::peft::{self, BaseWeights, KbitPrepare, Method, Resolved, Slot};

/// The dtype of the base's unquantized weights: the load dtype, or for bitsandbytes bases fp32,
/// as peft's `prepare_model_for_kbit_training` casts every non-`Params4bit` fp16/bf16 parameter
/// (peft/utils/other.py, "cast all non INT8 parameters to fp32").
pub(crate) fn base_dtype(job: &Job) -> DType {
    match job.base {
        Some(BaseWeights::Dtype { dtype }) => dtype,
        Some(BaseWeights::Bnb4 { .. } | BaseWeights::Bnb8 { .. }) => DType::F32,
        None if job.precision == Precision::Fp32 => DType::F32,
        None if job.precision == Precision::Fp16 || job.precision == Precision::Fp16Mixed => DType::F16,
        None => DType::BF16,
    }
}

/// The dtype of the token embedding and LM head: TRL casts them back to bf16 after the kbit
/// preparation when training in bf16 (trl/trainer/utils.py `peft_module_casting_to_bf16`).
pub(crate) fn embedding_dtype(job: &Job) -> DType {
    match job.base.and_then(BaseWeights::prepare) {
        Some(KbitPrepare::Trl) if job.precision.compute_dtype() == DType::BF16 => DType::BF16,
        _ => base_dtype(job),
    }
}

fn is_embedding(t: &TensorGroup) -> bool {
    matches!(t.role, Role::Embedding | Role::Position | Role::LmHead)
}

/// Whether a base tensor is quantized by bitsandbytes: every `nn.Linear` but the output layer
/// (transformers quantizers/quantizer_bnb_4bit.py: `modules_to_not_convert` defaults to the
/// output embedding). Embeddings, norms and 3-D expert parameters are not `nn.Linear`.
fn bnb_quantized(t: &TensorGroup) -> bool {
    // The MoE router is a custom module holding a weight in transformers 5 (not nn.Linear): left
    // as it is, like the fused 3-D experts; a shared-expert gate is an nn.Linear and quantized.
    let router = t.name.ends_with("mlp.gate.weight") || t.name.ends_with("mlp.router.weight");
    // A vision tower's patch embedding is an nn.Conv2d (Conv3d for Qwen2-VL): not converted.
    let conv = t.name.contains("patch_embed");
    matches!(t.role, Role::Linear | Role::Router) && !router && !conv
}

/// Bytes of one bitsandbytes-quantized linear weight of `rows` × `numel / rows` (its packed data
/// and quantization state, each storage rounded to the allocator's granule).
pub(crate) fn bnb_linear_bytes(rows: u64, numel: u64, b: BaseWeights) -> u128 {
    match b {
        BaseWeights::Bnb4 { nested, .. } => peft::bnb4_tensors(numel, nested).into_iter().map(granule).sum(),
        _ => peft::bnb8_tensors(rows, numel).into_iter().map(granule).sum(),
    }
}

/// Bytes of a quantized linear's bias at the peak: upcast to fp32 by the preparation, then cast
/// in place to the compute dtype by Linear4bit's first forward (Linear8bitLt's stays fp32).
pub(crate) fn bnb_bias_bytes(numel: u64, b: BaseWeights) -> u128 {
    match b {
        BaseWeights::Bnb4 { compute, .. } => granule(numel * compute.bytes()),
        _ => numel as u128 * 4,
    }
}

/// Round a storage up to the caching allocator's 512-byte granule (c10/cuda/CUDACachingAllocator.cpp
/// `kMinBlockSize`): bitsandbytes' small per-weight tensors (codes, offsets) each take one.
fn granule(b: u64) -> u128 {
    b.div_ceil(512) as u128 * 512
}

/// Bytes of a pre-quantized checkpoint (GPTQ, AWQ, fp8, compressed-tensors, bitsandbytes,
/// mxfp4) used as the frozen base: as its safetensors headers store it when they were read
/// (exact), else from its `quantization_config` (quant.rs). TRL prepares (upcasts) only models
/// bitsandbytes quantized at load time, so the rest stays as stored.
fn prequantized_base(m: &Model, q: &crate::model::QuantizationConfig) -> (u128, String) {
    if let Some(b) = m.checkpoint_bytes {
        return (b as u128, format!("pre-quantized checkpoint ({}) as its safetensors headers store it: {b} B (exact)", q.method));
    }
    match crate::quant::Plan::new(q) {
        Ok(plan) => {
            let e = m.stored_dtype.map_or(2, |d| d.bytes() as u128);
            let s = crate::quant::model_bytes(m, &plan, e);
            (
                s.total(),
                format!("pre-quantized checkpoint: {} ({} B with scales, from its quantization_config)", plan.describe(), s.total()),
            )
        }
        // Refused before estimating (memory::estimate checks the plan first).
        Err(_) => (0, String::new()),
    }
}

/// Bytes of the frozen base on the GPU and how they were counted.
pub(crate) fn base_bytes(m: &Model, job: &Job) -> (u128, String) {
    if let (None, Some(q)) = (job.base, &m.quantization) {
        // transformers cannot train on MXFP4 (quantizer_mxfp4.py is_trainable = False): the recipe
        // loads it with Mxfp4Config(dequantize=True), a bf16 base.
        if q.method != "mxfp4" {
            return prequantized_base(m, q);
        }
    }
    let dense = base_dtype(job).bytes() as u128;
    let n_all: u128 = super::inventory(m).iter().map(|t| t.numel as u128 * t.count as u128).sum();
    match job.base.unwrap_or(BaseWeights::Dtype { dtype: base_dtype(job) }) {
        BaseWeights::Dtype { dtype } => {
            (n_all * dense, format!("{n_all} frozen parameters × {} B ({})", dtype.bytes(), dtype.torch_name()))
        }
        b @ (BaseWeights::Bnb4 { .. } | BaseWeights::Bnb8 { .. }) => {
            let (mut quant, mut quant_n, mut rest, mut emb, mut biases) = (0u128, 0u128, 0u128, 0u128, 0u128);
            for t in super::inventory(m) {
                if is_embedding(&t) {
                    emb += t.numel as u128 * t.count as u128;
                } else if bnb_quantized(&t) {
                    quant += bnb_linear_bytes(t.rows, t.numel, b) * t.count as u128;
                    quant_n += t.numel as u128 * t.count as u128;
                } else if t.role == Role::Bias && t.name.starts_with("layers.") {
                    biases += bnb_bias_bytes(t.numel, b) * t.count as u128;
                } else {
                    rest += t.numel as u128 * t.count as u128;
                }
            }
            let ed = embedding_dtype(job);
            (
                quant + biases + rest * 4 + emb * ed.bytes() as u128,
                format!(
                    "{quant_n} linear weights in {} ({quant} B with block scales); {emb} embedding/LM-head parameters in {}; {rest} others (norms, biases, experts) in fp32 (prepare_model_for_kbit_training)",
                    b.describe(),
                    ed.short_name()
                ),
            )
        }
    }
}

/// The resolved adapters of a LoRA job (empty for full fine-tuning or an unresolvable config,
/// which `validate` refuses first).
pub(crate) fn resolved(m: &Model, job: &Job) -> Option<Resolved> {
    job.lora.as_ref().and_then(|l| peft::resolve(m, l).ok())
}

/// What the activation model needs to know about a LoRA job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoraActs {
    /// Adapted modules per slot, in dense layers: attention input, MLA inner, attention
    /// output, MLP input, MLP output, cross-attention query, key/value and output, a
    /// linear-attention mixer's input and output projections.
    pub dense: [u128; 10],
    /// The same in MoE layers.
    pub moe: [u128; 10],
    /// Rank r.
    pub r: u128,
    /// Bytes per element of the input copy each adapted module saves: peft casts the input to
    /// the adapter's fp32 (tuners_utils.py `_cast_input_dtype`); under autocast lora_A casts it
    /// back to a half copy, which it saves; without autocast it saves the fp32 copy.
    pub input: u128,
    /// `lora_dropout > 0`: `nn.Dropout` keeps a bool mask per adapted input (p = 0 is `nn.Identity`).
    pub dropout: bool,
    /// DoRA: output features summed over the adapted modules of a dense / an MoE layer. DoRA's
    /// `(m/‖W‖ - 1) * base_result + m/‖W‖ * lora_result` saves both [tokens, out] tensors for the
    /// magnitude's gradient (peft/tuners/lora/dora.py `DoraLinearLayer.forward`).
    pub dora_out: [u128; 2],
    /// The LM head is trained (`modules_to_save`): it saves its input like in full fine-tuning.
    pub head_trained: bool,
    /// The fused experts carry LoRA (a ParamWrapper): they compute with a merged weight that needs
    /// a gradient, so they save their inputs as in full fine-tuning.
    pub experts_trained: bool,
    /// A bitsandbytes base (QLoRA): the kbit preparation leaves every parameter that is not
    /// 4-bit — the fused experts too — in fp32.
    pub bnb: bool,
    /// A Gated DeltaNet's β and decay projections are adapted (`in_proj_ba`, or both `in_proj_a`
    /// and `in_proj_b`): in the model's layer 0 β and the decay then need a gradient.
    pub decay_adapted: bool,
}

/// The per-token slot of a module adapter (`None` for parameter targets: the experts and the
/// router hold merged weights, not input copies).
fn slot_index(s: Slot) -> Option<usize> {
    match s {
        Slot::AttnIn | Slot::Outside => Some(0),
        Slot::AttnInner => Some(1),
        Slot::AttnOut => Some(2),
        Slot::MlpIn => Some(3),
        Slot::MlpOut => Some(4),
        Slot::CrossIn => Some(5),
        Slot::CrossMemory => Some(6),
        Slot::CrossOut => Some(7),
        Slot::MixerIn => Some(8),
        Slot::MixerOut => Some(9),
        Slot::Experts | Slot::Router => None,
    }
}

impl LoraActs {
    /// From a job; `None` for full fine-tuning.
    pub fn of(m: &Model, job: &Job) -> Option<LoraActs> {
        let lora = job.lora.as_ref()?;
        let r = resolved(m, job)?;
        let mut a = LoraActs {
            r: lora.r as u128,
            input: if job.precision.is_mixed() { 2 } else { 4 },
            dropout: lora.dropout > 0.0,
            dora_out: [0, 0],
            head_trained: lora.modules_to_save.iter().any(|s| s == "lm_head"),
            bnb: job.base.is_some_and(crate::peft::BaseWeights::is_bnb),
            decay_adapted: {
                let has = |n: &str| r.adapted.iter().any(|a| a.name == n);
                has("in_proj_ba") || (has("in_proj_a") && has("in_proj_b"))
            },
            ..LoraActs::default()
        };
        for ad in &r.adapted {
            if ad.slot == Slot::Experts {
                a.experts_trained = true;
            }
            let slots = if ad.moe_layer { &mut a.moe } else { &mut a.dense };
            let Some(k) = slot_index(ad.slot) else { continue };
            slots[k] += 1;
            if lora.method == Method::Dora && ad.slot != Slot::Outside {
                a.dora_out[usize::from(ad.moe_layer)] += ad.dout as u128;
            }
        }
        Some(a)
    }

    /// Bytes per token DoRA saves in a dense or MoE layer: two [tokens, out] tensors of `e`
    /// bytes per adapted module.
    pub fn dora_tokens(&self, moe_layer: bool, e: u128) -> u128 {
        2 * e * self.dora_out[usize::from(moe_layer)]
    }

    /// Adapted modules in `slot` of a dense or MoE layer.
    pub fn count(&self, slot: Slot, moe_layer: bool) -> u128 {
        slot_index(slot).map_or(0, |k| (if moe_layer { self.moe } else { self.dense })[k])
    }

    /// Bytes per token that `n` adapted modules reading a `width`-wide input save: their input
    /// copies (plus dropout masks) and the rank-r output of lora_A that lora_B saves (half under
    /// autocast, like the copies).
    pub fn saved(&self, n: u128, width: u128) -> u128 {
        let per_elem = self.input + u128::from(self.dropout);
        n * (per_elem * width + self.input * self.r)
    }
}

/// The model-state side of a LoRA step (train.rs `ModelStates`).
pub(crate) fn model_states(m: &Model, job: &Job, b: &Bytes) -> ModelStates {
    let res = resolved(m, job).unwrap_or(Resolved {
        adapted: Vec::new(),
        adapter_parameters: 0,
        saved_module_parameters: 0,
        trainable: Vec::new(),
    });
    let lora = job.lora.as_ref();
    let base = base_dtype(job).bytes() as u128;
    let (v, ed) = (m.vocab as u128, m.embed_dim as u128);
    let adapters = res.adapter_parameters as u128;
    let saved = res.saved_module_parameters as u128;
    let saves = |n: &str| lora.is_some_and(|l| l.modules_to_save.iter().any(|s| s == n));
    // ModulesToSaveWrapper copies the one module named: with tied embeddings the copy of lm_head
    // is trained while the input embedding keeps the original, frozen tensor (and vice versa).
    let head_trained = saves("lm_head");
    let embedding_trained = saves("embed_tokens");
    let (frozen, frozen_detail) = base_bytes(m, job);
    let bnb = job.base.is_some_and(BaseWeights::is_bnb);
    let dora = lora.is_some_and(|l| l.method == Method::Dora);
    // Per layer kind: adapter parameters, and the base weights the adapted modules wrap.
    // A hybrid's attention modules live in its attention layers, its mixer modules in its
    // linear-attention layers; the MLP's in both.
    let in_layer = |a: &crate::peft::Adapted, mixer: bool| match a.slot {
        Slot::MixerIn | Slot::MixerOut => mixer,
        Slot::AttnIn | Slot::AttnInner | Slot::AttnOut | Slot::CrossIn | Slot::CrossMemory | Slot::CrossOut => !mixer || !m.is_hybrid(),
        _ => true,
    };
    let per_layer = |moe: bool, mixer: bool| -> (u128, u128) {
        res.adapted.iter().filter(|a| a.moe_layer == moe && a.slot != Slot::Outside && in_layer(a, mixer)).fold((0, 0), |(p, w), a| {
            let own = (a.rank * a.experts) as u128 * (a.din + a.dout) as u128 + if dora { a.dout as u128 } else { 0 };
            (p + own, w + (a.experts * a.din * a.dout) as u128)
        })
    };
    // Parameter targets (fused experts, router) compute with W + ΔW built by a parametrization
    // (peft lora.ParamWrapper `_activate_lora`: einsum of the adapters, added to the weight): the
    // merged weight requires grad, so the expert matmuls save it for backward, in the compute
    // dtype, and its gradient is a full-size temporary in backward.
    let merged: u128 =
        res.adapted.iter().filter(|a| matches!(a.slot, Slot::Experts | Slot::Router)).map(|a| (a.experts * a.din * a.dout) as u128).sum();
    let merged_largest: u128 = res
        .adapted
        .iter()
        .filter(|a| matches!(a.slot, Slot::Experts | Slot::Router))
        .map(|a| (a.experts * a.din * a.dout) as u128)
        .max()
        .unwrap_or(0);
    let kinds = [[per_layer(false, false), per_layer(false, true)], [per_layer(true, false), per_layer(true, true)]];
    // Fused experts run through grouped_mm, which autocast does not cast (transformers
    // integrations/moe.py): no half copies of them.
    let frozen_matmul = |i: u64| -> u128 {
        m.layer_inventory(i).iter().filter(|t| matches!(t.role, Role::Linear | Role::Router)).map(|t| t.numel as u128).sum()
    };
    let input = if b.amp { 2 } else { 4 };
    let mut layer_casts = Vec::with_capacity(m.layers as usize);
    let mut layer_grads = Vec::with_capacity(m.layers as usize);
    for i in 0..m.layers {
        let (params, wrapped) = kinds[usize::from(m.is_moe_layer(i))][usize::from(m.is_ssm_layer(i))];
        let mut c = 0;
        if b.amp {
            // Autocast caches a half copy of each fp32 adapter weight (a leaf that requires grad,
            // autocast_mode.cpp `cached_cast`); an fp32 frozen base weight is cast per use and the
            // copy is saved by the matmul for the input gradient.
            c += 2 * params;
            if base == 4 && !bnb {
                c += 2 * frozen_matmul(i);
            }
            // Llama 4's stacked experts are torch.bmm operands, which autocast casts: fp32 (an
            // fp32 base, or bitsandbytes' kbit preparation, which leaves these parameters
            // unquantized and upcasts them) they are cast per use and the half copy is saved by
            // the bmm for the input gradient (measured: validation/llama4.py QLoRA points).
            if base == 4 && m.is_moe_layer(i) && m.moe.as_ref().is_some_and(|moe| moe.dense_dispatch) {
                c += 2 * m
                    .layer_inventory(i)
                    .iter()
                    .filter(|t| t.role == Role::Experts)
                    .map(|t| t.numel as u128 * t.count as u128)
                    .sum::<u128>();
            }
        }
        if dora && lora.is_some_and(|l| l.dropout > 0.0) {
            // DoRA with dropout (peft/tuners/lora/variants.py DoraLinearVariant.forward: no
            // base_result): `weight.to(x.dtype)` of each wrapped base weight feeds
            // F.linear(dropout(x), weight), which saves it (a half copy under autocast).
            c += input * wrapped;
        }
        if m.is_moe_layer(i) {
            c += merged * b.e;
        }
        layer_casts.push(c);
        layer_grads.push(4 * params);
    }
    // An fp32 LM head under autocast is cast to a half copy that its matmul saves: cached when it
    // is a trained copy, cast per use when frozen (kbit preparation).
    let head_fp32 = embedding_dtype(job) == DType::F32;
    let head_cast = if b.amp && head_fp32 { 2 * v * ed } else { 0 };
    let casts = layer_casts.iter().sum::<u128>() + head_cast;
    // The cache holds the adapters' half copies only (frozen weights are cast per use); the LM
    // head sits outside the checkpointed layers, so its saved copy stays.
    let cached = if b.amp {
        2 * (0..m.layers).map(|i| kinds[usize::from(m.is_moe_layer(i))][usize::from(m.is_ssm_layer(i))].0).sum::<u128>()
    } else {
        0
    } + head_cast;
    // bitsandbytes MatMul4Bit / MatMul8bitLt dequantize the weight to the compute dtype in forward
    // and again in backward (autograd/_functions.py); the widest linear bounds the transient.
    let dequant = if bnb {
        m.tensors().iter().filter(|t| matches!(t.role, Role::Linear | Role::Router)).map(|t| t.numel as u128).max().unwrap_or(0) * b.e
    } else {
        0
    };
    // modules_to_save copies keep the dtype of the module copied (peft/utils/other.py
    // ModulesToSaveWrapper deep-copies it; autocast_adapter_dtype only upcasts adapter weights):
    // measured bf16 on a bf16 base (validation/fixtures/lora.jsonl).
    let copy = embedding_dtype(job).bytes() as u128;
    let trainable = adapters * 4 + saved * copy;
    // DoRA's forward rebuilds each adapted module's weight norm (dora.py get_lora_weight,
    // get_weight_norm): an identity of in² (fp32, and its half copy under autocast) pushed through
    // the adapters, the [in, out] LoRA weight and its fp32 copy, the base weight in fp32 and the
    // sum: transients of the widest adapted module, alive inside that one layer's forward.
    let dora_transient = if dora {
        res.adapted
            .iter()
            .map(|a| {
                let (i, o) = (a.din as u128, a.dout as u128);
                if b.amp {
                    (6 * i * i).max(2 * i * i + 18 * i * o)
                } else {
                    4 * i * i + 16 * i * o
                }
            })
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    // An adapted linear's forward (peft lora/layer.py Linear.forward: `result = result +
    // lora_B(lora_A(dropout(x))) * scaling`): the base output, the scaled adapter output and
    // their sum exist at once, three output-wide tensors of the widest adapted module. Under
    // checkpointing this happens inside the recomputed layer, beside its rebuilt activations
    // (measured: validation/encoders_lora.py, ModernBERT's Wi, whose layer backward holds less).
    let widest = res.adapted.iter().filter(|a| a.experts <= 1).map(|a| a.dout as u128).max().unwrap_or(0);
    let tokens = job.batch as u128 * job.seq as u128;
    let lora_forward = 3 * b.e * widest * tokens;
    let states = if optimizer::paged(job) { 0 } else { optimizer::states(m, job) };
    ModelStates {
        weights: frozen,
        weights_detail: format!("frozen base: {frozen_detail}"),
        adapters: trainable,
        adapters_detail: format!(
            "{} {adapters} adapter parameters × 4 B (fp32, peft autocast_adapter_dtype){}",
            if dora { "DoRA:" } else { "LoRA:" },
            saved_note(saved, copy)
        ),
        grads: trainable,
        grads_detail: format!("gradients of the {} trainable parameters only (adapters fp32)", adapters + saved),
        states,
        head_cast,
        casts,
        casts_cached: cached,
        layer_grad_tmp: (0..m.layers)
            .map(|i| if b.amp { layer_grads[i as usize] / 2 } else { 0 } + if m.is_moe_layer(i) { merged_largest * b.e } else { 0 })
            .collect(),
        layer_grads,
        layer_casts,
        head_grad: if head_trained { v * ed * copy } else { 0 },
        embedding_trained,
        dequant,
        dora_transient,
        lora_forward,
    }
}

fn saved_note(saved: u128, copy: u128) -> String {
    if saved == 0 {
        String::new()
    } else {
        format!("; {saved} modules_to_save parameters × {copy} B (trained copies)")
    }
}
