"""The round's stopwatch and tally: the phases mark their boundaries, the draft source times its
decodes and tallies its prompt work through it; only the record phase (record.py) turns them into
counters and observations."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Clock:
    __slots__ = ("marks", "spent", "caught", "draft_prompt", "done")

    def __init__(self) -> None:
        self.marks: dict[str, float] = {"start": time.perf_counter()}
        self.spent: dict[str, float] = {"draft": 0.0, "catch": 0.0}  # inside the draft's decodes
        self.caught: dict = {}  # SeqState -> tokens the draft caught up on, charged as prefill
        self.draft_prompt: dict = {}  # SeqState -> prompt positions the draft evaluated (its prefill)
        self.done: list[float] = []  # when each sequence's own accept work ended, in order

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def timed(self, what: str, fn: Callable[..., T], *args: object) -> T:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.spent[what] += time.perf_counter() - t0

    def seq_done(self) -> None:
        self.done.append(time.perf_counter())

    def since(self, name: str) -> float:
        return time.perf_counter() - self.marks[name]
