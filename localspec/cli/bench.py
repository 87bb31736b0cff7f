"""`localspec bench`: plain vs speculative decoding over draft lengths on a fixed prompt set."""

from __future__ import annotations

from pathlib import Path

import click

from localspec.bench.peer_variants import PEER_VARIANT_NAMES, parse_peer_specs
from localspec.bench.runner import comma_list
from localspec.cli.common import resolve_settings, settings_options
from localspec.config.settings import LOOKUP_MODES, SPEC_MODES, Settings
from localspec.errors import LocalspecError
from localspec.files import write_text_atomic
from localspec.paths import default_pair

# the bench sets these itself: one value per configuration, or fixed by the method
_OWN = (
    "max_tokens",
    "stop",
    "temperature",
    "seed",
    "draft_max",
    "spec",
    "spec_mode",
    "lookup",
    "grammar_drafts",
)


def _choices(option: str, allowed: tuple[str, ...], value: str) -> list[str]:
    chosen = comma_list(value)
    if not chosen or any(m not in allowed for m in chosen):
        raise LocalspecError(f"{option} takes {', '.join(allowed)}, comma-separated (got {value!r})")
    return chosen


@click.command()
@settings_options("model", "sampling", "spec", exclude=_OWN)
@click.option(
    "--draft-max",
    "draft_max_list",
    default=None,
    help="Draft lengths to compare, comma-separated; 'auto' is the online tuner "
    "[default: 1,2,3,4,6,8,auto; with --kinds fim: auto].",
)
@click.option(
    "--temperature",
    "temperatures",
    default="0",
    show_default=True,
    help="Sampling temperature(s), comma-separated; every configuration uses the same.",
)
@click.option(
    "--spec-mode",
    "spec_modes",
    default=Settings.spec_mode,  # the field's default: the rule `run` uses
    show_default=True,
    help="Verification rule(s) at T > 0, comma-separated: pq (speculative sampling), coupled (shared "
    "position-keyed noise: same seed, same text), match (llama.cpp's sample-and-match); "
    "'pq,coupled,match' puts them side by side.",
)
@click.option(
    "--lookup",
    "lookups",
    default=Settings.lookup,
    show_default=True,
    help="N-gram lookup drafts, comma-separated to compare: on (chained with the draft model), off, "
    "only (lookup alone, no draft model); each draft length runs once per mode.",
)
@click.option(
    "--grammar-drafts",
    "grammar_drafts",
    default="on",
    show_default=True,
    help="On json prompts (each with its schema): on (grammar-aware drafts: forced tokens free, the "
    "draft model masked), off (drafts ignore the schema, llama.cpp's way; configurations named "
    "'blind'), or 'on,off' to compare.",
)
@click.option(
    "--kinds",
    "kinds",
    default=None,
    help="Only prompts of these kinds, comma-separated (chat, chinese, code, long, copy, json, completion, edit, summary); "
    "default: all. `fim` alone: code completion (fill-in-the-middle) problems, latency and pass rate per request.",
)
@click.option(
    "--peer-spec",
    "peer_specs",
    default="draft-simple",
    show_default=True,
    help="llama.cpp drafters to run with --peer, comma-separated: "
    + ", ".join(PEER_VARIANT_NAMES)
    + "; 'ngram' runs all its lookup configurations.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Base seed (same for every configuration)."
)
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(path_type=Path),
    default=None,
    help='JSONL prompt set ({"id", "kind", "text", "chat"}); default: the bundled one.',
)
@click.option(
    "--per-kind",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Use only the first N prompts of each kind.",
)
@click.option(
    "--prompt-tokens",
    type=click.IntRange(2, 1 << 24),
    default=128,
    show_default=True,
    help="Every prompt is cut or padded to exactly this many target tokens.",
)
@click.option(
    "--gen-tokens",
    type=click.IntRange(2, 1 << 24),
    default=128,
    show_default=True,
    help="Tokens to generate per prompt (fewer if the model ends its answer).",
)
@click.option(
    "--runs",
    type=click.IntRange(1, 10_000),
    default=3,
    show_default=True,
    help="Measured runs over the prompt set.",
)
@click.option(
    "--warmup",
    type=click.IntRange(0, 10_000),
    default=1,
    show_default=True,
    help="Unmeasured warm-up generations per configuration (first prompt).",
)
@click.option(
    "--json", "json_out", type=click.Path(path_type=Path), default=None, help="Write results as JSON."
)
@click.option(
    "--markdown", "md_out", type=click.Path(path_type=Path), default=None, help="Write a Markdown report."
)
@click.option(
    "--plot",
    "plot_out",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a PNG of tok/s and acceptance against K.",
)
@click.option(
    "--peer",
    is_flag=True,
    help="Also run llama.cpp's llama-speculative-simple on the same work "
    "(build it first: tools/build/build_peer.sh).",
)
@click.option(
    "--concurrency",
    default=None,
    help="Serve N requests at once, for each N given (e.g. 1,2,4): aggregate and per-request tok/s "
    "and time to first token; with --peer, llama-server -np N alongside.",
)
@click.option(
    "--round-overhead",
    is_flag=True,
    help="Instead: time one decoding round outside llama_decode (sampling, acceptance, bookkeeping) "
    "for 1/4/8 sequences, K = 1/4/8, greedy and sampled, with zero-cost decodes at vocabularies "
    "49k/152k/262k, and with --pair/--target on those models (a target alone drafts for itself).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def bench(
    draft_max_list: str | None,
    temperatures: str,
    spec_modes: str,
    lookups: str,
    grammar_drafts: str,
    kinds: str | None,
    peer_specs: str,
    seed: int,
    prompts_file: Path | None,
    per_kind: int | None,
    prompt_tokens: int,
    gen_tokens: int,
    runs: int,
    warmup: int,
    json_out: Path | None,
    md_out: Path | None,
    plot_out: Path | None,
    peer: bool,
    concurrency: str | None,
    round_overhead: bool,
    quiet: bool,
    **kwargs,
) -> None:  # noqa: ANN003
    """Benchmark plain vs speculative decoding over draft lengths (decode tok/s, speedup, acceptance)."""
    progress = None if quiet else (lambda msg: click.echo(f"  {msg}", err=True))
    if round_overhead:
        _round_overhead(kwargs, progress, json_out, md_out)
        return
    from localspec.bench import report  # noqa: PLC0415
    from localspec.bench.prompts import KINDS  # noqa: PLC0415
    from localspec.bench.runner import parse_draft_max, parse_temperatures  # noqa: PLC0415
    from localspec.bench.suite import BenchPlan, run_benchmark  # noqa: PLC0415

    if (
        kwargs.get("pair") is None
        and kwargs.get("target") is None
        and (default_pair() / "pair.toml").exists()
    ):
        kwargs["pair"] = default_pair()
    settings = resolve_settings(kwargs)
    if settings.target is None:
        raise LocalspecError("no model to benchmark: pass --pair DIR or --target T.gguf [--draft D.gguf]")
    if kinds == "fim":  # code completion: its own problems, latency per request and a pass rate
        _fim(
            settings,
            parse_draft_max(draft_max_list or "auto"),
            peer,
            runs,
            gen_tokens,
            progress,
            json_out,
            md_out,
        )
        return
    draft_max_list = draft_max_list or "1,2,3,4,6,8,auto"
    if prompt_tokens + gen_tokens > settings.n_ctx:  # refused before the models load
        raise LocalspecError(
            f"--prompt-tokens + --gen-tokens = {prompt_tokens + gen_tokens} exceeds the context "
            f"(n_ctx={settings.n_ctx}); lower them or raise --n-ctx"
        )
    plan = BenchPlan(
        draft_max=parse_draft_max(draft_max_list),
        temperatures=parse_temperatures(temperatures),
        spec_modes=_choices("--spec-mode", SPEC_MODES, spec_modes),
        lookups=_choices("--lookup", LOOKUP_MODES, lookups),
        grammar_drafts=_choices("--grammar-drafts", ("on", "off"), grammar_drafts),
        kinds=_choices("--kinds", KINDS, kinds) if kinds else None,
        peer_variants=parse_peer_specs(peer_specs),
        prompts=prompts_file,
        per_kind=per_kind,
        prompt_tokens=prompt_tokens,
        gen_tokens=gen_tokens,
        runs=runs,
        warmup=warmup,
        seed=seed,
        peer=peer,
        concurrency=_levels(concurrency) if concurrency else (),
    )
    if plan.concurrency:
        _concurrency(settings, plan, progress, json_out, md_out)
        return
    rep = run_benchmark(settings, plan, progress=progress)
    report.print_rich(rep)
    if json_out:
        report.write_json(rep, json_out)
    if plot_out:
        report.plot(rep, plot_out)
    if md_out:
        rel = _relative(plot_out, md_out.parent) if plot_out else None
        report.write_markdown(rep, md_out, plot=rel)


def _round_overhead(kwargs: dict, progress, json_out: Path | None, md_out: Path | None) -> None:  # noqa: ANN001
    import json  # noqa: PLC0415

    from localspec.bench import round_cost  # noqa: PLC0415

    rows = round_cost.zero_cost_grid(progress=progress)
    explicit = kwargs.get("pair") is not None or kwargs.get("target") is not None
    if explicit:
        settings = resolve_settings(kwargs)
        rows += round_cost.real_grid(settings, progress=progress)
    round_cost.print_table(rows)
    if json_out:
        json_out.write_text(json.dumps(round_cost.to_dicts(rows), indent=2) + "\n")
    if md_out:
        md_out.write_text(round_cost.markdown(rows))


def _fim(settings, draft_max, peer: bool, runs: int, gen_tokens: int, progress, json_out, md_out) -> None:  # noqa: ANN001
    from localspec.bench import fim  # noqa: PLC0415
    from localspec.bench.suite import peer_settings  # noqa: PLC0415

    if peer and settings.draft is None:
        raise LocalspecError("--peer runs llama-server with the draft: give --pair or --draft")
    ps = peer_settings(settings) if peer else None
    samples = fim.run_fim(
        settings, runs=runs, gen_tokens=gen_tokens, draft_max=draft_max, peer=ps, progress=progress
    )
    table = fim.markdown(fim.summary(samples))
    click.echo(table)
    if json_out:
        write_text_atomic(json_out, fim.to_json(samples))
    if md_out:
        write_text_atomic(md_out, table)


def _levels(value: str) -> list[int]:
    try:
        levels = list(dict.fromkeys(int(v) for v in value.split(",") if v.strip()))
    except ValueError:
        raise LocalspecError(f"--concurrency takes numbers, comma-separated (got {value!r})") from None
    if not levels or any(n < 1 or n > 64 for n in levels):
        raise LocalspecError(f"--concurrency takes numbers from 1 to 64 (got {value!r})")
    return levels


def _concurrency(settings, plan, progress, json_out: Path | None, md_out: Path | None) -> None:  # noqa: ANN001
    import json  # noqa: PLC0415

    from localspec.bench import concurrency as conc  # noqa: PLC0415
    from localspec.bench.suite import run_concurrency_benchmark  # noqa: PLC0415

    rep = run_concurrency_benchmark(settings, plan, progress=progress)
    for t in plan.temperatures:
        rows = [
            conc.ConcurrencyRow(**{k: v for k, v in r.items() if k != "temperature"})
            for r in rep["rows"]
            if r["temperature"] == t
        ]
        click.echo(f"temperature {t:g}")
        conc.print_table(rows)
    if json_out:
        write_text_atomic(json_out, json.dumps(rep, indent=2))
    if md_out:
        write_text_atomic(md_out, conc.markdown(rep))


def _relative(path: Path, base: Path) -> str:
    import os  # noqa: PLC0415

    return os.path.relpath(path.resolve(), base.resolve())
