"""Quantize a GGUF into place atomically (llama.cpp writes in place; we give it a temporary name)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from localspec import llama
from localspec.files import atomic_output


def quantize_file(
    src: Path,
    dst: Path,
    ftype: str,
    *,
    nthread: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> Path:
    with atomic_output(dst) as tmp:
        llama.quantize(src, tmp, ftype, nthread=nthread, progress=progress)
    return Path(dst)
