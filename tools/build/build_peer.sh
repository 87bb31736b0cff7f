#!/usr/bin/env bash
# Builds llama.cpp's own speculative tools from the llama.cpp vendored in the pinned llama-cpp-python
# sdist, so `localspec bench --peer` compares against the very same ggml/llama sources we link.
# Idempotent: the download, the unpack and the cmake build are each skipped when already done.
set -euo pipefail

source "$(dirname "$0")/llama_source.sh"
BUILD="$TP/llama.cpp-build"
# the same flags as the Python wheel (see Makefile): the native build segfaults in the AMX matmul here
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF
             -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON)
TARGETS=(llama-speculative-simple llama-server llama-bench llama-cli)

llama_source
llama_configure "$BUILD" "${CMAKE_FLAGS[@]}"
cmake --build "$BUILD" --config Release -j "${JOBS:-2}" --target "${TARGETS[@]}"

echo "flags used (from CMakeCache.txt):"
grep -E '^(CMAKE_BUILD_TYPE|GGML_NATIVE|GGML_AVX[A-Z0-9_]*|GGML_FMA|GGML_F16C|GGML_BMI2|LLAMA_CURL|GGML_OPENMP):' \
    "$BUILD/CMakeCache.txt" | sed 's/^/  /'
echo "binaries in $BUILD/bin:"
for t in "${TARGETS[@]}"; do
    if [ -x "$BUILD/bin/$t" ]; then echo "  $BUILD/bin/$t"; else echo "  (missing) $t"; fi
done
