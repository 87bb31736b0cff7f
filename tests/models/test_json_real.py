"""Structured output on the real default pair (Qwen2.5-Coder 0.5B -> 1.5B): every one of the bench's
json prompts, answered under its schema with speculation on (grammar-aware drafts, auto K), finishes
by itself - no loop to max_tokens, as the 135M stand-in did - and validates against its schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

from localspec.bench.prompts import load_prompts, select

pytestmark = pytest.mark.slow
MAX_TOKENS = 200  # each answer is 40-120 tokens; a loop would run to here


@pytest.fixture(scope="module")
def engine(real_pair):
    from localspec.config.settings import Settings
    from localspec.engine import Engine

    with Engine(Settings.load(pair=real_pair, n_ctx=1024)) as eng:
        yield eng


def test_every_json_prompt_finishes_and_validates(engine):
    prompts = select(load_prompts(), None, ["json"])
    assert len(prompts) >= 6
    for p in prompts:
        r = engine.generate(
            [{"role": "user", "content": p.text}], json_schema=p.schema, max_tokens=MAX_TOKENS, temperature=0
        )
        assert r.finish_reason == "stop", (p.id, r.stats.n_generated, r.text[-200:])
        jsonschema.validate(json.loads(r.text), json.loads(p.schema))
        assert r.stats.n_generated < MAX_TOKENS
