"""One sequence being decoded, and the narrow backend protocol the round decodes through.

Each sequence (`SeqState`) lives in its own backend sequence id and carries its own tokens, random
streams, draft-length controller, sampling parameters and counters, so its output never depends on
who else shares the round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from localspec.decode.lookup import Lookup
from localspec.decode.noise import KeyedGumbel
from localspec.decode.sampling import SamplingParams
from localspec.decode.stats import Counters
from localspec.draft_len.controller import KController

Item = tuple[int, Sequence[int], int, int]  # (sequence id, tokens, first position, logits rows wanted)


class Evaluator(Protocol):
    """What the round needs from a model context (llama.Context implements it; tests/fake_backend.py too).
    An evaluator may also have `eval_views(items)`: eval_batch's rows as views valid until its next
    decode, no copy (llama.Context has it); the round uses it when present."""

    n_ctx: int  # per sequence

    def past(self, seq: int = 0) -> int: ...

    def eval_batch(self, items: Sequence[Item]) -> list[np.ndarray]: ...

    def truncate(self, pos: int, seq: int = 0) -> None: ...

    def is_eog(self, token: int) -> bool: ...


@dataclass(frozen=True)
class Step:
    token: int
    from_draft: bool  # a drafted token the target accepted (False: the target's own token)
    draft_pos: int = -1  # its position in the round's draft when from_draft (for the counters)
    source: str = ""  # who drafted it when from_draft: "draft" (the draft model) or "lookup"


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    mode: str = "pq"  # pq | match | coupled  (ignored when greedy)
    draft_min: int = 0
    draft_p_min: float = 0.0


@dataclass(eq=False)
class SeqState:
    """One sequence being decoded."""

    seq: int  # backend sequence id (the slot)
    tokens: list[int]  # prompt + generated
    sp: SamplingParams
    cfg: SpecConfig
    k_ctl: KController
    counters: Counters
    draft_rng: np.random.Generator
    verify_rng: np.random.Generator
    max_new: int | None = None
    speculative: bool = True
    n_new: int = 0
    finish: str | None = None  # None while running; stop (EOG) | length | context
    out: list[Step] = field(default_factory=list)  # steps made since the last take()
    # coupled: every token at position t, drafted or the target's, is a Gumbel-max under g_t
    noise: KeyedGumbel | None = None
    lookup: Lookup | None = None  # the n-gram index over tokens, when lookup drafts are on

    @classmethod
    def start(
        cls,
        seq: int,
        prompt: Sequence[int],
        sp: SamplingParams,
        cfg: SpecConfig,
        rng: np.random.Generator,
        counters: Counters,
        k_ctl: KController,
        *,
        max_new: int | None = None,
        speculative: bool = True,
        lookup: bool = False,
    ) -> "SeqState":
        draft_rng, verify_rng = (np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(2))
        noise = KeyedGumbel.of(rng) if cfg.mode == "coupled" else None
        index = Lookup(prompt) if lookup and speculative else None
        return cls(
            seq, list(prompt), sp, cfg, k_ctl, counters, draft_rng, verify_rng, max_new, speculative,
            noise=noise, lookup=index,
        )  # fmt: skip

    def take(self) -> list[Step]:
        out, self.out = self.out, []
        return out
