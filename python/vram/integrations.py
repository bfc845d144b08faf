"""Training-loop integrations: opt-in, and free when not used.

``VramTrainerCallback`` is a ``transformers.TrainerCallback``; transformers (and torch) are
imported only when the class is first accessed, never by ``import vram`` or
``import vram.integrations``::

    from vram.integrations import VramTrainerCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[VramTrainerCallback()])

At ``on_train_begin`` it estimates the real job (the model's config, the TrainingArguments, the
peft adapters of a PeftModel, the sequence length of the first batch) and warns if it will not
fit the GPU; at ``on_step_end`` it logs the estimate beside ``torch.cuda.max_memory_allocated()``
and ``torch.cuda.memory_reserved()`` (CUDA only; a no-op otherwise).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from . import GIB, Estimate, VramError, _argv, estimate

__all__ = ["VramTrainerCallback", "VramLightningCallback", "job_from_trainer"]

# torch dtype of the trained parameters -> what `--precision` / `--base-dtype` call it.
_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def _first_batch_seq_len(train_dataloader: Any) -> Optional[int]:
    """Sequence length of the first training batch, without disturbing training: the random
    state a fresh iterator draws from (torch's global generator and the sampler's own) is
    saved and restored, so the shuffle order the Trainer then sees is unchanged."""
    if train_dataloader is None:
        return None
    import torch

    cpu_state = torch.random.get_rng_state()
    sampler_gen = getattr(getattr(train_dataloader, "sampler", None), "generator", None)
    loader_gen = getattr(train_dataloader, "generator", None)
    gens = [g for g in (sampler_gen, loader_gen) if isinstance(g, torch.Generator)]
    gen_states = [g.get_state() for g in gens]
    try:
        batch = next(iter(train_dataloader))
    except Exception:  # an exotic loader: fall back to max_seq_length; never break training
        return None
    finally:
        torch.random.set_rng_state(cpu_state)
        for g, s in zip(gens, gen_states):
            g.set_state(s)
    ids = batch.get("input_ids") if isinstance(batch, dict) or hasattr(batch, "get") else None
    shape = getattr(ids, "shape", None)
    return int(shape[-1]) if shape is not None and len(shape) >= 2 else None


def _params_dtype(model: Any) -> Optional[str]:
    """The dtype most parameters are stored in (what `model.to(dtype)` / `torch_dtype` chose)."""
    counts: Dict[str, int] = {}
    try:
        for p in model.parameters():
            counts[str(p.dtype)] = counts.get(str(p.dtype), 0) + p.numel()
    except Exception:
        return None
    return _DTYPES.get(max(counts, key=counts.get)) if counts else None


def _peft_of(model: Any) -> Any:
    """The active LoraConfig of a peft PeftModel, else None."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    active = getattr(model, "active_adapter", None)
    active = active if isinstance(active, str) else next(iter(configs))
    return configs.get(active)


def job_from_trainer(args: Any, model: Any, train_dataloader: Any = None, **overrides: Any) -> Tuple[Any, Dict[str, Any], str]:
    """(model config, `vram.estimate` keywords, where the sequence length came from) for the job
    a Trainer is about to run. ``overrides`` are `vram.estimate` keywords and win."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise ValueError("the model has no transformers config (model.config)")
    kw: Dict[str, Any] = {"args": args}
    lora = _peft_of(model)
    stored = _params_dtype(model)
    if lora is not None:
        kw["peft_config"] = lora
        # The frozen base as loaded; adapters train in fp32 under autocast (the CLI's model).
        if stored is not None:
            kw["base_dtype"] = stored
        lora_trainable = True
    else:
        lora_trainable = False
    if not lora_trainable and stored in ("bf16", "fp16"):
        # Weights already in 16 bits: autocast adds no copies and the optimizer holds 16-bit
        # states, i.e. pure 16-bit training whatever args.bf16/fp16 say.
        kw["precision"] = stored
    elif not lora_trainable and stored == "fp32" and not (getattr(args, "bf16", False) or getattr(args, "fp16", False)):
        kw["precision"] = "fp32"
    source = "seq_len="
    if "seq_len" not in overrides:
        seq = _first_batch_seq_len(train_dataloader)
        source = "the first batch"
        if seq is None:
            for name in ("max_length", "max_seq_length"):
                if isinstance(getattr(args, name, None), int):
                    seq, source = getattr(args, name), f"args.{name}"
                    break
        if seq is None:
            raise ValueError("no sequence length: no first batch with input_ids and no max_seq_length; pass VramTrainerCallback(seq_len=...)")
        kw["seq_len"] = seq
    kw.update(overrides)
    return config, kw, source


def _gpu() -> Tuple[Optional[str], Optional[str], str]:
    """(`--gpu` size, device name, why not) of this process's CUDA device."""
    try:
        import torch
    except ImportError:
        return None, None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, None, "no CUDA device"
    i = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(i)
    return f"{props.total_memory}B", f"cuda:{i} {props.name}", ""


def _make_class() -> type:
    from transformers import TrainerCallback

    class VramTrainerCallback(TrainerCallback):
        """Estimate the job at train begin (warn if it will not fit); compare with CUDA's
        counters as steps run. Keywords are `vram.estimate` keywords (``seq_len=``,
        ``fused_cross_entropy=True`` ...) that override what is read from the Trainer."""

        def __init__(self, log: Callable[[str], None] = print, every_n_steps: int = 50, **estimate_kw: Any):
            # Check the keywords now, not at train begin: a typo fails before the model loads.
            _argv("estimate", None, {k: v for k, v in estimate_kw.items() if k not in ("args", "peft_config")})
            self.log = log
            self.every_n_steps = max(1, int(every_n_steps))
            self.estimate_kw = estimate_kw
            self.estimate: Optional[Estimate] = None
            self.gpu_name: Optional[str] = None

        def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
            if not state.is_world_process_zero or model is None:
                return
            gpu, self.gpu_name, why = _gpu()
            try:
                config, kw, source = job_from_trainer(args, model, train_dataloader, **self.estimate_kw)
                if gpu is not None and "gpu" not in kw:
                    kw["gpu"] = gpu
                elif "gpu" in kw:
                    self.gpu_name, why = f"--gpu {kw['gpu']}", ""
                self.estimate = estimate(config, **kw)
            except (VramError, ValueError, TypeError) as e:
                self.log(f"vram: cannot estimate this job: {e}")
                return
            est = self.estimate
            job = est.to_dict()["job"]
            self.log(
                f"vram: estimate (batch {job['batch']}, seq {job['seq']} from {source}, {job['precision']}, "
                f"{job['optimizer']} ({job['optimizer_impl']}), checkpointing {job['checkpointing']}): {est!r}"
            )
            if est.gpu_memory is None:
                self.log(f"vram: fit check skipped: {why}")
            elif not est.fits:
                warnings.warn(
                    f"vram: this job needs about {est.total / GIB:.2f} GiB but {self.gpu_name} has "
                    f"{est.gpu_memory / GIB:.2f} GiB: it will likely run out of memory",
                    UserWarning,
                    stacklevel=2,
                )

        def on_step_end(self, args, state, control, **kwargs):
            if self.estimate is None or not state.is_world_process_zero:
                return
            step = state.global_step
            if step != 1 and step % self.every_n_steps:
                return
            import torch

            if not torch.cuda.is_available():
                return
            allocated = torch.cuda.max_memory_allocated()
            reserved = torch.cuda.memory_reserved()
            est = self.estimate
            self.log(
                f"vram: step {step}: max allocated {allocated / GIB:.2f} GiB (estimate {est.peak_allocated / GIB:.2f} GiB, "
                f"{(allocated - est.peak_allocated) / max(est.peak_allocated, 1):+.1%}); reserved {reserved / GIB:.2f} GiB "
                f"(estimated total with CUDA context {est.total / GIB:.2f} GiB)"
            )

    VramTrainerCallback.__module__ = __name__
    return VramTrainerCallback


def _hf_model_in(pl_module: Any) -> Any:
    """The transformers model a LightningModule trains: itself, or an attribute holding one."""
    if hasattr(getattr(pl_module, "config", None), "to_dict"):
        return pl_module
    for name in ("model", "net", "backbone", "llm", "module"):
        m = getattr(pl_module, name, None)
        if hasattr(getattr(m, "config", None), "to_dict"):
            return m
    return None


def _lightning_precision(p: Any) -> Optional[str]:
    """Lightning's precision flag in vram's terms (`bf16-mixed`, `16-mixed`, `32-true`, `bf16-true`)."""
    return {"bf16-mixed": "bf16-mixed", "16-mixed": "fp16-mixed", "32-true": "fp32", "32": "fp32",
            "bf16-true": "bf16", "16-true": "fp16"}.get(str(p))


def _make_lightning_class() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the older package name
        from pytorch_lightning import Callback

    class VramLightningCallback(Callback):
        """Lightning: estimate the job at train start (warn if it will not fit) and compare with
        CUDA's counters every `every_n_steps` batches. The LightningModule must hold a
        transformers model (itself or `.model`); the batch size and sequence length come from the
        first training batch, the precision and accumulation from the Trainer. Keywords are
        `vram.estimate` keywords that override what is read."""

        def __init__(self, log: Callable[[str], None] = print, every_n_steps: int = 50, **estimate_kw: Any):
            _argv("estimate", None, estimate_kw)
            self._say = log
            self.every_n_steps = max(1, int(every_n_steps))
            self.estimate_kw = estimate_kw
            self.estimate: Optional[Estimate] = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.estimate is not None or batch_idx != 0 or not trainer.is_global_zero:
                return
            model = _hf_model_in(pl_module)
            if model is None:
                self._say("vram: the LightningModule holds no transformers model; measure it with vram.measure(module, batch)")
                self.estimate = False
                return
            kw: Dict[str, Any] = {}
            ids = batch.get("input_ids") if hasattr(batch, "get") else (batch[0] if isinstance(batch, (tuple, list)) else batch)
            shape = getattr(ids, "shape", None)
            if shape is not None and len(shape) >= 2:
                kw["batch_size"], kw["seq_len"] = int(shape[0]), int(shape[-1])
            prec = _lightning_precision(getattr(trainer, "precision", None))
            if prec:
                kw["precision"] = prec
            if getattr(trainer, "accumulate_grad_batches", 1) > 1:
                kw["grad_accum"] = int(trainer.accumulate_grad_batches)
            if getattr(model, "is_gradient_checkpointing", False):
                kw["checkpointing"] = "full"
            lora = _peft_of(model)
            if lora is not None:
                kw["peft_config"] = lora
            gpu, name, why = _gpu()
            if gpu is not None:
                kw["gpu"] = gpu
            kw.update(self.estimate_kw)
            try:
                self.estimate = estimate(model.config, **kw)
            except (VramError, ValueError, TypeError) as e:
                self._say(f"vram: cannot estimate this job: {e}")
                self.estimate = False
                return
            est = self.estimate
            self._say(f"vram: estimate (Lightning, precision {prec or trainer.precision}): {est!r}")
            if est.gpu_memory is None:
                self._say(f"vram: fit check skipped: {why}")
            elif not est.fits:
                warnings.warn(
                    f"vram: this job needs about {est.total / GIB:.2f} GiB but {name} has {est.gpu_memory / GIB:.2f} GiB: it will likely run out of memory",
                    UserWarning,
                    stacklevel=2,
                )

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if not self.estimate or not trainer.is_global_zero:
                return
            step = trainer.global_step
            if step != 1 and step % self.every_n_steps:
                return
            import torch

            if not torch.cuda.is_available():
                return
            allocated = torch.cuda.max_memory_allocated()
            est = self.estimate
            self._say(
                f"vram: step {step}: max allocated {allocated / GIB:.2f} GiB (estimate {est.peak_allocated / GIB:.2f} GiB, "
                f"{(allocated - est.peak_allocated) / max(est.peak_allocated, 1):+.1%}); reserved {torch.cuda.memory_reserved() / GIB:.2f} GiB"
            )

    VramLightningCallback.__module__ = __name__
    return VramLightningCallback


_CLASSES: Dict[str, type] = {}


def __getattr__(name: str) -> Any:
    # PEP 562: the class (and transformers) is built on first access only.
    if name == "VramTrainerCallback":
        if name not in _CLASSES:
            _CLASSES[name] = _make_class()
        return _CLASSES[name]
    if name == "VramLightningCallback":
        if name not in _CLASSES:
            _CLASSES[name] = _make_lightning_class()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
