"""Measure what PyTorch really allocates when fine-tuning or running a LLaVA-style VISION-LANGUAGE
model (model_type "llava": a CLIP or SigLIP vision tower, the two-layer multi_modal_projector, a
decoder LM): fixtures/vlm.jsonl.

Same method as harness.py and encoders.py, whose pieces are imported unchanged: the real
transformers LlavaForConditionalGeneration built from config.json under FakeTensorMode, the CUDA
emulation (SDPA kernel choice, autocast fp32 list, fused dropout), the storage Tracker, the
categories and result() fields, the two-step training loop of HF Trainer (forward with the loss,
backward, AdamW foreach step, zero_grad(set_to_none)).

Batch: B samples, each `images` images of the tower's image_size (pixel_values float32
[B*images, 3, S, S], as the LLaVA processors return them) and `seq` token ids of which
images x image_tokens_per_image are config.image_token_id. image_tokens_per_image =
(S // patch)^2 patches, plus CLIP's CLS token, minus one for vision_feature_select_strategy
"default" (which drops the CLS): 576 for llava-1.5 (CLIP-L/14 at 336), 729 for llava-interleave
(SigLIP so400m/14 at 384). Each image block follows a few text tokens; text ids are drawn below the
image token id. labels = input_ids with the image positions set to -100. The all-ones attention
mask is not passed (harness.py: unpadded CUDA runs skip it).

Training variants ("train"): "full" (everything trainable), "frozen_vision"
(vision_tower.requires_grad_(False): projector + LM trained, the common LLaVA fine-tune),
"projector_only" (vision tower and LM frozen: LLaVA stage-1 pretraining). Inference ("infer"):
model.eval(), no_grad, one prefill forward of the prompt with pixel_values, use_cache=True,
logits_to_keep=1, the last logits copied to fp32 (harness.infer's prefill).

Categories: as harness.py, plus "vision activations": a forward pre-hook on the vision tower
switches the category from "activations" to "vision activations" and a post-hook restores it, so
every storage created while the tower runs its forward (its saved activations and transients,
including the hidden states it returns) is labelled separately. Checkpoint recomputation in
backward keeps the "backward" category (the hooks only relabel "activations").

WHAT IS PATCHED, and why it is faithful (two things, both in LlavaModel.forward):

1. The placeholder check. get_placeholder_mask computes special_image_mask = input_ids ==
   image_token_id, n_image_tokens = mask.sum() and the test `n_image_tokens * hidden ==
   image_features.numel()`, then torch_compilable_check turns that 0-d tensor into a Python bool
   (torch._check_tensor_all_with: cond._is_all_true().item()), which a fake tensor cannot answer.
   All tensor ops still run (same allocations); only the final .item() is replaced, for fake
   tensors only, by the same comparison made with the count of image tokens that make_batch put
   into input_ids (known by construction): `placed * hidden == image_features.numel()`, where the
   numel is the real (static) shape of the tower+projector output. So a wrong
   image_tokens_per_image still fails exactly as a real run would. Real tensors take the original.

2. masked_scatter (inputs_embeds.masked_scatter(special_image_mask, image_features)). Its forward
   has a static shape, but its backward (masked_scatter_backward: grad.masked_select(mask)) has a
   data-dependent shape that FakeTensorMode refuses. It is replaced by an autograd Function that
   allocates what CUDA allocates: forward = aten's composite masked_scatter (expand + contiguous
   clone of inputs_embeds, then masked_scatter_), whose CUDA kernel (native/cuda/IndexKernel.cpp
   masked_scatter__cuda) allocates an int64 maskPrefixSum of self's full size [B, S, H] for the
   duration of the kernel; it saves only the mask for backward, as the derivative formula does.
   Backward (derivatives.yaml): grad_self = grad.masked_fill(mask, 0) when inputs_embeds needs a
   gradient; grad_source = grad.masked_select(mask).view(source.shape), where CUDA's masked_select
   (masked_select_out_cuda_impl) is index() with the expanded bool mask: nonzero() gives int64
   indices [n, 3] (n = placed image tokens x H, known by construction), then the result [n].
   Values are not computed (as harness.FlashLike); the same code runs for real and fake tensors,
   so the technique check covers it.

SigLIP's init (trunc_normal_) is replaced by a clamped normal draw as validation/vision.py does:
it tests weight values, which neither exist under fake tensors nor change memory.

Technique check (`--technique`): two tiny llavas (2-layer CLIP tower, hidden 64, image 32, patch 8,
+ 2-layer llama LM, hidden 128, vocab 1024; and 2-layer SigLIP + 2-layer tied Qwen2, "full"
strategy, feature layer -1) run with real tensors on the CPU and under FakeTensorMode give equal
tracked peaks and peak phases in all 15 cases; with tiny Qwen2-VL and Qwen2.5-VL configs (2 vision
blocks, windowed + full attention, 224-px images) 27 cases; with a tiny LLaVA-NeXT (32-px tiles,
2x2 and unpadded 1x2 grids) and a tiny LLaVA-OneVision (grids to 3x3, anyres_max_1 so the map is
resized, a two-image sample untiled) 37 cases in all (15 + 12 + 6 + 4); with tiny Idefics3 and
SmolVLM configs (32-px tiles of 8-px patches, pixel shuffle 2; 2x2 + global tiles and unsplit
ones; patch 1c replaced in the fake runs only) 12 more; with a tiny PaliGemma (token_type_ids
mask) 4 more: 53 in all, all equal: fixtures/vlm_technique.jsonl.

PALIGEMMA (model_type paligemma): one image of the tower's size first in the sequence, then
text; token_type_ids 0 on image and prefix (a quarter of the text), 1 on the suffix, whose
tokens are the labels; a prefill's prompt is all prefix. PaliGemma 2's Gemma 2 refuses SDPA:
its language model is built eager and its tower SDPA (build), transformers' per-part default.

IDEFICS3 / SMOLVLM (model_type idefics3, smolvlm): a point names `image_size`, the processor's
size["longest_edge"] (None: 4 x the tile, every released processor's default); the image is split
as image_processing_idefics3.py does (idefics_tiles), pixel_values [B, images x tiles, 3, S, S]
float32 and pixel_attention_mask [B, images x tiles, S, S] int64, as the processor returns them.

LLAVA-NEXT / LLAVA-ONEVISION (model_type llava_next, llava_onevision): a point names `image_size`,
the side of square images; pixel_values [images, tiles, 3, S, S] and image_sizes as the processor
returns them (OneVision: batch_num_images too), tiles and tokens computed by the model's own
functions (next_tiles, next_tokens, onevision_tokens). image_sizes keeps its values as a fake
constant (patch 1b); OneVision's placeholder check has Qwen2-VL's signature.

QWEN2-VL / QWEN2.5-VL (model_type qwen2_vl, qwen2_5_vl): a point names `image_size`, the side of
square images, resized as Qwen2VLImageProcessor's smart_resize does (multiples of 28); pixel_values
are the processor's flattened patches [patches, 3*2*14*14] with image_grid_thw, and mm_token_type_ids
marks the image tokens ((side/14)^2/4 per image). "frozen_vision" freezes `visual` except its
`merger` (Qwen's own fine-tuning recipe). Patches 1b (fake tensors only; see there): index tensors
keep their values as fake-tensor constants, get_rope_index and get_vision_window_index run on real
values with fake mode suspended.

GEMMA-3 (model_type gemma3 with a vision_config): 896-px images (4096 SigLIP patches, pooled to
mm_tokens_per_image = 256 tokens); the batch carries token_type_ids (1 at image tokens) as
Gemma3Processor returns them, so the language model builds its bidirectional-block masks. The
placeholder check is patched as LLaVA's (patch 1). Not in the technique check (no tiny Gemma-3
case yet): the same patches and kernels as the LLaVA cases.

    /work/venv/bin/python validation/vlm.py                # the matrix (resumable)
    /work/venv/bin/python validation/vlm.py --technique    # real vs fake on a tiny llava
"""
import argparse
import math
import contextlib
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "fixtures", "vlm.jsonl")
sys.path.insert(0, HERE)

import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.models.gemma3.modeling_gemma3 as _gemma3  # noqa: E402
import transformers.models.paligemma.modeling_paligemma as _paligemma  # noqa: E402
import transformers.models.llava.modeling_llava as _llava  # noqa: E402
import transformers.models.llava_next.modeling_llava_next as _llava_next  # noqa: E402
import transformers.models.llava_onevision.modeling_llava_onevision as _onevision  # noqa: E402
import types  # noqa: E402
import transformers.models.qwen2_5_vl.modeling_qwen2_5_vl as _qwen25  # noqa: E402
import transformers.models.qwen2_vl.modeling_qwen2_vl as _qwen2  # noqa: E402
import transformers.models.qwen3_vl.modeling_qwen3_vl as _qwen3  # noqa: E402
import transformers.models.qwen3_5.modeling_qwen3_5 as _qwen35  # noqa: E402
import transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe as _qwen3moe  # noqa: E402
import transformers.models.idefics3.modeling_idefics3 as _idefics3  # noqa: E402
import transformers.models.smolvlm.modeling_smolvlm as _smolvlm  # noqa: E402
import transformers.models.llama4.modeling_llama4 as _llama4  # noqa: E402
import torch._subclasses.fake_tensor as _fake_tensor  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402
from transformers import AutoConfig, AutoModelForImageTextToText  # noqa: E402

import harness  # noqa: E402,F401  (registers the CUDA SDPA, dropout and autocast emulation)
from harness import DTYPES, KERNELS, Tracker, result, run_resumable  # noqa: E402

import transformers.initialization as _hf_init  # noqa: E402


def _trunc_normal(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """As validation/vision.py (branch visval): torch.nn.init.trunc_normal_ (SigLIP's init) tests
    values (mask.any()) a fake tensor cannot answer. Weight values do not change memory and this
    runs while the model is built, before tracking starts: a normal draw clamped to [a, b]."""
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator).clamp_(a, b)


_hf_init.TORCH_INIT_FUNCTIONS["trunc_normal_"] = _trunc_normal

PLACED = [None]  # image tokens make_batch put into input_ids (known by construction)

# --------------------------------------------------------------------------------------------
# Patch 1: the placeholder check's .item() on a fake tensor

_orig_check = _llava.torch_compilable_check


def _check(cond, msg, error_type=ValueError):
    if isinstance(cond, FakeTensor):
        cond._is_all_true()  # the 0-d bool torch._check_tensor_all_with allocates before .item()
        if not _CHECK_OK[0]:
            raise error_type(msg() if callable(msg) else msg)
        return
    return _orig_check(cond, msg, error_type)


_CHECK_OK = [True]


def _placeholder_mask(orig):
    """get_placeholder_mask with the check's outcome decided from the image tokens placed."""
    def wrapped(self, input_ids, inputs_embeds, image_features):
        if isinstance(input_ids, FakeTensor):
            _CHECK_OK[0] = PLACED[0] * inputs_embeds.shape[-1] == image_features.numel()
        return orig(self, input_ids, inputs_embeds, image_features)
    return wrapped


# LLaVA, and Gemma-3 (Gemma3Model.get_placeholder_mask, through its own import of
# torch_compilable_check): the same two replacements.
for _module, _cls in ((_llava, _llava.LlavaModel), (_gemma3, _gemma3.Gemma3Model), (_paligemma, _paligemma.PaliGemmaModel),
                      (_llava_next, _llava_next.LlavaNextModel), (_llama4, _llama4.Llama4ForConditionalGeneration)):
    _module.torch_compilable_check = _check
    _cls.get_placeholder_mask = _placeholder_mask(_cls.get_placeholder_mask)


# --------------------------------------------------------------------------------------------
# Patch 1b (Qwen2-VL / Qwen2.5-VL): values of the small index tensors under fake tensors
#
# Qwen2-VL's vision tower and M-RoPE read values of image_grid_thw and mm_token_type_ids in Python
# (vision_utils.get_vision_attention_seqlens: repeat_interleave + cumsum; VisionAttention's sdpa
# path: torch.split(..., lengths.tolist()); get_rope_index: tolist/item; get_image_features:
# split sizes). FakeTensorMode keeps the real values of a tensor made by torch.tensor(...) as a
# "constant" and propagates them through ops whose inputs are all constants, but only for
# tensors of at most CONSTANT_NUMEL_LIMIT (1) elements. Raising the limit lets these index
# tensors (grid [images, 3], mm_token_type_ids [B, S], cu_seqlens ...) keep their values: every op
# still runs through the fake mode and the Tracker with its real shape (same allocations); only
# the Python-side reads get numbers. Big tensors (activations, weights) are never constants: they
# come from ops with non-constant inputs (randn, randint, parameters).
#
# get_vision_window_index (Qwen2.5-VL) builds its index from torch.arange (no tensor input, so not
# a constant) and filters it with a boolean mask (data-dependent size): for a fake grid it runs on
# the grid's real values with fake mode suspended and its two small results are made fake
# constants of the same shapes (window_index [patches/4] int64, cu_window_seqlens [windows+1]
# int32: a few KB), allocated by torch.tensor in the fake mode. The technique check runs the
# original with real tensors.
#
# The placeholder check (torch_compilable_check) is the LLaVA one (patch 1).
_fake_tensor.CONSTANT_NUMEL_LIMIT = 1 << 16
_orig_window_index = _qwen25.get_vision_window_index


def _window_index(grid_thw, *args, **kwargs):
    if isinstance(grid_thw, FakeTensor) and grid_thw.constant is not None:
        with _fake_tensor.unset_fake_temporarily():
            outs = _orig_window_index(grid_thw.constant.clone(), *args, **kwargs)
        # torch.tensor inside the fake mode: an allocation the Tracker sees, a constant with values.
        return tuple(torch.tensor(t.tolist(), dtype=t.dtype) for t in outs)
    return _orig_window_index(grid_thw, *args, **kwargs)


_qwen25.get_vision_window_index = _window_index
for _mod in (_qwen2, _qwen25):
    _mod.torch_compilable_check = _check


def _qwen_placeholder(orig):
    def mask(self, input_ids, inputs_embeds, image_features=None, video_features=None):
        if isinstance(input_ids, FakeTensor) and image_features is not None:
            _CHECK_OK[0] = PLACED[0] * inputs_embeds.shape[-1] == image_features.numel()
        return orig(self, input_ids, inputs_embeds, image_features, video_features)
    return mask


def _real(x):
    """A fake tensor's real values (a constant), or zeros of its shape (values unused: input_ids
    gives get_rope_index its shape only)."""
    if not isinstance(x, FakeTensor):
        return x
    return x.constant.clone() if x.constant is not None else torch.zeros(x.shape, dtype=x.dtype)


def _qwen_rope_index(orig):
    """get_rope_index (M-RoPE positions) builds its result from Python lists of 0-d tensors
    (torch.tensor(mrope_position_deltas)), which fake tensors cannot give. For fake inputs it runs
    on their real values with fake mode suspended; its results (position_ids [3, B, S] int64,
    rope_deltas [B, 1]) are then allocated as fake tensors of the same shapes, as the original
    leaves them (its temporaries are per-sample [3, S] int64 pieces, freed before it returns)."""
    def rope_index(self, input_ids, *args, **kwargs):
        if not isinstance(input_ids, FakeTensor):
            return orig(self, input_ids, *args, **kwargs)
        with _fake_tensor.unset_fake_temporarily():
            real = orig(self, _real(input_ids), *[_real(a) for a in args], **{k: _real(v) for k, v in kwargs.items()})
        return tuple(torch.empty(t.shape, dtype=t.dtype) for t in real)
    return rope_index


_qwen2.Qwen2VLModel.get_rope_index = _qwen_rope_index(_qwen2.Qwen2VLModel.get_rope_index)
_qwen25.Qwen2_5_VLModel.get_rope_index = _qwen_rope_index(_qwen25.Qwen2_5_VLModel.get_rope_index)
_qwen2.Qwen2VLModel.get_placeholder_mask = _qwen_placeholder(_qwen2.Qwen2VLModel.get_placeholder_mask)
# LLaVA-OneVision's check has Qwen2-VL's signature (image and video features).
_onevision.torch_compilable_check = _check
_onevision.LlavaOnevisionModel.get_placeholder_mask = _qwen_placeholder(_onevision.LlavaOnevisionModel.get_placeholder_mask)
_qwen25.Qwen2_5_VLModel.get_placeholder_mask = _qwen_placeholder(_qwen25.Qwen2_5_VLModel.get_placeholder_mask)
# Qwen3-VL, Qwen3-VL-MoE and Qwen3.5 (Qwen3_5ForConditionalGeneration: Qwen3-VL's tower without
# DeepStack, the Gated DeltaNet language model): the same placeholder check and M-RoPE index
# (patch 1b) on each family's own copies of the methods; Qwen3-VL's DeepStack boolean indexing is
# patch 1d below.
for _mod, _model in ((_qwen3, _qwen3.Qwen3VLModel), (_qwen3moe, _qwen3moe.Qwen3VLMoeModel), (_qwen35, _qwen35.Qwen3_5Model)):
    _mod.torch_compilable_check = _check
    _model.get_rope_index = _qwen_rope_index(_model.get_rope_index)
    _model.get_placeholder_mask = _qwen_placeholder(_model.get_placeholder_mask)


# --------------------------------------------------------------------------------------------
# Patch 1d (Qwen3-VL DeepStack): `_deepstack_process` adds the deepstack features of the first
# layers to the image positions: a clone of the hidden states, `hidden_states[visual_pos_masks, :]`
# (boolean indexing: a data-dependent shape FakeTensorMode refuses) plus the features, written
# back with index_put. For fake tensors only, the replacement runs the same ops with the count of
# image positions make_batch placed (known by construction): the boolean index as CUDA allocates
# it (nonzero's int64 indices, then the gathered rows; autograd's IndexBackward keeps the indices,
# and index_put's backward the indices too), the sum, and the in-place write into the clone.
# Real tensors take the original (the technique check runs both).

class _DeepstackAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, visual, k):
        idx = torch.empty(k, dtype=torch.long, device=hidden.device)  # nonzero of the mask
        rows = torch.empty(k, hidden.shape[-1], dtype=hidden.dtype, device=hidden.device)  # hidden[mask]
        del idx
        local = rows + visual
        del rows
        out = hidden.clone()
        # index_put_ of `local` at the same positions (values unused under fake tensors). The
        # backward keeps the boolean mask, which exists anyway (measured equal to the real run).
        ctx.k = k
        del local
        return out

    @staticmethod
    def backward(ctx, grad):
        # index_put_'s backward: the gradient with the written rows zeroed (a copy), and the
        # written rows' gradient grad[mask] (k rows), which flows to `visual` and, through
        # hidden[mask]'s IndexBackward, into a full-size zero tensor with those rows put back;
        # autograd accumulates the two full-size gradients of the clone's input.
        grad_hidden = grad.clone()
        grad_rows = torch.empty(ctx.k, grad.shape[-1], dtype=grad.dtype, device=grad.device)
        scattered = torch.zeros_like(grad)
        grad_hidden.add_(scattered)
        del scattered
        return grad_hidden, grad_rows, None


_orig_deepstack = _qwen3.Qwen3VLTextModel._deepstack_process


def _deepstack(self, hidden_states, visual_pos_masks, visual_embeds):
    if not isinstance(hidden_states, FakeTensor):
        return _orig_deepstack(self, hidden_states, visual_pos_masks, visual_embeds)
    visual_embeds = visual_embeds.to(hidden_states.device, hidden_states.dtype)
    b, s, _ = hidden_states.shape
    return _DeepstackAdd.apply(hidden_states.reshape(b * s, -1), visual_embeds, PLACED[0]).view(b, s, -1)


_qwen3.Qwen3VLTextModel._deepstack_process = _deepstack
# Qwen3-VL-MoE's own copy.
_orig_deepstack_moe = _qwen3moe.Qwen3VLMoeTextModel._deepstack_process


def _deepstack_moe(self, hidden_states, visual_pos_masks, visual_embeds):
    if not isinstance(hidden_states, FakeTensor):
        return _orig_deepstack_moe(self, hidden_states, visual_pos_masks, visual_embeds)
    return _deepstack(self, hidden_states, visual_pos_masks, visual_embeds)


_qwen3moe.Qwen3VLMoeTextModel._deepstack_process = _deepstack_moe


# --------------------------------------------------------------------------------------------
# Patch 1c (Idefics3 / SmolVLM): the three data-dependent reads of get_image_features
#
# Idefics3Model.get_image_features (SmolVLMModel's is the same plus one in-place `|=`) drops padding
# images by value: real_images_inds = (pixel_values == 0).sum(...) != numel, then
# pixel_values[real_images_inds] and pixel_attention_mask[real_images_inds] (boolean indexing: a
# data-dependent shape FakeTensorMode refuses), and splits the features by
# num_real_images_per_batch.tolist(). The vision transformer then turns the all-true patch mask
# into an attention mask, which transformers' masking_utils skips for SDPA when `mask.all()` —
# except under fake tensors, where is_tracing() keeps it (a CUDA run never would).
# make_batch never pads: every image is real and every patch valid, known by construction. For
# fake tensors only, the replacement below runs the original's tensor ops in the original order
# with those values: the boolean index as CUDA's index kernel allocates it (nonzero's int64 [k, 1]
# indices, then the gathered copy; the indices freed), `.tolist()` as [images] * batch, and the
# vision tower's bidirectional mask built from None (what `mask.all()` leads to). Real tensors
# take the original code; the technique check runs both on tiny Idefics3 and SmolVLM configs.

ALL_REAL = [True]  # every image real, every patch valid (make_batch never pads)


def _bool_index(x, k):
    """x[mask] for a bool mask over dim 0 with k true entries (CUDA: nonzero, then index)."""
    idx = torch.empty(k, 1, dtype=torch.long, device=x.device)
    out = torch.empty((k, *x.shape[1:]), dtype=x.dtype, device=x.device)
    del idx
    return out


def _idefics_features(orig, smol):
    def features(self, pixel_values, pixel_attention_mask=None, **kwargs):
        if not isinstance(pixel_values, FakeTensor):
            return orig(self, pixel_values, pixel_attention_mask, **kwargs)
        assert ALL_REAL[0]
        kwargs.pop("return_dict", None)
        batch_size, num_images = pixel_values.shape[:2]
        pixel_values = pixel_values.to(dtype=self.dtype)
        pixel_values = pixel_values.view(batch_size * num_images, *pixel_values.shape[2:])
        nb_values_per_image = pixel_values.shape[1:].numel()
        real_images_inds = (pixel_values == 0.0).sum(dim=(-1, -2, -3)) != nb_values_per_image
        if smol:
            real_images_inds[0] |= ~torch.any(real_images_inds)
        num_real_images_per_batch = real_images_inds.view(batch_size, num_images).sum(dim=1)
        k = batch_size * num_images
        pixel_values = _bool_index(pixel_values, k).contiguous()
        if pixel_attention_mask is None:
            pixel_attention_mask = torch.ones(size=(k, *pixel_values.shape[2:]), dtype=torch.bool, device=pixel_values.device)
        else:
            pixel_attention_mask = pixel_attention_mask.view(k, *pixel_attention_mask.shape[2:])
            pixel_attention_mask = _bool_index(pixel_attention_mask, k).contiguous()
        patch_size = self.config.vision_config.patch_size
        patches_subgrid = pixel_attention_mask.unfold(dimension=1, size=patch_size, step=patch_size)
        patches_subgrid = patches_subgrid.unfold(dimension=2, size=patch_size, step=patch_size)
        patch_attention_mask = (patches_subgrid.sum(dim=(-1, -2)) > 0).bool()
        image_outputs = self.vision_model(pixel_values=pixel_values, patch_attention_mask=patch_attention_mask,
                                          return_dict=True, **kwargs)
        image_features = self.connector(image_outputs.last_hidden_state)
        del num_real_images_per_batch
        image_outputs.pooler_output = [f.reshape(-1, f.shape[-1]) for f in image_features.split([num_images] * batch_size)]
        return image_outputs
    return features


def _vision_mask(orig):
    """create_bidirectional_mask in the Idefics3/SmolVLM vision transformers: an all-true fake
    patch mask goes in as None (SDPA's `mask.all()` skip, which is_tracing() bypasses)."""
    def mask(config, inputs_embeds, attention_mask, *args, **kwargs):
        if isinstance(attention_mask, FakeTensor) and ALL_REAL[0]:
            attention_mask = None
        return orig(config, inputs_embeds, attention_mask, *args, **kwargs)
    return mask


def _idefics_merger(orig):
    def merger(self, input_ids, inputs_embeds, image_hidden_states):
        if isinstance(input_ids, FakeTensor):
            _CHECK_OK[0] = PLACED[0] * inputs_embeds.shape[-1] == image_hidden_states.numel()
        return orig(self, input_ids, inputs_embeds, image_hidden_states)
    return merger


for _mod, _cls, _smol in ((_idefics3, _idefics3.Idefics3Model, False), (_smolvlm, _smolvlm.SmolVLMModel, True)):
    _cls.get_image_features = _idefics_features(_cls.get_image_features, _smol)
    _mod.create_bidirectional_mask = _vision_mask(_mod.create_bidirectional_mask)
    _mod.torch_compilable_check = _check
_idefics3.Idefics3Model.inputs_merger = _idefics_merger(_idefics3.Idefics3Model.inputs_merger)
_smolvlm.SmolVLMModel.get_placeholder_mask = _placeholder_mask(_smolvlm.SmolVLMModel.get_placeholder_mask)


# --------------------------------------------------------------------------------------------
# Patch 2: masked_scatter with CUDA's allocations and a backward of known size


class CudaMaskedScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, embeds, mask, source):
        m, e = torch.broadcast_tensors(mask, embeds)  # expand_outplace: views
        out = e.clone(memory_format=torch.contiguous_format)
        prefix = torch.empty(out.shape, dtype=torch.long, device=out.device)  # maskPrefixSum
        if not isinstance(out, FakeTensor):
            out.masked_scatter_(m, source)  # values for the real run; no allocation on the CPU
        del prefix
        ctx.save_for_backward(mask)
        ctx.source_shape = source.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        g_self = grad.masked_fill(mask, 0) if ctx.needs_input_grad[0] else None
        g_src = None
        if ctx.needs_input_grad[2]:
            n = PLACED[0] * grad.shape[-1]
            idx = torch.empty(n, grad.dim(), dtype=torch.long, device=grad.device)  # nonzero(mask)
            g_src = torch.empty(n, dtype=grad.dtype, device=grad.device).view(ctx.source_shape)
            del idx
        return g_self, None, g_src


_orig_masked_scatter = torch.Tensor.masked_scatter


def _masked_scatter(self, mask, source):
    if mask.dtype == torch.bool and source.dtype == self.dtype:
        return CudaMaskedScatter.apply(self, mask, source)
    return _orig_masked_scatter(self, mask, source)


torch.Tensor.masked_scatter = _masked_scatter


# --------------------------------------------------------------------------------------------
# The model and the batch


def build(raw_config, precision, attention):
    raw = dict(raw_config)
    model_type = raw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **raw)
    if model_type == "paligemma" and cfg.text_config.model_type == "gemma2" and attention == "sdpa":
        # Gemma 2 refuses SDPA (soft-capping): loaded without an attn_implementation, transformers
        # gives each part its own default, SDPA for the SigLIP tower and eager for Gemma 2.
        attention = {"": "sdpa", "vision_config": "sdpa", "text_config": "eager"}
    model = AutoModelForImageTextToText.from_config(cfg, attn_implementation=attention, dtype=DTYPES[precision])
    return cfg, model


def is_qwen(cfg):
    return cfg.model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5")


def is_qwen3(cfg):
    """Qwen3-VL and Qwen3.5: 16-px patches and Qwen3-VL's processor bounds."""
    return cfg.model_type in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5")


def qwen_side(cfg, side):
    """The side the processor resizes a square image of `side` pixels to
    (models/qwen2_vl/image_processing_qwen2_vl.py smart_resize): a multiple of patch_size x
    merge_size (28) with min_pixels 3136 and max_pixels 12845056, the values of Qwen2-VL-7B-Instruct's
    preprocessor_config.json (Python's round: halves to even)."""
    # smart_resize's lines for a square image (the module itself imports torchvision, absent here).
    # Qwen3-VL's preprocessor_config.json: size {"shortest_edge": 65536, "longest_edge": 16777216}
    # (256² to 4096² pixels), patch 16, merge 2 (factor 32).
    lo, hi = (65536, 16777216) if is_qwen3(cfg) else (3136, 12845056)
    f = cfg.vision_config.patch_size * cfg.vision_config.spatial_merge_size
    h = round(side / f) * f
    if h * h > hi:
        h = max(f, math.floor(side / math.sqrt(side * side / hi) / f) * f)
    elif h * h < lo:
        h = math.ceil(side * math.sqrt(lo / (side * side)) / f) * f
    return h


def is_gemma(cfg):
    return cfg.model_type == "gemma3"


def is_paligemma(cfg):
    return cfg.model_type == "paligemma"


def is_idefics(cfg):
    """Idefics3 and SmolVLM (the same model; SmolVLM's processor defaults differ)."""
    return cfg.model_type in ("idefics3", "smolvlm")


def idefics_tiles(cfg, longest_edge=None):
    """Tiles through the tower for one square image: Idefics3ImageProcessor resizes the longest
    edge to size["longest_edge"] (default 4 x the tower's image_size, as every Idefics3/SmolVLM
    preprocessor_config.json has it), rounds it up to a multiple of max_image_size (the tower's
    image_size) and splits it into ceil(side / tile)^2 tiles plus the whole image resized to one
    tile; a side not above the tile: one tile, unsplit. The lines of
    image_processing_idefics3.py get_number_of_image_patches (with its two resize helpers) for a
    square image, transcribed: the module imports PIL/torchvision, absent here."""
    t = cfg.vision_config.image_size
    edge = longest_edge or 4 * t
    h = w = edge
    # _resize_output_size_rescale_to_max_len(h, w, max_len=edge): width >= height branch
    w = edge
    h = int(w / (w / h))
    h += h % 2
    # _resize_output_size_scale_below_upper_bound(h, w, max_len=4096)
    if w >= h and w > 4096:
        h, w = int(4096 / (w / h)), 4096
    elif h > w and h > 4096:
        h, w = 4096, int(4096 * (w / h))
    if w >= h:
        rw, rh = math.ceil(w / t) * t, math.ceil(h / t) * t
    else:
        rh, rw = math.ceil(h / t) * t, math.ceil(w / t) * t
    if rh > t or rw > t:
        return math.ceil(rh / t) * math.ceil(rw / t) + 1
    return 1


def idefics_seq_len(cfg):
    """Image tokens per tile: Idefics3Model.image_seq_len ((image/patch)^2 / scale_factor^2)."""
    v = cfg.vision_config
    return int(((v.image_size // v.patch_size) ** 2) / (cfg.scale_factor ** 2))


def is_llama4(cfg):
    return cfg.model_type == "llama4"


def llama4_tiles(cfg, side=None):
    """Tiles through the tower for one square image of `side` pixels (None: one tile):
    Llama4ImageProcessor (max_patches 16, resize_to_max_canvas False) picks, among the canvases of
    at most 16 tiles, the smallest n × n that holds the image without downscaling (n·336 ≥ side),
    else the largest (4 × 4); more than one tile adds the global image resized to one tile
    (image_processing_llama4.py find_supported_resolutions, get_best_fit, _preprocess)."""
    tile = cfg.vision_config.image_size
    if side is None:
        return 1
    n = min(max(-(-side // tile), 1), 4)
    return n * n + (1 if n > 1 else 0)


def llama4_tile_tokens(cfg):
    """Language-model tokens per tile: the tower's patches after the pixel shuffle
    (Llama4Processor: (336 / 14)^2 / round(1 / ratio^2) = 144)."""
    v = cfg.vision_config
    return (v.image_size // v.patch_size) ** 2 // int(round(1 / v.pixel_shuffle_ratio ** 2))


def is_next(cfg):
    """LLaVA-NeXT and LLaVA-OneVision (the same anyres tiling; OneVision resizes big grids and
    leaves images of multi-image samples untiled)."""
    return cfg.model_type in ("llava_next", "llava_onevision")


def is_onevision(cfg):
    return cfg.model_type == "llava_onevision"


def next_side(cfg, side):
    """LLaVA-NeXT's default image: the side of the largest square in image_grid_pinpoints (672 for
    llava-v1.6: a 2x2 grid; any larger square image gets the same tiles and tokens)."""
    if side:
        return side
    squares = [h for h, w in cfg.image_grid_pinpoints if h == w]
    return max(squares) if squares else max(max(p) for p in cfg.image_grid_pinpoints)


def next_tiles(cfg, side, images=1):
    """Tiles through the tower for a square image of `side` px: the model's own
    image_size_to_num_patches (grid of the best resolution + the base image); OneVision's images
    in multi-image samples: the base image only (its need_patching)."""
    if is_onevision(cfg) and images > 1:
        return 1
    return _llava_next.image_size_to_num_patches([side, side], cfg.image_grid_pinpoints, cfg.vision_config.image_size)


def onevision_tokens(cfg, side, images):
    """LLaVA-OneVision: the model's own pack_image_features run on zeros of the tiles' feature
    shape (feature width 1), which gives the packed length (unpad, anyres_max resize, newlines)."""
    v = cfg.vision_config
    per = v.image_size // v.patch_size
    tiles = next_tiles(cfg, side, images)
    _, lens = _onevision.LlavaOnevisionModel.pack_image_features(
        types.SimpleNamespace(config=cfg), [torch.zeros(tiles, per * per, 1)], torch.tensor([[side, side]]),
        image_newline=torch.zeros(1), vision_aspect_ratio=cfg.vision_aspect_ratio)
    return int(lens[0])


def next_tokens(cfg, side):
    """LLM tokens of one square image: the base tile's features plus the grid's, unpadded to the
    image's aspect ratio, plus one image_newline per row, computed with the model's own functions
    (get_anyres_image_grid_shape, unpad_image) on a real tensor of the feature grid's shape."""
    v = cfg.vision_config
    per = v.image_size // v.patch_size
    base = per * per + (1 if cfg.vision_feature_select_strategy == "full" and v.model_type == "clip_vision_model" else 0)
    gh, gw = _llava_next.get_anyres_image_grid_shape([side, side], cfg.image_grid_pinpoints, v.image_size)
    grid = _llava_next.unpad_image(torch.zeros(1, gh * per, gw * per), [side, side])
    rows, cols = grid.shape[1:]
    return base + rows * (cols + 1)


def image_tokens(cfg, side=None, images=1):
    """LLM tokens per image. LLaVA: the tower's patches (+ CLIP's CLS), minus the CLS for "default".
    LLaVA-NeXT: next_tokens.
    Qwen2-VL: (side/14)^2 patches, merged 2x2 by the PatchMerger. Gemma-3: mm_tokens_per_image
    (the 64x64 patch grid average-pooled to 16x16)."""
    v = cfg.vision_config
    if is_llama4(cfg):
        return llama4_tiles(cfg, side) * llama4_tile_tokens(cfg)
    if is_gemma(cfg):
        return cfg.mm_tokens_per_image
    if is_idefics(cfg):
        return idefics_tiles(cfg, side) * idefics_seq_len(cfg)
    if is_paligemma(cfg):
        return (v.image_size // v.patch_size) ** 2
    if is_qwen(cfg):
        return (qwen_side(cfg, side) // v.patch_size) ** 2 // v.spatial_merge_size ** 2
    if is_onevision(cfg):
        return onevision_tokens(cfg, next_side(cfg, side), images)
    if is_next(cfg):
        return next_tokens(cfg, next_side(cfg, side))
    tower = (v.image_size // v.patch_size) ** 2 + (1 if v.model_type == "clip_vision_model" else 0)
    return tower - (1 if cfg.vision_feature_select_strategy == "default" else 0)


def qwen_pixels(cfg, batch, images, side):
    """pixel_values as Qwen2VLImageProcessor returns them: every patch flattened to
    channels x temporal_patch_size x patch^2 (an image is repeated to 2 frames), float32
    [patches, 1176]; image_grid_thw [images, 3] = (1, side/14, side/14)."""
    v = cfg.vision_config
    grid = qwen_side(cfg, side) // v.patch_size
    pix = torch.randn(batch * images * grid * grid, v.in_channels * v.temporal_patch_size * v.patch_size ** 2)
    return pix, torch.tensor([[1, grid, grid]] * (batch * images))


def make_batch(cfg, batch, seq, images, side=None):
    """input_ids, labels, pixel_values (all tracked as inputs)."""
    per = image_tokens(cfg, side, images)
    tok = cfg.image_token_id
    if images * per > seq:
        raise ValueError(f"{images} images x {per} tokens do not fit in seq {seq}")
    text = seq - images * per
    ids = torch.randint(0, min(tok, cfg.text_config.vocab_size), (batch, seq))
    is_img = torch.zeros(batch, seq, dtype=torch.bool)
    gap = text // (images + 1)  # text before each image block, the rest after the last
    for i in range(images):
        start = gap * (i + 1) + per * i
        is_img[:, start:start + per] = True
    ids[is_img] = tok
    PLACED[0] = batch * images * per
    labels = ids.masked_fill(is_img, -100)
    v = cfg.vision_config
    if is_qwen(cfg):
        pix, grid = qwen_pixels(cfg, batch, images, side)
        # mm_token_type_ids (1 at image tokens), as the processor returns them; built by
        # torch.tensor so that fake tensors keep its values (patch 1b).
        types = [[0] * seq for _ in range(batch)]
        for i in range(images):
            start = gap * (i + 1) + per * i
            for row in types:
                row[start:start + per] = [1] * per
        extra = {"image_grid_thw": grid, "mm_token_type_ids": torch.tensor(types)}
        return {"input_ids": ids, "labels": labels, "pixel_values": pix, **extra}
    if is_next(cfg):
        # LlavaNextImageProcessor: [images, tiles, 3, S, S] float32 (base image + grid tiles) and
        # image_sizes [images, 2] (original height, width), built by torch.tensor so that fake
        # tensors keep its values (patch 1b): the model reads them with tolist().
        s = next_side(cfg, side)
        pix = torch.randn(batch * images, next_tiles(cfg, s, images), 3, v.image_size, v.image_size)
        extra = {"batch_num_images": torch.tensor([images] * batch)} if is_onevision(cfg) else {}
        return {"input_ids": ids, "labels": labels, "pixel_values": pix,
                "image_sizes": torch.tensor([[s, s]] * (batch * images)), "attention_mask": torch.ones_like(ids), **extra}
    if is_paligemma(cfg):
        # PaliGemmaProcessor with a suffix (training): the image tokens first, then bos, the
        # prefix and "\n" (token_type_ids 0: attended bidirectionally with the image), then the
        # suffix (token_type_ids 1, causal; the labels, -100 elsewhere). Here a quarter of the
        # text is prefix. Inference (no suffix): every token is prefix.
        pg_ids = torch.randint(0, min(tok, cfg.text_config.vocab_size), (batch, seq))
        n_img = images * per
        pg_ids[:, :n_img] = tok
        prefix = n_img + (seq - n_img) // 4
        token_types = torch.zeros(batch, seq, dtype=torch.long)
        token_types[:, prefix:] = 1
        pg_labels = pg_ids.masked_fill(token_types == 0, -100)
        pix = torch.randn(batch * images, 3, v.image_size, v.image_size)
        return {"input_ids": pg_ids, "labels": pg_labels, "pixel_values": pix, "token_type_ids": token_types,
                "attention_mask": torch.ones_like(pg_ids)}
    if is_idefics(cfg):
        # Idefics3ImageProcessor: pixel_values [B, images x tiles, 3, S, S] float32 (every tile of
        # every image of a sample in one axis) and pixel_attention_mask [B, images x tiles, S, S]
        # int64 (make_pixel_mask: ones where the image is, no padding for equal tiles).
        n = images * idefics_tiles(cfg, side)
        pix = torch.randn(batch, n, 3, v.image_size, v.image_size)
        mask = torch.ones(batch, n, v.image_size, v.image_size, dtype=torch.long)
        return {"input_ids": ids, "labels": labels, "pixel_values": pix, "pixel_attention_mask": mask,
                "attention_mask": torch.ones_like(ids)}
    if is_llama4(cfg):
        # Llama4ImageProcessor: every tile of every image in one axis, [B x images x tiles, 3, 336,
        # 336], bfloat16 (image_processing_llama4.py rescales and normalizes in torch.bfloat16; the
        # unfold's linear takes them as they come: fp32 pixels fail against bf16 weights on CUDA,
        # "expected mat1 and mat2 to have the same dtype", seen on the H100, where FakeTensorMode
        # let them through).
        pix = torch.randn(batch * images * llama4_tiles(cfg, side), 3, v.image_size, v.image_size, dtype=torch.bfloat16)
        return {"input_ids": ids, "labels": labels, "pixel_values": pix, "attention_mask": torch.ones_like(ids)}
    pix = torch.randn(batch * images, 3, v.image_size, v.image_size)
    if is_gemma(cfg):
        # Gemma3Processor returns token_type_ids (1 at image tokens), which Trainer passes and
        # the model turns into bidirectional attention within each image block.
        return {"input_ids": ids, "labels": labels, "pixel_values": pix, "token_type_ids": is_img.long(),
                "attention_mask": torch.ones_like(ids)}
    return {"input_ids": ids, "labels": labels, "pixel_values": pix, "attention_mask": torch.ones_like(ids)}


def tower_of(model):
    """The vision tower module (Qwen2-VL: `visual`, whose `merger` is the projector; Idefics3:
    `vision_model`; Llama 4: `vision_model` on the model itself, its pixel-shuffle MLP inside)."""
    m = getattr(model, "model", model)
    return m.visual if hasattr(m, "visual") else m.vision_model if hasattr(m, "vision_model") else m.vision_tower


def projector_of(model):
    m = getattr(model, "model", model)
    return m.visual.merger if hasattr(m, "visual") else m.connector if hasattr(m, "connector") else m.multi_modal_projector


def lm_of(model):
    """The language model (Idefics3: `text_model`)."""
    m = getattr(model, "model", model)
    return m.text_model if hasattr(m, "text_model") else m.language_model


def model_inputs(inputs):
    """What the model's forward takes from the batch (not labels, not the unused all-ones mask)."""
    return {k: v for k, v in inputs.items() if k not in ("labels", "attention_mask")}


def freeze(model, train):
    if train in ("frozen_vision", "projector_only"):
        tower_of(model).requires_grad_(False)
        # Qwen2-VL's merger (the projector) sits inside `visual`: it trains, as in Qwen's own
        # fine-tuning recipe (qwen-vl-finetune: tune_mm_vision False, tune_mm_mlp True).
        projector_of(model).requires_grad_(True)
        # Qwen3-VL's DeepStack mergers map tower features into the language model as the merger
        # does: they train with it (vram counts them with the projector).
        deepstack = getattr(tower_of(model), "deepstack_merger_list", None)
        if deepstack is not None:
            deepstack.requires_grad_(True)
    if train == "projector_only":
        lm_of(model).requires_grad_(False)
        model.lm_head.requires_grad_(False)
    elif train not in ("full", "frozen_vision"):
        raise ValueError(train)


def count(params):
    seen, n = set(), 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def parts(model):
    m = getattr(model, "model", model)
    lm = {id(p) for p in lm_of(model).parameters()}
    proj = {id(p) for p in projector_of(model).parameters()}
    return {"vision_tower": count(p for p in tower_of(model).parameters() if id(p) not in proj),
            "projector": count(projector_of(model).parameters()),
            "language_model": count(lm_of(model).parameters()),
            "lm_head_untied": count(p for p in model.get_output_embeddings().parameters() if id(p) not in lm),
            # LLaVA-NeXT's image_newline (one text-width vector), outside tower, projector and LM.
            "image_newline": getattr(m, "image_newline", torch.empty(0)).numel()}


def label_vision(model, tr, seen):
    """Storages created while the vision tower runs forward -> "vision activations". `seen`
    receives the bytes still in that category when the tower's forward returns (what it saved for
    backward plus its outputs), the largest over the steps."""
    stack = []

    def pre(mod, args):
        stack.append(tr.category)
        if tr.category == "activations":
            tr.category = "vision activations"

    def post(mod, args, out):
        # whether the tower's output is part of the autograd graph (frozen tower: only when
        # something made its input require grad, e.g. enable_input_require_grads)
        seen["vision_output_requires_grad"] = bool(out.last_hidden_state.requires_grad)
        if tr.category == "vision activations":
            seen["vision_activations_after_tower"] = max(seen.get("vision_activations_after_tower", 0),
                                                         tr.cats.get("vision activations", 0))
        tr.category = stack.pop()

    def proj(mod, args, out):
        seen["projector_output_dtype"] = str(out.dtype).replace("torch.", "")

    tower_of(model).register_forward_pre_hook(pre)
    tower_of(model).register_forward_hook(post)
    projector_of(model).register_forward_hook(proj)


def checkpointed(model):
    n = lambda mod: sum(1 for x in mod.modules() if getattr(x, "gradient_checkpointing", False))
    return {"vision_tower": n(tower_of(model)), "language_model": n(lm_of(model))}


def track_model(tr, model):
    for p in model.parameters():
        tr.track(p, "parameters")
    for b in model.buffers():
        tr.track(b, "parameters")


def train(raw_config, batch, seq, images, train="frozen_vision", precision="bf16-mixed", checkpointing=False,
          attention="sdpa", steps=2, fake=True, seed=0, image_size=None):
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    amp = precision.endswith("-mixed")
    with mode:
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention)
        freeze(model, train)
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        seen = {}
        label_vision(model, tr, seen)
        counts = (count(model.parameters()), count(p for p in model.parameters() if p.requires_grad))
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: tr.relabel(p.grad, "gradients"))
        with tr:
            track_model(tr, model)
            for step in range(steps):
                tr.category = "inputs"
                inputs = make_batch(cfg, batch, seq, images, image_size)
                tr.phase, tr.category = f"forward{step}", "activations"
                half = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
                ctx = torch.autocast("cpu", dtype=half) if amp else contextlib.nullcontext()
                with ctx:
                    loss = model(**model_inputs(inputs), labels=inputs["labels"]).loss
                if step == steps - 1:  # what the forward holds for backward, by category
                    seen["categories_after_forward"] = {k: v for k, v in tr.cats.items() if v}
                tr.phase, tr.category = f"backward{step}", "backward"
                loss.backward()
                del loss
                tr.phase, tr.category = f"optimizer{step}", "optimizer temporaries"
                opt.step()
                for state in opt.state.values():
                    for v in state.values():
                        if isinstance(v, torch.Tensor):
                            tr.relabel(v, "optimizer states")
                opt.zero_grad(set_to_none=True)
                del inputs
    r = result(tr)
    r["parameters"], r["trainable_parameters"] = counts
    r["parameters_by_part"] = parts(model)
    r["checkpointed_layers"] = checkpointed(model) if checkpointing else None
    r.update(seen)
    return r


def infer(raw_config, batch, seq, images, precision="bf16", attention="sdpa", fake=True, seed=0, image_size=None):
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode, torch.no_grad():
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention)
        model.eval()
        seen = {}
        label_vision(model, tr, seen)
        counts = (count(model.parameters()), count(model.parameters()))
        with tr:
            track_model(tr, model)
            tr.category = "inputs"
            inputs = make_batch(cfg, batch, seq, images, image_size)
            if is_paligemma(cfg):  # a prompt without a suffix: all prefix (token_type_ids 0)
                inputs["token_type_ids"] = torch.zeros_like(inputs["token_type_ids"])
            tr.phase, tr.category = "prefill", "activations"
            out = model(**model_inputs(inputs), use_cache=True, logits_to_keep=1)
            tokens = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(-1, keepdim=True)
            del out, tokens
    r = result(tr)
    r["parameters"], r["trainable_parameters"] = counts
    r["parameters_by_part"] = parts(model)
    r["checkpointed_layers"] = None
    r.update(seen)
    return r


# --------------------------------------------------------------------------------------------
# The matrix

DIR = "validation/configs/vlm"
DEVELOPMENT = ["llava-interleave-qwen-0.5b-hf"]
HELD_OUT = ["llava-1.5-7b-hf", "llava-interleave-qwen-7b-hf", "llava-1.5-13b-hf"]


def points():
    out = []

    def pt(model, train, precision, batch, seq, images=1, checkpointing=False, mode="train"):
        out.append(dict(model=model, train=train if mode == "train" else None, mode=mode, precision=precision,
                        batch=batch, seq=seq, images=images, checkpointing=checkpointing, attention="sdpa"))

    for m in DEVELOPMENT + HELD_OUT:
        for t in ("full", "frozen_vision", "projector_only"):
            pt(m, t, "bf16-mixed", 1, 2048)
        pt(m, "frozen_vision", "bf16-mixed", 2, 1024)
        if "interleave" in m:
            pt(m, "frozen_vision", "bf16-mixed", 1, 4096, images=4)
        pt(m, "frozen_vision", "bf16-mixed", 2, 2048, checkpointing=True)
        pt(m, "frozen_vision", "bf16", 1, 2048)
        pt(m, None, "bf16", 4, 2048, mode="infer")
        if m == "llava-1.5-7b-hf":
            # Past the optimizer step: the end of forward, where the training-time KV cache
            # (text_config use_cache, fp32 keys and values) lives.
            pt(m, "full", "bf16-mixed", 4, 4096)
    out += qwen_points()
    out += qwen3_points()
    out += qwen35_points()
    out += gemma_points()
    out += next_points()
    out += onevision_points()
    out += idefics_points()
    out += paligemma_points()
    dev = (DEVELOPMENT + QWEN_DEVELOPMENT + QWEN3_DEVELOPMENT + QWEN35_DEVELOPMENT + GEMMA_DEVELOPMENT + NEXT_DEVELOPMENT + OV_DEVELOPMENT + IDEFICS_DEVELOPMENT
           + PALIGEMMA_DEVELOPMENT)
    for p in out:
        p["set"] = "development" if p["model"] in dev else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


QWEN_DEVELOPMENT = ["Qwen2-VL-2B-Instruct", "Qwen2.5-VL-3B-Instruct"]
QWEN_HELD_OUT = ["Qwen2-VL-7B-Instruct", "Qwen2.5-VL-7B-Instruct"]


def qwen_points():
    """Qwen2-VL / Qwen2.5-VL: images of `image_size` pixels (448: 256 image tokens; 672: 576), the
    points qwen3_family_points lists."""
    return qwen3_family_points(QWEN_DEVELOPMENT, QWEN_HELD_OUT)


# Qwen3-VL: the 2B for development; the 4B and 8B held out (configs/vlm/SOURCES.md).
QWEN3_DEVELOPMENT = ["Qwen3-VL-2B-Instruct", "Qwen3-VL-MoE-dev"]
QWEN3_HELD_OUT = ["Qwen3-VL-4B-Instruct", "Qwen3-VL-8B-Instruct", "Qwen3-VL-30B-A3B-Instruct"]


def qwen3_family_points(development, held_out, autocast_only=False):
    """The Qwen vision-language points: training with the tower trained and frozen, more images,
    checkpointing, pure bf16, a prefill, and 896-px images (whose tower activations decide the
    backward peak). Qwen3-VL and Qwen3.5 resize to multiples of 32 (448: 784 patches, 196 image
    tokens; 672: 441 tokens; 896: 784 tokens).
    `autocast_only`: no pure-bf16 training (Qwen3.5's Gated DeltaNet layers were measured under
    autocast) and no checkpointed 896-px point (its recomputed mixers are slow on the CPU)."""
    out = []

    def pt(model, train, precision, batch, seq, images=1, checkpointing=False, mode="train", image_size=448):
        out.append(dict(model=model, train=train if mode == "train" else None, mode=mode, precision=precision,
                        batch=batch, seq=seq, images=images, checkpointing=checkpointing, attention="sdpa",
                        image_size=image_size))

    for m in development + held_out:
        dev = m in development
        pt(m, "full", "bf16-mixed", 1, 2048)
        pt(m, "frozen_vision", "bf16-mixed", 1, 2048)
        pt(m, "frozen_vision", "bf16-mixed", 2, 1024, image_size=672)
        if dev:
            pt(m, "frozen_vision", "bf16-mixed", 1, 2048, images=4)
            pt(m, "full", "bf16-mixed", 1, 2048, checkpointing=True)
        pt(m, "frozen_vision", "bf16-mixed", 2, 2048, checkpointing=True)
        if not autocast_only:
            pt(m, "frozen_vision", "bf16", 1, 2048)
        pt(m, None, "bf16", 2, 2048, mode="infer")
        pt(m, "full", "bf16-mixed", 1, 2048, image_size=896)
        if dev and not autocast_only:
            pt(m, "frozen_vision", "bf16-mixed", 1, 2048, image_size=896, checkpointing=True)
    return out


def qwen3_points():
    return qwen3_family_points(QWEN3_DEVELOPMENT, QWEN3_HELD_OUT)


# Qwen3.5 with images (Qwen3_5ForConditionalGeneration): the 0.8B for development, the 27B held
# out (their configs are validation/configs/ssm's, copied).
QWEN35_DEVELOPMENT = ["Qwen3.5-0.8B"]
QWEN35_HELD_OUT = ["Qwen3.5-27B"]


def qwen35_points():
    return qwen3_family_points(QWEN35_DEVELOPMENT, QWEN35_HELD_OUT, autocast_only=True)


GEMMA_DEVELOPMENT = ["gemma-3-4b-it"]
GEMMA_HELD_OUT = ["gemma-3-12b-it", "gemma-3-27b-it"]


def gemma_points():
    """Gemma-3: 896-px images (4096 patches through the tower, 256 tokens each), token_type_ids
    passed as the processor returns them."""
    out = []

    def pt(model, train, precision, batch, seq, images=1, checkpointing=False, mode="train"):
        out.append(dict(model=model, train=train if mode == "train" else None, mode=mode, precision=precision,
                        batch=batch, seq=seq, images=images, checkpointing=checkpointing, attention="sdpa"))

    for m in GEMMA_DEVELOPMENT + GEMMA_HELD_OUT:
        pt(m, "full", "bf16-mixed", 1, 1024)
        pt(m, "frozen_vision", "bf16-mixed", 2, 1024)
        pt(m, "frozen_vision", "bf16-mixed", 1, 2048, images=2)
        pt(m, "frozen_vision", "bf16-mixed", 2, 1024, checkpointing=True)
        pt(m, "frozen_vision", "bf16", 1, 1024)
        pt(m, None, "bf16", 2, 1024, mode="infer")
        # Activations large enough to put the peak in backward, not at the optimizer step.
        pt(m, "frozen_vision", "bf16-mixed", 4, 2048, images=2)
        pt(m, "full", "bf16-mixed", 2, 2048, images=4)
        pt(m, "frozen_vision", "bf16", 4, 2048, images=2)
        pt(m, "full", "bf16-mixed", 4, 2048, images=2, checkpointing=True)
    return out


def sized_points(out, default_side):
    """A point maker for models whose points name their square image side (`image_size`)."""
    def pt(model, train, precision, batch, seq, images=1, checkpointing=False, mode="train", image_size=default_side):
        out.append(dict(model=model, train=train if mode == "train" else None, mode=mode, precision=precision,
                        batch=batch, seq=seq, images=images, checkpointing=checkpointing, attention="sdpa",
                        image_size=image_size))
    return pt


NEXT_DEVELOPMENT = ["llava-v1.6-mistral-7b-hf"]
NEXT_HELD_OUT = ["llava-next-vicuna-7b-from-video-hf"]


def next_points():
    """LLaVA-NeXT: square images of `image_size` px (672: 2x2 tiles + the base image, 5 x 577 tower
    tokens, 2928 LM tokens; 336: a 1x2 grid unpadded to a square, 3 tiles, 1176 LM tokens)."""
    out = []
    pt = sized_points(out, 672)
    for m in NEXT_DEVELOPMENT + NEXT_HELD_OUT:
        pt(m, "full", "bf16-mixed", 1, 4096)
        pt(m, "frozen_vision", "bf16-mixed", 1, 4096)
        pt(m, "projector_only", "bf16-mixed", 1, 4096)
        pt(m, "frozen_vision", "bf16-mixed", 2, 2048, image_size=336)
        pt(m, "frozen_vision", "bf16-mixed", 1, 4096, images=2, image_size=336)
        pt(m, "frozen_vision", "bf16-mixed", 2, 4096, checkpointing=True)
        pt(m, "frozen_vision", "bf16", 1, 4096)
        pt(m, None, "bf16", 2, 4096, mode="infer")
        # Activations past the optimizer step's weights and states: the peak in backward (a
        # trained tower over 4 x 5 tiles; two 336-px images per sample; pure bf16).
        pt(m, "full", "bf16-mixed", 4, 4096)
        pt(m, "frozen_vision", "bf16-mixed", 4, 4096, images=2, image_size=336)
        pt(m, "frozen_vision", "bf16", 4, 4096)
    return out


OV_DEVELOPMENT = ["llava-onevision-qwen2.5-0.5b-constructed"]
OV_HELD_OUT = ["llava-onevision-qwen2.5-1.5b-constructed"]


def onevision_points():
    """LLaVA-OneVision: square images of `image_size` px (2304, the largest square pinpoint: 6x6
    tiles + base = 37 through the tower, the 162x162 feature map resized to 81x81, 7371 LM
    tokens; 768: 2x2 + base, 3699 tokens); three images per sample are untiled (730 each)."""
    out = []
    pt = sized_points(out, 2304)
    for m in OV_DEVELOPMENT + OV_HELD_OUT:
        pt(m, "full", "bf16-mixed", 1, 8192)
        pt(m, "frozen_vision", "bf16-mixed", 1, 8192)
        pt(m, "full", "bf16-mixed", 2, 4096, image_size=768)
        pt(m, "frozen_vision", "bf16-mixed", 2, 4096, image_size=768)
        pt(m, "frozen_vision", "bf16-mixed", 2, 4096, images=3, image_size=768)
        pt(m, "frozen_vision", "bf16-mixed", 2, 8192, checkpointing=True)
        pt(m, "frozen_vision", "bf16", 1, 8192)
        pt(m, None, "bf16", 1, 8192, mode="infer")
    return out


PALIGEMMA_DEVELOPMENT = ["paligemma-3b-pt-224-constructed", "paligemma2-3b-pt-224-constructed"]
PALIGEMMA_HELD_OUT = ["paligemma-3b-pt-448-constructed", "paligemma2-10b-pt-448-constructed"]


def paligemma_points():
    """PaliGemma / PaliGemma 2: one image of the tower's size (224 px: 256 tokens; 448: 1024),
    token_type_ids as the processor returns them with a suffix (see make_batch)."""
    out = []
    pt = sized_points(out, None)
    for m in PALIGEMMA_DEVELOPMENT + PALIGEMMA_HELD_OUT:
        s = 2048
        pt(m, "full", "bf16-mixed", 1, s)
        pt(m, "frozen_vision", "bf16-mixed", 2, s)
        pt(m, "frozen_vision", "bf16-mixed", 2, s, checkpointing=True)
        pt(m, "frozen_vision", "bf16", 2, s)
        pt(m, None, "bf16", 2, s, mode="infer")
        pt(m, "full", "bf16-mixed", 4, s)
    return out


IDEFICS_DEVELOPMENT = ["SmolVLM2-500M-Video-Instruct", "SmolVLM-256M-Instruct-constructed"]
IDEFICS_HELD_OUT = ["SmolVLM-Instruct-reconstructed", "Idefics3-8B-Llama3-constructed"]


def idefics_points():
    """Idefics3 / SmolVLM: `image_size` is the processor's size["longest_edge"] (None: 4 x the
    tile, the processors' default: 4x4 tiles + the global image = 17 through the tower); a value
    equal to the tile gives one unsplit tile per image."""
    out = []
    pt = sized_points(out, None)
    tile = {"SmolVLM2-500M-Video-Instruct": 512, "SmolVLM-256M-Instruct-constructed": 512,
            "SmolVLM-Instruct-reconstructed": 384, "Idefics3-8B-Llama3-constructed": 364}
    for m in IDEFICS_DEVELOPMENT + IDEFICS_HELD_OUT:
        s = 4096 if m.startswith("Idefics3") else 2048  # 17 x 169 = 2873 image tokens per Idefics3 image
        pt(m, "full", "bf16-mixed", 1, s)
        pt(m, "frozen_vision", "bf16-mixed", 2, s)
        pt(m, "projector_only", "bf16-mixed", 2, s)
        pt(m, "frozen_vision", "bf16-mixed", 2, s, checkpointing=True)
        pt(m, "frozen_vision", "bf16", 2, s)
        pt(m, None, "bf16", 2, s, mode="infer")
        # Unsplit images (longest edge = the tile): two per sample, one tile each.
        pt(m, "frozen_vision", "bf16-mixed", 4, 1024, images=2, image_size=tile[m])
        # A half-size split (2x2 + global = 5 tiles) and a trained tower at batch 4.
        pt(m, "full", "bf16-mixed", 4, s, image_size=2 * tile[m])
        pt(m, "full", "bf16-mixed", 2, s, checkpointing=True)
    return out


def run(point):
    raw = json.load(open(os.path.join(ROOT, DIR, point["model"] + ".json")))
    cfg = AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})
    side = point.get("image_size")
    if is_qwen(cfg):
        extra = {"image_size_processed": qwen_side(cfg, side), "image_tokens_per_image": image_tokens(cfg, side),
                 "vision_model_type": cfg.vision_config.model_type}
    elif is_next(cfg):
        s = next_side(cfg, side)
        extra = {"image_size": s, "tiles_per_image": next_tiles(cfg, s, point["images"]),
                 "image_tokens_per_image": image_tokens(cfg, s, point["images"]),
                 "vision_feature_layer": cfg.vision_feature_layer,
                 "vision_feature_select_strategy": cfg.vision_feature_select_strategy,
                 "vision_model_type": cfg.vision_config.model_type}
    elif is_gemma(cfg):
        extra = {"image_size": cfg.vision_config.image_size, "image_tokens_per_image": image_tokens(cfg),
                 "vision_model_type": cfg.vision_config.model_type}
    elif is_paligemma(cfg):
        extra = {"image_size": cfg.vision_config.image_size, "image_tokens_per_image": image_tokens(cfg),
                 "vision_model_type": cfg.vision_config.model_type, "text_model_type": cfg.text_config.model_type}
    elif is_idefics(cfg):
        extra = {"longest_edge": side or 4 * cfg.vision_config.image_size, "tiles_per_image": idefics_tiles(cfg, side),
                 "image_tokens_per_image": image_tokens(cfg, side), "vision_model_type": cfg.vision_config.model_type}
    else:
        extra = {"image_size": cfg.vision_config.image_size, "image_tokens_per_image": image_tokens(cfg),
                 "vision_feature_layer": cfg.vision_feature_layer,
                 "vision_feature_select_strategy": cfg.vision_feature_select_strategy,
                 "vision_model_type": cfg.vision_config.model_type}
    t = time.time()
    try:
        if point["mode"] == "train":
            r = train(raw, point["batch"], point["seq"], point["images"], point["train"], point["precision"],
                      point["checkpointing"], point["attention"], image_size=side)
        else:
            r = infer(raw, point["batch"], point["seq"], point["images"], point["precision"], point["attention"],
                      image_size=side)
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": f"{DIR}/{point['model']}.json", **extra, **r}


def main_matrix(workers, only):
    describe = lambda rec: f"{rec['model']} {rec['train']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['seq']} i{rec['images']} ckpt={rec['checkpointing']}"  # noqa: E731
    run_resumable(OUT, "python validation/vlm.py", points(), run, describe, workers, only, maxtasks=4, meta_extra={"patched": "LlavaModel placeholder check .item() on fake tensors; " "masked_scatter as CUDA allocates it (see vlm.py)"})


# --------------------------------------------------------------------------------------------
# Technique check: real tensors vs fake tensors on a tiny llava

TINY_LLAVA = {
    "model_type": "llava", "image_token_index": 1000, "projector_hidden_act": "gelu",
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "tie_word_embeddings": False,
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 256,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
    "text_config": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
                    "max_position_embeddings": 512},
}


# LLaVA-NeXT: the tiny CLIP + llama with anyres tiles of 32 px (pinpoints as llava-v1.6's, scaled by
# 32/336); image_size in the cases picks the grid (64: 2x2 tiles + base, 88 tokens; 32: a 1x2 grid
# unpadded to a square, 36 tokens).
TINY_LLAVA_NEXT = {**TINY_LLAVA, "model_type": "llava_next",
                   "image_grid_pinpoints": [[32, 64], [64, 32], [64, 64], [96, 32], [32, 96]]}


def technique_cases_next():
    t = lambda tr, p, b, s, side, i=1, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=i,
                                                                checkpointing=ck, image_size=side))
    return [t("full", "bf16-mixed", 2, 128, 64), t("frozen_vision", "bf16-mixed", 2, 128, 32),
            t("frozen_vision", "bf16-mixed", 2, 256, 64, i=2), t("full", "bf16-mixed", 2, 128, 64, ck=True),
            t("frozen_vision", "bf16", 2, 128, 32),
            ("infer", dict(precision="bf16", batch=2, seq=128, images=1, image_size=64))]


# SigLIP tower (no CLS, "full" strategy, last layer) + Qwen2 LM (tied embeddings), as llava-interleave.
TINY_LLAVA_SIGLIP = {
    "model_type": "llava", "image_token_index": 1000, "projector_hidden_act": "gelu",
    "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 256,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8,
                      "vision_use_head": False},
    "text_config": {"model_type": "qwen2", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1024,
                    "max_position_embeddings": 512, "tie_word_embeddings": True},
}


# LLaVA-OneVision: the tiny SigLIP + Qwen2 with 32-px tiles on grids up to 3x3 and anyres_max_1,
# so a 2x2 grid's 8x8 feature map is resized (bilinear) to 4x4; two images per sample: untiled.
TINY_ONEVISION = {**TINY_LLAVA_SIGLIP, "model_type": "llava_onevision", "video_token_index": 1001,
                  "vision_aspect_ratio": "anyres_max_1",
                  "image_grid_pinpoints": [[32 * h, 32 * w] for h in (1, 2, 3) for w in (1, 2, 3)]}


def technique_cases_onevision():
    t = lambda tr, p, b, s, side, i=1, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=i,
                                                                checkpointing=ck, image_size=side))
    return [t("full", "bf16-mixed", 2, 128, 64), t("frozen_vision", "bf16-mixed", 2, 128, 64, i=2),
            t("frozen_vision", "bf16-mixed", 2, 128, 96, ck=True),
            ("infer", dict(precision="bf16", batch=2, seq=128, images=1, image_size=64))]


# Qwen2-VL: 2-block vision tower (embed 64, merger to 128) + 2-layer Qwen2 LM, tied embeddings.
TINY_QWEN2VL = {
    "model_type": "qwen2_vl", "image_token_id": 1000, "video_token_id": 1001, "vision_start_token_id": 1002,
    "vision_end_token_id": 1003, "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 512,
    "tie_word_embeddings": True, "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
    "vision_config": {"depth": 2, "embed_dim": 64, "hidden_size": 128, "mlp_ratio": 4, "num_heads": 4,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
}

# Qwen2.5-VL: window attention in block 0, full attention in block 1; untied LM.
TINY_QWEN25VL = {
    "model_type": "qwen2_5_vl", "image_token_id": 1000, "video_token_id": 1001, "vision_start_token_id": 1002,
    "vision_end_token_id": 1003, "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 512,
    "tie_word_embeddings": False, "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
    "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 160, "num_heads": 4, "out_hidden_size": 128,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                      "fullatt_block_indexes": [1]},
}


# Qwen3-VL: 2 vision blocks (width 64, learned 8x8 position grid interpolated, DeepStack merger
# after block 0) + 2-layer Qwen3-VL text model (q/k norms, interleaved M-RoPE), tied.
TINY_QWEN3VL = {
    "model_type": "qwen3_vl", "image_token_id": 1000, "video_token_id": 1001, "vision_start_token_id": 1002,
    "vision_end_token_id": 1003, "tie_word_embeddings": True,
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1024,
                    "max_position_embeddings": 512, "tie_word_embeddings": True,
                    "rope_scaling": {"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": True}},
    "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 256, "num_heads": 4, "out_hidden_size": 128,
                      "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64,
                      "deepstack_visual_indexes": [0]},
}


def technique_cases_qwen():
    t = lambda tr, p, b, s, i=1, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=i,
                                                          checkpointing=ck, image_size=224))
    return [t("full", "bf16-mixed", 2, 128), t("frozen_vision", "bf16-mixed", 2, 256, i=2),
            t("frozen_vision", "bf16-mixed", 2, 128, ck=True), t("full", "bf16-mixed", 2, 128, ck=True),
            t("frozen_vision", "bf16", 2, 128),
            ("infer", dict(precision="bf16", batch=2, seq=128, images=1, image_size=224))]


# Idefics3: tiny SigLIP-like tower (32-px tiles of 8-px patches, pixel shuffle 2: 4 tokens per
# tile) + tiny llama; image_size in the cases is the processor's longest edge (64: 2x2 + global =
# 5 tiles; 32: one tile). SmolVLM: the same on SmolVLM's classes (its own get_image_features).
TINY_IDEFICS3 = {
    "model_type": "idefics3", "image_token_id": 1000, "scale_factor": 2, "tie_word_embeddings": False,
    "vision_config": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "image_size": 32, "patch_size": 8},
    "text_config": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024,
                    "max_position_embeddings": 512},
}
TINY_SMOLVLM = {**TINY_IDEFICS3, "model_type": "smolvlm", "use_cache": False}

# PaliGemma: tiny SigLIP (32-px images of 8-px patches: 16 tokens) + tiny Gemma, token_type_ids
# (a bidirectional image + prefix block, a causal suffix: the explicit mask of every LM layer).
TINY_PALIGEMMA = {
    "model_type": "paligemma", "image_token_index": 1000, "projection_dim": 128, "vocab_size": 1024,
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 64, "intermediate_size": 256,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8,
                      "vision_use_head": False},
    "text_config": {"model_type": "gemma", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 1024,
                    "max_position_embeddings": 512},
}


def technique_cases_paligemma():
    t = lambda tr, p, b, s, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=1, checkpointing=ck))
    return [t("full", "bf16-mixed", 2, 128), t("frozen_vision", "bf16-mixed", 2, 128, ck=True),
            t("frozen_vision", "bf16", 2, 128), ("infer", dict(precision="bf16", batch=2, seq=128, images=1))]


def technique_cases_idefics():
    t = lambda tr, p, b, s, side, i=1, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=i,
                                                                checkpointing=ck, image_size=side))
    return [t("full", "bf16-mixed", 2, 128, 64), t("frozen_vision", "bf16-mixed", 2, 128, 32, i=2),
            t("projector_only", "bf16-mixed", 2, 128, 64), t("full", "bf16-mixed", 2, 128, 64, ck=True),
            t("frozen_vision", "bf16", 2, 128, 64),
            ("infer", dict(precision="bf16", batch=2, seq=128, images=1, image_size=64))]


def technique_cases():
    t = lambda tr, p, b, s, i=1, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=i,
                                                          checkpointing=ck))
    i = lambda p, b, s, im=1: ("infer", dict(precision=p, batch=b, seq=s, images=im))
    return [t("full", "bf16-mixed", 4, 128), t("frozen_vision", "bf16-mixed", 4, 128),
            t("projector_only", "bf16-mixed", 4, 128), t("full", "fp32", 4, 128),
            t("frozen_vision", "bf16-mixed", 2, 128, i=3), t("frozen_vision", "bf16-mixed", 4, 128, ck=True),
            t("full", "bf16-mixed", 4, 128, ck=True), t("frozen_vision", "bf16", 4, 128),
            i("bf16", 4, 128), i("fp32", 4, 128, 2)]


def technique_cases_siglip():
    t = lambda tr, p, b, s, i=1, ck=False: ("train", dict(train=tr, precision=p, batch=b, seq=s, images=i,
                                                          checkpointing=ck))
    return [t("full", "bf16-mixed", 4, 128), t("frozen_vision", "bf16-mixed", 2, 128, i=3),
            t("projector_only", "bf16-mixed", 4, 128), t("frozen_vision", "bf16-mixed", 4, 128, ck=True),
            ("infer", dict(precision="bf16", batch=4, seq=128, images=1))]


ONLY_CONFIG = [None]  # --technique-config: one tiny config's cases only


def check_technique():
    """Writes fixtures/vlm_technique.jsonl."""
    ok = True
    f = open(os.path.join(HERE, "fixtures", "vlm_technique.jsonl"), "w")
    f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                  "command": "python validation/vlm.py --technique",
                                  "configs": {"clip_llama": TINY_LLAVA, "siglip_qwen2": TINY_LLAVA_SIGLIP,
                                              "qwen2_vl": TINY_QWEN2VL, "qwen2_5_vl": TINY_QWEN25VL,
                                              "qwen3_vl": TINY_QWEN3VL,
                                              "llava_next": TINY_LLAVA_NEXT,
                                              "llava_onevision": TINY_ONEVISION,
                                              "idefics3": TINY_IDEFICS3, "smolvlm": TINY_SMOLVLM,
                                              "paligemma": TINY_PALIGEMMA}}}) + "\n")
    cases = [("clip_llama", TINY_LLAVA, c) for c in technique_cases()]
    cases += [("siglip_qwen2", TINY_LLAVA_SIGLIP, c) for c in technique_cases_siglip()]
    cases += [(n, c, x) for n, c in (("qwen2_vl", TINY_QWEN2VL), ("qwen2_5_vl", TINY_QWEN25VL),
                                     ("qwen3_vl", TINY_QWEN3VL))
              for x in technique_cases_qwen()]
    cases += [("llava_next", TINY_LLAVA_NEXT, c) for c in technique_cases_next()]
    cases += [("llava_onevision", TINY_ONEVISION, c) for c in technique_cases_onevision()]
    cases += [(n, c, x) for n, c in (("idefics3", TINY_IDEFICS3), ("smolvlm", TINY_SMOLVLM))
              for x in technique_cases_idefics()]
    cases += [("paligemma", TINY_PALIGEMMA, c) for c in technique_cases_paligemma()]
    if ONLY_CONFIG[0]:
        cases = [c for c in cases if c[0] == ONLY_CONFIG[0]]
    for name, config, (mode, case) in cases:
        fn = train if mode == "train" else infer
        t = time.time()
        real = fn(config, fake=False, **case)
        fake = fn(config, fake=True, **case)
        same = real["peak_allocated"] == fake["peak_allocated"] and real["peak_phase"] == fake["peak_phase"]
        ok &= same
        rec = {"config": name, "mode": mode, **case, "real_peak": real["peak_allocated"], "fake_peak": fake["peak_allocated"],
               "real_phase": real["peak_phase"], "fake_phase": fake["peak_phase"],
               "real_categories": real["categories_at_peak"], "fake_categories": fake["categories_at_peak"],
               "kernels": fake["attention_kernels"], "equal": same, "seconds": round(time.time() - t, 2)}
        f.write(json.dumps(rec) + "\n")
        print(json.dumps({k: v for k, v in rec.items() if "categories" not in k}))
    f.close()
    print("ALL EQUAL" if ok else "DIFFERENCES FOUND", file=sys.stderr)
    return ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", help="only points of these models (comma-separated)")
    ap.add_argument("--technique", action="store_true", help="real vs fake tensors on a tiny llava")
    ap.add_argument("--technique-config", help="with --technique: only this tiny config's cases (e.g. llava_next)")
    args = ap.parse_args()
    ONLY_CONFIG[0] = args.technique_config
    if args.technique:
        sys.exit(0 if check_technique() else 1)
    main_matrix(args.workers, args.only)
