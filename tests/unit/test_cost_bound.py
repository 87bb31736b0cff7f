"""A request's cost bound (#48): one request's knobs multiplied the engine's work per token 10-25x.
A fixed K is drafted and verified whatever it costs: at K = 64 with the drafts rejected a round is
64 draft steps and a 65-token verify for one token. The bound caps the request's drafts to what its
emitted tokens pay for; the text stays the same. Rounds run on the fake backend under a fake clock
that each decode advances by a cost model (a CPU-like verify: linear in its tokens)."""

from __future__ import annotations

import time
import types

import numpy as np
import pytest

from localspec.decode import clock as clock_mod
from localspec.decode.sampling import Penalties
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.cost_bound import CostBound
from localspec.draft_len.fixed import FixedK
from tests.fake_backend import FakeContext, markov_tables
from tests.helpers import GREEDY, speculative_steps

T_TOKEN = 0.010  # seconds a verified token costs (a CPU: a verify of n tokens costs n of them)
T_DRAFT = 0.004  # a draft step


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class Timed(FakeContext):
    """A fake context whose decodes take time on the clock: `per_token` a token, at least `floor`."""

    def __init__(self, table, clock: Clock, per_token: float, floor: float = 0.0, **kw) -> None:
        super().__init__(table, **kw)
        self.clock, self.per_token, self.floor = clock, per_token, floor

    def eval_batch(self, items):  # noqa: ANN001, ANN201
        self.clock.now += max(self.floor, self.per_token * sum(len(t) for _, t, *_ in items))
        return super().eval_batch(items)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(clock_mod, "time", types.SimpleNamespace(perf_counter=c.perf_counter))
    return c


def _run(clock: Clock, target_table, draft_table, k: int, bound: float | None, n: int = 300, flat=False):
    per_token = 0.0 if flat else T_TOKEN
    target = Timed(target_table, clock, per_token, floor=T_TOKEN, n_ctx=4096)
    draft = Timed(draft_table, clock, T_DRAFT, n_ctx=4096)
    c = Counters()
    b = CostBound(bound, lambda: T_TOKEN, k) if bound else None
    rng = np.random.default_rng(0)
    t0 = clock.now
    out = [
        s.token
        for s in speculative_steps(target, draft, [1, 2], GREEDY, SpecConfig(), rng, c, FixedK(k), n, bound=b)
    ]
    return out, (clock.now - t0) / len(out), c


def test_a_fixed_k_whose_drafts_are_rejected_is_brought_within_the_bound(clock):
    target, _ = markov_tables(v=16, seed=1)
    draft = np.random.default_rng(7).normal(size=(16, 16)) * 3  # another chain: its drafts miss
    free, per_token_free, _ = _run(clock, target, draft, 16, None)
    bounded, per_token, c = _run(clock, target, draft, 16, 3.0)
    assert bounded == free  # drafts change speed, never the text
    assert per_token_free > 10 * T_TOKEN  # the defect: 16 draft steps and 17 verified tokens a token
    assert per_token < 3.3 * T_TOKEN, per_token / T_TOKEN
    assert c.cost_cuts > 0 and c.k_history[0] == 16 and max(c.k_history[-100:]) < 16


def test_drafts_that_pay_are_never_cut(clock):
    target, _ = markov_tables(v=16, seed=1)
    _, per_token, c = _run(clock, target, target, 16, 3.0, flat=True)  # a GPU: any batch costs one step
    assert c.cost_cuts == 0 and per_token < T_TOKEN and set(c.k_history) <= {16} | set(range(0, 16))
    assert c.n_accepted > 0.9 * c.n_drafted


def test_the_bound_recovers_when_drafts_start_to_pay():
    """AIMD on the cap: halved after a round over budget, one more after a round well under it."""
    b = CostBound(3.0, lambda: 1.0, 16)
    for _ in range(6):
        b.observe(17.0, 1)  # a 17-token verify for one token
    assert b.k_cap == 0 and b.cut >= 4
    for _ in range(60):
        b.observe(1.0, 1)  # plain rounds: well within
    assert b.k_cap == 16
    unknown = CostBound(3.0, lambda: None, 16)  # no plain timing yet: no bound
    unknown.observe(100.0, 1)
    assert unknown.k_cap == 16


def test_plain_rounds_cut_nothing_and_bring_the_cap_back_at_the_default_bound():
    """A plain round that a busy machine stalled is not the drafts' fault, and at the default bound
    (2 plain steps a token) a plain step is never well under it: a cap cut to 0 stayed there, and
    the request (the history's, the lookup's) never drafted again."""
    b = CostBound(2.0, lambda: 1.0, 16)
    for _ in range(6):
        b.observe(5.0, 1, n_drafts=0)  # plain rounds at 5x the floor: a neighbour's load
    assert b.k_cap == 16 and b.cut == 0
    for _ in range(6):
        b.observe(17.0, 1, n_drafts=16)  # drafts that cost 17 plain steps for one token
    assert b.k_cap == 0 and b.cut >= 4
    for _ in range(16):
        b.observe(1.0, 1, n_drafts=0)
    assert b.k_cap == 16


def test_a_whole_vocabulary_of_logit_bias_costs_a_row_little():
    """A 49k-entry logit_bias rebuilt its arrays for every row: ~20-55 ms a row, so a verify of 17
    rows cost more than the decode. The arrays are built once."""
    pen = Penalties(bias=tuple((i, -1.0) for i in range(49152)))
    row = np.zeros(49152, dtype=np.float32)
    pen.apply_(row, [])
    t0 = time.perf_counter()
    for _ in range(50):
        pen.apply_(row, [])
        pen.banned()
    per_row = (time.perf_counter() - t0) / 50
    assert per_row < 3e-3, f"{per_row * 1e3:.1f} ms a row"
    assert row[0] == -51.0 and row[49151] == -51.0
