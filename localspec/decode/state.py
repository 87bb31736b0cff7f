"""One sequence being decoded (the backend protocol the round decodes through is localspec/evaluator.py).

Each sequence (`SeqState`) lives in its own backend sequence id and carries its own tokens, random
streams, draft-length controller, sampling parameters and counters, so its output never depends on
who else shares the round.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from localspec.constrain import Matcher
from localspec.constrain.track import Track
from localspec.decode.noise import KeyedGumbel
from localspec.decode.sampling import Penalties, SamplingParams
from localspec.decode.stats import Counters
from localspec.draft_len.controller import KController
from localspec.draft_len.cost_bound import CostBound
from localspec.evaluator import Evaluator, Item  # noqa: F401 - re-exported: the round's protocol


@dataclass(frozen=True, init=False)
class Step:
    token: int
    from_draft: bool  # a drafted token the target accepted (False: the target's own token)
    draft_pos: int = -1  # its position in the round's draft when from_draft (for the counters)
    source: str = ""  # who drafted it when from_draft: a draft source's name (decode/sources)
    # when asked: the target's log-probability of the token where it was emitted (decode/rows.py,
    # with_logprobs), and the most likely tokens there as (token, log-probability), best first
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()

    def __init__(
        self,
        token: int,
        from_draft: bool,
        draft_pos: int = -1,
        source: str = "",
        logprob: float | None = None,
        top: tuple[tuple[int, float], ...] = (),
    ) -> None:
        # the fields above, in order: one is made per token per round, and a frozen dataclass's own
        # __init__ pays an object.__setattr__ call per field (half of the cost); still frozen after
        d = self.__dict__
        d["token"], d["from_draft"], d["draft_pos"], d["source"] = token, from_draft, draft_pos, source
        d["logprob"], d["top"] = logprob, top


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    mode: str = "pq"  # pq | match | coupled  (ignored when greedy)
    draft_min: int = 0
    draft_p_min: float = 0.0
    grammar_drafts: bool = True  # drafts see the output's constraint (False: blind, as llama.cpp's)
    # what the request asks of the draft sources, each opening its own state for the sequence from
    # it (sources/base.py `open`): n-gram drafts (from its own text, and the model's history where
    # kept), more text before the prompt they draft from, and whether the draft model may see it (it
    # holds no id beyond the draft's vocabulary: a target's may be up to 128 ids larger)
    lookup: bool = False
    lookup_text: Sequence[int] = ()
    draft_model: bool = True


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
    finish: str | None = None  # None while running; stop (EOG) | length | context | error
    out: list[Step] = field(default_factory=list)  # steps made since the last take()
    # coupled: every token at position t, drafted or the target's, is a Gumbel-max under g_t
    noise: KeyedGumbel | None = None
    track: Track | None = None  # the output's constraint (grammar, JSON schema), when it has one
    error: Exception | None = None  # why it ended, when finish is "error" (a grammar that cannot go on)
    penalties: Penalties | None = None  # logit_bias and repetition penalties, applied to both models' rows
    logprobs: int = -1  # -1: none; else report each step's logprob and this many top alternatives
    post_sampling_probs: bool = False  # ... from the distribution sampled (else the model's own)
    bound: CostBound | None = None  # what its rounds may cost per token: caps its drafts (K control)
    # each draft source's own state for this sequence, by the source's name, opened the first time
    # the round hands it over (sources/base.py `mine`): a source keeps nothing here but its own
    drafting: dict[str, Any] = field(default_factory=dict)

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
        matcher: Matcher | None = None,
        penalties: Penalties | None = None,
        logprobs: int = -1,
        post_sampling_probs: bool = False,
        draft_model: bool = True,
        bound: CostBound | None = None,
        lookup_text: Sequence[int] = (),
    ) -> "SeqState":
        """`lookup_text`: more tokens the lookup may match against, before the prompt (the text a
        fill-in-the-middle prompt was cut from: the rest of the file, the other files)."""
        draft_rng, verify_rng = (np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(2))
        noise = KeyedGumbel.of(rng) if cfg.mode == "coupled" else None
        cfg = replace(cfg, lookup=lookup, lookup_text=lookup_text, draft_model=draft_model)
        return cls(
            seq, list(prompt), sp, cfg, k_ctl, counters, draft_rng, verify_rng, max_new, speculative,
            noise=noise, track=Track(matcher) if matcher is not None else None,
            penalties=penalties if penalties and penalties.active else None, logprobs=logprobs,
            post_sampling_probs=post_sampling_probs, bound=bound,
        )  # fmt: skip

    def take(self) -> list[Step]:
        out, self.out = self.out, []
        return out
