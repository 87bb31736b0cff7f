"""Prefix sharing across slots (engine/sharing.py) on the fake backend: n choices of one prompt
prefill it once in the target and once in the draft, a request sharing a prefix with a running slot
copies it, and every output equals the same job run alone (the fake is batch-invariant)."""

from __future__ import annotations

import numpy as np

from localspec.decode.sampling import SamplingParams
from localspec.engine.scheduler import Scheduler
from localspec.engine.sharing import Sharing

from ..fake_backend import FakeContext, markov_tables
from ..fake_recurrent import FakeRecurrentContext
from ..helpers import FakeJob, drain

SAMPLED = SamplingParams(temperature=1.0)


def pair(seed, n_seq, n_ctx=1024):
    t, d = markov_tables(v=16, noise=1.0, seed=seed)
    return t, d, FakeContext(t, n_seq=n_seq, n_ctx=n_ctx), FakeContext(d, n_seq=n_seq, n_ctx=n_ctx)


def alone(t, d, job):
    """What the job makes alone, in a fresh one-slot scheduler."""
    twin = FakeJob(job.prompt, n=job.n, k=job.k, sp=job.sp, seed=job.seed)
    sched = Scheduler(FakeContext(t, n_ctx=1024), FakeContext(d, n_ctx=1024), 1)
    sched.add(twin)
    drain(sched)
    return twin.got


def evaluated(ctx, below, seq=None):
    """Tokens the context decoded at positions < below, in sequence `seq` (None: every one)."""
    return sum(
        sum(1 for i in range(len(toks)) if pos + i < below)
        for s, kind, toks, pos in ctx.seq_calls
        if kind == "eval" and seq in (None, s)
    )


def prompt_of(n, seed=0):
    return [int(x) for x in np.random.default_rng(seed).integers(0, 16, n)]


def test_n_choices_prefill_the_prompt_once_in_target_and_draft():
    t, d, target, draft = pair(1, 3)
    sched = Scheduler(target, draft, 3)
    prompt = prompt_of(40)
    jobs = [FakeJob(prompt, n=25, sp=SAMPLED, seed=7 + i) for i in range(3)]
    for j in jobs:
        sched.add(j)
    drain(sched)
    outs = [j.got for j in jobs]
    assert outs == [alone(t, d, j) for j in jobs]
    assert len({tuple(o) for o in outs}) == 3  # three seeds, three choices
    # the prompt's first len-1 positions were evaluated once in each model, then copied twice
    assert evaluated(target, len(prompt) - 1) == len(prompt) - 1
    assert evaluated(draft, len(prompt) - 1) == len(prompt) - 1
    copies = [(seq, c) for seq, kind, *c in target.seq_calls if kind == "copy"]
    assert len(copies) == 2 and all(n == len(prompt) - 1 for (_, (_, n)) in copies)
    assert len([c for c in draft.seq_calls if c[1] == "copy"]) == 2
    # the counters say so: the first choice prefilled the prompt, the others only the token their
    # first verify batch evaluates
    assert sorted(j.counters.n_prefilled for j in jobs) == [1, 1, len(prompt)]


def test_a_later_request_copies_the_prefix_a_running_slot_holds():
    t, d, target, draft = pair(2, 2)
    sched = Scheduler(target, draft, 2)
    system = prompt_of(60, seed=1)
    first = FakeJob(system + [3, 4], n=40)
    sched.add(first)
    for _ in range(4):
        sched.step()
    assert first.got and sched.running  # running, its draft caught up
    later = FakeJob(system + [9, 9, 1], n=10)
    sched.add(later)
    sched.step()
    assert (1, "copy", 0, 60) in target.seq_calls and (1, "copy", 0, 60) in draft.seq_calls
    drain(sched)
    assert later.got == alone(t, d, later) and first.got == alone(t, d, first)
    assert later.counters.n_prefilled == 3  # the two tokens after the shared 60, and its first verify's
    # the running one's own rollbacks never touched what the other slot was given
    assert evaluated(draft, 60) == 60


def test_a_choice_waits_for_a_chunked_prefill_then_copies_what_it_shares():
    t, d, target, draft = pair(3, 3)
    sched = Scheduler(target, draft, 3, prefill_chunk=16)
    streaming = FakeJob([5], n=80, k=2)
    sched.add(streaming)
    sched.step()
    shared = prompt_of(100, seed=2)
    leader, follower = FakeJob(shared + [1, 2], n=6), FakeJob(shared + [7, 7, 7, 7], n=6)
    sched.add(leader)
    sched.add(follower)
    sched.step()
    assert follower in sched.waiting  # the leader will hold the common 100 tokens in a few rounds
    drain(sched)
    assert follower.got == alone(t, d, follower) and leader.got == alone(t, d, leader)
    assert [c[2:] for c in target.seq_calls if c[1] == "copy"] == [(1, 100)]  # from the leader's slot
    assert follower.counters.n_prefilled == 4  # what it does not share (the last in its first verify)
    dst = next(c[0] for c in target.seq_calls if c[1] == "copy")
    assert evaluated(target, 100, seq=dst) == 0 and evaluated(target, 100, seq=1) == 100


def test_jobs_behind_a_waiting_choice_take_only_the_slots_it_leaves():
    t, d, target, draft = pair(4, 2)
    sched = Scheduler(target, draft, 2, prefill_chunk=8)
    prompt = prompt_of(30, seed=3)
    a, b, other = FakeJob(prompt, n=5, seed=1), FakeJob(prompt, n=5, seed=2), FakeJob([4, 4], n=5)
    for j in (a, b, other):
        sched.add(j)
    sched.step()  # a prefills its whole prompt alone (nothing streams): b waits one round, other behind it
    assert list(sched.waiting) == [b, other]
    sched.step()
    assert list(sched.waiting) == [other]  # b took the second slot, copying a's prompt
    drain(sched)
    assert [a.got, b.got, other.got] == [alone(t, d, j) for j in (a, b, other)]


def test_slots_keep_what_their_caches_hold_after_sharing():
    t, d, target, draft = pair(5, 3)
    sched = Scheduler(target, draft, 3)
    base = prompt_of(20, seed=4)
    for i, tail in enumerate(([1], [2, 2], [3, 3, 3], [1, 5], [6])):
        sched.add(FakeJob(base + tail, n=8 + i, seed=i))
    drain(sched)
    for slot in range(3):
        assert target.caches[slot] == sched.cached[slot]
        assert draft.caches[slot] == sched.cached[slot][: len(draft.caches[slot])]
    nxt = FakeJob(base + [2, 2, 0], n=8)  # each slot still serves a next turn correctly
    sched.add(nxt)
    drain(sched)
    assert nxt.got == alone(t, d, nxt)


def test_a_recurrent_memory_shares_nothing():
    t, d = markov_tables(v=16, noise=1.0, seed=6)
    ctx_table = np.random.default_rng(0).normal(size=(7, 16))
    target = FakeRecurrentContext(t, ctx_table, n_seq=2, n_rs=16)
    draft = FakeContext(d, n_seq=2)
    assert not Sharing(target, draft).on  # one state per sequence: nothing to copy a prefix of
    assert Sharing(FakeContext(t, n_seq=2), draft).on
    sched = Scheduler(target, draft, 2)
    prompt = prompt_of(12, seed=5)
    jobs = [FakeJob(prompt, n=6, seed=i) for i in range(2)]
    for j in jobs:
        sched.add(j)
    drain(sched)
    assert not any(kind == "copy" for _, kind, *_ in draft.seq_calls)
    assert all(j.reason == "length" for j in jobs)
