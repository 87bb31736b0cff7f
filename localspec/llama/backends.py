"""ggml's backends in a build with GGML_BACKEND_DL (the default `make setup`): each backend is its
own module in llama_cpp's lib folder - every CPU variant (libggml-cpu-haswell.so,
libggml-cpu-icelake.so, ...), RPC, a GPU's - where ggml's own search (beside the executable, the
working directory) does not look. They are loaded from there before llama.cpp starts: every non-CPU
module, and of the CPU variants the best this machine runs by ggml's own score, except AMX's
(its matmul crashes on some Xeons, as Ollama found; LOCALSPEC_CPU_VARIANT=NAME picks one instead).
A build without GGML_BACKEND_DL has its backends linked in and nothing here applies."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import LocalspecError

AMX_VARIANTS = ("sapphirerapids",)  # ggml's CPU variants built with AMX (ggml/src/CMakeLists.txt)
VARIANT_ENV = "LOCALSPEC_CPU_VARIANT"
_PREFIX, _CPU_PREFIX = "libggml-", "libggml-cpu-"
_NOT_BACKENDS = ("libggml-base.so", "libggml.so")


@dataclass(frozen=True)
class CpuVariant:
    name: str  # "haswell", "icelake", ...; "built in" when the build links one CPU backend
    path: Path | None
    score: int  # ggml_backend_score: 0 = this CPU cannot run it
    reason: str  # why this one


LOADED: list[CpuVariant] = []  # the CPU variant this process loaded (empty: none, or built in)


def cpu_variant() -> CpuVariant:
    """The CPU backend in use (after init_backend): the loaded variant, or the one built in."""
    if LOADED:
        return LOADED[0]
    return CpuVariant("built in", None, 0, "one CPU backend linked in, with the features above")


def lib_dir() -> Path:
    import llama_cpp  # noqa: PLC0415 - the package whose libraries these are

    return Path(llama_cpp.__file__).parent / "lib"


def modules(folder: Path) -> tuple[list[Path], list[Path]]:
    """(CPU variant modules, other backend modules) in folder."""
    found = sorted(p for p in folder.glob(f"{_PREFIX}*.so") if p.name not in _NOT_BACKENDS)
    return [p for p in found if p.name.startswith(_CPU_PREFIX)], [
        p for p in found if not p.name.startswith(_CPU_PREFIX)
    ]


def variant_name(path: Path) -> str:
    return path.name[len(_CPU_PREFIX) : -len(".so")]


def score(path: Path) -> int:
    """ggml's own score of a CPU variant on this machine (its ggml_backend_score), 0 if unusable.
    The module is opened only to ask: nothing in it runs but the feature check."""
    import _ctypes  # noqa: PLC0415

    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return 0
    try:
        fn = getattr(lib, "ggml_backend_score", None)
        if fn is None:
            return 0
        fn.restype, fn.argtypes = ctypes.c_int, []
        return int(fn())
    finally:
        _ctypes.dlclose(lib._handle)


def choose(variants: list[Path], wanted: str | None = None) -> CpuVariant:
    """The CPU variant to load: `wanted` by name, else the best-scoring one without AMX."""
    scored = {variant_name(p): (p, score(p)) for p in variants}
    if wanted:
        if wanted not in scored:
            raise LocalspecError(
                f"{VARIANT_ENV}={wanted!r}: this build has CPU variants {', '.join(scored) or 'none'}"
            )
        path, s = scored[wanted]
        if s <= 0:
            raise LocalspecError(f"{VARIANT_ENV}={wanted!r}: this CPU cannot run that variant")
        return CpuVariant(wanted, path, s, f"{VARIANT_ENV}")
    usable = {n: ps for n, ps in scored.items() if ps[1] > 0 and n not in AMX_VARIANTS}
    if not usable:
        raise LocalspecError(f"none of this build's CPU variants ({', '.join(scored)}) runs on this CPU")
    name, (path, s) = max(usable.items(), key=lambda kv: kv[1][1])
    skipped = [n for n in AMX_VARIANTS if scored.get(n, (None, 0))[1] > s]
    reason = "best score" + (f" without AMX ({', '.join(skipped)} skipped)" if skipped else "")
    return CpuVariant(name, path, s, reason)


def load_dynamic() -> None:
    """Load the backend modules of a GGML_BACKEND_DL build (nothing to do for any other build).
    Called once, before llama_backend_init (which would search only its own places)."""
    from llama_cpp import _ggml as G  # noqa: PLC0415 - the libggml llama_cpp already loaded

    lib = G.libggml
    lib.ggml_backend_reg_count.restype, lib.ggml_backend_reg_count.argtypes = ctypes.c_size_t, []
    lib.ggml_backend_load.restype, lib.ggml_backend_load.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    if lib.ggml_backend_reg_count() > 0:  # backends linked in, or loaded already
        return
    cpu, others = modules(lib_dir())
    for path in others:
        lib.ggml_backend_load(str(path).encode())
    if cpu:
        chosen = choose(cpu, os.environ.get(VARIANT_ENV) or None)
        if not lib.ggml_backend_load(str(chosen.path).encode()):
            raise LocalspecError(f"ggml could not load its CPU backend {chosen.path}")
        LOADED.append(chosen)
