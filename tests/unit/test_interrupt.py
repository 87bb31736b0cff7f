"""A cancel interrupts the decode it leaves with nobody waiting on (Scheduler.cancelled and its
stop; llama/interrupt.py is the real one), on the fake backend: the interrupted decode's entries are
dropped, the slot is free in that same step, and a live job caught in an interrupted round (a race)
has its round run again, its output unchanged."""

from __future__ import annotations

import numpy as np

from localspec.engine.scheduler import Scheduler
from localspec.errors import Interrupted

from ..fake_backend import FakeContext, markov_tables
from ..helpers import FakeJob, drain
from .test_batch import serial


class Flag:
    def __init__(self) -> None:
        self.on = False

    def set(self) -> None:
        self.on = True

    def clear(self) -> None:
        self.on = False


class Interruptible(FakeContext):
    """As llama.Context with its abort callback: a decode that finds the flag set drops what it
    added and raises Interrupted (llama.cpp drops the aborted ubatch's entries)."""

    def __init__(self, *args, flag: Flag, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.flag = flag

    def eval_batch(self, items):  # noqa: ANN001
        before = {seq: len(self.caches[seq]) for seq, *_ in items}
        out = super().eval_batch(items)  # the hook (a cancel) runs inside it
        if self.flag.on:
            for seq, n in before.items():
                del self.caches[seq][n:]
            raise Interrupted("the decode was interrupted")
        return out


def _pair(flag: Flag, n_seq: int = 2):
    t, d = markov_tables(v=16, noise=1.0, seed=12)
    target = Interruptible(t, n_seq=n_seq, n_ctx=1024, flag=flag)
    draft = Interruptible(d, n_seq=n_seq, n_ctx=1024, flag=flag)
    return t, d, target, draft


def test_a_cancel_interrupts_a_prefill_alone_and_frees_the_slot_in_that_step():
    flag = Flag()
    t, d, target, draft = _pair(flag)
    sched = Scheduler(target, draft, 2, prefill_alone=64, stop=flag)
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, 16, 300)]
    left = FakeJob(prompt, n=5)
    sched.add(left)
    sched.step()
    assert target.past(0) == 64

    def client_leaves(ctx):  # inside the next prefill decode
        target.hook = None
        left.cancel = True
        sched.cancelled()

    target.hook = client_leaves
    sched.step()
    assert left.reason == "cancelled" and sorted(sched.free) == [0, 1] and not sched.busy
    assert target.past(0) == 64  # the interrupted batch's entries are gone, the one before is kept
    assert not flag.on  # cleared once the round is over: the next request's decodes run
    again = FakeJob(prompt, n=5)
    sched.add(again)
    drain(sched)
    assert again.got == serial(t, d, prompt, k=3, n=5)


def test_a_cancel_beside_a_live_job_does_not_interrupt_its_round():
    flag = Flag()
    t, d, target, draft = _pair(flag)
    sched = Scheduler(target, draft, 2, stop=flag)
    victim, other = FakeJob([1], n=100, k=3), FakeJob([2], n=40, k=3)
    sched.add(victim)
    sched.add(other)
    sched.step()

    def cancel_during_verify(ctx):
        if len(ctx.decodes[-1]) == 2:
            target.hook = None
            victim.cancel = True
            sched.cancelled()
            assert not flag.on  # `other` still waits on this decode

    target.hook = cancel_during_verify
    sched.step()
    assert victim.reason == "cancelled"
    drain(sched)
    assert other.got == serial(t, d, [2], k=3, n=40)


def test_a_live_job_in_an_interrupted_round_has_it_run_again():
    """The race: a cancel interrupts a round that a job just admitted (live) rides in."""
    flag = Flag()
    t, d, target, draft = _pair(flag)
    sched = Scheduler(target, draft, 2, stop=flag)
    live = FakeJob([3, 4, 5], n=30, k=3)
    sched.add(live)
    for _ in range(3):
        sched.step()
    hits = []

    def stale_stop(ctx):  # every third decode finds the flag set, as a late cancel would leave it
        hits.append(1)
        if len(hits) % 3 == 0:
            flag.set()

    target.hook = stale_stop
    drain(sched)
    assert live.reason == "length" and live.got == serial(t, d, [3, 4, 5], k=3, n=30)
    assert len(hits) > 3
