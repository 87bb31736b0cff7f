"""A request asks, the engine decides (#48): a request's fixed K is capped at the engine's own
ceiling, and no request may lift the cost bound."""

from __future__ import annotations

import pytest

from localspec.config.settings import AUTO_K_MAX, Settings
from localspec.engine import Engine
from localspec.errors import LocalspecError


@pytest.fixture(scope="module")
def engine(smollm2_path):
    # the model drafting for itself: every draft is kept, so only the cap can shorten K
    s = Settings(target=smollm2_path, draft=smollm2_path, n_ctx=512, no_log=True, tuner_cache=False)
    with Engine(s) as e:
        yield e


def test_a_requests_k_is_capped_at_the_engines_ceiling(engine):
    r = engine.generate("Count from one to twenty.", chat=True, max_tokens=40, temperature=0, draft_max="64")
    assert r.stats.k_history and max(r.stats.k_history) <= AUTO_K_MAX
    assert r.stats.n_accepted > 0  # it still drafts: up to the ceiling
    plain = engine.generate("Count from one to twenty.", chat=True, max_tokens=40, temperature=0, spec=False)
    assert r.text == plain.text


def test_no_request_lifts_the_cost_bound(engine):
    with pytest.raises(LocalspecError, match="cost_bound cannot be set per request"):
        engine.submit("Hi", cost_bound=0)
