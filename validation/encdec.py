"""Measure what PyTorch really allocates when training or running an ENCODER-DECODER model (Whisper,
BART, T5): fixtures/encdec.jsonl.

Same method as harness.py, whose pieces are imported unchanged: real transformers models built
from config.json under FakeTensorMode, the CUDA emulation (SDPA kernel choice, autocast fp32 list,
fused dropout), the storage Tracker, the categories and result() fields, the two-step training
loop of HF Trainer (forward with the loss, backward, AdamW foreach step, zero_grad(set_to_none)).

Batches (all tracked as "inputs"):
- Whisper (WhisperForConditionalGeneration): input_features float32 [B, num_mel_bins, 3000] (30 s
  of log-mel frames, the feature extractor always pads to 3000; the stride-2 conv2 gives the
  encoder 1500 positions), labels int64 [B, T]; the model derives decoder_input_ids from labels
  (shift_tokens_right). Pure bf16 ("bf16"): weights bf16 and input_features cast to bf16 (a real
  pipeline must, conv1 refuses mixed dtypes).
- BART / T5 (…ForConditionalGeneration): input_ids [B, S], labels [B, T] (decoder_input_ids from
  labels). The all-ones attention_mask is created but not passed, as harness.py does (transformers
  skips an all-ones mask in a real unpadded run).
- use_cache stays at the config's value (True), as a Trainer run leaves it; with gradient
  checkpointing transformers turns it off.

Inference ("infer"): model.eval(), no_grad, one forward of encoder + decoder with the labels
passed (decoder input = shifted labels, T positions, loss computed) as Trainer.evaluate's
prediction step does, weights in the precision (bf16 = pure bf16).

Labels: forward pre/post hooks on the encoder and decoder stacks put the storages created while
each runs forward into "encoder activations" / "decoder activations" (the rest of the forward —
lm head, logits, loss — stays "activations"); categories_after_forward = the bytes by category
right after the (last) forward returns, i.e. what the forward holds for backward. `saved` (training
points without checkpointing): the tensors autograd saves (saved_tensors_hooks), unique storages,
attributed to the innermost module running, summarised for encoder layer 0, decoder layer 0 and the
Whisper conv frontend (dtype and shape of each) and totalled per stack.

T5 and SDPA: T5 passes its relative position bias to the attention function as `position_bias`;
transformers' sdpa_attention_forward turns it into a float additive mask
(create_position_bias_mask, the real function is called here) that requires grad. harness.cuda_sdpa
ignores position_bias, so encdec.py wraps it: with a float mask, CUDA's SDPA cannot take flash; it
takes the memory-efficient kernel, which accepts a float attn_bias and returns its gradient (aten
_efficient_attention_backward grad_bias); under autocast the mask is cast to bf16 with q/k/v (SDPA is
on autocast's lower-precision list). The kernel keeps the bias for backward and allocates grad_bias
of the bias shape in backward ("mem_efficient_bias").

    /work/venv/bin/python validation/encdec.py                # the matrix (resumable)
    /work/venv/bin/python validation/encdec.py --technique    # real vs fake on tiny models
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
OUT = os.path.join(HERE, "fixtures", "encdec.jsonl")
sys.path.insert(0, HERE)

import torch  # noqa: E402
import transformers  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402
import transformers.masking_utils as _masking  # noqa: E402
from transformers import AttentionInterface, AutoConfig  # noqa: E402
from transformers.integrations.sdpa_attention import create_position_bias_mask  # noqa: E402

import harness  # noqa: E402  (registers the CUDA SDPA, dropout and autocast emulation)
from harness import DTYPES, KERNELS, Tracker, amp_dtype, result, run_resumable  # noqa: E402

CLASS = {"whisper": "WhisperForConditionalGeneration", "bart": "BartForConditionalGeneration",
         "t5": "T5ForConditionalGeneration"}
MEL_FRAMES = 3000  # WhisperFeatureExtractor nb_max_frames (30 s)


class FlashLikeBias(torch.autograd.Function):
    """CUDA memory-efficient attention with a float attn_bias that requires grad: output, logsumexp
    (padded to 32 rows), the bias kept for backward; backward allocates dq, dk, dv and grad_bias."""

    @staticmethod
    def forward(ctx, q, k, v, bias):
        b, h, s, _ = q.shape
        out = torch.empty(b, s, h, v.shape[-1], dtype=q.dtype, device=q.device).transpose(1, 2)
        lse = torch.empty(b, h, (s + 31) // 32 * 32, dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse, bias)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, bias = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(bias)


def encdec_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                position_bias=None, **kwargs):
    """harness.cuda_sdpa, plus T5's position bias as transformers' sdpa_attention_forward builds it."""
    if position_bias is None:
        return harness.cuda_sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal
    if is_causal and key.shape[2] > query.shape[2]:
        key, value = key[:, :, :query.shape[2]], value[:, :, :query.shape[2]]
        position_bias = position_bias[:, :, :, :query.shape[2]]
    bias = create_position_bias_mask(position_bias, attention_mask, is_causal, query, key)
    amp = amp_dtype()
    if amp is not None:
        query, key, value, bias = query.to(amp), key.to(amp), value.to(amp), bias.to(amp)
    bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    KERNELS.add("mem_efficient_bias")
    out = FlashLikeBias.apply(query, key, value, bias)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register("sdpa", encdec_sdpa)

_orig_fast_all = _masking.fast_all


def _fast_all(tensor):
    """transformers' mask-skip test reads the padding mask's values (masking_utils.fast_all). No
    padding mask here has a zero (the BART/T5 decoders build an all-ones one when none is passed;
    no mask is passed): a fake one answers that truth, a real one runs the original."""
    if isinstance(tensor, FakeTensor):
        return True
    return _orig_fast_all(tensor)


_masking.fast_all = _fast_all


def build(raw_config, precision, attention):
    raw = dict(raw_config)
    model_type = raw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **raw)
    cls = getattr(transformers, CLASS[model_type])
    model = cls._from_config(cfg, attn_implementation=attention, dtype=DTYPES[precision])
    return cfg, model


def stacks(model):
    base = model.model if hasattr(model, "model") else model  # T5 has no .model
    return base.encoder, base.decoder


def make_batch(cfg, batch, src, tgt, precision):
    labels = torch.randint(0, cfg.vocab_size, (batch, tgt))
    if cfg.model_type == "whisper":
        feats = torch.randn(batch, cfg.num_mel_bins, MEL_FRAMES)
        if precision in ("bf16", "fp16"):
            feats = feats.to(DTYPES[precision])
        return {"input_features": feats, "labels": labels}
    ids = torch.randint(0, cfg.vocab_size, (batch, src))
    torch.ones_like(ids)  # the collator's all-ones attention_mask: created, not passed (see docstring)
    return {"input_ids": ids, "labels": labels}


def label_stacks(model, tr, seen):
    """Storages created while the encoder / decoder stack runs forward -> their own category."""
    stack = []
    for name, mod in zip(("encoder", "decoder"), stacks(model)):
        def pre(m, args, kwargs, name=name):
            stack.append(tr.category)
            if tr.category == "activations":
                tr.category = f"{name} activations"

        def post(m, args, kwargs, out, name=name):
            hs = out[0] if isinstance(out, tuple) else out.last_hidden_state
            seen[f"{name}_output"] = f"{str(hs.dtype).replace('torch.', '')}{list(hs.shape)}"
            tr.category = stack.pop()

        mod.register_forward_pre_hook(pre, with_kwargs=True)
        mod.register_forward_hook(post, with_kwargs=True)

    def head(m, args, out):
        seen["logits"] = f"{str(out.dtype).replace('torch.', '')}{list(out.shape)}"

    model.get_output_embeddings().register_forward_hook(head)


def describe(dtype, shape, nbytes):
    """dtype[shape], plus the storage's bytes where they differ from the shape's (a broadcast view
    of a smaller storage, or a view into a larger one)."""
    numel = 1
    for d in shape:
        numel *= d
    size = numel * torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    return f"{dtype}{shape}" + ("" if size == nbytes else f" (storage {nbytes} B)")


class SavedTensors:
    """What autograd saves, by module (innermost running), unique storages."""

    def __init__(self, model):
        self.where = []
        self.rows = {}  # id(storage) -> (module, dtype, shape, bytes)
        for name, mod in model.named_modules():
            mod.register_forward_pre_hook(self._enter(name))
            mod.register_forward_hook(self._leave)

    def _enter(self, name):
        def pre(m, args):
            self.where.append(name)
        return pre

    def _leave(self, m, args, out):
        self.where.pop()

    def pack(self, t):
        st = t.untyped_storage()
        if id(st) not in self.rows:
            self.rows[id(st)] = (self.where[-1] if self.where else "", str(t.dtype).replace("torch.", ""),
                                 list(t.shape), st.nbytes())
        return t

    def hooks(self):
        self.rows = {}
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def summary(self, cfg):
        enc_pre, dec_pre = ("encoder.block.0.", "decoder.block.0.") if cfg.model_type == "t5" else \
            ("model.encoder.layers.0.", "model.decoder.layers.0.")

        def listing(prefix):
            out = {}
            for mod, dt, shape, nb in self.rows.values():
                if mod.startswith(prefix) or mod == prefix.rstrip("."):
                    out.setdefault(mod[len(prefix):] or "(layer)", []).append(describe(dt, shape, nb))
            return out

        def total(prefix):
            return sum(r[3] for r in self.rows.values() if r[0].startswith(prefix))

        s = {"encoder_layer0": listing(enc_pre), "decoder_layer0": listing(dec_pre),
             "encoder_layer0_bytes": total(enc_pre), "decoder_layer0_bytes": total(dec_pre),
             "encoder_bytes": total(enc_pre.split("layers")[0].split("block")[0]),
             "decoder_bytes": total(dec_pre.split("layers")[0].split("block")[0]),
             "total_bytes": sum(r[3] for r in self.rows.values())}
        other = {}
        for mod, dt, shape, nb in self.rows.values():
            if ".layers." not in mod and ".block." not in mod:
                other.setdefault(mod or "(top)", []).append(describe(dt, shape, nb))
        s["outside_layers"] = other  # frontend (Whisper conv1/conv2), embeddings, final norms, head, loss
        return s


def count_params(model):
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad))


def track_model(tr, model):
    for p in model.parameters():
        tr.track(p, "parameters")
    for b in model.buffers():
        tr.track(b, "parameters")


LORA_TARGETS = {"whisper": ["q_proj", "v_proj"], "bart": ["q_proj", "v_proj"], "t5": ["q", "v"]}


def with_lora(model, family, r, checkpointing):
    """LoRA as the Whisper/Flan-T5 fine-tuning recipes set it up: peft's default q/v targets
    (self- and cross-attention alike), adapters in fp32 on a frozen bf16 base (peft's
    autocast_adapter_dtype), input grads enabled for checkpointing."""
    import lora as _peft_fake_copy  # noqa: F401  (peft's deepcopy under FakeTensorMode)
    from peft import LoraConfig, get_peft_model
    if checkpointing:
        model.enable_input_require_grads()
    cfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules=LORA_TARGETS[family])
    return get_peft_model(model, cfg)


def train(raw_config, batch, src, tgt, precision="bf16-mixed", checkpointing=False, attention="sdpa", steps=2,
          fake=True, seed=0, saved=False, lora=None):
    """`lora`: the rank of LoRA adapters on a bf16 base (precision then names the autocast)."""
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    amp = precision.endswith("-mixed")
    with mode:
        torch.manual_seed(seed)
        cfg, model = build(raw_config, "bf16" if lora else precision, attention)
        if checkpointing:
            model.gradient_checkpointing_enable()
        if lora:
            # peft injects the adapters into the model's own modules and freezes the rest: the
            # transformers model itself is what trains (its names label the stacks).
            with_lora(model, raw_config["model_type"], lora, checkpointing)
        model.train()
        seen = {}
        label_stacks(model, tr, seen)
        rec = SavedTensors(model) if saved else None
        counts = count_params(model)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
        for p in params:
            p.register_post_accumulate_grad_hook(lambda p: tr.relabel(p.grad, "gradients"))
        with tr:
            track_model(tr, model)
            for step in range(steps):
                tr.category = "inputs"
                inputs = make_batch(cfg, batch, src, tgt, precision)
                tr.phase, tr.category = f"forward{step}", "activations"
                half = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
                ctx = torch.autocast("cpu", dtype=half) if amp else contextlib.nullcontext()
                hooks = rec.hooks() if rec else contextlib.nullcontext()
                with ctx, hooks:
                    loss = model(**inputs).loss
                if step == steps - 1:
                    seen["categories_after_forward"] = {k: v for k, v in tr.cats.items() if v}
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
    r = result(tr)
    r["parameters"], r["trainable_parameters"] = counts
    r.update(seen)
    r["attn_implementation"] = model.config._attn_implementation
    if lora:
        r["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if rec:
        r["saved"] = rec.summary(cfg)
    return r


def infer(raw_config, batch, src, tgt, precision="bf16", attention="sdpa", fake=True, seed=0):
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode, torch.no_grad():
        torch.manual_seed(seed)
        cfg, model = build(raw_config, precision, attention)
        model.eval()
        seen = {}
        label_stacks(model, tr, seen)
        counts = count_params(model)
        with tr:
            track_model(tr, model)
            tr.category = "inputs"
            inputs = make_batch(cfg, batch, src, tgt, precision)
            tr.phase, tr.category = "forward", "activations"
            out = model(**inputs)
            seen["categories_after_forward"] = {k: v for k, v in tr.cats.items() if v}
            del out
    r = result(tr)
    r["parameters"], r["trainable_parameters"] = counts
    r.update(seen)
    r["attn_implementation"] = model.config._attn_implementation
    return r


# --------------------------------------------------------------------------------------------
# The matrix

CONF = "validation/configs/encdec"
DEVELOPMENT = ["whisper-small", "t5-small", "t5-v1_1-base", "bart-base", "bart-base-3l", "whisper-tiny"]
MODELS = ["whisper-small", "whisper-large-v3", "whisper-tiny", "whisper-base", "whisper-medium",
          "bart-base", "bart-base-3l", "bart-large", "t5-small", "t5-v1_1-base", "t5-base", "flan-t5-base", "t5-small-ssm",
          "flan-t5-xl"]


LORA_MODELS = ["whisper-small", "t5-v1_1-base", "bart-base-3l", "whisper-large-v3", "flan-t5-xl", "bart-large"]


def points():
    out = []
    for m in MODELS:
        path = os.path.join(ROOT, CONF, m + ".json")
        if not os.path.exists(path):
            continue
        fam = json.load(open(path))["model_type"]

        def pt(mode, precision, batch, tgt, ck=False, src=None):
            out.append(dict(model=m, family=fam, mode=mode, precision=precision, batch=batch,
                            src_len=1500 if fam == "whisper" else src, tgt_len=tgt, checkpointing=ck,
                            attention="sdpa"))

        if m in LORA_MODELS:
            for ck in (False, True):
                out.append(dict(model=m, family=fam, mode="train", precision="bf16-mixed", batch=8,
                                src_len=1500 if fam == "whisper" else 512, tgt_len=128, checkpointing=ck,
                                attention="sdpa", lora=16))
        if fam == "whisper":
            pt("train", "bf16-mixed", 8, 128)
            pt("train", "bf16-mixed", 16, 448)
            pt("train", "fp32", 4, 128)
            pt("train", "bf16-mixed", 8, 128, ck=True)
            pt("train", "bf16", 8, 128)
            pt("infer", "bf16", 16, 128)
        else:
            pt("train", "bf16-mixed", 8, 128, src=512)
            pt("train", "fp32", 4, 128, src=512)
            pt("train", "bf16-mixed", 8, 128, ck=True, src=512)
            pt("infer", "bf16", 16, 128, src=512)
            pt("train", "bf16", 8, 128, src=512)
            pt("train", "bf16-mixed", 4, 256, src=1024)
    for p in out:
        p["set"] = "development" if p["model"] in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


def run(point):
    cfg = json.load(open(os.path.join(ROOT, CONF, point["model"] + ".json")))
    t = time.time()
    extra = {}
    if point["family"] == "whisper":
        extra = {"input_frames": MEL_FRAMES, "num_mel_bins": cfg.get("num_mel_bins", 80)}
    try:
        if point["mode"] == "train":
            r = train(cfg, point["batch"], point["src_len"], point["tgt_len"], point["precision"],
                      point["checkpointing"], point["attention"], saved=not point["checkpointing"],
                      lora=point.get("lora"))
        else:
            r = infer(cfg, point["batch"], point["src_len"], point["tgt_len"], point["precision"], point["attention"])
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": f"{CONF}/{point['model']}.json", **extra, **r}


def main_matrix(workers, only):
    describe = lambda rec: f"{rec['model']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['src_len']} t{rec['tgt_len']} ckpt={rec['checkpointing']} lora={rec.get('lora')}"  # noqa: E731
    run_resumable(OUT, "python validation/encdec.py", points(), run, describe, workers, only, maxtasks=4, meta_extra=None)


# --------------------------------------------------------------------------------------------
# Technique check: real tensors vs fake tensors on tiny versions of each family

TINY = {
    "whisper": {"model_type": "whisper", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
                "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 256,
                "decoder_ffn_dim": 256, "num_mel_bins": 16, "vocab_size": 1024, "max_source_positions": 1500,
                "max_target_positions": 128, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
                "decoder_start_token_id": 3},
    "bart": {"model_type": "bart", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
             "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 256,
             "decoder_ffn_dim": 256, "vocab_size": 1024, "max_position_embeddings": 256},
    "t5": {"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 256, "num_layers": 2, "num_decoder_layers": 2,
           "num_heads": 4, "vocab_size": 1024, "decoder_start_token_id": 0, "pad_token_id": 0},
}


def technique_cases():
    cases = []
    for fam in ("whisper", "bart", "t5"):
        src = 1500 if fam == "whisper" else 256
        t = lambda p, b, ck=False: ("train", fam, dict(batch=b, src=src, tgt=64, precision=p, checkpointing=ck))
        cases += [t("fp32", 2), t("bf16-mixed", 2), t("bf16-mixed", 2, True),
                  ("infer", fam, dict(batch=4, src=src, tgt=64, precision="bf16"))]
        if fam == "whisper":
            cases.append(t("bf16", 2))
    return cases


def check_technique():
    """Writes fixtures/encdec_technique.jsonl."""
    ok = True
    f = open(os.path.join(HERE, "fixtures", "encdec_technique.jsonl"), "w")
    f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                  "command": "python validation/encdec.py --technique", "configs": TINY}}) + "\n")
    for mode, fam, case in technique_cases():
        fn = train if mode == "train" else infer
        t = time.time()
        try:
            real = fn(TINY[fam], fake=False, **case)
            fake = fn(TINY[fam], fake=True, **case)
            same = real["peak_allocated"] == fake["peak_allocated"] and real["peak_phase"] == fake["peak_phase"]
            rec = {"family": fam, "mode": mode, **case, "real_peak": real["peak_allocated"],
                   "fake_peak": fake["peak_allocated"], "real_phase": real["peak_phase"],
                   "fake_phase": fake["peak_phase"], "kernels": fake["attention_kernels"], "equal": same}
        except Exception as e:
            same = False
            rec = {"family": fam, "mode": mode, **case, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-1500:]}
        ok &= same
        rec["seconds"] = round(time.time() - t, 2)
        f.write(json.dumps(rec) + "\n")
        f.flush()
        print(json.dumps(rec)[:400])
    f.close()
    print("ALL EQUAL" if ok else "DIFFERENCES FOUND", file=sys.stderr)
    return ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", help="only points of this model")
    ap.add_argument("--technique", action="store_true", help="real vs fake tensors on tiny models")
    args = ap.parse_args()
    if args.technique:
        sys.exit(0 if check_technique() else 1)
    main_matrix(args.workers, args.only)
