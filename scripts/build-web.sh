#!/usr/bin/env bash
# Build the page's WebAssembly module: vram-core behind vram-wasm's JSON C ABI, for
# wasm32-unknown-unknown (no wasm-bindgen), copied to web/vram.wasm (not committed).
# Size settings live here, not in the workspace profile: opt-level s, fat LTO, one codegen
# unit, symbols stripped.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target list --installed | grep -qx wasm32-unknown-unknown || {
  echo "error: cannot install the wasm32-unknown-unknown target (rustup target add wasm32-unknown-unknown)" >&2
  exit 1
}
target_dir="${CARGO_TARGET_DIR:-$root/target}"
# Clippy runs on the host build (.ci/run sets it as the workspace's rustc wrapper); the wasm32
# build is compiled by plain rustc, as `cargo clippy` never looked at that target.
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
# VRAM_WEB_PROFILE=dev: an unoptimised .wasm of the same code (CI's browser test: minutes less
# to compile; larger and slower, never shipped). The default is the small release build.
if [[ ${VRAM_WEB_PROFILE:-release} == dev ]]; then
  cargo build --locked -p vram-wasm --target wasm32-unknown-unknown
  cp "$target_dir/wasm32-unknown-unknown/debug/vram_wasm.wasm" web/vram.wasm
else
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
    CARGO_PROFILE_RELEASE_STRIP=true CARGO_PROFILE_RELEASE_PANIC=abort
  cargo build --release --locked -p vram-wasm --target wasm32-unknown-unknown
  cp "$target_dir/wasm32-unknown-unknown/release/vram_wasm.wasm" web/vram.wasm
fi
echo "web/vram.wasm: $(wc -c < web/vram.wasm) bytes"
