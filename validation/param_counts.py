"""Record PyTorch's own parameter count for every preset and architecture config.

Builds each model from its config.json with real Hugging Face transformers on the
`meta` device (no weights, no memory) and writes sum(p.numel() for p in
model.parameters()) -- tied weights counted once, exactly as PyTorch reports it --
plus every parameter's name and shape, to fixtures/param_counts.jsonl.

Regenerate (about a minute on 2 CPU cores):
    python -m venv .venv && .venv/bin/pip install -r validation/requirements.txt
    .venv/bin/python validation/param_counts.py
"""
import glob
import json
import os
import re
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCES = sorted(glob.glob(os.path.join(ROOT, "crates/vram-core/presets/*.json"))) + sorted(
    glob.glob(os.path.join(HERE, "configs/*.json"))
)


def count(path):
    with open(path) as f:
        raw = json.load(f)
    model_type = raw["model_type"]
    cfg = AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = list(model.named_parameters())  # named_parameters de-duplicates tied weights
    return {
        "name": os.path.splitext(os.path.basename(path))[0],
        "source": os.path.relpath(path, ROOT),
        "model_type": model_type,
        "parameters": sum(p.numel() for _, p in params),
        "tensors": collapse(params),
    }


def collapse(params):
    """Name templates with layer indices folded: [template, shape, how many layers]."""
    out = {}
    for name, p in params:
        key = (re.sub(r"\.(\d+)\.", ".{i}.", name, count=1), tuple(p.shape))
        out[key] = out.get(key, 0) + 1
    return [[t, list(s), n] for (t, s), n in out.items()]


def main():
    out = os.path.join(HERE, "fixtures/param_counts.jsonl")
    with open(out, "w") as f:
        meta = {"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                          "command": "python validation/param_counts.py"}}
        f.write(json.dumps(meta) + "\n")
        for path in SOURCES:
            rec = count(path)
            print(f"{rec['name']:24} {rec['parameters']:>18,}", file=sys.stderr)
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
