#!/usr/bin/env bash
# The README's "estimate against the H100" figures for the model families: runs every family
# test (each holds its estimate of a point to validation/gpu/h100/family_recordings.jsonl where
# the point was recorded, and prints an `H100` line) and summarises the printed errors.
#     bash scripts/h100-family-summary.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The family tests are the ones that hold a point through support/gpu_points.rs.
tests=$(grep -l -E 'gpu_points::hold|family_table::(error_of|lora_error)' crates/vram-core/tests/*.rs | xargs -n1 basename | sed 's/\.rs$//')
for t in $tests; do
    cargo test -q -p vram-core --test all "$t::" -- --nocapture 2>/dev/null | awk -v t="$t" '{ for (i = 1; i < NF; i++) if ($i == "H100") { v = $(i + 1); sub("%", "", v); print t, v; break } }'
done | python3 -c '
import collections, statistics, sys
rows = [line.split() for line in sys.stdin]
by = collections.defaultdict(list)
for test, err in rows:
    by[test].append(abs(float(err)))
def line(name, v):
    v = sorted(v)
    print(f"{name:14} {len(v):4} points  median {statistics.median(v):.2f}%  90th pct {v[round((len(v) - 1) * 0.9)]:.2f}%  worst {v[-1]:.2f}%")
for test, v in by.items():
    line(test, v)
line("all", [x for v in by.values() for x in v])
'
