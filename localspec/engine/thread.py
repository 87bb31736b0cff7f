"""The engine thread: it loads the models and then runs every decode. While a second thread's OpenMP
team lives, libgomp cuts its barrier spinning (more OpenMP threads than cores) and each small decode
took ~12% longer, so one thread does all of it: the load's warm-up and calibration included."""

from __future__ import annotations

import collections
import queue
import time
from concurrent.futures import Future
from typing import Callable

from localspec.engine.scheduler import Schedulable, Scheduler
from localspec.errors import LocalspecError

GATHER_S = 0.02  # against prompt passes of 0.1-10 s; a lone request's first token waits this much more
# While jobs decode, `Yielding` commands (embedding passes) take at most this share of the thread: a
# pass of --embed-ctx tokens costs many rounds' time, and three clients' passes run back to back held
# a decoding neighbour to a few tokens a second (issue 60).
YIELDING_SHARE = 0.2


class Yielding:
    """A command that yields to decoding: run when no job is active, else once the rounds since
    the last such command took (1 - YIELDING_SHARE) / YIELDING_SHARE times its cost."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def __call__(self) -> None:
        self.fn()


def load_then_serve(box: list[Callable[[], Scheduler]], loaded: Future, inbox: queue.SimpleQueue) -> None:
    """The engine thread's life: load (the engine's bound method, taken out of `box` so that once
    loaded the thread holds only the scheduler and an engine nobody closed can still be collected),
    then serve."""
    load = box.pop()
    try:
        sched = load()
    except BaseException as e:
        loaded.set_exception(e)
        return
    finally:
        del load
    loaded.set_result(None)
    _serve(sched, inbox)


def _serve(sched: Scheduler, inbox: queue.SimpleQueue) -> None:
    """The engine thread: take new jobs and commands between rounds; run rounds while any job is
    active, else block on the inbox (never spin); on None, fail whatever is left and end."""
    stop = False
    held: collections.deque[Yielding] = collections.deque()  # in order, each at its turn
    turn = 0.0  # monotonic time from which the next held command may run while jobs decode
    while not stop:
        items = [inbox.get()] if not sched.busy and not held else []
        # Requests sent together reach this thread a few ms apart; waiting that long for company lets
        # their prompts share one pass over the weights instead of the first one's taking seconds alone.
        gather_until = time.monotonic() + GATHER_S if items and isinstance(items[0], Schedulable) else 0.0
        while True:
            try:
                wait = gather_until - time.monotonic()
                if wait > 0 and len(sched.free) > 1 + sum(isinstance(i, Schedulable) for i in items):
                    items.append(inbox.get(timeout=wait))
                else:
                    items.append(inbox.get_nowait())
            except queue.Empty:
                break
        for item in items:
            if item is None:
                stop = True
            elif isinstance(item, Schedulable):
                sched.add(item)
            elif isinstance(item, Yielding):
                held.append(item)
            else:
                item()  # a command (clear_cache)
        items = item = None  # held while the next get() blocks, they would keep a finished job alive
        if stop:
            break
        if held and (not sched.busy or time.monotonic() >= turn):
            start = time.monotonic()
            held.popleft()()
            end = time.monotonic()
            turn = end + (end - start) * (1 - YIELDING_SHARE) / YIELDING_SHARE
        try:
            sched.step()
        except BaseException as e:  # a bug of the scheduler's own: no job may wait forever on it, no slot
            sched.abort(e)  # stays taken (the loop would spin on a busy scheduler that cannot move)
    for cmd in held:  # what waits on them is told as before: they run (an embeddings pass fails once closed)
        cmd()
    sched.abort(LocalspecError("the engine was closed"))
