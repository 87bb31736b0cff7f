# Sourced by the scripts that build llama.cpp tools from the llama.cpp vendored in the pinned
# llama-cpp-python sdist (build_rpc_server.sh, build_peer.sh): the paths, the one download and
# unpack of that sdist, and a cmake configure that reruns only when its flags change.
VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TP="$ROOT/third_party"
PY="${PY:-$ROOT/.venv/bin/python}"
SRC="$TP/llama_cpp_python-$VERSION/vendor/llama.cpp"

llama_source() {  # the sdist is downloaded and unpacked once (the Makefile's wheel build shares it)
    mkdir -p "$TP"
    if [ ! -d "$SRC" ]; then
        if ! ls "$TP"/llama_cpp_python-"$VERSION".tar.gz >/dev/null 2>&1; then
            "$PY" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$TP"
        fi
        tar -xzf "$TP/llama_cpp_python-$VERSION.tar.gz" -C "$TP"
    fi
}

llama_configure() {  # BUILD FLAGS...: configure BUILD, unless it was configured with these flags
    local build="$1"; shift
    local stamp="$build/localspec-flags.txt"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$*" ]; then
        cmake -S "$SRC" -B "$build" "$@" > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
        printf '%s' "$*" > "$stamp"
    fi
}

no_amx() {  # the flags that keep AMX out of a native x86 build, where the compiler knows them
    local f="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    if echo 'int x;' | "${CC:-cc}" -x c $f -fsyntax-only - 2>/dev/null; then echo "$f"; fi
}
