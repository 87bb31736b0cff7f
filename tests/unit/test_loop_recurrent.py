"""The round on recurrent memories (fake, model-free): targets that roll back through n_rs_seq or
through snapshots and replay, drafts that roll back through snapshots. Greedy output equals plain
decoding exactly (the fake is batch-invariant), alone and four sequences at once; a rollback that
would leave a stale state would change the output (the fake corrupts it, as llama.cpp would)."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.decode.sampling import SamplingParams
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.auto import AutoK
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Scheduler
from localspec.llama.recurrent import RecurrentRollback

from ..fake_backend import FakeContext
from ..fake_recurrent import FakeRecurrentContext, FakeRecurrentMemory, recurrent_tables
from ..helpers import FakeJob, plain_steps, speculative_steps

GREEDY = SamplingParams(temperature=0.0)
V = 12


def target_ctx(kind: str, n_seq: int = 1, seed: int = 3):
    (t, c), _ = recurrent_tables(v=V, seed=seed)
    return FakeRecurrentContext(t, c, n_seq=n_seq, n_rs=16 if kind == "rs" else 0)


def draft_ctx(kind: str, n_seq: int = 1, seed: int = 3, noise: float = 1.0):
    (t, c), (dt, dc) = recurrent_tables(v=V, seed=seed, noise=noise)
    if kind == "attention":  # context-free: agrees where the history matters little
        return FakeContext(dt + dc.mean(axis=0), n_seq=n_seq)
    return FakeRecurrentContext(dt, dc, n_seq=n_seq)  # a recurrent draft: snapshots only


def plain(prompt, n, seed=3):
    out = plain_steps(
        target_ctx("snapshot", seed=seed), prompt, GREEDY, np.random.default_rng(0), Counters(), n
    )
    return [s.token for s in out]


def spec(target, draft, prompt, n, ctl, lookup=False):
    c = Counters()
    steps = speculative_steps(
        target, draft, prompt, GREEDY, SpecConfig(), np.random.default_rng(0), c, ctl, n, lookup=lookup
    )
    return [s.token for s in steps], c


@pytest.mark.parametrize("target_kind", ["rs", "snapshot"])
@pytest.mark.parametrize("draft_kind", ["attention", "snapshot"])
@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_equals_plain_for_every_k(target_kind, draft_kind, k):
    prompt = [1, 5, 2, 7]
    target, draft = target_ctx(target_kind), draft_ctx(draft_kind)
    got, c = spec(target, draft, prompt, 60, FixedK(k))
    assert got == plain(prompt, 60)
    assert 0 < c.n_accepted < c.n_drafted  # both paths ran: acceptances and rejections
    if target_kind == "snapshot":
        assert target.rollback_stats.restores > 0 and target.rollback_stats.drops == 0
    else:
        assert target.rollback_stats.rs_rollbacks > 0 and target.rollback_stats.snapshots == 0
    if draft_kind == "snapshot" and k > 1:  # with one draft, the draft model never decodes one
        assert draft.rollback_stats.restores > 0 and draft.rollback_stats.drops == 0


@pytest.mark.parametrize("target_kind", ["rs", "snapshot"])
def test_auto_k_and_lookup_equal_plain(target_kind):
    prompt = [3, 3, 4, 3, 3, 4, 3, 3]
    got, c = spec(target_ctx(target_kind), draft_ctx("snapshot"), prompt, 80, AutoK(), lookup=True)
    assert got == plain(prompt, 80)


def test_rs_caps_each_draft_at_what_it_can_roll_back():
    (t, c), _ = recurrent_tables(v=V, seed=3)
    target = FakeRecurrentContext(t, c, n_rs=3)
    got, counters = spec(target, draft_ctx("attention"), [1, 2], 40, FixedK(8))
    assert got == plain([1, 2], 40)
    assert max(counters.k_history) <= 3 and target.rollback_stats.drops == 0


def drain(sched):
    for _ in range(10_000):
        if not sched.busy:
            return
        sched.step()
    raise AssertionError("did not finish")


@pytest.mark.parametrize("target_kind", ["rs", "snapshot"])
def test_four_sequences_at_once_each_equal_plain(target_kind):
    target, draft = target_ctx(target_kind, n_seq=4), draft_ctx("snapshot", n_seq=4)
    sched = Scheduler(target, draft, 4)
    prompts = [[1], [2, 3], [4, 5, 6], [7, 8]]
    ctls = [FixedK(1), FixedK(3), FixedK(8), AutoK()]
    jobs = [FakeJob(p, n=40, ctl=ctl) for p, ctl in zip(prompts, ctls)]
    for j in jobs:
        sched.add(j)
    drain(sched)
    for j, p in zip(jobs, prompts):
        assert j.got == plain(p, 40) and j.reason == "length"
    assert any(len(s) == 4 for s in target.decodes)  # rounds shared one target decode


@pytest.mark.parametrize("target_kind", ["rs", "snapshot"])
def test_stop_and_cancel_leave_the_slot_consistent_for_the_next_request(target_kind):
    """A stop token and a cancellation end requests mid-stream; the next requests on the same slots
    (one extending the first's text, so its prefix is reused) still equal plain decoding."""
    target, draft = target_ctx(target_kind, n_seq=2), draft_ctx("snapshot", n_seq=2)
    sched = Scheduler(target, draft, 2)
    ref = plain([1, 2], 40)
    stopper = FakeJob([1, 2], n=40, ctl=FixedK(4), stop_token=ref[6])
    victim = FakeJob([5], n=200, ctl=FixedK(5))
    sched.add(stopper)
    sched.add(victim)
    for _ in range(6):
        sched.step()
    victim.cancel = True
    drain(sched)
    assert stopper.reason == "done" and victim.reason == "cancelled"
    follow = [1, 2, *stopper.got, 9]
    again = [FakeJob(follow, n=30, ctl=FixedK(3)), FakeJob([5, 6], n=30, ctl=FixedK(6))]
    for j in again:
        sched.add(j)
    drain(sched)
    assert again[0].got == plain(follow, 30) and again[1].got == plain([5, 6], 30)


def test_a_snapshot_targets_replay_is_priced_and_can_make_plain_win():
    """Same costs and acceptance; a target that rolls back through snapshots pays a replay verify
    after each rejection, so the tuner drafts less - and at a steep CPU-like curve, not at all."""
    from localspec.draft_len.costs import Costs

    def tuner(replay: bool, slope: float, accept: float = 0.6) -> AutoK:
        costs = Costs.unmeasured(1, 8, replay=replay)
        ctl = AutoK(k_max=8, prior_accept=accept, costs=costs)
        ctl.prime({n: 0.010 * (1 + slope * (n - 1)) for n in range(1, 10)}, 0.0005)
        return ctl

    flat, flat_replay = tuner(False, 0.02), tuner(True, 0.02)
    assert flat_replay.best_k() <= flat.best_k()
    assert flat_replay.expected_rate(3) < flat.expected_rate(3)
    steep, steep_replay = tuner(False, 0.25, 0.4), tuner(True, 0.25, 0.4)
    k = steep.best_k()
    assert steep.expected_rate(k) > steep.expected_rate(0)  # drafting pays when rollback is free ...
    k = steep_replay.best_k()
    assert steep_replay.expected_rate(k) < steep_replay.expected_rate(0)  # ... not with replays


@pytest.mark.parametrize("target_kind", ["rs", "snapshot"])
def test_pq_joint_distribution_is_the_targets(target_kind):
    """pq sampling with K = 2 over 3 tokens, rejections rolled back through rs or snapshots: the
    joint P(t1, t2, t3) is the recurrent target's, whatever the draft (chi-square, p = 0.001)."""
    from localspec.decode.sampling import process

    from ..helpers import chi2

    v, n, trials = 3, 3, 6000
    sp = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
    (t, c), (dt, dc) = recurrent_tables(v=v, seed=11, noise=1.0, scale=1.0)
    counts = np.zeros((v,) * n)
    counters = Counters()
    for s in range(trials):
        target = FakeRecurrentContext(t, c, n_rs=4 if target_kind == "rs" else 0)
        steps = speculative_steps(
            target, FakeRecurrentContext(dt, dc), [0], sp, SpecConfig(mode="pq"),
            np.random.default_rng(s), counters, FixedK(2), max_new=n,
        )  # fmt: skip
        counts[tuple(x.token for x in steps)] += 1
    joint = np.zeros((v,) * n)
    for seq in np.ndindex(*joint.shape):
        p, hist = 1.0, [0]
        for tok in seq:
            row = t[hist[-1]] + c[FakeRecurrentContext._cls(hist)]
            p *= process(row, sp).dense(v)[tok]
            hist.append(tok)
        joint[seq] = p
    assert chi2(counts.ravel(), joint.ravel()) < 54.05  # 26 degrees of freedom
    assert 0.2 < counters.n_accepted / counters.n_drafted < 0.95  # rejections and bonus tokens both


@pytest.mark.parametrize("kind", ["rs", "snapshot"])
def test_prompt_checkpoints_restore_the_nearest_state_still_valid(kind, monkeypatch):
    """A checkpoint restores exactly the tokens it summarised; a truncate below it forgets it; at
    most CHECKPOINTS_PER_SLOT per slot (the oldest goes) and CHECKPOINT_CAP_BYTES per context."""
    from localspec.llama import recurrent

    ctx = target_ctx(kind, n_seq=2)
    ctx.eval(list(range(1, 7)), 0)
    ctx.checkpoint(0)  # at 6
    ctx.eval([7, 1, 2], 6)
    ctx.checkpoint(0)  # at 9
    ctx.eval([3, 4, 5, 6, 7], 9)
    ctx.truncate(8)  # beyond one decode's reach: the checkpoint at 6 serves
    assert ctx.past(0) == 6 and ctx.mem.tokens[0] == list(range(1, 7))
    assert ctx.rollback_stats.checkpoint_restores == 1
    ctx.eval([7, 0], 6)  # the tokens after 6 changed: the checkpoint at 9 was forgotten
    ctx.eval([1, 2, 3], 8)
    ctx.eval([4, 5, 6], 11)
    ctx.truncate(10)  # before the last decode (out of rs's reach); 9 would serve if it were kept
    assert ctx.past(0) == 6
    ctx.truncate(0)  # emptied: no checkpoint left
    assert ctx.rollback_stats.checkpoint_bytes == 0

    monkeypatch.setattr(recurrent, "CHECKPOINTS_PER_SLOT", 2)
    monkeypatch.setattr(recurrent, "CHECKPOINT_CAP_BYTES", 7)  # bytes: tokens in the fake
    ctx.eval([1, 2], 0)
    ctx.checkpoint(0)  # at 2
    ctx.eval([3], 2)
    ctx.checkpoint(0)  # at 3
    ctx.eval([4], 3)
    ctx.checkpoint(0)  # at 4: the one at 2 goes (2 per slot)
    assert ctx.rollback_stats.checkpoint_bytes == 3 + 4
    ctx.eval([5, 6], 0, seq=1)
    ctx.checkpoint(1)  # 2 bytes over the cap: the oldest of any slot (3) goes
    assert ctx.rollback_stats.checkpoint_bytes == 4 + 2
    ctx.eval([5, 6, 7, 1, 2, 3], 4)
    ctx.truncate(3)
    assert ctx.past(0) == 0  # the checkpoint at 3 was evicted, 4 is past the cut: re-evaluated


def test_a_checkpoint_asked_ahead_is_taken_where_a_decode_ends_there():
    """A draft behind the target gets its checkpoint when its catch-up decode ends at the prompt's
    end; a decode that runs past that position takes none (its state is not the prompt's)."""
    ctx = target_ctx("snapshot")
    ctx.eval([1, 2], 0)
    ctx.checkpoint(0, at=5)
    ctx.eval([3, 4, 5], 2)
    assert ctx.rollback_stats.checkpoints == 1
    ctx.eval([6, 7], 5)
    ctx.truncate(6)  # back to the checkpoint at 5 (the snapshot there is the same state)
    assert ctx.past(0) == 5 and ctx.mem.tokens[0] == [1, 2, 3, 4, 5]
    ctx.checkpoint(0, at=7)
    ctx.eval([6, 7, 1], 5)  # ends at 8, not 7
    assert ctx.rollback_stats.checkpoints == 1


def test_checkpoint_marks_double_from_the_first_and_skip_what_is_cached():
    from localspec.engine.scheduler import checkpoint_marks

    assert checkpoint_marks(1000, 0) == [256, 512]
    assert checkpoint_marks(1000, 300) == [512]  # the reused prefix already holds 256
    assert checkpoint_marks(257, 0) == []  # 256 is where the prefill ends: that checkpoint comes anyway
    assert checkpoint_marks(5000, 0) == [256, 512, 1024, 2048, 4096]


@pytest.mark.parametrize("image_rows", [0, 4])
def test_rs_never_steps_back_across_an_mrope_image(image_rows):
    """An M-RoPE image's rows share one position, so llama.cpp's n_rs_seq (a state per token of the
    last decode) cannot undo them: such a rollback restores a saved state or empties the sequence."""
    mem = FakeRecurrentMemory(1, n_rs=8)
    if image_rows:  # the last decode held an image of 4 rows on 1 position
        mem.span = lambda seq, p0, p1: p1 - p0 - (image_rows - 1)
    rb = RecurrentRollback(mem, 1)
    rb.before_decode(0, 0)
    mem.decoded(0, list(range(6)))
    rb.after_decode(0, 6)
    kept = rb.truncate(0, 2, 6)
    assert (kept, rb.stats.rs_rollbacks, rb.stats.drops) == ((0, 0, 1) if image_rows else (2, 1, 0))
