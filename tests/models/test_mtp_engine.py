"""--draft mtp on a synthetic qwen35 with one MTP block (llama.cpp's LLAMA_CONTEXT_TYPE_MTP): the
target drafts for itself, losslessly, with stats per source, and the tuner chooses between the
MTP head, the lookup and plain decoding from what it measures. With `mix` 0.1 the trunk is nearly a
bigram and the head knows it (acceptance ~0.9); with mix 1 the head is noise (acceptance ~0)."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.errors import LocalspecError
from tools.synthetic.arch import Qwen35Shape, write_qwen35

from ..helpers import MARGIN, teacher_forced_gaps

PROMPT = "The history of the lighthouse begins in the ancient world, where fires were lit"


@pytest.fixture(scope="module")
def mtp_models(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("mtp")
    shape = Qwen35Shape(nextn=1)
    return {
        "good": write_qwen35(smollm2_path, d / "good.gguf", shape=shape, mix=0.1, seed=3),
        "noise": write_qwen35(smollm2_path, d / "noise.gguf", shape=shape, mix=1.0, seed=3, mtp_exact=False),
    }


def mtp_engine(path, **kw) -> Engine:  # noqa: ANN001
    return Engine(Settings.load(target=path, draft="mtp", n_ctx=512, tuner_cache=False, **kw))


def lossless(eng, plain, spec) -> None:  # noqa: ANN001
    gaps = teacher_forced_gaps(eng, spec.prompt_tokens, spec.tokens)
    assert gaps.max() <= MARGIN, gaps.round(3).tolist()
    if spec.tokens != plain.tokens:
        i = next(i for i, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b)
        assert teacher_forced_gaps(eng, plain.prompt_tokens, plain.tokens)[i] <= MARGIN or gaps[i] <= MARGIN


def test_mtp_drafts_are_verified_losslessly_with_stats_per_source(mtp_models):
    # cost_bound 0: on a busy machine the bound may cut a request's drafts (the text stays the same);
    # what is tested here is that they are drafted, verified and counted
    with mtp_engine(mtp_models["good"], lookup="off", cost_bound=0) as eng:
        assert eng.draft is None and eng.draft_ctx.source == "mtp"  # no draft GGUF was loaded
        plain = eng.generate(PROMPT, temperature=0, max_tokens=40, spec=False)
        for k in ("1", "3", "6", "auto"):
            spec = eng.generate(PROMPT, temperature=0, max_tokens=40, draft_max=k)
            lossless(eng, plain, spec)
            mtp = spec.stats.sources["mtp"]
            assert mtp["drafted"] > 0 and mtp["acceptance_rate"] > 0.5, (k, spec.stats.sources)
            assert "draft" not in spec.stats.sources
        sampled = eng.generate(PROMPT, temperature=0.8, seed=5, max_tokens=40, draft_max="3", spec_mode="pq")
        assert sampled.stats.sources["mtp"]["drafted"] > 0


@pytest.mark.parametrize("stall", [1, 5])
def test_the_tuner_drops_a_head_that_does_not_pay(mtp_models, stall):
    """An MTP head whose drafts are all rejected costs a decode per token and buys nothing: auto K
    ends up decoding plain, and the text is still the target's. Also where the load-time timing of a
    plain step stalled (5x: another process busy then), which made every draft look cheap."""
    with mtp_engine(mtp_models["noise"], lookup="off") as eng:
        eng.tuners.known.verify_s[1] *= stall  # the tuner is made, from this, by the first spec request
        plain = eng.generate(PROMPT, temperature=0, max_tokens=60, spec=False)
        spec = eng.generate(PROMPT, temperature=0, max_tokens=60)
        lossless(eng, plain, spec)
        st = spec.stats
        assert st.sources.get("mtp", {}).get("acceptance_rate", 0.0) < 0.2
        costs = eng.tuners.costs
        floors = {n: [round(t * 1e3, 2) for t in f.samples] for n, f in costs.verify.items()}
        assert st.fell_back or st.started_plain or st.plain_steps > st.rounds, (st.k_history, floors)


def test_lookup_chains_with_the_mtp_head(mtp_models):
    repeat = "one two three four five six seven eight. " * 4
    with mtp_engine(mtp_models["good"], lookup="on", cost_bound=0) as eng:  # as above
        plain = eng.generate(repeat, temperature=0, max_tokens=40, spec=False)
        spec = eng.generate(repeat, temperature=0, max_tokens=40)
        lossless(eng, plain, spec)
        assert spec.stats.n_drafted > 0 and set(spec.stats.sources) <= {"mtp", "lookup"}


def test_mtp_with_four_sequences_at_once(mtp_models):
    prompts = [PROMPT, "Once upon a time", "def fibonacci(n):", "The capital of France is"]
    with mtp_engine(mtp_models["good"], lookup="off", parallel=4, cost_bound=0) as eng:  # as above
        plains = [eng.generate(p, temperature=0, max_tokens=24, spec=False) for p in prompts]
        handles = [eng.submit(p, temperature=0, max_tokens=24, draft_max=k) for p, k in zip(prompts, "1348")]
        for h in handles:
            for _ in h:
                pass
        for plain, h in zip(plains, handles):
            lossless(eng, plain, h.response)
            assert h.response.stats.sources["mtp"]["accepted"] > 0


def test_draft_mtp_needs_mtp_layers(smollm2_path):
    with pytest.raises(LocalspecError, match="no MTP layers"):
        Engine(Settings.load(target=smollm2_path, draft="mtp", n_ctx=256))
