#!/usr/bin/env bash
# One GPU lease's checks, prepared to run as a single command (about 7 minutes of a 15-minute
# lease; the rest is the machine's start and the transfers):
#   1. every point of Llama 4's development model (16, about a minute): its image points with
#      the processor's bf16 pixels have not run on a GPU yet (an earlier lease's were made with
#      fp32 pixels, superseded);
#   2. every point of the first Zamba that fits the card (zamba-dev-8l, Zamba-7B-v1's prefills),
#      never run on a GPU: their oracle's CPU time is over families.py's default cap (its
#      sequential scan is one step per token, head and layer), so the cap is lifted here;
#   3. the allocator's history (Python frames) of the two Gated DeltaNet development points whose
#      real tensors on the GPU held 4 MiB more than the oracle (README: not yet explained);
#   4. the family points not yet measured on a GPU (validation/gpu/h100/family_recordings.jsonl),
#      until the deadline.
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
fam=validation/gpu/families.py
mkdir -p "$out/llama4" "$out/zamba" "$out/delta" "$out/fam"
python3 $fam --out "$out/llama4" --deadline 60 --workers 8 --only llama4 \
    --models llama4-dev-4l --all-points 2> "$out/llama4.log"
echo "llama4: exit $?, $(grep -c '"family-point"' "$out/llama4/family_recordings.jsonl") points"
python3 $fam --out "$out/zamba" --deadline 45 --workers 8 --only ssm --models zamba-dev-8l,zamba-7b-v1 \
    --all-points --max-oracle-seconds 100000 2> "$out/zamba.log"
echo "zamba: exit $?, $(grep -c '"family-point"' "$out/zamba/family_recordings.jsonl") points"
for m in qwen3.5-dev-4l qwen3-next-dev-4l; do
    item=$(python3 $fam --list --json --all-points --only ssm --models $m 2>/dev/null \
        | grep '"attention=sdpa|batch=4|checkpointing=False|impl=foreach|mode=train|model='$m'|optimizer=adamw|precision=bf16-mixed|seq=1024"')
    timeout 120 python3 $fam --child "$item" --snapshot "$out/delta/$m-snapshot.pickle.gz" \
        > "$out/delta/$m.json" 2> "$out/delta/$m.log"
    echo "delta $m: exit $?, $(wc -c < "$out/delta/$m.json") bytes"
done
python3 $fam --out "$out/fam" --deadline "$deadline" --workers 10 \
    --skip-recorded validation/gpu/h100/family_recordings.jsonl 2> "$out/families.log"
echo "families: exit $?, $(grep -c '"family-point"' "$out/fam/family_recordings.jsonl") points"
