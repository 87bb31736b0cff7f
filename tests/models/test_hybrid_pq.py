"""pq sampling on the synthetic qwen35 hybrid target through llama.cpp's real rollback: the joint
distribution of the first three tokens is the target's own, whether rejections are rolled back by
n_rs_seq (rs) or by a saved recurrent state and a replay (snapshot). The draft is a sibling that
agrees with the target ~60% of the time, so both rejections and bonus tokens happen; four requests
run at once, so the rollback also works inside a batch of sequences."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.config.settings import Settings
from localspec.decode.sampling import SamplingParams, process
from localspec.engine import Engine
from localspec.gguf import memory_plan
from localspec.llama import Context
from tools.synthetic.arch import write_qwen35

from ..helpers import CHI2_999, chi2

PROMPT = "The lighthouse"
N_TOKENS, TRIALS, PARALLEL = 3, 240, 4  # the residual-is-p bug scores ~65 here
# top_k 2 keeps 2^3 cells (7 degrees of freedom) well filled; T 1.5 keeps neither token rare
ASK = dict(temperature=1.5, top_k=2, top_p=1.0, min_p=0.0, spec_mode="pq", max_tokens=N_TOKENS)


@pytest.fixture(scope="module")
def pair(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("hybrid-pq")
    return write_qwen35(smollm2_path, d / "t.gguf", seed=1), write_qwen35(
        smollm2_path, d / "d.gguf", seed=1, perturb=0.1
    )


def target_joint(eng: Engine, ids: list[int]) -> dict[tuple[int, ...], float]:
    """P(t1, t2, t3 | prompt) of the target alone, from its teacher-forced rows."""
    sp = SamplingParams(**{k: ASK[k] for k in ("temperature", "top_k", "top_p", "min_p")})
    joint = {(): 1.0}
    with Context(eng.target, n_ctx=256) as ctx:
        for _ in range(N_TOKENS):
            nxt = {}
            for seq, p in joint.items():
                ctx.reset()
                row = ctx.eval(ids + list(seq), 0, 1)[0]
                dist = process(row, sp).dense(len(row))
                for tok in np.flatnonzero(dist):
                    nxt[seq + (int(tok),)] = p * float(dist[tok])
            joint = nxt
    return joint


@pytest.mark.parametrize("rollback", ["rs", "snapshot"])
def test_pq_joint_distribution_is_the_hybrid_targets(pair, rollback, monkeypatch):
    if rollback == "snapshot":  # the same arch without n_rs_seq: llama.cpp's saved-state rollback
        monkeypatch.setattr(memory_plan, "RS_KEEP", 0)
    target, draft = pair
    s = Settings.load(
        target=target, draft=draft, n_ctx=256, lookup="off", tuner_cache=False, parallel=PARALLEL
    )
    with Engine(s) as eng:
        assert eng.target_ctx.rollback == rollback
        ids = eng.tokenize(PROMPT)
        joint = target_joint(eng, ids)
        cells = {seq: i for i, seq in enumerate(joint)}
        counts = np.zeros(len(cells))
        drafted = accepted = 0
        for first in range(0, TRIALS, PARALLEL):
            handles = [
                eng.submit(ids, seed=seed, draft_max="2", **ASK) for seed in range(first, first + PARALLEL)
            ]
            for h in handles:
                for _ in h:
                    pass
                r = h.response
                assert tuple(r.tokens) in cells, r.tokens  # a token outside the target's top 2
                counts[cells[tuple(r.tokens)]] += 1
                drafted += r.stats.n_drafted
                accepted += r.stats.n_accepted
        stats = eng.target_ctx.rollback_stats
    assert 0.3 < accepted / drafted < 0.9  # rejections (rolled back) and bonus tokens both happened
    assert (stats.rs_rollbacks if rollback == "rs" else stats.restores) > TRIALS // 4
    probs = np.array(list(joint.values()))
    assert chi2(counts, probs) < CHI2_999[len(cells) - 1], (counts, (probs * TRIALS).round(1))
