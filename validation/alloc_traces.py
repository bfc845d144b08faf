"""Record the real allocation sequence of Hugging Face training and generation steps, for
validating the allocator reserve that `vram estimate` derives.

The memory model has per-phase totals, not tensors, so `vram estimate` derives an allocation
sequence from them and runs it through its model of PyTorch's caching allocator
(vram-core/src/allocator.rs, itself validated by replaying the traces of real GPU snapshots in
validation/snapshots/). This script records what that derivation stands in for: the order and
sizes of every tensor storage a real transformers model allocates and frees in two training
steps (or a generation), under FakeTensorMode on the CPU with the CUDA choices of harness.py.
crates/vram-core/tests/allocator_traces.rs replays each trace through the same allocator model
and holds the estimate's derived reserve to the reserve of the real sequence.

Each point writes fixtures/alloc_traces/<name>.txt (git stores it compressed), one event per line: `+BYTES` allocates
the next storage (ids count from 1 in allocation order), `-ID` frees storage ID, `=NAME` starts a
phase (forward0, backward0, optimizer0, ..., or prefill, decode). The index
fixtures/alloc_traces.jsonl has a line per point (the job, the harness's peak, the trace file),
after a `_meta` line. Resumable: points already in the index are skipped.

    /work/venv/bin/python validation/alloc_traces.py [--only MODEL]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

OUT_DIR = os.path.join(HERE, "fixtures", "alloc_traces")
INDEX = os.path.join(HERE, "fixtures", "alloc_traces.jsonl")
PRESETS = "crates/vram-core/presets"
CONFIGS = "validation/configs"

# Development models (the derivation was tuned on these) and held-out ones (never tuned on).
DEV = {
    "qwen2.5-0.5b": f"{PRESETS}/qwen2.5-0.5b.json",
    "llama-3.2-1b": f"{PRESETS}/llama-3.2-1b.json",
    "gpt2": f"{PRESETS}/gpt2.json",
}
HELD_OUT = {
    "qwen2.5-1.5b": f"{PRESETS}/qwen2.5-1.5b.json",
    "gemma-3-1b": f"{CONFIGS}/gemma-3-1b.json",
    "pythia-160m": f"{CONFIGS}/pythia-160m.json",
    "opt-125m": f"{CONFIGS}/opt-125m.json",
    "phi-3-mini": f"{PRESETS}/phi-3-mini.json",
    "starcoder2-3b": f"{CONFIGS}/starcoder2-3b.json",
    "llama-3.1-8b": f"{PRESETS}/llama-3.1-8b.json",
}


def points():
    out = []
    for split, models in (("dev", DEV), ("held-out", HELD_OUT)):
        for m in models:
            big = m in ("phi-3-mini", "starcoder2-3b", "llama-3.1-8b")
            seq = 1024 if big else 2048
            for batch, precision, ckpt, impl in (
                (1, "bf16-mixed", False, "foreach"),
                (4, "bf16-mixed", False, "foreach"),
                (4, "bf16-mixed", True, "foreach"),
                (2, "bf16", False, "fused"),
                (2, "fp32", False, "foreach"),
            ):
                if big and precision == "fp32":
                    continue
                out.append(dict(split=split, model=m, mode="train", precision=precision, batch=batch, seq=seq,
                                optimizer="adamw", impl=impl, checkpointing=ckpt))
            out.append(dict(split=split, model=m, mode="infer", precision="bf16", batch=4, seq=1024,
                            prompt_len=992))  # 32 decode steps: the cache grows, the sequence repeats
    # LoRA (peft r=16, bf16 base under bf16 autocast as TRL trains it).
    for split, models in (("dev", ("qwen2.5-0.5b", "llama-3.2-1b")), ("held-out", ("qwen2.5-1.5b", "gemma-3-1b", "phi-3-mini"))):
        for m in models:
            seq = 1024 if m == "phi-3-mini" else 2048
            for batch, ckpt, targets, quant in ((1, False, None, None), (4, False, "all-linear", None), (4, True, None, None)):
                if m == "phi-3-mini":
                    targets = "all-linear"  # peft 0.21 has no default targets for phi3
                out.append(dict(split=split, model=m, mode="train", precision="bf16-mixed", batch=batch, seq=seq,
                                optimizer="adamw", impl="foreach", checkpointing=ckpt, peft="lora", lora_r=16,
                                lora_target_modules=targets, quant=quant))
    for p in out:
        p["source"] = (DEV | HELD_OUT)[p["model"]]
        keys = ("model", "peft", "quant", "mode", "precision", "batch", "seq", "impl", "checkpointing", "lora_target_modules")
        p["name"] = "_".join(str(p[k]) for k in keys if p.get(k) is not None)
    return out


def run(p):
    import harness

    cfg = json.load(open(os.path.join(ROOT, p["source"])))
    events = []
    if p.get("peft"):
        import lora
        r = lora.train_lora(cfg, p["batch"], p["seq"], r=p["lora_r"], alpha=2 * p["lora_r"],
                            target_modules=p["lora_target_modules"], checkpointing=p["checkpointing"],
                            quant=p["quant"], events=events)
    elif p["mode"] == "train":
        r = harness.train(cfg, p["batch"], p["seq"], p["precision"], p["optimizer"], p["impl"], p["checkpointing"],
                          events=events)
    else:
        r = harness.infer(cfg, p["batch"], p["seq"], p["prompt_len"], p["precision"], events=events)
    path = os.path.join(OUT_DIR, p["name"] + ".txt")
    with open(path, "w") as f:
        for sid, size in events:
            if isinstance(sid, str):
                f.write(f"={sid}\n")
            else:
                f.write(f"-{sid}\n" if size < 0 else f"+{size}\n")
    return dict(p, trace=os.path.relpath(path, HERE), events=len(events), peak_allocated=r["peak_allocated"],
                peak_phase=r["peak_phase"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    args = ap.parse_args()
    import torch
    import transformers

    os.makedirs(OUT_DIR, exist_ok=True)
    done = set()
    if os.path.exists(INDEX):
        for line in open(INDEX):
            d = json.loads(line)
            done.add(d.get("name"))
    else:
        with open(INDEX, "w") as f:
            f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                          "command": "python validation/alloc_traces.py", "fake_tensor": True}}) + "\n")
    for p in points():
        if p["name"] in done or (args.only and p["model"] != args.only):
            continue
        t = time.time()
        r = run(p)
        with open(INDEX, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(f"{p['name']}: {r['events']} events, peak {r['peak_allocated'] / 2**30:.2f} GiB, {time.time() - t:.0f}s",
              flush=True)


if __name__ == "__main__":
    main()
