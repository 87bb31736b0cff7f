"""`localspec list`: pair presets and the pairs present here, with sizes and last acceptance."""

from __future__ import annotations

import click


@click.command("list")
def list_pairs() -> None:
    """Pair presets (pull one with `localspec pull NAME`) and the pairs in models/ with their size and
    the acceptance last measured with them."""
    from localspec.gguf.memory_kind import memory_facts  # noqa: PLC0415
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415
    from localspec.hub.listing import local_pairs, presets  # noqa: PLC0415
    from localspec.hub.pull import is_pulled  # noqa: PLC0415

    click.echo("presets (n_ctx that fits fully on a 12 / 16 / 24 GB card; - = partial offload):")
    for p in presets():
        ctx = " / ".join(str(p.n_ctx.get(f"gpu_{gb}gb") or "-") for gb in (12, 16, 24))
        size = f"{p.size_gb:5.1f} GB" if p.size_gb else "   ? GB"
        here = "  [pulled]" if is_pulled(p.name) else ""
        click.echo(f"  {p.name:<20} {size}  n_ctx {ctx:<20} {p.description}{here}")
    pairs = local_pairs()
    click.echo("local pairs (use with --pair NAME or --pair models/NAME):")
    if not pairs:
        click.echo("  none yet (`localspec pull NAME`, `localspec pair`, or `make models`)")
    for lp in pairs:
        size = fmt_bytes(lp.size_bytes) if lp.size_bytes is not None else "–"
        acc = f"{lp.acceptance:.0%}" if lp.acceptance is not None else "–"
        note = f"  ({lp.problem})" if lp.problem else ""
        click.echo(f"  {lp.name:<20} {size:>10}  last acceptance {acc:>4}  {lp.folder}{note}")
        if not lp.problem:  # what speculation costs on its memory, and an MTP head to draft with
            f = memory_facts(lp.target)
            if f.kind != "attention" or f.mtp_layers:
                click.echo(f"  {'':<20} target: {f.describe()}")
