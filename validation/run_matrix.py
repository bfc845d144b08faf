"""Run the validation matrix and append measurements to fixtures/memory.jsonl.

Resumable: points already in the file are skipped, so an interrupted run continues where it
stopped. Each point runs in a worker process (2 by default, one per core).

    .venv/bin/python validation/run_matrix.py            # the whole matrix (~25 min on 2 cores)
    .venv/bin/python validation/run_matrix.py --only gpt2 --workers 1
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "fixtures", "memory.jsonl")

PRESETS = "crates/vram-core/presets"
CONFIGS = "validation/configs"
# name -> config path; covers dense GQA and MHA, MoE (shared experts), MLA, GPT-2 style (learned
# positions, fused qkv, gelu_new, dropout), tied and untied embeddings, sliding windows, qk-norm,
# sandwich norms, LayerNorm + plain MLP, 0.1B to 16B.
MODELS = {
    "gpt2": f"{PRESETS}/gpt2.json",
    "gpt2-medium": f"{PRESETS}/gpt2-medium.json",
    "opt-125m": f"{CONFIGS}/opt-125m.json",
    "pythia-160m": f"{CONFIGS}/pythia-160m.json",
    "qwen2.5-0.5b": f"{PRESETS}/qwen2.5-0.5b.json",
    "gemma-3-1b": f"{CONFIGS}/gemma-3-1b.json",
    "llama-3.2-1b": f"{PRESETS}/llama-3.2-1b.json",
    "qwen2.5-1.5b": f"{PRESETS}/qwen2.5-1.5b.json",
    "starcoder2-3b": f"{CONFIGS}/starcoder2-3b.json",
    "phi-3-mini": f"{PRESETS}/phi-3-mini.json",
    "mistral-7b": f"{PRESETS}/mistral-7b.json",
    "olmo-2-7b": f"{CONFIGS}/olmo-2-7b.json",
    "llama-3.1-8b": f"{PRESETS}/llama-3.1-8b.json",
    "qwen3-8b": f"{PRESETS}/qwen3-8b.json",
    "gemma-2-9b": f"{PRESETS}/gemma-2-9b.json",
    "qwen1.5-moe-a2.7b": f"{CONFIGS}/qwen1.5-moe-a2.7b.json",
    "deepseek-v2-lite": f"{CONFIGS}/deepseek-v2-lite.json",
}


def points():
    out = []

    def train(model, precision, batch, seq, optimizer="adamw", impl="foreach", checkpointing=False, attention="sdpa"):
        if model == "gemma-2-9b":
            attention = "eager"  # soft-capping: transformers refuses sdpa for Gemma-2
        out.append(dict(model=model, mode="train", precision=precision, batch=batch, seq=seq, optimizer=optimizer,
                        impl=impl, checkpointing=checkpointing, attention=attention))

    def infer(model, precision, batch, context, prompt):
        out.append(dict(model=model, mode="infer", precision=precision, batch=batch, seq=context, prompt_len=prompt,
                        attention="eager" if model == "gemma-2-9b" else "sdpa"))

    for m in MODELS:
        for p in ("fp32", "bf16-mixed", "bf16"):
            train(m, p, 1, 512)
            train(m, p, 4, 2048)
        train(m, "bf16-mixed", 2, 1024, checkpointing=True)
        train(m, "bf16-mixed", 8, 4096, checkpointing=True)
        train(m, "bf16-mixed", 1, 8192)
        train(m, "bf16-mixed", 2, 1024, optimizer="sgd")
        train(m, "bf16-mixed", 2, 1024, impl="fused")
        train(m, "bf16", 2, 1024, checkpointing=True)
        train(m, "bf16", 4, 1024, optimizer="sgd")
        train(m, "fp32", 1, 1024, attention="eager")
        train(m, "bf16-mixed", 2, 512, attention="eager")
        infer(m, "bf16", 1, 2048, 2046)
        infer(m, "bf16", 4, 4096, 4092)
        infer(m, "bf16", 8, 1024, 1008)
        infer(m, "fp32", 1, 1024, 1022)
    for p in out:
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p))
    return out


def run(point):
    sys.path.insert(0, HERE)
    import harness

    cfg = json.load(open(os.path.join(ROOT, MODELS[point["model"]])))
    t = time.time()
    try:
        if point["mode"] == "train":
            r = harness.train(cfg, point["batch"], point["seq"], point["precision"], point["optimizer"], point["impl"],
                              point["checkpointing"], point["attention"])
        else:
            r = harness.infer(cfg, point["batch"], point["seq"], point["prompt_len"], point["precision"], point["attention"])
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": MODELS[point["model"]], **r}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", help="only points of this model")
    args = ap.parse_args()
    done = set()
    if os.path.exists(OUT):
        for line in open(OUT):
            rec = json.loads(line)
            if "id" in rec:
                done.add(rec["id"])
    else:
        import torch
        import transformers
        with open(OUT, "w") as f:
            f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                          "command": "python validation/run_matrix.py", "fake_tensor": True,
                                          "rounding": "each storage rounded up to 512 bytes"}}) + "\n")
    todo = [p for p in points() if p["id"] not in done and (not args.only or p["model"] == args.only)]
    print(f"{len(done)} done, {len(todo)} to run", file=sys.stderr)
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers, maxtasksperchild=8) as pool, open(OUT, "a") as f:
        for i, rec in enumerate(pool.imap_unordered(run, todo), 1):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            status = rec["error"] if "error" in rec else f"{rec['peak_allocated'] / 2**30:.3f} GiB"
            print(f"[{i}/{len(todo)}] {rec['model']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['seq']} "
                  f"{rec['seconds']}s {status}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
