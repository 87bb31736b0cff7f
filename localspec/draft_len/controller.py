"""What the decoding round asks of a draft-length controller, one per sequence: `FixedK` always
asks for K, `AutoK` prices every K from measured costs and acceptance. `costs` is the engine's
shared cost model for a tuned controller and None for a fixed one: batch pricing (batch.py) tunes
only the controllers that have one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from localspec.draft_len.costs import Costs


class KController(Protocol):
    has_model: bool  # False: lookup drafts only (no draft model)
    fallbacks: int
    started_plain: bool  # began plain because speculation was predicted to lose
    lookup_first: bool  # this round's plan puts the lookup's tokens first
    costs: "Costs | None"
    n_forced: int  # this round's leading run of tokens the grammar forces (offer_forced)
    forced_take: int  # of them, how many the plan puts in this round's batch

    def offer_forced(self, n: int) -> None:
        """The grammar forces the next n tokens: free drafts, kept for certain, in the batch."""

    def offer_lag(self, behind: int, left: int) -> None:
        """The draft model lags the text by `behind` tokens; the request may emit `left` more."""

    def offer(self, n_lookup: int, match_len: int) -> None:
        """What this round's lookup proposes: n_lookup tokens from a match of match_len tokens."""

    def choose(self) -> int:
        """This round's K (0: a plain step)."""

    def expected_tokens(self, k: int) -> float: ...

    def model_tokens(self, k: int) -> int:
        """Of K drafts, how many the draft model makes (the rest come from the lookup)."""

    def observe(self, **round_outcome: float) -> None: ...

    def observe_unused_offer(self, n_checked: int, n_kept: int) -> None: ...
