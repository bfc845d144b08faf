"""vram: how much GPU memory a training or inference job takes, before you launch it.

The Python API runs the ``vram`` command line in-process (a compiled extension, no subprocess)
with ``--json`` and wraps its JSON in small result classes; every number comes from the same
code as the CLI. Keyword arguments are the CLI's flags (``seq_len=4096`` is ``--seq-len 4096``,
``fused_cross_entropy=True`` is ``--fused-cross-entropy``), including its Hugging Face / TRL
spellings (``per_device_train_batch_size``, ``gradient_checkpointing``, ``optim``, ``lora_r``,
``load_in_4bit`` ...); ``bf16=True``/``fp16=True`` mean ``--precision bf16-mixed``/``fp16-mixed``
as in ``TrainingArguments``. An unknown keyword raises ``TypeError``; a job the CLI refuses
raises :class:`VramError` with the CLI's message.

>>> import vram
>>> vram.estimate("qwen2.5-1.5b", seq_len=4096, per_device_train_batch_size=3, bf16=True, gpu="h20")
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from . import _vram
from ._vram import VramError

__all__ = [
    "measure",
    "Measurement",
    "VramError",
    "Estimate",
    "Component",
    "Fit",
    "Plan",
    "Serve",
    "estimate",
    "fit",
    "plan",
    "serve",
    "run_json",
    "GIB",
]

__version__: str = _vram.__version__

#: Bytes in a GiB (2^30): how results print (``nvidia-smi`` and PyTorch report MiB/GiB).
GIB = 1 << 30

VramError.__module__ = "vram"


def _gib(n: Optional[int]) -> str:
    return "n/a" if n is None else f"{n / GIB:.2f} GiB"


# --- keyword arguments -> CLI flags ---------------------------------------------------------

_FLAG_CACHE: Dict[str, Dict[str, Tuple[str, str, bool]]] = {}


def _flags(subcommand: str) -> Dict[str, Tuple[str, str, bool]]:
    """Spelling -> (spelling, canonical long name, takes a value), read from the CLI's parser."""
    if subcommand not in _FLAG_CACHE:
        table: Dict[str, Tuple[str, str, bool]] = {}
        for f in _vram.flags(subcommand) or []:
            for spelling in [f["long"], *f["aliases"]]:
                table[spelling] = (spelling, f["long"], f["takes_value"])
        _FLAG_CACHE[subcommand] = table
    return _FLAG_CACHE[subcommand]


# Set by the functions themselves, never by a keyword.
_RESERVED = {"json", "model", "help", "version"}


def _text(v: Any) -> str:
    # HF enums (OptimizerNames, IntervalStrategy) are str subclasses whose str() is the repr.
    value = getattr(v, "value", v)
    if isinstance(value, bool):
        return "true" if value else "false"
    # vLLM's JSON flags (speculative_config, eplb_config, mm_processor_kwargs) as Python dicts.
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _to_args(subcommand: str, name: str, value: Any) -> Tuple[str, List[str]]:
    """One keyword as (canonical flag, argv words); TypeError if the CLI has no such flag."""
    table = _flags(subcommand)
    hit = None if name in _RESERVED else table.get(name) or table.get(name.replace("_", "-"))
    if hit is None:
        raise TypeError(f"vram.{subcommand}() got an unexpected keyword argument '{name}' (not a `vram {subcommand}` flag)")
    spelling, long, takes_value = hit
    flag = f"--{spelling}"
    if value is None:
        return long, []
    if not takes_value:
        if not isinstance(value, bool):
            raise TypeError(f"{name}= is a switch (`{flag}`): pass True or False, not {value!r}")
        return long, [flag] if value else []
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        return long, [f"{flag}={_text(v)}" for v in items]
    return long, [f"{flag}={_text(value)}"]


def _precision_from_hf(bf16: Any, fp16: Any) -> Optional[str]:
    """TrainingArguments' bf16/fp16 switches: autocast (mixed precision) over the loaded weights."""
    if bf16 and fp16:
        raise ValueError("bf16=True and fp16=True together: choose one (as TrainingArguments does)")
    if bf16:
        return "bf16-mixed"
    if fp16:
        return "fp16-mixed"
    return None


# Flags each command searches itself and refuses when given (crates/vram/src/resolve.rs,
# reject_searched_flags): values read from a TrainingArguments object are not passed for them;
# the same flags given explicitly as keywords still reach the CLI, which refuses them by name.
_SEARCHED = {
    "fit": {"batch-size"},
    "plan": {"batch-size", "grad-accum", "checkpointing"},
}


def _training_arguments(args: Any, subcommand: str) -> Dict[str, Any]:
    """The memory-relevant fields of a transformers TrainingArguments (or TRL SFTConfig)."""
    kw: Dict[str, Any] = {}
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "optim"):
        if getattr(args, name, None) is not None:
            kw[name] = getattr(args, name)
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing (old name deprecated).
    if getattr(args, "activation_checkpointing", False) or getattr(args, "gradient_checkpointing", False):
        kw["gradient_checkpointing"] = True
    if getattr(args, "use_liger_kernel", False):
        kw["use_liger_kernel"] = True
    # TRL's SFTConfig: max_length (TRL >= 0.20) or max_seq_length (older).
    for name in ("max_length", "max_seq_length"):
        if isinstance(getattr(args, name, None), int):
            kw["seq_len"] = getattr(args, name)
            break
    prec = _precision_from_hf(getattr(args, "bf16", False), getattr(args, "fp16", False))
    if prec:
        kw["precision"] = prec
    skip = _SEARCHED.get(subcommand, set())
    table = _flags(subcommand)
    return {k: v for k, v in kw.items() if (table.get(k) or table.get(k.replace("_", "-"), (None, None)))[1] not in skip}


def _peft_config(cfg: Any) -> Dict[str, Any]:
    """A peft LoraConfig: rank, alpha, dropout, targets, modules_to_save, DoRA."""
    peft_type = getattr(cfg, "peft_type", None)
    peft_type = getattr(peft_type, "value", peft_type)
    if peft_type is not None and str(peft_type).upper() != "LORA":
        raise ValueError(f"peft_config: only LoRA/DoRA adapters are estimated, not {peft_type}")
    kw: Dict[str, Any] = {"peft": "dora" if getattr(cfg, "use_dora", False) else "lora"}
    for src, dst in (("r", "lora_r"), ("lora_alpha", "lora_alpha"), ("lora_dropout", "lora_dropout")):
        if getattr(cfg, src, None) is not None:
            kw[dst] = getattr(cfg, src)
    targets = getattr(cfg, "target_modules", None)
    if targets is not None:
        kw["lora_target_modules"] = [targets] if isinstance(targets, str) else targets
    if getattr(cfg, "modules_to_save", None):
        kw["lora_modules_to_save"] = cfg.modules_to_save
    return kw


def _is_training_arguments(o: Any) -> bool:
    return hasattr(o, "per_device_train_batch_size") and hasattr(o, "gradient_accumulation_steps")


def _is_peft_config(o: Any) -> bool:
    return hasattr(o, "target_modules") and hasattr(o, "r")


class _Model:
    """`model` as a CLI `--model` value: a name/path as it is; a transformers config (or a
    model, or a config dict) written to a temporary config.json for the duration of the call."""

    def __init__(self, model: Any):
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        #: For a config object: its name (the CLI names the model by the temporary path).
        self.label: Optional[str] = None
        if isinstance(model, (str, os.PathLike)):
            self.value = os.fspath(model)
            return
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            model = config
        if hasattr(model, "to_dict"):
            d = model.to_dict()
        elif isinstance(model, Mapping):
            d = dict(model)
        else:
            raise TypeError(
                f"model must be a preset or Hub name, a path, a transformers PretrainedConfig or model, or a config dict; got {type(model).__name__}"
            )
        self.label = str(d.get("_name_or_path") or d.get("model_type") or "model")
        name = self.label.rstrip("/").split("/")[-1] or "model"
        self._tmp = tempfile.TemporaryDirectory(prefix="vram-")
        folder = os.path.join(self._tmp.name, name)
        os.makedirs(folder)
        self.value = os.path.join(folder, "config.json")
        with open(self.value, "w", encoding="utf-8") as f:
            json.dump(d, f, default=str)

    def __enter__(self) -> str:
        return self.value

    def __exit__(self, *exc: Any) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _argv(subcommand: str, model: Optional[str], kw: Mapping[str, Any]) -> List[str]:
    """`vram SUBCOMMAND --model M ... --json`, one keyword after another; explicit keywords
    override what TrainingArguments / peft config objects and bf16/fp16 said."""
    kw = dict(kw)
    derived: Dict[str, Any] = {}
    for key in ("args", "training_args"):
        if key in kw:
            obj = kw.pop(key)
            if obj is None:
                continue
            if not _is_training_arguments(obj):
                raise TypeError(f"{key}= must be a transformers TrainingArguments (or TRL SFTConfig), got {type(obj).__name__}")
            derived.update(_training_arguments(obj, subcommand))
    for key in ("peft_config", "lora_config"):
        if key in kw:
            obj = kw.pop(key)
            if obj is None:
                continue
            if not _is_peft_config(obj):
                raise TypeError(f"{key}= must be a peft LoraConfig, got {type(obj).__name__}")
            derived.update(_peft_config(obj))
    prec = _precision_from_hf(kw.pop("bf16", None), kw.pop("fp16", None))
    if prec is not None:
        kw.setdefault("precision", prec)
    words: Dict[str, List[str]] = {}
    for name, value in derived.items():
        long, w = _to_args(subcommand, name, value)
        words[long] = w
    explicit: Dict[str, str] = {}
    for name, value in kw.items():
        long, w = _to_args(subcommand, name, value)
        if long in explicit:
            raise TypeError(f"vram.{subcommand}(): {explicit[long]}= and {name}= are the same flag (--{long})")
        explicit[long] = name
        words[long] = w
    argv = [subcommand]
    if model is not None:
        argv += ["--model", model]
    for w in words.values():
        argv += w
    return argv + ["--json"]


def run_json(*args: str) -> Any:
    """Run ``vram ARGS... --json`` in-process and return the parsed JSON (any subcommand:
    ``vram.run_json("gpus")``). Raises :class:`VramError` as the CLI fails."""
    argv = [str(a) for a in args]
    if "--json" not in argv:
        argv.append("--json")
    return json.loads(_vram.run_json(argv))


def _run(subcommand: str, model: Any, kw: Mapping[str, Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """The command's JSON, and the name of a model given as a config object (else None)."""
    m = _Model(model)
    with m as path:
        return json.loads(_vram.run_json(_argv(subcommand, path, kw))), m.label


def _named(result: Any, label: Optional[str]) -> Any:
    return result if label is None else replace(result, model=label)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Component:
    """One line of the breakdown at the peak."""

    name: str
    bytes: int
    kind: str  # "allocated" (counted by torch.cuda.max_memory_allocated) or "overhead"
    detail: str = ""

    @property
    def gib(self) -> float:
        return self.bytes / GIB

    def __repr__(self) -> str:
        return f"Component({self.name!r}, {_gib(self.bytes)}, {self.kind})"


def _components(v: Iterable[Mapping[str, Any]]) -> List[Component]:
    return [Component(c["name"], int(c["bytes"]), c.get("kind", ""), c.get("detail") or "") for c in v]


def _top(components: List[Component], n: int = 3) -> str:
    top = sorted(components, key=lambda c: c.bytes, reverse=True)[:n]
    return ", ".join(f"{c.name} {_gib(c.bytes)}" for c in top)


@dataclass(frozen=True, repr=False)
class Estimate:
    """`vram estimate --json`: the peak of one GPU (or the most loaded rank of a layout)."""

    #: The model's name (for a config object: its ``_name_or_path`` or ``model_type``; the CLI,
    #: in ``to_dict()``, names it by the temporary config.json it read).
    model: str
    components: List[Component]
    #: Sum of the allocated components: what torch.cuda.max_memory_allocated() reports.
    peak_allocated: int
    #: Peak allocated + CUDA context, cuBLAS workspaces and the allocator's reserve (nvidia-smi).
    total: int
    #: The phase that holds the peak (None for a distributed layout's per-rank estimate).
    peak_phase: Optional[str]
    #: Allocated bytes at every phase evaluated.
    phases: Dict[str, int]
    #: With gpu=: the GPU's memory in bytes, and whether the total fits it.
    gpu_memory: Optional[int] = None
    fits: Optional[bool] = None
    advice: List[str] = field(default_factory=list)
    _json: Dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Estimate":
        gpu = v.get("gpu") or {}
        return cls(
            model=v["model"]["name"],
            components=_components(v["components"]),
            peak_allocated=int(v["peak_allocated_bytes"]),
            total=int(v["total_bytes"]),
            peak_phase=v.get("peak_phase"),
            phases={p["phase"]: int(p["allocated_bytes"]) for p in v.get("phases", [])},
            gpu_memory=gpu.get("memory_bytes"),
            fits=gpu.get("fits"),
            advice=[a if isinstance(a, str) else json.dumps(a) for a in v.get("advice") or []],
            _json=v,
        )

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object exactly as `vram estimate --json` printed it."""
        return json.loads(json.dumps(self._json))

    def __repr__(self) -> str:
        gpu = ""
        if self.gpu_memory is not None:
            gpu = f", {'fits' if self.fits else 'does NOT fit'} {_gib(self.gpu_memory)}"
        phase = f" at {self.peak_phase}" if self.peak_phase else ""
        return (
            f"Estimate({self.model}: peak allocated {_gib(self.peak_allocated)}{phase}, "
            f"total {_gib(self.total)}{gpu}; top: {_top(self.components)})"
        )


@dataclass(frozen=True, repr=False)
class Fit:
    """`vram fit --json`: the largest micro-batch within target x GPU memory."""

    model: str
    gpu: str
    gpu_memory: int
    target_utilization: float
    budget: int
    #: None when batch 1 does not fit.
    max_batch_size: Optional[int]
    grad_accum: Optional[int]
    utilization: Optional[float]
    #: The estimate at the chosen batch (None when nothing fits).
    estimate: Optional[Estimate]
    rows: List[Dict[str, Any]]
    alternatives: List[Dict[str, Any]]
    _json: Dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Fit":
        est = v.get("estimate")
        if est is not None:
            est = Estimate.from_json({"model": v["model"], "gpu": v.get("gpu"), **est})
        return cls(
            model=v["model"]["name"],
            gpu=v["gpu"]["name"],
            gpu_memory=int(v["gpu"]["memory_bytes"]),
            target_utilization=float(v["target_utilization"]),
            budget=int(v["budget_bytes"]),
            max_batch_size=v.get("max_batch_size"),
            grad_accum=v.get("grad_accum"),
            utilization=v.get("utilization"),
            estimate=est,
            rows=list(v.get("rows") or []),
            alternatives=list(v.get("alternatives") or []),
            _json=v,
        )

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object exactly as `vram fit --json` printed it."""
        return json.loads(json.dumps(self._json))

    def __repr__(self) -> str:
        head = f"Fit({self.model} on {self.gpu} ({_gib(self.gpu_memory)}) at {self.target_utilization:.0%}: "
        if self.max_batch_size is None:
            alts = ", ".join(str(a.get("change")) for a in self.alternatives[:3])
            return head + f"batch 1 does not fit; alternatives: {alts or 'none'})"
        body = f"max batch {self.max_batch_size}"
        if self.grad_accum and self.grad_accum > 1:
            body += f" x {self.grad_accum} accumulation"
        if self.estimate is not None:
            body += f", total {_gib(self.estimate.total)} ({self.utilization:.0%}); top: {_top(self.estimate.components)}"
        return head + body + ")"


@dataclass(frozen=True, repr=False)
class Plan:
    """`vram plan --json`: distributed layouts that fit, best first."""

    plans: List[Dict[str, Any]]
    evaluated: int
    fitting: int
    _json: Dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Plan":
        return cls(plans=list(v.get("plans") or []), evaluated=int(v.get("evaluated", 0)), fitting=int(v.get("fitting", 0)), _json=v)

    @property
    def best(self) -> Optional[Dict[str, Any]]:
        return self.plans[0] if self.plans else None

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object exactly as `vram plan --json` printed it."""
        return json.loads(json.dumps(self._json))

    def __repr__(self) -> str:
        b = self.best
        if b is None:
            return f"Plan(no layout fits; searched {self.evaluated})"
        return (
            f"Plan({self.fitting} of {self.evaluated} layouts fit; best: micro-batch {b.get('micro_batch')} "
            f"x {b.get('grad_accum')} accumulation, {_gib(b.get('per_gpu_bytes'))} per GPU, "
            f"{b.get('tokens_per_second', 0):.0f} tokens/s: {b.get('reason')})"
        )


@dataclass(frozen=True, repr=False)
class Serve:
    """`vram serve --json`: vLLM's start-up accounting per GPU, or a GGUF file under llama.cpp."""

    engine: str
    fits: Optional[bool]
    #: vLLM: one dict per GPU (weights_bytes, kv_cache_bytes, max_concurrency ...); llama.cpp: [].
    gpus: List[Dict[str, Any]]
    _json: Dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, v: Dict[str, Any]) -> "Serve":
        gpus = list(v.get("gpus") or [])
        fits = v.get("fits")
        if fits is None and gpus:
            fits = all(g.get("fits") for g in gpus)
        return cls(engine=str(v.get("engine")), fits=fits, gpus=gpus, _json=v)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object exactly as `vram serve --json` printed it."""
        return json.loads(json.dumps(self._json))

    def __repr__(self) -> str:
        fits = {True: "fits", False: "does NOT fit", None: "fit unknown"}[self.fits]
        if self.gpus:
            g = self.gpus[0]
            return (
                f"Serve({self.engine}, {fits}: weights {_gib(g.get('weights_bytes'))}, "
                f"KV cache {_gib(g.get('kv_cache_bytes'))} = {g.get('kv_tokens')} tokens, "
                f"max concurrency {g.get('max_concurrency', 0):.1f}x)"
            )
        plan = self._json.get("plan") or {}
        return f"Serve({self.engine}, {fits}: {plan.get('gpu_layers')} layers on the GPU, {_gib(plan.get('gpu_total_bytes'))})"


# --- the commands ----------------------------------------------------------------------------


def estimate(model: Any, **kw: Any) -> Estimate:
    """`vram estimate`: the peak, component by component.

    ``model``: a preset or Hub id, a config.json or model directory path, a transformers
    ``PretrainedConfig`` or model, or a config dict. Keywords are `vram estimate` flags (HF/TRL
    spellings accepted), ``bf16``/``fp16``, ``args=TrainingArguments(...)`` and
    ``peft_config=LoraConfig(...)``.
    """
    v, label = _run("estimate", model, kw)
    return _named(Estimate.from_json(v), label)


def fit(model: Any, gpu: str, **kw: Any) -> Fit:
    """`vram fit`: the largest micro-batch within ``target_utilization`` x the GPU's memory."""
    v, label = _run("fit", model, {"gpu": gpu, **kw})
    f = Fit.from_json(v)
    if label is not None and f.estimate is not None:
        f = replace(f, estimate=replace(f.estimate, model=label))
    return _named(f, label)


def plan(model: Any, gpus: int, gpu: str, **kw: Any) -> Plan:
    """`vram plan`: every DDP / ZeRO / FSDP / Megatron layout on ``gpus`` x ``gpu`` that fits, ranked."""
    return Plan.from_json(_run("plan", model, {"gpus": gpus, "gpu": gpu, **kw})[0])


def serve(model: Any, gpu: str, **kw: Any) -> Serve:
    """`vram serve`: vLLM's KV-cache pool and concurrency (or a .gguf under llama.cpp)."""
    for key in ("args", "training_args", "peft_config", "lora_config", "bf16", "fp16"):
        if key in kw:
            raise TypeError(f"vram.serve() got an unexpected keyword argument '{key}' (serving reads no training settings)")
    return Serve.from_json(_run("serve", model, {"gpu": gpu, **kw})[0])


def measure(module, example_inputs, **kwargs):
    """Measure any `torch.nn.Module` under FakeTensorMode on the CPU (no GPU, no memory used):
    the peak of live tensor bytes of `steps` training steps (or one forward with train=False)
    and what made it up. See `vram._measure.measure` for the arguments. Needs torch."""
    from ._measure import measure as _m

    return _m(module, example_inputs, **kwargs)


def __getattr__(name):
    if name == "Measurement":
        from ._measure import Measurement

        return Measurement
    raise AttributeError(name)
