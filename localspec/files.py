"""Files written safely, read safely, and told apart cheaply.

Atomic, durable outputs: write to a temporary name in the destination folder, fsync it, os.replace()
it over the name, fsync the folder (so after a power loss a finished name never holds an empty file).

A killed writer leaves only a hidden `.NAME.PID.partial` (removed by the next writer of NAME), never a
file that looks finished. A full disk, a read-only folder or a missing permission becomes one clear
LocalspecError (`output_error`), and the partial file is removed. Reusable for any output: model files,
pair.toml, downloads, logs (`output_error` alone for files that are appended to). What may hold
a user's settings (the acceptance log, the tuner memory) is created private: 0600 in 0700 folders.

Files read from a path a person or a downloaded folder gave (`open_regular`, `read_capped`) must be
regular files: a FIFO would hang the open, a device would never end, and a symlink loop is named
as one, not as a missing file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import threading
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

from localspec.errors import LocalspecError

PARTIAL_SUFFIX = ".partial"
PRIVATE_FILE, PRIVATE_DIR = 0o600, 0o700  # what may hold a user's settings: theirs alone
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
    with _lock_for(dst), scratch_output(dst) as tmp:  # one writer of a name at a time in this process
        yield tmp
        try:
            _fsync(tmp)
            os.replace(tmp, dst)
            _fsync(dst.parent)
        except OSError as e:
            raise (output_error(dst, e) or e) from None


_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock_for(dst: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(Path(os.path.abspath(dst)), threading.Lock())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def write_text_atomic(dst: Path, text: str, *, private: bool = False) -> None:
    """`private`: the file is created 0600, in a folder created 0700 if missing (this user's alone)."""
    if private:
        private_dir(Path(dst).parent)
    with atomic_output(dst) as tmp:
        if private:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE), "w") as f:
                f.write(text)
        else:
            tmp.write_text(text)


def copy_atomic(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """`src` as `dst`, atomically: a hard link where both are on one filesystem (no second copy of
    a large file), else a copy. A `dst` that already is `src` is left alone."""
    src, dst = Path(src).resolve(), Path(dst)  # the file a symlink names: a link to a link can dangle
    if dst.exists() and os.path.samefile(src, dst):
        return dst
    with atomic_output(dst) as tmp:
        try:
            os.link(src, tmp)
        except OSError:  # another filesystem, or one without hard links
            shutil.copyfile(src, tmp)
    return dst


def private_dir(folder: str | os.PathLike) -> None:
    """Create each missing part of `folder` 0700 (what is already there is left as it is: a --log
    in /tmp must not change /tmp)."""
    missing = []
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=PRIVATE_DIR)


def _remove_stale_partials(dst: Path) -> None:
    """Partials of `dst` left by writers that were killed (their pid is gone)."""
    pattern = re.compile(rf"^\.{re.escape(dst.name)}\.(\d+){re.escape(PARTIAL_SUFFIX)}$")
    with contextlib.suppress(OSError):
        for p in dst.parent.iterdir():
            m = pattern.match(p.name)
            if m and not _alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    p.unlink()


def remove_dead_partials(folder: Path, suffix: str) -> None:
    """The partial files of `*suffix` outputs in `folder` whose writers were killed (a writer of
    many names, such as a cache, may never write one of them again)."""
    pattern = re.compile(rf"^\..+{re.escape(suffix)}\.(\d+){re.escape(PARTIAL_SUFFIX)}$")
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
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


def fingerprint(path: str | os.PathLike) -> str:
    """Cheap identity of a (model) file: its size and its first and last MiB. A full hash of a 20 GB
    target would cost more than what it keys (a calibration, a log line)."""
    st = os.stat(path)
    return _fingerprint(os.path.abspath(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=32)
def _fingerprint(path: str, size: int, _mtime_ns: int) -> str:
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if size > 2 << 20:
            f.seek(size - (1 << 20))
            h.update(f.read())
    return h.hexdigest()[:16]


def open_regular(path: str | os.PathLike, what: str = "file", *, missing: str | None = None) -> BinaryIO:
    """`path` opened for reading in binary, or one LocalspecError unless it is a regular file:
    missing (`missing`, with {path} replaced, says so in the caller's words), a symlink loop,
    unreadable, a folder, a FIFO or a device. Opened without blocking and checked on the
    descriptor, so a FIFO is refused instead of waiting for a writer forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise LocalspecError((missing or "no such file: {path}").replace("{path}", str(path))) from None
        if e.errno == errno.ELOOP:
            raise LocalspecError(f"{path} is a symlink loop (too many levels of symbolic links)") from None
        raise LocalspecError(f"cannot read {what} {path}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise LocalspecError(f"cannot read {what} {path}: it is {_kind(mode)} (give a file)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_capped(path: str | os.PathLike, what: str, max_bytes: int, *, missing: str | None = None) -> bytes:
    """The bytes of a regular file (`open_regular`) no bigger than max_bytes, else one error."""
    with open_regular(path, what, missing=missing) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(data) > max_bytes:
        raise LocalspecError(f"{what} {path} is {max(size, len(data))} bytes; the limit is {max_bytes}")
    return data


def path_kind(path: str | os.PathLike) -> str | None:
    """What is at `path`, in words ("a file", "a directory", "a FIFO (named pipe)", "a symlink loop
    ..."), or None when nothing is (Path.exists() says False for a symlink loop too)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop (too many levels of symbolic links)"
        return None if e.errno in (errno.ENOENT, errno.ENOTDIR) else f"unreadable ({e.strerror})"
    return "a file" if stat.S_ISREG(mode) else _kind(mode)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
