"""llama.cpp's infill sampler as a pure function, and speculation over it on the fake backend: the
sampled output keeps the target's (infill) distribution under every rule, and greedy FIM under
speculation is plain greedy FIM."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.decode.infill import Infill, infill
from localspec.decode.sampling import SamplingParams, process
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK

from ..fake_backend import FakeContext, markov_tables
from ..helpers import CHI2_999, chi2, plain, speculative_steps

# a toy vocabulary whose texts are prefixes of one another; token 5 ends the text
TEXTS = {0: b"a", 1: b"ab", 2: b"b", 3: b"abc", 4: b"c", 5: b"", 6: b"d", 7: b"e"}
EOT = 5
VOCAB = Infill(lambda t: t == EOT, TEXTS.__getitem__, EOT)


def dist(probs: dict[int, float]) -> dict[int, float]:
    ids, p = infill(np.array(list(probs)), np.array(list(probs.values())), VOCAB)
    return {int(i): round(float(x), 6) for i, x in zip(ids, p)}


def test_prefixes_share_their_probability_with_the_likelier_token():
    # "a" takes "ab" and "abc" (it is their prefix and likelier); "b" and "c" stand alone
    assert dist({0: 0.3, 1: 0.15, 3: 0.05, 2: 0.4, 4: 0.1}) == {
        0: round(0.5 / 0.9, 6),
        2: round(0.4 / 0.9, 6),
    }
    # "ab" is likelier than "a": the merged mass goes to "ab"
    assert dist({0: 0.2, 1: 0.4, 2: 0.4}) == {1: 0.6, 2: 0.4}


def test_weak_text_gives_way_to_the_end():
    # 3 * p_eog * n > p_text: only the end-of-text tokens stay
    assert dist({0: 0.4, 2: 0.4, 5: 0.2}) == {5: 1.0}
    # no text token reaches 0.2: the end token alone
    spread = {i: 0.19 for i in (0, 2, 4, 6, 7)}
    assert dist({**spread, 5: 0.05}) == {5: 1.0}


def test_the_second_threshold_is_one_over_the_text_tokens_left_plus_one():
    # 0.5, 0.3, 0.2 survive 0.2; renormalised the same; 1/(3+1) = 0.25 drops "c"
    assert dist({0: 0.5, 2: 0.3, 4: 0.2}) == {0: 0.625, 2: 0.375}


def test_greedy_takes_the_merged_distributions_argmax():
    row = np.log(np.array([0.3, 0.25, 0.35, 0.05, 0.05, 1e-9]))
    sp = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, infill=VOCAB)
    assert not sp.greedy  # the raw argmax ("b") is not infill's ("a" with "ab" and "abc")
    d = process(row, sp)
    assert d.ids.tolist() == [0] and d.probs.tolist() == [1.0]


def _run(t, d, sp, mode, k, n, seed, prompt=(0,)):  # noqa: ANN001, ANN202
    steps = speculative_steps(
        FakeContext(t), FakeContext(d), list(prompt), sp, SpecConfig(mode=mode), np.random.default_rng(seed),
        Counters(), FixedK(k), max_new=n, lookup=True,
    )  # fmt: skip
    return [s.token for s in steps]


def test_greedy_fim_under_speculation_is_plain_greedy_fim():
    t, d = markov_tables(v=6, noise=2.0, seed=4, scale=0.8)
    t[:, EOT] -= 4
    d[:, EOT] -= 4
    sp = SamplingParams(temperature=0.0, top_k=6, top_p=1.0, min_p=0.0, infill=VOCAB)
    want = plain(t, [2], sp=sp, n=30)
    assert want != plain(t, [2], n=30)  # the merge changes the greedy path here: a test that can fail
    for mode, k in (("pq", 1), ("pq", 3), ("coupled", 5), ("match", 3)):
        assert _run(t, d, sp, mode, k, 30, seed=k, prompt=[2]) == want


@pytest.mark.parametrize("mode", ["pq", "coupled", "match"])
def test_sampled_fim_under_speculation_keeps_the_targets_distribution(mode):
    """P(t1, t2) through the loop equals the target's infill chain, whatever the draft."""
    v = 6
    t, d = markov_tables(v=v, noise=1.0, seed=1, scale=1.0)
    t[:, EOT] -= 4  # the end unlikely, so the chain has text to sample (not only the end)
    d[:, EOT] -= 4
    sp = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0, infill=VOCAB)
    counts = np.zeros((v, v))
    for s in range(5000):
        a, b = _run(t, d, sp, mode, 3, 2, seed=s)
        counts[a, b] += 1
    p1 = process(t[0], sp).dense(v)
    joint = np.outer(p1, np.ones(v)) * np.array([process(t[a], sp).dense(v) for a in range(v)])
    assert (joint > 0).sum() >= 4  # the infill chain keeps several paths: a test that can fail
    df = int((joint > 0).sum()) - 1
    crit = CHI2_999.get(df) or max(val for k2, val in CHI2_999.items() if k2 <= df)
    assert chi2(counts.ravel(), joint.ravel()) < crit * 1.3
