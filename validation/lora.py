"""LoRA / DoRA / QLoRA fine-tuning as HF Trainer (or TRL SFTTrainer) + a peft LoraConfig runs it,
measured under FakeTensorMode with harness.py's CUDA emulation and storage tracker.

The set-up follows the libraries' own code, called unchanged (versions: transformers 5.23.0,
peft 0.21.2, bitsandbytes 0.50.2, torch 2.15.0; paths relative to site-packages):

1. Model from config.json with dtype=base_dtype (harness.build).
2. QLoRA: qlora_shim.quantize_model (transformers' replace_with_bnb_linear rule, real
   bnb.nn.Linear4bit/Params4bit with fake quantized storage), then
   peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing,
   gradient_checkpointing_kwargs={}) as TRL's SFTTrainer calls it (peft/utils/other.py:158-258:
   freezes every parameter, casts every fp16/bf16 parameter that is not a Params4bit to fp32 —
   embeddings, norms, lm_head, biases — other.py:204-209, and with checkpointing calls
   enable_input_require_grads, other.py:228-233).
3. get_peft_model(model, LoraConfig(r, lora_alpha, lora_dropout, target_modules, use_dora,
   modules_to_save, task_type="CAUSAL_LM")) with peft's default autocast_adapter_dtype=True
   (adapters, DoRA magnitudes and modules_to_save copies of a half model upcast to fp32).
4. Checkpointing as transformers 5.23 Trainer does it (trainer.py:1502-1527):
   `model.activation_checkpointing_enable(activation_checkpointing_kwargs=None)` which becomes
   {"use_reentrant": False} (modeling_utils.py:3148-3149) and calls enable_input_require_grads
   because main_input_name == "input_ids" (modeling_utils.py:3181-3189). PeftModel forwards the
   attribute to the transformers model.
5. Trainer with bf16=True runs forward+loss under accelerate's autocast(bf16) (emulated with CPU
   autocast + harness's CUDA fp32 op list). peft's quantized-layer code asks
   `torch.is_autocast_enabled()` with no device (peft/tuners/lora/bnb.py:206,260,482,543), which
   means CUDA autocast: answered here with the emulated (CPU) autocast state.
6. torch AdamW (foreach or fused) over the trainable parameters only; two steps, steady state
   in the second (forward with loss, backward, step, zero_grad(set_to_none=True)).
"""
import contextlib
import copy
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

import harness  # noqa: E402  (installs the CUDA emulation)
from harness import KERNELS, Tracker  # noqa: E402

_is_autocast_enabled = torch.is_autocast_enabled


def _cuda_is_autocast_enabled(*args, **kwargs):
    """No device argument means CUDA autocast; the emulated CUDA autocast is CPU autocast here."""
    if not args and not kwargs:
        return _is_autocast_enabled("cpu")
    return _is_autocast_enabled(*args, **kwargs)


torch.is_autocast_enabled = _cuda_is_autocast_enabled

_swap_tensors = torch.utils.swap_tensors


def _swap_or_set_data(t1, t2):
    """nn.Module._apply (torch/nn/modules/module.py:968-985) swaps FakeTensor parameters with
    torch.utils.swap_tensors, which refuses any tensor with a weakref, and FakeTensorMode keeps
    one on every fake tensor: `.to()` on a fake module (peft moves adapters to the base layer's
    device/dtype) fails. Fall back to `t1.data = t2` (what _apply does for real tensors): same
    storages, same dtypes, no memory difference."""
    try:
        _swap_tensors(t1, t2)
    except RuntimeError as e:
        if "weakref" not in str(e):
            raise
        t1.data = t2.data if isinstance(t2, torch.nn.Parameter) else t2


torch.utils.swap_tensors = _swap_or_set_data

DT = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


class _FakeSafeCopy:
    """peft's ModulesToSaveWrapper deep-copies the wrapped module (peft/utils/other.py:653,
    `copy.deepcopy(self.original_module)`). Deep-copying a FakeTensor goes through
    Tensor.__deepcopy__ (data_ptr of a fake tensor, then a tensor of a new FakeTensorMode that the
    running mode refuses to mix, and at times a crash). Same copy, made safely: the memo is seeded
    with a fresh tensor in the running fake mode for every parameter and buffer (same shape,
    strides, dtype, requires_grad, and an nn.Parameter where it was one), so deepcopy never copies
    a fake tensor itself. Values are irrelevant under fake mode."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(obj, memo=None):
        memo = {} if memo is None else memo
        mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
        if isinstance(obj, torch.nn.Module) and mode is not None:
            for t in list(obj.parameters()) + list(obj.buffers()):
                if isinstance(t, FakeTensor) and id(t) not in memo:
                    new = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
                    if isinstance(t, torch.nn.Parameter):
                        new = torch.nn.Parameter(new, requires_grad=t.requires_grad)
                    memo[id(t)] = new
        return copy.deepcopy(obj, memo)


import peft.utils.other as _peft_other  # noqa: E402

_peft_other.copy = _FakeSafeCopy()


def _setup(raw_config, *, method, r, alpha, dropout, target_modules, modules_to_save, base_dtype, checkpointing,
           attention, quant, fake):
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    cfg, model = harness.build(raw_config, base_dtype, attention, fake)
    qtensors = []
    if quant:
        import qlora_shim
        qtensors = qlora_shim.quantize_model(model, quant)
        prepare_model_for_kbit_training(model, use_gradient_checkpointing=checkpointing,
                                        gradient_checkpointing_kwargs={})
    lcfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                      use_dora=method == "dora", modules_to_save=modules_to_save, task_type="CAUSAL_LM")
    pm = get_peft_model(model, lcfg)
    if checkpointing:
        pm.activation_checkpointing_enable(activation_checkpointing_kwargs=None)
    pm.train()
    return cfg, pm, qtensors


def adapter_info(pm):
    from peft.tuners.tuners_utils import BaseTunerLayer
    names = []
    for name, m in pm.named_modules():
        if isinstance(m, BaseTunerLayer):
            names.append(name.rsplit(".", 1)[-1])
    trainable, total = pm.get_nb_trainable_parameters()
    return {"trainable_parameters": int(trainable), "all_parameters": int(total), "adapted_modules": len(names),
            "adapted_names": sorted(set(names))}


def train_lora(raw_config, batch, seq, *, method="lora", r=8, alpha=16, dropout=0.0, target_modules=None,
               modules_to_save=None, base_dtype="bf16", autocast="bf16", checkpointing=False, optimizer="adamw",
               impl="foreach", attention="sdpa", quant=None, steps=2, fake=True, seed=0, events=None):
    if optimizer != "adamw":
        raise ValueError(optimizer)
    KERNELS.clear()
    tr = Tracker()
    tr.events = events  # the allocation sequence (see harness.Tracker.events)
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode:
        torch.manual_seed(seed)
        cfg, pm, qtensors = _setup(raw_config, method=method, r=r, alpha=alpha, dropout=dropout,
                                   target_modules=target_modules, modules_to_save=modules_to_save,
                                   base_dtype=base_dtype, checkpointing=checkpointing, attention=attention,
                                   quant=quant, fake=fake)
        info = adapter_info(pm)
        params = [p for p in pm.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=2e-4, foreach=impl == "foreach", fused=impl == "fused" or None)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: tr.relabel(p.grad, "gradients"))
        ids = torch.randint(0, cfg.get_text_config().vocab_size, (batch, seq))
        qids = {id(t.untyped_storage()) for t in qtensors}

        def label_params():
            # (re)label: a forward may replace a parameter's storage (bnb casts a bias in place,
            # nn/modules.py:632-634), which then is a parameter, not an activation
            for t in qtensors:
                tr.track(t, "quantized weights")
                tr.relabel(t, "quantized weights")
            for p in pm.parameters():
                if id(p.untyped_storage()) in qids or p.__class__.__name__ == "Params4bit":
                    cat = "quantized weights"
                else:
                    cat = "trainable parameters" if p.requires_grad else "frozen parameters"
                tr.track(p, cat)
                tr.relabel(p, cat)
            for b in pm.buffers():
                tr.track(b, "frozen parameters")

        amp = DT[autocast] if autocast else None
        with tr:
            for step in range(steps):
                label_params()
                tr.category = "inputs"
                inputs = {"input_ids": ids.clone(), "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
                tr.phase, tr.category = f"forward{step}", "activations"
                ctx = torch.autocast("cpu", dtype=amp) if amp else contextlib.nullcontext()
                with ctx:
                    loss = pm(input_ids=inputs["input_ids"], labels=inputs["labels"]).loss
                tr.phase, tr.category = f"backward{step}", "activations"
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
    return {**harness.result(tr), **info}


def targets_info(raw_config, target_modules, ranks=(8, 16), methods=("lora", "dora")):
    """Adapter facts from peft itself on a meta-device model (no measurement). One model per
    (target set, method); every r is a separate peft adapter (get_peft_model, then add_adapter),
    made the only trainable one with set_adapter, and get_nb_trainable_parameters() is read for
    it. low_cpu_mem_usage=True skips the (irrelevant) adapter initialisation. An error (peft
    refusing) is recorded per method."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM
    raw = dict(raw_config)
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    out = {}
    for method in methods:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        pm = None
        try:
            for r in ranks:
                name = f"{method}_r{r}"
                lcfg = LoraConfig(r=r, lora_alpha=2 * r, target_modules=target_modules, use_dora=method == "dora",
                                  task_type="CAUSAL_LM")
                if pm is None:
                    pm = get_peft_model(model, lcfg, adapter_name=name, low_cpu_mem_usage=True)
                    info = adapter_info(pm)
                    out.setdefault("adapted_modules", info["adapted_modules"])
                    out.setdefault("adapted_names", info["adapted_names"])
                    out.setdefault("base_parameters", info["all_parameters"] - info["trainable_parameters"])
                else:
                    pm.add_adapter(name, lcfg, low_cpu_mem_usage=True)
                pm.set_adapter(name)
                out[f"trainable_{name}"] = int(pm.get_nb_trainable_parameters()[0])
        except Exception as e:
            out[f"{method}_error"] = f"{type(e).__name__}: {e}"[:300]
    return out


if __name__ == "__main__":
    cfg = json.load(open(sys.argv[1]))
    kw = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    t = time.time()
    out = train_lora(cfg, int(sys.argv[2]), int(sys.argv[3]), **kw)
    out["seconds"] = round(time.time() - t, 2)
    print(json.dumps(out, indent=1))
