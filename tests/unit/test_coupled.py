"""The coupled rule on the fake backend: keyed noise, Gumbel-max, same seed -> same text, and the
output distribution is the target's."""

from __future__ import annotations

import itertools
import timeit

import numpy as np
import pytest

from localspec.decode import accept
from localspec.decode.noise import KeyedGumbel
from localspec.decode.sampling import SamplingParams, process
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.auto import AutoK
from localspec.draft_len.fixed import FixedK

from ..fake_backend import FakeContext, markov_tables
from ..helpers import CHI2_999, chi2, plain_steps, speculative_steps

FILTERED = SamplingParams(temperature=0.8, top_k=6, top_p=0.95, min_p=0.05)
# chi-square critical value at p = 0.001 for 99 and 80 degrees of freedom (10x10 bins; 81 cells)
CHI2_999_99, CHI2_999_80 = 148.2, 124.8


def spec(t, d, prompt, sp, k, n, seed, counters=None, top_k=0, **cfg) -> list[int]:
    ctl = FixedK(k) if isinstance(k, int) else k
    c = counters if counters is not None else Counters()
    cfg = SpecConfig(mode="coupled", **cfg)
    target, draft = FakeContext(t, top_k=top_k), FakeContext(d, top_k=top_k)
    steps = speculative_steps(target, draft, prompt, sp, cfg, np.random.default_rng(seed), c, ctl, max_new=n)
    return [s.token for s in steps]


def plain(t, prompt, sp, n, seed) -> list[int]:
    rng = np.random.default_rng(seed)
    return [s.token for s in plain_steps(FakeContext(t), prompt, sp, rng, Counters(), n, mode="coupled")]


# ---------------------------------------------------------------------------------------------
# the noise


def test_noise_is_a_pure_function_of_seed_position_and_id():
    ids = np.arange(0, 49152, 97)
    a = KeyedGumbel(7).gumbel(12, ids)
    assert np.array_equal(a, KeyedGumbel(7).gumbel(12, ids))  # no state: a fresh object agrees
    perm = np.random.default_rng(0).permutation(len(ids))[:40]
    assert np.array_equal(KeyedGumbel(7).gumbel(12, ids[perm]), a[perm])  # any subset, any order
    for other in (KeyedGumbel(8).gumbel(12, ids), KeyedGumbel(7).gumbel(13, ids)):
        assert not np.isclose(a, other).any()
    big = 2**100 + 7  # NumPy seeds may be 128-bit; the high limb matters
    assert not np.isclose(KeyedGumbel(big).gumbel(12, ids), a).any()
    # the loops key it from the Generator's seed, so plain and speculative runs share it
    assert KeyedGumbel.of(np.random.default_rng(7)).key == KeyedGumbel(7).key


def _u(g: np.ndarray) -> np.ndarray:
    return np.exp(-np.exp(-g))  # the Gumbel CDF: uniform if g is standard Gumbel


def test_noise_is_standard_gumbel_ks():
    noise = KeyedGumbel(3)
    u = np.sort(np.concatenate([_u(noise.gumbel(t, np.arange(500))) for t in range(200)]))
    n = len(u)
    ecdf_hi, ecdf_lo = np.arange(1, n + 1) / n, np.arange(n) / n
    d = max((ecdf_hi - u).max(), (u - ecdf_lo).max())
    assert d < 1.95 / np.sqrt(n), d  # Kolmogorov-Smirnov at p = 0.001
    assert 0.0 < u[0] and u[-1] < 1.0


@pytest.mark.parametrize("neighbour", ["next id", "next position", "next seed"])
def test_noise_neighbours_are_independent(neighbour):
    """Pairs of neighbouring values are uniform on the unit square (10 x 10 bins, chi-square)."""
    ids, pos = np.arange(1000, 3000), np.arange(100)
    a = np.concatenate([KeyedGumbel(5).gumbel(t, ids) for t in pos])
    if neighbour == "next id":
        b = np.concatenate([KeyedGumbel(5).gumbel(t, ids + 1) for t in pos])
    elif neighbour == "next position":
        b = np.concatenate([KeyedGumbel(5).gumbel(t + 1, ids) for t in pos])
    else:
        b = np.concatenate([KeyedGumbel(6).gumbel(t, ids) for t in pos])
    counts, _, _ = np.histogram2d(_u(a), _u(b), bins=10, range=[[0, 1], [0, 1]])
    assert chi2(counts.ravel(), np.full(100, 0.01)) < CHI2_999_99
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.02


def test_noise_costs_well_under_a_tenth_of_a_millisecond():
    """~11 us on a quiet CPU. On the shared 2-core machine the best of 5 reached 137 us (a tests/unit
    run failed on it, issue 60): the bound is a tenth of a millisecond or, on a machine slowed down
    now, 40 times a reference of numpy work of about its size measured beside it."""
    noise = KeyedGumbel(1)
    for n in (40, 200):
        ids = np.sort(np.random.default_rng(n).choice(49152, n, replace=False))
        x = np.arange(float(n))
        best, ref = float("inf"), float("inf")
        for _ in range(10):  # interleaved: a slow moment slows both
            best = min(best, timeit.timeit(lambda ids=ids: noise.gumbel(9, ids), number=200) / 200)
            ref = min(ref, timeit.timeit(lambda x=x: np.log(np.exp(x)), number=200) / 200)
        assert best < 1e-4 or best < 40 * ref, (n, best, ref)  # quiet: ~10 us, ~12x the reference


def test_gumbel_max_samples_the_distribution():
    lt = np.random.default_rng(4).normal(size=8) * 1.5
    d = process(lt, SamplingParams(temperature=0.9, top_k=6, top_p=1.0, min_p=0.0))
    noise = KeyedGumbel(11)
    counts = np.zeros(8)
    for t in range(20000):
        counts[noise.sample(d, t)] += 1
    pd = d.dense(8)
    assert chi2(counts, pd) < CHI2_999[int((pd > 0).sum()) - 1]


# ---------------------------------------------------------------------------------------------
# the rule


def test_coupled_acceptance_lies_between_its_bounds():
    """P(accept) of coupled is at least (1 - TV) / (1 + TV) and at most p/q's 1 - TV (no coupling of
    p and q agrees more often than that)."""
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    for seed in range(3):
        rng = np.random.default_rng(seed)
        lt = rng.normal(size=10) * 1.5
        ld = lt + rng.normal(size=10) * 0.5 * (seed + 1)  # near, farther, far
        p, q = process(lt, sp), process(ld, sp)
        tv = 0.5 * np.abs(p.dense(10) - q.dense(10)).sum()
        noise = KeyedGumbel(seed)
        n = 20000
        hits = sum(accept.coupled(p, noise.sample(q, t), noise, t)[0] for t in range(n))
        rate, slack = hits / n, 4 * 0.5 / np.sqrt(n)
        assert (1 - tv) / (1 + tv) - slack < rate < 1 - tv + slack, (rate, tv)


def test_one_point_draft_is_kept_iff_it_is_the_targets_choice():
    p = process(np.array([2.0, 1.5, 1.0, 0.0]), SamplingParams(temperature=1.0, top_k=0, top_p=1, min_p=0))
    noise = KeyedGumbel(2)
    for t in range(50):
        y = noise.sample(p, t)
        assert accept.coupled(p, y, noise, t) == (True, y)
        other = (y + 1) % 4
        assert accept.coupled(p, other, noise, t) == (False, y)


# ---------------------------------------------------------------------------------------------
# through the loop


def test_same_seed_same_text_for_any_k_and_draft():
    """The fake backend is batch-invariant, so equality must be exact: every K, the tuner, a close
    and a poor draft, drafting cut short by p_min, one-token prompts and longer ones."""
    for seed, noise_level in itertools.product(range(4), (0.3, 2.0)):
        t, d = markov_tables(v=12, noise=noise_level, seed=seed, scale=1.5)
        prompt = [seed % 12, (seed * 5) % 12][: 1 + seed % 2]
        want = plain(t, prompt, FILTERED, 40, seed)
        for k in [*range(1, 9), AutoK(k_min=1)]:
            assert spec(t, d, prompt, FILTERED, k, 40, seed) == want, (seed, noise_level, k)
        assert spec(t, d, prompt, FILTERED, 4, 40, seed, draft_p_min=0.5) == want
        assert plain(t, prompt, FILTERED, 40, seed + 100) != want  # and the seed matters


@pytest.mark.parametrize("width", [6, 9])
def test_rows_as_their_largest_logits_give_the_same_text(width):
    """Rows handed over as their `width` largest logits (llama.cpp's backend top-k) - exactly the
    request's top_k, or more - give, seed for seed, the text of plain sampling over whole rows."""
    for seed, noise_level in itertools.product(range(4), (0.3, 2.0)):
        t, d = markov_tables(v=12, noise=noise_level, seed=seed, scale=1.5)
        want = plain(t, [seed % 12], FILTERED, 40, seed)
        for k in (1, 3, AutoK(k_min=1)):
            assert spec(t, d, [seed % 12], FILTERED, k, 40, seed, top_k=width) == want, (seed, k)


def test_coupled_accepts_and_uses_the_bonus_token():
    t, d = markov_tables(v=12, noise=0.3, seed=1, scale=1.5)
    c = Counters()
    spec(t, t, [0], FILTERED, 3, 40, 0, counters=c)  # self-draft: everything accepted
    assert c.n_accepted == c.n_drafted > 0 and c.rounds * 4 >= 40
    c = Counters()
    spec(t, d, [0], FILTERED, 3, 40, 0, counters=c)
    assert 0.3 < c.n_accepted / c.n_drafted < 1.0


def test_four_token_joint_distribution_is_the_targets():
    """K = 3 over 4 tokens: a round of three drafts plus the bonus token when all are kept, shorter
    rounds after a rejection; P(t1..t4) must be the target chain's whatever the draft."""
    v = 3
    t, d = markov_tables(v=v, noise=1.0, seed=7, scale=1.0)
    sp = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
    counts = np.zeros((v,) * 4)
    c = Counters()
    trials = 12000
    for s in range(trials):
        counts[tuple(spec(t, d, [0], sp, 3, 4, s, counters=c))] += 1
    step = np.array([process(t[a], sp).dense(v) for a in range(v)])
    joint = np.einsum("a,ab,bc,cd->abcd", step[0], step, step, step)
    assert chi2(counts.ravel(), joint.ravel()) < CHI2_999_80
    assert 0.2 < c.n_accepted / c.n_drafted < 0.95  # real rejections and bonus tokens both happen
