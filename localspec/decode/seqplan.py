"""What one round decides for one sequence (`SeqPlan`), filled in by the round's phases: the plan
phase's budget, what the free sources offered and the K controller's plan (plan.py); the drafts
each source proposed, with their q and source (sources/); the accept and record phases read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from localspec.decode.sampling import Dist
from localspec.decode.state import SeqState
from localspec.draft_len.controller import Facts, Offer, Plan


@dataclass(eq=False, slots=True)  # built per sequence per round: slots make it cheap
class SeqPlan:
    st: SeqState
    cap: int  # drafts this round may hold, every source's (room, max_new, the target's rollback)
    replay: bool  # the target replays what a snapshot undid: no drafts on top of a replay
    left: int  # tokens the sequence may emit after this round's first (max_new, else the context's room)
    p_min: float = 0.0  # drafting stops where the draft's top probability falls below this ...
    p_min_from: int = 0  # ... from this draft position on (draft_p_min, draft_min)
    forced: Sequence[int] = ()  # the grammar's leading run (drafted already)
    offers: tuple[Offer, ...] = ()  # the free sources' proposals after it, in order
    behind: int = 0  # the draft's cache lags the text by this many tokens (a catch-up first)
    facts: Facts | None = None  # what the K controller saw (None: this sequence does not draft)
    kplan: Plan | None = None  # what it decided
    k: int = 0  # drafts past the forced run the round asks for (the drafter's, a leading offer's first)
    model: bool = False  # the drafter (a draft model, or another kind) drafts for it this round
    total: int = 0  # drafts wanted, forced ones included
    drafts: list[int] = field(default_factory=list)
    qs: list[Dist | None] = field(default_factory=list)  # each draft's q (None: greedy, or not needed)
    sources: list[str] = field(default_factory=list)  # who drafted each one (a source's name)

    def add(self, tokens: Sequence[int], qs: Sequence[Dist | None], source: str) -> None:
        """A source's drafts, in order after the ones already there."""
        self.drafts += tokens
        self.qs += qs
        self.sources += [source] * len(tokens)

    def push(self, token: int, q: Dist | None, source: str) -> None:
        """One draft after the ones already there (`add` for a run)."""
        self.drafts.append(token)
        self.qs.append(q)
        self.sources.append(source)

    def judges(self, i: int) -> bool:
        """Whether the draft's confidence at draft position i decides if it goes on (`draft_p_min`:
        drafting stops where the draft's top probability is below p_min)."""
        return self.p_min > 0 and i >= self.p_min_from


def offered(p: SeqPlan, source: str) -> Offer | None:
    """What `source` offered `p` this round, if anything (a function: SeqPlan stays a record)."""
    return next((o for o in p.offers if o.source == source), None)
