"""A grammar-forced token only the target's vocabulary has (a pair lets the target have up to 128
ids the draft lacks): the draft's part of the round ends before it, the target still verifies it,
and the text equals plain decoding (issue 60, #11: the draft was handed the id and llama.cpp
refused the batch)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from localspec.constrain import Constraint, build_vocabulary, compile_constraint
from localspec.decode.sampling import SamplingParams
from localspec.decode.state import SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK
from tests.fake_backend import FakeContext, markov_tables
from tests.helpers import plain_steps, speculative_steps
from tests.toy_json import EOG, PIECES, SCHEMA, ToyVocab

EXTRA = len(PIECES)  # the target's one extra id
# the extra piece is a forced run the greedy tokenizer spells with it: the opening (forced in front
# of a round) or what follows the value "ab" (forced after a token the draft model wrote)
OPENING, AFTER_AB = '{"a":"', '","b":'


MODELS = {extra: ToyVocab([*PIECES, extra]) for extra in (OPENING, AFTER_AB)}  # the vocabularies' owners


def _grammar(extra: str):  # noqa: ANN202
    vocab = build_vocabulary(MODELS[extra])
    return compile_constraint(Constraint(kind="json_schema", text=json.dumps(SCHEMA)), vocab)


def _run(t, d, sp, grammar, seed):  # noqa: ANN001
    c = Counters()
    target = FakeContext(t, eog=frozenset({EOG}))
    rng = np.random.default_rng(seed)
    if d is None:
        steps = plain_steps(target, [1], sp, rng, c, 30, matcher=grammar.matcher())
    else:
        draft = FakeContext(d, eog=frozenset({EOG}))
        steps = speculative_steps(
            target, draft, [1], sp, SpecConfig(mode="pq"), rng, c, FixedK(3), max_new=30,
            matcher=grammar.matcher(),
        )  # fmt: skip
    return [s.token for s in steps], c


def _tables(seed: int):  # noqa: ANN202
    t, _ = markov_tables(v=EXTRA + 1, seed=seed, scale=2.0)
    d = t[:EXTRA, :EXTRA] + np.random.default_rng(seed).normal(size=(EXTRA, EXTRA))
    return t, d


@pytest.mark.parametrize("extra", [OPENING, AFTER_AB])
@pytest.mark.parametrize("seed", range(8))
def test_greedy_with_a_forced_id_the_draft_lacks_equals_plain_decoding(seed, extra):
    t, d = _tables(seed)
    grammar = _grammar(extra)
    want, _ = _run(t, None, SamplingParams(temperature=0.0), grammar, seed)
    got, c = _run(t, d, SamplingParams(temperature=0.0), grammar, seed)
    assert got == want and got[-1] == EOG
    if EXTRA in got:  # it rode as a grammar draft, verified by the target
        assert c.sources["grammar"].drafted >= 1


@pytest.mark.parametrize("extra", [OPENING, AFTER_AB])
def test_sampled_runs_with_a_forced_id_the_draft_lacks_answer(extra):
    grammar, hits = _grammar(extra), 0
    for seed in range(10):
        t, d = _tables(seed)
        got, _ = _run(t, d, SamplingParams(temperature=0.9), grammar, seed)
        assert got[-1] == EOG
        hits += EXTRA in got
    assert hits >= 3  # the case was met
