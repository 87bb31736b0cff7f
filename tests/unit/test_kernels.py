"""The sampler's compiled row kernels (decode/_kernels.c) against the numpy definition in
decode/sampling.py and decode/noise.py: the same kept sets, ids and choices, the same probabilities
to the last few bits (libm's exp against numpy's), on rows made to be hard - ties, masks, the top
crowded into one block, rows shorter than a block, NaN - and one clear error for a wrong array."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from localspec.decode import noise, sampling
from localspec.decode.sampling import SamplingParams, process_rows
from localspec.top_logits import TopLogits

KERNEL = sampling.KERNEL


def test_this_build_has_the_kernels():
    """`make setup` compiles them (setup.py); a silent fallback to numpy would cost ~2 ms a round."""
    assert KERNEL is not None and KERNEL.isa() in ("avx512f", "avx2", "scalar")


def numpy_only(fn, *args):
    """fn run on the numpy definition: the kernel switched off for the call (a fully masked row's
    arithmetic is NaN there, as in the kernel)."""
    sampling.KERNEL = None
    try:
        with np.errstate(invalid="ignore"):
            return fn(*args)
    finally:
        sampling.KERNEL = KERNEL


def _rows(seed: int, n: int, v: int, shape: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, v), dtype=np.float32) * 2.5
    if shape == "quantised":  # ties everywhere
        rows = np.round(rows * 2) / 2
    elif shape == "masked":  # a grammar's mask: most of the row -inf
        rows[rng.random((n, v)) < 0.9] = -np.inf
    elif shape == "crowded":  # the largest logits all in one block of 64
        block = rows[:, 64:128]
        block[:] = 40.0 + rng.standard_normal(block.shape, dtype=np.float32)
    elif shape == "ascending":  # every logit beats the ones before it
        rows = np.sort(rows, axis=1)
    return rows


def _same(got, want, rows: np.ndarray, k: int) -> None:
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a.probs, b.probs, rtol=1e-12, atol=1e-300)
        assert len(a.ids) == len(b.ids)
        kth = np.sort(rows[i])[-k]
        if (rows[i] >= kth).sum() == k:  # no tie across the k-th value: the very same tokens
            assert a.ids.tolist() == b.ids.tolist()
        else:  # a tie across it: the kernel keeps the lowest ids of the tied value (numpy: any)
            tied = np.flatnonzero(rows[i] == kth)
            assert set(a.ids.tolist()) - set(b.ids.tolist()) <= set(tied[:k].tolist())


@settings(max_examples=150, deadline=None)
@example(seed=0, n=2, v=151936, k=40, top_p=0.95, min_p=0.05, t=0.8, shape="crowded")
@example(seed=1, n=1, v=64, k=64, top_p=1.0, min_p=0.0, t=0.3, shape="random")
@example(seed=2, n=3, v=7, k=7, top_p=0.5, min_p=0.0, t=1.0, shape="quantised")
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 5),
    v=st.sampled_from([7, 64, 100, 1000, 5000, 49152, 151936]),
    k=st.integers(1, 200),
    top_p=st.sampled_from([1.0, 0.95, 0.5]),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
    t=st.sampled_from([0.3, 0.8, 1.0, 1.5]),
    shape=st.sampled_from(["random", "quantised", "masked", "crowded", "ascending"]),
)
def test_whole_rows_are_the_definition(seed, n, v, k, top_p, min_p, t, shape):
    rows = _rows(seed, n, v, shape)
    sp = SamplingParams(temperature=t, top_k=k, top_p=top_p, min_p=min_p)
    got, want = process_rows(rows, sp), numpy_only(process_rows, rows, sp)
    assert got.keep.tolist() == want.keep.tolist()
    _same(got, want, rows, min(k, v))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    k=st.integers(1, 64),
    top_p=st.sampled_from([1.0, 0.95]),
    min_p=st.sampled_from([0.0, 0.05]),
    wide=st.booleans(),
)
def test_rows_as_their_largest_logits_are_the_definition(seed, n, k, top_p, min_p, wide):
    rows = _rows(seed, n, 5000, "random")
    top = TopLogits.of_rows(rows, 64)
    if wide:
        top = TopLogits(top.ids.astype(np.int64), top.logits)
    sp = SamplingParams(temperature=0.8, top_k=k, top_p=top_p, min_p=min_p)
    got, want = process_rows(top, sp), numpy_only(process_rows, top, sp)
    assert got.keep.tolist() == want.keep.tolist()
    _same(got, want, rows, k)
    whole = process_rows(rows, sp)  # and whole rows, through the kernel too: bit for bit
    assert whole.ids.tolist() == got.ids.tolist() and whole.probs.tobytes() == got.probs.tobytes()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8), w=st.integers(1, 40))
def test_the_coupled_choice_is_the_definition(seed, n, w):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 262144, (n, w))
    probs = rng.random((n, w))
    probs[:, w // 2 :] *= rng.random((n, 1)) < 0.5  # padding: probability 0 never wins
    keys = [int(k) for k in rng.integers(0, 2**63, n, dtype=np.uint64)]
    assert noise.choose(keys, ids, probs) == numpy_only(noise.choose, keys, ids, probs)


def test_a_nucleus_reached_exactly_keeps_what_the_definition_keeps():
    """Four equal logits at top_p 0.5: the mass reaches 0.5 exactly at the second token, and the
    smallest prefix of mass >= top_p is two tokens - on both sides of an exact comparison."""
    rows = np.zeros((1, 4), np.float32)
    sp = SamplingParams(temperature=1.0, top_k=4, top_p=0.5, min_p=0.0)
    got, want = process_rows(rows, sp), numpy_only(process_rows, rows, sp)
    assert got.keep.tolist() == want.keep.tolist() == [2]


def test_rows_shared_among_threads_are_each_their_own():
    """A verify step's 40 rows of 152k go to two threads (where OpenMP and two cores are): each row
    comes out as it does alone."""
    rows = _rows(5, 40, 151936, "random")
    rows[7] = _rows(6, 1, 151936, "crowded")[0]
    both = process_rows(rows, SamplingParams())
    for i in (0, 7, 19, 20, 39):
        one = process_rows(rows[i : i + 1], SamplingParams())
        assert one.ids.tolist() == both[i : i + 1].ids.tolist()
        assert one.probs.tobytes() == both.probs[i : i + 1].tobytes()


def test_a_row_with_nan_counts_it_as_minus_infinity():
    rows = _rows(3, 2, 49152, "random")
    rows[0, [5, 700, 30000]] = np.nan
    sp = SamplingParams()
    clean = rows.copy()
    clean[np.isnan(clean)] = -np.inf
    got, want = process_rows(rows, sp), process_rows(clean, sp)
    assert got.ids.tolist() == want.ids.tolist() and np.array_equal(got.probs, want.probs)


def test_a_fully_masked_row_is_defined():
    rows = np.full((1, 1000), -np.inf, np.float32)
    got = process_rows(rows, SamplingParams())  # nothing to sample: numpy gives NaN, so does the kernel
    assert got.ids.shape == (1, 40)


def test_wrong_arrays_are_one_clear_error():
    ids, probs, keep = np.empty((1, 4), np.int64), np.empty((1, 4)), np.empty(1, np.int64)
    f32 = np.zeros((1, 10), np.float32)
    with pytest.raises(TypeError, match="rows: a 2-D array"):
        KERNEL.process_rows([np.zeros((1, 10))], 4, 0.8, 0.95, 0.05, ids, probs, keep)  # float64
    with pytest.raises(TypeError, match="a list of 2-D arrays"):
        KERNEL.process_rows(3, 4, 0.8, 0.95, 0.05, ids, probs, keep)
    with pytest.raises(ValueError, match="blocks of different widths"):
        KERNEL.process_rows([f32, np.zeros((1, 11), np.float32)], 4, 0.8, 0.95, 0.05, ids, probs, keep)
    with pytest.raises(ValueError, match="k=11 outside 1..10"):
        KERNEL.process_rows([f32], 11, 0.8, 0.95, 0.05, ids, probs, keep)
    with pytest.raises(ValueError, match="smaller than"):
        KERNEL.process_rows([f32, f32], 4, 0.8, 0.95, 0.05, ids, probs, keep)
    with pytest.raises(TypeError, match="probs_out"):
        KERNEL.process_rows([f32], 4, 0.8, 0.95, 0.05, ids, ids, keep)
    with pytest.raises(ValueError, match="one key per row"):
        KERNEL.choose([1, 2], ids, probs)


def test_blocks_are_taken_one_after_another():
    """A step's rows come as one block per sequence (views of the decode's buffer, not joined)."""
    rows = _rows(7, 6, 49152, "random")
    blocks = [rows[0:1], rows[1:4].copy(), rows[4:6]]
    joined, apart = process_rows(rows, SamplingParams()), process_rows(blocks, SamplingParams())
    assert joined.ids.tolist() == apart.ids.tolist() and joined.probs.tobytes() == apart.probs.tobytes()


def test_position_keys_are_the_definition():
    g = noise.KeyedGumbel(2**70 + 12345)
    assert g.pos_keys(1000, 5) == [g.pos_key(1000 + j) for j in range(5)]
