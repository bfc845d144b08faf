#!/usr/bin/env bash
# The Python package end to end, from a clean checkout: build the abi3 wheel with maturin,
# install it into a fresh virtual environment, and run python/tests against it (the API's
# JSON is compared with the `vram` binary built from the same checkout).
#
#   scripts/python-tests.sh
#
# Environment: PYTHON (interpreter for the venvs, default python3), VRAM_PY_WORK (scratch
# directory, default a new /tmp/vram-py.XXXXXX), VRAM_TORCH_PYTHON (an interpreter that has
# torch + transformers: the Trainer-callback tests run with it; without it they skip, loudly),
# VRAM_WHEEL_PROFILE (cargo profile of the wheel: release, the default, or dev),
# CARGO_TARGET_DIR as for cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
py=${PYTHON:-python3}
work=${VRAM_PY_WORK:-$(mktemp -d /tmp/vram-py.XXXXXX)}
start=$(date +%s)
step() { echo "python-tests: [$(($(date +%s) - start))s] $*"; }

step "build tools into $work/build (maturin, pytest)"
"$py" -m venv "$work/build"
if ! "$work/build/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2"; then
  # Without PyPI the wheel cannot be built here: say so loudly rather than fail on the network.
  echo "python-tests: SKIP: pip could not install maturin (no PyPI access); the Python package was NOT tested" >&2
  exit 0
fi

step "the vram binary the tests compare with (cargo build -p vram)"
cargo build --quiet -p vram --locked
export VRAM_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/vram"

# VRAM_WHEEL_PROFILE=dev builds the wheel unoptimised (CI: the same code, a fraction of the compile
# time, and the dev artifacts of `cargo test` are reused); the default is the release wheel.
profile=${VRAM_WHEEL_PROFILE:-release}
step "the wheel (maturin build --profile $profile)"
rm -rf "$work/wheels"
"$work/build/bin/maturin" build --quiet --profile "$profile" --locked -o "$work/wheels"
wheel=$(ls "$work"/wheels/vram-*-abi3-*.whl)
echo "  $(basename "$wheel")"

step "a fresh venv with the wheel and pytest"
rm -rf "$work/test"
"$py" -m venv "$work/test"
"$work/test/bin/pip" install --quiet --disable-pip-version-check "$wheel" pytest

step "python/tests (installed wheel; run from $work so the source tree is not imported)"
cd "$work"
"$work/test/bin/python" -m pytest -q -p no:cacheprovider "$repo/python/tests"

# The torch-dependent tests (Trainer and Lightning callbacks on a tiny model on the CPU,
# vram.measure) need torch: with no VRAM_TORCH_PYTHON given, install a pinned torch +
# transformers + accelerate + peft + lightning into a throwaway venv when PyPI and ~12 GB of disk are there
# (VRAM_TORCH_TESTS=0 skips it); otherwise say loudly that they were skipped.
if [ -z "${VRAM_TORCH_PYTHON:-}" ] && [ "${VRAM_TORCH_TESTS:-auto}" != "0" ]; then
  free_kb=$(df -Pk "$work" | awk 'NR==2 {print $4}')
  if [ "${free_kb:-0}" -gt $((12 * 1024 * 1024)) ]; then
    step "a throwaway venv with torch, transformers and lightning (pinned) for the torch tests"
    if "$py" -m venv "$work/torch" && "$work/torch/bin/pip" install --quiet --disable-pip-version-check \
        torch==2.15.0 transformers==5.23.0 accelerate==1.15.0 peft==0.21.2 lightning==2.6.6; then
      VRAM_TORCH_PYTHON="$work/torch/bin/python"
      torch_venv="$work/torch"
    else
      echo "python-tests: SKIP: could not install torch from PyPI: the torch tests were NOT run" >&2
    fi
  else
    echo "python-tests: SKIP: less than 12 GB free for a torch venv: the torch tests were NOT run" >&2
  fi
fi

if [ -n "${VRAM_TORCH_PYTHON:-}" ]; then
  step "Trainer/Lightning callbacks and vram.measure with $VRAM_TORCH_PYTHON (torch), the wheel on PYTHONPATH"
  site=$("$work/test/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  PYTHONPATH="$site" "$VRAM_TORCH_PYTHON" -m unittest discover -s "$repo/python/tests" -p 'test_[im]*.py' -v
else
  echo "python-tests: note: no torch interpreter: the callback and measure tests above were skipped"
fi
if [ -n "${torch_venv:-}" ]; then rm -rf "$torch_venv"; fi
step "done"
