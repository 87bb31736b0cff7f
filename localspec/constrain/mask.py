"""Restrict logits to the tokens a grammar allows: disallowed -> -inf, so every later step (top-k,
top-p, min-p, temperature, argmax, Gumbel-max) sees the target's distribution renormalised over the
allowed set - the same transform on the target's rows and the draft's, which keeps the rules exact."""

from __future__ import annotations

import numpy as np

_NEG_INF = np.float32(-np.inf)


def fit(mask: np.ndarray, n: int) -> np.ndarray:
    """`mask` over exactly n tokens: a model whose logits are wider than the vocabulary the grammar
    knows pads them with tokens it never allows; a narrower one cannot emit the extra ids anyway."""
    m = mask.shape[-1]
    if m == n:
        return mask
    if m > n:
        return mask[..., :n]
    out = np.zeros((*mask.shape[:-1], n), dtype=bool)
    out[..., :m] = mask
    return out


def apply_mask(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A masked float32 copy of `logits`: one row, or rows with one mask each or sharing one mask."""
    logits = np.asarray(logits, dtype=np.float32)
    mask = fit(mask, logits.shape[-1])
    if logits.ndim == 1:
        return _row(logits, mask)
    masks = np.broadcast_to(mask, logits.shape)
    return np.stack([_row(r, m) for r, m in zip(logits, masks)])


def _row(row: np.ndarray, mask: np.ndarray) -> np.ndarray:
    # write whichever side is smaller by index: masks are mostly very sparse (a key, a digit) or
    # very dense (inside a string), and a gather beats a full-width select by 2-4x either way
    n_allowed = int(np.count_nonzero(mask))
    if 2 * n_allowed < mask.shape[0]:
        out = np.full(row.shape, _NEG_INF, dtype=np.float32)
        ids = np.flatnonzero(mask)
        out[ids] = row[ids]
        return out
    out = row.copy()
    out[np.flatnonzero(~mask)] = _NEG_INF
    return out


def apply_mask_(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`apply_mask` in place (logits must be a writable float array); returns logits."""
    mask = fit(mask, logits.shape[-1])
    if logits.ndim == 1 and logits.dtype == np.float32:  # the round's case: one row, by index
        n_allowed = int(np.count_nonzero(mask))
        if 2 * n_allowed < mask.shape[0]:
            ids = np.flatnonzero(mask)
            kept = logits[ids]
            logits.fill(_NEG_INF)
            logits[ids] = kept
        else:
            logits[np.flatnonzero(~mask)] = _NEG_INF
        return logits
    np.copyto(logits, _NEG_INF, where=~mask)
    return logits
