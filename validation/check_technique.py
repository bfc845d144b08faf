"""Validate the technique: the same training step (and generation) with real tensors on the CPU
and under FakeTensorMode must give the same tracked peak, byte for byte. Writes
fixtures/technique.jsonl.

    .venv/bin/python validation/check_technique.py     (~2 minutes on 2 cores)
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

TINY = {
    "tiny-llama-gqa": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
                       "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 4096},
    "tiny-mixtral": {"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                     "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 4096,
                     "num_local_experts": 4, "num_experts_per_tok": 2},
    "tiny-gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 2, "n_head": 8, "vocab_size": 4096},
    "tiny-qwen2-tied": {"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
                        "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 4096,
                        "tie_word_embeddings": True},
    "tiny-gemma3-sliding": {"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512,
                            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1,
                            "head_dim": 64, "vocab_size": 4096, "sliding_window": 64},
}


def cases():
    for name in TINY:
        for precision in ("fp32", "bf16", "bf16-mixed"):
            yield dict(model=name, mode="train", precision=precision, batch=2, seq=128, optimizer="adamw",
                       impl="foreach", checkpointing=False, attention="sdpa")
        yield dict(model=name, mode="train", precision="bf16-mixed", batch=2, seq=128, optimizer="adamw",
                   impl="foreach", checkpointing=True, attention="sdpa")
        yield dict(model=name, mode="train", precision="fp32", batch=1, seq=128, optimizer="sgd",
                   impl="foreach", checkpointing=False, attention="eager")
        yield dict(model=name, mode="infer", precision="bf16", batch=2, seq=96, prompt_len=90, attention="sdpa")


def measure(case, fake):
    cfg = TINY[case["model"]]
    if case["mode"] == "train":
        return harness.train(cfg, case["batch"], case["seq"], case["precision"], case["optimizer"], case["impl"],
                             case["checkpointing"], case["attention"], fake=fake)
    return harness.infer(cfg, case["batch"], case["seq"], case["prompt_len"], case["precision"], case["attention"], fake=fake)


def main():
    out = os.path.join(HERE, "fixtures", "technique.jsonl")
    import torch
    import transformers
    with open(out, "w") as f:
        f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                      "command": "python validation/check_technique.py"}}) + "\n")
        for case in cases():
            t = time.time()
            real = measure(case, fake=False)
            fake = measure(case, fake=True)
            rec = {**case, "real_peak": real["peak_allocated"], "fake_peak": fake["peak_allocated"],
                   "real_phase": real["peak_phase"], "fake_phase": fake["peak_phase"], "seconds": round(time.time() - t, 2)}
            f.write(json.dumps(rec) + "\n")
            f.flush()
            ok = "equal" if rec["real_peak"] == rec["fake_peak"] else f"DIFF {rec['real_peak'] - rec['fake_peak']}"
            print(f"{case['model']:22} {case['mode']:5} {case['precision']:10} ckpt={case.get('checkpointing')} "
                  f"{case['attention']:5} real {rec['real_peak']} fake {rec['fake_peak']} {ok}", file=sys.stderr)


if __name__ == "__main__":
    main()
