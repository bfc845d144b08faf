"""Unit tests of the kit's pure parts (no GPU, no torch): python3 -m unittest validation/gpu/test_kit.py"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kit  # noqa: E402

GIB = 1 << 30


class KitTest(unittest.TestCase):
    def test_grid_is_stable_and_sources_exist(self):
        g = kit.grid(80 * GIB)
        self.assertEqual(g, kit.grid(80 * GIB))
        self.assertEqual(len({(p["name"], p["alloc_conf"]) for p in g}), len(g))
        for p in g:
            self.assertTrue(os.path.exists(os.path.join(kit.ROOT, p["source"])), p)
            # every point leaves room for the reserve and a context on the card
            self.assertLessEqual(p["oracle_peak"] * 1.25 + 2 * GIB, 80 * GIB, p["name"])
        # the 8B full fine-tuning points (153 GB under FakeTensorMode) do not fit an 80 GB card
        self.assertFalse(any(p["name"] == "llama-3.1-8b_train_bf16-mixed_1_1024_foreach_False" for p in g))
        self.assertTrue(any(p["name"] == "llama-3.1-8b_train_bf16_2_1024_fused_False" for p in g))
        # a smaller card runs fewer points; the snapshot and expandable points name real ones
        self.assertLess(len(kit.grid(24 * GIB)), len(g))
        names = {p["name"] for p in g}
        self.assertTrue(set(kit.SNAPSHOT_POINTS) <= names)
        self.assertTrue(set(kit.EXPANDABLE_POINTS) <= names)
        self.assertEqual(len(kit.grid(80 * GIB, quick=True)), 3)
        self.assertEqual({p["model"] for p in kit.grid(80 * GIB, only="gpt2")}, {"gpt2"})

    def test_vram_flags(self):
        f = kit.vram_flags({"source": "validation/configs/opt-125m.json", "mode": "train", "batch": 4, "seq": 512,
                            "precision": "fp32", "impl": "fused", "checkpointing": True})
        self.assertEqual(f[:2], ["--model", "validation/configs/opt-125m.json"])
        self.assertEqual(f[f.index("--optimizer-impl") + 1], "fused")
        self.assertEqual(f[f.index("--checkpointing") + 1], "full")
        lora = kit.vram_flags({"source": "x.json", "mode": "train", "batch": 1, "seq": 8, "precision": "bf16-mixed",
                               "peft": "lora", "lora_r": 16, "lora_target_modules": "all-linear", "impl": "foreach",
                               "checkpointing": False})
        self.assertEqual(lora[lora.index("--peft") + 1], "lora")
        self.assertEqual(lora[lora.index("--lora-r") + 1], "16")
        self.assertEqual(lora[lora.index("--lora-target-modules") + 1], "all-linear")
        infer = kit.vram_flags({"source": "x.json", "mode": "infer", "batch": 4, "seq": 1024, "precision": "bf16",
                                "prompt_len": 992})
        self.assertEqual(infer[infer.index("--prompt-len") + 1], "992")

    def test_parse_smi_apps(self):
        self.assertEqual(kit.parse_smi_apps("1234, 500\n99, 1\n"), {1234: 500 << 20, 99: 1 << 20})
        self.assertEqual(kit.parse_smi_apps("No running processes found"), {})


if __name__ == "__main__":
    unittest.main()
