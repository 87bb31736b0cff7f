"""`make gpu-bundle`: everything a GPU machine without network needs for tools/gpu_check.sh.

It writes build/gpu-bundle/ (carried with the working tree, 64 MiB in all):
  llama-cpp-python-src.tar.xz  the pinned sdist trimmed to what a CUDA build of the shared libraries
                               reads (ggml core, CPU and CUDA backends, llama, common) - built there
                               with all cores (docs/gpu.md says why not a wheel built here);
  wheels/                      pure-Python / cp312 wheels the device image lacks (gguf, PyYAML, ...);
  smollm2-vocab.gguf           SmolLM2's tokenizer as a vocab-only GGUF (no tensors), the vocabulary
                               of the synthetic pair generated there;
  manifest.json                sizes and sha256 of the above.

Usage: python tools/gpu_bundle.py [--out build/gpu-bundle] [--smollm2 models/SmolLM2-...gguf]
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLAMA_CPP_VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{LLAMA_CPP_VERSION}"
LIMIT = 64 << 20  # what travels per device call: the working tree plus carried paths

# what the CUDA build reads, relative to the sdist root (everything else is left out):
# whole folders, and the files directly in a few folders (their sub-folders are other backends,
# tools, tests, docs and models)
KEEP_TREES = [
    "llama_cpp/",
    "vendor/llama.cpp/licenses/",
    "vendor/llama.cpp/cmake/",
    "vendor/llama.cpp/include/",
    "vendor/llama.cpp/src/",
    "vendor/llama.cpp/common/",
    "vendor/llama.cpp/vendor/",
    "vendor/llama.cpp/ggml/cmake/",
    "vendor/llama.cpp/ggml/include/",
    "vendor/llama.cpp/ggml/src/ggml-cpu/",
    "vendor/llama.cpp/ggml/src/ggml-cuda/",
]
KEEP_FLAT = ["", "vendor/llama.cpp/", "vendor/llama.cpp/ggml/", "vendor/llama.cpp/ggml/src/"]
# what no build step reads, wherever it is
DROP = ["*.py", "*.md", "*.nix", "*.sh", "*/vendor/miniaudio/*.h", "*/vendor/stb/*.h"]

# packages the device image (python3.12 with torch, numpy, jinja2, click, psutil, rich, tqdm, pytest,
# hypothesis, prometheus-client, huggingface-hub, safetensors, cmake, ninja) lacks, pinned like ours
WHEELS = [
    "gguf==0.19.0",
    "PyYAML>=5.1",  # gguf's dependencies
    "requests>=2.25",
    "urllib3",
    "idna",
    "certifi",
    "charset-normalizer",
    "tomli-w>=1.0",
    "platformdirs>=3",  # where `run` appends its acceptance log
    "diskcache>=5.6.1",  # llama-cpp-python's
    "typing-extensions>=4.5",
    "scikit-build-core>=0.9.2",  # builds the sdist (no build isolation: nothing can be downloaded)
    "pathspec",
    "packaging",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-bundle")
    ap.add_argument("--cache", type=Path, default=ROOT / ".cache" / "gpu")
    ap.add_argument("--smollm2", type=Path, default=ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--python", default=sys.executable, help="Python whose pip downloads")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    args.cache.mkdir(parents=True, exist_ok=True)

    sdist = fetch_sdist(args.python, args.cache)
    src = out / "llama-cpp-python-src.tar.xz"
    if not src.exists() or src.stat().st_mtime < sdist.stat().st_mtime:
        t0 = time.perf_counter()
        n = trim_sdist(sdist, src)
        print(
            f"trimmed  {sdist.name} -> {src.name}: {n} files, {mib(src.stat().st_size)} "
            f"({time.perf_counter() - t0:.0f} s)"
        )
    fetch_wheels(args.python, out / "wheels")
    vocab = out / "smollm2-vocab.gguf"
    if not vocab.exists():
        sys.path.insert(0, str(ROOT))
        from tools.synthetic.pair import write_vocab_only  # noqa: PLC0415

        write_vocab_only(args.smollm2, vocab)
    manifest = write_manifest(out)
    total = manifest["bundle_bytes"] + manifest["tree_bytes"]
    print(
        f"bundle   {out}: {mib(manifest['bundle_bytes'])} + working tree {mib(manifest['tree_bytes'])} "
        f"= {mib(total)} of the {mib(LIMIT)} a device call carries"
    )
    if total > LIMIT:
        sys.exit(f"error: the bundle and working tree are {mib(total)}, over {mib(LIMIT)}")


def fetch_sdist(python: str, cache: Path) -> Path:
    path = cache / f"{SDIST}.tar.gz"
    if not path.exists():
        print(f"download llama-cpp-python=={LLAMA_CPP_VERSION} sdist -> {cache}")
        pip(
            python,
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "-d",
            str(cache),
            f"llama-cpp-python=={LLAMA_CPP_VERSION}",
        )
    return path


def trim_sdist(sdist: Path, dst: Path) -> int:
    """Copy the kept members of the sdist into a deterministic tar.xz (sorted, fixed mtimes/owners)."""
    prefix = SDIST + "/"
    with tarfile.open(sdist, "r:gz") as tin:
        members = [m for m in tin.getmembers() if m.isfile() and keep(m.name.removeprefix(prefix))]
        members.sort(key=lambda m: m.name)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz", preset=9) as tout:
            for m in members:
                data = tin.extractfile(m).read()  # type: ignore[union-attr]
                info = tarfile.TarInfo(m.name)
                info.size, info.mode, info.mtime = len(data), m.mode, 0
                tout.addfile(info, io.BytesIO(data))
    tmp = dst.with_suffix(".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(dst)
    return len(members)


def keep(rel: str) -> bool:
    if any(fnmatch.fnmatch(rel, p) for p in DROP) and not rel.startswith("llama_cpp/"):
        return False
    folder = rel.rsplit("/", 1)[0] + "/" if "/" in rel else ""
    return folder in KEEP_FLAT or any(rel.startswith(t) for t in KEEP_TREES)


def fetch_wheels(python: str, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    # cp312 manylinux for the device's Python 3.12; pure-Python packages come as py3-none-any
    pip(
        python,
        "download",
        "-q",
        "--only-binary",
        ":all:",
        "--no-deps",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "-d",
        str(dst),
        *WHEELS,
    )


def pip(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "pip", *args], check=True)


def write_manifest(out: Path) -> dict:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    entries = {str(p.relative_to(out)): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files}
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    tree = sum((ROOT / f).stat().st_size for f in tracked.decode().split("\0") if f and (ROOT / f).is_file())
    manifest = {
        "llama_cpp_python": LLAMA_CPP_VERSION,
        "files": entries,
        "bundle_bytes": sum(e["bytes"] for e in entries.values()),
        "tree_bytes": tree,
        "limit_bytes": LIMIT,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


if __name__ == "__main__":
    main()
