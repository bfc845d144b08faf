"""Probe single Gated DeltaNet layers (transformers' Qwen3NextGatedDeltaNet and Qwen3_5GatedDeltaNet
on the reference PyTorch path, `torch_chunk_gated_delta_rule`) to derive the coefficients vram uses
for Qwen3-Next and Qwen3.5 (crates/vram-core/src/memory/activations.rs `delta_net_layer`,
infer.rs `delta_net_prefill`). The whole-model check is validation/ssm.py.

    /work/venv/bin/python validation/probe_delta_net.py saved       # saved tensors vs the formula
    /work/venv/bin/python validation/probe_delta_net.py transients  # forward/backward transients, fitted
    /work/venv/bin/python validation/probe_delta_net.py prefill     # a no_grad prefill's peak vs the formula
    /work/venv/bin/python validation/probe_delta_net.py first       # LoRA layer 0: what β/decay gradients cost

`saved` runs real (small) tensors under CPU bf16 autocast with saved-tensor hooks and counts the
storages still referenced by the graph after the forward (weak references, so what the graph frees
- the final chunk's state update when no cache asks for it - is not counted). The other two run
under FakeTensorMode with harness.Tracker (every storage PyTorch creates, rounded to 512 bytes).
"""
import gc
import json
import os
import random
import sys
import weakref

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from transformers import AutoConfig, DynamicCache  # noqa: E402
from transformers.models.qwen3_5 import modeling_qwen3_5 as Q5  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next as QN  # noqa: E402

C = 64  # torch_chunk_gated_delta_rule's chunk
# activations.rs DELTA_NET_FORWARD_K/_V and DELTA_NET_BACKWARD_K/_V: the fit below, rounded.
VRAM_TRANSIENTS = {"fwd": (16, 8), "bwd": (14, 5)}


def config(fused, h, hk, hv, dk, dv):
    kw = dict(hidden_size=h, num_hidden_layers=4, intermediate_size=2 * h, num_attention_heads=4, num_key_value_heads=2,
              head_dim=64, linear_num_key_heads=hk, linear_num_value_heads=hv, linear_key_head_dim=dk,
              linear_value_head_dim=dv, linear_conv_kernel_dim=4, vocab_size=1024)
    if fused:
        kw.update(num_experts=0)
    return AutoConfig.for_model("qwen3_next" if fused else "qwen3_5_text", **kw)


def layer(fused, c):
    m = QN if fused else Q5
    mixer = (m.Qwen3NextGatedDeltaNet if fused else m.Qwen3_5GatedDeltaNet)(c, 0)
    norm = (m.Qwen3NextRMSNorm if fused else m.Qwen3_5RMSNorm)(c.hidden_size)
    return mixer, norm


def saved_formula(b, s, h, hk, hv, dk, dv, k=4):
    """activations.rs delta_net_layer (input norm, two half copies of its output, the mixer), bytes."""
    conv = 2 * hk * dk + hv * dv
    n = -(-s // C)
    per_token = 12 * h + 4 * conv + 8 * hv * dk + 20 * hv * dv + 22 * hv
    per_position = 30 * hv * dk + 12 * hv * dv + 14 * hv * C + 16 * hv
    per_seq = 2 * conv * (k - 1) + (8 * n - 4) * hv * dk * dv - 6 * hv * C * dk - 2 * hv * C * dv
    return b * s * per_token + b * n * C * per_position + b * per_seq


def graph_bytes(mixer, norm, x):
    """Bytes the autograd graph of (norm + mixer) on `x` keeps after the forward under CPU bf16
    autocast: storages still referenced (weak references, so what the graph frees is not counted),
    without the weights and their autocast casts, the [C, C] mask and per-head constants
    [B, Hv, 1, 1], which are per layer, not per token."""
    weight_shapes = {tuple(p.shape) for p in list(mixer.parameters()) + list(norm.parameters())}
    weight_shapes |= {tuple(reversed(w)) for w in weight_shapes}
    refs = []

    def pack(t):
        refs.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = mixer(norm(x))
    gc.collect()
    seen = {}
    for r in refs:
        t = r()
        if t is None:
            continue
        shape = tuple(t.shape)
        if shape in weight_shapes or t.dim() <= 1 or shape == (C, C) or shape[-2:] == (1, 1):
            continue
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    del y
    return sum(seen.values())


def saved(b, s, h, hk, hv, dk, dv):
    """Bytes the graph of (norm + fused mixer) keeps after the forward, weights excluded."""
    mixer, norm = layer(True, config(True, h, hk, hv, dk, dv))
    return graph_bytes(mixer, norm, torch.randn(b, s, h, requires_grad=True))


def tracked_layer(b, s, fused, h, hk, hv, dk, dv, cache=False):
    """Forward and backward of one layer under FakeTensorMode: bytes at the end of the forward, the
    forward's peak above that, the backward's peak above (saved + incoming gradient)."""
    c = config(fused, h, hk, hv, dk, dv)
    tr = harness.Tracker()
    with FakeTensorMode():
        mixer, norm = layer(fused, c)
        x = torch.randn(b, s, h, requires_grad=True)
        cp = DynamicCache(config=c) if cache else None
        with tr:
            tr.phase = "fwd"
            start = tr.cur
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = mixer(norm(x), cache_params=cp)
            end = tr.cur
            tr.phase = "bwd"
            g = torch.ones_like(y)
            before = tr.cur
            y.backward(g)
    return end - start, tr.phase_peaks["fwd"] - end, tr.phase_peaks["bwd"] - before


def tracked_prefill(b, s, fused, h, hk, hv, dk, dv):
    """A bf16 no_grad prefill of one layer with the cache: the peak above the layer's input."""
    c = config(fused, h, hk, hv, dk, dv)
    tr = harness.Tracker()
    with FakeTensorMode(), torch.no_grad():
        torch.set_default_dtype(torch.bfloat16)
        mixer, norm = layer(fused, c)
        torch.set_default_dtype(torch.float32)
        x = torch.randn(b, s, h, dtype=torch.bfloat16)
        weights = sum(p.numel() * p.element_size() for p in list(mixer.parameters()) + list(norm.parameters()))
        with tr:
            tr.phase = "p"
            mixer(norm(x), cache_params=DynamicCache(config=c))
    return tr.phase_peaks["p"], weights


def prefill_formula(b, s, fused, h, hk, hv, dk, dv, e=2):
    """infer.rs delta_net_prefill's scan term without the residual (the probe's input is not tracked),
    plus the cache the layer writes."""
    conv = 2 * hk * dk + hv * dv
    f = e * (2 * hk * dk + 2 * hv * dv + 2 * hv) if fused else 0
    scan = b * s * (20 * hv * (dk + dv) + 12 * hv * C + e * conv + e * hv * dv + 16 * hv + e * h + f) + b * 12 * hv * dk * dv
    return scan + b * (4 * hv * dk * dv + e * conv * 4)


def first_layer(trainable, b=1, s=256, h=384, hk=2, hv=6, dk=48, dv=80):
    """Bytes per token a frozen Qwen3.5 mixer (+ norm) saves when its input needs a gradient
    (`trainable` None: any layer but the first under LoRA) or when the input does not and only the
    named projections train (the model's layer 0 with those projections adapted)."""
    c = config(False, h, hk, hv, dk, dv)
    mixer, norm = layer(False, c)
    mixer.requires_grad_(False)
    norm.requires_grad_(False)
    for name in trainable or []:
        getattr(mixer, name).weight.requires_grad_(True)
    x = torch.randn(b, s, h, requires_grad=trainable is None)
    return graph_bytes(mixer, norm, x) / (b * s)


def shapes(n, seed):
    rnd = random.Random(seed)
    for _ in range(n):
        hk = rnd.choice([1, 2, 4, 8])
        yield dict(h=rnd.choice([256, 512, 1024]), hk=hk, hv=hk * rnd.choice([1, 2, 3]), dk=rnd.choice([32, 64, 128]),
                   dv=rnd.choice([32, 64, 128]))


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "saved"
    if what == "saved":
        for b, s, d in [(1, 256, dict(h=384, hk=2, hv=6, dk=48, dv=80)), (1, 512, dict(h=384, hk=2, hv=6, dk=48, dv=80)),
                        (1, 256, dict(h=512, hk=4, hv=8, dk=64, dv=64)), (1, 200, dict(h=256, hk=1, hv=3, dk=32, dv=96))]:
            m, f = saved(b, s, **d), saved_formula(b, s, **d)
            print(json.dumps(dict(batch=b, seq=s, **d, measured=m, formula=f, per_token_diff=round((m - f) / (b * s), 2))))
    elif what == "transients":
        import numpy as np
        rows = []
        for d in shapes(14, 1):
            s = random.Random(str(d)).choice([512, 1024])
            _, fwd, bwd = tracked_layer(1, s, True, **d)
            rows.append(dict(seq=s, **d, fwd=fwd / s, bwd=bwd / s))
            print(json.dumps(rows[-1]), flush=True)
        X = np.array([[r["hv"] * r["dk"], r["hv"] * r["dv"]] for r in rows], float)
        for key in ("fwd", "bwd"):
            y = np.array([r[key] for r in rows])
            coef, *_ = np.linalg.lstsq(X, y, rcond=None)
            used = np.array(VRAM_TRANSIENTS[key], float)
            worst = np.max(np.abs(X @ used - y) / y)
            print(key, "bytes per token per Hv·dk, per Hv·dv:", np.round(coef, 2), "vram's", used.tolist(),
                  "worst error of vram's", round(float(worst), 3))
    elif what == "prefill":
        for fused in (True, False):
            for d in shapes(6, 2):
                peak, weights = tracked_prefill(2, 1024, fused, **d)
                f = prefill_formula(2, 1024, fused, **d)
                print(json.dumps(dict(fused=fused, **d, measured=peak, formula=f, error=round((f - peak) / peak, 3))), flush=True)
    elif what == "first":
        for d in [dict(h=384, hk=2, hv=6, dk=48, dv=80), dict(h=512, hk=4, hv=8, dk=64, dv=64), dict(h=256, hk=1, hv=3, dk=32, dv=96)]:
            full, qkvz = first_layer(None, **d), first_layer(["in_proj_qkv", "in_proj_z"], **d)
            hv, dk, dv = d["hv"], d["dk"], d["dv"]
            # activations.rs: what layer 0 does not save when β and the decay need no gradient.
            spared = 4 * hv * dv + 12 * hv * dk + 4 * hv * C + 4 * hv * dk * dv / C
            print(json.dumps(dict(**d, lora_layer=full, first_layer_qkvz=qkvz, measured_difference=full - qkvz, vram=spared)))
    else:
        sys.exit(f"unknown probe {what!r}: saved, transients, prefill or first")
