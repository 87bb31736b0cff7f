"""logit_bias and the repeat / presence / frequency penalties under speculation (fake backend): the
output is exactly the penalised target's - chi-square on the joint distribution of three tokens
for pq and coupled -, greedy and coupled give plain decoding's tokens with the same seed, and
logprobs of every emitted token, drafted or not, are plain decoding's."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.decode.sampling import Penalties, SamplingParams, process
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK

from ..fake_backend import FakeContext, markov_tables
from ..helpers import CHI2_999, GREEDY, chi2, plain_steps, speculative_steps

PEN = Penalties(repeat=1.4, presence=0.5, frequency=0.3, last_n=2, bias=((1, 0.8), (3, -0.6)))
SP = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)


def run(t, d, prompt, sp, n, seed, mode="pq", k=3, **state):  # noqa: ANN001
    c = Counters()
    rng = np.random.default_rng(seed)
    if d is None:
        steps = plain_steps(FakeContext(t), prompt, sp, rng, c, n, mode=mode, **state)
    else:
        cfg = SpecConfig(mode=mode)
        steps = speculative_steps(
            FakeContext(t), FakeContext(d), prompt, sp, cfg, rng, c, FixedK(k), n, **state
        )
    return list(steps), c


def test_penalties_transform_like_llama_cpp():
    row = np.array([2.0, -1.0, 0.5, 3.0], dtype=np.float32)
    out = Penalties(repeat=2.0, presence=0.5, frequency=0.25, last_n=3, bias=((2, 1.0),)).apply(
        row, [3, 0, 1, 1]
    )
    # window [0, 1, 1]: 0 once (2/2 - .25 - .5), 1 twice (-1*2 - .5 - .5); 2 biased; 3 outside the window
    assert np.allclose(out, [0.25, -3.0, 1.5, 3.0])


@pytest.mark.parametrize("mode", ["pq", "coupled"])
def test_penalised_output_is_the_penalised_targets(mode):
    v = 4
    t, d = markov_tables(v=v, noise=1.0, seed=7, scale=1.0)
    prompt = [0]

    def step(hist):  # the penalised target's distribution after `hist`
        return process(PEN.apply(t[hist[-1]], hist), SP).dense(v)

    joint = np.zeros((v,) * 3)
    for a in range(v):
        pa = step(prompt)[a]
        for b in range(v):
            pb = step(prompt + [a])[b]
            joint[a, b] = pa * pb * step(prompt + [a, b])
    assert abs(joint.sum() - 1) < 1e-9
    plain_joint = np.einsum(
        "a,ab,bc->abc",
        process(t[0], SP).dense(v),
        *[np.array([process(t[a], SP).dense(v) for a in range(v)])] * 2,
    )
    assert np.abs(joint - plain_joint).max() > 0.02  # the penalties do change the distribution
    counts = np.zeros((v,) * 3)
    c_all = Counters()
    for s in range(6000):
        steps, c = run(t, d, prompt, SP, 3, s, mode=mode, penalties=PEN)
        counts[tuple(x.token for x in steps)] += 1
        c_all.n_drafted += c.n_drafted
        c_all.n_accepted += c.n_accepted
    assert chi2(counts.ravel(), joint.ravel()) < CHI2_999[63]
    assert 0.1 < c_all.n_accepted / c_all.n_drafted < 0.95  # drafts are kept and rejected


def test_greedy_and_coupled_give_plain_decodings_tokens():
    t, d = markov_tables(v=12, noise=0.6, seed=3, scale=2.0)
    changed = 0
    for seed in range(20):
        for sp, mode in (
            (GREEDY, "pq"),
            (SamplingParams(temperature=0.8, top_k=6, top_p=0.95, min_p=0.05), "coupled"),
        ):
            want = [x.token for x in run(t, None, [seed % 12], sp, 30, seed, mode=mode, penalties=PEN)[0]]
            got = [x.token for x in run(t, d, [seed % 12], sp, 30, seed, mode=mode, penalties=PEN)[0]]
            assert got == want
            changed += want != [x.token for x in run(t, None, [seed % 12], sp, 30, seed, mode=mode)[0]]
    assert changed >= 30  # and the penalties do change the text


def test_a_banned_token_never_comes_and_the_lookup_does_not_propose_it():
    t = markov_tables(v=6, noise=0.0, seed=1, scale=3.0)[0]
    best = int(np.argmax(t[0]))
    ban = Penalties(bias=((best, -100.0),))
    steps, _ = run(t, t, [0, best, 0, best, 0], GREEDY, 20, 0, penalties=ban)
    assert best not in [x.token for x in steps]


@pytest.mark.parametrize("mode", ["pq", "coupled"])
def test_logprobs_under_speculation_are_plain_decodings(mode):
    t, d = markov_tables(v=12, noise=0.4, seed=5, scale=1.5)
    sp = SamplingParams(temperature=0.8, top_k=6, top_p=0.95, min_p=0.05)
    spec, c = run(t, d, [1], sp, 40, 11, mode="coupled", logprobs=3, penalties=PEN)
    plain, _ = run(t, None, [1], sp, 40, 11, mode="coupled", logprobs=3, penalties=PEN)
    assert [x.token for x in spec] == [x.token for x in plain]
    assert any(x.from_draft for x in spec) and c.n_accepted > 0
    for a, b in zip(spec, plain):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-9) and a.logprob <= 0
        assert [tok for tok, _ in a.top] == [tok for tok, _ in b.top] and len(a.top) == 3
    steps, _ = run(t, d, [1], sp, 40, 11, mode=mode, logprobs=0)
    assert all(x.logprob is not None and x.top == () for x in steps)
    assert all(x.logprob is None for x in run(t, d, [1], sp, 10, 11, mode=mode)[0])
