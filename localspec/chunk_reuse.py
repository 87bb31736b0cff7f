"""Which cached runs a new prompt can keep by moving them (llama-server's cache_reuse, for
`--cache-reuse`): after the common prefix, walk the cache and the prompt together; a cached run of
at least `n_min` tokens that comes next in the prompt moves back to where the prompt has it (the
text between was cut: an editor's file whose start left the window), a shorter one is skipped.
Pure: a context (llama.Context, the fake backend) carries the moves out."""

from __future__ import annotations

from typing import NamedTuple, Sequence


class Move(NamedTuple):
    src: int  # the run's first cached index
    dst: int  # where it goes (dst <= src: runs only move back)
    n: int


def plan(
    held: Sequence[int], prompt: Sequence[int], n_min: int, fixed: int = 0
) -> tuple[int, list[Move], int]:
    """(the common prefix, the moves in order, the tokens of `prompt` held after them). Cached
    indices below `fixed` never move (cells another sequence shares)."""
    n = next((i for i, (a, b) in enumerate(zip(held, prompt)) if a != b), min(len(held), len(prompt)))
    moves: list[Move] = []
    head_c = head_p = n
    while head_c < len(held) and head_p < len(prompt):
        m = 0
        while head_c + m < len(held) and head_p + m < len(prompt) and held[head_c + m] == prompt[head_p + m]:
            m += 1
        if m < max(n_min, 1) or head_c < fixed:
            head_c += 1
            continue
        moves.append(Move(head_c, head_p, m))
        head_c, head_p = head_c + m, head_p + m
    return n, moves, head_p
