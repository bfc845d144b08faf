#!/usr/bin/env python3
"""GPU measurement kit: what a real CUDA GPU shows, recorded as data for vram's tests.

    python validation/gpu/kit.py --out validation/gpu/recordings.jsonl [--quick] [--snapshots DIR]

Needs a CUDA GPU, torch and transformers (validation/requirements.txt). Nothing is downloaded:
models are built from the configs in validation/configs/ with random weights (as
validation/harness.py does, but on the real device). Every measurement runs in a fresh
subprocess so that each starts from an empty CUDA context. One JSON object per line:

- kind "context": NVML per-process used memory before CUDA init, after init (one tiny tensor),
  after cuBLAS is loaded (a matmul), after cuDNN is loaded (a conv) — the CUDA context that
  vram assumes (512 MiB, cuBLAS 64 MiB) measured on this driver and GPU.
- kind "point": one training step grid point (two steps, the second measured as the steady
  state) or one inference point: torch max_memory_allocated / max_memory_reserved, NVML
  per-process used at the end, and the job as vram flags, so crates/vram-core/tests hold
  `estimate` to it. With --snapshots, the allocator snapshot of each point is dumped too
  (replayable by `vram explain` and the allocator test).
- kind "nccl" (2+ GPUs): per-rank NVML used before and after the first NCCL all_reduce.

Each record carries the GPU name, driver, CUDA and torch versions.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "configs")

# Small models that fit any modern GPU; (config file, batch sizes, sequence lengths).
GRID = [
    ("pythia-160m.json", [1, 4], [512, 1024]),
    ("opt-125m.json", [1, 4], [512, 1024]),
    ("gemma-3-1b.json", [1, 2], [512, 1024]),
]
QUICK_GRID = [("pythia-160m.json", [2], [512])]
PRECISIONS = ["bf16-mixed", "fp32"]


def grid(quick=False):
    """Every measurement point, in a stable order (pure; unit-tested)."""
    points = []
    for cfg, batches, seqs in QUICK_GRID if quick else GRID:
        for b in batches:
            for s in seqs:
                for p in PRECISIONS[:1] if quick else PRECISIONS:
                    points.append({"config": cfg, "mode": "train", "batch": b, "seq": s, "precision": p})
                points.append({"config": cfg, "mode": "infer", "batch": b, "seq": s, "precision": "bf16"})
    return points


def vram_flags(point):
    """The `vram estimate` flags that describe a point (pure; unit-tested)."""
    return [
        "--model", os.path.join("validation", "configs", point["config"]),
        "--mode", point["mode"], "--batch-size", str(point["batch"]),
        "--seq-len", str(point["seq"]), "--precision", point["precision"],
    ]


def parse_smi_apps(text):
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` -> {pid: bytes}."""
    out = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1]) * 1024 * 1024  # nvidia-smi reports MiB
    return out


def nvml_used(pid=None):
    """Bytes this process holds on GPU 0 per NVML (None when unreadable, never 0 by default)."""
    pid = pid or os.getpid()
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("KIT_GPU", "0")))
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == pid:
                return p.usedGpuMemory
        return None
    except Exception:
        pass
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=30).stdout
        return parse_smi_apps(text).get(pid)
    except Exception:
        return None


def environment():
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0)}
    try:
        import pynvml

        pynvml.nvmlInit()
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        info["driver"] = None
    return info


def settle():
    time.sleep(0.5)  # NVML's per-process accounting lags the allocation slightly


def child_context():
    rec = {"kind": "context", "before_init": nvml_used()}
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    settle()
    rec["after_init"] = nvml_used()
    a = torch.randn(256, 256, device="cuda")
    (a @ a).sum().item()
    settle()
    rec["after_cublas"] = nvml_used()
    x = torch.randn(1, 3, 32, 32, device="cuda")
    torch.nn.functional.conv2d(x, torch.randn(8, 3, 3, 3, device="cuda")).sum().item()
    settle()
    rec["after_cudnn"] = nvml_used()
    rec["torch_reserved"] = torch.cuda.memory_reserved()
    return rec


def child_point(point, snapshot_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.load(open(os.path.join(CONFIGS, point["config"])))
    model_type = raw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **raw)
    dtype = {"fp32": torch.float32, "bf16-mixed": torch.float32, "bf16": torch.bfloat16}[point["precision"]]
    if snapshot_dir:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", torch_dtype=dtype).cuda()
    ids = torch.randint(0, cfg.vocab_size, (point["batch"], point["seq"]), device="cuda")
    if point["mode"] == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for step in range(2):
            if step == 1:
                torch.cuda.reset_peak_memory_stats()
            amp = point["precision"].endswith("-mixed")
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        model.eval()
        with torch.no_grad():
            prompt = max(1, point["seq"] // 2)
            model.generate(ids[:, :prompt], max_new_tokens=point["seq"] - prompt, min_new_tokens=point["seq"] - prompt, do_sample=False)
    torch.cuda.synchronize()
    settle()
    rec = dict(point, kind="point", vram_flags=vram_flags(point),
               max_allocated=torch.cuda.max_memory_allocated(), max_reserved=torch.cuda.max_memory_reserved(),
               nvml_used=nvml_used())
    if snapshot_dir:
        name = "{config}-{mode}-b{batch}-s{seq}-{precision}.pickle".format(**point).replace(".json", "")
        torch.cuda.memory._dump_snapshot(os.path.join(snapshot_dir, name))
        rec["snapshot"] = name
    return rec


def child_nccl(rank, world):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    os.environ["KIT_GPU"] = str(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.zeros(1, device="cuda")
    settle()
    before = nvml_used()
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    settle()
    rec = {"kind": "nccl", "rank": rank, "world": world, "before": before, "after": nvml_used(),
           "torch_reserved": torch.cuda.memory_reserved()}
    dist.destroy_process_group()
    return rec


def spawn(args, timeout=1800):
    """Run this file in a fresh process for one measurement; returns its JSON record."""
    p = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"kind": "error", "args": args, "rc": p.returncode, "stderr": p.stderr[-2000:]}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=False, help="JSONL file to write (refuses to overwrite)")
    ap.add_argument("--quick", action="store_true", help="one point only")
    ap.add_argument("--snapshots", help="directory for allocator snapshots of each point")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, _, arg = a.child.partition(":")
        if kind == "context":
            rec = child_context()
        elif kind == "point":
            rec = child_point(json.loads(arg), a.snapshots)
        else:
            rank, world = map(int, arg.split("/"))
            rec = child_nccl(rank, world)
        print(json.dumps(rec))
        return 0
    if not a.out:
        ap.error("--out is required")
    if os.path.exists(a.out):
        ap.error(f"{a.out} exists; choose another name")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure", file=sys.stderr)
        return 2
    env = environment()
    if a.snapshots:
        os.makedirs(a.snapshots, exist_ok=True)
    snap = ["--snapshots", a.snapshots] if a.snapshots else []
    with open(a.out, "w") as out:
        def write(rec):
            rec.update(env)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(json.dumps(rec), file=sys.stderr)

        for _ in range(3):
            write(spawn(["--child", "context"]))
        for point in grid(a.quick):
            write(spawn(["--child", "point:" + json.dumps(point)] + snap))
        world = torch.cuda.device_count()
        if world >= 2:
            procs = [subprocess.Popen([sys.executable, __file__, "--child", f"nccl:{r}/{world}"], stdout=subprocess.PIPE, text=True) for r in range(world)]
            for p in procs:
                stdout, _ = p.communicate(timeout=600)
                lines = [l for l in stdout.splitlines() if l.startswith("{")]
                write(json.loads(lines[-1]) if lines else {"kind": "error", "what": "nccl", "rc": p.returncode})
    return 0


if __name__ == "__main__":
    sys.exit(main())
