"""The engine thread: it loads the models and then runs every decode. While a second thread's OpenMP
team lives, libgomp cuts its barrier spinning (more OpenMP threads than cores) and each small decode
took ~12% longer, so one thread does all of it: the load's warm-up and calibration included."""

from __future__ import annotations

import queue
import time
from concurrent.futures import Future
from typing import Callable

from localspec.engine.scheduler import Schedulable, Scheduler
from localspec.errors import LocalspecError

GATHER_S = 0.02  # against prompt passes of 0.1-10 s; a lone request's first token waits this much more


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
    while not stop:
        items = [inbox.get()] if not sched.busy else []
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
            else:
                item()  # a command (clear_cache)
        items = item = None  # held while the next get() blocks, they would keep a finished job alive
        if stop:
            break
        try:
            sched.step()
        except BaseException as e:  # a bug of the scheduler's own: no job may wait forever on it, no slot
            sched.abort(e)  # stays taken (the loop would spin on a busy scheduler that cannot move)
    sched.abort(LocalspecError("the engine was closed"))
