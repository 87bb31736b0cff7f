"""--cache-reuse (chunk_reuse.py and the scheduler's admission), on the fake backend, whose logits
depend on the token alone: a prompt whose start was cut keeps its moved runs (not evaluated again),
and its output is what it is without the reuse."""

from __future__ import annotations

from localspec.chunk_reuse import Move, plan
from localspec.engine.scheduler import Scheduler

from ..fake_backend import FakeContext, markov_tables
from ..helpers import FakeJob, drain
from .test_batch import serial


def test_the_plan_moves_runs_back_over_cut_text_and_skips_short_ones():
    held = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert plan(held, [1, 2, 5, 6, 7, 8, 0], 3) == (2, [Move(4, 2, 4)], 6)  # 3, 4 cut: 5..8 move back
    assert plan(held, [1, 2, 5, 6, 0], 3) == (2, [], 2)  # a run of 2: below n_min
    assert plan(held, [1, 2, 5, 6, 7, 9, 10], 2) == (2, [Move(4, 2, 3), Move(8, 5, 2)], 7)
    assert plan(held, [1, 2, 5, 6, 7, 8], 3, fixed=5) == (2, [], 2)  # 5 sits in a shared cell: it stays
    assert plan(held, held, 3) == (10, [], 10)


def test_a_file_whose_start_left_the_window_reuses_the_rest_and_answers_the_same():
    t, d = markov_tables(v=16, noise=1.0, seed=5)
    target, draft = FakeContext(t, n_seq=1, n_ctx=512), FakeContext(d, n_seq=1, n_ctx=512)
    sched = Scheduler(target, draft, 1, cache_reuse=8)
    head, body = [1, 2, 3], [int(x % 16) for x in range(7, 207)]
    first = FakeJob(head + [4] * 30 + body, n=6)
    sched.add(first)
    drain(sched)
    moved = head + body + [5, 6]  # the next keystroke: 30 lines cut after the header, two tokens typed
    again = FakeJob(moved, n=6)
    sched.add(again)
    drain(sched)
    assert again.prefilled_to[0] == len(head + body)  # the body was moved, not evaluated again
    assert again.counters.n_prefilled <= 3
    assert again.got == serial(t, d, moved, k=3, n=6)
