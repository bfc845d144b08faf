"""VramTrainerCallback on a real (tiny) transformers Trainer, on the CPU.

Needs torch + transformers (scripts/python-tests.sh runs it with /work/venv's, or VRAM_TORCH_PYTHON);
skipped cleanly where `import torch` fails.
"""

import subprocess
import sys
import tempfile
import unittest

import vram

try:
    import torch
    import transformers
except Exception as e:  # noqa: BLE001 - any import failure means: no torch here
    torch = None
    SKIP = f"torch/transformers unavailable: {e}"
else:
    SKIP = ""


class IntegrationsImportNothing(unittest.TestCase):
    def test_import_does_not_load_transformers(self):
        code = "import sys, vram, vram.integrations; print('transformers' in sys.modules, 'torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.split(), ["False", "False"])


def without_name(v):
    v["model"].pop("name")
    return v


@unittest.skipIf(torch is None, SKIP)
class TrainerCallbackOnCpu(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=256
        )
        self.model = transformers.LlamaForCausalLM(cfg)
        seq = 24
        self.data = [{"input_ids": [(i * 7 + j) % 256 for j in range(seq)], "labels": [(i * 7 + j) % 256 for j in range(seq)]} for i in range(8)]
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def args(self, **kw):
        return transformers.TrainingArguments(
            output_dir=self.tmp.name, per_device_train_batch_size=2, max_steps=2, report_to=[], save_strategy="no", use_cpu=True, **kw
        )

    def test_estimates_the_real_job_and_skips_the_fit_check_without_cuda(self):
        from vram.integrations import VramTrainerCallback

        lines = []
        cb = VramTrainerCallback(log=lines.append)
        args = self.args(gradient_accumulation_steps=2, gradient_checkpointing=True)
        trainer = transformers.Trainer(model=self.model, args=args, train_dataset=self.data, callbacks=[cb])
        trainer.train()
        text = "\n".join(lines)
        self.assertIn("seq 24 from the first batch", text)
        self.assertIn("batch 2", text)
        self.assertIn("fit check skipped: no CUDA device", text)
        # The job the callback estimated is the one vram.estimate gives for the same settings:
        # fp32 weights without AMP -> fp32, accumulation and checkpointing from the arguments.
        same = vram.estimate(
            self.model.config,
            seq_len=24,
            per_device_train_batch_size=2,
            gradient_accumulation_steps=2,
            gradient_checkpointing=True,
            optim=args.optim,  # transformers 5 defaults to adamw_torch_fused: read, not assumed
            precision="fp32",
        )
        # (The configs went through different temporary config.json files, the model's name.)
        self.assertEqual(without_name(cb.estimate.to_dict()), without_name(same.to_dict()))
        self.assertIsInstance(cb, transformers.TrainerCallback)

    def test_peeking_at_the_first_batch_leaves_the_shuffle_alone(self):
        from vram.integrations import _first_batch_seq_len

        data = [{"input_ids": torch.arange(12) + 100 * i} for i in range(8)]
        loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=True)

        def order():
            return [tuple(b["input_ids"][:, 0].tolist()) for b in loader]

        torch.manual_seed(1)
        expected = order()
        torch.manual_seed(1)
        self.assertEqual(_first_batch_seq_len(loader), 12)
        self.assertEqual(order(), expected)
        tensors = torch.utils.data.DataLoader([torch.arange(10) for _ in range(4)], batch_size=2, shuffle=True)
        self.assertIsNone(_first_batch_seq_len(tensors))  # no input_ids: unknown, not guessed

    def test_lora_model_reads_its_adapters(self):
        try:
            import peft
        except Exception as e:  # noqa: BLE001
            self.skipTest(f"peft unavailable: {e}")
        from vram.integrations import job_from_trainer

        lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        model = peft.get_peft_model(self.model, lora)
        config, kw, source = job_from_trainer(self.args(), model, None, seq_len=16)
        est = vram.estimate(config, **kw)
        self.assertEqual(source, "seq_len=")
        lora_job = est.to_dict()["job"]["lora"]
        self.assertEqual((lora_job["r"], lora_job["alpha"], sorted(lora_job["targets"]["names"])), (4, 8.0, ["q_proj", "v_proj"]))
        self.assertEqual(est.to_dict()["job"]["batch"], 2)
        full = vram.estimate(config, seq_len=16, per_device_train_batch_size=2, precision="fp32")
        self.assertLess(est.total, full.total)

    def test_warns_when_the_job_will_not_fit(self):
        from vram.integrations import VramTrainerCallback

        lines = []
        cb = VramTrainerCallback(log=lines.append, gpu="256MiB")  # smaller than the CUDA context
        trainer = transformers.Trainer(model=self.model, args=self.args(), train_dataset=self.data, callbacks=[cb])
        with self.assertWarnsRegex(UserWarning, r"needs about .* GiB but --gpu 256MiB has 0\.25 GiB"):
            trainer.train()
        self.assertFalse(cb.estimate.fits)

    def test_unknown_keyword_fails_at_construction(self):
        from vram.integrations import VramTrainerCallback

        with self.assertRaises(TypeError):
            VramTrainerCallback(learning_rate=1e-3)


if __name__ == "__main__":
    unittest.main()


try:
    import lightning
except ImportError:  # Lightning is optional; these tests need it (and torch)
    lightning = None


@unittest.skipIf(torch is None or lightning is None, "torch and lightning are needed for the Lightning callback tests")
class LightningCallbackOnCpu(unittest.TestCase):
    def test_estimates_the_real_job_from_the_first_batch(self):
        import vram
        from vram.integrations import VramLightningCallback

        cfg = transformers.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=256
        )

        class Module(lightning.pytorch.LightningModule):
            def __init__(self):
                super().__init__()
                self.model = transformers.LlamaForCausalLM(cfg)

            def training_step(self, batch, batch_idx):
                return self.model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-3)

        ids = torch.randint(0, 256, (8, 24))
        loader = torch.utils.data.DataLoader([{"input_ids": ids[i]} for i in range(8)], batch_size=4)
        lines = []
        cb = VramLightningCallback(log=lines.append)
        trainer = lightning.pytorch.Trainer(
            accelerator="cpu", max_steps=2, precision="32-true", callbacks=[cb], logger=False, enable_checkpointing=False, enable_progress_bar=False
        )
        trainer.fit(Module(), loader)
        text = "\n".join(lines)
        self.assertIn("vram: estimate (Lightning, precision fp32)", text)
        self.assertIn("fit check skipped: no CUDA device", text)
        # The callback's estimate is vram.estimate's for the same job.
        same = vram.estimate(cfg, batch_size=4, seq_len=24, precision="fp32")
        self.assertEqual(cb.estimate.peak_allocated, same.peak_allocated)
