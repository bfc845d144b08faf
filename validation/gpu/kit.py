#!/usr/bin/env python3
"""GPU measurement kit: what a real CUDA GPU shows, recorded as data for vram's tests.

    python validation/gpu/kit.py --out DIR [--deadline SECONDS] [--workers N] [--only MODEL] [--quick]

Needs a CUDA GPU, torch, transformers and peft. Nothing is downloaded: models are built from the
configs in the repo with random weights, directly on the GPU (as from_pretrained places them, one
tensor per parameter in module order). Each measurement runs in a fresh process, so each starts
from an empty CUDA context. Writes DIR/recordings.jsonl (one JSON object per line) and, for a
few points, DIR/snapshots/<name>.pickle (torch.cuda.memory._dump_snapshot, replayable by
`vram explain`).

- kind "context" (run alone, three times): NVML's per-process and device-wide used memory and
  torch's allocated/reserved before CUDA init, after init (one tiny tensor), after cuBLAS (an
  fp32 and a bf16 matmul), after cuDNN (a conv) and after flash attention (SDPA forward and
  backward in bf16). This is the CUDA context vram adds above what PyTorch reserves.
- kind "point": the points of validation/alloc_traces.py (same models, jobs and names, so each
  pairs with the FakeTensorMode trace and oracle peak recorded there), run for real: torch's
  max_memory_allocated and max_memory_reserved over the two training steps (or the generation),
  per phase, the allocator's counters, and at the end NVML's per-process used memory, so
  `used - reserved` is the context of a real job. `alloc_conf` names PYTORCH_CUDA_ALLOC_CONF
  where a point was run under one.
- kind "nccl" (2+ GPUs only): per-rank NVML used before and after the first all_reduce.

Points run concurrently when the GPU has room (the per-process figures are unaffected; a point
whose allocator had to free its cache and retry, `num_alloc_retries` > 0, is marked invalid).
Every record carries the GPU name, driver, CUDA, torch and transformers versions.

`--device cpu` runs every code path on tiny shapes without a GPU (to catch API drift in
transformers or peft before a lease); its records are kind "dry-run", with no figures.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VALIDATION = os.path.dirname(HERE)
ROOT = os.path.dirname(VALIDATION)
sys.path.insert(0, VALIDATION)

GIB = 1 << 30
# Points recorded with an allocator snapshot (the pickles are committed), and whether each keeps
# the Python frames of every allocation (which `vram explain` groups by; they make a pickle large).
SNAPSHOT_POINTS = {
    "opt-125m_train_bf16-mixed_1_2048_foreach_False": True,
    "opt-125m_infer_bf16_4_1024": True,
    "pythia-160m_train_bf16-mixed_4_2048_foreach_True": False,
    "qwen2.5-0.5b_train_bf16-mixed_1_2048_foreach_False": False,
    "qwen2.5-0.5b_lora_train_bf16-mixed_1_2048_foreach_False": False,
}
# Points run a second time under expandable segments.
EXPANDABLE_POINTS = (
    "qwen2.5-0.5b_train_bf16-mixed_4_2048_foreach_False",
    "llama-3.2-1b_train_bf16-mixed_4_2048_foreach_True",
    "gemma-3-1b_train_bf16-mixed_1_2048_foreach_False",
    "pythia-160m_train_fp32_2_2048_foreach_False",
    "qwen2.5-1.5b_lora_train_bf16-mixed_4_2048_foreach_False_all-linear",
    "llama-3.2-1b_infer_bf16_4_1024",
)
EXPANDABLE = "expandable_segments:True"


def oracle_peaks():
    """name -> FakeTensorMode peak allocated, from validation/fixtures/alloc_traces.jsonl."""
    out = {}
    with open(os.path.join(VALIDATION, "fixtures", "alloc_traces.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if "name" in d:
                out[d["name"]] = d["peak_allocated"]
    return out


def grid(gpu_bytes=80 * GIB, only=None, quick=False):
    """Every point that fits the GPU, in run order (pure; unit-tested): the alloc_traces points
    whose oracle peak leaves room for the allocator's reserve, then the expandable-segments
    repeats. Largest first, so that small points fill the gaps beside them."""
    import alloc_traces

    peaks = oracle_peaks()
    base = []
    for p in alloc_traces.points():
        peak = peaks.get(p["name"])
        if peak is None or peak * 1.25 + 2 * GIB > gpu_bytes:
            continue
        if only and p["model"] not in only.split(","):
            continue
        if p["seq"] > positions(p["source"]):
            continue  # learned positions end there (GPT-2: 1024); CUDA stops with an index error
        base.append(dict(p, oracle_peak=peak, alloc_conf=None, snapshot=p["name"] in SNAPSHOT_POINTS))
    base.sort(key=lambda p: -p["oracle_peak"])
    extra = [dict(p, alloc_conf=EXPANDABLE, snapshot=False) for p in base if p["name"] in EXPANDABLE_POINTS]
    points = base + extra
    if quick:
        points = [p for p in points if p["model"] in ("gpt2", "pythia-160m")][:3]
    return points


def positions(source):
    """Tokens a model's learned position table holds (unbounded for rotary models)."""
    raw = json.load(open(os.path.join(ROOT, source)))
    if raw.get("model_type") == "gpt2":
        return raw.get("n_positions", 1024)
    return 1 << 62


def need_bytes(point):
    """GPU memory to set aside for a running point: its oracle peak, the reserve, a context."""
    return int(point["oracle_peak"] * 1.3) + GIB


def vram_flags(point):
    """The `vram estimate` flags that describe a point (pure; unit-tested)."""
    flags = ["--model", point["source"], "--mode", "train" if point["mode"] == "train" else "infer",
             "--batch-size", str(point["batch"]), "--seq-len", str(point["seq"])]
    if point.get("peft"):
        flags += ["--peft", "lora", "--lora-r", str(point["lora_r"]), "--precision", "bf16-mixed"]
        if point.get("lora_target_modules"):
            flags += ["--lora-target-modules", point["lora_target_modules"]]
    else:
        flags += ["--precision", point["precision"]]
    if point["mode"] == "train":
        flags += ["--optimizer", "adamw"]
        if point.get("impl") == "fused":
            flags += ["--optimizer-impl", "fused"]
        if point.get("checkpointing"):
            flags += ["--checkpointing", "full"]
    else:
        flags += ["--prompt-len", str(point["prompt_len"])]
    return flags


def parse_smi_apps(text):
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` -> {pid: bytes}."""
    out = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1]) * 1024 * 1024  # nvidia-smi reports MiB
    return out


def nvml():
    """(this process's used bytes, device-wide used bytes) per NVML; None where unreadable."""
    pid, dev = None, None
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("KIT_GPU", "0")))
        dev = pynvml.nvmlDeviceGetMemoryInfo(h).used
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                pid = p.usedGpuMemory
    except Exception:
        pass
    if pid is None:
        try:
            text = subprocess.run(
                ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, check=True, timeout=30).stdout
            pid = parse_smi_apps(text).get(os.getpid())
        except Exception:
            pass
    return pid, dev


def environment():
    import torch
    import transformers

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0), "gpu_total": torch.cuda.get_device_properties(0).total_memory,
            "cuda_module_loading": os.environ.get("CUDA_MODULE_LOADING", "(unset: LAZY)")}
    try:
        import peft

        info["peft_version"] = peft.__version__
    except Exception:
        info["peft_version"] = None
    try:
        import pynvml

        pynvml.nvmlInit()
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        info["driver"] = None
    return info


def settle():
    time.sleep(0.3)  # NVML's per-process accounting lags the allocation slightly


def child_context():
    rec = {"kind": "context"}

    def snap(stage):
        settle()
        pid, dev = nvml()
        rec[stage] = {"nvml_process": pid, "nvml_device": dev}
        if stage != "before_init":
            rec[stage]["torch_allocated"] = torch.cuda.memory_allocated()
            rec[stage]["torch_reserved"] = torch.cuda.memory_reserved()

    snap("before_init")
    import torch
    import torch.nn.functional as F

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    snap("after_init")
    a = torch.randn(1024, 1024, device="cuda")
    (a @ a).sum().item()
    snap("after_cublas_fp32")
    b = a.bfloat16()
    (b @ b).float().sum().item()
    snap("after_cublas_bf16")
    x = torch.randn(1, 3, 32, 32, device="cuda")
    F.conv2d(x, torch.randn(8, 3, 3, 3, device="cuda")).sum().item()
    snap("after_cudnn")
    q = torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    torch.cuda.synchronize()
    snap("after_flash")
    return rec


def build(point, device):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.load(open(os.path.join(ROOT, point["source"])))
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    dtype = {"fp32": torch.float32, "bf16-mixed": torch.float32, "bf16": torch.bfloat16}[point["precision"]]
    if point.get("peft"):
        dtype = torch.bfloat16  # TRL/peft: a bf16 base under bf16 autocast (as validation/lora.py)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    if point.get("peft"):
        from peft import LoraConfig, get_peft_model

        lcfg = LoraConfig(r=point["lora_r"], lora_alpha=2 * point["lora_r"], lora_dropout=0.0,
                          target_modules=point.get("lora_target_modules"), task_type="CAUSAL_LM")
        model = get_peft_model(model, lcfg)
    if point.get("checkpointing"):
        enable_checkpointing(model)
    return cfg, model


def enable_checkpointing(model):
    """HF activation checkpointing with non-reentrant torch.utils.checkpoint, as transformers
    5.23's activation_checkpointing_enable() (which validation/harness.py ran) defaults to; older
    transformers spell it gradient_checkpointing_enable and may default to reentrant."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


class Stats:
    """torch.cuda's allocator statistics, or zeros on the CPU (--dry-run)."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.phases = {}

    def reset(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def phase_end(self, name):
        if not self.cuda:
            self.phases[name] = {"max_allocated": 0, "max_reserved": 0}
            return
        import torch

        torch.cuda.synchronize()
        self.phases[name] = {"max_allocated": torch.cuda.max_memory_allocated(),
                             "max_reserved": torch.cuda.max_memory_reserved(),
                             "allocated": torch.cuda.memory_allocated()}
        torch.cuda.reset_peak_memory_stats()


def child_point(point, snapshot_dir, device):
    import contextlib

    import torch

    cuda = device == "cuda"
    stats = Stats(cuda)
    t0 = time.time()
    if cuda and point.get("snapshot") and snapshot_dir:
        frames = SNAPSHOT_POINTS.get(point["name"], False)
        torch.cuda.memory._record_memory_history(max_entries=400000, context="all" if frames else None,
                                                 stacks="python")
    torch.manual_seed(0)
    cfg, model = build(point, device)
    stats.phase_end("build")
    ids = torch.randint(0, cfg.vocab_size, (point["batch"], point.get("prompt_len") or point["seq"]), device=device)
    if point["mode"] == "train":
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        impl = point["impl"]
        lr = 2e-4 if point.get("peft") else 1e-5
        opt = torch.optim.AdamW(params, lr=lr, foreach=impl == "foreach", fused=impl == "fused" or None)
        amp = point["precision"].endswith("-mixed")
        for step in range(2):
            # HF collator: input_ids, labels, attention_mask; an all-ones mask is not passed
            # (as validation/harness.py: an unpadded CUDA run skips it)
            inputs = {"input_ids": ids.clone(), "labels": ids.clone()}
            ctx = torch.autocast(device, dtype=torch.bfloat16) if amp else contextlib.nullcontext()
            with ctx:
                loss = model(**inputs).loss
            stats.phase_end(f"forward{step}")
            loss.backward()
            del loss
            stats.phase_end(f"backward{step}")
            opt.step()
            opt.zero_grad(set_to_none=True)
            del inputs
            stats.phase_end(f"optimizer{step}")
    else:
        # As validation/harness.py infer(): prefill with logits_to_keep=1, greedy decode to seq.
        model.eval()
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            tokens = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(-1, keepdim=True)
            del out
            stats.phase_end("prefill")
            for _ in range(point["seq"] - point["prompt_len"]):
                ids = torch.cat([ids, tokens], dim=-1)
                out = model(input_ids=tokens, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                tokens = out.logits[:, -1, :].to(copy=True, dtype=torch.float32).argmax(-1, keepdim=True)
                del out
            stats.phase_end("decode")
    rec = {k: v for k, v in point.items() if k not in ("snapshot",)}
    # A CPU dry run measures nothing: its records are never "point"s.
    rec.update(kind="point" if cuda else "dry-run", vram_flags=vram_flags(point), phases=stats.phases,
               seconds=round(time.time() - t0, 2))
    run_phases = [v for k, v in stats.phases.items() if k != "build"]
    rec["max_allocated"] = max(v["max_allocated"] for v in run_phases)
    rec["max_reserved"] = max(v["max_reserved"] for v in run_phases)
    if cuda:
        torch.cuda.synchronize()
        st = torch.cuda.memory_stats()
        rec["allocator"] = {k: v for k, v in st.items() if ".all." in k and (k.endswith(".peak") or k.endswith(".current"))
                            or k in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")}
        rec["reserved_end"] = torch.cuda.memory_reserved()
        settle()
        rec["nvml_process"], rec["nvml_device"] = nvml()
        rec["valid"] = st.get("num_alloc_retries", 0) == 0 and st.get("num_ooms", 0) == 0
        if point.get("snapshot") and snapshot_dir:
            name = point["name"] + ".pickle"
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
    before = nvml()[0]
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    settle()
    rec = {"kind": "nccl", "rank": rank, "world": world, "before": before, "after": nvml()[0],
           "torch_reserved": torch.cuda.memory_reserved()}
    dist.destroy_process_group()
    return rec


def child_args(point, args):
    out = [sys.executable, os.path.abspath(__file__), "--child", "point:" + json.dumps(point), "--device", args.device]
    if args.snapshots:
        out += ["--snapshots", args.snapshots]
    return out


def finish(proc, what):
    stdout, stderr = proc.communicate()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"kind": "error", "what": what, "rc": proc.returncode, "stderr": stderr[-3000:]}
    return json.loads(lines[-1])


def run_points(points, args, write, gpu_bytes, t_start):
    """Run points concurrently while their set-aside memory fits the GPU; stop starting new
    ones past the deadline and stop running ones at the hard deadline."""
    pending = list(points)
    running = []  # (proc, point, started)
    budget = int(gpu_bytes * 0.92)
    while pending or running:
        now = time.time() - t_start
        for item in list(running):
            proc, point, started = item
            if proc.poll() is not None:
                running.remove(item)
                rec = finish(proc, point["name"])
                rec.setdefault("name", point["name"])
                rec.setdefault("alloc_conf", point["alloc_conf"])
                write(rec)
            elif now > args.deadline + 60:
                proc.kill()
        in_use = sum(need_bytes(p) for _, p, _ in running)
        if pending and now < args.deadline and len(running) < args.workers:
            for i, point in enumerate(pending):
                if in_use + need_bytes(point) <= budget or not running:
                    env = dict(os.environ)
                    if point["alloc_conf"]:
                        env["PYTORCH_CUDA_ALLOC_CONF"] = point["alloc_conf"]
                    else:
                        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
                    proc = subprocess.Popen(child_args(point, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True, env=env)
                    running.append((proc, point, time.time()))
                    del pending[i]
                    break
        if pending and now >= args.deadline and not running:
            for point in pending:
                write({"kind": "skipped", "name": point["name"], "alloc_conf": point["alloc_conf"],
                       "why": "deadline"})
            pending = []
        time.sleep(0.2)


def start(ap, a, filename):
    """The checks and set-up a measuring run begins with (this kit's and families.py's): --out
    given, its `filename` not there yet (nothing recorded is overwritten), a CUDA GPU unless a CPU
    dry run. Returns (path, environment, GPU bytes, start time), or None when there is no GPU."""
    if not a.out:
        ap.error("--out is required")
    path = os.path.join(a.out, filename)
    if os.path.exists(path):
        ap.error(f"{path} exists; choose another directory")
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure", file=sys.stderr)
        return None
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    env = environment() if a.device == "cuda" else {"device": a.device}
    return path, env, env.get("gpu_total", 80 * GIB), t_start


def writer(out, env, t_start, keys):
    """A record writer: each record gets the environment, goes to `out` as one JSON line at once,
    and a progress line with `keys` goes to stderr (with the tail of an error's trace)."""

    def write(rec):
        rec.update(env)
        out.write(json.dumps(rec) + "\n")
        out.flush()
        short = {k: rec.get(k) for k in keys}
        print(f"[{time.time() - t_start:6.1f}s] " + json.dumps({k: v for k, v in short.items() if v is not None}),
              file=sys.stderr, flush=True)
        if rec.get("kind") == "error":
            print((rec.get("traceback") or rec.get("stderr") or "")[-1500:], file=sys.stderr, flush=True)

    return write


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory to write (refuses an existing recordings.jsonl)")
    ap.add_argument("--quick", action="store_true", help="three small points only")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--workers", type=int, default=4, help="points run at once (default 4)")
    ap.add_argument("--deadline", type=float, default=3600, help="seconds after which no point is started")
    ap.add_argument("--skip-recorded", help="a recordings.jsonl whose points are not run again")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the code paths, no measurements")
    ap.add_argument("--snapshots", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, _, arg = a.child.partition(":")
        if kind == "context":
            rec = child_context()
        elif kind == "point":
            rec = child_point(json.loads(arg), a.snapshots, a.device)
        else:
            rank, world = map(int, arg.split("/"))
            rec = child_nccl(rank, world)
        print(json.dumps(rec))
        return 0
    started = start(ap, a, "recordings.jsonl")
    if started is None:
        return 2
    path, env, gpu_bytes, t_start = started
    import torch

    a.snapshots = os.path.join(a.out, "snapshots")
    os.makedirs(a.snapshots, exist_ok=True)
    with open(path, "w") as out:
        write = writer(out, env, t_start, ("kind", "name", "alloc_conf", "max_allocated", "max_reserved", "oracle_peak",
                                           "nvml_process", "reserved_end", "seconds", "rc"))

        if a.device == "cuda" and not a.skip_recorded:
            for _ in range(3):
                p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", "context"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                write(finish(p, "context"))
        points = grid(gpu_bytes, a.only, a.quick)
        if a.skip_recorded:
            done = set()
            for line in open(a.skip_recorded):
                d = json.loads(line)
                if d.get("kind") == "point":
                    done.add((d["name"], d.get("alloc_conf")))
            points = [p for p in points if (p["name"], p["alloc_conf"]) not in done]
        if a.device != "cuda":  # a dry run of the code paths on the CPU, tiny shapes
            points = [dict(p, batch=1, seq=64, prompt_len=48 if p["mode"] != "train" else None) for p in points]
        run_points(points, a, write, gpu_bytes, t_start)
        world = torch.cuda.device_count() if a.device == "cuda" else 0
        if world >= 2:
            procs = [subprocess.Popen([sys.executable, __file__, "--child", f"nccl:{r}/{world}"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
            for p in procs:
                write(finish(p, "nccl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
