"""Measure what PyTorch really allocates when training or running a VISION ENCODER (ViT, DINOv2,
CLIP's vision tower, SigLIP's vision tower): fixtures/vision.jsonl.

Same method as harness.py and encoders.py, whose pieces are imported unchanged: real transformers
models built from config.json under FakeTensorMode, the CUDA emulation (SDPA kernel choice,
autocast fp32 list, fused dropout), the storage Tracker, the categories and result() fields, the
two-step training loop of HF Trainer (forward with the loss, backward, AdamW foreach step,
zero_grad(set_to_none)). Only the model class, the batch and the loss differ, per family:

- ViT ("image-classification"): ViTForImageClassification; labels one int per image,
  single-label cross-entropy over NUM_LABELS = 1000 classes (vit-base-patch16-224 names 1000
  ImageNet labels itself; the in21k backbone names none and gets an ImageNet-1k head).
- DINOv2 ("image-classification"): Dinov2ForImageClassification with 1000 labels, the linear
  head on [CLS, mean of the patch tokens] (2 x hidden inputs), cross-entropy.
- CLIP and SigLIP ("feature-extraction"): the bare vision tower built from the checkpoint's
  `vision_config` (CLIPVisionModel: post-LayerNorm CLS as pooler_output; SiglipVisionModel: the
  multi-head attention pooling head, a torch.nn.MultiheadAttention with one learned probe query,
  LayerNorm and MLP). Loss = pooler_output.float().pow(2).mean(): a stand-in for the contrastive
  loss, which acts on B pooled vectors (a B x B logit matrix) whose memory is negligible next to
  the tower's activations; the text tower is not built.

Batch: pixel_values float32 [B, 3, S, S] (what the image processor returns; Trainer does not cast
it under bf16-mixed, the model casts it to its weight dtype: fp32 under autocast, so the patch
Conv2d runs under autocast and returns bf16). S = the config's image_size, plus one point at
another size: DINOv2 always interpolates its position embeddings; ViT, CLIP and SigLIP are called
with interpolate_pos_encoding=True there. `tokens` is the sequence length the encoder sees,
read from the embeddings module's output (CLS included: ViT/DINOv2/CLIP have one, SigLIP none);
`patch_embedding_dtype` is the dtype of the patch Conv2d output.

Inference ("infer"): model.eval(), torch.no_grad(), one forward (logits, or the tower's
outputs), weights in the precision (bf16 = pure bf16 weights, no autocast).

Gradient checkpointing: model.gradient_checkpointing_enable() (all four classes support it).

The technique checks out for the vision path (check_technique() below, `--technique`): a tiny
ViT (2 layers, hidden 64, 4 heads, image 32, patch 8) and tiny DINOv2, CLIP-vision and
SigLIP-vision towers of the same size, run with real tensors on the CPU and under FakeTensorMode,
give tracked peaks (and peak phases) equal byte for byte in all 14 cases (train fp32 /
bf16-mixed / bf16-mixed + checkpointing, inference bf16 / fp32, interpolated positions):
fixtures/vision_technique.jsonl.

    /work/venv/bin/python validation/vision.py                # the matrix (resumable)
    /work/venv/bin/python validation/vision.py --technique    # real vs fake on tiny towers
    /work/venv/bin/python validation/vision.py --per-layer vit-base-patch16-224 [--precision fp32]
"""
import argparse
import contextlib
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "fixtures", "vision.jsonl")
sys.path.insert(0, HERE)

import torch  # noqa: E402
import transformers  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
from transformers import AutoConfig  # noqa: E402

import harness  # noqa: E402,F401  (registers the CUDA SDPA, dropout and autocast emulation)
from harness import DTYPES, KERNELS, Tracker, result, run_resumable  # noqa: E402

import transformers.initialization as _hf_init  # noqa: E402


def _trunc_normal(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """torch.nn.init.trunc_normal_ resamples until no value lies outside [a, b], a test of the
    values (mask.any()) that a fake tensor cannot answer. Weight values do not change memory, and
    this runs while the model is built, before tracking starts: a normal draw clamped to [a, b],
    in place, for real and fake tensors alike."""
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator).clamp_(a, b)


_hf_init.TORCH_INIT_FUNCTIONS["trunc_normal_"] = _trunc_normal

NUM_LABELS = 1000
CLASSIFIERS = {"vit": "ViTForImageClassification", "dinov2": "Dinov2ForImageClassification"}
TOWERS = {"clip": "CLIPVisionModel", "siglip": "SiglipVisionModel"}
INTERPOLATE_FLAG = ("vit", "clip", "siglip")  # forward takes interpolate_pos_encoding; dinov2 always does


def family(raw):
    return raw["model_type"]


def task_of(raw):
    return "image-classification" if family(raw) in CLASSIFIERS else "feature-extraction"


def build(raw_config, precision, attention):
    """The model class of the family, from the whole config (ViT, DINOv2) or its vision_config."""
    raw = dict(raw_config)
    fam = raw.pop("model_type")
    if fam in TOWERS:
        vision = dict(raw["vision_config"])
        model_type = vision.pop("model_type", fam + "_vision_model")
        cfg = AutoConfig.for_model(model_type, **vision)
        cls = getattr(transformers, TOWERS[fam])
    else:
        raw["id2label"] = {str(i): f"LABEL_{i}" for i in range(NUM_LABELS)}
        raw["label2id"] = {f"LABEL_{i}": i for i in range(NUM_LABELS)}
        raw.pop("_num_labels", None)
        cfg = AutoConfig.for_model(fam, **raw)
        cls = getattr(transformers, CLASSIFIERS[fam])
    model = cls._from_config(cfg, attn_implementation=attention, dtype=DTYPES[precision])
    return cfg, model


class Probe:
    """Reads the encoder's sequence length and the patch Conv2d's output dtype from hooks."""

    def __init__(self, model):
        self.tokens = None
        self.patch_dtype = None
        emb = next(m for n, m in model.named_modules() if n.endswith("embeddings") and "patch" not in n)
        conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
        emb.register_forward_hook(lambda m, a, out: setattr(self, "tokens", out.shape[1]))
        conv.register_forward_hook(lambda m, a, out: setattr(self, "patch_dtype", str(out.dtype).replace("torch.", "")))


def make_batch(cfg, task, batch, size):
    inputs = {"pixel_values": torch.randn(batch, cfg.num_channels, size, size)}
    if task == "image-classification":
        inputs["labels"] = torch.randint(0, cfg.num_labels, (batch,))
    return inputs


def forward(model, fam, inputs, size, cfg):
    kw = dict(inputs)
    if fam in INTERPOLATE_FLAG and size != cfg.image_size:
        kw["interpolate_pos_encoding"] = True
    return model(**kw)


def forward_loss(model, fam, inputs, size, cfg):
    out = forward(model, fam, inputs, size, cfg)
    if fam in TOWERS:  # stand-in for the contrastive loss on B pooled vectors (see the docstring)
        return out.pooler_output.float().pow(2).mean()
    return out.loss


def count_params(model):
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad))


def finish(tr, counts, probe):
    r = result(tr)
    r["parameters"], r["trainable_parameters"] = counts
    r["tokens"], r["patch_embedding_dtype"] = probe.tokens, probe.patch_dtype
    return r


def train(raw_config, batch, size, precision="bf16-mixed", checkpointing=False, attention="sdpa",
          optimizer="adamw", impl="foreach", steps=2, fake=True, seed=0):
    """Two training steps as HF Trainer runs them (harness.train's loop, family-specific loss)."""
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    amp = precision.endswith("-mixed")
    fam, task = family(raw_config), task_of(raw_config)
    with mode:
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention)
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        probe = Probe(model)
        counts = count_params(model)
        params = [p for p in model.parameters() if p.requires_grad]
        if optimizer != "adamw":
            raise ValueError(optimizer)
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=impl == "foreach", fused=impl == "fused" or None)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: tr.relabel(p.grad, "gradients"))
        with tr:
            for p in model.parameters():
                tr.track(p, "parameters")
            for b in model.buffers():
                tr.track(b, "parameters")
            for step in range(steps):
                tr.category = "inputs"
                inputs = make_batch(cfg, task, batch, size)
                tr.phase, tr.category = f"forward{step}", "activations"
                half = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
                ctx = torch.autocast("cpu", dtype=half) if amp else contextlib.nullcontext()
                with ctx:
                    loss = forward_loss(model, fam, inputs, size, cfg)
                tr.phase, tr.category = f"backward{step}", "backward"
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
    return finish(tr, counts, probe)


def infer(raw_config, batch, size, precision="bf16", attention="sdpa", fake=True, seed=0):
    """One forward under no_grad (classifiers: logits; towers: last_hidden_state + pooler_output)."""
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    fam, task = family(raw_config), task_of(raw_config)
    with mode, torch.no_grad():
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention)
        model.eval()
        probe = Probe(model)
        counts = count_params(model)
        with tr:
            for p in model.parameters():
                tr.track(p, "parameters")
            for b in model.buffers():
                tr.track(b, "parameters")
            tr.category = "inputs"
            inputs = make_batch(cfg, task, batch, size)
            inputs.pop("labels", None)
            tr.phase, tr.category = "forward", "activations"
            out = forward(model, fam, inputs, size, cfg)
            del out
    return finish(tr, counts, probe)


# --------------------------------------------------------------------------------------------
# The matrix

VIS = "validation/configs/vision"
DEVELOPMENT = ["vit-base-patch16-224", "clip-vit-base-patch32"]
HELD_OUT = ["vit-base-patch16-224-in21k", "dinov2-small", "dinov2-base", "clip-vit-large-patch14",
            "siglip-base-patch16-224", "siglip-so400m-patch14-384"]
# The other image size per model: larger for 224-pixel models, 224 for those whose native size is
# already large (DINOv2 518, SigLIP so400m 384). CLIP B/32 at 336 floors to 10 x 10 patches.
OTHER_SIZE = {"vit-base-patch16-224": 384, "vit-base-patch16-224-in21k": 384, "dinov2-small": 224,
              "dinov2-base": 224, "clip-vit-base-patch32": 336, "clip-vit-large-patch14": 336,
              "siglip-base-patch16-224": 384, "siglip-so400m-patch14-384": 224}


def load(model):
    return json.load(open(os.path.join(ROOT, VIS, model + ".json")))


def geometry(raw):
    """(image_size, patch_size) of the config the model is built from (class defaults where the
    config omits them, as SigLIP base's does)."""
    fam = raw["model_type"]
    if fam in TOWERS:
        vision = dict(raw["vision_config"])
        cfg = AutoConfig.for_model(vision.pop("model_type", fam + "_vision_model"), **vision)
    else:
        rest = {k: v for k, v in raw.items() if k != "model_type"}
        cfg = AutoConfig.for_model(fam, **rest)
    return cfg.image_size, cfg.patch_size


def points():
    out = []

    def pt(model, mode, precision, batch, size=None, checkpointing=False):
        raw = load(model)
        native, patch = geometry(raw)
        out.append(dict(model=model, mode=mode, precision=precision, batch=batch, image_size=size or native,
                        patch_size=patch, optimizer="adamw" if mode == "train" else None,
                        impl="foreach" if mode == "train" else None, checkpointing=checkpointing,
                        attention="sdpa"))

    for m in DEVELOPMENT + HELD_OUT:
        pt(m, "train", "bf16-mixed", 32)
        pt(m, "train", "fp32", 16)
        pt(m, "train", "bf16-mixed", 32, checkpointing=True)
        pt(m, "infer", "bf16", 64)
        pt(m, "train", "bf16-mixed", 32, size=OTHER_SIZE[m])
    pt("vit-base-patch16-224", "train", "bf16-mixed", 128)
    for p in out:
        p["set"] = "development" if p["model"] in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k not in ("set", "patch_size"))
    return out


def run(point):
    raw = load(point["model"])
    t = time.time()
    task = task_of(raw)
    extra = {"task": task, "num_labels": NUM_LABELS if task == "image-classification" else None}
    try:
        if point["mode"] == "train":
            r = train(raw, point["batch"], point["image_size"], point["precision"], point["checkpointing"],
                      point["attention"], point["optimizer"], point["impl"])
        else:
            r = infer(raw, point["batch"], point["image_size"], point["precision"], point["attention"])
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": f"{VIS}/{point['model']}.json", **extra, **r}


def main_matrix(workers, only):
    describe = lambda rec: f"{rec['model']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['image_size']} ckpt={rec['checkpointing']}"  # noqa: E731
    run_resumable(OUT, "python validation/vision.py", points(), run, describe, workers, only, maxtasks=8, meta_extra=None)


# --------------------------------------------------------------------------------------------
# Technique check: real tensors vs fake tensors on tiny towers

TINY = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=8)
TINY_VIT = {"model_type": "vit", **TINY}
TINY_DINOV2 = {"model_type": "dinov2", **{k: v for k, v in TINY.items() if k != "intermediate_size"}}
TINY_CLIP = {"model_type": "clip", "vision_config": {"model_type": "clip_vision_model", **TINY}}
TINY_SIGLIP = {"model_type": "siglip", "vision_config": {"model_type": "siglip_vision_model", **TINY}}


def technique_cases():
    t = lambda name, cfg, p, b, s=32, ck=False: ("train", name, cfg, dict(batch=b, size=s, precision=p,
                                                                          checkpointing=ck))
    i = lambda name, cfg, p, b, s=32: ("infer", name, cfg, dict(batch=b, size=s, precision=p))
    out = [t("vit", TINY_VIT, "fp32", 8), t("vit", TINY_VIT, "bf16-mixed", 16),
           t("vit", TINY_VIT, "bf16-mixed", 16, ck=True), t("vit", TINY_VIT, "bf16-mixed", 16, s=48),
           i("vit", TINY_VIT, "bf16", 16), i("vit", TINY_VIT, "fp32", 16)]
    for name, cfg in (("dinov2", TINY_DINOV2), ("clip", TINY_CLIP), ("siglip", TINY_SIGLIP)):
        out += [t(name, cfg, "bf16-mixed", 16), t(name, cfg, "fp32", 8)]
    out += [t("dinov2", TINY_DINOV2, "bf16-mixed", 16, s=48), i("siglip", TINY_SIGLIP, "bf16", 16)]
    return out


def check_technique():
    """Writes fixtures/vision_technique.jsonl."""
    ok = True
    f = open(os.path.join(HERE, "fixtures", "vision_technique.jsonl"), "w")
    f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                  "command": "python validation/vision.py --technique",
                                  "configs": {"vit": TINY_VIT, "dinov2": TINY_DINOV2, "clip": TINY_CLIP,
                                              "siglip": TINY_SIGLIP}}}) + "\n")
    for mode, name, cfg, case in technique_cases():
        fn = train if mode == "train" else infer
        t = time.time()
        real = fn(cfg, fake=False, **case)
        fake = fn(cfg, fake=True, **case)
        same = real["peak_allocated"] == fake["peak_allocated"] and real["peak_phase"] == fake["peak_phase"]
        ok &= same
        rec = {"mode": mode, "model": name, **case, "real_peak": real["peak_allocated"],
               "fake_peak": fake["peak_allocated"], "real_phase": real["peak_phase"],
               "fake_phase": fake["peak_phase"], "tokens": fake["tokens"], "kernels": fake["attention_kernels"],
               "equal": same, "seconds": round(time.time() - t, 2)}
        f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec))
    f.close()
    print("ALL EQUAL" if ok else "DIFFERENCES FOUND", file=sys.stderr)
    return ok


# --------------------------------------------------------------------------------------------
# Per-layer breakdown: which ops' outputs one encoder layer keeps alive at the end of forward


class OpTracker(Tracker):
    """The Tracker, also noting the aten op and dtype that created each storage."""

    def __init__(self):
        super().__init__()
        self.op = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and id(t.untyped_storage()) not in self.live:
                self.op[id(t.untyped_storage())] = (func.overloadpacket.__name__, str(t.dtype).replace("torch.", ""))
            self.track(t)
        return out


def forward_end_ops(raw_config, layers, batch, size, precision):
    """Activation bytes alive at the end of one training forward, by (op, dtype)."""
    raw = json.loads(json.dumps(raw_config))
    target = raw["vision_config"] if family(raw) in TOWERS else raw
    target["num_hidden_layers"] = layers
    for k in ("out_features", "out_indices", "stage_names", "_out_features", "_out_indices"):
        target.pop(k, None)  # DINOv2 backbone stages name the layers
    fam, task = family(raw), task_of(raw)
    tr = OpTracker()
    with FakeTensorMode():
        cfg, model = build(raw, precision, "sdpa")
        model.train()
        probe = Probe(model)
        with tr:
            for p in list(model.parameters()) + list(model.buffers()):
                tr.track(p, "parameters")
            tr.category = "inputs"
            inputs = make_batch(cfg, task, batch, size)
            tr.category = "activations"
            amp = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16-mixed" else contextlib.nullcontext()
            with amp:
                loss = forward_loss(model, fam, inputs, size, cfg)
            by_op = {}
            for key, rec in tr.live.items():
                if rec[3] == "activations":
                    op = tr.op.get(key, ("?", "?"))
                    by_op[op] = by_op.get(op, 0) + rec[1]
            del loss
    return by_op, probe.tokens, cfg


def per_layer(models, precision, batch=4):
    """Prints one layer's forward-end bytes per token, in units of hidden_size, by op: the
    difference between the same model built with 2 and with 1 layer. Under bf16-mixed the
    `_to_copy` line includes autocast's bf16 copies of the layer's weights (2 bytes a parameter,
    cached for the forward and saved for backward), which do not scale with tokens."""
    for m in models:
        raw = load(m)
        size = geometry(raw)[0]
        one, tokens, cfg = forward_end_ops(raw, 1, batch, size, precision)
        two, _, _ = forward_end_ops(raw, 2, batch, size, precision)
        unit = batch * tokens * cfg.hidden_size
        diff = {k: two[k] - one.get(k, 0) for k in two if two[k] != one.get(k, 0)}
        print(f"{m} {precision}: batch {batch} x {tokens} tokens, hidden {cfg.hidden_size}: "
              f"{sum(diff.values()) / unit:.2f} x hidden bytes a token a layer")
        for (op, dtype), v in sorted(diff.items(), key=lambda kv: -kv[1]):
            print(f"    {op:30} {dtype:9} {v / unit:6.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", help="only points of this model")
    ap.add_argument("--technique", action="store_true", help="real vs fake tensors on tiny towers")
    ap.add_argument("--per-layer", nargs="+", metavar="MODEL", help="one layer's forward-end bytes by op")
    ap.add_argument("--precision", default="bf16-mixed", help="for --per-layer")
    args = ap.parse_args()
    if args.per_layer:
        sys.exit(per_layer(args.per_layer, args.precision))
    if args.technique:
        sys.exit(0 if check_technique() else 1)
    main_matrix(args.workers, args.only)
