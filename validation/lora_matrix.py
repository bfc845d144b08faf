"""Run the LoRA / DoRA / QLoRA matrix and append measurements to fixtures/lora.jsonl.

Resumable: points already in the file (by id) are skipped. Points run one at a time in a worker
process (recycled every 8 points; a worker that dies is recorded as that point's error and
replaced). A failed point is recorded with its error, never dropped.

    /work/venv/bin/python validation/lora_matrix.py --workers 1        (~30-40 min)
    /work/venv/bin/python validation/lora_matrix.py --only gpt2
"""
import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "fixtures", "lora.jsonl")
sys.path.insert(0, HERE)
from run_matrix import MODELS  # noqa: E402

DEV = ["llama-3.2-1b", "qwen2.5-0.5b", "mistral-7b"]
HELDOUT = ["qwen2.5-1.5b", "phi-3-mini", "gemma-3-1b", "llama-3.1-8b", "qwen3-8b", "olmo-2-7b", "gpt2",
           "qwen1.5-moe-a2.7b", "starcoder2-3b"]
BIG = {"mistral-7b", "llama-3.1-8b", "qwen3-8b", "olmo-2-7b"}
# the "q_proj, v_proj"-style explicit list, spelled as each architecture names its modules
PAIR = {"gpt2": ["c_attn"], "phi-3-mini": ["qkv_proj"]}
NF4 = {"bits": 4, "quant_type": "nf4", "nested": True, "compute_dtype": "bf16"}
NF4_FLAT = {"bits": 4, "quant_type": "nf4", "nested": False, "compute_dtype": "bf16"}
# model types with no entry in peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
# (peft/utils/constants.py:67-109): peft refuses target_modules=None for them ("Please specify
# `target_modules`"); one point per model records that refusal, the others name the attention
# pair a user would write
NO_PEFT_DEFAULT = {"phi-3-mini", "olmo-2-7b", "qwen1.5-moe-a2.7b", "starcoder2-3b"}
FP4 = {"bits": 4, "quant_type": "fp4", "nested": True, "compute_dtype": "bf16"}


def points():
    out = []

    def add(model, batch, seq, method="lora", r=8, targets=None, dropout=0.0, ck=False, base="bf16", ac="bf16",
            impl="foreach", mts=None, quant=None, keep_default=False):
        if targets is None and model in NO_PEFT_DEFAULT and not keep_default:
            targets = "pair"
        if targets == "pair":
            targets = PAIR.get(model, ["q_proj", "v_proj"])
        out.append(dict(model=model, set="dev" if model in DEV else "heldout", mode="train", batch=batch, seq=seq,
                        base_dtype=base, autocast=ac, method=method, r=r, alpha=2 * r, dropout=dropout,
                        target_modules=targets, modules_to_save=mts, quant=quant, optimizer="adamw", impl=impl,
                        checkpointing=ck, attention="sdpa"))

    # the report's representative points first
    add("llama-3.2-1b", 4, 1024)
    add("llama-3.2-1b", 4, 1024, ck=True)
    add("llama-3.2-1b", 4, 1024, quant=NF4)
    add("llama-3.2-1b", 4, 1024, ck=True, quant=NF4)
    add("llama-3.2-1b", 4, 1024, ck=True, quant=NF4_FLAT)
    head = len(out)
    for m in DEV + HELDOUT:
        if m in NO_PEFT_DEFAULT:
            add(m, 1, 512, keep_default=True)  # records peft's refusal
        # each model's list in priority order (a partial run still covers every variant)
        if m not in BIG:
            add(m, 4, 1024)
            add(m, 4, 1024, ck=True)
            add(m, 4, 1024, r=16, targets="all-linear", ck=True, quant=NF4)
            add(m, 2, 1024, method="dora")
            add(m, 4, 1024, ac=None)
            add(m, 2, 1024, base="fp32")
            add(m, 2, 1024, quant=NF4)
            add(m, 2, 1024, r=64, targets="pair", dropout=0.05)
            add(m, 2, 1024, r=16, targets="all-linear")
            add(m, 8, 2048, ck=True)
            add(m, 2, 1024, method="dora", r=16, targets="all-linear", ck=True, quant=NF4)
            add(m, 4, 1024, r=16, targets="all-linear", impl="fused")
            add(m, 2, 1024, mts=["lm_head"])
            add(m, 4, 2048, r=16, targets="all-linear", ck=True, quant=NF4_FLAT)
            add(m, 1, 512)
            add(m, 4, 1024, method="dora", r=16, targets="all-linear", ck=True)
            add(m, 2, 2048, r=16, targets="all-linear", ac=None, ck=True)
            add(m, 2, 1024, ck=True, quant=FP4)
            add(m, 2, 2048)
            add(m, 4, 2048, r=16, targets="all-linear", ck=True)
            add(m, 8, 2048, r=64, targets="all-linear", dropout=0.05, ck=True, quant=NF4)
            add(m, 2, 2048, r=16, targets="all-linear", base="fp32", ck=True)
            add(m, 4, 1024, r=64, targets="pair", dropout=0.05, ck=True)
            add(m, 1, 4096, r=16, targets="all-linear", ck=True, quant=NF4)
            add(m, 1, 4096, ck=True)
            add(m, 4, 1024, r=16, targets="all-linear", ck=True, quant=NF4, impl="fused")
        else:
            add(m, 1, 1024, r=16)
            add(m, 2, 2048, r=16, ck=True)
            add(m, 1, 2048, r=16, targets="all-linear", ck=True, quant=NF4)
            add(m, 1, 1024, method="dora", r=16, ck=True)
            add(m, 1, 2048, r=16, ac=None, ck=True)
            add(m, 4, 1024, r=16, ck=True, quant=NF4_FLAT)
            add(m, 1, 1024, r=16, base="fp32", ck=True)
            add(m, 1, 2048, r=16, targets="all-linear", ck=True)
            add(m, 2, 2048, r=64, targets="all-linear", ck=True, quant=NF4)
            add(m, 2, 1024, r=64, targets="pair", dropout=0.05, ck=True)
            add(m, 1, 2048, method="dora", r=16, targets="all-linear", ck=True, quant=NF4)
            add(m, 2, 1024, r=16, targets="all-linear", impl="fused", ck=True)
            add(m, 1, 4096, r=16, ck=True)
    # round-robin over models, so that a partial run covers every model
    by_model = {}
    for p in out[head:]:
        by_model.setdefault(p["model"], []).append(p)
    rest = []
    for i in range(max(len(v) for v in by_model.values())):
        for v in by_model.values():
            if i < len(v):
                rest.append(v[i])
    out = out[:head] + rest
    seen, uniq = set(), []
    for p in out:
        p["id"] = "|".join(f"{k}={json.dumps(p[k], sort_keys=True)}" for k in sorted(p))
        if p["id"] not in seen:
            seen.add(p["id"])
            uniq.append(p)
    return uniq
    for p in out:
        p["id"] = "|".join(f"{k}={json.dumps(p[k], sort_keys=True)}" for k in sorted(p))
    return out


def run(point):
    import lora

    cfg = json.load(open(os.path.join(ROOT, MODELS[point["model"]])))
    t = time.time()
    try:
        r = lora.train_lora(cfg, point["batch"], point["seq"], method=point["method"], r=point["r"],
                            alpha=point["alpha"], dropout=point["dropout"], target_modules=point["target_modules"],
                            modules_to_save=point["modules_to_save"], base_dtype=point["base_dtype"],
                            autocast=point["autocast"], checkpointing=point["checkpointing"],
                            optimizer=point["optimizer"], impl=point["impl"], attention=point["attention"],
                            quant=point["quant"])
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}"[:1000], "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": MODELS[point["model"]], **r}


META = {
    "command": "python validation/lora_matrix.py --workers 1",
    "fake_tensor": True,
    "rounding": "each storage rounded up to 512 bytes",
    "setup": "HF Trainer (transformers 5.23) + peft LoraConfig: model built with dtype=base_dtype; QLoRA: "
             "qlora_shim.quantize_model + peft.prepare_model_for_kbit_training(use_gradient_checkpointing="
             "checkpointing) as TRL SFTTrainer calls it; get_peft_model (autocast_adapter_dtype=True); "
             "checkpointing as Trainer: activation_checkpointing_enable(None) -> use_reentrant=False + "
             "enable_input_require_grads; bf16 autocast emulated on CPU with CUDA's fp32 op list; torch AdamW over "
             "trainable params; two steps, peak over both",
    "emulated": [
        "SDPA kernel choice, dropout, autocast fp32 list: harness.py (see README)",
        "bitsandbytes 4-bit storage made by the real bnb.functional.quantize_4bit through its register_fake ops "
        "(exact shapes/dtypes); the packed weight is a fake tensor whose class is named Params4bit (bnb's own "
        "class cannot wrap a fake tensor)",
        "bitsandbytes::gemm_4bit CUDA kernel: dequant fallback (fp32 absmax for nested, B_dq [N,K] in compute dtype, "
        "F.linear) for M > 1536 or when bnb's sm90 heuristic says so (H100 properties assumed), else the fused "
        "kernel's output only; backward is bnb's own MatMul4Bit.backward (dequantize_4bit fake ops)",
        "torch.is_autocast_enabled() without a device (CUDA) answers the emulated autocast state",
    ],
    "approximate": [
        "in-kernel workspaces (cuBLAS, flash, bitsandbytes kernels) and the CUDA context are not captured",
        "8-bit (LLM.int8) is not emulated",
    ],
    "categories": ["frozen parameters", "trainable parameters", "gradients", "optimizer states",
                   "optimizer temporaries", "activations", "inputs", "quantized weights"],
}


TECHNIQUE_OUT = os.path.join(HERE, "fixtures", "lora_technique.jsonl")
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}


def technique_cases():
    base = dict(model="tiny-llama-gqa", batch=2, seq=64, method="lora", r=8, alpha=16, dropout=0.0,
                target_modules=None, modules_to_save=None, base_dtype="bf16", autocast="bf16", checkpointing=False,
                impl="foreach", quant=None)
    for kw in [{}, {"checkpointing": True}, {"base_dtype": "fp32"}, {"base_dtype": "fp32", "autocast": None},
               {"autocast": None}, {"dropout": 0.05, "r": 16, "alpha": 32, "target_modules": "all-linear"},
               {"method": "dora"}, {"method": "dora", "checkpointing": True, "target_modules": "all-linear"},
               {"modules_to_save": ["lm_head"]}, {"impl": "fused"},
               {"quant": NF4}, {"quant": NF4, "checkpointing": True}, {"quant": NF4_FLAT, "target_modules": "all-linear"},
               {"quant": FP4, "method": "dora"}]:
        yield {**base, **kw, "technique": True}


def technique():
    """Real CPU tensors vs FakeTensorMode on a tiny Llama: the tracked peaks must be equal."""
    import lora
    import torch
    with open(TECHNIQUE_OUT, "w") as f:
        f.write(json.dumps({"_meta": {"torch": torch.__version__, "command": "python validation/lora_matrix.py --technique",
                                      "note": "real CPU tensors (bitsandbytes' CPU kernels for quantize/dequantize) "
                                              "vs fake tensors, same emulation; equal peaks check the fake-mode "
                                              "method and that bnb's register_fake shapes match its kernels"}}) + "\n")
        for case in technique_cases():
            kw = {k: case[k] for k in ("method", "r", "alpha", "dropout", "target_modules", "modules_to_save",
                                       "base_dtype", "autocast", "checkpointing", "impl", "quant")}
            t = time.time()
            rec = dict(case)
            try:
                real = lora.train_lora(TINY, case["batch"], case["seq"], fake=False, **kw)
                fake = lora.train_lora(TINY, case["batch"], case["seq"], fake=True, **kw)
                rec.update(real_peak=real["peak_allocated"], fake_peak=fake["peak_allocated"],
                           real_phase=real["peak_phase"], fake_phase=fake["peak_phase"],
                           real_categories=real["categories_at_peak"], fake_categories=fake["categories_at_peak"],
                           equal=real["peak_allocated"] == fake["peak_allocated"])
            except Exception as e:
                rec.update(error=f"{type(e).__name__}: {e}"[:1000], traceback=traceback.format_exc()[-2000:])
            rec["seconds"] = round(time.time() - t, 2)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(json.dumps({k: rec.get(k) for k in ("method", "quant", "base_dtype", "autocast", "checkpointing",
                                                       "real_peak", "fake_peak", "equal", "error")}),
                  file=sys.stderr, flush=True)


TARGETS_OUT = os.path.join(HERE, "fixtures", "peft_targets.json")


def peft_targets():
    """peft's default LoRA targets per model_type, and for every config in crates/vram-core/presets
    and validation/configs what peft adapts (default targets and "all-linear") with the trainable
    parameter counts get_nb_trainable_parameters reports, LoRA and DoRA, r=8 and r=16. peft runs
    on a meta-device model (no measurement)."""
    import glob

    import peft
    import torch
    import transformers
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as MAPPING

    import lora

    paths = sorted(glob.glob(os.path.join(ROOT, "crates/vram-core/presets/*.json"))) + \
        sorted(glob.glob(os.path.join(ROOT, "validation/configs/*.json")))
    configs, types = {}, set()
    for path in paths:
        raw = json.load(open(path))
        types.add(raw["model_type"])
        entry = {"model_type": raw["model_type"]}
        for label, targets in (("default", None), ("all-linear", "all-linear")):
            try:
                entry[label] = lora.targets_info(raw, targets)
            except Exception as e:
                entry[label] = {"error": f"{type(e).__name__}: {e}"[:300]}
        configs[os.path.relpath(path, ROOT)] = entry
        print(os.path.relpath(path, ROOT), json.dumps(entry)[:160], file=sys.stderr, flush=True)
    doc = {
        "_meta": {"peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                  "command": "python validation/lora_matrix.py --targets",
                  "source": "peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING; counts from "
                            "get_peft_model(meta model, LoraConfig(r, lora_alpha=2r, target_modules, use_dora, "
                            "task_type=CAUSAL_LM)) with each (method, r) as its own adapter (add_adapter + "
                            "set_adapter) and get_nb_trainable_parameters()[0]; base_parameters = the model's "
                            "parameter count; 'all-linear' excludes the output layer "
                            "(peft/tuners/tuners_utils.py _maybe_include_all_linear_layers)",
                  "note": "a model_type without a mapping entry makes peft refuse target_modules=None (error recorded)"},
        "default_targets": {t: MAPPING.get(t) for t in sorted(types)},
        "configs": configs,
    }
    with open(TARGETS_OUT, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--only", help="only points of this model")
    ap.add_argument("--technique", action="store_true", help="real vs fake on a tiny model")
    ap.add_argument("--targets", action="store_true", help="write fixtures/peft_targets.json")
    args = ap.parse_args()
    if args.targets:
        return peft_targets()
    if args.technique:
        return technique()
    done = set()
    if os.path.exists(OUT):
        for line in open(OUT):
            rec = json.loads(line)
            if "id" in rec and not rec.get("technique"):
                done.add(rec["id"])
    else:
        import bitsandbytes
        import peft
        import torch
        import transformers
        with open(OUT, "w") as f:
            f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                          "peft": peft.__version__, "bitsandbytes": bitsandbytes.__version__,
                                          **META}}) + "\n")
    todo = [p for p in points() if p["id"] not in done and (not args.only or p["model"] == args.only)]
    print(f"{len(done)} done, {len(todo)} to run", file=sys.stderr, flush=True)
    ctx = mp.get_context("spawn")
    pool = None
    with open(OUT, "a") as f:
        for i, p in enumerate(todo, 1):
            if pool is None:
                pool = cf.ProcessPoolExecutor(args.workers, mp_context=ctx, max_tasks_per_child=8)
            t = time.time()
            try:
                rec = pool.submit(run, p).result()
            except Exception as e:  # the worker died: record it, start a new one
                rec = {**p, "source": MODELS[p["model"]], "error": f"worker died: {type(e).__name__}: {e}",
                       "seconds": round(time.time() - t, 2)}
                pool.shutdown(wait=False, cancel_futures=True)
                pool = None
            f.write(json.dumps(rec) + "\n")
            f.flush()
            status = rec["error"][:200] if "error" in rec else f"{rec['peak_allocated'] / 2**30:.3f} GiB"
            print(f"[{i}/{len(todo)}] {p['model']} {p['method']} r{p['r']} {p['target_modules']} q={bool(p['quant'])} "
                  f"ck={p['checkpointing']} b{p['batch']} s{p['seq']} {rec['seconds']}s {status}",
                  file=sys.stderr, flush=True)
    if pool is not None:
        pool.shutdown()


if __name__ == "__main__":
    main()
