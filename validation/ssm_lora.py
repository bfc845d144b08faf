"""Measure LoRA fine-tuning of the Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5) as HF Trainer +
peft runs it: fixtures/ssm_lora.jsonl.

lora.py's train_lora unchanged (the real model from config.json under FakeTensorMode in bf16,
peft.get_peft_model with LoraConfig(r, lora_alpha = 2r, lora_dropout, target_modules), Trainer's
bf16 autocast, AdamW foreach over the adapters, two steps), on transformers' PyTorch path for the
linear attention (no flash-linear-attention). peft has no default target modules for these
model types, so every point names them (QLoRA points quantize the model first, as
lora_matrix.py does): "all-linear" (every nn.Linear but lm_head: the mixers'
in_proj_* and out_proj, q/k/v/o, the MLP or the shared expert and its gate; the fused experts are
parameters, not linears) or the attention and mixer projections by name.

    /work/venv/bin/python validation/ssm_lora.py [--only MODEL,...] [--workers N]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import lora  # noqa: E402  (installs harness's CUDA emulation and peft's fake-tensor patches)
import harness  # noqa: E402
from harness import run_resumable  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "ssm_lora.jsonl")
DIR = "validation/configs/ssm"
DEVELOPMENT = ["qwen3.5-dev-4l", "qwen3-next-dev-4l"]
HELD_OUT = ["qwen3.5-0.8b", "qwen3.5-27b", "qwen3-next-80b-a3b"]
NF4 = {"bits": 4, "quant_type": "nf4", "nested": True, "compute_dtype": "bf16"}
NAMED = "q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj"
NAMED_NEXT = "q_proj,k_proj,v_proj,o_proj,in_proj_qkvz,in_proj_ba,out_proj"


def points():
    out = []

    def pt(model, targets, r, batch, seq, checkpointing=False, dropout=0.0, method="lora"):
        p = dict(model=model, mode="train", precision="bf16-mixed", method=method, targets=targets, r=r, dropout=dropout,
                 batch=batch, seq=seq, checkpointing=checkpointing, attention="sdpa")
        p["set"] = "development" if model in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
        out.append(p)

    for m in DEVELOPMENT + HELD_OUT:
        big = m in ("qwen3.5-27b", "qwen3-next-80b-a3b")
        named = NAMED_NEXT if m.startswith("qwen3-next") else NAMED
        pt(m, "all-linear", 16, 1 if big else 4, 2048)
        pt(m, "all-linear", 16, 2 if big else 8, 2048, checkpointing=True)
        pt(m, named, 8, 1 if big else 2, 4096, dropout=0.05)
        # The attention and MLP projections only (a common recipe's list): the mixers frozen whole.
        pt(m, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", 16, 1 if big else 4, 2048)
        # QLoRA (nf4, double quantization, bf16 compute; peft's kbit preparation casts the norms,
        # the conv and the decay parameters to fp32).
        if m != "qwen3-next-80b-a3b":
            pt(m, "all-linear", 16, 1 if big else 4, 2048, method="qlora")
            pt(m, "all-linear", 16, 2 if big else 8, 2048, checkpointing=True, method="qlora")
    return out


def run(point):
    raw = json.load(open(os.path.join(ROOT, DIR, point["model"] + ".json")))
    targets = point["targets"] if point["targets"] == "all-linear" else point["targets"].split(",")
    quant = NF4 if point["method"] == "qlora" else None
    return harness.recorded(point, f"{DIR}/{point['model']}.json", lambda: lora.train_lora(
        raw, point["batch"], point["seq"], r=point["r"], alpha=2 * point["r"], dropout=point["dropout"],
        target_modules=targets, checkpointing=point["checkpointing"], attention=point["attention"], quant=quant))


if __name__ == "__main__":
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 1
    describe = lambda rec: f"{rec['model']} {rec['targets'][:20]} r{rec['r']} b{rec['batch']} s{rec['seq']} ckpt={rec['checkpointing']}"  # noqa: E731
    run_resumable(OUT, "python validation/ssm_lora.py", points(), run, describe, workers, only, maxtasks=2, meta_extra=None)
