"""Measure any PyTorch module without a GPU: one (or more) training steps or a forward under
PyTorch's FakeTensorMode on the CPU, tracking every tensor storage PyTorch creates — the
technique of vram's validation oracle (validation/harness.py), with no memory used.

Every storage is rounded up to 512 bytes as CUDA's caching allocator rounds it. The kernels are
the CPU's (an SDPA call may take the math path where CUDA would run flash attention): for
transformers models, `vram estimate` models the CUDA choices; this measures what the module's
own code allocates.

torch is needed only here (imported when `measure` is called).
"""
from __future__ import annotations

import contextlib
import json
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

_ROUND = 512


def _round(n: int) -> int:
    return (n + _ROUND - 1) // _ROUND * _ROUND


@dataclass
class Measurement:
    """Peak of live tensor bytes over the measured step(s) and what made it up."""

    peak_bytes: int
    peak_phase: str
    phase_peaks: Dict[str, int]
    categories_at_peak: Dict[str, int]
    parameters: int
    trainable_parameters: int
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
            "phase_peaks": dict(self.phase_peaks),
            "categories_at_peak": dict(self.categories_at_peak),
            "parameters": self.parameters,
            "trainable_parameters": self.trainable_parameters,
            "rounding": "each storage rounded up to 512 bytes (CUDA caching allocator)",
            "method": "FakeTensorMode on the CPU (vram.measure)",
            "notes": list(self.notes),
        }

    def save(self, path: str) -> None:
        """Write `to_dict()` as JSON."""
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    def __repr__(self) -> str:
        gib = 1 << 30
        top = sorted(self.categories_at_peak.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{k} {v / gib:.2f} GiB" for k, v in top if v)
        return f"Measurement(peak {self.peak_bytes / gib:.3f} GiB at {self.peak_phase}; {parts})"


def _tracker_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Tracker(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = {}
            self.cur = 0
            self.peak = 0
            self.phase = "setup"
            self.peak_phase = "setup"
            self.phase_peaks = {}
            self.cats = {}
            self.peak_cats = {}
            self.category = "other"

        def track(self, t, category=None):
            if not isinstance(t, torch.Tensor):
                return
            st = t.untyped_storage()
            key = id(st)
            if key in self.live:
                return
            nb = _round(st.nbytes())
            cat = category or self.category

            def freed(_, key=key):
                rec = self.live.pop(key, None)
                if rec is not None:
                    self.cur -= rec[1]
                    self.cats[rec[2]] -= rec[1]

            self.live[key] = [weakref.ref(st, freed), nb, cat]
            self.cur += nb
            self.cats[cat] = self.cats.get(cat, 0) + nb
            self.phase_peaks[self.phase] = max(self.phase_peaks.get(self.phase, 0), self.cur)
            # `>=`: of equal peaks the latest is kept, the steady state (the first step creates
            # the optimizer states inside step(), where they are still unlabelled temporaries).
            if self.cur >= self.peak:
                self.peak, self.peak_phase, self.peak_cats = self.cur, self.phase, dict(self.cats)

        def relabel(self, t, category):
            rec = self.live.get(id(t.untyped_storage()))
            if rec is not None and rec[2] != category:
                self.cats[rec[2]] -= rec[1]
                rec[2] = category
                self.cats[category] = self.cats.get(category, 0) + rec[1]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                self.track(t)
            return out

    return Tracker


def _loss_of(out, loss_fn):
    import torch

    if loss_fn is not None:
        return loss_fn(out)
    if getattr(out, "loss", None) is not None:
        return out.loss
    if isinstance(out, torch.Tensor):
        return out.float().mean()
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0].float().mean()
    raise TypeError("cannot derive a loss from the module's output: pass loss_fn=lambda out: ...")


def measure(
    module,
    example_inputs,
    train: bool = True,
    optimizer: Optional[Callable[[Any], Any]] = None,
    loss_fn: Optional[Callable[[Any], Any]] = None,
    steps: int = 2,
    autocast: Optional[str] = None,
) -> Measurement:
    """Run `module` on `example_inputs` (a tensor, a tuple of positional arguments or a dict of
    keyword arguments) under FakeTensorMode and return the peak of live tensor bytes.

    train: forward, loss (``loss_fn(output)``, else ``output.loss``, else the mean of the
    output), backward and ``optimizer.step()`` for `steps` steps (the second is the steady
    state: optimizer states alive); otherwise one forward under ``torch.no_grad()``.
    optimizer: a factory ``params -> torch.optim.Optimizer`` (default AdamW with foreach=True, as
    torch runs it on CUDA). autocast: "bf16" or "fp16" to run the forward under autocast.
    The module's own tensors are never touched: fake copies of its parameters and buffers are
    used (a module on the meta device works too).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    if steps < 1:
        raise ValueError("steps must be at least 1")
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}
    if autocast not in dtypes:
        raise ValueError("autocast must be None, 'bf16' or 'fp16'")
    tracker = _tracker_class()()
    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(t):
        with mode:
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")

    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    n_params = sum(p.numel() for p in params.values())
    n_train = sum(p.numel() for p in params.values() if p.requires_grad)
    with tracker:
        tracker.category = "parameters"
        fparams = {}
        for name, p in params.items():
            fp = fake(p).requires_grad_(p.requires_grad)
            fparams[name] = fp
            tracker.track(fp, "parameters" if p.requires_grad else "frozen parameters")
        fbufs = {name: fake(b) for name, b in buffers.items()}
        for b in fbufs.values():
            tracker.track(b, "buffers")
        tracker.category = "inputs"

        def conv(x):
            return fake(x) if isinstance(x, torch.Tensor) else x

        def fake_inputs():
            if isinstance(example_inputs, dict):
                return (), {k: conv(v) for k, v in example_inputs.items()}
            if isinstance(example_inputs, (tuple, list)):
                return tuple(conv(v) for v in example_inputs), {}
            return (conv(example_inputs),), {}

        state = {**fparams, **fbufs}
        trainable = [p for p in fparams.values() if p.requires_grad]
        with mode:
            opt = None
            if train and trainable:
                opt = optimizer(trainable) if optimizer else torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
                for p in trainable:
                    p.register_post_accumulate_grad_hook(lambda p: tracker.relabel(p.grad, "gradients"))
            amp = torch.autocast("cpu", dtype=dtypes[autocast]) if autocast else contextlib.nullcontext()
            for step in range(steps if train else 1):
                tracker.category = "inputs"
                args, kwargs = fake_inputs()
                tracker.phase, tracker.category = f"forward{step}", "activations"
                grad = contextlib.nullcontext() if train else torch.no_grad()
                with grad, amp:
                    out = torch.func.functional_call(module, state, args, kwargs)
                    loss = _loss_of(out, loss_fn) if train else None
                if not train:
                    break
                tracker.phase = f"backward{step}"
                loss.backward()
                del loss, out
                if opt is not None:
                    tracker.phase, tracker.category = f"optimizer{step}", "optimizer temporaries"
                    opt.step()
                    for st in opt.state.values():
                        for v in st.values():
                            if isinstance(v, torch.Tensor):
                                tracker.relabel(v, "optimizer states")
                    opt.zero_grad(set_to_none=True)
    notes = ["CPU kernels under FakeTensorMode: attention and other ops may take other paths than on CUDA"]
    return Measurement(
        peak_bytes=tracker.peak,
        peak_phase=tracker.peak_phase,
        phase_peaks=tracker.phase_peaks,
        categories_at_peak={k: v for k, v in tracker.peak_cats.items() if v},
        parameters=n_params,
        trainable_parameters=n_train,
        notes=notes,
    )
