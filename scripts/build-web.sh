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
export CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=true CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
  CARGO_PROFILE_RELEASE_STRIP=true CARGO_PROFILE_RELEASE_PANIC=abort
cargo build --release --locked -p vram-wasm --target wasm32-unknown-unknown
target_dir="${CARGO_TARGET_DIR:-$root/target}"
cp "$target_dir/wasm32-unknown-unknown/release/vram_wasm.wasm" web/vram.wasm
echo "web/vram.wasm: $(wc -c < web/vram.wasm) bytes"
