"""Development checks of the LoRA model on architectures outside the matrix's development set
(LayerNorm + GELU, parallel blocks, Conv1D, learned positions, Gemma norms, MLA + MoE with
peft's fused-expert targets). Same harness as lora_matrix.py (validation/lora.py); one JSON line
per point to fixtures/lora_dev_extra.jsonl, all marked "set": "dev".

    /work/venv/bin/python validation/lora_dev_extra.py        (~10 min on 2 cores)
"""
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "fixtures", "lora_dev_extra.jsonl")
P, C = "crates/vram-core/presets", "validation/configs"
NF4 = {"bits": 4, "quant_type": "nf4", "nested": True, "compute_dtype": "bf16"}
NF4_FLAT = {"bits": 4, "quant_type": "nf4", "nested": False, "compute_dtype": "bf16"}

POINTS = [
    ("llama-3.2-1b", P, 4, 1024, dict(dropout=0.05)),
    ("llama-3.2-1b", P, 4, 1024, dict(target_modules="all-linear", r=16)),
    ("llama-3.2-1b", P, 2, 1024, dict(method="dora", target_modules="all-linear")),
    ("llama-3.2-1b", P, 2, 1024, dict(base_dtype="fp32")),
    ("llama-3.2-1b", P, 2, 1024, dict(autocast=None)),
    ("qwen2.5-0.5b", P, 4, 1024, dict(modules_to_save=["lm_head"])),
    ("pythia-160m", C, 4, 1024, dict()),
    ("pythia-160m", C, 4, 1024, dict(target_modules="all-linear", dropout=0.1)),
    ("opt-125m", C, 4, 1024, dict()),
    ("opt-125m", C, 4, 1024, dict(target_modules="all-linear")),
    ("phi-2", C, 2, 1024, dict()),
    ("phi-2", C, 2, 1024, dict(target_modules="all-linear", quant=NF4)),
    ("gpt2-medium", P, 4, 1024, dict()),
    ("gpt2-medium", P, 4, 1024, dict(target_modules="all-linear", quant=NF4_FLAT)),
    ("gemma-7b", C, 1, 1024, dict()),
    ("deepseek-v2-lite", C, 1, 1024, dict(target_modules="all-linear")),
]


def point(model, folder, batch, seq, kw):
    p = dict(model=model, set="dev", mode="train", batch=batch, seq=seq, base_dtype=kw.get("base_dtype", "bf16"),
             autocast=kw.get("autocast", "bf16"), method=kw.get("method", "lora"), r=kw.get("r", 8),
             alpha=2 * kw.get("r", 8), dropout=kw.get("dropout", 0.0), target_modules=kw.get("target_modules"),
             modules_to_save=kw.get("modules_to_save"), quant=kw.get("quant"), optimizer="adamw", impl="foreach",
             checkpointing=kw.get("checkpointing", False), attention="sdpa")
    p["id"] = "|".join(f"{k}={json.dumps(p[k], sort_keys=True)}" for k in sorted(p))
    p["source"] = f"{folder}/{model}.json"
    return p


def measure(p):
    import lora
    raw = json.load(open(os.path.join(ROOT, p["source"])))
    batch, seq = p["batch"], p["seq"]
    t = time.time()
    try:
        r = lora.train_lora(raw, batch, seq, method=p["method"], r=p["r"], alpha=p["alpha"], dropout=p["dropout"],
                            target_modules=p["target_modules"], modules_to_save=p["modules_to_save"],
                            base_dtype=p["base_dtype"], autocast=p["autocast"], checkpointing=p["checkpointing"],
                            quant=p["quant"])
        p.update(r)
    except Exception as e:  # recorded, never dropped
        p["error"] = "".join(traceback.format_exception_only(type(e), e)).strip()
    p["seconds"] = round(time.time() - t, 1)
    return p


def main():
    done = set()
    if os.path.exists(OUT):
        done = {json.loads(l).get("id") for l in open(OUT) if l.strip()}
    else:
        import peft, torch, transformers, bitsandbytes
        with open(OUT, "w") as f:
            f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                          "peft": peft.__version__, "bitsandbytes": bitsandbytes.__version__,
                                          "command": "python validation/lora_dev_extra.py", "fake_tensor": True}}) + "\n")
    for model, folder, b, s, kw in POINTS:
        p = point(model, folder, b, s, kw)
        if p["id"] in done:
            continue
        rec = measure(p)
        with open(OUT, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(rec["id"], rec.get("peak_allocated", rec.get("error")), flush=True)


if __name__ == "__main__":
    main()
