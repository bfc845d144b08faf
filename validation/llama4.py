"""Measure what PyTorch allocates when training or running LLAMA 4: fixtures/llama4.jsonl.

Text points ("part": "text"): Llama4ForCausalLM built from the config's `text_config` (what
loading a text-only Llama 4 fine-tune builds), through harness.py's training loop and prefill
unchanged (FakeTensorMode, the CUDA emulation: SDPA kernel choice, autocast's fp32 list, fused
dropout, cross-entropy as CUDA runs it; two HF Trainer steps with AdamW foreach). transformers'
Llama4TextMoe runs every expert over every token (the input repeated per expert, scaled by the
router's sigmoid score), which is what is measured.

LoRA points ("part": "lora"): validation/lora.py's train_lora on the text model (peft and, for
QLoRA, the bitsandbytes 4-bit emulation of qlora_shim.py), r 16, the attention and MLP linears.

Multimodal points ("part": "vlm"): Llama4ForConditionalGeneration through vlm.py's training loop
and prefill (its placeholder check and masked_scatter patches; a batch of square images split into
336-px tiles as Llama4ImageProcessor does, 144 tokens per tile).

llama4-dev-4l is not a checkpoint (4 text layers, 4 experts, MoE on every other layer, one NoPE
layer, chunks of 1024; a 2-layer tower): development only. Llama-4-Scout-17B-16E and
Llama-4-Maverick-17B-128E are held out (configs/vlm/SOURCES.md).

    /work/venv/bin/python validation/llama4.py            # the matrix (resumable)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import harness  # noqa: E402
from harness import run_resumable  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "llama4.jsonl")
DIR = "validation/configs/vlm"
DEVELOPMENT = ["llama4-dev-4l"]
HELD_OUT = ["llama-4-scout-17b-16e", "llama-4-maverick-17b-128e"]
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# bitsandbytes 4-bit as TRL's QLoRA recipes load it (lora_matrix.py's NF4).
QUANT = {"nf4": {"bits": 4, "quant_type": "nf4", "nested": True, "compute_dtype": "bf16"}}


def points():
    out = []

    def pt(model, part, mode, precision, batch, seq, checkpointing=False, attention="sdpa", images=None, train=None,
           image_size=None, quant=None):
        p = dict(model=model, part=part, mode=mode, precision=precision, batch=batch, seq=seq,
                 checkpointing=checkpointing, optimizer="adamw" if mode == "train" else None,
                 impl="foreach" if mode == "train" else None, attention=attention)
        if part == "vlm":
            p.update(images=images, image_size=image_size)
            if mode == "train":
                p["train"] = train
        if part == "lora":
            p.update(r=16, alpha=32, targets=LORA_TARGETS, quant=quant)
        out.append(p)

    for m in DEVELOPMENT + HELD_OUT:
        dev = m in DEVELOPMENT
        # Text: training (SDPA, checkpointed, beyond one attention chunk, eager) and a prefill.
        pt(m, "text", "train", "bf16-mixed", 4 if dev else 1, 1024)
        pt(m, "text", "train", "bf16-mixed", 8 if dev else 2, 1024, checkpointing=True)
        pt(m, "text", "train", "bf16-mixed", 1, 4096 if dev else 2048)
        pt(m, "text", "train", "bf16-mixed", 2 if dev else 1, 1024, attention="eager")
        pt(m, "text", "infer", "bf16", 4 if dev else 1, 1024)
        pt(m, "text", "infer", "bf16", 1, 4096 if dev else 2048)
        if dev:
            # Without autocast: pure bf16 and fp32 training (the experts' inputs in that dtype).
            pt(m, "text", "train", "bf16", 4, 1024)
            pt(m, "text", "train", "fp32", 4, 1024)
        if not dev:
            # Where the activations outweigh the weights and AdamW's states: past one chunk.
            pt(m, "text", "train", "bf16-mixed", 2, 8192)
            pt(m, "text", "infer", "bf16", 4, 8192)
        # Multimodal: one 336-px image (one tile), a 672-px image (2 x 2 tiles and the global one).
        pt(m, "vlm", "train", "bf16-mixed", 4 if dev else 1, 1024, images=1, train="frozen_vision")
        pt(m, "vlm", "train", "bf16-mixed", 2 if dev else 1, 2048, images=1, train="full", image_size=672)
        pt(m, "vlm", "train", "bf16-mixed", 4 if dev else 1, 1024, checkpointing=True, images=1, train="frozen_vision")
        pt(m, "vlm", "infer", "bf16", 4 if dev else 1, 1024, images=1, image_size=672)
        # The tower at its busiest: a 1344-px image is 16 tiles and the global one (2448 tokens).
        pt(m, "vlm", "train", "bf16-mixed", 2 if dev else 1, 4096, images=1, train="full", image_size=1344)
        pt(m, "vlm", "infer", "bf16", 2 if dev else 1, 4096, images=1, image_size=1344)
        if not dev:
            # Past the AdamW step's peak: the language model's activations at 2 x 8192 tokens.
            pt(m, "vlm", "train", "bf16-mixed", 2, 8192, images=1, train="full", image_size=1344)
    # LoRA on the text model (peft has no default targets for llama4_text: the attention, the
    # dense MLPs' and the shared expert's linears are named; the stacked experts are parameters,
    # not linears, and stay frozen), on the bf16 model and 4-bit QLoRA (whose kbit preparation
    # casts the unquantized experts to fp32).
    for m in DEVELOPMENT + HELD_OUT:
        dev = m in DEVELOPMENT
        for quant in (None, "nf4"):
            pt(m, "lora", "train", "bf16-mixed", 4 if dev else 1, 1024 if dev else 2048, quant=quant)
            pt(m, "lora", "train", "bf16-mixed", 8 if dev else 2, 1024 if dev else 4096, checkpointing=True, quant=quant)
        if not dev:
            pt(m, "lora", "train", "bf16-mixed", 2, 8192, checkpointing=True, quant="nf4")
    for p in out:
        p["set"] = "development" if p["model"] in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


def text_config(raw):
    """The text config as a text-only checkpoint writes it (Llama4ForCausalLM)."""
    t = dict(raw["text_config"])
    t["model_type"] = "llama4_text"
    t.setdefault("torch_dtype", raw.get("torch_dtype", "bfloat16"))
    return t


def imports(point):
    """The oracle modules `measure` imports for this point (validation/gpu/families.py loads them
    before it takes the CPU emulation out)."""
    return {"lora": ("lora",), "vlm": ("vlm",)}.get(point["part"], ())


def measure(point, raw):
    """One point's record fields (without the point's own)."""
    if point["part"] == "lora":
        import lora
        return lora.train_lora(text_config(raw), point["batch"], point["seq"], r=point["r"], alpha=point["alpha"],
                               target_modules=point["targets"], quant=QUANT.get(point["quant"]),
                               checkpointing=point["checkpointing"], attention=point["attention"])
    if point["part"] == "text":
        cfg = text_config(raw)
        if point["mode"] == "train":
            return harness.train(cfg, point["batch"], point["seq"], point["precision"], point["optimizer"], point["impl"],
                                 point["checkpointing"], point["attention"])
        return harness.infer(cfg, point["batch"], point["seq"], point["seq"], point["precision"], point["attention"])
    import vlm
    cfg = vlm.AutoConfig.for_model("llama4", **{k: v for k, v in raw.items() if k != "model_type"})
    side = point["image_size"]
    if point["mode"] == "train":
        r = vlm.train(raw, point["batch"], point["seq"], point["images"], point["train"], point["precision"],
                      point["checkpointing"], point["attention"], image_size=side)
    else:
        r = vlm.infer(raw, point["batch"], point["seq"], point["images"], point["precision"], point["attention"], image_size=side)
    return {**r, "tiles_per_image": vlm.llama4_tiles(cfg, side), "image_tokens_per_image": vlm.image_tokens(cfg, side)}


def run(point):
    raw = json.load(open(os.path.join(ROOT, DIR, point["model"] + ".json")))
    return harness.recorded(point, f"{DIR}/{point['model']}.json", lambda: measure(point, raw))


if __name__ == "__main__":
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    part = sys.argv[sys.argv.index("--part") + 1] if "--part" in sys.argv else None
    describe = lambda rec: f"{rec['model']} {rec['part']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['seq']} ckpt={rec['checkpointing']} {rec['attention']}"  # noqa: E731
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 1
    pts = [p for p in points() if part is None or p["part"] == part]
    run_resumable(OUT, "python validation/llama4.py", pts, run, describe, workers, only, maxtasks=2, meta_extra=None)
