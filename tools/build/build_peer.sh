#!/usr/bin/env bash
# Builds llama.cpp's own tools from the llama.cpp vendored in the pinned llama-cpp-python sdist, so
# `localspec bench --peer` compares against the very same ggml/llama sources we link. Two builds:
#   wheel   third_party/llama.cpp-build   as the Python wheel is built (the Makefile's CMAKE_ARGS,
#           shared libraries, its CFLAGS): the kernels our process runs, so a gap is ours, not ggml's
#   native  third_party/llama.cpp-native  as a user who compiles llama.cpp gets it: its defaults
#           (-march=native, shared libraries, no header), AMX left out (its matmul crashes on some Xeons)
# PEER_BUILDS="wheel" (or "native") builds one; `make peer` builds both with the Makefile's flags.
# `localspec bench --peer` runs the first (tests/models/test_nomic_embed.py its llama-embedding); LOCALSPEC_PEER_BIN=third_party/llama.cpp-native/bin the other.
# Idempotent: the download, the unpack and each cmake build are skipped when already done.
set -euo pipefail

source "$(dirname "$0")/llama_source.sh"
# the wheel's flags (the Makefile's default on x86-64 Linux; `make peer` passes its CMAKE_ARGS)
WHEEL_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_RPC=ON}"
NO_AMX="$(no_amx)"
HIDDEN="-include$ROOT/tools/build/ggml_hidden_tables.h $NO_AMX"
COMMON=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON)
TARGETS=(llama-speculative-simple llama-server llama-bench llama-cli llama-embedding)

build_one() {  # NAME BUILD_DIR CFLAGS CMAKE_FLAGS...
    local name="$1" build="$2" cflags="$3"; shift 3
    echo "== $name: $build"
    llama_configure "$build" "${COMMON[@]}" "-DCMAKE_C_FLAGS=$cflags" "-DCMAKE_CXX_FLAGS=$cflags" "$@"
    cmake --build "$build" --config Release -j "${JOBS:-2}" --target "${TARGETS[@]}"
    echo "flags used (from CMakeCache.txt):"
    grep -E '^(CMAKE_BUILD_TYPE|CMAKE_C_FLAGS|BUILD_SHARED_LIBS|GGML_NATIVE|GGML_BACKEND_DL|GGML_CPU_ALL_VARIANTS|GGML_AVX[A-Z0-9_]*|GGML_FMA|GGML_F16C|GGML_BMI2|GGML_OPENMP):' \
        "$build/CMakeCache.txt" | sed 's/^/  /'
    for t in "${TARGETS[@]}"; do
        if [ -x "$build/bin/$t" ]; then echo "  $build/bin/$t"; else echo "  (missing) $t"; fi
    done
}

llama_source
for b in ${PEER_BUILDS:-wheel native}; do
    case "$b" in
        # shared, as the wheel's; a GGML_BACKEND_DL build's CPU variants land beside the binaries,
        # where its AMX one is removed (the wheel skips it: localspec/llama/backends.py)
        wheel) read -r -a args <<< "$WHEEL_ARGS"
               build_one wheel "$TP/llama.cpp-build" "$HIDDEN" -DBUILD_SHARED_LIBS=ON "${args[@]}"
               rm -f "$TP/llama.cpp-build/bin/libggml-cpu-sapphirerapids.so" ;;
        native) build_one native "$TP/llama.cpp-native" "$NO_AMX" -DGGML_NATIVE=ON ;;
        *) echo "PEER_BUILDS takes wheel and native (got $b)" >&2; exit 2 ;;
    esac
done
