"""Writes handed to a thread of their own, batched and bounded.

Whatever a request path writes to disk (the acceptance log, the tuner memory) goes through here:
`put(item)` takes a lock and appends, never touches a file, so neither the server's event loop nor
the engine thread ever waits on a disk (or on a FIFO someone named as the log). The writer thread
gathers for `interval` seconds from the first item, then hands `write(items)` the batch (a flush
cuts the wait short). At most
`max_items` wait; past that new ones are dropped and counted (`dropped`): a disk that cannot keep
up must not grow memory without end. What is pending is written at exit, within EXIT_WAIT_S.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from typing import Callable, Generic, TypeVar

T = TypeVar("T")
EXIT_WAIT_S = 5.0  # a stuck disk must not hold the process at exit longer than this


class Deferred(Generic[T]):
    def __init__(
        self, write: Callable[[list[T]], None], *, name: str, interval: float = 0.2, max_items: int = 1000
    ) -> None:
        self._write, self._name = write, name
        self.interval, self.max_items = interval, max_items
        self.dropped = 0
        self._items: list[T] = []
        self._cond = threading.Condition()
        self._busy = False  # the thread holds a batch it is writing
        self._flushing = 0  # callers waiting in flush(): write now, do not gather
        self._thread: threading.Thread | None = None
        _LIVE.add(self)

    def put(self, item: T) -> bool:
        """Queue item for the writer thread; False (and counted) when max_items already wait."""
        with self._cond:
            if len(self._items) >= self.max_items:
                self.dropped += 1
                return False
            self._items.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far is written; False if `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._items or self._busy:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._flushing -= 1
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                self._cond.wait_for(lambda: self._flushing, timeout=self.interval)  # gather
                batch, self._items, self._busy = self._items, [], True
            try:
                self._write(batch)
            except Exception:  # noqa: BLE001, S110 - write() reports its own failures; the thread must live
                pass
            with self._cond:
                self._busy = False
                self._cond.notify_all()


_LIVE: "weakref.WeakSet[Deferred]" = weakref.WeakSet()


@atexit.register
def _flush_all() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    for d in list(_LIVE):
        d.flush(max(0.0, deadline - time.monotonic()))
