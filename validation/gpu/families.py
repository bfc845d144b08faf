#!/usr/bin/env python3
"""The family oracles' points run for real on a CUDA GPU: encoders, encoder-decoders, vision
encoders, CLIP/SigLIP, vision-language models and state-space hybrids (LoRA on each too).

    python validation/gpu/families.py --out DIR [--deadline SECONDS] [--workers N] [--only MODULE,...]
    python validation/gpu/families.py --list            # the selection, no GPU needed

Each point is one of `validation/<module>.py`'s own points (same id), run by that module's own
`run(point)` in a fresh process, with real tensors on the GPU instead of fake ones on the CPU:
  - FakeTensorMode is replaced by nothing (the modules' `fake=False` path, which their technique
    checks hold equal to the fake one on the CPU);
  - the CUDA emulation of validation/harness.py is taken out: transformers' own SDPA (so the
    kernel CUDA picks runs), torch's own dropout and `torch.is_autocast_enabled`, and the
    modules' `torch.autocast("cpu")` becomes `torch.autocast("cuda")` (CUDA's own fp32 list);
  - tensors are made on the GPU (`torch.set_default_device("cuda")`), as the oracle makes
    everything on its one device.
Recorded per point: torch's `max_memory_allocated` / `max_memory_reserved` from the moment the
oracle's Tracker starts (harness.Tracker, where the oracle starts counting) to the end of the job
(the weights stay allocated, so they are in it), the build's own peak and the peak of any set-up
between the build and the Tracker (a cast of the model, peft's wrapping), the allocator's
counters, NVML's per-process used memory at the end, torch's peak per phase of the job, the
tracked peak of the live tensors with its phase peaks and categories (the oracle's own Tracker,
here over real tensors) and the oracle's
FakeTensorMode peak from the fixture. Nothing is downloaded: configs come from the repo and
weights are random. QLoRA points are left out (bitsandbytes is not on the GPU machine; the
oracle's shim is not bitsandbytes).
"""
import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VALIDATION = os.path.dirname(HERE)
sys.path.insert(0, VALIDATION)
sys.path.insert(0, HERE)

GIB = 1 << 30
# The oracle modules whose points are run, in priority order (each module's fixture is
# validation/fixtures/<module>.jsonl).
MODULES = ("vlm", "ssm", "encdec", "encoders", "vision", "dual", "vlm_lora", "ssm_lora", "encoders_lora",
           "vision_lora", "llama4")
PER_MODEL = 3  # points per model at most
MAX_ORACLE_SECONDS = 45.0  # the oracle's CPU time of a point: a proxy for its Python op count


def fixture(module):
    """id -> the oracle's record, from validation/fixtures/<module>.jsonl."""
    out = {}
    with open(os.path.join(VALIDATION, "fixtures", module + ".jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if "id" in d and "peak_allocated" in d:
                out[d["id"]] = d
    return out


def shape_key(p):
    """What makes two points of one model measure different things."""
    train = p.get("train") or p.get("method") or ""
    return (p.get("mode"), bool(p.get("checkpointing")), p.get("mask") or p.get("padded"), p.get("precision"),
            str(train).split(":")[0], p.get("task"), p.get("part"))


def is_quantized(p):
    return str(p.get("train") or "").startswith("qlora") or p.get("method") == "qlora" or bool(p.get("quant"))


def preference(rec):
    """The order a model's points are considered in, whatever the fixture's row order: training
    under bf16-mixed without checkpointing (what most users run), inference, the same training
    with checkpointing, then the rest; the id breaks ties."""
    mixed = str(rec.get("precision", "")).endswith("-mixed")
    train = rec.get("mode") == "train"
    if train and mixed and not rec.get("checkpointing"):
        rank = 0
    elif not train:
        rank = 1
    elif train and mixed:
        rank = 2
    else:
        rank = 3
    return (rank, rec["id"])


def select(records, gpu_bytes=80 * GIB, per_model=PER_MODEL, max_seconds=MAX_ORACLE_SECONDS, distinct=True):
    """The points to run, in run order (pure; unit-tested). `records`: module -> the fixture's
    records. Per model, in the order `preference` gives, the first point of each distinct shape (mode,
    checkpointing, mask, precision, method, task; every point when not `distinct`), at most
    `per_model` of them, among those
    that fit the GPU with room for the reserve and a context, that the oracle ran in at most
    `max_seconds`, and that are not QLoRA. The run order takes each model's first point across
    all modules (the modules taken in turn), then each model's second, and so on, so a deadline
    cuts evenly."""
    ranked = []
    for mi, module in enumerate(MODULES):
        per = {}
        for rec in sorted(records.get(module, []), key=preference):
            if is_quantized(rec) or rec.get("seconds", 0) > max_seconds:
                continue
            if rec["peak_allocated"] * 1.3 + 2 * GIB > gpu_bytes:
                continue
            chosen = per.setdefault(rec["model"], [])
            if len(chosen) < per_model and (not distinct or all(shape_key(c) != shape_key(rec) for c in chosen)):
                chosen.append(rec)
        for model_index, (model, chosen) in enumerate(per.items()):
            for rank, rec in enumerate(chosen):
                ranked.append(((rank, model_index, mi), {"module": module, "id": rec["id"], "model": model,
                                                         "oracle_peak": rec["peak_allocated"],
                                                         "oracle_seconds": rec.get("seconds")}))
    ranked.sort(key=lambda x: x[0])
    return [p for _, p in ranked]


def measured(rec):
    """Whether a recorded point measures its job (as crates/vram-core/tests/support/gpu_points.rs
    decides): a valid `family-point`, not superseded (the oracle's job changed after the run), not
    run under fake tensors (the GPU held less than half the job's tensors: ssm.py's old inference,
    llama4.py's LoRA and image parts before families.py loaded their modules first), and for
    records made before the peak was reset at the Tracker's start (no `at_tracking`), not a
    VLM-LoRA point whose fp32-to-bf16 cast after the build reached the job's peak."""
    if rec.get("kind") != "family-point" or rec.get("valid") is not True or "superseded" in rec:
        return False
    if rec.get("max_allocated", 0) < rec.get("tracked_peak", 0) // 2:
        return False
    if "at_tracking" in rec:
        return True
    return not (rec["module"] == "vlm_lora" and rec["max_allocated"] >= 0.99 * rec["build_peak"])


def need_bytes(item):
    """GPU memory to set aside for a running point: its oracle peak, the reserve, a context."""
    return int(item["oracle_peak"] * 1.3) + GIB


# --------------------------------------------------------------------------------------------
# The child: one point, for real


def real_cuda(modules, device):
    """Undo validation/harness.py's CUDA emulation (see the module docstring)."""
    import torch
    import torch.nn.functional as F
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    import harness

    AttentionInterface.register("sdpa", sdpa_attention_forward)
    F.dropout = harness._orig_dropout
    torch.nn.functional.dropout = harness._orig_dropout
    lora = sys.modules.get("lora")
    if lora is not None:
        torch.is_autocast_enabled = lora._is_autocast_enabled
    orig_autocast = torch.autocast

    class autocast(orig_autocast):
        def __init__(self, device_type, *args, **kwargs):
            super().__init__(device if device_type == "cpu" else device_type, *args, **kwargs)

    torch.autocast = autocast
    for m in modules:
        if hasattr(m, "FakeTensorMode"):
            m.FakeTensorMode = contextlib.nullcontext
    torch.set_default_device(device)


def mark(marks, peak_key, now_key, count_key, cuda):
    """Record torch's peak so far under `peak_key` (the largest of the calls) and what is
    allocated now under `now_key`, then reset the peak counter; count the call."""
    import torch

    if cuda:
        torch.cuda.synchronize()
        marks[peak_key] = max(marks.get(peak_key, 0), torch.cuda.max_memory_allocated())
        marks[now_key] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    marks[count_key] = marks.get(count_key, 0) + 1


def wrap_builds(modules, marks, cuda):
    """Every module-level `build`: the build's own peak recorded, then the peak counter reset, so
    the job's peak starts from the built model."""
    for m in modules:
        orig = getattr(m, "build", None)
        if orig is None or getattr(orig, "_wrapped", False):
            continue

        def build(*args, _orig=orig, **kwargs):
            out = _orig(*args, **kwargs)
            mark(marks, "build_peak", "after_build", "builds", cuda)
            return out

        build._wrapped = True
        m.build = build


def reset_at_tracking(marks, cuda):
    """torch's peak counter reset when the oracle's Tracker starts (harness.Tracker.__enter__):
    from there on, as the oracle counts, with the model and anything set up before it allocated.
    Set-up steps between the build and the job (a cast of the built model, peft's wrapping) then
    stay out of the peak, as they stay out of the oracle's."""
    import harness

    orig = harness.Tracker.__enter__

    def enter(self):
        mark(marks, "setup_peak", "at_tracking", "trackers", cuda)
        return orig(self)

    harness.Tracker.__enter__ = enter
    # torch's peak per phase of the job (the Tracker's phases: forward0, backward0, ...): read
    # and reset at each phase change, so the job's peak is the largest of them.
    phase = harness.Tracker.phase

    def set_phase(self, name):
        if cuda:
            import torch

            peaks = marks.setdefault("gpu_phase_peaks", {})
            peaks[self._phase] = max(peaks.get(self._phase, 0), torch.cuda.max_memory_allocated())
            reserved = marks.setdefault("gpu_phase_reserved", {})
            reserved[self._phase] = max(reserved.get(self._phase, 0), torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()
        phase.fset(self, name)

    harness.Tracker.phase = property(phase.fget, set_phase)


def child_point(item, device, snapshot=None):
    import kit

    cuda = device == "cuda"
    module = importlib.import_module(item["module"])
    point = next(p for p in module.points() if p["id"] == item["id"])
    # The oracle modules a point's run imports on its way (llama4.py's LoRA and image parts), loaded
    # now so that real_cuda reaches them too: one imported later would still run under fake tensors.
    for name in getattr(module, "imports", lambda p: ())(point):
        importlib.import_module(name)
    loaded = [sys.modules[n] for n in ("harness", "lora", "qlora_shim", *MODULES) if n in sys.modules]
    real_cuda(loaded, device)
    marks = {}
    wrap_builds(loaded, marks, cuda)
    reset_at_tracking(marks, cuda)
    import torch

    if not cuda:  # a dry run of the code paths on the CPU: small shapes (images keep their tokens)
        small = {"batch": 1} if "images" in point else {"batch": 1, "seq": 128, "src_len": 64, "tgt_len": 32}
        point.update({k: v for k, v in small.items() if k in point})
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        if snapshot:  # the allocator's history with Python frames, to place what the Tracker missed
            torch.cuda.memory._record_memory_history(max_entries=200000, context="all", stacks="python")
    t0 = time.time()
    run = getattr(module, "run", None)
    if run is None:  # vision_lora / vlm_lora run through the base module's run
        run = {"vision_lora": "vision", "vlm_lora": "vlm"}[item["module"]]
        run = sys.modules[run].run
    out = run(point)
    rec = {"kind": "family-point" if cuda else "dry-run", "module": item["module"], "id": item["id"],
           "model": item["model"], "oracle_peak": item["oracle_peak"], "seconds": round(time.time() - t0, 2),
           "builds": marks.get("builds", 0)}
    if "error" in out:
        rec.update(kind="error", error=out["error"], traceback=out.get("traceback"))
        return rec
    rec["tracked_peak"] = out["peak_allocated"]
    rec["tracked_phase"] = out.get("peak_phase")
    # Where the real tensors peaked and what they were: compared with the fixture's own phase
    # peaks and categories, these place any difference between the GPU and the oracle.
    rec["tracked_phase_peaks"] = out.get("phase_peaks")
    rec["tracked_categories"] = out.get("categories_at_peak")
    rec["attention_kernels"] = out.get("attention_kernels")
    if cuda:
        torch.cuda.synchronize()
        if snapshot:
            import gzip
            import pickle

            with gzip.open(snapshot, "wb") as f:
                pickle.dump(torch.cuda.memory._snapshot(), f)
            torch.cuda.memory._record_memory_history(enabled=None)
            rec["snapshot"] = os.path.basename(snapshot)
        st = torch.cuda.memory_stats()
        peaks = marks.get("gpu_phase_peaks", {})
        rec["gpu_phase_peaks"] = peaks
        rec["max_allocated"] = max([torch.cuda.max_memory_allocated(), *peaks.values()])
        rec["max_reserved"] = max([torch.cuda.max_memory_reserved(), *marks.get("gpu_phase_reserved", {}).values()])
        rec["build_peak"] = marks.get("build_peak")
        rec["after_build"] = marks.get("after_build")
        rec["setup_peak"] = marks.get("setup_peak")  # from the build's end to the Tracker's start
        rec["at_tracking"] = marks.get("at_tracking")
        rec["trackers"] = marks.get("trackers", 0)
        rec["allocator"] = {k: st.get(k) for k in ("num_alloc_retries", "num_ooms", "num_device_alloc",
                                                   "num_device_free")}
        rec["reserved_end"] = torch.cuda.memory_reserved()
        kit.settle()
        rec["nvml_process"], rec["nvml_device"] = kit.nvml()
        # valid: no allocator retry or OOM, and the job ran on the GPU (tensors allocated there)
        rec["valid"] = (st.get("num_alloc_retries", 0) == 0 and st.get("num_ooms", 0) == 0 and rec["builds"] >= 1
                        and (rec["at_tracking"] or 0) > 0)
    return rec


# --------------------------------------------------------------------------------------------
# The parent: schedule the children


def run_all(items, args, write, gpu_bytes, t_start):
    """Run points concurrently while their set-aside memory fits the GPU; none is started past
    the deadline, and running ones are killed 60 s after it."""
    pending, running = list(items), []
    budget = int(gpu_bytes * 0.92)
    tally = {"ok": 0, "error": 0}
    while pending or running:
        now = time.time() - t_start
        for entry in list(running):
            proc, item = entry
            if proc.poll() is not None:
                running.remove(entry)
                stdout, stderr = proc.communicate()
                lines = [line for line in stdout.splitlines() if line.startswith("{")]
                if proc.returncode != 0 or not lines:
                    rec = {"kind": "error", "rc": proc.returncode, "stderr": stderr[-3000:]}
                else:
                    rec = json.loads(lines[-1])
                write({**{k: item[k] for k in ("module", "id", "model", "oracle_peak")}, **rec})
                tally["error" if rec.get("kind") == "error" else "ok"] += 1
                if tally["error"] >= args.give_up and not tally["ok"] and pending:
                    # the same failure everywhere (an API drift, a broken install): stop early
                    for item in pending:
                        write({"kind": "skipped", **{k: item[k] for k in ("module", "id", "model", "oracle_peak")},
                               "why": f"the first {tally['error']} points all failed"})
                    pending = []
            elif now > args.deadline + 60:
                proc.kill()
        in_use = sum(need_bytes(i) for _, i in running)
        if pending and now < args.deadline and len(running) < args.workers:
            for i, item in enumerate(pending):
                if in_use + need_bytes(item) <= budget or not running:
                    argv = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(item), "--device",
                            args.device]
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    running.append((proc, item))
                    del pending[i]
                    break
        if pending and now >= args.deadline and not running:
            for item in pending:
                write({"kind": "skipped", **{k: item[k] for k in ("module", "id", "model", "oracle_peak")},
                       "why": "deadline"})
            pending = []
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory to write (refuses an existing family_recordings.jsonl)")
    ap.add_argument("--only", help="comma-separated oracle modules (encoders, vlm, ssm ...)")
    ap.add_argument("--models", help="comma-separated model names")
    ap.add_argument("--workers", type=int, default=6, help="points run at once (default 6)")
    ap.add_argument("--deadline", type=float, default=3600, help="seconds after which no point is started")
    ap.add_argument("--give-up", type=int, default=6, help="stop when this many points failed and none ran")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the code paths, no measurements")
    ap.add_argument("--skip-recorded", help="a family_recordings.jsonl whose measured points are not run again")
    ap.add_argument("--all-points", action="store_true",
                    help=f"every point of each model (that fits and is not QLoRA), not its first {PER_MODEL} distinct shapes")
    ap.add_argument("--max-oracle-seconds", type=float, default=MAX_ORACLE_SECONDS,
                    help=f"leave out points whose oracle took longer on the CPU (default {MAX_ORACLE_SECONDS:g})")
    ap.add_argument("--list", action="store_true", help="print the selection and exit")
    ap.add_argument("--json", action="store_true", help="with --list: one JSON item per line (what --child takes)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--snapshot", help="with --child: write the allocator's history (gzipped pickle) here")
    a = ap.parse_args()
    if a.snapshot and not a.child:
        ap.error("--snapshot records one point: use it with --child")
    if a.json and not a.list:
        ap.error("--json prints the selection: use it with --list")
    if a.child:
        print(json.dumps(child_point(json.loads(a.child), a.device, a.snapshot)))
        return 0
    records = {}
    for module in MODULES:
        fx = fixture(module)
        records[module] = list(fx.values())
    items = select(records, per_model=10**6 if a.all_points else PER_MODEL, max_seconds=a.max_oracle_seconds,
                   distinct=not a.all_points)
    if a.only:
        unknown = set(a.only.split(",")) - set(MODULES)
        if unknown:
            ap.error(f"--only: no oracle module {', '.join(sorted(unknown))} (these are: {', '.join(MODULES)})")
        items = [i for i in items if i["module"] in a.only.split(",")]
    if a.models:
        known = {r["model"] for recs in records.values() for r in recs}
        unknown = set(a.models.split(",")) - known
        if unknown:
            ap.error(f"--models: no oracle point of {', '.join(sorted(unknown))}")
        items = [i for i in items if i["model"] in a.models.split(",")]
    if a.skip_recorded:
        with open(a.skip_recorded) as f:
            done = {(d["module"], d["id"]) for d in map(json.loads, f) if measured(d)}
        items = [i for i in items if (i["module"], i["id"]) not in done]
    if a.list:
        for i in items:
            if a.json:
                print(json.dumps(i))
                continue
            print(f"{i['module']:14} {i['oracle_peak'] / GIB:7.2f} GiB {i['oracle_seconds']:6.1f}s  {i['id']}")
        print(f"{len(items)} points", file=sys.stderr)
        return 0
    import kit

    started = kit.start(ap, a, "family_recordings.jsonl")
    if started is None:
        return 2
    path, env, gpu_bytes, t_start = started
    with open(path, "w") as out:
        write = kit.writer(out, env, t_start, ("kind", "module", "model", "max_allocated", "tracked_peak",
                                               "oracle_peak", "seconds", "error"))
        run_all(items, a, write, gpu_bytes, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
