"""Measure what PyTorch really allocates when training or running a CLIP or SigLIP DUAL ENCODER
(both towers and the contrastive loss): fixtures/dual.jsonl.

vision.py measures the vision towers alone; this script reuses its loops unchanged (vision.train
and vision.infer: the Tracker, the CUDA emulation of harness.py, HF Trainer's two-step loop with
AdamW foreach) and swaps in the whole model, its batch and its loss:

- the model: CLIPModel / SiglipModel built from the whole config (text_config, vision_config,
  projection_dim), as AutoModel.from_pretrained builds it;
- the batch: input_ids int64 [B, L] (L = the text tower's max_position_embeddings: 77 for CLIP,
  64 for SigLIP, whose processor pads to max_length) and pixel_values float32 [B, 3, S, S];
- the loss: the model's own, `return_loss=True` (CLIP: cross-entropy over the B x B
  similarities both ways; SigLIP: the pairwise sigmoid loss);
- inference: one forward under no_grad returning both embeddings and the similarities.

`tokens` is the vision tower's sequence (read from its embeddings' output).

    /work/venv/bin/python validation/dual.py                # the matrix (resumable)
    /work/venv/bin/python validation/dual.py --technique    # real vs fake on tiny dual encoders
"""
import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "fixtures", "dual.jsonl")
sys.path.insert(0, HERE)

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402

import vision  # noqa: E402  (its loops; importing it registers harness's CUDA emulation)
from harness import DTYPES, run_resumable  # noqa: E402

CLASSES = {"clip": "CLIPModel", "siglip": "SiglipModel"}


def build(raw_config, precision, attention):
    raw = dict(raw_config)
    fam = raw.pop("model_type")
    cfg = AutoConfig.for_model(fam, **raw)
    model = getattr(transformers, CLASSES[fam])._from_config(cfg, attn_implementation=attention, dtype=DTYPES[precision])
    return cfg, model


class Probe:
    """The vision tower's sequence length and its patch Conv2d's output dtype."""

    def __init__(self, model):
        self.tokens = None
        self.patch_dtype = None
        emb = model.vision_model.embeddings
        emb.register_forward_hook(lambda m, a, out: setattr(self, "tokens", out.shape[1]))
        emb.patch_embedding.register_forward_hook(
            lambda m, a, out: setattr(self, "patch_dtype", str(out.dtype).replace("torch.", "")))


def make_batch(cfg, task, batch, size):
    t, v = cfg.text_config, cfg.vision_config
    return {"input_ids": torch.randint(0, t.vocab_size, (batch, t.max_position_embeddings)),
            "pixel_values": torch.randn(batch, v.num_channels, size, size)}


def forward(model, fam, inputs, size, cfg):
    kw = {k: v for k, v in inputs.items() if k != "labels"}
    if size != cfg.vision_config.image_size:
        kw["interpolate_pos_encoding"] = True
    return model(**kw, return_loss=model.training)


def forward_loss(model, fam, inputs, size, cfg):
    return forward(model, fam, inputs, size, cfg).loss


def use_dual():
    """vision.train / vision.infer with the dual model's pieces."""
    vision.build, vision.Probe, vision.make_batch = build, Probe, make_batch
    vision.forward, vision.forward_loss = forward, forward_loss
    vision.task_of = lambda raw: "contrastive"


# --------------------------------------------------------------------------------------------
# The matrix

CONFIGS = "validation/configs/vision"
DEVELOPMENT = ["clip-vit-base-patch32", "siglip-base-patch16-224"]
HELD_OUT = ["clip-vit-large-patch14", "siglip-so400m-patch14-384"]


def load(model):
    return json.load(open(os.path.join(ROOT, CONFIGS, model + ".json")))


def points():
    out = []

    def pt(model, mode, precision, batch, checkpointing=False, size=None):
        raw = load(model)
        native, patch = vision.geometry(raw)
        out.append(dict(model=model, mode=mode, precision=precision, batch=batch, image_size=size or native,
                        patch_size=patch, optimizer="adamw" if mode == "train" else None,
                        impl="foreach" if mode == "train" else None, checkpointing=checkpointing,
                        attention="sdpa"))

    for m in DEVELOPMENT + HELD_OUT:
        big = m.startswith("siglip-so400m") or m.startswith("clip-vit-large")
        b = 16 if big else 64
        pt(m, "train", "bf16-mixed", b)
        pt(m, "train", "bf16-mixed", b, checkpointing=True)
        pt(m, "train", "fp32", b // 2)
        pt(m, "infer", "bf16", 2 * b)
    for p in out:
        p["set"] = "development" if p["model"] in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k not in ("set", "patch_size"))
    return out


def run(point):
    use_dual()
    raw = load(point["model"])
    t = time.time()
    try:
        if point["mode"] == "train":
            r = vision.train(raw, point["batch"], point["image_size"], point["precision"], point["checkpointing"],
                             point["attention"], point["optimizer"], point["impl"])
        else:
            r = vision.infer(raw, point["batch"], point["image_size"], point["precision"], point["attention"])
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": f"{CONFIGS}/{point['model']}.json", "task": "contrastive", **r}


def main_matrix(workers, only):
    describe = lambda rec: f"{rec['model']} {rec['mode']} {rec['precision']} b{rec['batch']} ckpt={rec['checkpointing']}"  # noqa: E731
    run_resumable(OUT, "python validation/dual.py", points(), run, describe, workers, only, maxtasks=8, meta_extra=None)


# --------------------------------------------------------------------------------------------
# Technique check: real tensors vs fake tensors on tiny dual encoders

TINY_TOWER = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4)
TINY_DUAL = {
    "clip": {"model_type": "clip", "projection_dim": 32,
             "text_config": {**TINY_TOWER, "vocab_size": 1000, "max_position_embeddings": 16},
             "vision_config": {**TINY_TOWER, "image_size": 32, "patch_size": 8}},
    "siglip": {"model_type": "siglip",
               "text_config": {**TINY_TOWER, "vocab_size": 1000, "max_position_embeddings": 16},
               "vision_config": {**TINY_TOWER, "image_size": 32, "patch_size": 8}},
}


def check_technique():
    """Writes fixtures/dual_technique.jsonl."""
    use_dual()
    ok = True
    f = open(os.path.join(HERE, "fixtures", "dual_technique.jsonl"), "w")
    f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                  "command": "python validation/dual.py --technique", "configs": TINY_DUAL}}) + "\n")
    cases = [("train", dict(batch=8, size=32, precision="fp32", checkpointing=False)),
             ("train", dict(batch=16, size=32, precision="bf16-mixed", checkpointing=False)),
             ("train", dict(batch=16, size=32, precision="bf16-mixed", checkpointing=True)),
             ("infer", dict(batch=16, size=32, precision="bf16"))]
    for name, cfg in TINY_DUAL.items():
        for mode, case in cases:
            fn = vision.train if mode == "train" else vision.infer
            t = time.time()
            real = fn(cfg, fake=False, **case)
            fake = fn(cfg, fake=True, **case)
            same = real["peak_allocated"] == fake["peak_allocated"] and real["peak_phase"] == fake["peak_phase"]
            ok &= same
            rec = {"mode": mode, "model": name, **case, "real_peak": real["peak_allocated"],
                   "fake_peak": fake["peak_allocated"], "real_phase": real["peak_phase"],
                   "fake_phase": fake["peak_phase"], "tokens": fake["tokens"], "equal": same,
                   "seconds": round(time.time() - t, 2)}
            f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec))
    f.close()
    print("ALL EQUAL" if ok else "DIFFERENCES FOUND", file=sys.stderr)
    return ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--only", help="only points of this model")
    ap.add_argument("--technique", action="store_true", help="real vs fake tensors on tiny dual encoders")
    args = ap.parse_args()
    if args.technique:
        sys.exit(0 if check_technique() else 1)
    main_matrix(args.workers, args.only)
