"""The lookup: the continuation of the longest recent match of the sequence's own suffix in its
prompt and output (decode/lookup.py; its index is the sequence's, `open`), proposed for free. It offers its proposal and the match's
length before K is chosen (the tuner prices it by the match length's evidence), and drafts it
where the plan puts the lookup first."""

from __future__ import annotations

from typing import Sequence

from localspec.decode.clock import Clock
from localspec.decode.lookup import Lookup
from localspec.decode.rows import constrained, grammar_aware, one_point_q, unbanned
from localspec.decode.seqplan import SeqPlan, offered
from localspec.decode.sources.base import DraftSource, SourceSpec
from localspec.decode.state import SeqState, Step
from localspec.draft_len.controller import Offer
from localspec.draft_len.evidence import LOOKUP
from localspec.evaluator import Evaluator

MAX_PROPOSAL = 16  # tokens a lookup proposes at most (AUTO_K_MAX)


class LookupSource(DraftSource):
    spec = SourceSpec("lookup", evidence=LOOKUP)

    @classmethod
    def for_round(cls, draft: Evaluator | None, kept: None = None) -> "LookupSource":
        return cls()

    def open(self, st: SeqState) -> Lookup | None:
        """The n-gram index over the sequence's text (and the text the request adds before it),
        when it asks for lookup drafts."""
        return Lookup([*st.cfg.lookup_text, *st.tokens]) if st.cfg.lookup and st.speculative else None

    def offer(self, p: SeqPlan) -> None:
        """Its proposal past the grammar's forced run (only if it agrees with it), at the match's
        length."""
        index = self.mine(p.st)
        if index is not None:
            offer_match(p, self.spec.name, *index.propose(MAX_PROPOSAL))

    def propose(self, plans: Sequence[SeqPlan], clock: Clock) -> None:
        draft_offer(plans, self.spec.name)

    def accept(self, p: SeqPlan, new: Sequence[Step], keep: int) -> None:
        index = self.mine(p.st)
        if index is not None:  # the index learns the emitted tokens only: nothing to reset
            index.extend([s.token for s in new])


def offer_match(p: SeqPlan, name: str, tokens: list[int], match_len: int) -> None:
    """A match's continuation offered past the grammar's forced run (only if it agrees with it), as
    far as the grammar allows it: the plan is priced on the offer's length, and a drafter asked to
    extend an offer the grammar then cut would pay its catch-up for tokens no plan priced."""
    if p.forced:
        n = len(p.forced)
        tokens = tokens[n:] if tokens[:n] == p.forced else []
    if tokens and grammar_aware(p.st):  # the forced run is in the matcher already (GrammarSource.offer)
        tokens = constrained(p.st, p.st.track.valid, tokens) or []
    if tokens:
        p.offers += (Offer(name, tokens, match_len),)


def draft_offer(plans: Sequence[SeqPlan], name: str) -> None:
    """Each plan that puts this source's offer first drafts its first K tokens (free, one-point q)."""
    for p in plans:
        if p.k and p.kplan is not None and p.kplan.lead == name:
            looked = _allowed(p.st, unbanned(p.st, offered(p, name).tokens[: p.k]))
            p.add(looked, [one_point_q(p.st, x) for x in looked], name)


def _allowed(st: SeqState, tokens: list[int]) -> list[int]:
    """The proposal drafted in the matcher (`offer_match` cut it to what the grammar allows from
    where the forced run left the matcher, and nothing moves it between offer and draft), or
    followed there, blind, with grammar_drafts off."""
    if grammar_aware(st):
        return tokens[: st.track.push(tokens)]
    if st.track is not None:
        for x in tokens:
            st.track.follow(x)
    return tokens
