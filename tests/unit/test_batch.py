"""Many sequences per round (speculative.decode_round) and the scheduler around it, on the fake
backend: batch-invariant, so every sequence must produce exactly what it produces alone."""

from __future__ import annotations

import time

import numpy as np
import pytest

from localspec.decode.round import decode_round
from localspec.decode.sampling import SamplingParams, process
from localspec.decode.state import SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.auto import AutoK
from localspec.draft_len.batch import plan_batch
from localspec.draft_len.controller import Facts, Outcome
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Scheduler

from ..fake_backend import FakeContext, markov_tables
from ..helpers import FakeJob, drafted, drain, prefill, speculative_steps

GREEDY = SamplingParams(temperature=0.0)


def batch_ks(ctls):
    """Each sequence's K for a round that brings nothing but the sequences (no forced run, no lookup)."""
    return [p.k for p in plan_batch(ctls, [Facts()] * len(ctls))]


def serial(t, d, prompt, k=3, n=20, sp=GREEDY, seed=0, eog=frozenset(), n_ctx=512, mode="pq"):
    steps = speculative_steps(
        FakeContext(t, eog=eog, n_ctx=n_ctx),
        FakeContext(d, eog=eog, n_ctx=n_ctx) if k else None,
        prompt,
        sp,
        SpecConfig(mode=mode),
        np.random.default_rng(seed),
        Counters(),
        FixedK(k),
        max_new=n,
    )
    out = []
    try:
        for s in steps:
            out.append(s.token)
    except Exception:  # ContextFull: what was made until then
        pass
    return out


def test_concurrent_greedy_equals_serial_and_shares_one_target_decode_per_round():
    t, d = markov_tables(v=16, noise=1.5, seed=4)
    target, draft = FakeContext(t, n_seq=4), FakeContext(d, n_seq=4)
    sched = Scheduler(target, draft, 4)
    prompts = [[1], [2, 3], [4, 5, 6], [7]]
    jobs = [FakeJob(p, n=30, k=k) for p, k in zip(prompts, (1, 2, 3, 4))]
    for j in jobs:
        sched.add(j)
    drain(sched)
    for j, p in zip(jobs, prompts):
        assert j.got == serial(t, d, p, k=j.k, n=30), p
        assert j.reason == "length"
    # then every target decode scored all running sequences at once
    assert target.decodes[0] == [1, 2]  # the prompts that needed it, prefilled in one decode
    assert all(sorted(s) == [0, 1, 2, 3] for s in target.decodes[1:6])
    # drafting is batched too: one draft decode per draft position, for every sequence still drafting
    assert max(len(s) for s in draft.decodes) == 4


def test_joins_and_leaves_between_rounds():
    t, d = markov_tables(v=16, noise=1.0, seed=5)
    target, draft = FakeContext(t, n_seq=2), FakeContext(d, n_seq=2)
    sched = Scheduler(target, draft, 2)
    short, long_ = FakeJob([1], n=5), FakeJob([2], n=40)
    sched.add(short)
    sched.add(long_)
    late = FakeJob([3, 4], n=10, k=2)
    sched.add(late)  # waits for a slot: only two
    sched.step()
    assert late in sched.waiting
    drain(sched)
    for j, p in ((short, [1]), (long_, [2]), (late, [3, 4])):
        assert j.got == serial(t, d, p, k=j.k, n=j.n)
    assert sorted(sched.free) == [0, 1]


def test_one_sequence_hits_eog_others_go_on():
    v = 8
    t = np.full((v, v), -5.0)
    for i in range(v - 1):
        t[i, (i + 1) % (v - 1)] = 5.0  # a cycle over 0..6
    t[3, 7], t[3, 4] = 6.0, -5.0  # but 3 -> EOG(7)
    t[5] = -5.0
    t[5, 6] = 5.0
    eog = frozenset({7})
    target, draft = FakeContext(t, n_seq=2, eog=eog), FakeContext(t, n_seq=2, eog=eog)
    sched = Scheduler(target, draft, 2)
    a, b = FakeJob([1], n=20, k=3), FakeJob([4], n=6, k=3)  # a reaches 3 -> EOG, b cycles 4 5 6 0 1 2
    sched.add(a)
    sched.add(b)
    drain(sched)
    assert a.got == [2, 3, 7] and a.reason == "stop"
    assert b.got == [5, 6, 0, 1, 2, 3] and b.reason == "length"


def test_a_stop_string_ends_one_sequence_only():
    t, d = markov_tables(v=12, noise=0.5, seed=6)
    target, draft = FakeContext(t, n_seq=3), FakeContext(d, n_seq=3)
    sched = Scheduler(target, draft, 3)
    ref = serial(t, d, [1], k=4, n=30)
    stopper = FakeJob([1], n=30, k=4, stop_token=ref[5])
    others = [FakeJob([2], n=30, k=4), FakeJob([3], n=30, k=1)]
    for j in (stopper, *others):
        sched.add(j)
    drain(sched)
    assert stopper.reason == "done" and stopper.got[: ref.index(ref[5]) + 1] == ref[: ref.index(ref[5]) + 1]
    for j, p in zip(others, ([2], [3])):
        assert j.got == serial(t, d, p, k=j.k, n=30) and j.reason == "length"


def test_full_context_in_one_sequence_only():
    t, d = markov_tables(v=10, noise=1.0, seed=7)
    target, draft = FakeContext(t, n_seq=2, n_ctx=16), FakeContext(d, n_seq=2, n_ctx=16)
    sched = Scheduler(target, draft, 2)
    full = FakeJob(list(range(10)), n=50, k=4)  # 10 prompt tokens + at most 6 more
    fits = FakeJob([1], n=12, k=4)
    sched.add(full)
    sched.add(fits)
    drain(sched)
    assert full.reason == "context" and len(full.got) == 16 - 10
    assert full.got == serial(t, d, list(range(10)), k=4, n=50, n_ctx=16)
    assert fits.reason == "length" and fits.got == serial(t, d, [1], k=4, n=12, n_ctx=16)


def test_cancel_mid_round_frees_the_slot_within_one_round():
    t, d = markov_tables(v=12, noise=1.0, seed=8)
    target, draft = FakeContext(t, n_seq=2), FakeContext(d, n_seq=2)
    sched = Scheduler(target, draft, 2)
    victim, other = FakeJob([1], n=100, k=3), FakeJob([2], n=40, k=3)
    sched.add(victim)
    sched.add(other)
    for _ in range(3):
        sched.step()
    got_before = list(victim.got)

    def cancel_during_verify(ctx):
        if len(ctx.decodes[-1]) == 2:  # inside the next shared verify decode
            victim.cancel = True
            target.hook = None

    target.hook = cancel_during_verify
    sched.step()  # the round in which it was cancelled: its tokens are not delivered, its slot is free
    assert victim.reason == "cancelled" and victim.got == got_before
    assert victim not in [r[0] for r in sched.running] and len(sched.free) == 1
    drain(sched)
    assert other.got == serial(t, d, [2], k=3, n=40)  # the other stream never noticed


def test_a_waiting_job_cancelled_never_starts():
    t, d = markov_tables(v=8)
    sched = Scheduler(FakeContext(t), FakeContext(d), 1)
    first, queued = FakeJob([1], n=5), FakeJob([2], n=5)
    sched.add(first)
    sched.add(queued)
    sched.step()
    queued.cancel = True
    drain(sched)
    assert queued.reason == "cancelled" and queued.got == [] and first.reason == "length"


def test_prefix_reuse_lands_on_the_slot_holding_the_history():
    t, d = markov_tables(v=16, noise=1.0, seed=9)
    target, draft = FakeContext(t, n_seq=3), FakeContext(d, n_seq=3)
    sched = Scheduler(target, draft, 3)
    a, b = FakeJob([1, 2, 3, 4, 5, 6], n=8), FakeJob([9, 9, 9], n=8)
    sched.add(a)
    sched.add(b)
    drain(sched)
    slot_a = next(i for i, c in enumerate(sched.cached) if c[:6] == [1, 2, 3, 4, 5, 6])
    turn2 = FakeJob([1, 2, 3, 4, 5, 6, *a.got, 3, 3], n=8)  # the next chat turn
    sched.add(turn2)
    sched.step()
    assert sched.running[0][1].seq == slot_a
    drain(sched)
    # the last generated token (never evaluated: generation ended on it) and the two new ones (the
    # second is evaluated by the first round's verify batch)
    assert turn2.counters.n_prefilled == 3
    # the draft's cache ends a token short of the target's (the last round's token it never saw)
    assert turn2.counters.n_draft_prefilled == 4
    assert turn2.got == serial(t, d, turn2.prompt, k=3, n=8)


def test_a_long_prompt_is_prefilled_in_chunks_while_others_stream():
    t, d = markov_tables(v=16, noise=1.0, seed=10)
    target, draft = FakeContext(t, n_seq=2, n_ctx=1024), FakeContext(d, n_seq=2, n_ctx=1024)
    sched = Scheduler(target, draft, 2, prefill_chunk=32)
    running = FakeJob([1], n=60, k=2)
    sched.add(running)
    sched.step()
    sched.step()
    long_prompt = [int(x) for x in np.random.default_rng(0).integers(0, 16, 300)]
    newcomer = FakeJob(long_prompt, n=5)
    sched.add(newcomer)
    before = running.rounds_with_output
    for _ in range(5):  # 300 tokens at 32 a round: still prefilling after five rounds
        sched.step()
    assert running.rounds_with_output == before + 5 and not newcomer.got
    assert max(len(toks) for seq, kind, toks, pos in target.seq_calls if kind == "eval" and seq == 1) <= 32
    # each chunk rode in the running stream's verify decode: one target decode per round, both inside
    assert target.decodes[-5:] == [[0, 1]] * 5
    drain(sched)
    assert newcomer.got == serial(t, d, long_prompt, k=3, n=5)
    assert running.got == serial(t, d, [1], k=2, n=60)


def _long_prompt_alone():
    """Two slots, a prompt alone prefilled 64 tokens a round, and a 300-token prompt."""
    t, d = markov_tables(v=16, noise=1.0, seed=12)
    target, draft = FakeContext(t, n_seq=2, n_ctx=1024), FakeContext(d, n_seq=2, n_ctx=1024)
    sched = Scheduler(target, draft, 2, prefill_alone=64)
    return t, d, target, sched, [int(x) for x in np.random.default_rng(1).integers(0, 16, 300)]


def test_a_long_prompt_alone_is_prefilled_a_batch_a_round_so_a_cancel_is_seen_between_batches():
    t, d, target, sched, long_prompt = _long_prompt_alone()
    left = FakeJob(long_prompt, n=5)
    sched.add(left)
    sched.step()
    assert target.past(0) == 64  # one batch, not the whole prompt
    left.cancel = True  # the client went away during the prefill
    sched.step()
    assert left.reason == "cancelled" and target.past(0) == 64 and sorted(sched.free) == [0, 1]
    again = FakeJob(long_prompt, n=5)  # the same prompt alone runs to the same answer, batch by batch
    sched.add(again)
    drain(sched)
    assert again.got == serial(t, d, long_prompt, k=3, n=5)
    assert max(len(toks) for seq, kind, toks, pos in target.seq_calls if kind == "eval") <= 64


class WithImages(FakeContext):  # takes an image's ids (as a context with a projector does)
    def eval_batch(self, items):  # noqa: ANN001
        out = super().eval_batch([(s, [max(x, 0) for x in toks], p, n) for s, toks, p, n in items])
        for s, toks, p, _ in items:
            self.caches[s][p : p + len(toks)] = toks  # the cache holds the ids it was given
        self.batches.append(items)
        return out

    @property
    def batches(self):  # noqa: ANN201 - every decode's items, as given
        return self.__dict__.setdefault("_batches", [])


def test_a_prefill_chunk_never_ends_inside_an_image():
    """An image's rows (negative ids) go in one decode: a projector may attend across all of them."""
    t, _ = markov_tables(v=16, noise=1.0, seed=13)
    target = WithImages(t, n_seq=1, n_ctx=1024)
    sched = Scheduler(target, None, 1, prefill_alone=64)
    prompt = [1] * 50 + list(range(-1, -41, -1)) + [2] * 100  # the image spans the first batch's end (64)
    sched.add(FakeJob(prompt, n=2, k=0))
    drain(sched)
    starts = sorted(pos for seq, kind, toks, pos in target.seq_calls if kind == "eval")
    assert 64 not in starts and 90 in starts  # the first batch ran on to the image's end


def test_a_newcomers_images_take_turns_beside_running_streams():
    """Beside a stream, a round takes a newcomer's text up to its next image (it rides in the
    stream's decode) or one image run, never more: each image is one decode of its own, and all of
    a prompt's in one round stalled the stream (issue 60). Alone, a prompt goes a batch a round."""
    t, _ = markov_tables(v=16, noise=1.0, seed=14)
    target = WithImages(t, n_seq=2, n_ctx=1024)
    sched = Scheduler(target, None, 2, prefill_chunk=128)
    stream = FakeJob([3, 4, 5], n=40, k=0)
    sched.add(stream)
    sched.step()
    image = [[-(1 + (i << 13) + r) for r in range(8)] for i in range(3)]
    prompt = [1] * 10 + image[0] + [2] * 5 + image[1] + image[2] + [3] * 5
    newcomer = FakeJob(prompt, n=3, k=0)
    sched.add(newcomer)
    drain(sched)
    beside = [dict((s, toks) for s, toks, *_ in items) for items in target.batches if len(items) == 2]
    theirs = [b[1] for b in beside if 1 in b and len(b[1]) > 1]  # the newcomer's prompt chunks
    assert theirs == [[1] * 10, image[0], [2] * 5, image[1], image[2], [3] * 4]
    assert newcomer.got == _alone(t, prompt, 3) and stream.got == serial(t, None, [3, 4, 5], k=0, n=40)


def test_a_causal_images_rows_are_cut_by_the_budget_beside_running_streams():
    """A projector whose image rows attend only backwards (all but Gemma 3's) has them cut between
    decodes as text is (mtmd's helper cuts them by n_batch): beside a stream, a budget a round."""
    t, _ = markov_tables(v=16, noise=1.0, seed=15)
    target = WithImages(t, n_seq=2, n_ctx=1024)
    target.images_whole = False
    sched = Scheduler(target, None, 2, prefill_chunk=3)
    stream = FakeJob([3, 4, 5], n=30, k=0)
    sched.add(stream)
    sched.step()
    image = [-(1 + r) for r in range(8)]
    prompt = [1] * 2 + image + [2] * 3
    newcomer = FakeJob(prompt, n=3, k=0)
    sched.add(newcomer)
    drain(sched)
    beside = [dict((s, toks) for s, toks, *_ in items) for items in target.batches if len(items) == 2]
    theirs = [b[1] for b in beside if 1 in b and len(b[1]) > 1]
    assert theirs == [[1, 1], image[:3], image[3:6], image[6:], [2, 2]]
    assert newcomer.got == _alone(t, prompt, 3)


def _alone(t, prompt, n):  # noqa: ANN001, ANN202 - a job's tokens when it has the backend to itself
    job = FakeJob(prompt, n=n, k=0)
    sched = Scheduler(WithImages(t, n_seq=1, n_ctx=1024), None, 1)
    sched.add(job)
    drain(sched)
    return job.got


def test_the_draft_prefills_only_for_a_sequence_that_drafts():
    t, d = markov_tables(v=16, noise=1.0, seed=12)
    target, draft = FakeContext(t, n_seq=2), FakeContext(d, n_seq=2)
    sched = Scheduler(target, draft, 2)
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, 16, 12)]
    plain = FakeJob(prompt, n=10, ctl=FixedK(0))  # may draft, but the tuner says no: the draft is idle
    sched.add(plain)
    drain(sched)
    assert plain.got == serial(t, d, prompt, k=0, n=10) and not draft.decodes
    spec = FakeJob(prompt, n=10, k=3)  # lands on the same slot: the target's cache is reused
    sched.add(spec)
    drain(sched)
    assert spec.got == serial(t, d, prompt, k=3, n=10)
    evals = [(toks, pos) for seq, kind, toks, pos in draft.seq_calls if kind == "eval"]
    # its first drafting round brings the draft up to the prompt's end in a decode of its own, so
    # the draft steps the tuner times are draft steps
    assert evals[0] == (prompt[:-1], 0) and evals[1] == (prompt[-1:], len(prompt) - 1)


def test_a_chunk_rides_in_the_verify_decode_and_a_catch_up_is_not_a_drafting_cost():
    t, d = markov_tables(v=16, noise=1.0, seed=13)
    target, draft = FakeContext(t, n_seq=2), FakeContext(d, n_seq=2)
    seen = []  # what the running sequence's controller is told about each round

    class Recording(FixedK):
        def observe(self, outcome):
            seen.append(outcome._asdict())

    prompt = [int(x) for x in np.random.default_rng(2).integers(0, 16, 40)]
    a = SeqState.start(0, [1], GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), Recording(2))
    b = SeqState.start(1, prompt, GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), FixedK(2))
    assert decode_round(target, draft, [a], [b], budget=16) == [False]
    assert len(target.decodes) == 1 and seen[-1]["batch_tokens"] == 3 + 16  # a's [last, d1, d2] + chunk
    while not decode_round(target, draft, [a], [b], budget=16)[0]:
        pass
    assert target.past(1) == len(prompt) - 1 and draft.past(1) == 0 and b.counters.prefill_s > 0

    def slow_catch_up(ctx):  # the draft's prompt pass for b, alone in its decode, takes 50 ms
        if ctx.decodes and ctx.decodes[-1] == [1] and ctx.seq_calls[-1][1] == "eval":
            time.sleep(0.05)

    draft.hook = slow_catch_up
    n, prefill_s, draft_s = len(seen), b.counters.prefill_s, b.counters.draft_s
    decode_round(target, draft, [a, b])  # b's first drafting round
    draft.hook = None
    assert b.counters.prefill_s - prefill_s >= 0.05  # b's draft's prompt pass is b's prefill...
    assert b.counters.draft_s - draft_s < 0.05 and a.counters.prefill_s == 0
    assert seen[n]["draft_s"] < 0.05 and seen[n]["round_s"] < 0.05  # ...and not in the tuner's timings
    assert a.tokens[1:] == serial(t, d, [1], k=2, n=len(a.tokens) - 1)
    assert b.tokens[len(prompt) :] == serial(t, d, prompt, k=2, n=len(b.tokens) - len(prompt))


@pytest.mark.parametrize("mode", ["pq", "match"])
def test_two_token_distribution_holds_with_other_sequences_in_the_batch(mode):
    """P(t1, t2) of one sequence equals the target chain's while two others share its rounds."""
    v = 5
    t, d = markov_tables(v=v, noise=1.0, seed=7, scale=1.0)
    sp = SamplingParams(temperature=0.9, top_k=4, top_p=0.95, min_p=0.0)
    counts = np.zeros((v, v))
    trials = 4000
    target, draft = FakeContext(t, n_seq=3), FakeContext(d, n_seq=3)
    for s in range(trials):
        target.reset()
        draft.reset()
        states = [
            SeqState.start(i, p, sp, SpecConfig(mode=mode), np.random.default_rng(s * 3 + i), Counters(), FixedK(k), max_new=n)
            for i, (p, k, n) in enumerate((([0], 3, 2), ([1, 2], 2, 6), ([3], 1, 6)))
        ]  # fmt: skip
        for st in states:
            prefill(target, draft, st)
        while states[0].finish is None:
            decode_round(target, draft, states)
        got = states[0].tokens[1:]
        counts[got[0], got[1]] += 1
    p1 = process(t[0], sp).dense(v)
    joint = np.array([[p1[a] * process(t[a], sp).dense(v)[b] for b in range(v)] for a in range(v)])
    expected = joint.ravel() * trials
    keep = expected > 0
    assert counts.ravel()[~keep].sum() == 0
    chi2 = float(((counts.ravel()[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    assert chi2 < 66.62 * 1.3  # chi-square at p = 0.001 for <= 35 degrees of freedom


def test_each_sequence_keeps_its_own_random_stream():
    """At T > 0 a sequence's output depends on its seed only, not on who shares its rounds."""
    t, d = markov_tables(v=16, noise=0.7, seed=11, scale=1.0)
    sp = SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0)
    alone = serial(t, d, [1], k=3, n=30, sp=sp, seed=42)
    target, draft = FakeContext(t, n_seq=3), FakeContext(d, n_seq=3)
    sched = Scheduler(target, draft, 3)
    jobs = [
        FakeJob([1], n=30, k=3, sp=sp, seed=42),
        FakeJob([5], n=25, k=2, sp=sp, seed=1),
        FakeJob([7], n=9, k=4, sp=sp, seed=2),
    ]
    for j in jobs:
        sched.add(j)
    drain(sched)
    assert jobs[0].got == alone


# ---------------------------------------------------------------------------------------------
# draft length under load


def _tuned(verify, t_draft=0.01, accept_p=0.8, rounds=120):
    ctl = AutoK()
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        k = ctl.plan(Facts()).k
        acc = 0
        while acc < k and rng.random() < accept_p:
            acc += 1
        ctl.observe(drafted(k, acc, t_draft, verify(k + 1)))
    return ctl


def test_batch_drafts_less_when_the_verify_cost_grows_with_the_batch():
    cpu = _tuned(lambda n: 0.113 + 0.0237 * (n - 1))  # this CPU: each extra token costs ~20% of a pass
    solo = cpu.best_k()
    forks = [cpu.fork() for _ in range(4)]
    for f in forks:
        f.costs.probe.clear()
    ks = batch_ks(forks)
    assert sum(ks) < 4 * solo and max(ks) <= solo, (ks, solo)


def test_batch_keeps_drafting_when_verify_is_flat():
    gpu = _tuned(lambda n: 0.020 + 0.0002 * n, t_draft=0.002)
    solo = gpu.best_k()
    forks = [gpu.fork() for _ in range(4)]
    ks = batch_ks(forks)
    assert solo >= 3 and min(ks) >= 3, (ks, solo)  # (forks trust the acceptance less: a bit shorter)


def test_batch_stops_drafting_when_batching_already_uses_the_hardware():
    # verify time proportional to the tokens (a saturated device) and a mediocre draft: drafts only lose
    sat = _tuned(lambda n: 0.05 * n, t_draft=0.01, accept_p=0.5)
    forks = [sat.fork() for _ in range(4)]
    assert batch_ks(forks) == [0, 0, 0, 0]


def test_forks_share_timings_and_keep_acceptance_apart():
    base = _tuned(lambda n: 0.1 + 0.01 * n)
    a, b = base.fork(), base.fork()
    assert a.costs is base.costs and b.costs is base.costs
    a.observe(
        Outcome(
            k=4,
            n_drafted=4,
            n_accepted=0,
            n_emitted=1,
            draft_s=0.04,
            verify_s=0.3,
            round_s=0.35,
            batch_tokens=9,
        )
    )
    assert a.accept_probs()[0] < b.accept_probs()[0]
    assert 9 in base.costs.verify  # the batch's verify timing is the machine's


def test_calibration_times_the_batch_of_a_full_round_of_slots():
    from localspec.draft_len import calibrate

    t, _ = markov_tables(v=8)
    verify, _ = calibrate.measure(FakeContext(t, n_ctx=64), None, [1, 2, 3], max_batch=4, also=[4, 8])
    assert sorted(verify) == [1, 2, 3, 4, 8]  # 8: every one of 4 slots drafting one token


def test_a_full_round_on_the_epyc_curve_runs_plain_though_one_sequence_alone_drafts():
    # calibrated on the 2-core EPYC (stand-in pair): 1..4 and a full round of 4 slots drafting one each
    verify = {1: 0.069, 2: 0.089, 3: 0.113, 4: 0.121, 8: 0.26}
    base = AutoK(k_min=1, k_max=16)
    base.prime(verify, 0.02, acc=[7.0, 5.0], tried=[10.0, 7.0])  # ~70% acceptance
    assert batch_ks([base.fork()]) != [0]  # alone, drafting pays: (1 + 0.7) / 0.109 > 1 / 0.069
    assert batch_ks([base.fork() for _ in range(4)]) == [0, 0, 0, 0]  # 4 / 0.121 beats 6.8 / 0.3


def test_a_batch_whose_plain_cost_was_never_timed_runs_plain_once_to_time_it():
    base = AutoK(k_min=1, k_max=16)
    base.prime({1: 0.069, 2: 0.089, 3: 0.113, 24: 0.64}, 0.02, acc=[9.0, 8.0], tried=[10.0, 9.0])
    forks = [base.fork() for _ in range(8)]
    assert batch_ks(forks) == [0] * 8  # T(8) unknown: measured now, not extrapolated
    for f in forks:  # (a machine where 8 tokens cost far more than 24: drafting must win there)
        f.observe(
            Outcome(
                k=0,
                n_drafted=0,
                n_accepted=0,
                n_emitted=1,
                draft_s=0,
                verify_s=2.0,
                round_s=2.0,
                batch_tokens=8,
            )
        )
    assert base.costs.verify[8].value == 2.0 and any(batch_ks(forks))  # now the measured costs decide


def test_a_prefill_reports_its_progress_after_admission_and_each_batch():
    _, _, _, sched, long_prompt = _long_prompt_alone()
    first = FakeJob(long_prompt, n=5)
    sched.add(first)
    drain(sched)
    assert first.prefilled_to == [0, 64, 128, 192, 256, 300]  # nothing cached, then a batch a round
    again = FakeJob(long_prompt[:200] + [1] * 100, n=5)  # its first 200 tokens are cached
    sched.add(again)
    drain(sched)
    assert again.prefilled_to[0] == 200 and again.prefilled_to[-1] == 300
    assert again.prefilled_to == sorted(again.prefilled_to) and len(again.prefilled_to) == 3
