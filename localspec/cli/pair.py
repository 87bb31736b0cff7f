"""`localspec pair` (build a matched target/draft pair) and `localspec check-pair`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from localspec.cli.progress import StageBars

MMPROJ_HELP = "The target's vision projector (an mmproj-*.gguf from the target's repo)."
DRAFT_MMPROJ_HELP = (
    "The draft's own vision projector (from the draft's repo), with --mmproj: the draft sees images too."
)


@click.command()
@click.argument("target_src", required=False)
@click.argument("draft_src", required=False)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for the pair (e.g. models/NAME); use it with --pair models/NAME.",
)
@click.option("--target-type", default="q4_k_m", show_default=True, help="Quantization of the target.")
@click.option("--draft-type", default="q8_0", show_default=True, help="Quantization of the draft.")
@click.option(
    "--stand-in",
    is_flag=True,
    help="Build the stand-in pair from the SmolLM2 GGUF (TARGET_SRC, default the embedded one).",
)
@click.option("--r", "r", type=click.IntRange(1, 64), default=None, help="Stand-in: FFN widening factor.")
@click.option(
    "--sigma",
    type=click.FloatRange(0, 10),
    default=None,
    help="Stand-in: relative noise on the widened weights.",
)
@click.option(
    "--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Stand-in: noise seed."
)
@click.option(
    "--mmproj",
    type=click.Path(dir_okay=False, path_type=Path),
    help=MMPROJ_HELP + " Checked against the target, linked (or copied) into the pair folder.",
)
@click.option(
    "--draft-mmproj",
    type=click.Path(dir_okay=False, path_type=Path),
    help=DRAFT_MMPROJ_HELP + " Checked against the draft, linked (or copied) in as draft-NAME.",
)
def pair(
    target_src: str | None,
    draft_src: str | None,
    out_dir: Path,
    target_type: str,
    draft_type: str,
    stand_in: bool,
    r: int | None,
    sigma: float | None,
    seed: int,
    mmproj: Path | None,
    draft_mmproj: Path | None,
) -> None:
    """Build a pair from TARGET_SRC and DRAFT_SRC (Hugging Face folders, repo ids or GGUF files):
    the target is quantized to Q4_K_M, the draft to Q8_0, their vocabularies are checked and
    pair.toml is written (naming the vision projectors, --mmproj and --draft-mmproj, if given)."""
    from localspec.errors import LocalspecError  # noqa: PLC0415

    with StageBars() as bars:
        if stand_in:
            if mmproj is not None or draft_mmproj is not None:
                raise LocalspecError("--mmproj goes with TARGET_SRC and DRAFT_SRC, not --stand-in")
            from localspec.convert import standin  # noqa: PLC0415
            from localspec.convert.embedded import smollm2_path  # noqa: PLC0415

            src = Path(target_src) if target_src else smollm2_path()
            standin.build_standin(
                src,
                out_dir,
                r=r or standin.R,
                sigma=standin.SIGMA if sigma is None else sigma,
                seed=seed,
                log=bars.write,
                progress=bars.update,
            )
            return
        if not (target_src and draft_src):
            raise LocalspecError("give TARGET_SRC and DRAFT_SRC (or --stand-in)")
        from localspec.convert.pairing import build_pair  # noqa: PLC0415

        build_pair(
            target_src,
            draft_src,
            out_dir,
            target_type=target_type,
            draft_type=draft_type,
            log=bars.write,
            progress=bars.update,
            mmproj=mmproj,
            draft_mmproj=draft_mmproj,
        )


@click.command("check-pair")
@click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("draft", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--mmproj", type=click.Path(dir_okay=False, path_type=Path), help=MMPROJ_HELP)
@click.option("--draft-mmproj", type=click.Path(dir_okay=False, path_type=Path), help=DRAFT_MMPROJ_HELP)
def check_pair(target: Path, draft: Path, mmproj: Path | None, draft_mmproj: Path | None) -> None:
    """Check that DRAFT can draft for TARGET (llama.cpp's vocabulary rules), and that the vision
    projectors (--mmproj, --draft-mmproj) are each one, whole, and made for their model. Exit 0 if
    so, 1 if not."""
    from localspec.draft_kinds import describe  # noqa: PLC0415
    from localspec.gguf.compat import check_pair as check  # noqa: PLC0415
    from localspec.gguf.projector import given_projectors, projector_for  # noqa: PLC0415

    given = given_projectors(mmproj, draft_mmproj, target, draft)
    facts = [(projector_for(p, m, role), role) for p, m, role in given]  # a bad one: one line
    report = check(target, draft)
    if report.ok:
        click.echo(report.message)
        for role, path in (("target", target), ("draft", draft)):
            click.echo(f"{role}: {describe(path)}")
        for f, role in facts:
            fits = (
                f"makes {f.n_embd_text}-wide embeddings, as the {role} takes"
                if f.n_embd_text
                else "does not state its output width (mtmd checks it at load)"
            )
            key = "mmproj" if role == "target" else "draft_mmproj"
            click.echo(f"{key}: {f.path} ({f.projector_type}, {f.image_size} px images): {fits}")
        return
    click.echo(f"incompatible: {draft} cannot draft for {target}")
    for p in report.problems:
        click.echo(f"  - {p}")
    sys.exit(1)  # exit status 1 = incompatible (documented), distinct from errors
