"""llama.cpp's process-wide state: backend init, its log (kept in a ring buffer that doctor and the
placement checks read; echoed only with LOCALSPEC_VERBOSE), and facts about the build."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import threading
from typing import Callable, Iterator

import llama_cpp as C

from localspec.llama import backends

# Logging: llama.cpp logs through one process-wide callback. We keep every line in a ring buffer
# (doctor and placement checks read it) and only echo when LOCALSPEC_VERBOSE is set.
_LOG_LINES: collections.deque[tuple[int, str]] = collections.deque(maxlen=20000)
# re-entrant: the garbage collector may run inside the callback (it allocates) and finalize an
# engine nobody closed, whose models then log from the same thread while the lock is held
_LOG_LOCK = threading.RLock()
_LOG_PARTIAL: list[str] = []
_LOG_LISTENERS: list[Callable[[int, str], None]] = []
_LOG_COUNT = [0]  # lines ever logged: marks stay valid after the ring wraps (one model load ~3000)
_VERBOSE = bool(os.environ.get("LOCALSPEC_VERBOSE"))


def _on_log(level: int, text: bytes | None, _user: ctypes.c_void_p) -> None:
    if not text:
        return
    s = text.decode("utf-8", errors="replace")
    with _LOG_LOCK:
        _LOG_PARTIAL.append(s)
        if not s.endswith("\n"):
            return  # llama.cpp sometimes emits one line in several calls (GGML_LOG_LEVEL_CONT)
        line = "".join(_LOG_PARTIAL).rstrip("\n")
        _LOG_PARTIAL.clear()
        _LOG_LINES.append((level, line))
        _LOG_COUNT[0] += 1
        listeners = list(_LOG_LISTENERS)
    for fn in listeners:
        fn(level, line)
    if _VERBOSE:
        os.write(2, (line + "\n").encode())


# C keeps this pointer for the life of the process: the module-level reference keeps it alive.
_LOG_CALLBACK = C.llama_log_callback(_on_log)
_BACKEND_READY = False


def init_backend() -> None:
    global _BACKEND_READY
    if not _BACKEND_READY:
        C.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        backends.load_dynamic()  # a GGML_BACKEND_DL build: its modules, from llama_cpp's lib folder
        C.llama_backend_init()
        _BACKEND_READY = True


def log_lines() -> list[str]:
    """Every llama.cpp log line captured so far in this process (most recent last)."""
    with _LOG_LOCK:
        return [line for _, line in _LOG_LINES]


def log_mark() -> int:
    """A position in the log; `log_since(mark)` are the lines logged after it."""
    with _LOG_LOCK:
        return _LOG_COUNT[0]


def log_since(mark: int) -> list[str]:
    """The lines logged since `log_mark()` returned `mark` (the newest 20000 at most)."""
    with _LOG_LOCK:
        n = min(_LOG_COUNT[0] - mark, len(_LOG_LINES))
        return [line for _, line in list(_LOG_LINES)[len(_LOG_LINES) - n :]] if n > 0 else []


def system_info() -> str:
    init_backend()
    return C.llama_print_system_info().decode("utf-8", errors="replace").strip()


def default_threads() -> int:
    import psutil

    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


def last_error(mark: int) -> str:
    lines = [ln for ln in log_since(mark) if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errs or lines or ["(no log)"])[-1].strip()


def llama_cpp_version() -> str:
    return str(getattr(C, "__version__", "?"))


@contextlib.contextmanager
def listening(on_line: Callable[[int, str], None]) -> Iterator[None]:
    """Call on_line(level, line) for every line llama.cpp logs while inside (e.g. quantize progress)."""
    with _LOG_LOCK:
        _LOG_LISTENERS.append(on_line)
    try:
        yield
    finally:
        with _LOG_LOCK:
            _LOG_LISTENERS.remove(on_line)
