"""Embeddings through the engine: inputs (texts or token ids) tokenized and bounded, packed into
passes of the embeddings context (llama/embed.py), each pass one command on the engine thread
between rounds - so a long list of inputs holds a running generation up by one pass at a time, never
by the whole list - and scaled to unit length, as OpenAI's are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from localspec.errors import LocalspecError, PromptTooLong
from localspec.text_input import require_text

MAX_INPUTS = 2048  # one request's inputs at most (OpenAI's bound)
MAX_TOKENS = 300_000  # and its tokens in all (OpenAI's)
MAX_CHARS = 1 << 20  # characters of one input tokenized whole (/tokenize's bound): more is refused ...
CUT_CHARS = 4  # ... or, with truncate, cut first: n_ctx * this many characters, more if they fall short


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # (inputs, n_embd) float32, each of unit length
    n_tokens: list[int]  # each input's tokens, as embedded (after any truncation)

    @property
    def total_tokens(self) -> int:
        return sum(self.n_tokens)


def token_lists(
    target: Any, inputs: Sequence[str | Sequence[int]], n_ctx: int, truncate: bool
) -> list[list[int]]:
    """Each input's tokens: a text tokenized as the model reads a prompt (BOS included where its
    vocabulary adds one), ids checked against the vocabulary; longer than n_ctx is cut to n_ctx when
    `truncate` (Ollama's way), else refused (OpenAI's)."""
    if not inputs or len(inputs) > MAX_INPUTS:
        raise LocalspecError(f"give 1 to {MAX_INPUTS} inputs to embed (got {len(inputs)})")
    out, total = [], 0
    for i, x in enumerate(inputs):
        if isinstance(x, str):
            ids = _tokens(target, require_text(x, f"input {i}"), n_ctx if truncate else None, i)
        else:
            bad = next((t for t in x if not 0 <= t < target.n_vocab), None)
            if bad is not None:
                raise LocalspecError(
                    f"input {i}: token {bad} is not in the vocabulary (0..{target.n_vocab - 1})"
                )
            ids = list(x)
        if not ids:
            raise LocalspecError(f"input {i} is empty: there is nothing to embed")
        if len(ids) > n_ctx and not truncate:
            raise PromptTooLong(
                f"input {i} is {len(ids)} tokens; the embeddings context takes {n_ctx} "
                "(shorten it, or start the server with a larger --embed-ctx)",
                n_prompt=len(ids), n_ctx=n_ctx,
            )  # fmt: skip
        out.append(ids[:n_ctx])
        total += len(out[-1])
        if total > MAX_TOKENS:
            raise LocalspecError(f"the inputs hold more than {MAX_TOKENS} tokens in all; send them in parts")
    return out


def _tokens(target: Any, text: str, cut: int | None, i: int) -> list[int]:
    """A text's tokens: whole (at most MAX_CHARS characters), or with `cut` at least its first cut
    tokens from a prefix of the text, never all of a long one (7.8 MB took 10-16 s to embed 512)."""
    if cut is None:
        if len(text) > MAX_CHARS:
            raise LocalspecError(
                f"input {i} is {len(text)} characters; at most {MAX_CHARS} are tokenized "
                "(or let it be truncated to the embeddings context)"
            )
        return target.tokenize(text, add_special=True, parse_special=False)
    size = cut * CUT_CHARS
    while True:  # a prefix long enough that its first `cut` tokens are those of the whole text
        ids = target.tokenize(text[:size], add_special=True, parse_special=False)
        if size >= len(text) or len(ids) > cut + 1:
            return ids
        size *= 2


def passes(lengths: Sequence[int], n_ctx: int, max_seqs: int) -> list[range]:
    """Consecutive inputs grouped into passes of at most n_ctx tokens and max_seqs inputs each."""
    out: list[range] = []
    start, used = 0, 0
    for i, n in enumerate(lengths):
        if i > start and (used + n > n_ctx or i - start == max_seqs):
            out.append(range(start, i))
            start, used = i, 0
        used += n
    if lengths:
        out.append(range(start, len(lengths)))
    return out


def unit(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1 (a zero row stays zero)."""
    if not np.isfinite(vectors).all():
        raise LocalspecError("the model produced an embedding with NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
