"""Work that yields to decoding (an embeddings pass) takes its turn on the engine thread: while jobs
decode, such commands get at most YIELDING_SHARE of the thread, rounds running between them; with
nothing decoding they run back to back (issue 60: three embedding clients' passes, run back to back,
held a decoding neighbour to a few tokens a second)."""

from __future__ import annotations

import queue
import threading
import time

from localspec.engine.thread import YIELDING_SHARE, Yielding, _serve

PASS_S = 0.03  # an embeddings pass's cost, here a sleep
ROUND_S = 0.002


class Rounds:
    """A scheduler whose one job (if `decoding`) runs rounds of ROUND_S each until the engine
    closes; it books when each ran."""

    def __init__(self, decoding: bool) -> None:
        self.busy, self.free = decoding, [1]
        self.ran: list[float] = []

    def step(self) -> None:
        if self.busy:
            time.sleep(ROUND_S)
            self.ran.append(time.monotonic())

    def abort(self, error: BaseException) -> None:
        self.busy = False


def _run(sched: Rounds, n: int) -> list[tuple[float, float]]:
    """n yielding commands of PASS_S each through the engine thread's loop: when each ran."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    spans: list[tuple[float, float]] = []
    done = threading.Semaphore(0)

    def cmd() -> None:
        start = time.monotonic()
        time.sleep(PASS_S)
        spans.append((start, time.monotonic()))
        done.release()

    thread = threading.Thread(target=_serve, args=(sched, inbox), daemon=True)
    thread.start()
    for _ in range(n):
        inbox.put(Yielding(cmd))
    for _ in range(n):
        assert done.acquire(timeout=30), "a yielding command never ran"
    inbox.put(None)
    thread.join(10)
    assert not thread.is_alive()
    return spans


def test_beside_a_decoding_job_each_pass_waits_for_rounds_worth_four_times_its_cost():
    sched = Rounds(decoding=True)
    spans = _run(sched, 3)
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        gap, cost = s1 - e0, e0 - s0
        assert gap >= cost * (1 - YIELDING_SHARE) / YIELDING_SHARE * 0.99, (gap, cost)
        assert sum(e0 < t < s1 for t in sched.ran) >= 2, "no rounds ran between two passes"


def test_with_nothing_decoding_passes_run_back_to_back():
    spans = _run(Rounds(decoding=False), 3)
    for (_, e0), (s1, _) in zip(spans, spans[1:]):
        assert s1 - e0 < PASS_S, "an idle engine held a pass back"
