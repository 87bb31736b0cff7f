"""The engine on synthetic recurrent targets (llama.cpp, real processes of decoding): a qwen35 hybrid
(rollback through n_rs_seq) and a mamba (rollback through saved state and replay), drafted by a
noisy sibling of the same architecture (partial acceptance; its own memory rolls back through
snapshots) and by SmolLM2 (same vocabulary, nearly every draft rejected). Greedy output equals
plain decoding, tie-aware as in test_spec_real: llama.cpp is not batch-invariant, so a divergence
is allowed only at a near-tie of the teacher-forced target."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from tools.synthetic.arch import write_mamba, write_qwen35

from ..helpers import MARGIN, teacher_forced_gaps

PROMPT = "The history of the lighthouse begins in the ancient world, where fires were lit"
N = 32


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("hybrid-engine")
    return {
        "qwen35": write_qwen35(smollm2_path, d / "qwen35.gguf", seed=1),
        "qwen35-sibling": write_qwen35(smollm2_path, d / "qwen35-sib.gguf", seed=1, perturb=0.25),
        "mamba": write_mamba(smollm2_path, d / "mamba.gguf", seed=2),
        "mamba-sibling": write_mamba(smollm2_path, d / "mamba-sib.gguf", seed=2, perturb=0.25),
        "smollm2": smollm2_path,
    }


def engine(models, target: str, draft: str | None, **kw) -> Engine:
    s = Settings.load(
        target=models[target],
        draft=models[draft] if draft else None,
        n_ctx=512,
        lookup="off",
        tuner_cache=False,
        **kw,
    )
    return Engine(s)


def assert_lossless(eng: Engine, plain, spec) -> None:  # noqa: ANN001
    """Tie-aware equality: every emitted token the teacher-forced target's argmax (within MARGIN)."""
    gaps = teacher_forced_gaps(eng, spec.prompt_tokens, spec.tokens)
    assert gaps.max() <= MARGIN, gaps.round(3).tolist()
    if spec.tokens != plain.tokens:
        i = next(i for i, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b)
        assert teacher_forced_gaps(eng, plain.prompt_tokens, plain.tokens)[i] <= MARGIN or gaps[i] <= MARGIN


@pytest.mark.parametrize(
    "target, rollback, ks",
    [
        ("qwen35", "rs", ["1", "2", "3", "4", "5", "6", "7", "8", "auto"]),
        ("mamba", "snapshot", ["1", "2", "3", "4", "5", "6", "7", "8", "auto"]),
    ],
)
def test_greedy_equals_plain_for_every_k(models, target, rollback, ks):
    with engine(models, target, f"{target}-sibling") as eng:
        assert eng.target_ctx.rollback == rollback and eng.draft_ctx.rollback == "snapshot"
        plain = eng.generate(PROMPT, temperature=0, max_tokens=N, spec=False)
        accepted = rejected = 0
        for k in ks:
            spec = eng.generate(PROMPT, temperature=0, max_tokens=N, draft_max=k)
            assert_lossless(eng, plain, spec)
            accepted += spec.stats.n_accepted
            rejected += spec.stats.n_drafted - spec.stats.n_accepted
        assert accepted > 0 and rejected > 0  # both paths of the rollback ran
        stats = eng.target_ctx.rollback_stats
        # every round's rollback is served by rs or a snapshot; a request whose prompt is shorter than
        # what its slot holds (here: each one) goes back to the checkpoint where its prefill ended
        assert stats.drops == 0 and stats.checkpoint_restores >= len(ks)
        assert (stats.rs_rollbacks if rollback == "rs" else stats.restores) > 0


@pytest.mark.parametrize("target", ["qwen35", "mamba"])
def test_smollm2_drafts_for_the_synthetic_target(models, target):
    """The embedded draft's vocabulary fits: it drafts, is nearly always rejected, and every
    rejection rolls the recurrent target back to exactly where plain decoding is."""
    with engine(models, target, "smollm2") as eng:
        plain = eng.generate(PROMPT, temperature=0, max_tokens=N, spec=False)
        spec = eng.generate(PROMPT, temperature=0, max_tokens=N, draft_max="3")
        assert spec.stats.n_drafted > 0
        assert_lossless(eng, plain, spec)


@pytest.mark.parametrize("target", ["qwen35", "mamba"])
def test_four_sequences_at_once(models, target):
    """K = 1..8 and auto, four requests in each batch: every sequence rolls back on its own."""
    prompts = [PROMPT, "Once upon a time", "def fibonacci(n):", "The capital of France is"]
    with engine(models, target, f"{target}-sibling", parallel=4) as eng:
        plains = [eng.generate(p, temperature=0, max_tokens=N, spec=False) for p in prompts]
        for ks in (["1", "2", "3", "4"], ["5", "6", "7", "8"], ["auto"] * 4):
            handles = [eng.submit(p, temperature=0, max_tokens=N, draft_max=k) for p, k in zip(prompts, ks)]
            for h in handles:
                for _ in h:
                    pass
            for plain, h, k in zip(plains, handles, ks):
                assert h.response.stats.n_drafted > 0 or k == "auto"  # auto may find plain faster
                assert_lossless(eng, plain, h.response)


@pytest.mark.parametrize("target", ["qwen35", "mamba"])
def test_cancel_and_stop_leave_the_slot_consistent(models, target):
    with engine(models, target, f"{target}-sibling") as eng:
        plain = eng.generate(PROMPT, temperature=0, max_tokens=N, spec=False)
        h = eng.submit(PROMPT, temperature=0, max_tokens=200, draft_max="4")
        for i, _ in enumerate(h):
            if i == 3:
                h.cancel()
        stop = plain.text[len(plain.text) // 2 :][:6]
        cut = eng.generate(PROMPT, temperature=0, max_tokens=N, draft_max="4", stop=[stop])
        assert cut.finish_reason == "stop" and plain.text.startswith(cut.text)
        again = eng.generate(PROMPT, temperature=0, max_tokens=N, draft_max="4")  # the same slot, reused
        assert_lossless(eng, plain, again)
        follow = PROMPT + cut.text  # extends what the slot holds: its prefix is reused
        plain2 = eng.generate(follow, temperature=0, max_tokens=16, spec=False)
        spec2 = eng.generate(follow, temperature=0, max_tokens=16, draft_max="3")
        assert_lossless(eng, plain2, spec2)


@pytest.mark.parametrize("target", ["qwen35", "mamba"])
def test_coupled_same_seed_same_text(models, target):
    """coupled sampling: a seed gives --no-spec's text at T = 0.8, whatever K (near-ties aside: the
    synthetic models' logits are far apart, so here the texts must match exactly)."""
    with engine(models, target, f"{target}-sibling") as eng:
        ask = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, spec_mode="coupled", max_tokens=24)
        for seed in (1, 2):
            plain = eng.generate(PROMPT, spec=False, seed=seed, **ask)
            for k in ("2", "5", "auto"):
                assert eng.generate(PROMPT, draft_max=k, seed=seed, **ask).tokens == plain.tokens, (seed, k)
