#!/usr/bin/env bash
# Builds llama.cpp's RPC server (`ggml-rpc-server`, the tool its docs call rpc-server) from the
# llama.cpp vendored in the pinned llama-cpp-python sdist: client and server then speak the same RPC
# protocol version. Only ggml, its CPU backend, the RPC backend and the tool are compiled (~3 min on
# two cores), then llama-embedding (libllama and common: ~5 min more). Idempotent: the download, the
# unpack and the cmake build are each skipped when done.
# GPU machines add their backend: CMAKE_ARGS="-DGGML_CUDA=on" tools/build/build_rpc_server.sh
set -euo pipefail

source "$(dirname "$0")/llama_source.sh"
BUILD="$TP/rpc-build"
# portable unless the wheel's CMAKE_ARGS (below) say native; AMX stays out either way (its matmul
# segfaults on some Xeons)
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_RPC=ON -DLLAMA_CURL=OFF
             -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON
             -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF)
# the wheel's CMAKE_ARGS (a GPU backend, say) join in; the ones above already are not repeated
read -r -a EXTRA <<< "${CMAKE_ARGS:-}"
for flag in "${EXTRA[@]}"; do
    [[ " ${CMAKE_FLAGS[*]} " == *" $flag "* ]] || CMAKE_FLAGS+=("$flag")
done
TARGET=ggml-rpc-server
# and llama.cpp's own embedder, the reference tests/models/test_nomic_embed.py compares against (~5 min more)
REFERENCE=llama-embedding
NO_AMX="$(no_amx)"
CMAKE_FLAGS+=("-DCMAKE_C_FLAGS=$NO_AMX" "-DCMAKE_CXX_FLAGS=$NO_AMX")

llama_source
llama_configure "$BUILD" "${CMAKE_FLAGS[@]}"
cmake --build "$BUILD" --config Release -j "${JOBS:-2}" --target "$TARGET" "$REFERENCE"
echo "$BUILD/bin/$TARGET"
