"""Prompt checkpoints on recurrent targets (llama/recurrent.py): a request whose prompt shares a
prefix with what its slot holds, but less than all of it, restores the state saved where the last
prompt's prefill ended and prefills only what follows - instead of emptying the sequence. Greedy
output stays the target's (tie-aware), and the prefilled token counts prove the reuse."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from tools.synthetic.arch import write_mamba, write_qwen35

from ..helpers import MARGIN, teacher_forced_gaps

PROMPT = (
    "The history of the lighthouse begins in the ancient world, where fires were lit on hilltops "
    "to guide ships home; later towers of stone carried the flames higher above the sea"
)


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("checkpoints")
    return {
        "qwen35": write_qwen35(smollm2_path, d / "qwen35.gguf", seed=1),
        "qwen35-sibling": write_qwen35(smollm2_path, d / "qwen35-sib.gguf", seed=1, perturb=0.1),
        "mamba": write_mamba(smollm2_path, d / "mamba.gguf", seed=2),
    }


def lossless(eng: Engine, fresh, r) -> None:  # noqa: ANN001
    """Every token the teacher-forced target's argmax (within MARGIN); equal to the fresh run's
    text up to a near-tie."""
    gaps = teacher_forced_gaps(eng, r.prompt_tokens, r.tokens)
    assert gaps.max() <= MARGIN, gaps.round(3).tolist()
    if r.tokens != fresh.tokens:
        i = next(i for i, (a, b) in enumerate(zip(r.tokens, fresh.tokens)) if a != b)
        assert gaps[i] <= MARGIN or teacher_forced_gaps(eng, fresh.prompt_tokens, fresh.tokens)[i] <= MARGIN


@pytest.mark.parametrize(
    "target, draft, rollback",
    [("qwen35", None, "snapshot"), ("qwen35", "qwen35-sibling", "rs"), ("mamba", None, "snapshot")],
)
def test_a_shorter_shared_prompt_restores_a_checkpoint(models, target, draft, rollback):
    s = Settings.load(
        target=models[target], draft=models[draft] if draft else None, n_ctx=512, lookup="off",
        tuner_cache=False,
    )  # fmt: skip
    with Engine(s) as eng:
        spec = dict(draft_max="3") if draft else dict(spec=False)
        ids = eng.tokenize(PROMPT)
        first = eng.generate(ids, temperature=0, max_tokens=24, **spec)
        assert eng.target_ctx.rollback == rollback
        assert first.stats.n_prefilled == len(ids)  # an empty slot: the whole prompt
        stats = eng.target_ctx.rollback_stats
        assert stats.checkpoints >= 1 and stats.checkpoint_bytes > 0

        # the same prompt again (a regenerated answer): the slot holds more than it shares
        again = eng.generate(ids, temperature=0, max_tokens=24, **spec)
        assert again.stats.n_prefilled == 1, again.stats.n_prefilled  # only the first verify's token
        assert stats.checkpoint_restores >= 1
        if draft:  # the draft took its checkpoint where its own catch-up reached the prompt's end
            assert eng.draft_ctx.rollback_stats.checkpoint_restores >= 1
        lossless(eng, first, again)

        # a follow-up that keeps part of the answer and goes on differently (a chat turn whose answer
        # re-renders): the prompt's checkpoint serves it, only the rest is prefilled
        follow = ids + first.tokens[:5] + eng.tokenize(" Then came the lens.")[1:]
        restores = stats.checkpoint_restores
        reused = eng.generate(follow, temperature=0, max_tokens=16, **spec)
        assert stats.checkpoint_restores == restores + 1
        assert reused.stats.n_prefilled == len(follow) - (len(ids) - 1), reused.stats.n_prefilled
        eng.clear_cache()
        fresh = eng.generate(follow, temperature=0, max_tokens=16, **spec)
        assert fresh.stats.n_prefilled == len(follow)
        lossless(eng, fresh, reused)

        # sharing less than any checkpoint: nothing to restore, a full prefill, still right
        other = ids[:10] + eng.tokenize(" and nobody remembers why.")[1:]
        short = eng.generate(other, temperature=0, max_tokens=12, **spec)
        assert short.stats.n_prefilled == len(other)
        eng.clear_cache()
        lossless(eng, eng.generate(other, temperature=0, max_tokens=12, **spec), short)


@pytest.mark.parametrize("target", ["qwen35", "mamba"])
def test_a_shared_long_prefix_restores_a_checkpoint_inside_the_prompt(models, target):
    """Two prompts sharing a 300-token prefix (a system prompt) but not their ends: the second
    restores the checkpoint the first one's prefill kept at 256 tokens (CHECKPOINT_FIRST)."""
    s = Settings.load(target=models[target], n_ctx=512, lookup="off", tuner_cache=False)
    with Engine(s) as eng:
        shared = eng.tokenize(" ".join([PROMPT] * 10))[:300]
        a = shared + eng.tokenize(" What came first?")[1:]
        b = shared + eng.tokenize(" Who kept them lit?")[1:]
        first = eng.generate(a, temperature=0, max_tokens=8, spec=False)
        assert first.stats.n_prefilled == len(a)
        assert eng.target_ctx.rollback_stats.checkpoints == 2  # at 256, and where the prefill ended
        second = eng.generate(b, temperature=0, max_tokens=8, spec=False)
        assert second.stats.n_prefilled == len(b) - 256
        eng.clear_cache()
        lossless(eng, eng.generate(b, temperature=0, max_tokens=8, spec=False), second)
