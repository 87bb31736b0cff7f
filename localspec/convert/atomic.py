"""Atomic outputs: write to a temporary name in the destination folder, then os.replace()."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


def partial_path(dst: Path) -> Path:
    # same folder, so os.replace is a rename on one filesystem; the pid keeps concurrent runs apart
    return dst.with_name(f".{dst.name}.{os.getpid()}{PARTIAL_SUFFIX}")


@contextlib.contextmanager
def atomic_output(dst: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path; on success it becomes `dst`, on any error (or Ctrl-C) it is removed."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(dst)
    try:
        yield tmp
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text_atomic(dst: Path, text: str) -> None:
    with atomic_output(dst) as tmp:
        tmp.write_text(text)
