"""Parameter counts and checkpoint tensor names of the model families beyond decoders (encoders,
encoder-decoders, vision encoders): fixtures/family_params.jsonl.

For every config in configs/families/ (real Hub configs; SOURCES.md says where each came from) the
model is built with real Hugging Face transformers on the `meta` device (no weights, no memory):

- head "config": the class named by the config's `architectures[0]` (getattr(transformers, name)),
  or AutoModel when the config names none or transformers lacks the class;
- for encoder configs (model_type in ENCODER_TYPES) also head "mlm" (AutoModelForMaskedLM),
  "classification" (AutoModelForSequenceClassification, num_labels = len(id2label) when the
  config has two or more labels, else 2) and "base" (AutoModel, with its pooler where the class
  adds one), so each head can be checked exactly.

One JSON line per (config, head), after a `_meta` line with the torch/transformers versions:
`parameters` = sum(p.numel() for p in model.parameters()) (tied weights once, as PyTorch counts
them), `trainable_parameters` (requires_grad), `named_parameters` ([name, shape] for every
parameter model.named_parameters() yields, tied duplicates omitted by PyTorch), and
`checkpoint_tensors` ([name, shape, dtype]): the keys save_pretrained would write into
model.safetensors, computed with transformers' own save path on the meta model
(modeling_utils.py save_pretrained: model.state_dict() -> drop `_keys_to_ignore_on_save` ->
remove_tied_weights_from_state_dict (which on meta tensors keys aliases by the parameter object)
-> core_model_loading.revert_weight_conversion); save_pretrained itself cannot write a meta model.
Non-persistent buffers (BERT's position_ids) are not in the state dict and not written.
`checkpoint_note` says when revert_weight_conversion could not run on meta tensors.

    /work/venv/bin/python validation/family_params.py     (~30 s on 2 cores)
"""
import glob
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification
from transformers.core_model_loading import revert_weight_conversion
from transformers.modeling_utils import remove_tied_weights_from_state_dict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "fixtures", "family_params.jsonl")
ENCODER_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "deberta-v2", "deberta", "modernbert",
                 "distilbert", "electra")


def num_labels_of(raw):
    labels = raw.get("id2label") or {}
    return len(labels) if len(labels) >= 2 else 2


def make_config(raw, head):
    raw = dict(raw)
    model_type = raw.pop("model_type")
    if head == "classification":
        n = num_labels_of(raw)
        raw["id2label"] = {str(i): f"LABEL_{i}" for i in range(n)}
        raw["label2id"] = {f"LABEL_{i}": i for i in range(n)}
        raw.pop("_num_labels", None)
    return AutoConfig.for_model(model_type, **raw)


def model_class(raw, head):
    if head == "mlm":
        return AutoModelForMaskedLM, "AutoModelForMaskedLM"
    if head == "classification":
        return AutoModelForSequenceClassification, "AutoModelForSequenceClassification"
    if head == "base":
        return AutoModel, "AutoModel"
    names = raw.get("architectures") or []
    if names and hasattr(transformers, names[0]):
        return getattr(transformers, names[0]), names[0]
    return AutoModel, "AutoModel"


def checkpoint_tensors(model):
    """The keys save_pretrained writes (see the module docstring)."""
    sd = model.state_dict()
    for key in model._keys_to_ignore_on_save or []:
        sd.pop(key, None)
    sd = remove_tied_weights_from_state_dict(sd, model)
    note = None
    try:
        sd = revert_weight_conversion(model, sd)
    except Exception as e:  # recorded: the names are then the model's own
        note = f"revert_weight_conversion failed on meta tensors: {type(e).__name__}: {e}"
    tensors = [[k, list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sd.items()]
    return tensors, note


def measure(path, head):
    raw = json.load(open(path))
    cls, cls_name = model_class(raw, head)
    cfg = make_config(raw, head)
    with torch.device("meta"):
        model = cls(cfg) if cls not in (AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification) \
            else cls.from_config(cfg)
    params = list(model.named_parameters())
    tensors, note = checkpoint_tensors(model)
    rec = {
        "name": os.path.splitext(os.path.basename(path))[0],
        "source": os.path.relpath(path, ROOT),
        "model_type": raw["model_type"],
        "head": head,
        "class": cls_name,
        "model_class": type(model).__name__,
        "num_labels": getattr(cfg, "num_labels", None) if head in ("classification", "config") else None,
        "parameters": sum(p.numel() for _, p in params),
        "trainable_parameters": sum(p.numel() for _, p in params if p.requires_grad),
        "checkpoint_parameters": sum(_numel(s) for _, s, _ in tensors),
        "named_parameters": [[n, list(p.shape)] for n, p in params],
        "checkpoint_tensors": tensors,
    }
    if note:
        rec["checkpoint_note"] = note
    return rec


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def main():
    paths = sorted(glob.glob(os.path.join(HERE, "configs", "families", "*.json")))
    with open(OUT, "w") as f:
        f.write(json.dumps({"_meta": {"torch": torch.__version__, "transformers": transformers.__version__,
                                      "command": "python validation/family_params.py", "device": "meta"}}) + "\n")
        for path in paths:
            raw = json.load(open(path))
            heads = ["config"] + (["mlm", "classification", "base"] if raw["model_type"] in ENCODER_TYPES else [])
            for head in heads:
                try:
                    rec = measure(path, head)
                except Exception as e:  # recorded, never dropped
                    rec = {"name": os.path.splitext(os.path.basename(path))[0], "source": os.path.relpath(path, ROOT),
                           "model_type": raw["model_type"], "head": head, "error": f"{type(e).__name__}: {e}"}
                f.write(json.dumps(rec) + "\n")
                status = rec.get("error") or f"{rec['parameters']:>14,} params, {len(rec['checkpoint_tensors'])} tensors"
                print(f"{rec['name']:42} {head:15} {status}", file=sys.stderr)


if __name__ == "__main__":
    main()
