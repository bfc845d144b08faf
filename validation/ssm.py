"""Measure what PyTorch allocates when training or running a MAMBA or MAMBA-2 model (selective
state-space layers, no attention): fixtures/ssm.jsonl.

harness.py's training loop unchanged (the real MambaForCausalLM / FalconMambaForCausalLM under
FakeTensorMode, the autocast emulation, the Tracker, HF Trainer's two steps with AdamW foreach);
inference: harness.infer's prefill with the cache, as generate() starts, reading the model's
`cache_params`. Without `mamba-ssm` and
`causal-conv1d` transformers takes its PyTorch path — the sequential selective scan over the
sequence — and that is what is measured: the path a machine without those CUDA kernels runs.

    /work/venv/bin/python validation/ssm.py                # the matrix (resumable)
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import harness  # noqa: E402
from harness import FakeTensorMode, run_resumable  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "ssm.jsonl")
DIR = "validation/configs/ssm"
DEVELOPMENT = ["mamba-130m-hf"]
HELD_OUT = ["mamba-370m-hf", "falcon-mamba-7b"]
MAMBA2_DEVELOPMENT = ["mamba2-130m"]
MAMBA2_HELD_OUT = ["mamba2-780m", "mamba-codestral-7b"]
# bamba-dev-8l is Bamba-9B's layout at 8 layers and a quarter of the width (not a published
# checkpoint): development only; ibm-ai-platform/Bamba-9B is held out.
BAMBA_DEVELOPMENT = ["bamba-dev-8l"]
BAMBA_HELD_OUT = ["bamba-9b"]
# Granite-4.0-H (granitemoehybrid, dense): granite-h-dev-8l is the 8-layer layout transformers'
# docs show, with the experts removed (not a published checkpoint): development only;
# ibm-granite/granite-4.0-h-1b is held out.
# The MoE variants: granite-h-moe-dev-8l is that layout with 8 experts (development only);
# ibm-granite/granite-4.0-h-tiny (64 experts, 6 per token) is held out.
GRANITE_DEVELOPMENT = ["granite-h-dev-8l", "granite-h-moe-dev-8l"]
GRANITE_HELD_OUT = ["granite-4.0-h-1b", "granite-4.0-h-tiny"]
# Falcon-H1 (attention and a Mamba-2 mixer side by side in every layer): falcon-h1-dev-4l is a
# 4-layer layout, not a checkpoint (development only); tiiuae/Falcon-H1-3B is held out.
FALCON_H1_DEVELOPMENT = ["falcon-h1-dev-4l"]
FALCON_H1_HELD_OUT = ["falcon-h1-3b"]
# Jamba (Mamba-1 mixers with RMSNorms on dt, B and C, attention every few layers, MoE on every
# other layer): jamba-dev-8l is a cut-down layout, not a checkpoint (development only);
# ai21labs/Jamba-v0.1 is held out.
JAMBA_DEVELOPMENT = ["jamba-dev-8l"]
JAMBA_HELD_OUT = ["jamba-v0.1"]
# Nemotron-H (nemotron_h: every layer is one block, a Mamba-2 mixer, attention or a relu2 MLP, per
# hybrid_override_pattern): nemotron-h-dev-8l is a cut-down layout, not a checkpoint (development
# only); nvidia/Nemotron-H-8B-Base-8K is held out.
NEMOTRON_DEVELOPMENT = ["nemotron-h-dev-8l"]
NEMOTRON_HELD_OUT = ["nemotron-h-8b"]
# Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5: linear-attention layers with every fourth layer
# gated attention): qwen3-next-dev-4l (MoE, fused projections) and qwen3.5-dev-4l (dense, four
# projections, tied embeddings) are 4-layer layouts, not checkpoints (development only);
# Qwen3-Next-80B-A3B, Qwen3.5-27B, Qwen3.5-35B-A3B and Qwen3.5-0.8B are held out
# (configs/ssm/SOURCES.md); the 0.8B at the development batches, where activations dominate.
DELTA_DEVELOPMENT = ["qwen3-next-dev-4l", "qwen3.5-dev-4l"]
DELTA_HELD_OUT = ["qwen3-next-80b-a3b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-0.8b"]
# Zamba2 (Mamba-2 layers, some preceded by a shared attention+MLP block over the concatenated
# embedding, with per-invocation adapters): zamba2-dev-6l (two weight sets, attention adapters,
# rotary) and zamba2-dev-8l (one weight set, GQA, no rotary) are cut-down layouts, not
# checkpoints (development only); Zamba2-1.2B, -2.7B and -7B are held out (configs/ssm/SOURCES.md).
ZAMBA_DEVELOPMENT = ["zamba2-dev-6l", "zamba2-dev-8l"]
ZAMBA_HELD_OUT = ["zamba2-1.2b", "zamba2-2.7b", "zamba2-7b"]
# The first Zamba (Mamba-1 mixers split into heads, one shared attention+MLP block without
# positions or adapters): zamba-dev-8l is a cut-down layout, not a checkpoint (development only);
# Zamba-7B-v1 (ZambaConfig's defaults, which its docstring names) is held out.
ZAMBA1_DEVELOPMENT = ["zamba-dev-8l"]
ZAMBA1_HELD_OUT = ["zamba-7b-v1"]


def points():
    out = []

    def pt(model, mode, precision, batch, seq, checkpointing=False, attention="eager", padded=False):
        p = dict(model=model, mode=mode, precision=precision, batch=batch, seq=seq,
                 checkpointing=checkpointing, optimizer="adamw" if mode == "train" else None,
                 impl="foreach" if mode == "train" else None, attention=attention)
        if padded:
            p["padded"] = True
        out.append(p)

    # The sequential scan is one Python step per token and layer: CPU time on the shared 2-core
    # machine keeps sequences short (the memory per token does not depend on the length).
    for m in DEVELOPMENT + HELD_OUT:
        big = m.startswith("falcon")
        seq = 512 if m in DEVELOPMENT else 256
        pt(m, "train", "bf16-mixed", 1, 128 if big else seq)
        pt(m, "train", "bf16-mixed", 2, 128 if big else 256, checkpointing=True)
        if not big:
            pt(m, "train", "fp32", 1, 256)
        pt(m, "infer", "bf16", 1 if big else 4, 512)
        if not big:
            pt(m, "infer", "fp32", 4, 512)
    # Mamba-2 (the chunked SSD scan, no per-token Python loop): longer sequences.
    for m in MAMBA2_DEVELOPMENT + MAMBA2_HELD_OUT:
        big = m.startswith("mamba-codestral")
        pt(m, "train", "bf16-mixed", 1 if big else 4, 1024)
        pt(m, "train", "bf16-mixed", 2 if big else 8, 1024, checkpointing=True)
        pt(m, "train", "bf16-mixed", 1, 4096)
        pt(m, "infer", "bf16", 2 if big else 8, 2048)
        if m in ("mamba2-130m", "mamba2-780m"):
            pt(m, "infer", "fp32", 8, 2048)
    # Bamba and Granite-4.0-H (Mamba-2 mixers with a few attention layers, an MLP in every
    # layer): training only, the attention layers eager and under SDPA (transformers' default).
    # Batches (plain, checkpointed, SDPA at 2048 tokens) per held-out model; 4, 8, 8 otherwise.
    big = {"bamba-9b": (1, 2, 2), "granite-4.0-h-1b": (2, 4, 2), "granite-4.0-h-tiny": (1, 2, 1), "falcon-h1-3b": (1, 2, 1),
           "nemotron-h-8b": (2, 4, 2)}
    hybrids = BAMBA_DEVELOPMENT + BAMBA_HELD_OUT + GRANITE_DEVELOPMENT + GRANITE_HELD_OUT + NEMOTRON_DEVELOPMENT + NEMOTRON_HELD_OUT
    for m in hybrids + FALCON_H1_DEVELOPMENT + FALCON_H1_HELD_OUT:
        plain, ckpt, sdpa = big.get(m, (4, 8, 8))
        pt(m, "train", "bf16-mixed", plain, 1024)
        pt(m, "train", "bf16-mixed", ckpt, 1024, checkpointing=True)
        pt(m, "train", "bf16-mixed", 1, 4096)
        pt(m, "train", "bf16-mixed", 1, 4096, attention="sdpa")
        pt(m, "train", "bf16-mixed", sdpa, 2048, attention="sdpa")
    # Their inference (prefill with the hybrid DynamicCache: KV for the attention layers, conv and
    # SSM state for the mixers), under SDPA as transformers defaults to.
    infer_batches = {"bamba-9b": (2, 1), "nemotron-h-8b": (2, 1), "falcon-h1-3b": (2, 1), "granite-4.0-h-tiny": (2, 1)}
    for m in hybrids + FALCON_H1_DEVELOPMENT + FALCON_H1_HELD_OUT:
        b1, b2 = infer_batches.get(m, (4, 2))
        pt(m, "infer", "bf16", b1, 1024, attention="sdpa")
        pt(m, "infer", "bf16", b2, 4096, attention="sdpa")
        if m in ("bamba-dev-8l", "granite-4.0-h-1b"):  # and in fp32, one development and one held-out
            pt(m, "infer", "fp32", b1, 1024, attention="sdpa")
    # Jamba: the sequential scan is one Python step per token and layer, so shorter sequences.
    for m in JAMBA_DEVELOPMENT + JAMBA_HELD_OUT:
        if m in JAMBA_DEVELOPMENT:
            pt(m, "train", "bf16-mixed", 4, 512)
            pt(m, "train", "bf16-mixed", 8, 512, checkpointing=True)
            pt(m, "train", "bf16-mixed", 1, 1024)
            pt(m, "train", "bf16-mixed", 4, 512, attention="sdpa")
        else:
            pt(m, "train", "bf16-mixed", 1, 256)
            pt(m, "train", "bf16-mixed", 2, 256, checkpointing=True)
            pt(m, "train", "bf16-mixed", 1, 512, attention="sdpa")
        # Its prefill under SDPA (the hybrid DynamicCache, as for the Mamba-2 hybrids above).
        pt(m, "infer", "bf16", 4 if m in JAMBA_DEVELOPMENT else 1, 512, attention="sdpa")
        pt(m, "infer", "bf16", 2 if m in JAMBA_DEVELOPMENT else 1, 1024, attention="sdpa")
    # Gated DeltaNet hybrids: training under SDPA (transformers' default) and eager, the prefill
    # under SDPA. Held-out models at batches that keep the fake run's CPU time short.
    for m in DELTA_DEVELOPMENT + DELTA_HELD_OUT:
        big = m in DELTA_HELD_OUT and m != "qwen3.5-0.8b"
        pt(m, "train", "bf16-mixed", 1 if big else 4, 1024, attention="sdpa")
        pt(m, "train", "bf16-mixed", 2 if big else 8, 1024, checkpointing=True, attention="sdpa")
        pt(m, "train", "bf16-mixed", 1, 4096, attention="sdpa")
        pt(m, "train", "bf16-mixed", 1 if big else 2, 2000, attention="eager")
        pt(m, "infer", "bf16", 2 if big else 4, 1024, attention="sdpa")
        pt(m, "infer", "bf16", 1 if big else 2, 4096, attention="sdpa")
        # A batch padded to its longest sample (SFT without packing): the attention layers' mask
        # and the mixers' padding multiply.
        if m in DELTA_DEVELOPMENT + ["qwen3.5-0.8b", "qwen3.5-27b"]:
            pt(m, "train", "bf16-mixed", 1 if big else 4, 1024, attention="sdpa", padded=True)
    # Zamba2: training under SDPA and eager, the prefill under SDPA (as the other hybrids).
    zb = {"zamba2-1.2b": (2, 4, 1, 2), "zamba2-2.7b": (1, 2, 1, 1), "zamba2-7b": (1, 1, 1, 1)}
    for m in ZAMBA_DEVELOPMENT + ZAMBA_HELD_OUT:
        plain, ckpt, eager, inf = zb.get(m, (4, 8, 2, 4))
        pt(m, "train", "bf16-mixed", plain, 1024, attention="sdpa")
        pt(m, "train", "bf16-mixed", ckpt, 1024, checkpointing=True, attention="sdpa")
        pt(m, "train", "bf16-mixed", 1, 4096, attention="sdpa")
        pt(m, "train", "bf16-mixed", eager, 1024, attention="eager")
        pt(m, "infer", "bf16", inf, 1024, attention="sdpa")
        pt(m, "infer", "bf16", 1, 4096, attention="sdpa")
    # The first Zamba: the sequential scan (one Python step per token, head and layer), so the
    # sequences are Jamba's.
    for m in ZAMBA1_DEVELOPMENT + ZAMBA1_HELD_OUT:
        dev = m in ZAMBA1_DEVELOPMENT
        pt(m, "train", "bf16-mixed", 4 if dev else 1, 512 if dev else 256)
        pt(m, "train", "bf16-mixed", 8 if dev else 2, 512 if dev else 256, checkpointing=True)
        pt(m, "train", "bf16-mixed", 1, 1024 if dev else 512)
        pt(m, "train", "bf16-mixed", 4 if dev else 1, 512, attention="sdpa")
        pt(m, "infer", "bf16", 4 if dev else 1, 512, attention="sdpa")
        pt(m, "infer", "bf16", 2 if dev else 1, 1024, attention="sdpa")
    for p in out:
        dev = (DEVELOPMENT + MAMBA2_DEVELOPMENT + BAMBA_DEVELOPMENT + GRANITE_DEVELOPMENT + FALCON_H1_DEVELOPMENT
               + JAMBA_DEVELOPMENT + NEMOTRON_DEVELOPMENT + DELTA_DEVELOPMENT + ZAMBA_DEVELOPMENT + ZAMBA1_DEVELOPMENT)
        p["set"] = "development" if p["model"] in dev else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


def infer(raw_config, batch, seq, precision="bf16", attention="eager", fake=True):
    """harness.infer's prefill (no_grad, the cache, the last position's logits copied to fp32)
    for a Mamba model, whose output carries `cache_params` rather than `past_key_values`."""
    import contextlib
    import torch
    harness.KERNELS.clear()
    tr = harness.Tracker()
    with FakeTensorMode() if fake else contextlib.nullcontext(), torch.no_grad():
        torch.manual_seed(0)
        cfg, model = harness.build(raw_config, precision, attention, True)
        model.eval()
        with tr:
            for p in list(model.parameters()) + list(model.buffers()):
                tr.track(p, "parameters")
            tr.category = "inputs"
            ids = torch.randint(0, cfg.get_text_config().vocab_size, (batch, seq))
            tr.phase, tr.category = "prefill", "activations"
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            tokens = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(-1, keepdim=True)
            del out, tokens
    return harness.result(tr)


def padded_masks():
    """A padded batch's masks under fake tensors: transformers asks whether the collator's mask is
    all ones (masking_utils.fast_all for attention, torch.all in create_recurrent_attention_mask
    for the mixers), which a fake tensor cannot answer; a padded mask has zeros, so the answer is
    no, and the 2D mask goes to the mixers as transformers would hand it."""
    import transformers.masking_utils as mu
    import transformers.models.qwen3_5.modeling_qwen3_5 as q5
    import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as q5m
    import transformers.models.qwen3_next.modeling_qwen3_next as qn
    from torch._subclasses.fake_tensor import FakeTensor
    fast_all, recurrent = mu.fast_all, mu.create_recurrent_attention_mask

    def _fast_all(t):
        return False if isinstance(t, FakeTensor) else fast_all(t)

    def _recurrent(config, inputs_embeds, attention_mask, past_key_values=None, **kw):
        if isinstance(attention_mask, FakeTensor) and attention_mask.ndim == 2 and inputs_embeds.shape[1] > 1:
            return attention_mask[:, -inputs_embeds.shape[1]:].contiguous()
        return recurrent(config, inputs_embeds, attention_mask, past_key_values, **kw)

    mu.fast_all = _fast_all
    for mod in (q5, q5m, qn):
        mod.create_recurrent_attention_mask = _recurrent


def run(point):
    raw = json.load(open(os.path.join(ROOT, DIR, point["model"] + ".json")))

    def measure():
        if point.get("padded"):
            padded_masks()
        if point["mode"] == "train":
            return harness.train(raw, point["batch"], point["seq"], point["precision"], point["optimizer"], point["impl"],
                                 point["checkpointing"], point["attention"], padded=point.get("padded", False))
        return infer(raw, point["batch"], point["seq"], point["precision"], point["attention"])

    return harness.recorded(point, f"{DIR}/{point['model']}.json", measure)


if __name__ == "__main__":
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    describe = lambda rec: f"{rec['model']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['seq']} ckpt={rec['checkpointing']}"  # noqa: E731
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 1
    run_resumable(OUT, "python validation/ssm.py", points(), run, describe, workers, only, maxtasks=2, meta_extra=None)
