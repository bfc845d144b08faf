#!/usr/bin/env bash
# One GPU lease's checks, prepared to run as a single command (about 6 minutes of a 15-minute
# lease; the rest is the machine's start and the transfers):
#   1. every point of Llama 4's development model (16, about a minute): its image points with
#      the processor's bf16 pixels have not run on a GPU yet (the fourth lease's were made with
#      fp32 pixels, superseded);
#   2. the family points not yet measured on a GPU (validation/gpu/h100/family_recordings.jsonl),
#      until the deadline. The first Zamba's points are over families.py's cap on the oracle's
#      CPU time (a proxy for its Python op count: its sequential scan is one step per token,
#      head and layer).
# Wheels of the fixtures' transformers/peft versions in .whl/ are installed first when present.
#     bash validation/gpu/session.sh OUT_DIR [DEADLINE_SECONDS]
set -uo pipefail
out=${1:?usage: session.sh OUT_DIR [DEADLINE_SECONDS]}
deadline=${2:-300}
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)" || exit 1
export PYTHONUNBUFFERED=1
mkdir -p "$out/llama4" "$out/fam"
python3 validation/gpu/families.py --out "$out/llama4" --deadline 60 --workers 8 --only llama4 \
    --models llama4-dev-4l --all-points 2> "$out/llama4.log"
echo "llama4: exit $?, $(grep -c '"family-point"' "$out/llama4/family_recordings.jsonl") points"
python3 validation/gpu/families.py --out "$out/fam" --deadline "$deadline" --workers 10 \
    --skip-recorded validation/gpu/h100/family_recordings.jsonl 2> "$out/families.log"
echo "families: exit $?, $(grep -c '"family-point"' "$out/fam/family_recordings.jsonl") points"
