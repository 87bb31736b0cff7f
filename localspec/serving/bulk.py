"""Work that grows with what a client sends - a large body's parse, a long prompt's render and
tokenizing, a client's own tokenize - runs on one thread at a low CPU priority. On a machine with
few cores the engine's decoding then keeps them: three clients of 7.8 MB bodies, each parsed and
refused on an ordinary worker, took a neighbour's decoding to half its speed (issue 60). One thread:
such work is done one piece at a time, so a flood of it takes at most one core, and only the time
the engine leaves. A piece that holds the GIL in C (json.loads) still holds it whole."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")
NICE = 10  # added to the server's own: below the engine's threads, above other users' idle work


def _lower() -> None:
    """This thread's priority, lowered (on Linux a thread has its own nice value)."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + NICE))


_pool = ThreadPoolExecutor(1, thread_name_prefix="localspec-bulk", initializer=_lower)


async def run(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the bulk thread, after the pieces before it."""
    return await asyncio.wrap_future(_pool.submit(functools.partial(fn, *args)))


def call(fn: Callable[[], T]) -> T:
    """`fn()` on the bulk thread, from another thread that waits for it (a worker's)."""
    if threading.current_thread().name.startswith("localspec-bulk"):
        return fn()
    return _pool.submit(fn).result()
