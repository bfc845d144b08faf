#!/usr/bin/env bash
# End-to-end test of the browser page: build web/vram.wasm, serve web/ with `vram web`, load
# the page in headless Chromium and require that what it shows equals the CLI:
#   - total and peak allocated bytes of an estimate (`vram estimate --json`);
#   - the largest batch of the fit (`vram fit --json`);
#   - a clear error on the page for a bad config.json, an unknown preset and a bad number;
# and, without a browser, that the wasm crate's JSON equals the CLI's --json objects.
# Without Chromium it tries `apt-get install -y chromium`; if that is impossible the browser part
# prints a loud SKIP line and the script exits 0 after the rest.
#   bash scripts/web-test.sh            (VRAM_WEB_TIMING=1 also measures the real time to first answer)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
target_dir="${CARGO_TARGET_DIR:-$root/target}"
fail() { echo "web-test: FAIL: $*" >&2; exit 1; }

bash scripts/build-web.sh
cargo build --locked -q -p vram -p vram-wasm --examples --bins
vram="$target_dir/debug/vram"
call="$target_dir/debug/examples/call"

job=(--model qwen2.5-1.5b --seq-len 4096 --batch-size 3 --precision fp16-mixed --gpu h20)
query='model=qwen2.5-1.5b&gpu=h20&seq_len=4096&batch_size=3&precision=fp16-mixed'

# 1. The wasm crate's answers are the CLI's JSON (natively: the same code the .wasm runs). Only
#    the fields the page adds for its own display may differ.
same_json() { # name, cli command…, -- , request
  local name=$1; shift
  local cli=() ; while [[ $1 != -- ]]; do cli+=("$1"); shift; done; shift
  python3 - "$name" <(env "${cli[@]}") <("$call" "$1") <<'PY'
import json, sys
name, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
page_only = {("verdict_text",), ("gpu", "verdict_text")}
def strip(v, path=()):
    if isinstance(v, dict):
        return {k: strip(x, path + (k,)) for k, x in v.items() if path + (k,) not in page_only}
    return v
if strip(a) != strip(b):
    for k in sorted(set(a) | set(b)):
        if strip(a).get(k) != strip(b).get(k):
            print(f"  {k}: cli {json.dumps(a.get(k))[:300]}\n  {k}: wasm {json.dumps(b.get(k))[:300]}", file=sys.stderr)
    sys.exit(f"web-test: FAIL: {name}: the wasm JSON differs from the CLI's")
print(f"web-test: {name}: wasm JSON = CLI JSON")
PY
}
same_json estimate "$vram" estimate "${job[@]}" --json -- \
  '{"op":"estimate","model":"qwen2.5-1.5b","seq_len":"4096","batch_size":"3","precision":"fp16-mixed","gpu":"h20"}'
same_json fit "$vram" fit --model qwen2.5-1.5b --seq-len 4096 --precision fp16-mixed --gpu h20 --target-utilization 0.9 --json -- \
  '{"op":"fit","model":"qwen2.5-1.5b","seq_len":"4096","precision":"fp16-mixed","gpu":"h20","target_utilization":"0.9"}'
same_json "estimate (QLoRA, infer-free)" "$vram" estimate --model llama-3.1-8b --peft lora --lora-r 16 --load-in-4bit --gpu rtx-4090 --json -- \
  '{"op":"estimate","model":"llama-3.1-8b","peft":"lora","lora_r":"16","load_in_4bit":"true","gpu":"rtx-4090"}'
same_json "estimate (inference)" "$vram" estimate --model llama-3.1-8b --mode infer --seq-len 8192 --batch-size 4 --json -- \
  '{"op":"estimate","model":"llama-3.1-8b","mode":"infer","seq_len":"8192","batch_size":"4"}'
same_json serve "$vram" serve --model llama-3.1-8b --gpu h100 --max-model-len 8192 --json -- \
  '{"op":"serve","model":"llama-3.1-8b","gpu":"h100","max_model_len":"8192"}'
same_json "serve (speculative decoding)" "$vram" serve --model llama-3.1-70b --gpu h100 --tensor-parallel-size 4 --max-model-len 8192 \
  --speculative-config '{"model":"llama-3.2-1b","num_speculative_tokens":5}' --json -- \
  '{"op":"serve","model":"llama-3.1-70b","gpu":"h100","tensor_parallel_size":"4","max_model_len":"8192","speculative_config":"{\"model\":\"llama-3.2-1b\",\"num_speculative_tokens\":5}"}'
same_json presets "$vram" models --json -- '{"op":"presets"}'
same_json gpus "$vram" gpus --json -- '{"op":"gpus"}'

# 2. The page in a real browser.
browser=""
for b in chromium chromium-browser google-chrome; do command -v "$b" >/dev/null && { browser=$(command -v "$b"); break; }; done
if [[ -z $browser ]] && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "web-test: no Chromium: installing it with apt-get"
  { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; } >/dev/null 2>&1 || true
  command -v chromium >/dev/null && browser=$(command -v chromium)
fi
if [[ -z $browser ]]; then
  echo "web-test: ========================================================================"
  echo "web-test: SKIP: no Chromium and it cannot be installed here (apt-get install -y chromium);"
  echo "web-test: SKIP: the page was NOT tested in a browser (the wasm JSON checks above passed)"
  echo "web-test: ========================================================================"
  exit 0
fi

work=$(mktemp -d)
server_pid=""
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
: >"$work/server.log"
"$vram" web --port 0 --dir web >"$work/server.log" 2>&1 &
server_pid=$!
url=""
for _ in $(seq 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*/' "$work/server.log" || true)
  [[ -n $url ]] && break
  kill -0 "$server_pid" 2>/dev/null || fail "vram web exited: $(cat "$work/server.log")"
  sleep 0.1
done
[[ -n $url ]] || fail "vram web printed no URL: $(cat "$work/server.log")"
echo "web-test: $($browser --version 2>/dev/null) against $url"

page() { # URL suffix → the DOM once the page is done (body data-ready), tried up to 5 times
  # (a loaded CI machine has once left all of three tries without a page: CI run 103)
  local dom
  for _ in 1 2 3 4 5; do
    # A fresh profile each time: a profile still held by a closing browser would hand the URL
    # to that process and print nothing.
    dom=$("$browser" --headless=new --disable-gpu --no-sandbox --user-data-dir="$(mktemp -d -p "$work")" \
      --virtual-time-budget=30000 --dump-dom "$url$1" 2>/dev/null || true)
    [[ $dom == *'data-ready="'* ]] && break
  done
  printf '%s\n' "$dom"
}
attr() { # DOM, element id, attribute → value
  python3 -c 'import re, sys; m = re.search(r"<[^>]*\bid=\"%s\"[^>]*\b%s=\"([^\"]*)\"" % (sys.argv[2], sys.argv[3]), open(sys.argv[1]).read()); print(m.group(1) if m else "")' "$1" "$2" "$3"
}
text() { # DOM, element id → its text
  python3 -c 'import html, re, sys; m = re.search(r"<([a-z0-9]+)[^>]*\bid=\"%s\"[^>]*>(.*?)</\1>" % sys.argv[2], open(sys.argv[1]).read(), re.S); print(html.unescape(re.sub("<[^>]+>", "", m.group(2))) if m else "")' "$1" "$2"
}
b64() { python3 -c 'import base64, sys; print(base64.urlsafe_b64encode(sys.argv[1].encode()).decode().rstrip("="))' "$1"; }
cli_field() { grep -m1 "\"$1\":" | grep -o -- '-\?[0-9][0-9]*' | head -1; }

page "?$query" >"$work/estimate.html"
shown_total=$(attr "$work/estimate.html" total-bytes data-bytes)
shown_peak=$(attr "$work/estimate.html" peak-bytes data-bytes)
shown_batch=$(text "$work/estimate.html" max-batch)
error=$(text "$work/estimate.html" error)
[[ -z $error ]] || fail "the page shows an error: $error"
cli_total=$("$vram" estimate "${job[@]}" --json | cli_field total_bytes)
cli_peak=$("$vram" estimate "${job[@]}" --json | cli_field peak_allocated_bytes)
cli_batch=$("$vram" fit --model qwen2.5-1.5b --seq-len 4096 --precision fp16-mixed --gpu h20 --json | cli_field max_batch_size)
[[ $shown_total == "$cli_total" ]] || fail "total: page $shown_total bytes, CLI $cli_total bytes"
[[ $shown_peak == "$cli_peak" ]] || fail "peak allocated: page $shown_peak bytes, CLI $cli_peak bytes"
[[ $shown_batch == "$cli_batch" ]] || fail "largest batch: page '$shown_batch', CLI $cli_batch"
echo "web-test: page = CLI: total $shown_total bytes ($(text "$work/estimate.html" total-bytes)), peak allocated $shown_peak bytes, largest batch $shown_batch"

# A config.json carried in the link (as a dropped file is) is the same model as its preset.
page "?$query&config_name=config.json#config=$(b64 "$(cat crates/vram-core/presets/qwen2.5-1.5b.json)")" >"$work/config.html"
[[ $(attr "$work/config.html" total-bytes data-bytes) == "$cli_total" ]] ||
  fail "config.json in the link: page total '$(attr "$work/config.html" total-bytes data-bytes)', CLI $cli_total (error: '$(text "$work/config.html" error)')"
echo "web-test: config.json in the link = the preset: total $cli_total bytes"

# Inference and vLLM serving: the KV-cache pool in tokens, as `vram serve` computes it.
page "?model=llama-3.1-8b&gpu=h100&mode=infer&seq_len=8192&batch_size=4&max_model_len=8192" >"$work/serve.html"
shown_kv=$(attr "$work/serve.html" kv-tokens data-tokens)
# The plan's own KV tokens (gpus[0]), not an alternative's under "advice".
cli_kv=$("$vram" serve --model llama-3.1-8b --gpu h100 --max-model-len 8192 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["gpus"][0]["kv_tokens"])')
shown_infer=$(attr "$work/serve.html" total-bytes data-bytes)
cli_infer=$("$vram" estimate --model llama-3.1-8b --gpu h100 --mode infer --seq-len 8192 --batch-size 4 --json | cli_field total_bytes)
[[ $shown_kv == "$cli_kv" ]] || fail "vLLM KV tokens: page '$shown_kv', CLI $cli_kv (error: '$(text "$work/serve.html" error)')"
[[ $shown_infer == "$cli_infer" ]] || fail "inference total: page '$shown_infer', CLI $cli_infer"
echo "web-test: inference total $shown_infer bytes and vLLM KV pool $shown_kv tokens = CLI"

# Speculative decoding from the form's --speculative-config (a draft model among the presets).
spec='{"model":"llama-3.2-1b","num_speculative_tokens":5}'
page "?model=llama-3.1-70b&gpu=h100&mode=infer&max_model_len=8192&tensor_parallel_size=4&speculative_config=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$spec")" >"$work/spec.html"
shown_spec=$(attr "$work/spec.html" kv-tokens data-tokens)
cli_spec=$("$vram" serve --model llama-3.1-70b --gpu h100 --tensor-parallel-size 4 --max-model-len 8192 --speculative-config "$spec" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["gpus"][0]["kv_tokens"])')
[[ $shown_spec == "$cli_spec" ]] || fail "speculative decoding KV tokens: page '$shown_spec', CLI $cli_spec (error: '$(text "$work/spec.html" error)')"
echo "web-test: --speculative-config from the form: vLLM KV pool $shown_spec tokens = CLI"

expect_error() { # what, URL suffix, text the error must contain
  page "$2" >"$work/bad.html"
  local e; e=$(text "$work/bad.html" error)
  [[ $e == *"$3"* ]] || fail "$1: expected an error containing '$3', the page shows '${e:-no error}'"
  [[ $(attr "$work/bad.html" total-bytes data-bytes) == "" ]] || fail "$1: an answer is shown beside the error"
  echo "web-test: $1 → $e"
}
expect_error "config without hidden_size" "?gpu=h20&config_name=bad.json#config=$(b64 '{"model_type": "llama"}')" 'bad.json has no `hidden_size`'
expect_error "config that is not JSON" "?config_name=broken.json#config=$(b64 '{"model_type": ')" 'broken.json is not valid JSON'
expect_error "unknown preset" "?model=llama-9b&gpu=h100" 'llama-9b'
expect_error "bad number" "?model=gpt2&batch_size=two" '`batch_size` = `two` is not a whole number'
expect_error "unknown field" "?model=gpt2&bach_size=2" '`bach_size` is not read by `estimate`'

echo "web-test: sizes: vram.wasm $(wc -c <web/vram.wasm) bytes, app.js $(wc -c <web/app.js) bytes, index.html $(wc -c <web/index.html) bytes, style.css $(wc -c <web/style.css) bytes"
if [[ ${VRAM_WEB_TIMING:-0} == 1 ]]; then
  # Real time (no virtual clock): the page logs its time to first answer on the console.
  for i in 1 2 3; do
    timeout 8 "$browser" --headless=new --disable-gpu --no-sandbox --user-data-dir="$(mktemp -d -p "$work")" \
      --enable-logging=stderr --v=0 "$url?$query" 2>&1 | grep -o 'vram-timing[^"]*' | sed "s/^/web-test: run $i: /" || true
  done
fi
echo "web-test: OK"
