"""`localspec pull`: a pair preset, or Hub repos, downloaded, checked and written as models/NAME."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("source")
@click.argument("draft_src", required=False)
@click.option("--name", help="Folder under models/ for a pair of repos (default: from the repo names).")
@click.option(
    "--out-dir", type=click.Path(file_okay=False, path_type=Path), help="Where pair.toml goes instead."
)
@click.option(
    "--mmproj",
    metavar="FILE",
    help="A pair of repos: the target's vision projector, a file in the target's repo (for images).",
)
@click.option("--no-mmproj", is_flag=True, help="A preset: skip the vision projector it names (text only).")
def pull(
    source: str,
    draft_src: str | None,
    name: str | None,
    out_dir: Path | None,
    mmproj: str | None,
    no_mmproj: bool,
) -> None:
    """Download SOURCE: a preset (`localspec list`), or TARGET_REPO[:FILE] DRAFT_REPO[:FILE] as a pair,
    or one REPO[:FILE]. GGUF repos give the Q4_K_M (target) / Q8_0 (draft) file; safetensors-only repos
    are converted; a preset's vision projector comes too. Then check-pair, pair.toml in models/NAME
    and a memory verdict for this machine."""
    from localspec.cli.progress import StageBars  # noqa: PLC0415

    with StageBars() as bars:
        _pull(source, draft_src, name, out_dir, mmproj, no_mmproj, log=bars.write, progress=bars.update)


def _pull(source, draft_src, name, out_dir, mmproj, no_mmproj, *, log, progress) -> None:  # noqa: ANN001
    import dataclasses  # noqa: PLC0415

    from localspec.errors import LocalspecError  # noqa: PLC0415
    from localspec.hub.presets import find_preset, is_repo_ref, parse_ref, unknown_preset  # noqa: PLC0415
    from localspec.hub.pull import pair_name, pull_one, pull_pair, pull_preset  # noqa: PLC0415

    if mmproj and no_mmproj:
        raise LocalspecError("give --mmproj FILE or --no-mmproj, not both")
    if not is_repo_ref(source):
        preset = find_preset(source)
        if preset is None:
            raise unknown_preset(source)
        if draft_src:
            raise LocalspecError(f"{source} is a preset: it names its own draft; drop {draft_src!r}")
        if mmproj:
            raise LocalspecError(f"{source} is a preset: it names its own projector; drop --mmproj")
        pull_preset(preset, out_dir=out_dir, log=log, progress=progress, mmproj=not no_mmproj)
        return
    target = parse_ref(source, quant="q4_k_m")
    if draft_src is None:
        if mmproj:
            raise LocalspecError(
                f"--mmproj goes with a pair; to download the file alone: {target.repo}:{mmproj}"
            )
        pull_one(target, log=log)
        return
    draft = parse_ref(draft_src, quant="q8_0")
    target = dataclasses.replace(target, mmproj=mmproj or None)
    pull_pair(
        target, draft, name=name or pair_name(target, draft), out_dir=out_dir, log=log, progress=progress
    )
