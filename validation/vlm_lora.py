"""Measure LoRA and QLoRA fine-tuning of a VISION-LANGUAGE model (LLaVA, Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
Gemma-3, Idefics3/SmolVLM):
fixtures/vlm_lora.jsonl.

vlm.py's loop and run() unchanged (the real model under FakeTensorMode, its two patches, the
Tracker, HF Trainer's two steps with AdamW foreach over the trainable parameters), with one
variant added to its freeze(): "lora:default" and "lora:all-linear" freeze the whole model, cast
it to bf16 (the stored dtype, which transformers 5 loads by default; vlm.py's "bf16-mixed" builds
fp32 weights for full fine-tuning) and inject peft adapters (peft.get_peft_model, LoraConfig r=8, alpha=16, dropout 0, task CAUSAL_LM,
peft's default autocast_adapter_dtype: fp32 adapters on a bf16 base) into the LANGUAGE MODEL only:
`target_modules` is a regex over `model.language_model.*` ending in q_proj|v_proj (the peft
default of the language model's type) or in every linear of a decoder layer (all-linear). The
vision tower and the projector stay frozen, as LLaMA-Factory (freeze_vision_tower,
freeze_multi_modal_projector) and ms-swift run VLM LoRA by default; peft's own default targets
on LLaVA (q_proj, v_proj by suffix) would also adapt the CLIP tower's attention.
Importing lora.py installs its fake-tensor patches for peft (see its docstring).

QLoRA ("qlora:default", "qlora:all-linear"): the same, after qlora_shim.quantize_model (nf4,
double quantization, bf16 compute: transformers' bitsandbytes rule, every nn.Linear but lm_head,
the vision tower's and the projector's included) and peft.prepare_model_for_kbit_training (the
rest to fp32), as lora.py sets QLoRA up; the QuantState tensors are tracked with the parameters.
Idefics3/SmolVLM's language model is `model.text_model`, which the target regex also matches.

    /work/venv/bin/python validation/vlm_lora.py          # the matrix (resumable)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import lora  # noqa: E402,F401  (peft under fake tensors)
import vlm  # noqa: E402
from harness import run_resumable  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "vlm_lora.jsonl")
TARGETS = {"default": ["q_proj", "v_proj"],
           "all-linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
           # The same list, named (vram's Targets::Names): on Qwen3.5 it adapts the attention
           # layers and every MLP but not the linear-attention mixers, whose projections have
           # other names, as a script listing these names gets.
           "named": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
_freeze = vlm.freeze


QUANT = {"bits": 4, "quant_type": "nf4", "nested": True, "compute_dtype": "bf16"}
QTENSORS = []  # the quantized weights' QuantState tensors, tracked with the parameters
_track_model = vlm.track_model


def track_model(tr, model):
    _track_model(tr, model)
    for t in QTENSORS:
        tr.track(t, "parameters")


vlm.track_model = track_model


def freeze(model, train):
    if not train.startswith(("lora:", "qlora:")):
        return _freeze(model, train)
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    # The frozen base in bf16, as transformers 5 loads these checkpoints (dtype="auto": their
    # stored bf16), under Trainer's bf16 autocast (vlm.train's "bf16-mixed").
    model.requires_grad_(False)
    model.to(torch.bfloat16)
    QTENSORS.clear()
    if train.startswith("qlora:"):
        # QLoRA as lora.py sets it up (the HF SmolVLM notebook and TRL's SFTTrainer alike):
        # BitsAndBytesConfig(load_in_4bit, nf4, double quantization, bf16 compute) quantizes every
        # nn.Linear transformers' rule converts — the vision tower's and the projector's too, only
        # lm_head is kept — then prepare_model_for_kbit_training casts every other half parameter
        # (embeddings, norms, the patch conv, biases) to fp32. Checkpointing, when the point asks
        # for it, is enabled afterwards by vlm.train (which calls enable_input_require_grads, as
        # prepare_model_for_kbit_training(use_gradient_checkpointing=True) would).
        import qlora_shim
        QTENSORS.extend(qlora_shim.quantize_model(model, QUANT))
        prepare_model_for_kbit_training(model, use_gradient_checkpointing=False, gradient_checkpointing_kwargs={})
    names = TARGETS[train.split(":", 1)[1]]
    # The language model is `model.language_model` (Idefics3/SmolVLM: `model.text_model`).
    regex = r"^model\.(language_model|text_model)\..*\.(" + "|".join(names) + r")$"
    get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=regex,
                                     task_type="CAUSAL_LM"))


vlm.freeze = freeze

DEVELOPMENT = ["llava-interleave-qwen-0.5b-hf", "Qwen2-VL-2B-Instruct", "gemma-3-4b-it"]
HELD_OUT = ["Qwen2.5-VL-3B-Instruct", "llava-1.5-7b-hf", "gemma-3-12b-it"]
NEXT_DEVELOPMENT = ["llava-v1.6-mistral-7b-hf"]
NEXT_HELD_OUT = ["llava-next-vicuna-7b-from-video-hf"]
OV_DEVELOPMENT = ["llava-onevision-qwen2.5-0.5b-constructed"]
OV_HELD_OUT = ["llava-onevision-qwen2.5-1.5b-constructed"]
IDEFICS_DEVELOPMENT = ["SmolVLM2-500M-Video-Instruct"]
IDEFICS_HELD_OUT = ["SmolVLM-Instruct-reconstructed", "Idefics3-8B-Llama3-constructed"]
PALIGEMMA_DEVELOPMENT = ["paligemma-3b-pt-224-constructed"]
PALIGEMMA_HELD_OUT = ["paligemma2-3b-pt-224-constructed"]
# Qwen3.5 with images (Gated DeltaNet language model): named attention + MLP targets, the 0.8B for
# development, the 27B held out.
QWEN35_DEVELOPMENT = ["Qwen3.5-0.8B"]
QWEN35_HELD_OUT = ["Qwen3.5-27B"]
# Qwen3-VL (DeepStack mergers frozen with the tower): the 2B for development, the 4B held out.
QWEN3_DEVELOPMENT = ["Qwen3-VL-2B-Instruct"]
QWEN3_HELD_OUT = ["Qwen3-VL-4B-Instruct"]
QLORA_DEVELOPMENT = ["SmolVLM2-500M-Video-Instruct", "Qwen2-VL-2B-Instruct", "llava-interleave-qwen-0.5b-hf"]
QLORA_HELD_OUT = ["SmolVLM-Instruct-reconstructed", "Qwen2.5-VL-3B-Instruct", "llava-1.5-7b-hf"]


def points():
    out = []

    def pt(model, train, batch, seq, checkpointing=False):
        p = dict(model=model, train=train, mode="train", precision="bf16-mixed", batch=batch, seq=seq, images=1,
                 checkpointing=checkpointing, attention="sdpa")
        if model.startswith("Qwen"):
            p["image_size"] = 448
        if model in NEXT_DEVELOPMENT + NEXT_HELD_OUT:
            p["image_size"] = 672
        if model in OV_DEVELOPMENT + OV_HELD_OUT:
            p["image_size"] = 768
        out.append(p)

    for m in DEVELOPMENT + HELD_OUT:
        pt(m, "lora:default", 1, 2048)
        pt(m, "lora:default", 2, 2048, checkpointing=True)
        pt(m, "lora:all-linear", 1, 2048)
    # LLaVA-NeXT at 672 px: 5 tiles through the frozen tower, 2928 image tokens per sample.
    for m in NEXT_DEVELOPMENT + NEXT_HELD_OUT:
        pt(m, "lora:default", 1, 4096)
        pt(m, "lora:default", 2, 4096, checkpointing=True)
        pt(m, "lora:all-linear", 2, 4096)
    # LLaVA-OneVision at 768 px: 5 tiles through the frozen tower, 3699 image tokens per sample.
    for m in OV_DEVELOPMENT + OV_HELD_OUT:
        pt(m, "lora:default", 2, 4096)
        pt(m, "lora:default", 4, 4096, checkpointing=True)
        pt(m, "lora:all-linear", 2, 4096)
    # Idefics3 / SmolVLM at the processor's default longest edge: 17 tiles through the frozen tower
    # (SmolVLM2-500M: 1088 image tokens; SmolVLM-Instruct: 1377; Idefics3-8B: 2873).
    for m in IDEFICS_DEVELOPMENT + IDEFICS_HELD_OUT:
        s = 4096 if m.startswith("Idefics3") else 2048
        pt(m, "lora:default", 2, s)
        pt(m, "lora:default", 4, s, checkpointing=True)
        pt(m, "lora:all-linear", 2, s)
    # QLoRA (nf4, double quantization, bf16 compute; the tower and projector quantized too).
    for m in QLORA_DEVELOPMENT + QLORA_HELD_OUT:
        s = 4096 if m.startswith("Idefics3") else 2048
        pt(m, "qlora:default", 2, s)
        pt(m, "qlora:all-linear", 2, s, checkpointing=True)
    for m in QWEN3_DEVELOPMENT + QWEN3_HELD_OUT:
        pt(m, "lora:default", 1, 2048)
        pt(m, "lora:default", 2, 2048, checkpointing=True)
        pt(m, "lora:all-linear", 1, 2048)
        pt(m, "qlora:default", 2, 2048)
        pt(m, "qlora:all-linear", 2, 2048, checkpointing=True)
    for m in QWEN35_DEVELOPMENT + QWEN35_HELD_OUT:
        pt(m, "lora:named", 1, 2048)
        pt(m, "lora:named", 2, 2048, checkpointing=True)
        pt(m, "qlora:named", 2, 2048)
    # PaliGemma / PaliGemma 2 (token_type_ids mask; PaliGemma 2's eager Gemma 2).
    for m in PALIGEMMA_DEVELOPMENT + PALIGEMMA_HELD_OUT:
        pt(m, "lora:default", 2, 2048)
        pt(m, "lora:all-linear", 2, 2048, checkpointing=True)
        pt(m, "qlora:default", 2, 2048)
    dev = (DEVELOPMENT + NEXT_DEVELOPMENT + OV_DEVELOPMENT + IDEFICS_DEVELOPMENT + QLORA_DEVELOPMENT + PALIGEMMA_DEVELOPMENT
           + QWEN3_DEVELOPMENT + QWEN35_DEVELOPMENT)
    for p in out:
        p["set"] = "development" if p["model"] in dev else "held-out"
        p["id"] = "|".join(f"{k}={p[k]}" for k in sorted(p) if k != "set")
    return out


if __name__ == "__main__":
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    describe = lambda rec: f"{rec['model']} {rec['train']} b{rec['batch']} s{rec['seq']} ckpt={rec['checkpointing']}"  # noqa: E731
    run_resumable(OUT, "python validation/vlm_lora.py", points(), vlm.run, describe, 1, only, maxtasks=2,
                  meta_extra={"lora": "r 8, alpha 16, dropout 0, language model only; vision tower and projector frozen"})
