"""One interface for everything that drafts (llama.cpp's `common_speculative_impl`, vLLM's proposer
per file): a source offers what it knows before K is chosen, proposes its tokens into each plan
within the plan's budget (with their q and its name), hears the verdict, and undoes its part of a
round that raised, and sees each sequence finish. What it keeps per sequence is its own: it opens
it from the request's asks (`open`) and the sequence holds it under the source's name, opaque to
everyone else (`mine`). The round walks the registered sources in order
(sources/__init__.py); a source that remembers across requests says what it keeps (`remembers`). A source
subclasses `DraftSource` and overrides the hooks it needs (`propose` always): the others do nothing,
and the round does not call them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from localspec.decode.clock import Clock
from localspec.decode.seqplan import SeqPlan
from localspec.decode.state import SeqState, Step
from localspec.evaluator import Evaluator


@dataclass(frozen=True)
class SourceSpec:
    name: str  # what the stats call its drafts (Step.source, Stats.sources)
    # the tuner's evidence its drafts feed (draft_len/evidence.py: MODEL, by draft position; LOOKUP,
    # by match length), or None for drafts kept for certain (nothing to learn, nothing to price)
    evidence: str | None


class DraftSource(Protocol):
    spec: SourceSpec

    @classmethod
    def remembers(cls, settings: Any) -> Any:
        """What it keeps across requests, per model (the engine holds it: `kept` below), made from
        the settings; None: nothing (the default), or switched off."""
        return None

    @classmethod
    def for_round(cls, draft: Evaluator | None, kept: Any = None) -> "DraftSource | None":
        """The rounds' instance over the draft context (None: the round has no draft context) and
        what it keeps across requests, or None where it does not draft."""

    def open(self, st: SeqState) -> Any:
        """Its own state for a new sequence, made from what the request asks (`st.cfg`); None: it
        drafts nothing for it (the default)."""
        return None

    def mine(self, st: SeqState) -> Any:
        """Its own state for st, opened the first time it is asked for (the sequence keeps it by
        this source's name; a source reads no other's)."""
        try:
            return st.drafting[self.spec.name]
        except KeyError:
            made = st.drafting[self.spec.name] = self.open(st)
            return made

    def offer(self, p: SeqPlan) -> None:
        """Before K is chosen: what this source can say for free, into the plan's fields the K
        controller's `Facts` are made of (the grammar drafts its forced run here: it leads every
        plan; the lookup finds its proposal and its match; a source that drafts by decoding says how
        far its cache lags)."""

    def propose(self, plans: Sequence[SeqPlan], clock: Clock) -> None:
        """Its drafts into each plan after the ones already there, within the plan's budget: tokens,
        their q (`Dist`, or None where no rule needs it) and its name (`SeqPlan.add`)."""

    def accept(self, p: SeqPlan, new: Sequence[Step], keep: int) -> None:
        """The verdict: the sequence emitted `new`, and its caches hold `keep` positions now."""

    def reset(self, states: Sequence[SeqState]) -> None:
        """The round ended (it may have raised): undo what it drafted into each sequence's own state
        and is not settled there."""

    def finish(self, st: SeqState) -> None:
        """The sequence left its slot, well (the scheduler's): what it read and wrote is final."""
