"""Numbers in, summaries out: pure functions over per-generation samples, so the report code and
the tests never need a model.

A *run* is one pass over the whole prompt set; its tok/s is pooled (tokens / seconds summed over the
prompts), so a generation that stopped early on end-of-generation weighs by what it really produced.
The spread across runs is what says whether two configurations differ.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Spread:
    """Median and spread of repeated measurements (quartiles by linear interpolation)."""

    median: float
    lo: float
    hi: float
    q1: float
    q3: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def spread(values: Iterable[float]) -> Spread:
    xs = sorted(float(v) for v in values)
    if not xs:
        return Spread(0.0, 0.0, 0.0, 0.0, 0.0, 0)
    if len(xs) == 1:
        return Spread(xs[0], xs[0], xs[0], xs[0], xs[0], 1)
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return Spread(statistics.median(xs), xs[0], xs[-1], q1, q3, len(xs))


@dataclass(frozen=True)
class Sample:
    """One measured generation: what Stats says, reduced to what the benchmark aggregates."""

    config: str
    run: int
    prompt_id: str
    kind: str
    n_prompt: int
    n_generated: int
    finish_reason: str
    decode_tokens: int  # tokens produced inside decode_ms
    decode_ms: float  # after the prompt's prefill, until the last token
    total_ms: float  # prompt processing included
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    sample_ms: float = 0.0  # acceptance and sampling in Python
    n_drafted: int = 0
    n_accepted: int = 0
    rounds: int = 0
    lookup_drafted: int = 0  # of n_drafted / n_accepted: the lookup's share (the rest: the draft model)
    lookup_accepted: int = 0
    grammar_drafted: int = 0  # ... and the grammar's forced tokens' (constrained prompts)
    grammar_accepted: int = 0
    constrain_ms: float = 0.0  # time in the constraint's work (masks, forced tokens, rollback)
    valid: bool | None = None  # a constrained answer that finished: did it follow its schema
    drafted_by_pos: tuple[int, ...] = ()  # rounds that drafted a token at position i ...
    accepted_by_pos: tuple[int, ...] = ()  # ... and of those, rounds that kept it


def _rate(tokens: float, ms: float) -> float:
    return tokens / (ms / 1e3) if ms > 0 else 0.0


@dataclass(frozen=True)
class ConfigSummary:
    config: str
    speculative: bool
    draft_max: str  # "" for plain, a number, or "auto"
    decode_tok_s: Spread
    e2e_tok_s: Spread
    speedup: float  # median decode tok/s over the plain baseline's median (0 when there is none)
    acceptance_rate: float  # accepted / drafted, pooled over every generation
    mean_accepted_len: float  # accepted drafted tokens per verification round, pooled
    draft_share: float  # share of decode time spent running the draft
    verify_share: float  # share of decode time spent in the target's verification passes
    sample_share: float  # share of decode time spent sampling / accepting (the rest is loop overhead)
    n_generated: int  # over all measured generations
    n_samples: int
    early_stops: int  # generations that ended before the token budget (end of generation)
    lookup_accepted_share: float = 0.0  # of the accepted drafts, those the lookup proposed
    lookup_acceptance: float = 0.0  # the lookup's own acceptance rate
    # of the generated tokens: the shares drafted (and kept) by the grammar, the lookup, the draft model
    grammar_token_share: float = 0.0
    lookup_token_share: float = 0.0
    draft_token_share: float = 0.0
    constrain_ms_per_round: float = 0.0  # the constraint's work per target pass
    constrain_share: float = 0.0  # ... as a share of decode time
    invalid: int = 0  # finished constrained answers that did not follow their schema (must be 0)
    by_kind: dict[str, float] = field(default_factory=dict)  # pooled decode tok/s per prompt kind

    def to_dict(self) -> dict:
        return asdict(self)


def run_rates(samples: Sequence[Sample]) -> tuple[list[float], list[float]]:
    """Pooled decode and end-to-end tok/s of each run."""
    runs: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        runs[s.run].append(s)
    decode = [_rate(sum(s.decode_tokens for s in ss), sum(s.decode_ms for s in ss)) for ss in runs.values()]
    e2e = [_rate(sum(s.n_generated for s in ss), sum(s.total_ms for s in ss)) for ss in runs.values()]
    return decode, e2e


def summarize(
    samples: Sequence[Sample],
    *,
    config: str,
    speculative: bool,
    draft_max: str,
    gen_tokens: int,
    baseline_tok_s: float = 0.0,
) -> ConfigSummary:
    decode, e2e = run_rates(samples)
    d = spread(decode)
    drafted = sum(s.n_drafted for s in samples)
    accepted = sum(s.n_accepted for s in samples)
    rounds = sum(s.rounds for s in samples)
    lk_drafted = sum(s.lookup_drafted for s in samples)
    lk_accepted = sum(s.lookup_accepted for s in samples)
    gr_accepted = sum(s.grammar_accepted for s in samples)
    generated = sum(s.n_generated for s in samples)
    passes = sum(s.rounds for s in samples) + sum(
        max(s.n_generated - s.n_accepted - s.rounds, 0) for s in samples
    )  # verify rounds plus plain steps (one token each)
    constrain_ms = sum(s.constrain_ms for s in samples)
    decode_ms = sum(s.decode_ms for s in samples)
    kinds: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        kinds[s.kind].append(s)
    return ConfigSummary(
        config=config,
        speculative=speculative,
        draft_max=draft_max,
        decode_tok_s=d,
        e2e_tok_s=spread(e2e),
        speedup=d.median / baseline_tok_s if baseline_tok_s > 0 else 0.0,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_accepted_len=accepted / rounds if rounds else 0.0,
        draft_share=sum(s.draft_ms for s in samples) / decode_ms if decode_ms > 0 else 0.0,
        verify_share=sum(s.verify_ms for s in samples) / decode_ms if decode_ms > 0 else 0.0,
        sample_share=sum(s.sample_ms for s in samples) / decode_ms if decode_ms > 0 else 0.0,
        n_generated=sum(s.n_generated for s in samples),
        n_samples=len(samples),
        early_stops=sum(1 for s in samples if s.n_generated < gen_tokens),
        lookup_accepted_share=lk_accepted / accepted if accepted else 0.0,
        lookup_acceptance=lk_accepted / lk_drafted if lk_drafted else 0.0,
        grammar_token_share=gr_accepted / generated if generated else 0.0,
        lookup_token_share=lk_accepted / generated if generated else 0.0,
        draft_token_share=(accepted - lk_accepted - gr_accepted) / generated if generated else 0.0,
        constrain_ms_per_round=constrain_ms / passes if passes else 0.0,
        constrain_share=constrain_ms / decode_ms if decode_ms > 0 else 0.0,
        invalid=sum(1 for s in samples if s.valid is False),
        by_kind={
            k: _rate(sum(s.decode_tokens for s in ss), sum(s.decode_ms for s in ss))
            for k, ss in kinds.items()
        },
    )


def summarize_all(
    samples: Sequence[Sample], configs: Sequence[tuple[str, bool, str]], gen_tokens: int
) -> list[ConfigSummary]:
    """Summaries in `configs` order ((name, speculative, draft_max)); the first non-speculative
    configuration is the baseline every speedup is measured against."""
    by_config: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_config[s.config].append(s)
    baseline = 0.0
    plain = next((name for name, spec, _ in configs if not spec), None)
    if plain is not None and by_config[plain]:
        baseline = spread(run_rates(by_config[plain])[0]).median
    return [
        summarize(
            by_config[name],
            config=name,
            speculative=spec,
            draft_max=dm,
            gen_tokens=gen_tokens,
            baseline_tok_s=baseline,
        )
        for name, spec, dm in configs
    ]


def best(summaries: Sequence[ConfigSummary], *, speculative: bool = True) -> ConfigSummary | None:
    """The configuration with the highest median decode tok/s."""
    pool = [s for s in summaries if s.speculative == speculative and s.n_samples]
    return max(pool, key=lambda s: s.decode_tok_s.median, default=None)
