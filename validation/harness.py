"""Measure what PyTorch really allocates for one training step or one generation, without a GPU.

Real Hugging Face transformers models are built from config.json under FakeTensorMode (no
weights, no memory), run with the kernel and dtype choices a CUDA run would make, and every
tensor storage PyTorch creates is tracked (TorchDispatchMode + weakrefs) to find the peak of live
bytes, the phase that holds it, and the bytes by category at that moment.

CUDA behaviour emulated on the CPU (see README.md "Faithfulness"):
- SDPA kernel: flash for fp16/bf16 (head_dim <= 256, equal q/k/v dims), memory-efficient for
  fp32 without GQA, math otherwise, as aten/src/ATen/native/transformers/sdp_utils.cpp picks
  on sm80/sm90. Flash/efficient are replaced by an autograd Function that allocates exactly what
  the CUDA kernels allocate (output, logsumexp; in backward dq/dk/dv and flash's fp32 dq
  accumulator); math runs aten's own decomposition.
- Autocast: CPU autocast already casts matmuls to half like CUDA; CUDA's fp32 op list (torch.pow,
  square, exp, log, rsqrt, layer_norm, group_norm, softplus, softmax/log_softmax without an explicit dtype) is
  applied by patching those functions, above autograd, as the autocast dispatch key does;
  F.cross_entropy on half logits keeps a half log-softmax and casts it for nll_loss, as CUDA
  autocast does (an H100 showed it; see cuda_cross_entropy).
- Dropout: CUDA's fused native_dropout (bool mask) instead of the CPU path (float mask).
- Optimizers: torch's CUDA default implementation (foreach), or fused when asked.
- Each storage is rounded up to 512 bytes like the CUDA caching allocator; both are recorded.
"""
import contextlib
import json
import math
import weakref

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM

HALF = (torch.float16, torch.bfloat16)


def round512(n):
    return (n + 511) // 512 * 512


# --------------------------------------------------------------------------------------------
# Tracking live storages


class Tracker(TorchDispatchMode):
    """Live storage bytes, their peak, the phase at the peak and the bytes by category there."""

    def __init__(self):
        super().__init__()
        self.live = {}  # id(storage) -> [weakref, raw, rounded, category]
        self.cur = 0
        self.cur_raw = 0
        self.peak = 0
        self.peak_raw = 0
        self._phase = "init"
        self.peak_phase = None
        self.phase_peaks = {}
        self.cats = {}
        self.peak_cats = {}
        self.category = "other"
        self.events = None  # a list to record the allocation sequence: (id, bytes) allocs, (id, -1) frees
        self.next_id = 0

    @property
    def phase(self):
        return self._phase

    @phase.setter
    def phase(self, name):
        self._phase = name
        if self.events is not None:
            self.events.append((name, 0))

    def track(self, t, category=None):
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        key = id(st)
        if key in self.live:
            return
        raw = st.nbytes()
        nb = round512(raw)
        cat = category or self.category

        self.next_id += 1
        seq_id = self.next_id

        def freed(_, key=key, seq_id=seq_id):
            rec = self.live.pop(key, None)
            if rec is not None:
                if self.events is not None:
                    self.events.append((seq_id, -1))
                self.cur -= rec[2]
                self.cur_raw -= rec[1]
                self.cats[rec[3]] -= rec[2]

        self.live[key] = [weakref.ref(st, freed), raw, nb, cat]
        if self.events is not None:
            self.events.append((seq_id, raw))
        self.cur += nb
        self.cur_raw += raw
        self.cats[cat] = self.cats.get(cat, 0) + nb
        if self.cur > self.phase_peaks.get(self.phase, 0):
            self.phase_peaks[self.phase] = self.cur
        if self.cur > self.peak:
            self.peak = self.cur
            self.peak_phase = self.phase
            self.peak_cats = dict(self.cats)
        self.peak_raw = max(self.peak_raw, self.cur_raw)

    def relabel(self, t, category):
        """Move a live storage to another category (a gradient, an optimizer state)."""
        rec = self.live.get(id(t.untyped_storage()))
        if rec is not None and rec[3] != category:
            self.cats[rec[3]] -= rec[2]
            rec[3] = category
            self.cats[category] = self.cats.get(category, 0) + rec[2]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.track(t)
        return out


# --------------------------------------------------------------------------------------------
# CUDA emulation

KERNELS = set()  # attention kernels that ran


class FlashLike(torch.autograd.Function):
    """Allocates what CUDA flash / memory-efficient attention allocate; values are irrelevant
    under FakeTensorMode."""

    @staticmethod
    def forward(ctx, q, k, v, lse_pad, bias=None):
        b, h, s, _ = q.shape
        if lse_pad == 1 and v.shape[-1] == q.shape[-1]:
            # Flash: the output is empty_like(q) in q's memory layout (aten flash_api.cpp mha_fwd
            # allocates empty_like of the [B, S, H, D] view of q, which keeps its strides), returned
            # transposed. For q in the usual [B, S, H, D] layout that is [B, S, H, D] too; for a q
            # made contiguous as [B, H, S, D] (Whisper's attention) so is the output, and the
            # caller's transpose(1, 2).contiguous() is then a copy (seen on the H100: one more
            # query-sized half tensor per attention call, kept by the output projection).
            out = torch.empty_like(q.transpose(1, 2)).transpose(1, 2)
        else:
            # memory-efficient: output allocated [B, S, H, D] whatever q's layout
            # (_efficient_attention_forward), returned transposed.
            out = torch.empty(b, s, h, v.shape[-1], dtype=q.dtype, device=q.device).transpose(1, 2)
        lse = torch.empty(b, h, math.ceil(s / lse_pad) * lse_pad, dtype=torch.float32, device=q.device)
        # memory-efficient attention keeps its attn_bias for backward, as a saved tensor (so
        # checkpointing drops and recomputes it like the rest)
        ctx.save_for_backward(q, k, v, out, lse, *([bias] if bias is not None else []))
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors[:5]
        accum = torch.empty(q.shape, dtype=torch.float32, device=q.device)  # flash dq_accum (fp32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        del accum
        return dq, dk, dv, None, None


def repeat_kv(x, n):
    if n == 1:
        return x
    b, kvh, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kvh, n, s, d).reshape(b, kvh * n, s, d)


def cuda_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' sdpa_attention_forward with the CUDA kernel choice."""
    amp = amp_dtype()
    if amp is not None:  # SDPA is on autocast's lower-precision list
        query, key, value = query.to(amp), key.to(amp), value.to(amp)
    groups = query.shape[1] // key.shape[1]
    same_dims = query.shape[-1] == key.shape[-1] == value.shape[-1]
    half = query.dtype in HALF
    # transformers' use_gqa_in_sdpa: native GQA when there is no mask and equal head dims <= 256.
    gqa_native = attention_mask is None and key.shape[-1] == value.shape[-1] <= 256
    if not gqa_native:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    if half and same_dims and query.shape[-1] <= 256 and attention_mask is None:
        KERNELS.add("flash")
        out = FlashLike.apply(query, key, value, 1)
    elif attention_mask is None and key.shape[1] == query.shape[1]:
        KERNELS.add("mem_efficient")
        out = FlashLike.apply(query, key, value, 32)  # logsumexp padded to 32 rows
    elif attention_mask is not None and attention_mask.dtype == torch.bool and same_dims:
        # An explicit mask (sliding windows): flash cannot take it; memory-efficient can. SDPA first
        # turns the bool mask into an additive float bias (convert_boolean_attn_mask), which the
        # kernel keeps for backward.
        KERNELS.add("mem_efficient_masked")
        bias = torch.where(attention_mask.logical_not(), float("-inf"), 0.0).to(query.dtype)
        out = FlashLike.apply(query, key, value, 32, bias)
    elif dropout > 0 and module.training:
        # aten's math kernel calls at::dropout, which on CUDA is the fused native_dropout (bool
        # mask) but on the CPU keeps a float noise mask: spell the math kernel out with the CUDA
        # dropout (same ops as _scaled_dot_product_attention_math).
        KERNELS.add("math")
        sf = math.sqrt(scaling if scaling is not None else 1 / math.sqrt(query.shape[-1]))
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
        attn = (query * sf) @ (key.transpose(-2, -1) * sf)
        length = query.shape[-2]
        if attention_mask is None:
            causal = torch.ones(length, key.shape[-2], dtype=torch.bool).tril()
            attn = attn + torch.where(causal, 0.0, float("-inf")).to(attn.dtype)
        else:
            attn = attn + torch.where(attention_mask, 0.0, float("-inf")).to(attn.dtype)
        attn = torch.ops.aten._safe_softmax(attn, -1)
        attn = torch.ops.aten.native_dropout(attn, dropout, True)[0]
        out = attn @ value
    else:
        KERNELS.add("math")
        out = torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attention_mask, dropout, attention_mask is None, scale=scaling,
            enable_gqa=key.shape[1] != query.shape[1])[0]
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register("sdpa", cuda_sdpa)

_orig_dropout = F.dropout


def cuda_dropout(input, p=0.5, training=True, inplace=False):
    """CUDA takes native_dropout (bool mask) for 0 < p < 1 in training (aten Dropout.cpp)."""
    if training and 0 < p < 1:
        return torch.ops.aten.native_dropout(input, p, True)[0]
    return _orig_dropout(input, p, training, inplace)


F.dropout = cuda_dropout
torch.nn.functional.dropout = cuda_dropout

# transformers takes FakeTensors for tracing (utils/import_utils.py is_tracing) and then builds a
# (B, 1, S, S) mask that a real unpadded run skips: with use_cache=False (always so under gradient
# checkpointing) the query offset is the fake `cache_position`. No padding mask is ever passed
# here, so the only fake tensor it tests is that offset; a real run is not tracing.
import transformers.masking_utils as _masking  # noqa: E402

_masking.is_tracing = lambda tensor=None: False
# Batches here are never packed; a real run's check (which reads tensor values) finds no packing.
_masking.find_packed_sequence_indices = lambda position_ids: None

def amp_dtype():
    """The autocast dtype in force (torch's own state, which checkpoint recomputation restores)."""
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None


def _fp32_under_autocast(fn, only_without_dtype=False):
    """CUDA autocast's fp32 policy for `fn` (autocast_mode.cpp), which CPU autocast lacks: half
    inputs are cast to fp32 above autograd, so the fp32 copies are what autograd saves. A
    patch looked up at call time (not a TorchFunctionMode) so that checkpoint recomputation,
    which restores the autocast state but not Python modes, behaves the same."""

    def wrapped(*args, **kwargs):
        if amp_dtype() is not None and not (only_without_dtype and kwargs.get("dtype") is not None):
            cast = lambda x: x.float() if isinstance(x, torch.Tensor) and x.dtype in HALF else x
            args = tuple(cast(a) for a in args)
            kwargs = {k: cast(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return wrapped


# torch.square is aten's pow.Tensor_Scalar, on the same fp32 list (relu2's square: an H100 held
# Nemotron-H's training peak 192 MiB above the emulation without it, equal to the byte with it).
for _name in ("pow", "square", "exp", "log", "rsqrt"):
    setattr(torch, _name, _fp32_under_autocast(getattr(torch, _name)))
# F.softplus is on that list too (autocast_mode.cpp): a half dt is cast to fp32, the fp32 copy is
# saved and the output is fp32 (Mamba-1's and the first Zamba's dt_proj output: an H100 held
# zamba-dev-8l's training 4 KiB per token and mixer layer above the emulation without it).
for _name in ("layer_norm", "group_norm", "softplus"):
    setattr(F, _name, _fp32_under_autocast(getattr(F, _name)))
for _name in ("softmax", "log_softmax"):
    setattr(F, _name, _fp32_under_autocast(getattr(F, _name), only_without_dtype=True))

_orig_cross_entropy = F.cross_entropy


def cuda_cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                       reduction="mean", label_smoothing=0.0):
    """F.cross_entropy on half logits as CUDA autocast runs it. aten's cross_entropy_loss calls
    `log_softmax(self, class_dim, self.scalar_type())` (LossNLL.cpp): the dtype is given, so
    CUDA autocast's fp32_set_opt_dtype policy leaves it alone and the log-softmax stays half; then
    nll_loss, on CUDA's fp32 list, casts that to fp32. CPU autocast instead casts the logits to
    fp32 before the log-softmax: a float log-softmax is saved for backward and its gradient is
    float, one half-sized [tokens, vocab] tensor more at the backward peak than an H100 showed
    (validation/gpu/h100/family_recordings.jsonl: BERT/ELECTRA masked-LM, T5, BART and Whisper
    under bf16-mixed). Class-index targets without label smoothing only; anything else is left to
    torch."""
    amp = amp_dtype()
    if (amp is None or input.dtype not in HALF or label_smoothing != 0.0 or size_average is not None
            or reduce is not None or target.dtype.is_floating_point):
        return _orig_cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction,
                                   label_smoothing)
    with torch.autocast("cpu", enabled=False):
        lsm = torch.log_softmax(input, 1 if input.dim() >= 2 else 0, dtype=input.dtype)
        return F.nll_loss(lsm.float(), target, None if weight is None else weight.float(),
                          ignore_index=ignore_index, reduction=reduction)


F.cross_entropy = cuda_cross_entropy
torch.nn.functional.cross_entropy = cuda_cross_entropy


# --------------------------------------------------------------------------------------------
# One measurement

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "bf16-mixed": torch.float32, "fp16-mixed": torch.float32}


def build(raw_config, precision, attention, fake=True):
    raw = dict(raw_config)
    model_type = raw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **raw)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention, dtype=DTYPES[precision])
    return cfg, model


def train(raw_config, batch, seq, precision="bf16-mixed", optimizer="adamw", impl="foreach",
          checkpointing=False, attention="sdpa", steps=2, fake=True, seed=0, events=None, padded=False):
    """Two training steps as HF Trainer runs them; the second is the steady state. `events`: a
    list that receives the allocation sequence (see Tracker.events). `padded`: the collator's
    attention mask is passed, as for a batch padded to its longest sample (the caller tells
    transformers' mask-skip test, which reads values, that it holds zeros)."""
    KERNELS.clear()
    tr = Tracker()
    tr.events = events
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    amp = precision.endswith("-mixed")
    with mode:
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention, fake)
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        if optimizer == "adamw":
            opt = torch.optim.AdamW(params, lr=1e-5, foreach=impl == "foreach", fused=impl == "fused" or None)
        elif optimizer == "sgd":
            opt = torch.optim.SGD(params, lr=1e-3, foreach=impl == "foreach")
        else:
            raise ValueError(optimizer)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: tr.relabel(p.grad, "gradients"))
        ids = torch.randint(0, cfg.get_text_config().vocab_size, (batch, seq))
        with tr:
            for p in model.parameters():
                tr.track(p, "parameters")
            for b in model.buffers():
                tr.track(b, "parameters")
            for step in range(steps):
                tr.category = "inputs"
                # HF collator: input_ids, labels, attention_mask. The all-ones mask is not passed:
                # unpadded CUDA runs skip it, while a fake one would make transformers build a
                # (B, 1, S, S) mask (it treats FakeTensors as tracing).
                inputs = {"input_ids": ids.clone(), "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
                tr.phase, tr.category = f"forward{step}", "activations"
                half = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
                ctx = torch.autocast("cpu", dtype=half) if amp else contextlib.nullcontext()
                with ctx:
                    mask = {"attention_mask": inputs["attention_mask"]} if padded else {}
                    loss = model(input_ids=inputs["input_ids"], labels=inputs["labels"], **mask).loss
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
    return result(tr)


def infer(raw_config, batch, context, prompt, precision="bf16", attention="sdpa", fake=True, seed=0,
          events=None):
    """Prefill `prompt` tokens, then decode greedily to `context` tokens, as generate() does:
    no_grad, DynamicCache, last-position logits copied to fp32 for sampling."""
    KERNELS.clear()
    tr = Tracker()
    tr.events = events
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode, torch.no_grad():
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention, fake)
        model.eval()
        with tr:
            for p in model.parameters():
                tr.track(p, "parameters")
            for b in model.buffers():
                tr.track(b, "parameters")
            tr.category = "inputs"
            ids = torch.randint(0, cfg.get_text_config().vocab_size, (batch, prompt))
            mask = torch.ones_like(ids)
            tr.phase, tr.category = "prefill", "activations"
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            tokens = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(-1, keepdim=True)
            del out
            tr.phase = "decode"
            for _ in range(context - prompt):
                ids = torch.cat([ids, tokens], dim=-1)
                mask = torch.cat([mask, torch.ones_like(tokens)], dim=-1)
                out = model(input_ids=tokens, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                tokens = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(-1, keepdim=True)
                del out
    return result(tr)


def recorded(point, source, measure):
    """A fixture record: the point, its config's `source`, and what `measure()` returns with the
    seconds it took, or the error it raised (recorded, never silently dropped)."""
    import time
    import traceback

    t = time.time()
    try:
        r = measure()
    except Exception as e:
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": source, **r}


def result(tr):
    return {
        "peak_allocated": tr.peak,
        "peak_allocated_unrounded": tr.peak_raw,
        "peak_phase": tr.peak_phase,
        "phase_peaks": tr.phase_peaks,
        "categories_at_peak": {k: v for k, v in tr.peak_cats.items() if v},
        "attention_kernels": sorted(KERNELS),
    }


if __name__ == "__main__":
    import sys
    cfg = json.load(open(sys.argv[1]))
    print(json.dumps(train(cfg, int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])))


# --------------------------------------------------------------------------------------------
# A resumable matrix run, shared by run_matrix-style scripts (encoders, vision, vlm, encdec)


def run_resumable(out, command, points, run, describe, workers, only=None, maxtasks=8, meta_extra=None):
    """Run every point (a dict with an "id") not yet recorded in `out` through `run` in a pool of
    spawned workers, appending each record as it arrives; a new file starts with the `_meta` line
    (versions, the command, the method). `only`: comma-separated model names. `describe(rec)`
    gives the progress line's middle part."""
    import multiprocessing as mp
    import os
    import sys

    import transformers

    done = set()
    if os.path.exists(out):
        for line in open(out):
            rec = json.loads(line)
            if "id" in rec:
                done.add(rec["id"])
    else:
        meta = {"torch": torch.__version__, "transformers": transformers.__version__, "command": command,
                "fake_tensor": True, "rounding": "each storage rounded up to 512 bytes", **(meta_extra or {})}
        with open(out, "w") as f:
            f.write(json.dumps({"_meta": meta}) + "\n")
    wanted = only.split(",") if only else None
    todo = [p for p in points if p["id"] not in done and (not wanted or p["model"] in wanted)]
    print(f"{len(done)} done, {len(todo)} to run", file=sys.stderr)
    if not todo:
        return
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, maxtasksperchild=maxtasks) as pool, open(out, "a") as f:
        for i, rec in enumerate(pool.imap_unordered(run, todo), 1):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            status = rec["error"][:160] if "error" in rec else f"{rec['peak_allocated'] / 2**30:.3f} GiB"
            print(f"[{i}/{len(todo)}] {describe(rec)} {rec['seconds']}s {status}", file=sys.stderr, flush=True)
