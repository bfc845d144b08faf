#!/usr/bin/env bash
# One GPU lease's checks, prepared to run as a single command (about 8 minutes of a 15-minute
# lease; the rest is the machine's start and the transfers):
#   1. the points that place the two GPU/oracle differences still open (Whisper trained without
#      checkpointing, Gated DeltaNet), run again with torch's per-phase peaks and the real
#      tensors' categories recorded;
#   2. the family added since the last lease, never run on a GPU: Llama 4's text, image and LoRA
#      points (the first Zamba's are over families.py's cap on the oracle's CPU time, a proxy for
#      its Python op count: its sequential scan is one step per token, head and layer);
#   3. the family points not yet measured on a GPU (validation/gpu/h100/family_recordings.jsonl),
#      until the deadline.
# Wheels of the fixtures' transformers/peft versions in .whl/ are installed first when present.
#     bash validation/gpu/session.sh OUT_DIR [DEADLINE_SECONDS]
set -uo pipefail
out=${1:?usage: session.sh OUT_DIR [DEADLINE_SECONDS]}
deadline=${2:-330}
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)" || exit 1
export PYTHONUNBUFFERED=1
mkdir -p "$out/diag" "$out/new" "$out/fam"
python3 validation/gpu/families.py --out "$out/diag" --deadline 60 --workers 8 --only encdec,ssm \
    --models whisper-base,whisper-small,qwen3.5-dev-4l,t5-small 2> "$out/diag.log"
echo "diagnosis: exit $?, $(grep -c '"family-point"' "$out/diag/family_recordings.jsonl") points"
python3 validation/gpu/families.py --out "$out/new" --deadline 90 --workers 8 --only llama4 \
    --models llama4-dev-4l 2> "$out/new.log"
echo "new families: exit $?, $(grep -c '"family-point"' "$out/new/family_recordings.jsonl") points"
python3 validation/gpu/families.py --out "$out/fam" --deadline "$deadline" --workers 10 \
    --skip-recorded validation/gpu/h100/family_recordings.jsonl 2> "$out/families.log"
echo "families: exit $?, $(grep -c '"family-point"' "$out/fam/family_recordings.jsonl") points"
