"""The history source (decode/history.py, decode/sources/history.py): what a model read and wrote in
earlier requests drafts for the next one where its own lookup finds nothing - lossless, counted
under its own name, priced by the tuner, its memory capped (oldest out), one per engine, and off
unless a setting turns it on."""

from __future__ import annotations

import numpy as np

from localspec.config.settings import Settings
from localspec.decode.history import History
from localspec.decode.lookup import N_MAX
from localspec.decode.sampling import SamplingParams
from localspec.decode.sources import remembered
from localspec.decode.state import SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.auto import AutoK
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Schedulable, Scheduler

from ..fake_backend import FakeContext, markov_tables
from ..helpers import drain, plain

GREEDY = SamplingParams(temperature=0.0)


def test_a_match_in_an_earlier_sequence_proposes_its_continuation():
    h = History(cap=1000)
    h.add([9, 1, 2, 3, 4, 5, 6, 7])
    assert h.propose([0, 0, 2, 3, 4], 3) == ([5, 6, 7], 3)  # the suffix 2 3 4 matched, 3 long
    assert h.propose([8, 8], 3) == ([], 0)  # nothing recurs
    h.add([1, 2, 3, 4, 5, 6, 0])  # 4 5 6 went on otherwise here: the proposal stops before it
    assert h.propose([3, 4], 3) == ([5, 6], 2)
    h.add([5, 6, -1, -1])  # an image's ids end a proposal
    assert h.propose([5, 6], 4) == ([], 0)


MARKER = [90, 91, 92, 93]  # a run every request shares: a chat template's turn markers


def test_a_context_whose_continuations_disagree_offers_nothing():
    h = History(cap=1000)
    h.add([1, 2, *MARKER, 10, 11])  # one answer began 10 11
    assert h.propose([5, *MARKER], 2) == ([10, 11], 4)  # seen once: nothing contradicts it yet
    h.add([3, 4, *MARKER, 20, 21])  # the next began otherwise
    assert h.propose([5, *MARKER], 2) == ([], 0)  # the latest predicts the next no better than chance
    h.add([6, 7, *MARKER, 20, 22])  # two in a row began alike, and went on otherwise
    assert h.propose([5, *MARKER], 3) == ([20], 4)  # as far as the history agrees with itself
    h.add([8, 9, *MARKER, 20, 22, 30])
    assert h.propose([5, *MARKER], 3) == ([20, 22, 30], 4)


def test_its_memory_holds_its_cap_under_ten_thousand_requests():
    rng = np.random.default_rng(0)
    h = History(cap=5000)
    first = [int(t) for t in rng.integers(0, 50_000, 40)]
    h.add(first)
    for _ in range(10_000):
        h.add([int(t) for t in rng.integers(0, 50_000, int(rng.integers(4, 120)))])
        assert h.size <= 5000
    assert len(h._index) <= N_MAX * 5000  # the index goes with the sequences it pointed into
    assert h.propose(first[:10], 4) == ([], 0)  # the oldest are out


class Job(Schedulable):
    def __init__(self, prompt, n, ctl):  # noqa: ANN001
        self.prompt, self.n, self.ctl, self.got, self.state = list(prompt), n, ctl, [], None

    def start(self, seq: int) -> SeqState:
        self.state = SeqState.start(
            seq, self.prompt, GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), self.ctl,
            max_new=self.n, speculative=True, lookup=True,
        )  # fmt: skip
        return self.state

    def deliver(self, steps) -> bool:  # noqa: ANN001
        self.got += [s.token for s in steps]
        return True


def _serve(sched, t, prompts, ctl):  # noqa: ANN001, ANN202
    jobs = []
    for prompt in prompts:
        job = Job(prompt, 30, ctl())
        sched.add(job)
        drain(sched)
        assert job.got == plain(t, prompt, n=30)  # lossless: greedy output is the target's own
        jobs.append(job)
    return [j.state.counters.sources.get("history") for j in jobs]


def test_a_repeated_request_drafts_from_history_and_stays_lossless():
    t, d = markov_tables(v=32, noise=1.0, seed=5)
    prompts = [[1, 2, 3], [1, 2, 3], [7, 8], [1, 2, 3]]
    on = Settings(history_tokens=4096)
    assert remembered(Settings()) == {}  # off by default

    sched = Scheduler(FakeContext(t), FakeContext(d), 1, kept=remembered(on))
    got = _serve(sched, t, prompts, lambda: FixedK(4))
    assert got[0] is None  # nothing remembered yet
    assert got[1].drafted > 0 and got[1].accepted > 0 and got[3].accepted > 0

    lookup_only = Scheduler(FakeContext(t), None, 1, kept=remembered(on))  # no draft model: offers alone
    got = _serve(lookup_only, t, prompts, lambda: FixedK(4, has_model=False))
    assert got[1].accepted > 0

    other = Scheduler(FakeContext(t), FakeContext(d), 1, kept=remembered(on))  # another model's engine
    assert _serve(other, t, prompts[:1], lambda: FixedK(4)) == [None]  # remembers nothing of the first


def test_the_tuner_prices_history_under_its_own_name():
    t, d = markov_tables(v=32, noise=1.0, seed=5)
    tuner = AutoK(k_max=8, has_model=False)
    tuner.prime({n: 0.01 * (1 + 0.1 * n) for n in range(1, 12)}, None)
    sched = Scheduler(FakeContext(t), None, 1, kept=remembered(Settings(history_tokens=4096)))
    forks = []

    def fork():  # noqa: ANN202
        forks.append(tuner.fork())
        return forks[-1]

    _serve(sched, t, [[1, 2, 3]] * 3, fork)
    # learned under its name, apart from the lookup's (drafted, or judged where the lookup led)
    assert {"lookup", "history"} <= set(forks[-1].evidence.offers)
    kept, tried = forks[-1].evidence.offer_evidence("history")
    assert tried.sum() > 0 and kept.sum() > 0


def test_a_shared_marker_with_unlike_answers_costs_a_fixed_k_nothing():
    """One-off chats share only the template's turn markers: what followed them last time is
    another answer's start. Under a fixed K a long enough match leads the round, so a history that
    offered it would cost a rejected round (the drafter, the target itself here, would have kept
    all K)."""
    t, _ = markov_tables(v=96, noise=1.0, seed=5)
    prompt = [1, 2, *MARKER]
    runs = []
    for on in (False, True):
        kept = remembered(Settings(history_tokens=4096 if on else 0))
        for h in kept.values():  # earlier requests: each answer after the markers began otherwise
            for i in range(3):
                h.add([40 + i, 50 + i, *MARKER, 60 + i, 70 + i, 80 + i])
        sched = Scheduler(FakeContext(t), FakeContext(t), 1, kept=kept)
        job = Job(prompt, 30, FixedK(4))
        sched.add(job)
        drain(sched)
        assert job.got == plain(t, prompt, n=30)
        c = job.state.counters
        runs.append((c.rounds + c.plain_steps, c.sources.get("history")))
    (off, _), (on, history) = runs
    assert on == off  # target passes
    assert history is None or history.drafted == 0
