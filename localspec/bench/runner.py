"""Runs the benchmark: every configuration of every side (localspec on one loaded Engine, optionally
llama.cpp) over the same fitted prompts with the same sampling settings and seeds, the plain target
first as the baseline.

Configurations are interleaved inside each run (run 1: plain, K=1, ..., run 2: plain, K=1, ...) so
slow drift of the machine (thermal, other load) spreads over all of them instead of biasing one;
llama.cpp, when compared, is one more `Side` in the same interleaving.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from localspec.bench.aggregate import ConfigSummary, Sample, summarize_all
from localspec.bench.prompts import FittedPrompt
from localspec.config.settings import Settings
from localspec.errors import LocalspecError


@dataclass(frozen=True)
class BenchConfig:
    name: str
    spec: bool
    draft_max: str  # "" for plain
    variant: str = ""  # ours: the lookup mode; llama.cpp's: its drafter (bench/peer_variants.py)
    blind: bool = False  # ours, on constrained prompts: drafts that ignore the schema (llama.cpp's way)

    @property
    def key(self) -> tuple[str, bool, str]:
        return self.name, self.spec, self.draft_max


PLAIN = BenchConfig("plain", False, "")


def comma_list(value: str) -> list[str]:
    """'a, B,,a' -> ['a', 'b']: a comma-separated option's values, lower-cased, once each."""
    return list(dict.fromkeys(p.strip().lower() for p in value.split(",") if p.strip()))


def parse_draft_max(value: str) -> list[str]:
    """'1,2,4,auto' -> ['1', '2', '4', 'auto'], each checked."""
    out = comma_list(value)
    for part in out:
        if part != "auto" and not (part.isdigit() and 1 <= int(part) <= 64):
            raise LocalspecError(
                f"--draft-max takes numbers 1..64 and 'auto', comma-separated (got {part!r})"
            )
    if not out:
        raise LocalspecError("--draft-max needs at least one value")
    return out


def parse_temperatures(value: str) -> list[float]:
    """'0,0.8' -> [0.0, 0.8], each checked."""
    try:
        temps = [float(t) for t in value.split(",") if t.strip()]
    except ValueError:
        raise LocalspecError(f"--temperature takes numbers, comma-separated (got {value!r})") from None
    if not temps:
        raise LocalspecError(f"--temperature needs values >= 0 (got {value!r})")
    for t in temps:  # the settings' own check (finite, in range), before any model loads
        Settings(temperature=t)
    return temps


def configs_for(
    draft_max: Sequence[str],
    *,
    has_draft: bool,
    lookups: Sequence[str] = ("on",),
    grammar_drafts: Sequence[str] = ("on",),
) -> list[BenchConfig]:
    """The plain baseline, then one speculative configuration per draft length and lookup mode
    (named by the lookup mode only when several are compared; without a draft, only `only` runs),
    and per grammar-drafts mode (on: grammar-aware drafts; off, named "blind": drafts that ignore a
    prompt's schema - which only changes prompts that have one, the json kind)."""
    modes = [m for m in lookups if has_draft or m == "only"]
    out = [PLAIN]
    for blind in [g == "off" for g in grammar_drafts]:
        for mode in modes:
            for k in draft_max:
                name = "auto" if k == "auto" else f"K={k}"
                if mode == "only":
                    name = f"lookup {name}"
                elif len(modes) > 1:
                    name = f"{name} lookup={mode}"
                if blind:
                    name = f"{name} blind"
                out.append(BenchConfig(name, True, k, mode, blind))
    return out


@dataclass(frozen=True)
class BenchTable:
    """Everything measured at one temperature."""

    temperature: float
    summaries: list[ConfigSummary]
    samples: list[Sample]


def _sample(resp, wall_s: float, cfg: BenchConfig, run: int, prompt: FittedPrompt) -> Sample:  # noqa: ANN001
    st = resp.stats
    total_ms = wall_s * 1e3
    # decode = everything after the prompt's prefill, first round included, and every token counted:
    # llama.cpp's own "decoded N tokens in T s" definition. (Timing from the first token instead
    # would hand a speculative run the other tokens of its first round for free.)
    return Sample(
        config=cfg.name,
        run=run,
        prompt_id=prompt.id,
        kind=prompt.kind,
        n_prompt=st.n_prompt_tokens,
        n_generated=st.n_generated,
        finish_reason=resp.finish_reason,
        decode_tokens=st.n_generated,
        decode_ms=max(total_ms - st.prefill_ms, 0.0),
        total_ms=total_ms,
        draft_ms=st.draft_ms,
        verify_ms=st.verify_ms,
        sample_ms=st.sample_ms,
        n_drafted=st.n_drafted,
        n_accepted=st.n_accepted,
        rounds=st.rounds,
        lookup_drafted=st.sources.get("lookup", {}).get("drafted", 0),
        lookup_accepted=st.sources.get("lookup", {}).get("accepted", 0),
        grammar_drafted=st.sources.get("grammar", {}).get("drafted", 0),
        grammar_accepted=st.sources.get("grammar", {}).get("accepted", 0),
        constrain_ms=st.constrain_ms_per_round * (st.rounds + st.plain_steps),
        valid=_valid(resp, prompt),
        drafted_by_pos=tuple(st.drafted_by_pos),
        accepted_by_pos=tuple(st.accepted_by_pos),
    )


def _valid(resp, prompt: FittedPrompt) -> bool | None:  # noqa: ANN001
    """A constrained prompt's finished answer parses and follows its schema (None: unconstrained or
    cut by the token budget)."""
    if prompt.schema is None or resp.finish_reason != "stop":
        return None
    import jsonschema  # noqa: PLC0415 - the json kind only

    try:
        jsonschema.validate(json.loads(resp.text), json.loads(prompt.schema))
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


class Side(Protocol):
    """One implementation under test: its configurations and how to run one generation."""

    label: str
    configs: Sequence[BenchConfig]

    def one(self, cfg: BenchConfig, prompt: FittedPrompt, run: int, seed: int) -> Sample: ...


class EngineSide:
    """localspec itself, on a loaded Engine (models loaded once; each configuration is overrides)."""

    label = "localspec"

    def __init__(
        self,
        engine,
        configs: Sequence[BenchConfig],
        *,
        temperature: float,
        gen_tokens: int,
        spec_mode: str = "pq",
    ) -> None:  # noqa: ANN001
        self.engine, self.configs = engine, list(configs)
        self.temperature, self.gen_tokens, self.spec_mode = temperature, gen_tokens, spec_mode

    def one(self, cfg: BenchConfig, prompt: FittedPrompt, run: int, seed: int) -> Sample:
        self.engine.clear_cache()  # each generation pays its own prefill: no prompt reuse across runs
        overrides = dict(
            max_tokens=self.gen_tokens,
            stop=(),
            temperature=self.temperature,
            seed=seed,
            spec=cfg.spec,
            spec_mode=self.spec_mode,
        )
        if cfg.spec:
            overrides["draft_max"] = cfg.draft_max
            overrides["lookup"] = cfg.variant or "on"
            overrides["grammar_drafts"] = not cfg.blind
        if prompt.schema is not None:
            overrides["json_schema"] = prompt.schema
        t0 = time.perf_counter()
        resp = self.engine.generate(list(prompt.tokens), **overrides)
        return _sample(resp, time.perf_counter() - t0, cfg, run, prompt)


def measure(
    sides: Sequence[Side],
    prompts: Sequence[FittedPrompt],
    *,
    temperature: float,
    gen_tokens: int,
    runs: int,
    warmup: int,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[BenchTable]:
    """One table per side. Runs are interleaved across sides and configurations, so load that comes
    and goes hits all of them alike: run 1 takes each configuration in turn (plain, K=1, ...), and
    within one, each prompt on every side that has that configuration before the next prompt - so
    our plain sample of a prompt and llama.cpp's are seconds apart, and their ratio is steady."""
    if runs < 1:
        raise LocalspecError("--runs must be at least 1")
    if not prompts:
        raise LocalspecError("no prompts to run")
    say = progress or (lambda _msg: None)
    for w in range(warmup):  # every configuration once on the first prompt, not recorded
        for side in sides:
            for cfg in side.configs:
                say(f"warm-up {w + 1}/{warmup} {side.label} {cfg.name}")
                side.one(cfg, prompts[0], -1, seed)
    names = list(dict.fromkeys(cfg.name for side in sides for cfg in side.configs))
    samples: list[list[Sample]] = [[] for _ in sides]
    for run in range(runs):
        for name in names:
            having = [
                (side, out, cfg)
                for side, out in zip(sides, samples)
                for cfg in side.configs
                if cfg.name == name
            ]
            say(
                f"T={temperature:g} run {run + 1}/{runs} {name} ({', '.join(side.label for side, _, _ in having)})"
            )
            for i, prompt in enumerate(prompts):
                for side, out, cfg in having:
                    # the same seeds for every configuration and side: at T>0 they share the random stream
                    out.append(side.one(cfg, prompt, run, seed + 1000 * run + i))
    return [
        BenchTable(temperature, summarize_all(ss, [c.key for c in side.configs], gen_tokens), ss)
        for side, ss in zip(sides, samples)
    ]
