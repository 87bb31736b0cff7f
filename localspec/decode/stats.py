"""Metrics are data: the loop fills a `Counters`, `stream()` freezes it into `Stats`.
The CLI, logs, server and benchmarks only format these."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Sequence


@dataclass
class SourceCounts:
    """One draft source's share: rounds it drafted in, tokens it drafted, and of those accepted."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0


@dataclass
class Counters:
    """Mutable counters the decoding loops update as they go."""

    rounds: int = 0  # verification passes that had at least one drafted token
    plain_steps: int = 0  # target-only decode steps (no draft, fallback or --no-spec)
    n_drafted: int = 0
    n_accepted: int = 0
    drafted_by_pos: list[int] = field(default_factory=list)
    accepted_by_pos: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    sample_s: float = 0.0
    prefill_s: float = 0.0
    loop_s: float = 0.0  # wall time of decode rounds
    llama_s: float = 0.0  # of which inside llama.cpp (draft + target evals)
    constrain_s: float = 0.0  # of which in the output's constraint (masks, forced tokens, rollback)
    k_history: list[int] = field(default_factory=list)  # K asked for each round (0 = plain step)
    fallbacks: int = 0  # times auto-K switched to plain decoding because speculation was losing
    started_plain: bool = False  # auto-K predicted from measured costs that plain decoding is faster
    cost_cuts: int = 0  # rounds after which the request's cost bound cut its drafts back
    n_prefilled: int = 0  # prompt tokens the target evaluated; the rest came from the cached prefix
    n_draft_prefilled: int = 0  # ... and those the draft model evaluated (its own cached prefix is shorter)
    rounds_trace: list[dict] | None = None  # one record per round, kept only when tracing (--trace)
    # per draft source, by its name (decode/sources: the draft model, the target's MTP head, the
    # lookup, the grammar's forced tokens); a source that drafted nothing reads as zeros
    sources: dict[str, SourceCounts] = field(default_factory=lambda: defaultdict(SourceCounts))

    def trace_round(self, **record: float) -> None:
        if self.rounds_trace is not None:
            self.rounds_trace.append(record)

    def unaccept(self, steps: list) -> None:  # noqa: ANN001 (speculative.Step)
        """Accepted draft tokens that were never emitted (cut by a stop string): the counters then
        count what the response holds. Their rounds still count as verified."""
        for step in steps:
            if step.from_draft:
                self.n_accepted -= 1
                self.accepted_by_pos[step.draft_pos] -= 1
                self.sources[step.source].accepted -= 1

    def record_round(self, k: int, n_drafted: int, n_accepted: int, *, sources: Sequence[str]) -> None:
        """One round; `sources` names who drafted each position (a draft source's name)."""
        self.k_history.append(k)
        if n_drafted == 0:
            self.plain_steps += 1
            return
        for name in dict.fromkeys(sources):  # in the order they drafted (a stable order for the stats)
            self.sources[name].rounds += 1
        for i, name in enumerate(sources):
            self.sources[name].drafted += 1
            self.sources[name].accepted += i < n_accepted
        self.rounds += 1
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        while len(self.drafted_by_pos) < n_drafted:
            self.drafted_by_pos.append(0)
            self.accepted_by_pos.append(0)
        for i in range(n_drafted):
            self.drafted_by_pos[i] += 1
            if i < n_accepted:
                self.accepted_by_pos[i] += 1


@dataclass(frozen=True)
class Stats:
    speculative: bool
    n_prompt_tokens: int
    n_generated: int
    rounds: int
    plain_steps: int
    n_drafted: int
    n_accepted: int
    acceptance_rate: float  # accepted / drafted
    mean_accepted_len: float  # accepted drafted tokens per verification round
    tokens_per_round: float  # emitted tokens per target pass (accepted + the target's own token)
    acceptance_by_pos: list[float]  # P(accepted at position i | drafted at i)
    drafted_by_pos: list[int]  # rounds that drafted a token at position i (the counts behind the rates)
    accepted_by_pos: list[int]  # ... and of those, rounds whose token i was accepted
    draft_ms: float
    verify_ms: float
    sample_ms: float
    prefill_ms: float
    decode_ms: float
    overhead_ms_per_round: float  # round wall time outside llama.cpp (Python, sampling), per target pass
    constrain_ms_per_round: float  # of the round's time, the constraint's work (masks, ...), per target pass
    decode_tok_s: float  # from the first generated token on
    e2e_tok_s: float  # prompt processing included
    k_history: list[int]
    fell_back: bool
    fallbacks: int
    started_plain: bool
    cost_cuts: int  # times the request's cost bound cut its drafts back (draft_len/cost_bound.py)
    n_prefilled: int  # prompt tokens actually evaluated (after prefix reuse)
    n_draft_prefilled: int  # ... by the draft model (0 without one)
    # per draft source (draft, lookup): rounds, drafted, accepted, acceptance_rate, mean_accepted_run
    sources: dict[str, dict] = field(default_factory=dict)
    rounds_trace: list[dict] | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def build(
        cls,
        c: Counters,
        *,
        speculative: bool,
        n_prompt: int,
        n_generated: int,
        decode_s: float,
        total_s: float,
    ) -> "Stats":
        passes = c.rounds + c.plain_steps
        # decode_s runs from the first token: that token's own pass is part of prefill
        tok_after_first = max(n_generated - 1, 0)
        return cls(
            speculative=speculative,
            n_prompt_tokens=n_prompt,
            n_generated=n_generated,
            rounds=c.rounds,
            plain_steps=c.plain_steps,
            n_drafted=c.n_drafted,
            n_accepted=c.n_accepted,
            acceptance_rate=c.n_accepted / c.n_drafted if c.n_drafted else 0.0,
            mean_accepted_len=c.n_accepted / c.rounds if c.rounds else 0.0,
            tokens_per_round=n_generated / passes if passes else 0.0,
            acceptance_by_pos=[a / d for a, d in zip(c.accepted_by_pos, c.drafted_by_pos)],
            drafted_by_pos=list(c.drafted_by_pos),
            accepted_by_pos=list(c.accepted_by_pos),
            draft_ms=c.draft_s * 1e3,
            verify_ms=c.verify_s * 1e3,
            sample_ms=c.sample_s * 1e3,
            prefill_ms=c.prefill_s * 1e3,
            decode_ms=decode_s * 1e3,
            overhead_ms_per_round=(c.loop_s - c.llama_s) * 1e3 / passes if passes else 0.0,
            constrain_ms_per_round=c.constrain_s * 1e3 / passes if passes else 0.0,
            decode_tok_s=tok_after_first / decode_s if decode_s > 0 and tok_after_first else 0.0,
            e2e_tok_s=n_generated / total_s if total_s > 0 else 0.0,
            k_history=list(c.k_history),
            fell_back=c.fallbacks > 0,
            fallbacks=c.fallbacks,
            n_prefilled=c.n_prefilled,
            n_draft_prefilled=c.n_draft_prefilled,
            rounds_trace=c.rounds_trace,
            started_plain=c.started_plain,
            cost_cuts=c.cost_cuts,
            sources={name: _source_dict(s) for name, s in c.sources.items() if s.rounds},
        )


def _source_dict(s: SourceCounts) -> dict:
    return {
        **asdict(s),
        "acceptance_rate": s.accepted / s.drafted if s.drafted else 0.0,
        "mean_accepted_run": s.accepted / s.rounds
        if s.rounds
        else 0.0,  # accepted tokens per round drafted in
    }
