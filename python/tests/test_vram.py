"""Tests of the installed `vram` wheel: the Python API against the `vram` binary's own JSON.

Run by scripts/python-tests.sh (builds the wheel, installs it into a fresh venv, sets VRAM_BIN
to the CLI binary built from the same checkout). pytest or `python -m unittest` both work.
"""

import json
import os
import shutil
import subprocess
import sys
import types
import unittest

import vram

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def cli_binary():
    """The `vram` binary built from this checkout (VRAM_BIN, else target/{debug,release}/vram)."""
    candidates = [os.environ.get("VRAM_BIN")]
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    candidates += [os.path.join(target, p, "vram") for p in ("debug", "release")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def cli_json(*args):
    exe = cli_binary()
    if exe is None:
        raise unittest.SkipTest("no vram binary: set VRAM_BIN (scripts/python-tests.sh does)")
    out = subprocess.run([exe, *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}

JOB = dict(seq_len=4096, batch_size=3, precision="fp16-mixed", gpu="h20")
JOB_ARGS = ["--model", "qwen2.5-1.5b", "--seq-len", "4096", "--batch-size", "3", "--precision", "fp16-mixed", "--gpu", "h20"]


class EstimateMatchesTheCli(unittest.TestCase):
    def test_peak_and_total_equal_the_binarys_json(self):
        est = vram.estimate("qwen2.5-1.5b", **JOB)
        cli = cli_json("estimate", *JOB_ARGS)
        self.assertEqual(est.peak_allocated, cli["peak_allocated_bytes"])
        self.assertEqual(est.total, cli["total_bytes"])
        self.assertEqual(est.peak_phase, cli["peak_phase"])
        # to_dict() is the CLI's JSON, field for field.
        self.assertEqual(est.to_dict(), cli)
        self.assertEqual(sum(c.bytes for c in est.components), est.total)
        self.assertEqual(max(est.phases.values()), est.peak_allocated)
        self.assertIn("GiB", repr(est))
        self.assertIn(f"{est.total / 2**30:.2f} GiB", repr(est))

    def test_hf_spellings_are_the_same_job(self):
        plain = vram.estimate("qwen2.5-1.5b", seq_len=2048, batch_size=2, grad_accum=4, checkpointing="full", optimizer="adamw-8bit", precision="bf16-mixed")
        hf = vram.estimate(
            "qwen2.5-1.5b",
            max_seq_length=2048,
            per_device_train_batch_size=2,
            gradient_accumulation_steps=4,
            gradient_checkpointing=True,
            optim="adamw_bnb_8bit",
            bf16=True,
        )
        self.assertEqual(hf.to_dict()["job"], plain.to_dict()["job"])
        self.assertEqual(hf.total, plain.total)

    def test_training_arguments_object(self):
        args = types.SimpleNamespace(
            per_device_train_batch_size=2, gradient_accumulation_steps=4, gradient_checkpointing=True, optim="adamw_torch", bf16=True, fp16=False
        )
        est = vram.estimate("qwen2.5-1.5b", args=args, seq_len=1024)
        cli = cli_json("estimate", "--model", "qwen2.5-1.5b", "--seq-len", "1024", "--per_device_train_batch_size", "2",
                       "--gradient_accumulation_steps", "4", "--gradient_checkpointing", "--optim", "adamw_torch", "--precision", "bf16-mixed")
        self.assertEqual(est.to_dict(), cli)
        # fit searches the batch: the TrainingArguments' batch is not passed, the rest is.
        f = vram.fit("qwen2.5-1.5b", gpu="h20", args=args, seq_len=1024)
        self.assertEqual(f.to_dict()["job"]["checkpointing"], cli["job"]["checkpointing"])

    def test_lora_config_like_object(self):
        lora = types.SimpleNamespace(
            peft_type="LORA", r=16, lora_alpha=32, lora_dropout=0.05, target_modules={"q_proj", "v_proj"}, modules_to_save=None, use_dora=False
        )
        est = vram.estimate("qwen2.5-1.5b", peft_config=lora, load_in_4bit=True, seq_len=1024)
        cli = cli_json("estimate", "--model", "qwen2.5-1.5b", "--seq-len", "1024", "--peft", "lora", "--lora-r", "16", "--lora-alpha", "32",
                       "--lora-dropout", "0.05", "--lora-target-modules", "q_proj,v_proj", "--load-in-4bit")
        self.assertEqual(est.to_dict(), cli)
        dora = vram.estimate("qwen2.5-1.5b", peft_config=types.SimpleNamespace(**{**lora.__dict__, "use_dora": True}), seq_len=1024)
        self.assertNotEqual(dora.total, est.total)

    def test_pretrained_config_like_object(self):
        d = dict(TINY_LLAMA)
        cfg = types.SimpleNamespace(to_dict=lambda: d)
        est = vram.estimate(cfg, seq_len=256)
        self.assertGreater(est.total, 0)
        self.assertEqual(est.to_dict()["model"]["model_type"], d["model_type"])
        self.assertEqual(est.model, "llama")  # the CLI's name is the temporary path
        self.assertTrue(est.to_dict()["model"]["name"].endswith("config.json"))
        self.assertEqual(vram.estimate(d, seq_len=256).total, est.total)  # a plain dict too

    def test_encoder_task_and_image_size_keywords(self):
        # google-bert/bert-base-uncased's config: 109,483,778 parameters with a 2-class
        # sequence-classification head (the count PyTorch reports; validation/family_params.py).
        with open(os.path.join(REPO, "validation/configs/families/bert-base-uncased.json")) as f:
            bert = json.load(f)
        est = vram.estimate(bert, task="text-classification", num_labels=2, batch_size=8, seq_len=128)
        self.assertEqual(est.to_dict()["model"]["parameters"], 109_483_778)
        vit = os.path.join(REPO, "validation/configs/families/vit-base-patch16-224.json")
        big = vram.estimate(vit, image_size=384, batch_size=8)
        small = vram.estimate(vit, batch_size=8)
        self.assertGreater(big.total, small.total)  # 577 tokens per image instead of 197
        with self.assertRaises(vram.VramError):
            vram.estimate(vit, seq_len=512)  # the image size decides a vision encoder's sequence

    def test_encoder_decoder_source_len_keyword(self):
        # A text encoder-decoder: source_len sizes the encoder, seq_len the target; the CLI agrees.
        t5 = os.path.join(REPO, "validation/configs/encdec/t5-small.json")
        long = vram.estimate(t5, source_len=1024, seq_len=128, batch_size=8)
        short = vram.estimate(t5, source_len=256, seq_len=128, batch_size=8)
        self.assertGreater(long.total, short.total)
        cli = cli_json("estimate", "--model", t5, "--source-len", "1024", "--seq-len", "128", "-b", "8")
        self.assertEqual(long.total, cli["total_bytes"])
        with self.assertRaises(vram.VramError):
            vram.estimate(os.path.join(REPO, "validation/configs/encdec/whisper-small.json"), source_len=512)

    def test_fit_plan_serve(self):
        f = vram.fit("qwen2.5-1.5b", gpu="h20", seq_len=4096, precision="fp16-mixed", target_utilization=0.9)
        cli = cli_json("fit", "--model", "qwen2.5-1.5b", "--gpu", "h20", "--seq-len", "4096", "--precision", "fp16-mixed", "--target-utilization", "0.9")
        self.assertEqual(f.max_batch_size, cli["max_batch_size"])
        self.assertEqual(f.estimate.total, cli["estimate"]["total_bytes"])
        self.assertIn("max batch", repr(f))
        p = vram.plan("llama-3.1-8b", gpus=8, gpu="h100", seq_len=4096, global_batch_size=64)
        self.assertGreater(p.fitting, 0)
        self.assertEqual(p.to_dict(), cli_json("plan", "--model", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100", "--seq-len", "4096", "--global-batch-size", "64"))
        s = vram.serve("llama-3.1-8b", gpu="h100", max_model_len=8192, tensor_parallel_size=1)
        self.assertTrue(s.fits)
        self.assertEqual(s.to_dict(), cli_json("serve", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192"))
        # vLLM's JSON flags take a dict, as vLLM's Python API does.
        spec = {"method": "ngram", "num_speculative_tokens": 3}
        d = vram.serve("llama-3.1-8b", gpu="h100", max_model_len=8192, speculative_config=spec)
        self.assertEqual(
            d.to_dict(),
            cli_json("serve", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192", "--speculative-config", json.dumps(spec)),
        )
        self.assertTrue(any("method ngram" in n for n in d.to_dict()["gpus"][0]["notes"]))


class Errors(unittest.TestCase):
    def test_cli_error_is_vram_error_with_the_cli_message(self):
        with self.assertRaises(vram.VramError) as cm:
            vram.estimate("qwen2.5-1.5b", precision="fp12")
        exe = cli_binary()
        if exe is not None:
            out = subprocess.run([exe, "estimate", "--model", "qwen2.5-1.5b", "--precision", "fp12", "--json"], capture_output=True, text=True)
            self.assertEqual(out.returncode, cm.exception.exit_code)
            self.assertEqual(out.stderr.strip(), "error: " + str(cm.exception))
        self.assertEqual(cm.exception.exit_code, 2)

    def test_refused_flag_combination(self):
        with self.assertRaises(vram.VramError) as cm:
            vram.fit("qwen2.5-1.5b", gpu="h20", batch_size=4)
        self.assertIn("--batch-size", str(cm.exception))

    def test_unknown_keyword_is_a_type_error_naming_it(self):
        with self.assertRaises(TypeError) as cm:
            vram.estimate("qwen2.5-1.5b", learning_rate=1e-4)
        self.assertIn("learning_rate", str(cm.exception))
        with self.assertRaises(TypeError):
            vram.estimate("qwen2.5-1.5b", json=True)
        with self.assertRaises(TypeError):
            vram.estimate("qwen2.5-1.5b", fused_cross_entropy="yes")
        with self.assertRaises(TypeError):
            vram.serve("llama-3.1-8b", gpu="h100", bf16=True)

    def test_same_flag_twice_is_refused(self):
        with self.assertRaises(TypeError):
            vram.estimate("qwen2.5-1.5b", seq_len=1024, max_seq_length=2048)


class ConsoleScript(unittest.TestCase):
    def test_console_script_is_the_cli(self):
        exe = shutil.which("vram", path=os.path.dirname(sys.executable))
        self.assertIsNotNone(exe, "the wheel installs a `vram` console script next to python")
        out = subprocess.run([exe, "estimate", *JOB_ARGS, "--json"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["total_bytes"], vram.estimate("qwen2.5-1.5b", **JOB).total)
        bad = subprocess.run([exe, "estimate", "--model", "qwen2.5-1.5b", "--precision", "fp12"], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertTrue(bad.stderr.startswith("error: "), bad.stderr)
        version = subprocess.run([exe, "--version"], capture_output=True, text=True)
        self.assertEqual(version.stdout.strip(), f"vram {vram.__version__}")

    def test_run_json_any_subcommand(self):
        gpus = vram.run_json("gpus")
        self.assertTrue(any(g["name"] == "h20" for g in gpus))


if __name__ == "__main__":
    unittest.main()
