"""Measure gpt-oss training memory with the validation harness and write
fixtures/gpt_oss_memory.jsonl (held to by crates/vram-core/tests/gpt_oss.rs).

The model is gpt-oss-20b's real config (configs/gpt-oss-20b.json) cut to its first two layers
(one sliding, one full) and without its quantization_config (transformers trains dequantized
bf16/fp32 weights: MXFP4 refuses training), so the forward and backward phases are dominated by
activations. Attention is eager: transformers has no sdpa path for gpt-oss's sinks.

    /work/venv/bin/python validation/gpt_oss_memory.py     # seconds, FakeTensorMode
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

POINTS = [
    # precision, batch, seq, gradient checkpointing
    ("bf16-mixed", 1, 1024, False),
    ("bf16", 1, 1024, False),
    ("bf16-mixed", 1, 4096, False),
    ("bf16", 1, 4096, False),
    ("bf16-mixed", 1, 2048, True),
    ("bf16-mixed", 1, 2048, False),
    ("bf16-mixed", 2, 2048, False),
]


def config():
    with open(os.path.join(HERE, "configs/gpt-oss-20b.json")) as f:
        c = json.load(f)
    c["num_hidden_layers"] = 2
    c["layer_types"] = c["layer_types"][:2]
    del c["quantization_config"]
    return c


def main():
    import torch
    import transformers

    cfg = config()
    out = os.path.join(HERE, "fixtures/gpt_oss_memory.jsonl")
    with open(out, "w") as f:
        f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                      "command": "python validation/gpt_oss_memory.py", "fake_tensor": True,
                                      "model": "configs/gpt-oss-20b.json, first 2 layers, no quantization_config"}}) + "\n")
        for precision, batch, seq, ckpt in POINTS:
            r = harness.train(cfg, batch, seq, precision, checkpointing=ckpt, attention="eager")
            rec = {"precision": precision, "batch": batch, "seq": seq, "checkpointing": ckpt, "attention": "eager", **r}
            print(precision, batch, seq, ckpt, r["phase_peaks"], file=sys.stderr, flush=True)
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
