"""The whole benchmark as one call (what `localspec bench` and tools/make_bench.py run): load the
pair once, fit the prompts, run localspec at every temperature and, with `peer`, llama.cpp too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from localspec.bench import machine
from localspec.bench import peer as peer_mod
from localspec.bench.prompts import FittedPrompt, fit_prompts, load_prompts, select
from localspec.bench.report import BenchReport, TempResult
from localspec.bench.runner import EngineSide, Side, configs_for, measure
from localspec.config.settings import Settings
from localspec.errors import LocalspecError


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    draft_max: Sequence[str] = ("1", "2", "3", "4", "6", "8", "auto")
    temperatures: Sequence[float] = (0.0,)
    spec_modes: Sequence[str] = ("pq",)  # at T > 0, each rule gets its own table (side by side)
    lookups: Sequence[str] = ("on",)  # lookup modes to compare (settings.LOOKUP_MODES)
    grammar_drafts: Sequence[str] = ("on",)  # on, off (drafts blind to a json prompt's schema), or both
    kinds: Sequence[str] | None = None  # only prompts of these kinds; None: every kind
    peer_variants: Sequence[str] = ("draft-simple",)  # llama.cpp drafters (bench/peer_variants.py)
    prompts: Path | None = None  # None: the bundled set
    per_kind: int | None = None  # the first N prompts of each kind
    prompt_tokens: int = 128
    gen_tokens: int = 128
    runs: int = 3
    warmup: int = 1
    seed: int = 0
    peer: bool = False
    peer_temperatures: Sequence[float] | None = None  # where llama.cpp runs too; None: everywhere
    concurrency: Sequence[int] = ()  # non-empty: N requests at once per level (see concurrency.py)


def run_benchmark(
    settings: Settings, plan: BenchPlan, *, progress: Callable[[str], None] | None = None
) -> BenchReport:
    from localspec.engine import Engine  # noqa: PLC0415
    from localspec.llama import default_threads  # noqa: PLC0415

    if plan.prompt_tokens < 2 or plan.gen_tokens < 2:
        raise LocalspecError("--prompt-tokens and --gen-tokens must be at least 2")
    if plan.peer and settings.draft is None:
        raise LocalspecError(
            "--peer compares speculative decoding: it needs a draft model (--draft or --pair)"
        )
    fixed_k = [int(k) for k in plan.draft_max if k != "auto"]
    if plan.peer:
        if not fixed_k:
            raise LocalspecError("--peer needs at least one fixed draft length (llama.cpp has no 'auto')")
        for tool in ("llama-speculative-simple", "llama-bench"):
            peer_mod.peer_binary(tool)  # fail before minutes of localspec runs, not after
    chosen = select(load_prompts(plan.prompts), plan.per_kind, plan.kinds)
    threads = settings.n_threads or default_threads()
    settings = settings.replace(n_threads=threads, spec=True, cost_bound=0)  # each K as asked: no bound
    results: list[TempResult] = []
    ps = peer_settings(settings) if plan.peer else None
    with Engine(settings) as eng:  # the peer runs while our models sit idle in memory
        fitted = fit_prompts(chosen, eng.target, plan.prompt_tokens)
        peer_texts = _peer_texts(eng.target, fitted)
        configs = configs_for(
            plan.draft_max,
            has_draft=eng.draft is not None,
            lookups=plan.lookups,
            grammar_drafts=plan.grammar_drafts,
        )
        for t, mode, first_mode in _passes(plan):
            sides: list[Side] = [
                EngineSide(eng, configs, temperature=t, gen_tokens=plan.gen_tokens, spec_mode=mode)
            ]
            # llama.cpp has one rule: it runs once per temperature, beside the first of ours
            if (
                ps is not None
                and first_mode
                and (plan.peer_temperatures is None or t in plan.peer_temperatures)
            ):
                sides.append(
                    peer_mod.PeerSide(
                        ps,
                        lambda p: peer_texts[p.id],
                        fixed_k,
                        temperature=t,
                        gen_tokens=plan.gen_tokens,
                        variants=plan.peer_variants,
                    )
                )
            tables = measure(
                sides,
                fitted,
                temperature=t,
                gen_tokens=plan.gen_tokens,
                runs=plan.runs,
                warmup=plan.warmup,
                seed=plan.seed,
                progress=progress,
            )
            results.append(TempResult(*tables, spec_mode=mode))
    params = {
        "target": str(settings.target),
        "draft": str(settings.draft) if settings.draft else None,
        "draft_max": list(plan.draft_max),
        "temperatures": list(plan.temperatures),
        "top_k": settings.top_k,
        "top_p": settings.top_p,
        "min_p": settings.min_p,
        "spec_modes": list(plan.spec_modes),
        "lookups": list(plan.lookups),
        "grammar_drafts": list(plan.grammar_drafts),
        "peer_variants": list(plan.peer_variants) if plan.peer else [],
        "prompt_tokens": plan.prompt_tokens,
        "gen_tokens": plan.gen_tokens,
        "runs": plan.runs,
        "warmup": plan.warmup,
        "seed": plan.seed,
        "n_threads": threads,
        "n_prompts": len(fitted),
        "kinds": sorted({p.kind for p in fitted}),
        "prompt_ids": [p.id for p in fitted],
        "peer": plan.peer,
    }
    return BenchReport(params=params, machine=machine.describe(), results=results)


def _passes(plan: BenchPlan) -> list[tuple[float, str, bool]]:
    """(temperature, verification rule, first rule at that temperature) of each table: the rule
    only matters when sampling, so greedy gets one table."""
    out = []
    for t in plan.temperatures:
        modes = plan.spec_modes if t > 0 else ["pq"]
        out += [(t, m, i == 0) for i, m in enumerate(modes)]
    return out


def _peer_texts(model, fitted: Sequence[FittedPrompt]) -> dict[str, str]:  # noqa: ANN001 - backend.Model
    """Fitted tokens back to text for llama.cpp, which re-tokenizes it (special tokens parsed) and
    adds BOS itself; the token count it reports is kept with each sample."""
    texts = {}
    for p in fitted:
        toks = list(p.tokens)
        if model.vocab.add_bos and toks[:1] == [model.vocab.bos]:
            toks = toks[1:]
        texts[p.id] = model.detokenize(toks, special=True)
    return texts


def peer_settings(s: Settings) -> peer_mod.PeerSettings:
    """llama.cpp's side of a benchmark, with the same models, threads, batch and sampling."""
    from localspec.llama import default_threads  # noqa: PLC0415

    assert s.target is not None and s.draft is not None
    return peer_mod.PeerSettings(
        target=s.target,
        draft=s.draft,
        n_threads=s.n_threads or default_threads(),
        n_ctx=s.n_ctx,
        n_batch=s.n_batch,
        n_ubatch=s.n_ubatch,
        flash_attn=s.flash_attn,
        kv_type=s.kv_type,
        top_k=s.top_k,
        top_p=s.top_p,
        min_p=s.min_p,
    )


def run_concurrency_benchmark(
    settings: Settings, plan: BenchPlan, *, progress: Callable[[str], None] | None = None
) -> dict:
    """`bench --concurrency`: every level, temperature and configuration on one Engine with
    max(levels) slots, and with `peer` llama-server -np N alongside. Returns a JSON-able report
    whose "rows" are `concurrency.ConcurrencyRow` dicts."""
    from localspec.bench import concurrency as conc  # noqa: PLC0415
    from localspec.engine import Engine  # noqa: PLC0415
    from localspec.llama import default_threads  # noqa: PLC0415

    levels = list(plan.concurrency)
    if plan.peer and settings.draft is None:
        raise LocalspecError(
            "--peer compares speculative decoding: it needs a draft model (--draft or --pair)"
        )
    if plan.peer:
        peer_mod.peer_binary("llama-server")  # fail before minutes of localspec runs, not after
    chosen = select(load_prompts(plan.prompts), plan.per_kind, plan.kinds)
    threads = settings.n_threads or default_threads()
    settings = settings.replace(n_threads=threads, spec=True, parallel=max(levels), cost_bound=0)
    ps = peer_settings(settings) if plan.peer else None
    fixed_k = [int(k) for k in plan.draft_max if k != "auto"]
    rows: list[dict] = []
    with Engine(settings) as eng:
        fitted = fit_prompts(chosen, eng.target, plan.prompt_tokens)
        texts = _peer_texts(eng.target, fitted)
        configs = configs_for(plan.draft_max, has_draft=eng.draft is not None)
        for t in plan.temperatures:
            waves = conc.run_concurrency(
                eng,
                fitted,
                configs,
                levels,
                temperature=t,
                gen_tokens=plan.gen_tokens,
                runs=plan.runs,
                warmup=plan.warmup,
                seed=plan.seed,
                peer=ps,
                peer_texts=lambda p: texts[p.id],
                peer_k=fixed_k,
                progress=progress,
            )
            rows += [r.to_dict() | {"temperature": t} for r in conc.summarize(waves)]
    params = {
        "target": str(settings.target),
        "draft": str(settings.draft) if settings.draft else None,
        "draft_max": list(plan.draft_max),
        "temperatures": list(plan.temperatures),
        "concurrency": levels,
        "prompt_tokens": plan.prompt_tokens,
        "gen_tokens": plan.gen_tokens,
        "runs": plan.runs,
        "warmup": plan.warmup,
        "seed": plan.seed,
        "n_threads": threads,
        "n_prompts": len(fitted),
        "peer": plan.peer,
    }
    return {"params": params, "machine": machine.describe(), "rows": rows}
