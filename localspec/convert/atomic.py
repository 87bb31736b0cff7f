"""Atomic outputs: write to a temporary name in the destination folder, then os.replace().

A killed writer leaves only a hidden `.NAME.PID.partial` (removed by the next writer of NAME), never a
file that looks finished. A full disk, a read-only folder or a missing permission becomes one clear
LocalspecError (`output_error`), and the partial file is removed. Reusable for any output: model files,
pair.toml, downloads, logs (`output_error` alone for files that are appended to).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import LocalspecError

PARTIAL_SUFFIX = ".partial"
LOW_SPACE = 1 << 20  # below this a failed write is taken to be a full disk, whatever the writer said
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NO_WRITE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR)


def partial_path(dst: Path) -> Path:
    # same folder, so os.replace is a rename on one filesystem; the pid keeps concurrent runs apart
    return dst.with_name(f".{dst.name}.{os.getpid()}{PARTIAL_SUFFIX}")


def output_error(dst: str | os.PathLike, cause: BaseException) -> LocalspecError | None:
    """One actionable error if writing `dst` failed for lack of space or permission, else None.

    llama.cpp reports a full disk as 'iostream error', so the free space is checked as well."""
    dst = Path(dst)
    code = cause.errno if isinstance(cause, OSError) else None
    if code in _NO_WRITE:
        return LocalspecError(f"cannot write {dst}: {os.strerror(code)}; choose a folder you can write to")
    free = _free_bytes(dst.parent)
    if code in _NO_SPACE or free < LOW_SPACE:
        return LocalspecError(
            f"cannot write {dst}: no space left on the device ({_fmt(free)} free in {dst.parent}); "
            "free some space or write the output elsewhere"
        )
    return None


@contextlib.contextmanager
def atomic_output(dst: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path; on success it becomes `dst`, on any error (or Ctrl-C) it is removed."""
    dst = Path(dst)
    with scratch_output(dst) as tmp:
        yield tmp
        try:
            os.replace(tmp, dst)
        except OSError as e:
            raise (output_error(dst, e) or e) from None


@contextlib.contextmanager
def scratch_output(dst: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `dst` that is always removed at the end (an intermediate file);
    disk and permission failures while it is written become `output_error`s."""
    dst = Path(dst)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise (output_error(dst, e) or LocalspecError(f"cannot create {dst.parent}: {e.strerror}")) from None
    _remove_stale_partials(dst)
    tmp = partial_path(dst)
    try:
        yield tmp
    except (OSError, LocalspecError) as e:
        # decided before the partial file is removed: removing it frees the space again
        written = tmp.exists()
        err = output_error(dst, e) if isinstance(e, OSError) or written else None
        if err is not None:
            raise err from None
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text_atomic(dst: Path, text: str) -> None:
    with atomic_output(dst) as tmp:
        tmp.write_text(text)


def _remove_stale_partials(dst: Path) -> None:
    """Partials of `dst` left by writers that were killed (their pid is gone)."""
    pattern = re.compile(rf"^\.{re.escape(dst.name)}\.(\d+){re.escape(PARTIAL_SUFFIX)}$")
    with contextlib.suppress(OSError):
        for p in dst.parent.iterdir():
            m = pattern.match(p.name)
            if m and not _alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    p.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_bytes(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return LOW_SPACE  # unknown: do not claim the disk is full


def _fmt(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"
