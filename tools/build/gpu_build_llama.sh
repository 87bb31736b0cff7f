#!/usr/bin/env bash
# Build llama-cpp-python for CUDA (sm_90) from the trimmed sdist in build/gpu-bundle, offline.
#   tools/build/gpu_build_llama.sh PYTHON WORKDIR [--configure-only | --cublas-dir]
# Leaves WORKDIR/wheel/llama_cpp_python-*.whl (reused when present: a warm device keeps build/);
# the CMake build folder is WORKDIR/skbuild, so a build cut short by a timeout resumes on the next call.
# cuBLAS: the CUDA toolkit's own, else the one a pip-installed torch brought (site-packages/nvidia/
# cu13 or nvidia/cublas), given to CMake through unversioned symlinks, since pip ships only .so.N.
set -euo pipefail
PY=$1
WORK=$(realpath -m "$2")
MODE=${3:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC_TAR=$ROOT/build/gpu-bundle/llama-cpp-python-src.tar.xz
SDIST=llama_cpp_python-0.3.36

# the folder of a pip wheel's cuBLAS (torch's dependency), if there is one
pip_cublas() {
    "$PY" - <<'EOF'
import glob, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
for pat in ("nvidia/cu13/lib/libcublas.so.*", "nvidia/cublas/lib/libcublas.so.*"):
    for d in dirs:
        hits = sorted(glob.glob(f"{d}/{pat}"))
        if hits:
            print(hits[0].rsplit("/", 1)[0])
            raise SystemExit(0)
EOF
}
if [ "$MODE" = --cublas-dir ]; then
    pip_cublas
    exit 0
fi

if [ "$MODE" != --configure-only ] && ls "$WORK"/wheel/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "llama-cpp-python CUDA wheel already built: $(ls "$WORK"/wheel/*.whl)"
    exit 0
fi
mkdir -p "$WORK"
[ -f "$WORK/$SDIST/CMakeLists.txt" ] || tar xJf "$SRC_TAR" -C "$WORK"

CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
if ! ls /usr/local/cuda/lib64/libcublas.so* /usr/lib/x86_64-linux-gnu/libcublas.so* >/dev/null 2>&1; then
    # a pip wheel's cuBLAS (torch's dependency): find its lib folder
    LIB=$(pip_cublas)
    if [ -z "$LIB" ]; then
        echo "error: no cuBLAS found (neither in the CUDA toolkit nor in a pip nvidia-cublas package)" >&2
        exit 1
    fi
    SHIM=$WORK/cublas-shim
    mkdir -p "$SHIM"
    for name in cublas cublasLt; do
        ln -sf "$(ls "$LIB"/lib$name.so.* | head -1)" "$SHIM/lib$name.so"
    done
    INC=$(dirname "$LIB")/include
    echo "cuBLAS from $LIB"
    CMAKE_ARGS="$CMAKE_ARGS -DCUDA_cublas_LIBRARY=$SHIM/libcublas.so -DCUDA_cublasLt_LIBRARY=$SHIM/libcublasLt.so"
    CMAKE_ARGS="$CMAKE_ARGS -DCMAKE_CUDA_FLAGS=-I$INC -DCMAKE_CXX_FLAGS=-I$INC"
    export LD_LIBRARY_PATH=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# the driver's libcuda: the unversioned name CMake looks for is often missing (only .so.1 or stubs)
DRIVER=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so(\.1)? /{print $NF}'; \
          ls /usr/local/cuda/lib64/stubs/libcuda.so /usr/local/cuda/targets/*/lib/stubs/libcuda.so 2>/dev/null || true) | head -1)
if [ -z "$DRIVER" ] && [ "$MODE" = --configure-only ]; then
    DRIVER=$WORK/no-driver/libcuda.so  # configure-only on a machine without a driver: any path will do
    mkdir -p "$(dirname "$DRIVER")" && : > "$DRIVER"
fi
if [ -n "$DRIVER" ]; then CMAKE_ARGS="$CMAKE_ARGS -DCUDA_cuda_driver_LIBRARY=$DRIVER"; fi

if [ "$MODE" = --configure-only ]; then
    # shellcheck disable=SC2086
    cmake -S "$WORK/$SDIST" -B "$WORK/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release $CMAKE_ARGS
    exit 0
fi
echo "building llama-cpp-python (CUDA sm_90) with $(nproc) jobs"
CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PY" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$WORK/wheel" \
    --config-settings=build-dir="$WORK/skbuild" "$WORK/$SDIST"
