"""Calibration at load under interference: a stall hits one pass of every size, not every try of
one, and a size no pass timed cleanly is held to what two smaller batches cost."""

from __future__ import annotations

import pytest

from localspec.draft_len import calibrate
from localspec.draft_len.costs import Costs, subadditive


class ClockedContext:
    """A context whose decodes advance a fake clock by `cost(n)` seconds, plus a stall on the
    calls `stalled` names (their order), as another process taking the CPU would."""

    rollback, max_draft = "truncate", None

    def __init__(self, cost, stalled=(), stall=1.0):  # noqa: ANN001
        self.cost, self.stalled, self.stall = cost, set(stalled), stall
        self.now, self.calls, self.pos = 0.0, 0, 0

    def clock(self) -> float:
        return self.now

    def eval(self, tokens, pos, n_logits=1, seq=0):  # noqa: ANN001
        self.now += self.cost(len(tokens)) + (self.stall if self.calls in self.stalled else 0.0)
        self.calls += 1
        self.pos = pos + len(tokens)

    def truncate(self, pos, seq=0):  # noqa: ANN001
        self.pos = pos

    def past(self, seq=0):  # noqa: ANN001
        return self.pos


def _measure(ctx, monkeypatch, **kw):  # noqa: ANN001
    monkeypatch.setattr(calibrate.time, "perf_counter", ctx.clock)
    return calibrate.measure(ctx, None, [1, 2, 3], max_batch=4, **kw)[0]


def linear(n: int) -> float:
    return 0.03 * n + 0.002


def test_a_burst_over_consecutive_timings_stalls_no_size_for_good(monkeypatch):
    # the calls after the two warm-up decodes: a burst over the next three (one pass of 1, 2, 3)
    ctx = ClockedContext(linear, stalled={2, 3, 4})
    verify = _measure(ctx, monkeypatch)
    assert verify == pytest.approx({n: linear(n) for n in (1, 2, 3, 4)})


def test_a_size_stalled_in_every_pass_is_held_to_two_smaller_batches(monkeypatch):
    # every timing of a batch of 2 stalled (calls 3, 7, 11 in the interleaved passes)
    ctx = ClockedContext(linear, stalled={3, 7, 11})
    verify = _measure(ctx, monkeypatch)
    assert verify[2] == pytest.approx(2 * linear(1))
    assert verify[4] == pytest.approx(linear(4))


def test_subadditive_keeps_a_saw_tooth_and_cuts_what_no_batch_can_cost():
    saw = {1: 0.032, 2: 0.065, 3: 0.085, 4: 0.105, 8: 0.26}
    assert subadditive(saw) == saw  # 2 a little over 1 + 1, 8 over 4 + 4: all real
    assert subadditive({1: 0.03, 2: 0.27, 4: 0.1})[2] == pytest.approx(0.06)


def test_remembered_costs_are_held_subadditive_too():
    costs = Costs()
    costs.prime({1: 0.03, 2: 0.27, 3: 0.09}, 0.02)
    assert costs.measured(2) == pytest.approx(0.06)
