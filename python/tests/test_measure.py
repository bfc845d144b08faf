"""vram.measure: any module under FakeTensorMode on the CPU. Skips without torch."""
import json
import os
import tempfile
import unittest

try:
    import torch
except ImportError:  # the package works without torch; only measure needs it
    torch = None

import vram


@unittest.skipIf(torch is None, "torch is not installed: vram.measure needs it")
class MeasureTest(unittest.TestCase):
    def test_adam_step_holds_params_grads_and_two_states(self):
        # Two fp32 linears without bias: 2 × 1024 × 1024 parameters, 4 MiB each (512-aligned).
        m = torch.nn.Sequential(torch.nn.Linear(1024, 1024, bias=False), torch.nn.ReLU(), torch.nn.Linear(1024, 1024, bias=False))
        r = vram.measure(m, torch.randn(8, 1024), train=True)
        cats = r.categories_at_peak
        p = 2 * 1024 * 1024 * 4
        self.assertEqual(r.parameters, 2 * 1024 * 1024)
        self.assertEqual(cats["parameters"], p)
        # The steady-state peak is the foreach AdamW step: params, grads, both states, sqrt list.
        self.assertTrue(r.peak_phase.startswith("optimizer"), r.peak_phase)
        self.assertEqual(cats.get("gradients", 0), p)
        # exp_avg + exp_avg_sq, and AdamW's scalar `step` tensor per parameter (one 512 B block each).
        self.assertEqual(cats.get("optimizer states", 0), 2 * p + 2 * 512)
        self.assertGreaterEqual(r.peak_bytes, 4 * p)
        # The module's real tensors are untouched.
        self.assertFalse(any(type(t).__name__ == "FakeTensor" for t in m.parameters()))

    def test_forward_only_and_a_meta_module(self):
        with torch.device("meta"):
            m = torch.nn.Linear(4096, 4096)
        r = vram.measure(m, torch.empty(2, 4096, device="meta"), train=False)
        self.assertEqual(r.categories_at_peak["parameters"], (4096 * 4096 * 4 + 511) // 512 * 512 + 16384)
        self.assertTrue(r.peak_phase.startswith("forward"))

    def test_saved_as_json(self):
        m = torch.nn.Linear(64, 64)
        r = vram.measure(m, torch.randn(4, 64))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.json")
            r.save(path)
            data = json.load(open(path))
        self.assertEqual(data["peak_bytes"], r.peak_bytes)
        self.assertIn("FakeTensorMode", data["method"])
        self.assertIn("GiB", repr(r))


if __name__ == "__main__":
    unittest.main()
