"""A model's running totals, filled from each finished request's Stats: data, formatted elsewhere
(/metrics renders them under vLLM's and llama.cpp's names, server/metrics.py)."""

from __future__ import annotations

import copy
import threading
from collections import Counter as Tally
from dataclasses import dataclass, field

from localspec.decode.stats import Stats


@dataclass
class Totals:
    finished: Tally = field(default_factory=Tally)  # finish reason -> requests
    cancelled: int = 0
    rejected: int = 0  # turned away with 503 (queue full)
    failed: int = 0  # ended with a server error (the generation failed, the engine was lost)
    prompt_tokens: int = 0
    prompt_evaluated: int = 0  # of those, what the target evaluated (the rest came from a cached prefix)
    draft_prompt_evaluated: int = 0  # ... and what the draft model evaluated
    generated_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0
    decode_tokens: int = 0  # tokens produced inside decode_s (each request's first comes with prefill)
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_by_pos: list[int] = field(default_factory=list)


class Counting:
    """Totals kept under a lock: requests end on the event loop, /metrics reads from anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = Totals()

    def record(self, stats: Stats, finish_reason: str) -> None:
        with self._lock:
            t = self._totals
            t.finished[finish_reason] += 1
            t.prompt_tokens += stats.n_prompt_tokens
            t.prompt_evaluated += stats.n_prefilled
            t.draft_prompt_evaluated += stats.n_draft_prefilled
            t.generated_tokens += stats.n_generated
            t.prompt_s += stats.prefill_ms / 1e3
            t.decode_s += stats.decode_ms / 1e3
            t.decode_tokens += max(stats.n_generated - 1, 0)
            t.drafts += stats.rounds
            t.draft_tokens += stats.n_drafted
            t.accepted_tokens += stats.n_accepted
            for i, n in enumerate(stats.accepted_by_pos):
                if i == len(t.accepted_by_pos):
                    t.accepted_by_pos.append(0)
                t.accepted_by_pos[i] += n

    def count(self, what: str) -> None:
        """Count a request that ended without a response: cancelled, rejected or failed."""
        with self._lock:
            setattr(self._totals, what, getattr(self._totals, what) + 1)

    def snapshot(self) -> Totals:
        with self._lock:
            return copy.deepcopy(self._totals)
