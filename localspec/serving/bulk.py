"""Work that grows with what a client sends - a large body's parse, a long prompt's render and
tokenizing, a client's own tokenize - runs on one thread, one piece at a time: a flood of such
bodies takes at most one core, and the engine's decoding keeps the rest (issue 60: three clients of
7.8 MB bodies, each parsed and refused on an ordinary worker, took a neighbour's decoding to a
quarter of its speed on 2 cores).

Not at a lower priority: json.loads and pydantic hold the GIL in C, and a low-priority thread
holding it is the one every other thread waits for. Measured on the loaded 2-core machine, parsing a
5.5 MB body of 150k messages took 57 ms of CPU and 5.5 s of wall time at nice 19: the event loop
and the engine would have waited all of it."""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")
_pool = ThreadPoolExecutor(1, thread_name_prefix="localspec-bulk")


async def run(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the bulk thread, after the pieces before it."""
    return await asyncio.wrap_future(_pool.submit(functools.partial(fn, *args)))


def call(fn: Callable[[], T]) -> T:
    """`fn()` on the bulk thread, from another thread that waits for it (a worker's)."""
    if threading.current_thread().name.startswith("localspec-bulk"):
        return fn()
    return _pool.submit(fn).result()
