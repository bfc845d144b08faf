#!/usr/bin/env bash
# Cost of `vram run`'s sampler at 10 Hz: CPU share of one core and peak RSS of the vram process.
# Two runs around an idle child (`sleep 1` and `sleep N`) separate vram's one-off start-up cost
# from the steady sampling cost. Targets (issue 5): < 0.5% of one core, < 15 MB RSS. On a machine
# without a GPU only /proc is sampled (NVML calls are not included).
#   bash benches/sampler.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
cargo build -q --release -p vram
bin="${CARGO_TARGET_DIR:-target}/release/vram"
measure() {
  python3 - "$1" "$bin" <<'PY'
import resource, subprocess, sys, time
t = time.time()
subprocess.run([sys.argv[2], "run", "--interval", "100ms", "--", "sleep", sys.argv[1]], check=True, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(time.time() - t, r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)
PY
}
read -r w1 c1 m1 < <(measure 1)
read -r wn cn mn < <(measure "$secs")
python3 - "$w1" "$c1" "$wn" "$cn" "$mn" <<'PY'
import sys
w1, c1, wn, cn, rss = map(float, sys.argv[1:])
steady = (cn - c1) / (wn - w1)
print(f"start-up {c1*1000:.0f} ms CPU once; sampling at 10 Hz: {100*steady:.3f}% of one core; peak RSS {rss:.1f} MiB")
PY
