"""Measure LoRA fine-tuning of a text ENCODER (BERT, RoBERTa, XLM-R, ELECTRA, ModernBERT with
target_modules Wqkv, Wo, Wi — peft has no default for it):
fixtures/encoders_lora.jsonl.

encoders.py's loop and run() unchanged (the real model under FakeTensorMode, the Tracker, HF
Trainer's two steps with AdamW foreach over the trainable parameters), with its build() wrapped:
the model is cast to bf16 (the base in the stored half dtype, under Trainer's bf16 autocast:
encoders.py's "bf16-mixed"), frozen, and peft.get_peft_model applies
LoraConfig(r=8, lora_alpha=16, lora_dropout, target_modules=None: peft's default for the
model_type, query and value), with task_type SEQ_CLS for a classification head (peft then trains a
`modules_to_save` copy of `classifier`: the whole RobertaClassificationHead on RoBERTa/XLM-R/
ELECTRA, the last linear on BERT), FEATURE_EXTRACTION for sentence embeddings and none for MLM.
Adapters are fp32 (peft's default autocast_adapter_dtype). Importing lora.py installs its
fake-tensor patches for peft.

    /work/venv/bin/python validation/encoders_lora.py      # the matrix (resumable)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import lora  # noqa: E402,F401  (peft under fake tensors)
import encoders  # noqa: E402
from harness import run_resumable  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "encoders_lora.jsonl")
TASK_TYPE = {"classification": "SEQ_CLS", "embedding": "FEATURE_EXTRACTION", "mlm": None}
DROPOUT = {"value": 0.0}
_build = encoders.build


def build(raw_config, task, precision, attention):
    import torch
    from peft import LoraConfig, get_peft_model
    cfg, model = _build(raw_config, task, precision, attention)
    model.requires_grad_(False)
    model.to(torch.bfloat16)
    # peft has no default targets for ModernBERT: its fused attention and MLP projections by name.
    targets = MODERNBERT_TARGETS if cfg.model_type == "modernbert" else None
    pm = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=DROPOUT["value"], task_type=TASK_TYPE[task],
                                          target_modules=targets))
    return cfg, pm


encoders.build = build

DEVELOPMENT = ["bert-base-uncased", "roberta-base", "modernbert-base"]
HELD_OUT = ["bert-large-uncased", "xlm-roberta-base", "electra-base-discriminator", "bge-small-en-v1.5", "modernbert-large"]
MODERNBERT_TARGETS = ["Wqkv", "Wo", "Wi"]


def points():
    out = []

    def pt(model, task, batch, seq, checkpointing=False, dropout=0.0):
        out.append(dict(model=model, task=task, mode="train", precision="bf16-mixed", batch=batch, seq=seq,
                        optimizer="adamw", impl="foreach", checkpointing=checkpointing,
                        attention=encoders.attention_for(model), mask="none", lora_dropout=dropout))

    for m in DEVELOPMENT + HELD_OUT:
        if m.startswith("bge"):
            pt(m, "embedding", 64, 128)
            pt(m, "embedding", 32, 256, checkpointing=True)
            continue
        pt(m, "classification", 32, 256)
        pt(m, "classification", 16, 512, checkpointing=True)
        pt(m, "classification", 32, 256, dropout=0.1)
        pt(m, "mlm", 16, 512)
        if m.startswith("modernbert"):
            pt(m, "embedding", 64, 256)
    for p in out:
        p["set"] = "development" if p["model"] in DEVELOPMENT else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


def run(point):
    DROPOUT["value"] = point["lora_dropout"]
    return encoders.run(point)


if __name__ == "__main__":
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    describe = lambda rec: f"{rec['model']} {rec['task']} b{rec['batch']} s{rec['seq']} ckpt={rec['checkpointing']} drop={rec['lora_dropout']}"  # noqa: E731
    run_resumable(OUT, "python validation/encoders_lora.py", points(), run, describe, 1, only, maxtasks=4,
                  meta_extra={"lora": "r 8, alpha 16, peft default targets (query, value), bf16 base"})
