"""What the decoding round asks of a draft-length controller, one per sequence: `plan(facts)` before
the drafts, `observe(outcome)` after the verify - both over frozen values, so nothing depends on the
order of calls or on state read back. `FixedK` always asks for K, `AutoK` prices every K from
measured costs and acceptance. `costs` is the engine's shared cost model for a tuned controller and
None for a fixed one: batch pricing (batch.py) tunes only the controllers that have one."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from localspec.draft_len.costs import Costs


class Facts(NamedTuple):
    """What a round knows of one sequence before it plans."""

    n_forced: int = 0  # the grammar forces the next n tokens: free, kept for certain, in the batch
    n_lookup: int = 0  # the lookup proposes this many tokens after them ...
    match_len: int = 0  # ... from a match of this many tokens (its confidence)
    behind: int = 0  # the draft model's cache lags the text by this many tokens (a catch-up first)
    left: int | None = None  # tokens the request may still emit (None: unknown)


class Plan(NamedTuple):
    """What a controller decided for one round."""

    k: int  # drafts past the forced run (0: a plain step)
    lookup_first: bool = False  # the lookup's tokens first, the draft model extends them
    forced_take: int = 0  # of the forced run, how many ride in this round's batch (the rest: next round)


class Outcome(NamedTuple):
    """One round as the controller learns from it. `batch_tokens` is the verify batch's size over
    every sequence in it (None, or n_drafted + n_forced + 1, when this sequence was alone); the first
    `n_lookup` drafts came from the lookup (no draft time), the rest from the draft model; `n_forced`
    more tokens of the batch were the grammar's (free, and not the controller's to learn from). A
    `replay` round re-evaluated what a snapshot rollback undid. Before drafting, the draft caught up
    on `catch_tokens` tokens in `catch_s` seconds (not in `round_s`). A lookup proposal the round did
    not use is judged against the output: `offer_checked` of its tokens, the first `offer_kept` of
    them right; `match_len` is the round's match (Facts.match_len)."""

    k: int
    n_drafted: int
    n_accepted: int
    n_emitted: int
    draft_s: float
    verify_s: float
    round_s: float
    batch_tokens: int | None = None
    n_lookup: int = 0
    n_forced: int = 0
    replay: bool = False
    catch_tokens: int = 0
    catch_s: float = 0.0
    offer_checked: int = 0
    offer_kept: int = 0
    match_len: int = 0


class KController(Protocol):
    has_model: bool  # False: lookup drafts only (no draft model)
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
        """Of k drafts, how many the draft model makes (the rest come from the lookup)."""
