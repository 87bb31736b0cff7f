"""Decoding items whose tokens hold image ids (llama/vision.py) on a context with a projector.

A llama_batch holds token ids or embedding rows, never both, so an item with images is decoded
alone, run by run in order: its text through the context's usual path, each image's rows as an
embedding batch (n_batch rows at a time, as mtmd's own helper splits them; with the attention mask
bidirectional for projectors that want it, Gemma 3's; at the 2-D positions the projector gives
for M-RoPE ones, Qwen-VL's). Items without images share one decode as before. Only prompts hold
images, so this costs a prefill, never a decoding round.
"""

from __future__ import annotations

from typing import Any, Sequence

import llama_cpp as C
import numpy as np

from localspec.llama.vision import ID_BITS
from localspec.top_logits import TopLogits

Context = Any  # llama.context.Context, which imports this module (an import back would be a cycle)


def decode(ctx: Context, items: Sequence) -> list:
    """Each item's logits rows (copies), as `Context._decode` returns them."""
    out: list = [None] * len(items)
    plain = [i for i, it in enumerate(items) if min(it[1]) >= 0]
    for i, it in enumerate(items):
        if i not in plain:
            out[i] = _item(ctx, *it)
    if plain:
        for i, rows in zip(plain, ctx._decode([items[i] for i in plain], copy=True)):
            out[i] = rows
    return out


def _item(ctx: Context, seq: int, tokens: Sequence[int], pos: int, n_logits: int):  # noqa: ANN202
    toks = np.asarray(tokens, np.int64)
    want = np.arange(len(toks)) >= len(toks) - n_logits
    is_image = toks < 0
    run = np.where(is_image, (-toks - 1) >> ID_BITS, -1)  # which image (-1: text): one run each
    edges = [0, *(np.flatnonzero(run[1:] != run[:-1]) + 1).tolist(), len(toks)]
    parts = []
    for a, b in zip(edges, edges[1:]):
        if is_image[a]:
            parts += _image(ctx, seq, toks[a:b], pos + a, want[a:b])
        else:
            rows = ctx._decode([(seq, toks[a:b].astype(np.int32), pos + a, int(want[a:b].sum()))], copy=True)[
                0
            ]
            parts += [rows] if len(rows) else []
    return joined(parts, ctx.n_vocab)


def _image(ctx: Context, seq: int, ids: np.ndarray, pos: int, want: np.ndarray) -> list:
    rows = ctx.projector.rows(ids)
    place = None
    if ctx.projector.mrope:  # placed from the position of the image's first row, wherever it was cut
        first = pos - int((-ids[0] - 1) & ((1 << ID_BITS) - 1))
        place = ctx.projector.place(ids, ctx.position(seq, first))
    parts = []
    non_causal = ctx.projector.non_causal
    if non_causal:
        C.llama_set_causal_attn(ctx.ptr, False)
    try:
        for a in range(0, len(ids), ctx.n_batch):
            b = min(len(ids), a + ctx.n_batch)
            p = np.arange(pos + a, pos + b, dtype=np.int32)
            s = np.full(b - a, seq, np.int32)
            at = None if place is None else (place[0][:, a:b], place[1][a:b])
            n_out = ctx._decode_chunk(ids[a:b].astype(np.int32), p, s, want[a:b], ids[a:b], rows[a:b], at)
            if n_out:
                parts.append(_rows(ctx, seq, n_out))
    finally:
        if non_causal:
            C.llama_set_causal_attn(ctx.ptr, True)
    return parts


def joined(parts: list, n_vocab: int):  # noqa: ANN202 - rows or TopLogits
    """One item's rows from the decodes that made them (Context's batches and these)."""
    if not parts:
        return np.zeros((0, n_vocab), np.float32)
    if len(parts) == 1:
        return parts[0]
    return TopLogits.concat(parts) if isinstance(parts[0], TopLogits) else np.concatenate(parts)


def _rows(ctx: Context, seq: int, n_out: int):  # noqa: ANN202
    """The last decode's n_out rows, copied (a prompt ending on an image asks for one)."""
    if ctx._top_on[seq]:
        return ctx._top_rows(-n_out, n_out).copy()
    return np.ctypeslib.as_array(C.llama_get_logits(ctx.ptr), shape=(n_out, ctx.n_vocab)).copy()
