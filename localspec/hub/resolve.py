"""`--pair NAME` for every command: a folder or pair.toml as before, else a pair pulled into
models/NAME, else a preset, pulled first (after asking, or at once with --yes)."""

from __future__ import annotations

import sys
from pathlib import Path

from localspec.config.pair_toml import read_pair
from localspec.errors import LocalspecError
from localspec.hub.presets import find_preset, unknown_preset
from localspec.hub.pull import is_pulled, pull_preset


def resolve_pair(pair: str | Path, yes: bool = False, *, log=None, progress=None) -> Path:  # noqa: ANN001
    """A folder for `pair`; a preset not yet here is pulled (asking first unless `yes`), reporting
    through `log(line)` and `progress(stage, done, total)`."""
    p = Path(pair)
    if p.exists() or len(p.parts) > 1 or p.suffix == ".toml":
        return p  # a path: read_pair says what is wrong with it if anything

    name = str(pair)
    local = is_pulled(name)
    preset = find_preset(name)
    if local is not None and (preset is None or _files_present(local)):
        return local  # a pulled pair whose cache was emptied is pulled again below
    if preset is None:
        raise unknown_preset(name)
    size = f"about {preset.size_gb:.1f} GB" if preset.size_gb else "size unknown"
    if not yes and not _confirm(
        f"{name} is not downloaded yet: fetch it from the Hugging Face Hub ({size})?"
    ):
        raise LocalspecError(
            f"pair preset {name!r} is not downloaded yet ({size}); run `localspec pull {name}` first, "
            "or pass --yes to download it now"
        )
    log = log or (lambda line: print(line, file=sys.stderr))
    return pull_preset(preset, log=log, progress=progress).pair_dir


def _files_present(folder: Path) -> bool:

    try:
        p = read_pair(folder)
    except LocalspecError:
        return False
    return p.target.exists() and p.draft.exists() and (p.mmproj is None or p.mmproj.exists())


def _confirm(question: str) -> bool:
    """Ask on the terminal; never wait on a pipe or a closed stdin (answer no instead)."""
    if not (sys.stdin and sys.stdin.isatty()):
        return False
    import click  # noqa: PLC0415

    return click.confirm(question, default=True, err=True)
