//! Optimizer states and the temporaries of one optimizer step, over the trainable tensors: every
//! parameter in full fine-tuning, the adapters (and `modules_to_save` copies) under LoRA.

use crate::job::{Job, Optimizer, OptimizerImpl};
use crate::model::{Model, Role, TensorGroup};

/// bitsandbytes keeps 32-bit states for tensors smaller than this (`min_8bit_size`, optim/optimizer.py).
const BNB_MIN_8BIT_SIZE: u64 = 4096;
/// bitsandbytes blockwise quantisation: one fp32 absmax per 256 elements (optim/optimizer.py, blocksize 256).
const BNB_BLOCK: u64 = 256;

/// A trainable tensor group and the bytes of one of its elements.
pub(crate) struct Trainable {
    pub group: TensorGroup,
    pub bytes: u128,
}

/// The tensors the optimizer steps. LoRA adapters are fp32 (peft `autocast_adapter_dtype=True`),
/// `modules_to_save` copies keep their module's dtype; in full fine-tuning every parameter is
/// trained in the parameter dtype. A LoRA configuration that does not resolve was refused by `validate`.
pub(crate) fn trainable(m: &Model, job: &Job) -> Vec<Trainable> {
    let p = job.precision.param_dtype().bytes() as u128;
    match &job.lora {
        None => super::inventory(m).into_iter().map(|group| Trainable { group, bytes: p }).collect(),
        // Adapters are fp32 (peft autocast_adapter_dtype=True); modules_to_save copies keep the
        // dtype of the module they copy.
        Some(lora) => {
            let copy = super::lora::embedding_dtype(job).bytes() as u128;
            crate::peft::resolve(m, lora)
                .map(|r| r.trainable)
                .unwrap_or_default()
                .into_iter()
                .map(|group| Trainable { bytes: if group.role == Role::Adapter { 4 } else { copy }, group })
                .collect()
        }
    }
}

fn n(t: &Trainable) -> u128 {
    t.group.numel as u128 * t.group.count as u128
}

/// Bytes of optimizer state that persist between steps, wherever they live.
pub fn states(m: &Model, job: &Job) -> u128 {
    let tensors = trainable(m, job);
    match job.optimizer {
        // exp_avg + exp_avg_sq like the parameter (torch/optim/adamw.py _init_group: zeros_like);
        // `step` lives on the CPU unless capturable/fused, and is a scalar either way.
        Optimizer::Adamw | Optimizer::Adam => tensors.iter().map(|t| 2 * n(t) * t.bytes).sum(),
        // bitsandbytes 32-bit states are fp32 whatever the parameter dtype (optim/optimizer.py init_state).
        Optimizer::PagedAdamw32bit => tensors.iter().map(|t| 2 * n(t) * 4).sum(),
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => tensors.iter().map(|t| t.group.count as u128 * bnb_8bit_state(&t.group)).sum(),
        Optimizer::Sgd => 0,
        // momentum_buffer (torch/optim/sgd.py) / exp_avg (lion-pytorch).
        Optimizer::SgdMomentum | Optimizer::Lion => tensors.iter().map(|t| n(t) * t.bytes).sum(),
        // transformers Adafactor: exp_avg_sq_row + exp_avg_sq_col in fp32 for matrices (factored over
        // the last two dims), a full fp32 exp_avg_sq for vectors; beta1=None keeps no first moment.
        Optimizer::Adafactor => tensors
            .iter()
            .map(|t| {
                let g = &t.group;
                g.count as u128 * 4 * if g.is_matrix() { (g.rows + g.cols) as u128 } else { g.numel as u128 }
            })
            .sum(),
    }
}

/// Whether the states live in CUDA unified memory (bitsandbytes paged optimizers,
/// optim/optimizer.py `get_state_buffer(paged=True)` → `cudaMallocManaged`): nvidia-smi sees them,
/// `torch.cuda.memory_allocated` does not, and the driver pages them to the host under pressure.
pub fn paged(job: &Job) -> bool {
    matches!(job.optimizer, Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit)
}

fn bnb_8bit_state(t: &TensorGroup) -> u128 {
    let n = t.numel as u128;
    if t.numel < BNB_MIN_8BIT_SIZE {
        2 * 4 * n
    } else {
        // state1 + state2 as uint8, plus an fp32 absmax per block for each.
        2 * n + 2 * 4 * t.numel.div_ceil(BNB_BLOCK) as u128
    }
}

/// Extra bytes allocated inside `optimizer.step()` beyond parameters, grads and states.
pub fn step_temporaries(m: &Model, job: &Job) -> u128 {
    let tensors = trainable(m, job);
    let all: u128 = tensors.iter().map(|t| n(t) * t.bytes).sum();
    let largest = tensors.iter().map(|t| t.group.numel as u128 * t.bytes).max().unwrap_or(0);
    match (job.optimizer, job.optimizer_impl) {
        // _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs) allocates one
        // state-sized list for all parameters at once (torch/optim/adam.py).
        (Optimizer::Adamw | Optimizer::Adam, OptimizerImpl::Foreach) => all,
        // _single_tensor_adam: denom for one parameter at a time.
        (Optimizer::Adamw | Optimizer::Adam, OptimizerImpl::ForLoop) => largest,
        // _fused_adamw_: one kernel, in place.
        (Optimizer::Adamw | Optimizer::Adam, OptimizerImpl::Fused) => 0,
        // bitsandbytes updates each tensor in place in one kernel; SGD updates are in place.
        (Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit | Optimizer::Sgd | Optimizer::SgdMomentum, _) => 0,
        // Adafactor, per parameter: fp32 grad copy, update = grad² + eps, the factored estimate.
        (Optimizer::Adafactor, _) => 3 * tensors.iter().map(|t| t.group.numel as u128).max().unwrap_or(0) * 4,
        // Lion (lion-pytorch): update = exp_avg.clone().mul_(β1).add(grad).sign_(): two temporaries.
        (Optimizer::Lion, _) => 2 * largest,
    }
}

/// Bytes per parameter of `m`'s optimizer states and step temporaries under `job` (for a stack
/// estimated beside another: a vision tower, Whisper's encoder).
pub(crate) fn per_parameter(m: &Model, job: &Job) -> (u128, u128) {
    let n = m.parameters().max(1) as u128;
    (states(m, job) / n, step_temporaries(m, job) / n)
}
