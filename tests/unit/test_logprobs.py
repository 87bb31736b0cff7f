"""Logprobs on the fake backend (issue #45): by default the target's own log-softmax after logit_bias
and the constraint's mask - computed here straight from the fake's table - with `top_logprobs`
alternatives on every token, drafted or not, equal to plain decoding's; `post_sampling_probs` gives
the distribution each token was drawn from instead (after penalties and the samplers' filters)."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.decode.sampling import LOGPROB_FLOOR, Penalties, SamplingParams, process
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK

from ..fake_backend import FakeContext, markov_tables
from ..helpers import GREEDY, plain_steps, speculative_steps
from ..toy_json import EOG, GRAMMAR, PIECES

BIAS = Penalties(repeat=1.3, last_n=4, bias=((2, 1.5), (5, -2.0)))
SAMPLED = SamplingParams(temperature=0.8, top_k=3, top_p=0.9, min_p=0.05)


def run(t, d, sp, *, k=3, n=30, matcher=None, eog=frozenset(), **state):  # noqa: ANN001
    rng, c = np.random.default_rng(7), Counters()
    if d is None:
        steps = plain_steps(
            FakeContext(t, eog=eog), [1], sp, rng, c, n, mode="coupled", matcher=matcher, **state
        )
    else:
        steps = speculative_steps(
            FakeContext(t, eog=eog), FakeContext(d, eog=eog), [1], sp, SpecConfig(mode="coupled"), rng, c,
            FixedK(k), n, matcher=matcher, **state,
        )  # fmt: skip
    return list(steps), c


def same(a, b) -> bool:  # noqa: ANN001 - two Steps: one logprob entry, speculative and plain
    return (
        a.logprob == pytest.approx(b.logprob, abs=1e-9)
        and [tok for tok, _ in a.top] == [tok for tok, _ in b.top]
        and [lp for _, lp in a.top] == pytest.approx([lp for _, lp in b.top], abs=1e-9)
    )


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


@pytest.mark.parametrize("sp", [GREEDY, SAMPLED])
def test_the_default_is_the_targets_log_softmax_after_logit_bias_with_every_alternative(sp):
    t, d = markov_tables(v=12, noise=0.5, seed=4, scale=2.0)
    spec, c = run(t, d, sp, logprobs=4, penalties=BIAS)
    plain, _ = run(t, None, sp, logprobs=4, penalties=BIAS)
    assert [s.token for s in spec] == [s.token for s in plain] and c.n_accepted > 0
    prev = 1
    for a, b in zip(spec, plain):
        want = log_softmax(t[prev] + np.array([1.5 * (i == 2) - 2.0 * (i == 5) for i in range(12)]))
        assert a.logprob == pytest.approx(want[a.token], abs=1e-5)
        best = sorted(range(12), key=lambda i: (-want[i], i))[:4]
        assert [tok for tok, _ in a.top] == best and len(a.top) == 4
        assert [lp for _, lp in a.top] == pytest.approx([want[i] for i in best], abs=1e-5)
        assert same(a, b)
        prev = a.token
    if sp.greedy:  # the sampled-from distribution would say 0.0 here, and keep 1-2 tokens
        assert max(s.logprob for s in spec) < -1e-3


def test_under_a_constraint_the_mask_leaves_the_rest_at_the_floor():
    t, d = markov_tables(v=len(PIECES), noise=1.5, seed=2, scale=2.0)
    eog = frozenset({EOG})
    spec, _ = run(t, d, GREEDY, matcher=GRAMMAR.matcher(), eog=eog, logprobs=5)
    plain, _ = run(t, None, GREEDY, matcher=GRAMMAR.matcher(), eog=eog, logprobs=5)
    assert [s.token for s in spec] == [s.token for s in plain]
    m, prev = GRAMMAR.matcher(), 1
    for a, b in zip(spec, plain):
        if a.token == EOG:  # the end: no text, no logprob entry (the one after a complete answer
            break  # is appended without a pass, a drafted one is scored)
        allowed = m.allowed()
        want = log_softmax(np.where(allowed, t[prev], -np.inf))
        assert a.logprob == pytest.approx(want[a.token], abs=1e-5)
        assert len(a.top) == 5 and same(a, b)
        for tok, lp in a.top:
            assert lp == (pytest.approx(want[tok], abs=1e-5) if allowed[tok] else LOGPROB_FLOOR)
        m.consume([a.token])
        prev = a.token


def test_post_sampling_probs_report_the_distribution_drawn_from():
    t, d = markov_tables(v=12, noise=0.5, seed=4, scale=2.0)
    spec, _ = run(t, d, SAMPLED, logprobs=5, post_sampling_probs=True)
    plain, _ = run(t, None, SAMPLED, logprobs=5, post_sampling_probs=True)
    assert [s.token for s in spec] == [s.token for s in plain]
    prev = 1
    for a, b in zip(spec, plain):
        p = process(t[prev], SAMPLED)
        assert a.logprob == pytest.approx(np.log(p.prob(a.token)), abs=1e-9)
        assert len(a.top) == min(5, int((p.probs > 0).sum())) <= 3  # top_k 3: what the sampler kept
        assert same(a, b)
        prev = a.token
