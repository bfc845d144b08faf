//! Optimizer states and the temporaries of one optimizer step.

use crate::job::{Job, Optimizer, OptimizerImpl};
use crate::model::{Model, TensorGroup};

/// bitsandbytes keeps 32-bit states for tensors smaller than this (`min_8bit_size`, optim/optimizer.py).
const BNB_MIN_8BIT_SIZE: u64 = 4096;
/// bitsandbytes blockwise quantisation: one fp32 absmax per 256 elements (optim/optimizer.py, blocksize 256).
const BNB_BLOCK: u64 = 256;

/// Bytes of optimizer state that persist between steps.
pub fn states(m: &Model, job: &Job) -> u128 {
    let tensors = m.tensors();
    let p: u128 = tensors.iter().map(|t| t.numel as u128 * t.count as u128).sum();
    // torch.optim keeps states in the parameter dtype (`torch.zeros_like(p)`); in AMP the
    // parameters are fp32, so the states are too.
    let s = job.precision.param_dtype().bytes() as u128;
    match job.optimizer {
        // exp_avg + exp_avg_sq (torch/optim/adamw.py _init_group); `step` lives on the CPU unless
        // capturable/fused, and is a scalar either way.
        Optimizer::Adamw | Optimizer::Adam => 2 * p * s,
        Optimizer::Adamw8bit => tensors.iter().map(|t| t.count as u128 * bnb_8bit_state(t)).sum(),
        Optimizer::Sgd => 0,
        // momentum_buffer (torch/optim/sgd.py) / exp_avg (lion-pytorch).
        Optimizer::SgdMomentum | Optimizer::Lion => p * s,
        // transformers Adafactor: exp_avg_sq_row + exp_avg_sq_col in fp32 for matrices (factored over
        // the last two dims), a full fp32 exp_avg_sq for vectors; beta1=None keeps no first moment.
        Optimizer::Adafactor => {
            tensors.iter().map(|t| t.count as u128 * 4 * if t.is_matrix() { (t.rows + t.cols) as u128 } else { t.numel as u128 }).sum()
        }
    }
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
    let tensors = m.tensors();
    let p: u128 = tensors.iter().map(|t| t.numel as u128 * t.count as u128).sum();
    let largest = tensors.iter().map(|t| t.numel).max().unwrap_or(0) as u128;
    let s = job.precision.param_dtype().bytes() as u128;
    match (job.optimizer, job.optimizer_impl) {
        // _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs) allocates one
        // state-sized list for all parameters at once (torch/optim/adam.py).
        (Optimizer::Adamw | Optimizer::Adam, OptimizerImpl::Foreach) => p * s,
        // _single_tensor_adam: denom for one parameter at a time.
        (Optimizer::Adamw | Optimizer::Adam, OptimizerImpl::ForLoop) => largest * s,
        // _fused_adamw_: one kernel, in place.
        (Optimizer::Adamw | Optimizer::Adam, OptimizerImpl::Fused) => 0,
        // bitsandbytes updates each tensor in place in one kernel; SGD updates are in place.
        (Optimizer::Adamw8bit | Optimizer::Sgd | Optimizer::SgdMomentum, _) => 0,
        // Adafactor, per parameter: fp32 grad copy, update = grad² + eps, the factored estimate.
        (Optimizer::Adafactor, _) => 3 * largest * 4,
        // Lion (lion-pytorch): update = exp_avg.clone().mul_(β1).add(grad).sign_(): two temporaries.
        (Optimizer::Lion, _) => 2 * largest * s,
    }
}
