"""The history: a continuation of the sequence's suffix from what this model read and wrote in
earlier requests (decode/history.py), offered for free after the request's own lookup. It offers
like the lookup (the tuner prices it under its own name, per match length, and
drops it where it does not pay), drafts where the plan leads with it, and keeps each finished
sequence. The index is the engine's (one per model, `remembers`), never shared between models."""

from __future__ import annotations

from typing import Sequence

from localspec.decode.clock import Clock
from localspec.decode.history import History
from localspec.decode.seqplan import SeqPlan
from localspec.decode.sources.base import DraftSource, SourceSpec
from localspec.decode.sources.lookup import MAX_PROPOSAL, draft_offer, offer_match
from localspec.decode.state import SeqState
from localspec.draft_len.evidence import LOOKUP
from localspec.evaluator import Evaluator


class HistorySource(DraftSource):
    spec = SourceSpec("history", evidence=LOOKUP)

    def __init__(self, history: History) -> None:
        self.history = history

    @classmethod
    def remembers(cls, settings) -> History | None:  # noqa: ANN001 - config.Settings
        return History(settings.history_tokens) if settings.history_tokens > 0 else None

    @classmethod
    def for_round(cls, draft: Evaluator | None, kept: History | None = None) -> "HistorySource | None":
        return cls(kept) if kept is not None else None

    def open(self, st: SeqState) -> bool | None:
        """It drafts, and remembers, where the request asks for lookup drafts."""
        return True if st.cfg.lookup and st.speculative else None

    def offer(self, p: SeqPlan) -> None:
        """Consulted after the request's own lookup (lookup drafts on): a second offer, the tuner
        picks which leads (a longer match in what an agent re-sends beats a short one of its own)."""
        if self.history.size and self.mine(p.st):
            offer_match(p, self.spec.name, *self.history.propose(p.st.tokens, MAX_PROPOSAL))

    def propose(self, plans: Sequence[SeqPlan], clock: Clock) -> None:
        draft_offer(plans, self.spec.name)

    def finish(self, st: SeqState) -> None:
        if self.mine(st):
            self.history.add(st.tokens)
