"""Unit tests of the kit's pure parts (no GPU, no torch): python3 -m unittest validation/gpu/test_kit.py"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kit  # noqa: E402


class KitTest(unittest.TestCase):
    def test_grid_is_stable_and_configs_exist(self):
        g = kit.grid()
        self.assertEqual(g, kit.grid())
        self.assertEqual(len({tuple(sorted(p.items())) for p in g}), len(g))
        for p in g:
            self.assertTrue(os.path.exists(os.path.join(kit.CONFIGS, p["config"])), p)
        self.assertEqual(len(kit.grid(quick=True)), 2)

    def test_vram_flags(self):
        f = kit.vram_flags({"config": "opt-125m.json", "mode": "train", "batch": 4, "seq": 512, "precision": "fp32"})
        self.assertEqual(f[:2], ["--model", os.path.join("validation", "configs", "opt-125m.json")])
        self.assertIn("--batch-size", f)

    def test_parse_smi_apps(self):
        self.assertEqual(kit.parse_smi_apps("1234, 500\n99, 1\n"), {1234: 500 << 20, 99: 1 << 20})
        self.assertEqual(kit.parse_smi_apps("No running processes found"), {})


if __name__ == "__main__":
    unittest.main()
