#!/usr/bin/env bash
# Measures the performance figures the README states, on this machine, and prints them as
# README-ready lines naming the machine (CPU model from /proc/cpuinfo, core count):
#   - the sampler's cost: `benches/sampler.sh` (vram run at 10 Hz around an idle child);
#   - the planner: `cargo bench -p vram-core --bench plan` (criterion, short measurement).
# Other jobs on the machine raise both (the load averages printed say how busy it was); run it
# on an idle machine and quote its output whole.
#   bash scripts/figures.sh [sampler-seconds (default 20)] [criterion measurement seconds (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
measure="${2:-3}"
cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
cores=$(grep -c '^processor' /proc/cpuinfo || true)
machine="${cpu:-unknown CPU}, ${cores:-?} cores"
load=$(cut -d' ' -f1-3 /proc/loadavg)

sampler=$(bash benches/sampler.sh "$secs" | tail -n 1)

bench_log=$(mktemp)
trap 'rm -f "$bench_log"' EXIT
cargo bench -q -p vram-core --bench plan -- --warm-up-time 1 --measurement-time "$measure" --noplot \
  '405b-1024gpu-default-batch' >"$bench_log" 2>&1 || { cat "$bench_log" >&2; exit 1; }
planner=$(python3 - "$bench_log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def middle(name, key):
    # criterion prints `name  time: [low mid high]` (the name may stand on its own line)
    m = re.search(re.escape(name) + r"\s+(?:time:.*\n\s*)?" + key + r":\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", text)
    if not m:
        sys.exit(f"figures.sh: no `{key}` for {name} in the criterion output:\n{text}")
    return f"{m.group(1)} {m.group(2)}"
search = middle("plan/405b-1024gpu-default-batch/whole-search", "time")
rate = middle("plan/405b-1024gpu-default-batch/evaluate", "thrpt")
value, unit = rate.split()
scale = {"elem/s": 1e-6, "Kelem/s": 1e-3, "Melem/s": 1.0, "Gelem/s": 1e3}[unit]
print(f"the full search for Llama-3.1-405B on 1,024 H100s takes {search}; its evaluation loop runs at {float(value) * scale:.1f} million configurations per second")
PY
)

echo "machine: $machine (load average before the runs: $load; after: $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "The sampler is cheap (\`bash benches/sampler.sh $secs\`, on $machine, without a GPU, so NVML calls are not included): $sampler."
echo
echo "Speed (\`cargo bench -p vram-core --bench plan\`, one core of $machine): $planner."
