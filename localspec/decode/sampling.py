"""Logits -> the distribution we sample from, as one pure function shared by plain decoding, the
draft and the verifier. Speculative sampling is only lossless if target and draft distributions are
processed identically, so there is exactly one definition of "the distribution".

Order follows llama.cpp's default sampler chain: top-k -> top-p -> min-p -> temperature, then,
for fill-in-the-middle, the infill sampler (infill.py) where the request asks for it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from localspec.decode.infill import Infill, argmax_of, infill
from localspec.top_logits import TopLogits

try:  # the compiled row kernels (setup.py, _kernels.c): the same arithmetic as the numpy below, the
    # definition, which does the work where they did not build
    from localspec.decode import _kernels as KERNEL
except ImportError:  # pragma: no cover - a build without a C compiler
    KERNEL = None


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    infill: Infill | None = None  # llama.cpp's infill sampler last (infill.py)

    @property
    def greedy(self) -> bool:
        """Greedy on the raw logits' argmax. With the infill sampler, temperature 0 takes its
        distribution's argmax instead (process_rows: a one-point distribution), sampled as such."""
        return self.temperature <= 0.0 and self.infill is None


@dataclass(frozen=True)
class Dist:
    """A sparse distribution: token ids and their probabilities (sum 1)."""

    ids: np.ndarray  # int64
    probs: np.ndarray  # float64

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def top_prob(self) -> float:
        return float(self.probs.max())

    def sample(self, rng: np.random.Generator) -> int:
        # inverse-CDF on one uniform keeps the draw count per token fixed (reproducible streams)
        c = np.cumsum(self.probs)
        i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


class Dists(Sequence[Dist]):
    """Several rows' distributions, padded into matrices: row i is ids[i, :keep[i]] with
    probs[i, :keep[i]] (probability 0 after); indexing gives its `Dist`, slicing a `Dists`."""

    def __init__(self, ids: np.ndarray, probs: np.ndarray, keep: np.ndarray) -> None:
        self.ids, self.probs, self.keep = ids, probs, keep
        self.kept: list[int] = keep.tolist()  # keep, as ints

    @classmethod
    def of(cls, dists: Sequence[Dist]) -> "Dists":
        width = max(len(d.ids) for d in dists)
        ids, probs = np.zeros((len(dists), width), np.int64), np.zeros((len(dists), width))
        for i, d in enumerate(dists):
            ids[i, : len(d.ids)], probs[i, : len(d.ids)] = d.ids, d.probs
        return cls(ids, probs, np.array([len(d.ids) for d in dists]))

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - an int or a slice
        if isinstance(i, slice):
            return Dists(self.ids[i], self.probs[i], self.keep[i])
        m = self.kept[i]
        return Dist(self.ids[i, :m], self.probs[i, :m])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def process(logits: np.ndarray | TopLogits, params: SamplingParams) -> Dist:
    """The filtered, temperature-scaled distribution for one logits row (whole, or its largest)."""
    if isinstance(logits, TopLogits):
        return process_rows(TopLogits(logits.ids[None], logits.logits[None]), params)[0]
    return process_rows(np.asarray(logits, dtype=np.float32)[None], params)[0]


def process_rows(rows: np.ndarray | TopLogits | list, params: SamplingParams) -> Dists:
    """`process` for every row of an (n, n_vocab) array at once (or of a list of such blocks, taken
    one after another): one pass over each row finds its top-k (`top_k`), and the filters then run
    on the (n, k) survivors, sorted by logit.
    The kept set and probabilities are the definitions': top-k, then top-p's smallest prefix of
    mass >= top_p, then min-p's logit_i >= logit_max + log(min_p), then softmax(logit / T).
    Rows given as their largest logits (`TopLogits`, from the backend's top-k) skip the pass over
    the row: their top-k is the row's when top_k <= their width.
    (Array methods rather than np.* functions, and no call that can be skipped: at k = 40 each
    call costs more than its arithmetic.)"""
    if params.infill is not None:
        return _infilled(process_rows(rows, dataclasses.replace(params, infill=None)), params)
    k = params.top_k
    if isinstance(rows, list):
        if KERNEL is not None and k and all(_whole_f32(b) for b in rows):  # the kernel takes blocks
            n, v = sum(len(b) for b in rows), rows[0].shape[1]
            return _kernel(KERNEL.process_rows, n, min(k, v), params, rows)
        rows = stack_rows(rows)
    if isinstance(rows, TopLogits):
        if KERNEL is not None and 0 < k <= rows.width:
            return _kernel(KERNEL.process_candidates, len(rows), k, params, rows.ids, rows.logits)
        ids, x = top_k_of(rows, k)
        n = len(rows)
    else:
        rows = np.asarray(rows, dtype=np.float32)
        n, v = rows.shape
        if not k:  # no top-k: the nucleus needs the whole row (the rare setting)
            return Dists.of([_process_full(r, params) for r in rows])
        k = min(k, v)  # a top-k as wide as the row: still in the one order rows' top-k agree on
        if KERNEL is not None:
            return _kernel(KERNEL.process_rows, n, k, params, [rows if _whole_f32(rows) else rows.copy()])
        ids, x = top_k(rows, k)
    x = x.astype(np.float64)
    top = x[:, :1]
    d = x - top
    e = np.exp(d)
    keep = None
    if params.top_p < 1.0:  # the prefix never reaches a masked (-inf, probability 0) token
        csum = e.cumsum(axis=1)
        keep = (csum < params.top_p * csum[:, -1:]).sum(axis=1) + 1
    if params.min_p > 0.0:
        # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)  (before temperature)
        km = (x >= top + math.log(params.min_p)).sum(axis=1)
        keep = km if keep is None else np.minimum(keep, km)
    if keep is None:  # every top-k token but a masked one
        keep = (x > -np.inf).sum(axis=1)
    t = params.temperature if params.temperature > 0 else 1.0
    if t != 1.0:
        e = np.exp(d / t)
    e[_consts(n, k)[1] >= keep[:, None]] = 0.0
    return Dists(ids, e / e.sum(axis=1, keepdims=True), keep)


def _infilled(dists: Dists, params: SamplingParams) -> Dists:
    """Each row through the infill sampler; at temperature 0, its most likely token alone."""
    out = []
    for d in dists:
        ids, p = infill(d.ids, d.probs, params.infill)  # type: ignore[arg-type] - checked by the caller
        if params.temperature <= 0.0:
            ids, p = np.array([argmax_of(ids, p)], np.int64), np.ones(1)
        out.append(Dist(ids, p))
    return Dists.of(out)


def _kernel(fn, n: int, k: int, params: SamplingParams, *rows: np.ndarray) -> Dists:  # noqa: ANN001
    """`process_rows` by the compiled kernel `fn` (whole rows or candidates): top-k, the filters and
    the softmax in one call, into arrays made here."""
    ids, probs, keep = np.empty((n, k), np.int64), np.empty((n, k)), np.empty(n, np.int64)
    fn(*rows, k, params.temperature, params.top_p, params.min_p, ids, probs, keep)
    return Dists(ids, probs, keep)


def _whole_f32(rows: object) -> bool:
    """A block the kernel reads as it is: a 2-D float32 array whose rows are contiguous."""
    return (
        isinstance(rows, np.ndarray) and rows.dtype == np.float32 and rows.ndim == 2 and rows.strides[1] == 4
    )


def stack_rows(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Several (n_i, n_vocab) arrays as one: a view when they lie back to back in memory (an
    evaluator's rows of one decode do: they are slices of one logits buffer), else a copy."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, TopLogits):
        return TopLogits.concat(list(parts))
    row_bytes = first.strides[0]
    end = first.__array_interface__["data"][0] + len(first) * row_bytes
    for part in parts[1:]:
        if part.strides != first.strides or part.__array_interface__["data"][0] != end:
            return np.concatenate(parts)
        end += len(part) * row_bytes
    if not first.flags.c_contiguous or first.dtype != parts[-1].dtype:
        return np.concatenate(parts)
    n = sum(len(part) for part in parts)
    return np.lib.stride_tricks.as_strided(first, shape=(n, first.shape[1]), writeable=False)


GROUP = 64  # top_k: tokens per stride group
_CONSTS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _consts(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(the row index column for n rows, arange(k)), made once."""
    c = _CONSTS.get((n, k))
    if c is None:
        c = _CONSTS[(n, k)] = (np.arange(n)[:, None], np.arange(k))
    return c


def top_k(rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids and logits of each row's k largest logits, largest first, exactly, with one pass
    over the row (ties at the k-th value are broken arbitrarily, as argpartition breaks them).

    Token i is in group i mod W (W = n_vocab // GROUP). The k groups with the largest maxima hold
    every logit above the k-th largest: a logit elsewhere is at most its group's maximum, which is
    at most the smallest of theirs, and each of theirs is matched by a logit. So the top k are the
    top k of those k * GROUP candidates - where argpartition over a 152k row costs a millisecond."""
    n, v = rows.shape
    w = v // GROUP
    at = _consts(n, k)[0]
    if w < 4 * k:  # a small vocabulary: the plain selection is as cheap
        ids = rows.argpartition(v - k, axis=1)[:, v - k :]
        x = rows[at, ids]
    else:
        main = rows[:, : GROUP * w].reshape(n, GROUP, w)
        groups = main.max(axis=1).argpartition(w - k, axis=1)[:, w - k :]  # the one pass: (n, k)
        cand = main[at, :, groups].reshape(n, k * GROUP)  # group j's members at j*GROUP..
        if v > GROUP * w:  # the tail beyond the last full stride: always a candidate
            cand = np.concatenate([cand, rows[:, GROUP * w :]], axis=1)
        m = cand.shape[1]
        best = cand.argpartition(m - k, axis=1)[:, m - k :]
        x = cand[at, best]
        ids = groups[at, np.minimum(best // GROUP, k - 1)] + w * (best % GROUP)
        if v > GROUP * w:
            ids = np.where(best < GROUP * k, ids, GROUP * w - GROUP * k + best)
    return _by_logit(ids, x, at)


def _by_logit(ids: np.ndarray, x: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's candidates largest logit first, equal logits by id: one order however they came
    (the p/q rule samples along it, so a whole row and its backend top-k must agree)."""
    order = np.lexsort((ids, -x), axis=1)
    return ids[at, order].astype(np.int64, copy=False), x[at, order]


def top_k_of(rows: TopLogits, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`top_k` of rows given as their largest logits: the k largest of those (k <= their width)."""
    m = rows.width
    if not 0 < k <= m:
        raise ValueError(f"top_k={k} needs the whole row: these rows hold their {m} largest logits")
    ids, x = rows.ids, rows.logits
    at = _consts(len(ids), k)[0]
    if k < m:
        best = x.argpartition(m - k, axis=1)[:, m - k :]
        ids, x = ids[at, best], x[at, best]
    return _by_logit(ids, x, at)


def _process_full(logits: np.ndarray, params: SamplingParams) -> Dist:
    """`process` without top-k: the nucleus over the whole vocabulary."""
    ids = np.arange(logits.shape[0])
    x = logits.astype(np.float64)
    if params.top_p < 1.0:
        p = _softmax(x)
        ids, x, p = _nucleus(ids, x, p, params.top_p)
    if params.min_p > 0.0:
        keep = x >= x.max() + np.log(params.min_p)
        ids, x = ids[keep], x[keep]
    t = params.temperature if params.temperature > 0 else 1.0
    # shifted before the division: a logit over a tiny temperature would overflow to inf (and NaN)
    return Dist(ids.astype(np.int64), _softmax((x - x.max()) / t))


def _nucleus(ids: np.ndarray, x: np.ndarray, p: np.ndarray, top_p: float):
    """Smallest set of most likely tokens with mass >= top_p. Sorting the whole vocabulary costs
    milliseconds, so sort only tokens above a threshold whose tail mass is provably < 1 - top_p."""
    eps = 1e-4
    while True:
        cand = p >= eps
        if p[~cand].sum() < 1.0 - top_p or eps < 1e-12:
            break
        eps *= 0.01
    ci = np.flatnonzero(cand)
    order = ci[np.argsort(-p[ci], kind="stable")]
    csum = np.cumsum(p[order])
    cut = int(np.searchsorted(csum, top_p, side="left")) + 1
    keep = order[: min(cut, len(order))]
    return ids[keep], x[keep], p[keep]


def argmax(logits: np.ndarray | TopLogits) -> int:
    return logits.argmax() if isinstance(logits, TopLogits) else int(np.argmax(logits))


@dataclass(frozen=True, kw_only=True)
class Penalties:
    """logit_bias and the repeat / presence / frequency penalties, as llama.cpp applies them first in
    its sampler chain (before top-k). They depend only on the tokens before a position, so the draft
    and the target apply the same transform at every position - the rules stay lossless and
    `coupled` keeps its seed - and plain decoding applies it too."""

    repeat: float = 1.0
    presence: float = 0.0
    frequency: float = 0.0
    last_n: int = 64  # tokens looked back over (prompt included, as llama-server does); -1 = all
    bias: tuple[tuple[int, float], ...] = ()

    @property
    def active(self) -> bool:
        return self.penalises or bool(self.bias)

    @property
    def penalises(self) -> bool:
        return self.last_n != 0 and (self.repeat != 1.0 or self.presence != 0.0 or self.frequency != 0.0)

    @cached_property
    def _banned(self) -> frozenset[int]:
        return frozenset(t for t, b in self.bias if b <= -100)

    def banned(self) -> frozenset[int]:
        """Tokens whose bias all but bans them (a lookup does not propose them)."""
        return self._banned

    @cached_property
    def _bias_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The bias as (ids, values) arrays, made once: a request's bias may hold a whole vocabulary
        (49k entries), and building these per row made every row cost ~20 ms."""
        ids = np.fromiter((t for t, _ in self.bias), np.int64, len(self.bias))
        return ids, np.fromiter((b for _, b in self.bias), np.float32, len(self.bias))

    def apply(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """A transformed float32 copy of one logits row; `history` is every token before it."""
        return self.apply_(np.array(logits, dtype=np.float32, copy=True), history)

    def biased(self, logits: np.ndarray) -> np.ndarray:
        """logit_bias alone on a float32 copy of one row (what the model may say, before penalties)."""
        return self._bias_(np.array(logits, dtype=np.float32, copy=True))

    def _bias_(self, out: np.ndarray) -> np.ndarray:
        if self.bias:
            ids, values = self._bias_arrays
            if ids.max() >= out.shape[0]:  # ids the draft's (smaller) vocabulary does not have
                keep = ids < out.shape[0]
                ids, values = ids[keep], values[keep]
            out[ids] += values
        return out

    def apply_(self, out: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """`apply` in place on a writable float32 row (sparse edits only); returns it."""
        self._bias_(out)
        if self.penalises and len(history):
            window = history if self.last_n < 0 else history[-self.last_n :]
            ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
            keep = (ids >= 0) & (ids < out.shape[0])  # an image's ids (negative) are no token
            ids, counts = ids[keep], counts[keep]
            x = out[ids]
            # llama.cpp: once per distinct token, dividing a positive logit and multiplying a negative one
            x = np.where(x > 0, x / self.repeat, x * self.repeat)
            out[ids] = x - counts * self.frequency - self.presence
        return out


# OpenAI's log-probability for a token that cannot be chosen (JSON has no -inf)
LOGPROB_FLOOR = -9999.0
Logprobs = tuple[float, tuple[tuple[int, float], ...]]


def _lp(x: float) -> float:
    return max(float(x), LOGPROB_FLOOR)


def logprobs(dist: Dist, token: int, top: int) -> Logprobs:
    """log p(token) under `dist`, and its `top` most likely tokens (ties: lower id first; only
    tokens the distribution keeps, so fewer where it keeps fewer)."""
    p = dist.prob(token)
    lp = _lp(np.log(p)) if p > 0 else LOGPROB_FLOOR
    if top <= 0:
        return lp, ()
    order = np.lexsort((dist.ids, -dist.probs))[:top]
    return lp, tuple((int(dist.ids[i]), _lp(np.log(dist.probs[i]))) for i in order)


def row_logprobs(row: np.ndarray, token: int, top: int) -> Logprobs:
    """log softmax(row)[token] over a whole logits row, and the row's `top` most likely tokens
    (ties: lower id first; always `top` of them: a masked token's is LOGPROB_FLOOR)."""
    x = np.asarray(row, dtype=np.float64)
    m = x.max()
    lse = m + math.log(np.exp(x - m).sum())
    lp = _lp(x[token] - lse)
    if top <= 0:
        return lp, ()
    top = min(top, len(x))
    kth = np.partition(x, len(x) - top)[len(x) - top]
    cand = np.flatnonzero(x >= kth)  # every token tied with the top-th, for one order however many
    best = cand[np.lexsort((cand, -x[cand]))][:top]
    return lp, tuple((int(t), _lp(x[t] - lse)) for t in best)
