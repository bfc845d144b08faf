#!/usr/bin/env bash
# llama-server on a real GPU, run by vram's own device check (README.md beside this file):
# builds llama.cpp with CUDA (once: kept in BUILD_DIR), writes full-size zero-weight GGUFs of
# four public models (crates/vram-core/examples/synthetic_gguf.rs: the header is what sizes
# llama.cpp's buffers), and starts llama-server on each launch of runs.txt, in order, until the
# deadline. Each launch: the start-up log at -lv 4 (the level that prints llama.cpp's buffer
# lines), nvidia-smi's per-process and device-wide used memory once the server listens, again
# after one prompt of PROMPT_CHARS byte tokens, then SIGINT (llama.cpp prints its memory
# breakdown on exit).
#     bash validation/llamacpp/run.sh OUT_DIR [DEADLINE_SECONDS] [BUILD_DIR] [ONLY_NAMES]
# Needs: .llama/llama-src.tar.xz (the llama.cpp source), .llama/synthetic_gguf (the example,
# built here), nvcc, cmake and ninja (or make) where BUILD_DIR has no llama-server yet.
set -uo pipefail
out=${1:?usage: run.sh OUT_DIR [DEADLINE_SECONDS] [BUILD_DIR] [ONLY_NAMES]}
deadline=${2:-540}
build=${3:-.llama-build}
only=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
gg=${GGUF_DIR:-/tmp/vram-gguf}
prompt_chars=${PROMPT_CHARS:-2000}
mkdir -p "$out/logs" "$gg"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | tee "$out/gpu.txt"

if [ ! -x "$build/bin/llama-server" ]; then
    mkdir -p "$build/src" && tar xJf .llama/llama-src.tar.xz -C "$build/src" || exit 1
    export CUDACXX=${CUDACXX:-$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)}
    gen=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
    echo "building llama.cpp with $CUDACXX ($gen), $(nproc) jobs"
    cmake -S "$build/src/llama.cpp" -B "$build" -G "$gen" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$out/cmake.log" 2>&1 \
        || { tail -30 "$out/cmake.log"; exit 1; }
    start=$SECONDS
    cmake --build "$build" -j "$(nproc)" --target llama-server > "$out/build.log" 2>&1 \
        || { grep -m 20 -E "error|Error" "$out/build.log"; tail -20 "$out/build.log"; exit 1; }
    echo "built in $((SECONDS - start)) s"
fi
"$build/bin/llama-server" --version 2>&1 | tail -2 | tee "$out/version.txt"

smi_process() { # MiB nvidia-smi gives process $1
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null \
        | awk -F', *' -v p="$1" '$1 == p { print $2 }'
}
smi_device() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

prompt_once() { # one /completion of $prompt_chars characters (each one byte token), 4 tokens out
    python3 - "$prompt_chars" <<'PY'
import json, sys, time, urllib.request
text = "".join(chr(97 + i % 26) for i in range(int(sys.argv[1])))
body = json.dumps({"prompt": text, "n_predict": 4, "cache_prompt": False}).encode()
req = urllib.request.Request("http://127.0.0.1:18080/completion", body, {"Content-Type": "application/json"})
t = time.time()
try:
    r = json.load(urllib.request.urlopen(req, timeout=120))
    print(json.dumps({"ok": True, "seconds": round(time.time() - t, 2), "prompt_tokens": r.get("tokens_evaluated")}))
except Exception as e:
    print(json.dumps({"ok": False, "error": str(e)[:200]}))
PY
}

while read -r name model args; do
    case "$name" in ''|'#'*) continue ;; esac
    if [ -n "$only" ] && ! echo ",$only," | grep -q ",$name,"; then continue; fi
    if [ "$SECONDS" -ge "$((deadline - 25))" ]; then echo "deadline: $name not run"; continue; fi
    # `@LEAVE-N` in an argument: the GPU's free MiB less N, so a --fit margin leaves N MiB for
    # the model whatever the card (the first recordings used fixed margins chosen for an H100).
    free_now=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null | head -1)
    if [[ "$args" == *@LEAVE-* && ! "$free_now" =~ ^[0-9]+$ ]]; then
        echo "$name: @LEAVE needs nvidia-smi's free memory; not run"
        continue
    fi
    while [[ "$args" =~ @LEAVE-([0-9]+) ]]; do
        args=${args/"${BASH_REMATCH[0]}"/$(( ${free_now:-0} - ${BASH_REMATCH[1]} ))}
    done
    f="$gg/$model.gguf"
    [ -f "$f" ] || .llama/synthetic_gguf "$model" "$f" > /dev/null || exit 1
    log="$out/logs/$name.log"
    before=$(smi_device)
    t0=$SECONDS
    # shellcheck disable=SC2086 # the launch's arguments are words of runs.txt
    "$build/bin/llama-server" -m "$f" $args ${EXTRA_ARGS:-} --host 127.0.0.1 --port 18080 -lv 4 > "$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 480); do
        grep -q "listening on" "$log" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    listening=false; grep -q "listening on" "$log" && listening=true
    sleep 1
    idle_proc=$(smi_process "$pid"); idle_dev=$(smi_device)
    prompt='{"ok": false, "error": "not listening"}'
    if $listening; then prompt=$(prompt_once); fi
    sleep 0.5
    after_proc=$(smi_process "$pid"); after_dev=$(smi_device)
    kill -INT "$pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"; rc=$?
    python3 - "$out/runs.jsonl" <<PY
import json, sys
def n(x):
    return int(x) if x.strip().isdigit() else None
rec = {"record": "llama-server", "name": "$name", "model": "$model", "args": "$args",
       "listening": $( $listening && echo True || echo False ), "seconds": $((SECONDS - t0)), "exit": $rc,
       "smi_device_before_mib": n("$before"),
       "smi_process_idle_mib": n("$idle_proc"), "smi_device_idle_mib": n("$idle_dev"),
       "prompt": json.loads('''$prompt'''),
       "smi_process_after_prompt_mib": n("$after_proc"), "smi_device_after_prompt_mib": n("$after_dev")}
open(sys.argv[1], "a").write(json.dumps(rec) + "\n")
print(json.dumps(rec))
PY
done < "$here/runs.txt"
