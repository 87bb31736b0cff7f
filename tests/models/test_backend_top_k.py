"""Rows as their largest logits, from llama.cpp's backend top-k (`--backend-top-k`), on real models:
the candidates are exactly the whole row's top ones, a sequence that needs whole rows gets them in
the same decode, and generation is token for token what whole rows give (same batches, same
logits: no batch effect to allow for)."""

from __future__ import annotations

import numpy as np

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.llama import Context
from localspec.top_logits import TopLogits

PROMPT = list(range(200, 232))


def test_top_rows_are_the_whole_rows_largest(smollm2):
    with (
        Context(smollm2, n_ctx=256, n_seq=2) as whole,
        Context(smollm2, n_ctx=256, n_seq=2, backend_top_k=64) as top,
    ):
        assert whole.top_k == 0 and top.top_k == 64
        items = [(0, PROMPT, 0, 5), (1, PROMPT[:20], 0, 3)]
        want = [rows.copy() for rows in whole.eval_views(items)]
        got = top.eval_views(items)
        for rows, cand in zip(want, got):
            assert isinstance(cand, TopLogits) and cand.logits.shape == (len(rows), 64)
            ref = TopLogits.of_rows(rows, 64)
            for i in range(len(rows)):
                assert set(cand.ids[i].tolist()) == set(ref.ids[i].tolist())
                np.testing.assert_array_equal(cand.logits[i], rows[i][cand.ids[i]])
        # one sequence back on whole rows: it gets them, the other keeps its candidates, same decode
        assert top.use_top_logits(1, False) is False
        whole_next = whole.eval_views([(0, [7], 32, 1), (1, [8], 20, 1)])[1].copy()
        a, b = top.eval_views([(0, [7], 32, 1), (1, [8], 20, 1)])
        assert isinstance(a, TopLogits) and isinstance(b, np.ndarray)
        np.testing.assert_array_equal(b, whole_next)
        assert isinstance(top.eval([9], 33), np.ndarray)  # eval and eval_batch: whole rows always


def test_generation_is_the_same_with_top_rows(smollm2_path, standin_pair):
    """Sampled (coupled, llama.cpp's sampler chain) and greedy, plain and speculative: the same
    tokens with the rows as their 64 largest logits as with whole rows."""
    draft = standin_pair.parent / "draft-q8_0.gguf"
    runs = {}
    for top_k in (0, 64):
        s = Settings.load(target=smollm2_path, draft=draft, n_ctx=512, backend_top_k=top_k)
        with Engine(s) as eng:
            assert eng._pair.target_ctx.top_k == top_k
            for temperature in (0.0, 0.8):
                ask = dict(chat=True, max_tokens=24, seed=3, temperature=temperature, spec_mode="coupled")
                runs[top_k, temperature, "plain"] = eng.generate(
                    "Name three rivers.", spec=False, **ask
                ).tokens
                runs[top_k, temperature, "spec"] = eng.generate(
                    "Name three rivers.", draft_max="3", **ask
                ).tokens
    for key, tokens in runs.items():
        if key[0] == 64:
            assert tokens == runs[(0, *key[1:])], key
