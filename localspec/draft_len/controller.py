"""What the decoding round asks of a draft-length controller, one per sequence: `plan(facts)` before
the drafts, `observe(outcome)` after the verify - both over frozen values, so nothing depends on the
order of calls or on state read back. `FixedK` always asks for K, `AutoK` prices every K from
measured costs and acceptance. `costs` is the engine's shared cost model for a tuned controller and
None for a fixed one: batch pricing (batch.py) tunes only the controllers that have one."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol, Sequence

if TYPE_CHECKING:
    from localspec.draft_len.costs import Costs


class Offer(NamedTuple):
    """What a free source proposes before K is chosen: its registered name, its tokens (past the
    grammar's forced run; never empty) and its confidence (a match's length: its evidence bucket)."""

    source: str
    tokens: Sequence[int]
    confidence: int


class Facts(NamedTuple):
    """What a round knows of one sequence before it plans."""

    n_forced: int = 0  # the grammar forces the next n tokens: free, kept for certain, in the batch
    offers: tuple[Offer, ...] = ()  # what the free sources propose after them, in the sources' order
    behind: int = 0  # the draft model's cache lags the text by this many tokens (a catch-up first)
    left: int | None = None  # tokens the request may still emit (None: unknown)


class Plan(NamedTuple):
    """What a controller decided for one round."""

    k: int  # drafts past the forced run (0: a plain step)
    lead: str | None = None  # the offer whose tokens go first (its source's name); the drafter extends them
    forced_take: int = 0  # of the forced run, how many ride in this round's batch (the rest: next round)


class Judged(NamedTuple):
    """An offer the round did not draft, judged against what it emitted."""

    source: str
    confidence: int
    checked: int  # of its tokens, how many the output can judge
    kept: int  # ... the first how many of those it got right


class Outcome(NamedTuple):
    """One round as the controller learns from it. `batch_tokens` is the verify batch's size over
    every sequence in it (None, or n_drafted + n_forced + 1, when this sequence was alone); the first
    `n_offered` drafts came from the leading offer (`lead`, its source, at `lead_confidence`: no
    draft time), the rest from the drafter; `n_forced` more tokens of the batch were the grammar's
    (free, and not the controller's to learn from). A `replay` round re-evaluated what a snapshot
    rollback undid. Before drafting, the draft caught up on `catch_tokens` tokens in `catch_s`
    seconds (not in `round_s`). The offers the round did not draft are `judged` against the output."""

    k: int
    n_drafted: int
    n_accepted: int
    n_emitted: int
    draft_s: float
    verify_s: float
    round_s: float
    batch_tokens: int | None = None
    n_offered: int = 0
    n_forced: int = 0
    replay: bool = False
    catch_tokens: int = 0
    catch_s: float = 0.0
    lead: str = ""
    lead_confidence: int = 0
    judged: tuple[Judged, ...] = ()


class KController(Protocol):
    has_model: bool  # False: the free sources' offers only (no drafter)
    k_min: int
    fallbacks: int  # times it switched to plain decoding because speculation was losing
    started_plain: bool  # began plain because speculation was predicted to lose
    costs: "Costs | None"
    learns: bool  # False: `observe` learns nothing, so the round builds it no Outcome (a fixed K)

    def plan(self, facts: Facts) -> Plan:
        """This round's plan, from what the round knows."""

    def observe(self, outcome: Outcome) -> None:
        """Learn from a round (a fixed K learns nothing)."""

    def expected_tokens(self, facts: Facts, plan: Plan, k: int) -> float:
        """Tokens a round emits on average with k drafts under this plan (batch pricing)."""

    def model_tokens(self, facts: Facts, plan: Plan, k: int) -> int:
        """Of k drafts, how many the drafter makes (the rest come from the leading offer)."""
