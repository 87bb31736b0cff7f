"""The one definition of "the distribution" (decode/sampling.py), batched: every row of a round at
once, the top-k found with one pass over each row. Checked against the definition written out the
slow way (a full sort), on vocabularies of real size."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.decode.sampling import SamplingParams, process, process_rows, stack_rows, top_k

PARAMS = [
    SamplingParams(),  # llama.cpp's defaults: top-k 40, top-p 0.95, min-p 0.05, T 0.8
    SamplingParams(temperature=1.3, top_k=5, top_p=0.5, min_p=0.0),
    SamplingParams(temperature=0.7, top_k=100, top_p=1.0, min_p=0.2),
    SamplingParams(temperature=1.0, top_k=1, top_p=0.9, min_p=0.0),
]


def reference(row: np.ndarray, sp: SamplingParams) -> dict[int, float]:
    """The definition, the slow way: sort the whole row, then top-k, top-p, min-p, temperature."""
    order = np.argsort(-row.astype(np.float64), kind="stable")[: sp.top_k]
    x = row[order].astype(np.float64)
    order, x = order[np.isfinite(x)], x[np.isfinite(x)]
    p = np.exp(x - x[0])
    p /= p.sum()
    n = min(len(x), int(np.searchsorted(np.cumsum(p), sp.top_p)) + 1) if sp.top_p < 1 else len(x)
    n = min(n, int((x >= x[0] + np.log(sp.min_p)).sum())) if sp.min_p > 0 else n
    e = np.exp((x[:n] - x[0]) / sp.temperature)
    return dict(zip(order[:n].tolist(), (e / e.sum()).tolist()))


def _rows(v: int, seed: int, n: int = 3, scale: float = 2.5) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, v)) * scale).astype(np.float32)


@pytest.mark.parametrize("v", [151936, 262144, 50000, 1000])  # 50000: a tail past the last stride
@pytest.mark.parametrize("sp", PARAMS)
def test_batched_rows_are_the_definition(v, sp):
    rows = _rows(v, seed=v + sp.top_k)
    rows[1, np.random.default_rng(1).integers(0, v, v // 2)] = -np.inf  # a grammar's mask
    for got, row in zip(process_rows(rows, sp), rows):
        want = reference(row, sp)
        assert set(got.ids.tolist()) == set(want)
        assert np.allclose([want[t] for t in got.ids.tolist()], got.probs, rtol=1e-12, atol=0)


def test_one_row_alone_is_bit_for_bit_the_same_as_in_a_batch():
    rows = _rows(151936, seed=3, n=6)
    batched = process_rows(rows, SamplingParams())
    for row, b in zip(rows, batched):
        one = process(row, SamplingParams())
        assert one.ids.tolist() == b.ids.tolist() and one.probs.tobytes() == b.probs.tobytes()


def test_top_k_is_exact_where_the_largest_logits_crowd_one_group():
    v, k = 151936, 40
    row = _rows(v, seed=4, n=1, scale=1.0)
    w = v // 64
    row[0, 7 + w * np.arange(64)] = 50.0 + np.arange(64)  # every member of group 7 is huge
    ids, vals = top_k(row, k)
    assert set(ids[0].tolist()) == set(np.argsort(-row[0])[:k].tolist())
    assert np.array_equal(np.sort(vals[0]), np.sort(row[0])[-k:])


def test_rows_back_to_back_join_without_a_copy():
    buf = np.arange(5 * 8, dtype=np.float32).reshape(5, 8)
    joined = stack_rows([buf[0:2], buf[2:3], buf[3:5]])
    assert np.shares_memory(joined, buf) and np.array_equal(joined, buf)
    apart = stack_rows([buf[0:1], buf[2:3]])  # a gap: copied, in order
    assert not np.shares_memory(apart, buf) and np.array_equal(apart, buf[[0, 2]])
