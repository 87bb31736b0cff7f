"""Rows given as their largest logits (`TopLogits`, what llama.cpp's backend top-k returns): the
same distributions as whole rows, bit for bit, and the round asks for them only where a sequence
reads no more of a row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from localspec.decode.sampling import Penalties, SamplingParams, argmax, process, process_rows
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK
from localspec.top_logits import TopLogits

from ..fake_backend import FakeContext, markov_tables
from ..helpers import GREEDY, speculative_steps

SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


@settings(max_examples=60, deadline=None)
# a top-k as wide as the row: the whole row once came back in id order, its top rows by logit
@example(seed=0, n=1, v=64, top_k=64, top_p=1.0, min_p=0.0, temperature=0.3, quantised=False)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    v=st.sampled_from([64, 300, 5000, 49152]),
    top_k=st.integers(1, 64),
    top_p=st.sampled_from([1.0, 0.95, 0.5]),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
    temperature=st.sampled_from([0.3, 0.8, 1.5]),
    quantised=st.booleans(),
)
def test_same_distributions_as_whole_rows(seed, n, v, top_k, top_p, min_p, temperature, quantised):
    """Quantised logits make ties: at the top and inside the kept set, the order and kept set still
    agree; a tie across the k-th value leaves which of its members top-k keeps open (to either path:
    the definition's choice is arbitrary), so there the probabilities must agree, not the ids."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, v), dtype=np.float32) * 2.5
    if quantised:
        rows = np.round(rows * 2) / 2
    sp = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    whole, top = process_rows(rows, sp), process_rows(TopLogits.of_rows(rows, 64), sp)
    for i in range(n):
        a, b = whole[i], top[i]
        kth = np.sort(rows[i])[-top_k]
        if (rows[i] >= kth).sum() > top_k:  # a tie across the k-th value: either member may be kept
            np.testing.assert_array_equal(a.probs, b.probs)
            continue
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.probs, b.probs)
    one = process(TopLogits.of_rows(rows[:1], 64)[0], sp)
    np.testing.assert_array_equal(one.probs, whole[0].probs)


def test_argmax_breaks_ties_as_a_whole_row_does():
    row = np.zeros(1000, np.float32)
    row[[17, 400, 901]] = 3.0
    assert argmax(TopLogits.of_rows(row[None], 8)[0]) == argmax(row) == 17


def test_a_top_k_beyond_the_candidates_is_refused_with_the_reason():
    rows = TopLogits.of_rows(np.random.default_rng(0).standard_normal((2, 500), dtype=np.float32), 16)
    with pytest.raises(ValueError, match="16 largest"):
        process_rows(rows, SamplingParams(top_k=40))
    with pytest.raises(ValueError, match="whole row"):
        process_rows(rows, SamplingParams(top_k=0))


@pytest.mark.parametrize(
    ("sp", "cfg", "penalties", "wanted"),
    [
        (SamplingParams(temperature=0.8, top_k=4, top_p=0.9, min_p=0.0), {}, None, True),
        (SamplingParams(temperature=0.8, top_k=6, top_p=0.9, min_p=0.0), {}, None, True),
        (SamplingParams(temperature=0.8, top_k=7, top_p=0.9, min_p=0.0), {}, None, False),  # wider than 6
        (SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.0), {}, None, False),  # the whole row
        (SamplingParams(temperature=0.8, top_k=4, top_p=0.9, min_p=0.0), {}, Penalties(repeat=1.3), False),
        (GREEDY, {}, None, True),
        (GREEDY, {"draft_p_min": 0.5}, None, False),  # its check is a softmax over the whole row
    ],
)
def test_the_round_asks_for_top_rows_only_where_they_suffice(sp, cfg, penalties, wanted):
    t, d = markov_tables(v=12, noise=0.5, seed=3, scale=1.5)
    target, draft = FakeContext(t, top_k=6), FakeContext(d, top_k=6)
    steps = list(speculative_steps(
        target, draft, [1], sp, SpecConfig(mode="pq", **cfg), np.random.default_rng(0), Counters(), FixedK(3),
        max_new=12, penalties=penalties,
    ))  # fmt: skip
    assert len(steps) == 12
    assert target.top_on[0] is wanted and draft.top_on[0] is wanted
