"""Measure what PyTorch really allocates when training or running an ENCODER (BERT, RoBERTa, XLM-R,
MiniLM/BGE sentence embedders, DistilBERT, ELECTRA, DeBERTa-v2/v3, ModernBERT): fixtures/encoders.jsonl.

Same method as harness.py, whose pieces are imported unchanged: real transformers models built
from config.json under FakeTensorMode, the CUDA emulation (SDPA kernel choice, autocast fp32 list,
fused dropout), the storage Tracker, the categories and result() fields, the two-step training
loop of HF Trainer (forward with the loss, backward, AdamW foreach step, zero_grad(set_to_none)).
Only the model class, the batch and the loss differ, per task:

- "mlm": AutoModelForMaskedLM; labels = a copy of input_ids with ~85% of positions set to -100,
  as DataCollatorForLanguageModeling(mlm_probability=0.15) makes them. The model's
  CrossEntropyLoss still computes logits and log_softmax for ALL B x S positions (the -100
  positions are only ignored by nll_loss), so the (B, S, vocab) logits dominate.
- "classification": AutoModelForSequenceClassification, num_labels = len(id2label) when the
  config has two or more labels, else 2; labels one int per sequence (single-label CE).
- "pretraining": ElectraForPreTraining (ELECTRA's discriminator, replaced-token detection); labels
  one 0/1 int per token, BCEWithLogitsLoss over the (B, S) logits. Unpadded batches only: with an
  attention mask the model indexes the logits by it (a data-dependent shape FakeTensorMode cannot
  run).
- "embedding": AutoModel (BertModel with its pooler, as sentence-transformers loads it); one
  forward of batch B, mean pooling of last_hidden_state over the attention mask
  (sentence_transformers.models.Pooling), the first B/2 rows are anchors and the last B/2 their
  positives, loss = CrossEntropy(20 * cos_sim(anchors, positives), arange) as
  MultipleNegativesRankingLoss computes it. A sentence-transformers run with
  per_device_train_batch_size P puts 2P sequences through the model (anchors and positives, two
  forward calls, both alive for backward): that is batch B = 2P here, up to transients.

Batch: input_ids, attention_mask and, for BERT/ELECTRA/DeBERTa tokenizers (model_type bert, electra,
deberta-v2),
token_type_ids of zeros (RoBERTa/XLM-R tokenizers return none). Mask "none": the all-ones mask is
created but not passed, as harness.py does (transformers skips an all-ones mask: a real unpadded
run builds no (B,1,S,S) mask and SDPA can take flash). Mask "padding": the last 25% of every second
sequence is padding (0) and the mask is passed: transformers builds a (B,1,S,S) bool mask, SDPA
converts it to an additive float bias per layer that the memory-efficient kernel keeps for
backward (harness.cuda_sdpa, "mem_efficient_masked"). transformers decides whether the mask can be
skipped by reading its values (masking_utils._ignore_bidirectional_mask_sdpa: padding_mask.all()),
which a fake tensor cannot answer: it is told the truth (the padded mask has zeros, so it is never
skipped) — under real tensors the original function runs and gives the same answer.

Inference ("infer"): model.eval(), torch.no_grad(), one forward (mlm: logits; embedding:
last_hidden_state + mean pooling; classification: logits), model weights in the precision
(bf16 = pure bf16 weights, no autocast).

The technique checks out for the encoder path (check_technique() below, `--technique`): a tiny
BERT (2 layers, hidden 128, 4 heads, vocab 1024) run with real tensors on the CPU and under
FakeTensorMode gives tracked peaks (and peak phases) equal byte for byte in all 11 cases (batch
8-16, seq 128, where activations and the logits dominate: mlm fp32 / bf16-mixed / checkpointing /
padding mask, classification with and without padding, embedding with and without padding,
inference mlm bf16 / fp32 / padded embedding): fixtures/encoders_technique.jsonl (~35 s).

Matrix: 189 points for BERT, RoBERTa, XLM-R, MiniLM/BGE and DeBERTa, 0.3-49 s each, 1,785
point-seconds (21 min wall, 2 workers, shared 2 cores); then SMALL_MATRIX (9 points) per DistilBERT and
ELECTRA model plus 4 replaced-token-detection points per ELECTRA discriminator: 53 points, 0.3-35 s.

    /work/venv/bin/python validation/encoders.py --only distilbert-base-uncased,electra-small-discriminator

    /work/venv/bin/python validation/encoders.py                # the matrix (resumable)
    /work/venv/bin/python validation/encoders.py --technique    # real vs fake on a tiny BERT
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
OUT = os.path.join(HERE, "fixtures", "encoders.jsonl")
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import transformers.masking_utils as _masking  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402
from transformers import AutoConfig  # noqa: E402

import harness  # noqa: E402  (registers the CUDA SDPA, dropout and autocast emulation)
from harness import DTYPES, KERNELS, Tracker, result, run_resumable  # noqa: E402
import vision  # noqa: E402,F401  (ModernBERT's init: trunc_normal_ as a clamped normal draw, vision.py's patch)

TASK_CLASS = {"mlm": "AutoModelForMaskedLM", "classification": "AutoModelForSequenceClassification",
              "embedding": "AutoModel", "pretraining": "ElectraForPreTraining"}
TOKEN_TYPE_MODELS = ("bert", "deberta-v2", "electra")  # tokenizers that return token_type_ids
MNRL_SCALE = 20.0  # sentence_transformers MultipleNegativesRankingLoss default scale

_orig_ignore_bidir = _masking._ignore_bidirectional_mask_sdpa


def _ignore_bidir(padding_mask, kv_length, local_attention_size=None):
    """transformers' skip test reads the mask's values; a fake mask here always has padding."""
    if isinstance(padding_mask, FakeTensor):
        return False
    return _orig_ignore_bidir(padding_mask, kv_length, local_attention_size)


_masking._ignore_bidirectional_mask_sdpa = _ignore_bidir


def num_labels_of(raw):
    labels = raw.get("id2label") or {}
    return len(labels) if len(labels) >= 2 else 2


def build(raw_config, task, precision, attention):
    raw = dict(raw_config)
    model_type = raw.pop("model_type")
    if task == "classification":
        n = num_labels_of(raw_config)
        raw["id2label"] = {str(i): f"LABEL_{i}" for i in range(n)}
        raw["label2id"] = {f"LABEL_{i}": i for i in range(n)}
        raw.pop("_num_labels", None)
    cfg = AutoConfig.for_model(model_type, **raw)
    cls = getattr(transformers, TASK_CLASS[task])
    make = cls.from_config if cls.__name__.startswith("Auto") else cls._from_config  # a concrete class
    model = make(cfg, attn_implementation=attention, dtype=DTYPES[precision])
    return cfg, model


def make_batch(cfg, task, batch, seq, mask):
    """The collator's tensors (all tracked as inputs)."""
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    am = torch.ones_like(ids)
    if mask == "padding":
        am[1::2, seq - seq // 4:] = 0
    inputs = {"input_ids": ids, "attention_mask": am}
    if cfg.model_type in TOKEN_TYPE_MODELS:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    if task == "mlm":
        # DataCollatorForLanguageModeling: ~15% of positions keep their id, the rest are -100
        inputs["labels"] = torch.where(torch.rand(batch, seq) < 0.15, ids, -100)
    elif task == "classification":
        inputs["labels"] = torch.randint(0, cfg.num_labels, (batch,))
    elif task == "pretraining":
        # ELECTRA's discriminator: one 0/1 label per token (replaced or original)
        inputs["labels"] = torch.randint(0, 2, (batch, seq))
    return inputs


def model_kwargs(inputs, mask):
    kw = {k: v for k, v in inputs.items() if k != "attention_mask"}
    if mask == "padding":  # an all-ones mask is skipped by transformers; see the docstring
        kw["attention_mask"] = inputs["attention_mask"]
    return kw


def mean_pool(hidden, attention_mask):
    """sentence_transformers.models.Pooling, mean mode."""
    m = attention_mask.unsqueeze(-1).expand(hidden.size()).to(hidden.dtype)
    return torch.sum(hidden * m, 1) / torch.clamp(m.sum(1), min=1e-9)


def mnrl_loss(emb):
    """MultipleNegativesRankingLoss: anchors = first half, positives = second half."""
    half = emb.shape[0] // 2
    a = F.normalize(emb[:half], p=2, dim=1)
    b = F.normalize(emb[half:2 * half], p=2, dim=1)
    scores = torch.mm(a, b.transpose(0, 1)) * MNRL_SCALE
    return F.cross_entropy(scores, torch.arange(half, device=scores.device))


def forward_loss(model, task, inputs, mask):
    kw = model_kwargs(inputs, mask)
    if task == "embedding":
        out = model(**kw)
        return mnrl_loss(mean_pool(out.last_hidden_state, inputs["attention_mask"]))
    if task == "classification" and model.config.model_type == "deberta-v2":
        # DebertaV2ForSequenceClassification's loss selects the labelled rows with
        # `(labels >= 0).nonzero()` (a data-dependent shape fake tensors cannot run), then the
        # same cross-entropy over [B, num_labels] logits: computed here on the logits directly
        # (every label is >= 0; a few bytes per sample either way).
        labels = kw.pop("labels")
        logits = model(**kw).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), labels.view(-1))
    return model(**kw).loss


def count_params(model):
    return (sum(p.numel() for p in model.parameters()),
            sum(p.numel() for p in model.parameters() if p.requires_grad))


def train(raw_config, task, batch, seq, precision="bf16-mixed", checkpointing=False, attention="sdpa",
          mask="none", optimizer="adamw", impl="foreach", steps=2, fake=True, seed=0):
    """Two training steps as HF Trainer runs them (harness.train's loop, task-specific loss)."""
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    amp = precision.endswith("-mixed")
    with mode:
        torch.manual_seed(seed)
        cfg, model = build(raw_config, task, precision, attention)
        if checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
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
                inputs = make_batch(cfg, task, batch, seq, mask)
                tr.phase, tr.category = f"forward{step}", "activations"
                half = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
                ctx = torch.autocast("cpu", dtype=half) if amp else contextlib.nullcontext()
                with ctx:
                    loss = forward_loss(model, task, inputs, mask)
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
    return r


def infer(raw_config, task, batch, seq, precision="bf16", attention="sdpa", mask="none", fake=True, seed=0):
    """One forward under no_grad (mlm/classification: logits; embedding: mean-pooled states)."""
    KERNELS.clear()
    tr = Tracker()
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode, torch.no_grad():
        torch.manual_seed(seed)
        cfg, model = build(raw_config, task, precision, attention)
        model.eval()
        counts = count_params(model)
        with tr:
            for p in model.parameters():
                tr.track(p, "parameters")
            for b in model.buffers():
                tr.track(b, "parameters")
            tr.category = "inputs"
            inputs = make_batch(cfg, task, batch, seq, mask)
            inputs.pop("labels", None)
            tr.phase, tr.category = "forward", "activations"
            out = model(**model_kwargs(inputs, mask))
            if task == "embedding":
                emb = mean_pool(out.last_hidden_state, inputs["attention_mask"])
                del out, emb
            else:
                logits = out.logits
                del out, logits
    r = result(tr)
    r["parameters"], r["trainable_parameters"] = counts
    return r


# --------------------------------------------------------------------------------------------
# The matrix

FAM = "validation/configs/families"
DEVELOPMENT = ["bert-base-uncased", "roberta-base"]
HELD_OUT = ["bert-large-uncased", "xlm-roberta-base", "all-minilm-l6-v2", "bge-small-en-v1.5", "roberta-large"]
SENTIMENT = "bert-base-multilingual-uncased-sentiment"
DEBERTA_DEVELOPMENT = ["deberta-v3-base"]
DEBERTA_HELD_OUT = ["deberta-v3-xsmall", "deberta-v3-large"]
# Families added after BERT (issue 15): a development model each, the rest held out; a smaller
# matrix per model (SMALL_MATRIX).
FAMILY_DEVELOPMENT = ["distilbert-base-uncased", "electra-small-discriminator"]
FAMILY_HELD_OUT = ["distilbert-base-multilingual-cased-sentiments-student", "electra-base-discriminator",
                   "electra-base-generator"]
ELECTRA_DISCRIMINATORS = ["electra-small-discriminator", "electra-base-discriminator"]
# ModernBERT (pre-LN, RoPE, GeGLU, alternating global / sliding-window attention): base for
# development, large and mmBERT-base (a 256k vocabulary) held out.
MODERNBERT_DEVELOPMENT = ["modernbert-base"]
MODERNBERT_HELD_OUT = ["modernbert-large", "mmbert-base"]


def attention_for(model):
    return "eager" if model.startswith("deberta") else "sdpa"  # DebertaV2 has no SDPA path


def points():
    out = []

    def train_pt(model, task, precision, batch, seq, checkpointing=False, mask="none"):
        out.append(dict(model=model, task=task, mode="train", precision=precision, batch=batch, seq=seq,
                        optimizer="adamw", impl="foreach", checkpointing=checkpointing,
                        attention=attention_for(model), mask=mask))

    def infer_pt(model, task, precision, batch, seq, mask="none"):
        out.append(dict(model=model, task=task, mode="infer", precision=precision, batch=batch, seq=seq,
                        optimizer=None, impl=None, checkpointing=False, attention=attention_for(model), mask=mask))

    for m in DEVELOPMENT + HELD_OUT:
        for p in ("fp32", "bf16-mixed"):
            train_pt(m, "mlm", p, 8, 128)
            train_pt(m, "mlm", p, 16, 512)
            train_pt(m, "mlm", p, 4, 512, checkpointing=True)
        train_pt(m, "mlm", "bf16-mixed", 8, 512, mask="padding")
        train_pt(m, "mlm", "fp32", 8, 128, mask="padding")
        train_pt(m, "classification", "bf16-mixed", 32, 256)
        train_pt(m, "classification", "bf16-mixed", 32, 256, mask="padding")
        train_pt(m, "classification", "fp32", 16, 128)
        train_pt(m, "embedding", "bf16-mixed", 64, 128)
        train_pt(m, "embedding", "bf16-mixed", 64, 128, mask="padding")
        train_pt(m, "embedding", "bf16-mixed", 32, 256, checkpointing=True)
        train_pt(m, "mlm", "bf16-mixed", 32, 128)
        train_pt(m, "mlm", "bf16-mixed", 2, 512)
        train_pt(m, "mlm", "bf16-mixed", 8, 512, checkpointing=True, mask="padding")
        train_pt(m, "classification", "bf16-mixed", 8, 512)
        train_pt(m, "classification", "fp32", 32, 512, mask="padding")
        train_pt(m, "embedding", "fp32", 32, 128)
        train_pt(m, "embedding", "bf16-mixed", 128, 64)
        infer_pt(m, "mlm", "bf16", 32, 512)
        infer_pt(m, "mlm", "fp32", 8, 512)
        infer_pt(m, "embedding", "bf16", 128, 256)
        infer_pt(m, "embedding", "bf16", 128, 256, mask="padding")
        infer_pt(m, "classification", "fp32", 32, 128)
    train_pt(SENTIMENT, "classification", "bf16-mixed", 32, 256)
    train_pt(SENTIMENT, "classification", "bf16-mixed", 32, 256, mask="padding")
    train_pt(SENTIMENT, "classification", "fp32", 16, 128)
    infer_pt(SENTIMENT, "classification", "bf16", 64, 256)
    for m in FAMILY_DEVELOPMENT + FAMILY_HELD_OUT:
        small_matrix(m, train_pt, infer_pt)
    for m in ELECTRA_DISCRIMINATORS:
        # ElectraForPreTraining with an attention mask indexes the logits by it (a data-dependent
        # shape FakeTensorMode cannot run): unpadded batches only.
        train_pt(m, "pretraining", "bf16-mixed", 16, 512)
        train_pt(m, "pretraining", "fp32", 8, 128)
        train_pt(m, "pretraining", "bf16-mixed", 8, 512, checkpointing=True)
        infer_pt(m, "pretraining", "bf16", 32, 512)
    # DeBERTa-v3 (eager disentangled attention): base for development, xsmall and large held out.
    for m in DEBERTA_DEVELOPMENT + DEBERTA_HELD_OUT:
        big = m.endswith("large")
        train_pt(m, "mlm", "bf16-mixed", 4 if big else 8, 512)
        train_pt(m, "mlm", "bf16-mixed", 8, 512, checkpointing=True)
        train_pt(m, "classification", "bf16-mixed", 8 if big else 16, 256)
        train_pt(m, "mlm", "fp32", 4, 256)
        train_pt(m, "embedding", "bf16-mixed", 32, 128)
        infer_pt(m, "mlm", "bf16", 16 if big else 32, 512)
    for m in MODERNBERT_DEVELOPMENT + MODERNBERT_HELD_OUT:
        big = m.endswith("large") or m.startswith("mmbert")
        train_pt(m, "mlm", "bf16-mixed", 4 if big else 8, 512)
        train_pt(m, "mlm", "bf16-mixed", 8, 512, checkpointing=True)
        train_pt(m, "mlm", "bf16-mixed", 4, 512, mask="padding")
        train_pt(m, "mlm", "fp32", 4, 256)
        train_pt(m, "classification", "bf16-mixed", 16, 512)
        train_pt(m, "classification", "bf16-mixed", 16, 256, mask="padding")
        train_pt(m, "embedding", "bf16-mixed", 32, 128)
        train_pt(m, "mlm", "bf16-mixed", 2, 2048)
        infer_pt(m, "mlm", "bf16", 16, 512)
        infer_pt(m, "embedding", "bf16", 64, 512)
    development = DEVELOPMENT + FAMILY_DEVELOPMENT + DEBERTA_DEVELOPMENT + MODERNBERT_DEVELOPMENT
    for p in out:
        p["set"] = "development" if p["model"] in development else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


def small_matrix(m, train_pt, infer_pt):
    """Nine points per model: MLM in fp32, bf16-mixed, checkpointed and padded; classification in
    bf16-mixed and fp32; sentence embedding; inference of both heads."""
    train_pt(m, "mlm", "fp32", 8, 128)
    train_pt(m, "mlm", "bf16-mixed", 16, 512)
    train_pt(m, "mlm", "bf16-mixed", 8, 512, checkpointing=True)
    train_pt(m, "mlm", "bf16-mixed", 8, 512, mask="padding")
    train_pt(m, "classification", "bf16-mixed", 32, 256)
    train_pt(m, "classification", "fp32", 16, 128)
    train_pt(m, "embedding", "bf16-mixed", 64, 128)
    infer_pt(m, "mlm", "bf16", 32, 512)
    infer_pt(m, "classification", "fp32", 32, 128)


def run(point):
    cfg = json.load(open(os.path.join(ROOT, FAM, point["model"] + ".json")))
    t = time.time()
    extra = {"num_labels": num_labels_of(cfg) if point["task"] == "classification" else None}
    try:
        if point["mode"] == "train":
            r = train(cfg, point["task"], point["batch"], point["seq"], point["precision"], point["checkpointing"],
                      point["attention"], point["mask"], point["optimizer"], point["impl"])
        else:
            r = infer(cfg, point["task"], point["batch"], point["seq"], point["precision"], point["attention"],
                      point["mask"])
    except Exception as e:  # recorded, never silently dropped
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    r["seconds"] = round(time.time() - t, 2)
    return {**point, "source": f"{FAM}/{point['model']}.json", **extra, **r}


def main_matrix(workers, only):
    describe = lambda rec: f"{rec['model']} {rec['task']} {rec['mode']} {rec['precision']} b{rec['batch']} s{rec['seq']} ckpt={rec['checkpointing']} mask={rec['mask']}"  # noqa: E731
    run_resumable(OUT, "python validation/encoders.py", points(), run, describe, workers, only, maxtasks=8, meta_extra=None)


# --------------------------------------------------------------------------------------------
# Technique check: real tensors vs fake tensors on a tiny BERT

TINY_BERT = {"model_type": "bert", "hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2,
             "num_attention_heads": 4, "vocab_size": 1024, "max_position_embeddings": 128}


def technique_cases():
    t = lambda task, p, b, s, ck=False, mask="none": ("train", dict(task=task, batch=b, seq=s, precision=p,
                                                                    checkpointing=ck, mask=mask))
    i = lambda task, p, b, s, mask="none": ("infer", dict(task=task, batch=b, seq=s, precision=p, mask=mask))
    return [t("mlm", "fp32", 8, 128), t("mlm", "bf16-mixed", 8, 128), t("mlm", "bf16-mixed", 8, 128, True),
            t("mlm", "bf16-mixed", 8, 128, mask="padding"), t("classification", "bf16-mixed", 16, 128),
            t("classification", "fp32", 16, 128, mask="padding"), t("embedding", "bf16-mixed", 16, 128),
            t("embedding", "bf16-mixed", 16, 128, mask="padding"), i("mlm", "bf16", 8, 128),
            i("mlm", "fp32", 8, 128), i("embedding", "bf16", 16, 128, mask="padding")]


def check_technique():
    """Writes fixtures/encoders_technique.jsonl."""
    ok = True
    f = open(os.path.join(HERE, "fixtures", "encoders_technique.jsonl"), "w")
    f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                  "command": "python validation/encoders.py --technique", "config": TINY_BERT}}) + "\n")
    for mode, case in technique_cases():
        fn = train if mode == "train" else infer
        t = time.time()
        real = fn(TINY_BERT, fake=False, **case)
        fake = fn(TINY_BERT, fake=True, **case)
        same = real["peak_allocated"] == fake["peak_allocated"] and real["peak_phase"] == fake["peak_phase"]
        ok &= same
        rec = {"mode": mode, **case, "real_peak": real["peak_allocated"], "fake_peak": fake["peak_allocated"],
               "real_phase": real["peak_phase"], "fake_phase": fake["peak_phase"],
               "kernels": fake["attention_kernels"], "equal": same, "seconds": round(time.time() - t, 2)}
        f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec))
    f.close()
    print("ALL EQUAL" if ok else "DIFFERENCES FOUND", file=sys.stderr)
    return ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", help="only points of this model")
    ap.add_argument("--technique", action="store_true", help="real vs fake tensors on a tiny BERT")
    args = ap.parse_args()
    if args.technique:
        sys.exit(0 if check_technique() else 1)
    main_matrix(args.workers, args.only)
