"""Lookup drafts on a real model: tie-aware greedy, evidence kept per kind of request, the CLI."""

from __future__ import annotations

# -- on a real model -----------------------------------------------------------------------------
COPY_PROMPT = (
    '<ul>\n  <li><a href="/docs/install">Install</a></li>\n  <li><a href="/docs/quickstart">Quickstart</a></li>\n'
    '  <li><a href="/docs/config">Configuration</a></li>\n</ul>\n\nThe same list again:\n<ul>\n  <li><a href="'
)


def test_lookup_only_on_a_real_model_drafts_and_emits_only_the_targets_argmax(smollm2_path):
    """One GGUF, no draft model: lookup drafts are verified like any draft (tie-aware greedy)."""
    from localspec.config.settings import Settings
    from localspec.engine import Engine

    from ..helpers import MARGIN, teacher_forced_gaps

    s = Settings.load(target=smollm2_path, lookup="only", temperature=0.0, max_tokens=48, n_ctx=512)
    with Engine(s) as eng:
        assert eng.draft is None  # nothing but the target is loaded
        fixed = eng.generate(COPY_PROMPT, draft_max="4")
        auto = eng.generate(COPY_PROMPT)
        st = fixed.stats
        assert st.speculative and st.sources["lookup"]["drafted"] > 0 and "draft" not in st.sources
        assert st.sources["lookup"]["accepted"] > 0 and st.rounds < st.n_generated
        for r in (fixed, auto):
            gaps = teacher_forced_gaps(eng, r.prompt_tokens, r.tokens)
            assert gaps.max() <= MARGIN, gaps.round(3).tolist()


def test_sampled_requests_keep_their_lookup_evidence_apart_from_greedy_ones(smollm2_path):
    """A copy prompt sampled at T=0.8 teaches the sampled tuner about its lookup matches; the
    greedy tuner's lookup evidence stays as it was, and both price rounds on the same timings."""
    from localspec.config.settings import Settings
    from localspec.draft_len.evidence import LOOKUP_PRIORS, LOOKUP_PRIORS_SAMPLED
    from localspec.engine import Engine

    s = Settings.load(target=smollm2_path, lookup="only", max_tokens=40, n_ctx=512)
    with Engine(s) as eng:
        eng.generate(COPY_PROMPT, temperature=0.0)
        (greedy,) = eng.tuners.by_kind.values()
        before = greedy.evidence.offer_evidence("lookup")[1].copy()
        r = eng.generate(COPY_PROMPT, temperature=0.8, seed=3)
        assert r.stats.sources["lookup"]["drafted"] > 0
        sampled = next(t for t in eng.tuners.by_kind.values() if t is not greedy)
        assert sampled.evidence.offer_evidence("lookup")[1].sum() > 0
        assert (greedy.evidence.offer_evidence("lookup")[1] == before).all()
        assert greedy.cfg.prior_lookup == LOOKUP_PRIORS and sampled.cfg.prior_lookup == LOOKUP_PRIORS_SAMPLED
        assert sampled.costs is greedy.costs  # the machine's costs are one


def test_lookup_only_run_from_the_command_line(smollm2_path):
    from ..helpers import localspec

    args = ["run", "--target", str(smollm2_path), "--draft-max", "3", "--temperature", "0",
            "--max-tokens", "24", "--n-ctx", "256", "--no-log", COPY_PROMPT]  # fmt: skip
    ok = localspec(*args, "--lookup", "only")
    assert ok.returncode == 0, ok.stderr
    assert "lookup " in ok.stderr and "acceptance" in ok.stderr  # the per-source split
    bad = localspec(*args, "--lookup", "sometimes")  # click's own one-line choice error
    assert bad.returncode == 2 and "'sometimes' is not one of 'on', 'off', 'only'" in bad.stderr
    assert "Traceback" not in bad.stderr
