"""QLoRA under FakeTensorMode: bitsandbytes 4-bit layers holding exactly the storage bitsandbytes holds.

What is real and what is emulated (bitsandbytes 0.50.2, transformers 5.23.0; paths relative to
site-packages):

- Which modules are quantized: transformers' own rule, called as is.
  quantizers/quantizer_bnb_4bit.py:113-135 `_process_model_before_weight_loading` computes
  `get_modules_to_not_convert(model, llm_int8_skip_modules=None, model._keep_in_fp32_modules)`
  (quantizers/base.py:259-278 -> get_keys_to_not_convert, base.py:39-63: tied weights, the last
  parameter's module and the output embedding, i.e. lm_head) and
  integrations/bitsandbytes.py:162-222 `replace_with_bnb_linear` replaces every module whose
  type is exactly nn.Linear (or GPT-2's Conv1D) that `should_convert_module` accepts with
  `bnb.nn.Linear4bit(in, out, bias, compute_dtype, compress_statistics=double_quant,
  quant_type, quant_storage)`. get_modules_to_not_convert and should_convert_module are called
  unchanged; replace_with_bnb_linear's loop is re-written (it builds bnb Params4bit, which
  cannot hold a fake tensor) (fused 3-D MoE expert
  parameters are not nn.Linear and so stay in the model dtype, as in a real load).
- The storage: the real `bitsandbytes.functional.quantize_4bit` (functional.py:~890-965) runs on
  the fake weight (in the model dtype, as transformers hands the checkpoint tensor to
  Params4bit._quantize); its ops `bitsandbytes::quantize_4bit` / `quantize_blockwise` have
  register_fake implementations (_ops.py:216-235) that give the CUDA kernels' output shapes and
  dtypes: packed uint8 weight of ceil(numel/2) bytes ((numel+1)//2, 1), absmax fp32 per 64-element
  block, and a 16-entry fp32 `code` per layer (get_4bit_type, a new tensor each call). With
  double quantization (functional.py:938-951): `offset = absmax.mean()` (fp32 scalar), absmax
  re-quantized to uint8 with a nested QuantState (state2: fp32 absmax per 256 blocks and the
  256-entry `dynamic` code, shared across layers through functional.name2qmap). The result is
  held by a fake tensor whose class is named Params4bit (bnb's Params4bit cannot wrap a fake
  tensor) in a subclass of the real bnb.nn.Linear4bit, so peft dispatches its own
  lora.bnb.Linear4bit (peft/tuners/lora/bnb.py:571-591) and recognises the weight by class name.
- The forward: the real `bnb.nn.Linear4bit.forward` (nn/modules.py:609-637: x cast to
  compute_dtype, bias cast to it in place, matmul_4bit, result cast back to the input dtype) and
  the real `bnb.matmul_4bit` / `MatMul4Bit` (autograd/_functions.py:300-386, 407-490): forward
  keeps no activation (`ctx.tensors = (None, B)`, B the packed weight), backward computes
  `grad_A = grad_output @ dequantize_4bit(B, state).to(grad_output.dtype)` through the real
  F.dequantize_4bit (fake ops `bitsandbytes::dequantize_blockwise` + `dequantize_4bit`, shapes
  and dtypes of the CUDA kernels: a full [N, K] weight in QuantState.dtype, plus for nested an
  fp32 absmax). EMULATED: under fake mode the op `bitsandbytes::gemm_4bit` would run its
  register_fake (output only). The CUDA kernel (backends/cuda/ops.py:934-982) instead, for
  M = batch*seq > 1536 (`_gemm_4bit_custom_max_m`, ops.py:926), or when the sm90 heuristic
  `_gemm_4bit_use_custom_cuda` (ops.py:584-) says so, runs `_dequant_linear_fallback`
  (ops.py:904-916): for nested an fp32 absmax_dq and `absmax_dq + offset`, then
  `B_dq = torch.empty(shapeB, dtype=A.dtype)` and F.linear(A, B_dq, bias). `cuda_gemm_4bit`
  below makes exactly those allocations (the heuristic is bitsandbytes' own function, asked with
  an H100's properties: 132 SMs, sm90); the custom fused kernel allocates only the output.
"""
import copy

import torch
import torch.nn.functional as F

from torch._subclasses.fake_tensor import FakeTensor

import bitsandbytes as bnb
import bitsandbytes.autograd._functions as bnb_fn
import bitsandbytes.functional as bnbF
from bitsandbytes.backends.cuda import ops as bnb_cuda

H100_PROPS = (132, 9, 0)  # (num_sms, major, minor) for _gemm_4bit_use_custom_cuda
bnb_cuda._gpu_dispatch_props = lambda device_index: H100_PROPS


def cuda_gemm_4bit(A, B, qs, bias=None):
    """backends/cuda/ops.py:934-982 (registered CUDA kernel of bitsandbytes::gemm_4bit)."""
    K = A.shape[-1]
    M = A.numel() // K
    N = qs.shape[0]
    if M > bnb_cuda._gemm_4bit_custom_max_m or K % qs.blocksize != 0:
        use_custom = False
    else:
        use_custom = bnb_cuda._gemm_4bit_use_custom_cuda(0, A.dtype, M, N, K)
    absmax = qs.state2.absmax if qs.nested else qs.absmax
    if use_custom:  # fused kernel: only the output (its register_fake gives that)
        if qs.nested:
            return torch.ops.bitsandbytes.gemm_4bit.default(A, B, qs.shape, absmax, qs.blocksize, qs.quant_type,
                                                            bias=bias, absmax_8bit=qs.absmax,
                                                            absmax_code=qs.state2.code, absmax_offset=qs.offset)
        return torch.ops.bitsandbytes.gemm_4bit.default(A, B, qs.shape, absmax, qs.blocksize, qs.quant_type, bias=bias)
    # _dequant_linear_fallback, ops.py:904-916
    if qs.nested:
        absmax_dq = torch.empty_like(qs.absmax, dtype=torch.float32)
        absmax = absmax_dq + qs.offset
        del absmax_dq
    B_dq = torch.empty(tuple(qs.shape), dtype=A.dtype, device=A.device)
    return F.linear(A, B_dq, bias)


class MatMul4BitCuda(bnb_fn.MatMul4Bit):
    """MatMul4Bit (autograd/_functions.py:300-386) with the CUDA gemm_4bit; backward is bnb's own."""

    @staticmethod
    def forward(ctx, A, B, out=None, bias=None, quant_state=None):
        ctx.is_empty = False
        B = B.view(-1, 1)
        output = cuda_gemm_4bit(A, B, quant_state, bias)
        ctx.state = quant_state
        ctx.dtype_A, ctx.dtype_B, ctx.dtype_bias = A.dtype, B.dtype, None if bias is None else bias.dtype
        ctx.tensors = (None, B) if any(ctx.needs_input_grad[:2]) else (None, None)
        return output


def matmul_4bit(A, B, quant_state, out=None, bias=None):
    """bnb.matmul_4bit (autograd/_functions.py:407-490), CUDA branch: no-grad calls go straight to
    gemm_4bit, grad calls through MatMul4Bit."""
    B = B.view(-1, 1)
    needs_grad = torch.is_grad_enabled() and (A.requires_grad or (bias is not None and bias.requires_grad))
    if not needs_grad:
        return cuda_gemm_4bit(A, B, quant_state, bias)
    return MatMul4BitCuda.apply(A, B, out, bias, quant_state)


bnb.matmul_4bit = matmul_4bit
bnb_fn.matmul_4bit = matmul_4bit


class Params4bit(FakeTensor):
    """A fake packed weight whose class is named Params4bit: bnb's own Params4bit cannot wrap a
    FakeTensor (torch.Tensor._make_subclass refuses a tensor already bound to FakeTensor), while
    peft and transformers recognise bnb weights by that class name (peft/peft_model.py:947-954
    get_nb_trainable_parameters counts numel*2*element_size; peft/utils/integrations.py:120-123
    dequantize_bnb_weight; peft/utils/other.py:207-208 prepare_model_for_kbit_training skips it).
    Carries the attributes of bnb's Params4bit (nn/modules.py ~210-260); `_is_param` keeps
    isinstance(p, nn.Parameter) true, as for every fake parameter."""


class Linear4bit(bnb.nn.Linear4bit):
    """A real subclass of bnb.nn.Linear4bit (peft dispatches on isinstance, lora/bnb.py:580) with
    bnb's own forward; only the constructor differs (bnb's would build a Params4bit)."""

    def __init__(self, in_features, out_features, weight, bias, compute_dtype, quant_state, source_cls):
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        self.weight = weight
        self.bias = bias
        self.compute_dtype = compute_dtype
        self.compute_type_is_set = True
        self.quant_state = quant_state
        self.quant_storage = torch.uint8
        self.support_avx512bf16_for_cpu = False  # a CUDA run never takes the CPU packing path
        self.source_cls = source_cls


def _dora_deepcopy(obj, memo=None):
    """peft's DoRA deep-copies a Linear4bit at set-up only to please FSDP
    (peft/tuners/lora/dora.py:109-112) and reads its dequantized weight once; a deep copy of
    fake tensors segfaults / leaves the fake mode. The copy is a set-up temporary, never alive
    in a training step, so the layer itself is handed over (it is not modified)."""
    if isinstance(obj, Linear4bit):
        return obj
    return copy.deepcopy(obj, memo)


import peft.tuners.lora.dora as _peft_dora  # noqa: E402

_peft_dora.deepcopy = _dora_deepcopy


def make_params4bit(packed, qs, nested, quant_type, module):
    if not isinstance(packed, FakeTensor):  # real tensors (the technique check): bnb's own class
        return bnb.nn.Params4bit(packed, requires_grad=False, quant_state=qs, blocksize=64, compress_statistics=nested,
                                 quant_type=quant_type, quant_storage=torch.uint8, module=module, bnb_quantized=True)
    p = torch.nn.Parameter(packed, requires_grad=False)
    p.__class__ = Params4bit
    p.quant_state, p.blocksize, p.compress_statistics = qs, 64, nested
    p.quant_type, p.quant_storage, p.bnb_quantized, p.module = quant_type, torch.uint8, True, module
    return p


def quantize_model(model, quant):
    """Replace the linears transformers' bnb 4-bit integration would quantize (the selection loop
    of integrations/bitsandbytes.py:183-222, with its own should_convert_module and
    get_modules_to_not_convert) by Linear4bit layers holding fake quantized storage made by the
    real bnb.functional.quantize_4bit. Returns the quantized-weight tensors (packed weights and
    every QuantState tensor) to be tracked."""
    from transformers import BitsAndBytesConfig
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module

    if quant.get("bits") != 4:
        raise NotImplementedError("only 4-bit QLoRA is emulated")
    compute = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[quant.get("compute_dtype", "bf16")]
    nested = bool(quant.get("nested", False))
    qtype = quant.get("quant_type", "nf4")
    qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=qtype, bnb_4bit_use_double_quant=nested,
                              bnb_4bit_compute_dtype=compute)
    # functional.py:653-656 caches the 256-entry `dynamic` code (create_dynamic_map, built with
    # .tolist(), which fake tensors refuse) once per process, shared by every nested QuantState:
    # the same single fp32[256] tensor, made here in the running fake mode.
    if nested:
        bnbF.name2qmap["dynamic"] = torch.empty(256, dtype=torch.float32)
    skip = HfQuantizer.get_modules_to_not_convert(model, qcfg.llm_int8_skip_modules, model._keep_in_fp32_modules)
    tensors = []
    for name, module in list(model.named_modules()):
        if not should_convert_module(name, skip):
            continue
        if not (isinstance(module, Conv1D) or type(module) is torch.nn.Linear):
            continue
        if isinstance(module, Conv1D):
            in_f, out_f = module.weight.shape
            w = module.weight.t()  # transformers transposes Conv1D weights before quantizing
        else:
            in_f, out_f = module.in_features, module.out_features
            w = module.weight
        packed, qs = bnbF.quantize_4bit(w.detach().contiguous(), blocksize=64, compress_statistics=nested,
                                        quant_type=qtype, quant_storage=torch.uint8)
        bias = module.bias
        if bias is not None:
            bias.requires_grad_(False)
        new = Linear4bit(in_f, out_f, None, bias, compute, qs, type(module))
        new.weight = make_params4bit(packed, qs, nested, qtype, new)
        model.set_submodule(name, new)
        tensors.append(packed)
        for t in (qs.absmax, qs.code, qs.offset):
            if isinstance(t, torch.Tensor):
                tensors.append(t)
        if qs.state2 is not None:
            tensors += [qs.state2.absmax, qs.state2.code]
    model.is_loaded_in_4bit = True  # quantizer_bnb_4bit.py _process_model_after_weight_loading
    return tensors
