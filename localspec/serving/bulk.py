"""Work that grows with what a client sends - a large body's parse, a long prompt's render and
tokenizing, a client's own tokenize - runs on one thread, one piece at a time, and over a flood at
most a tenth of a core's time (`_Turns`; a large body's reading on the event loop counts in it too):
the engine's decoding keeps the rest (issue 60: three
clients of 7.8 MB bodies, each parsed and refused on an ordinary worker, took a neighbour's decoding
to a quarter of its speed on 2 cores; on this one thread without turns, to 0.19-0.27 of it).

Not at a lower priority: json.loads and pydantic hold the GIL in C, and a low-priority thread
holding it is the one every other thread waits for. Measured on the loaded 2-core machine, parsing a
5.5 MB body of 150k messages took 57 ms of CPU and 5.5 s of wall time at nice 19: the event loop
and the engine would have waited all of it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable, TypeVar

T = TypeVar("T")
_pool = ThreadPoolExecutor(1, thread_name_prefix="localspec-bulk")
# Over a flood the thread takes turns: at most SHARE of a core's time, BURST_S of work at once (one
# client's large body, render and tokenize never wait). Three clients sending 7.8 MB bodies, each
# refused in 30-40 ms, kept a core busy under the GIL and a decoding neighbour at a fifth of its speed
# (issue 60); a smaller switch interval did not help (json.loads holds the GIL for the whole call).
# A fifth left the neighbour 0.58-0.80 under 7.8 MB bodies and 60k-item ones; a tenth 0.77-0.94.
SHARE = 0.1
BURST_S = 1.0


class _Turns:
    """The bulk work's credit of CPU seconds: it grows by SHARE a second up to BURST_S, a piece
    spends its CPU time, and a piece that finds it below zero first waits for it to be zero. The
    bulk thread's pieces and the event loop's reading of large bodies (`turn`, `spend`) share it."""

    def __init__(self) -> None:
        self.credit, self.at = BURST_S, time.monotonic()
        self._lock = threading.Lock()

    def wait_s(self) -> float:
        """How long the next piece waits for its turn."""
        with self._lock:
            now = time.monotonic()
            self.credit, self.at = min(BURST_S, self.credit + (now - self.at) * SHARE), now
            return max(0.0, -self.credit / SHARE)

    def spend(self, cpu_s: float) -> None:
        self.wait_s()  # the credit grown to now
        with self._lock:
            self.credit -= cpu_s

    def __call__(self, fn: Callable[[], T]) -> T:
        if (wait := self.wait_s()) > 0:
            time.sleep(wait)  # once: the credit is then zero (to within a rounding)
        cpu = time.thread_time()
        try:
            return fn()
        finally:
            self.spend(time.thread_time() - cpu)


_turns = _Turns()
_reading = threading.Lock()  # held while a large body is read in the bulk work's turn (`turn`)
READ_POLL_S = 0.02  # how often a body waiting to be read looks again


@contextlib.asynccontextmanager
async def turn(most_s: float) -> AsyncIterator[None]:
    """Hold, on the event loop, the bulk work's turn, waiting `most_s` at most for it: a large body
    is read in it (its reading costs the event loop as much as its parse costs the bulk thread), one
    body at a time, and `spend` what it cost. (Each waiting for the credit alone, three clients'
    bodies were all read at once when it came, each overdrawing it.)"""
    deadline = time.monotonic() + most_s
    held = _reading.acquire(blocking=False)
    while not held and time.monotonic() < deadline:  # the event loop's: polled, never blocked on
        await asyncio.sleep(READ_POLL_S)
        held = _reading.acquire(blocking=False)
    try:
        if (wait := min(_turns.wait_s(), deadline - time.monotonic())) > 0:
            await asyncio.sleep(wait)
        yield
    finally:
        if held:
            _reading.release()


def spend(cpu_s: float) -> None:
    _turns.spend(cpu_s)


async def run(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the bulk thread, after the pieces before it, in its turn."""
    return await asyncio.wrap_future(_pool.submit(_turns, functools.partial(fn, *args)))


def call(fn: Callable[[], T]) -> T:
    """`fn()` on the bulk thread, in its turn, from another thread that waits for it (a worker's)."""
    if threading.current_thread().name.startswith("localspec-bulk"):
        return fn()
    return _pool.submit(_turns, fn).result()
