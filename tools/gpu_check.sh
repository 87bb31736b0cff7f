#!/usr/bin/env bash
# The GPU proof run, one command (docs/gpu.md). On the device, after `make gpu-bundle` here:
#   run(command="OUT=$OUT tools/gpu_check.sh", carry=["build/gpu-bundle"], timeout_s=600)
# It sets up an offline venv from the bundle's wheels, builds llama-cpp-python for CUDA from the
# trimmed sdist (reused while the machine stays warm), then runs tools/gpu_check.py: synthetic
# pair, doctor, pair tests, bench, verify-cost curve, concurrency. Results: $OUT/report.md + JSON.
#   tools/gpu_check.sh --cpu   the same on this CPU machine with a tiny pair (about two minutes)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODE=gpu
[ "${1:-}" = --cpu ] && MODE=cpu
OUT=${OUT:-$ROOT/build/gpu-check-$MODE}
WORK=$ROOT/build/gpu-work-$MODE
BUNDLE=$ROOT/build/gpu-bundle
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
say() { echo "[gpu_check $(($(date +%s) - T0)) s] $*"; }

if [ "$MODE" = gpu ]; then
    [ -f "$BUNDLE/manifest.json" ] || { echo "error: no $BUNDLE: run \`make gpu-bundle\` and carry it" >&2; exit 1; }
    nvidia-smi -L || true
    command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
    PY=$WORK/venv/bin/python
    say "installing the bundle's wheels (offline)"
    if [ -x "$PY" ] || python3 -m venv --system-site-packages "$WORK/venv"; then
        "$PY" -m pip install -q --no-index --find-links "$BUNDLE/wheels" \
            gguf tomli-w platformdirs diskcache typing-extensions scikit-build-core pathspec packaging || exit 1
    else  # no venv module: the system Python, with every bundled wheel in a folder put first on the path
        PY=python3
        "$PY" -m pip install -q --no-index --no-deps --target "$WORK/site" "$BUNDLE"/wheels/*.whl || exit 1
        export PYTHONPATH=$WORK/site
    fi
    # cuBLAS from a pip wheel (torch's) is not on the loader's path unless torch put it there
    CUBLAS=$(tools/build/gpu_build_llama.sh "$PY" "$WORK/llama" --cublas-dir)
    [ -n "$CUBLAS" ] && export LD_LIBRARY_PATH=$CUBLAS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # the f16 pair needs only numpy: write it while llama.cpp compiles (the check quantizes it after)
    "$PY" tools/gpu_check.py --mode gpu --out "$OUT" --work "$WORK" --f16-only > "$OUT/f16.log" 2>&1 &
    F16_PID=$!
    if ! "$PY" -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>/dev/null; then
        say "building llama-cpp-python for CUDA sm_90 ($(nproc) cores)"
        if ! timeout 420 tools/build/gpu_build_llama.sh "$PY" "$WORK/llama" > "$OUT/build.log" 2>&1; then
            tail -30 "$OUT/build.log"
            kill "$F16_PID" 2>/dev/null
            echo "error: the CUDA build failed or ran past 7 minutes (log: $OUT/build.log)" >&2
            exit 1
        fi
        if [ -n "${PYTHONPATH:-}" ]; then TO=(--target "$WORK/site" --upgrade); else TO=(--force-reinstall); fi
        "$PY" -m pip install -q --no-index --no-deps "${TO[@]}" "$WORK"/llama/wheel/llama_cpp_python-*.whl || exit 1
        say "built"
    fi
    wait "$F16_PID" || { cat "$OUT/f16.log"; echo "warning: the f16 pair failed; the check retries it" >&2; }
    say "f16 pair: $(tail -1 "$OUT/f16.log")"
else
    PY=${PYTHON:-}
    for cand in "$ROOT/.venv/bin/python" /work/main/.venv/bin/python python3; do
        [ -z "$PY" ] && "$cand" -c "import llama_cpp" 2>/dev/null && PY=$cand
    done
    [ -n "$PY" ] || { echo "error: no Python with llama_cpp: run \`make setup\`" >&2; exit 1; }
fi

export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
say "checking with $PY"
"$PY" tools/gpu_check.py --mode "$MODE" --out "$OUT" --work "$WORK"
rc=$?
say "done (exit $rc); report: $OUT/report.md"
exit $rc
