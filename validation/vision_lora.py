"""Measure LoRA fine-tuning of a VISION ENCODER (ViT, DINOv2, CLIP's and SigLIP's vision towers):
fixtures/vision_lora.jsonl.

vision.py's loop and run() unchanged, with its build() wrapped: the model is cast to bf16 (the
frozen base in half precision under Trainer's bf16 autocast: vision.py's "bf16-mixed"), frozen,
and peft.get_peft_model applies LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1,
target_modules=["q_proj", "v_proj"] (transformers 5's names in all four families),
modules_to_save=["classifier"] on a classification head) — peft's image-classification example
(peft has no default targets for these model types). Importing lora.py installs its fake-tensor
patches for peft.

    /work/venv/bin/python validation/vision_lora.py      # the matrix (resumable)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import lora  # noqa: E402,F401  (peft under fake tensors)
import vision  # noqa: E402
from harness import run_resumable  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "vision_lora.jsonl")
_build = vision.build


def targets(fam):
    # transformers 5 names every family's attention projections q_proj/k_proj/v_proj (ViT and
    # DINOv2 too; peft's ViT example, written for transformers 4, says query/value).
    return ["q_proj", "v_proj"]


def build(raw_config, precision, attention):
    import torch
    from peft import LoraConfig, get_peft_model
    cfg, model = _build(raw_config, precision, attention)
    model.requires_grad_(False)
    model.to(torch.bfloat16)
    fam = raw_config["model_type"]
    save = ["classifier"] if fam in vision.CLASSIFIERS else None
    get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1, target_modules=targets(fam),
                                     modules_to_save=save))
    return cfg, model


vision.build = build

DEVELOPMENT = ["vit-base-patch16-224", "clip-vit-base-patch32"]
HELD_OUT = ["vit-base-patch16-224-in21k", "dinov2-small", "clip-vit-large-patch14", "siglip-base-patch16-224"]


def points():
    out = []

    def pt(model, batch, checkpointing=False):
        raw = vision.load(model)
        native, patch = vision.geometry(raw)
        out.append(dict(model=model, mode="train", precision="bf16-mixed", batch=batch, image_size=native,
                        patch_size=patch, optimizer="adamw", impl="foreach", checkpointing=checkpointing,
                        attention="sdpa"))

    for m in DEVELOPMENT + HELD_OUT:
        b = 16 if "large" in m else 32
        pt(m, b)
        pt(m, b, checkpointing=True)
    for p in out:
        p["set"] = "development" if p["model"] in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k not in ("set", "patch_size"))
    return out


if __name__ == "__main__":
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    describe = lambda rec: f"{rec['model']} b{rec['batch']} ckpt={rec['checkpointing']}"  # noqa: E731
    run_resumable(OUT, "python validation/vision_lora.py", points(), vision.run, describe, 1, only, maxtasks=4,
                  meta_extra={"lora": "r 8, alpha 16, dropout 0.1, query/value (q_proj/v_proj), classifier saved"})
