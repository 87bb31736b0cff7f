"""`localspec list`: pair presets and the pairs present here, with sizes and last acceptance, and
the servers running here with the state of each model they serve."""

from __future__ import annotations

import click


@click.command("list")
def list_pairs() -> None:
    """Pair presets (pull one with `localspec pull NAME`), the pairs in models/ with their size and
    the acceptance last measured with them, and what each running `localspec serve` has loaded."""
    from localspec.draft_kinds import describe, header_layers  # noqa: PLC0415
    from localspec.gguf.file import read_header  # noqa: PLC0415
    from localspec.gguf.memory_kind import memory_facts  # noqa: PLC0415
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415
    from localspec.hub.listing import local_pairs, presets  # noqa: PLC0415
    from localspec.hub.pull import is_pulled  # noqa: PLC0415

    click.echo("presets (n_ctx that fits fully on a 12 / 16 / 24 GB card; - = partial offload):")
    for p in presets():
        ctx = " / ".join(str(p.n_ctx.get(f"gpu_{gb}gb") or "-") for gb in (12, 16, 24))
        size = f"{p.size_gb:5.1f} GB" if p.size_gb else "   ? GB"
        here = "  [pulled]" if is_pulled(p.name) else ""
        sees = " (+ vision projector)" if p.target.mmproj else ""
        click.echo(f"  {p.name:<20} {size}  n_ctx {ctx:<20} {p.description}{sees}{here}")
    pairs = local_pairs()
    click.echo("local pairs (use with --pair NAME or --pair models/NAME):")
    if not pairs:
        click.echo("  none yet (`localspec pull NAME`, `localspec pair`, or `make models`)")
    for lp in pairs:
        size = fmt_bytes(lp.size_bytes) if lp.size_bytes is not None else "–"
        acc = f"{lp.acceptance:.0%}" if lp.acceptance is not None else "–"
        note = f"  ({lp.problem})" if lp.problem else ""
        click.echo(f"  {lp.name:<20} {size:>10}  last acceptance {acc:>4}  {lp.folder}{note}")
        if not lp.problem:  # what speculation costs on its memory, and blocks of its own to draft with
            if memory_facts(lp.target).kind != "attention" or any(
                header_layers(read_header(lp.target)).values()
            ):
                click.echo(f"  {'':<20} target: {describe(lp.target)}")
    show_servers()


def show_servers() -> None:
    """Each `localspec serve` running here, and its models' states (loaded first)."""
    from localspec.cli.running import servers  # noqa: PLC0415

    running = servers()
    if not running:
        click.echo("servers: none running")
        return
    for srv in running:
        click.echo(f"server {srv['url']} (pid {srv['pid']}):")
        if "error" in srv:
            click.echo(f"  {srv['error']}")
            continue
        order = {"loaded": 0, "loading": 1, "unloading": 2, "error": 3}
        models = [(str(m.get("id")), m.get("status") or {}) for m in srv["models"] if isinstance(m, dict)]
        for name, st in sorted(models, key=lambda m: (order.get(m[1].get("value"), 4), m[0])):
            took = (
                f"  (loaded in {st['load_s']:.1f} s)"
                if st.get("value") == "loaded" and st.get("load_s")
                else ""
            )
            why = f": {st['error']}" if st.get("error") else ""
            click.echo(f"  {name:<20} {st.get('value', '?')}{took}{why}")
