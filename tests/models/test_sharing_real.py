"""Prefix sharing across slots on a real model (SmolLM2 drafting for itself): llama.cpp's seq_cp
gives a slot cells that survive the source's truncation, n greedy choices of one prompt equal the
n=1 answer (tie-aware) with the prompt prefilled once, and a request copies a running one's prefix."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.errors import LocalspecError
from localspec.llama import Context

from ..helpers import MARGIN, responses_of

QUESTION = "Explain in two sentences why the sky is blue."
SYSTEM = "You are a careful assistant who answers briefly and names one source for each claim you make."


@pytest.fixture(scope="module")
def eng(smollm2_path):
    with Engine(Settings.load(target=smollm2_path, draft=smollm2_path, n_ctx=512, parallel=4)) as e:
        yield e


def _same_or_tie(eng, prompt, a, b):
    """a == b, or they part at a near-tie of the target alone (llama.cpp is not batch-invariant)."""
    if a == b:
        return
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert i < min(len(a), len(b)), (a, b)  # one is not a prefix of the other: the same max_tokens
    with Context(eng.target, n_ctx=1024) as ctx:
        row = ctx.eval(prompt + a[:i], 0)[0]
    assert abs(row[a[i]] - row[b[i]]) <= MARGIN, (i, float(row[a[i]] - row[b[i]]))


def test_copied_cells_survive_the_source_truncation(smollm2):
    ids = smollm2.tokenize("The quick brown fox jumps over the lazy dog and runs far away", add_special=True)
    with Context(smollm2, n_ctx=256, n_seq=2) as ctx, Context(smollm2, n_ctx=256) as ref:
        ref.eval(ids[:8], 0)  # the same split as below: the copied cells must be the very same values
        want = np.array(ref.eval(ids[8:], 8)[0])
        ctx.eval(ids[:8], 0, seq=0)
        ctx.copy_prefix(0, 1, 8)
        assert ctx.past(1) == 8
        ctx.truncate(2, 0)  # the source forgets most of what it shared
        ctx.eval(ids[2:5], 2, seq=0)  # and writes other cells there
        got = np.array(ctx.eval(ids[8:], 8, seq=1)[0])
        assert np.abs(got - want).max() < 1e-3 and got.argmax() == want.argmax()
        with pytest.raises(LocalspecError, match="holds 5 positions"):
            ctx.copy_prefix(0, 1, 6)


def test_n_greedy_choices_equal_one_and_prefill_the_prompt_once(eng):
    one = eng.generate(QUESTION, chat=True, temperature=0, max_tokens=32, draft_max="3")
    eng.clear_cache()  # so the first choice pays the whole prompt, as a new conversation does
    three = responses_of(
        [eng.submit(QUESTION, chat=True, temperature=0, max_tokens=32, draft_max="3") for _ in range(3)]
    )
    prompt = one.prompt_tokens
    for r in three:
        assert r is not None and r.prompt_tokens == prompt
        _same_or_tie(eng, prompt, one.tokens, r.tokens)
    # one choice evaluated the prompt; the others only the token their first verify batch holds
    assert sorted(r.stats.n_prefilled for r in three) == [1, 1, len(prompt)]
    assert all(r.stats.n_prompt_tokens == len(prompt) for r in three)


def test_a_request_copies_the_prefix_of_a_running_one(eng):
    eng.clear_cache()
    running = eng.submit(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        temperature=0, max_tokens=48, draft_max="3",
    )  # fmt: skip
    chunks = iter(running)
    next(chunks)  # it is streaming
    other = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name three fruits."}]
    late = eng.generate(other, temperature=0, max_tokens=16, draft_max="3")
    for _ in chunks:
        pass
    shared = next(
        i for i, (x, y) in enumerate(zip(late.prompt_tokens, running.response.prompt_tokens)) if x != y
    )
    assert shared > 20  # the system prompt and the template around it
    assert late.stats.n_prefilled == len(late.prompt_tokens) - shared
    eng.clear_cache()
    alone = eng.generate(other, temperature=0, max_tokens=16, draft_max="3")
    assert alone.stats.n_prefilled == len(alone.prompt_tokens)
    _same_or_tie(eng, late.prompt_tokens, alone.tokens, late.tokens)
