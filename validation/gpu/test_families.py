"""Unit tests of families.py's selection (no GPU, no torch): python3 -m unittest validation/gpu/test_families.py"""
import importlib.util
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families  # noqa: E402

GIB = 1 << 30


def records():
    return {m: list(families.fixture(m).values()) for m in families.MODULES}


class FamiliesTest(unittest.TestCase):
    def test_selection_is_stable_fits_and_covers_every_module(self):
        recs = records()
        sel = families.select(recs)
        self.assertEqual(sel, families.select(recs))
        self.assertEqual(len({(p["module"], p["id"]) for p in sel}), len(sel))
        self.assertEqual({p["module"] for p in sel}, set(families.MODULES))
        for p in sel:
            self.assertLessEqual(p["oracle_peak"] * 1.3 + 2 * GIB, 80 * GIB, p["id"])
            self.assertNotIn("qlora", p["id"])
        # per model at most PER_MODEL points, and the first rank of every model comes first
        per = {}
        for p in sel:
            per[(p["module"], p["model"])] = per.get((p["module"], p["model"]), 0) + 1
        self.assertLessEqual(max(per.values()), families.PER_MODEL)
        first = len(per)
        self.assertEqual(len({(p["module"], p["model"]) for p in sel[:first]}), first)
        # a smaller card runs fewer points
        self.assertLess(len(families.select(recs, gpu_bytes=24 * GIB)), len(sel))

    def test_shapes_distinguish_what_a_point_measures(self):
        a = {"mode": "train", "checkpointing": False, "mask": "none", "precision": "bf16-mixed", "task": "mlm"}
        self.assertNotEqual(families.shape_key(a), families.shape_key(dict(a, checkpointing=True)))
        self.assertNotEqual(families.shape_key(a), families.shape_key(dict(a, mask="padding")))
        self.assertEqual(families.shape_key(a), families.shape_key(dict(a, batch=64)))
        self.assertTrue(families.is_quantized({"train": "qlora:default"}))
        self.assertTrue(families.is_quantized({"method": "qlora"}))
        self.assertFalse(families.is_quantized({"train": "lora:all-linear"}))

    def test_recorded_points_measure_their_jobs_as_the_rust_tests_count_them(self):
        import json
        path = os.path.join(families.HERE, "h100", "family_recordings.jsonl")
        with open(path) as f:
            recs = [json.loads(line) for line in f]
        points = [r for r in recs if r["kind"] == "family-point"]
        ok = [r for r in points if families.measured(r)]
        # 395 of the 444 recorded points measure their job (tests/gpu_families.rs keeps the later run of a job recorded twice)
        self.assertEqual((len(points), len(ok)), (444, 395))
        self.assertFalse(families.measured({"kind": "skipped"}))
        self.assertTrue(families.measured({"kind": "family-point", "valid": True, "at_tracking": 1}))
        real = {"kind": "family-point", "valid": True, "at_tracking": 1, "max_allocated": 900, "tracked_peak": 1000}
        self.assertTrue(families.measured(real))
        # the GPU held less than half the job's tensors: it ran under fake tensors
        self.assertFalse(families.measured(dict(real, max_allocated=400)))
        self.assertFalse(families.measured(dict(real, superseded="the oracle's job changed")))

    def test_every_point_of_a_model_when_asked(self):
        recs = [{"id": f"p{i}", "model": "m", "mode": "train", "precision": "bf16-mixed", "peak_allocated": GIB,
                 "seconds": 1.0} for i in range(5)]
        self.assertEqual(len(families.select({"vlm": recs})), 1)  # one shape
        self.assertEqual(len(families.select({"vlm": recs}, per_model=10**6, distinct=False)), 5)

    @unittest.skipUnless(importlib.util.find_spec("torch"), "llama4.py imports torch (the oracle's environment)")
    def test_llama4_names_the_oracle_modules_its_parts_import(self):
        import llama4
        by_part = {p["part"]: llama4.imports(p) for p in llama4.points()}
        self.assertEqual(by_part, {"text": (), "lora": ("lora",), "vlm": ("vlm",)})


if __name__ == "__main__":
    unittest.main()
