"""`localspec stats [LOG]`: what the acceptance log says about the drafts you have run, as a table
and, with --plot, a chart (acceptance by draft position; decode speed over time)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("log", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False), help="Write a PNG chart here.")
def stats(log: Path | None, plot: Path | None) -> None:
    """Summarize the acceptance log LOG (default: the one run and chat write)."""
    from rich.console import Console  # noqa: PLC0415 - keep --help instant

    from localspec.telemetry.acclog import default_path  # noqa: PLC0415
    from localspec.telemetry.logstats import read_summary  # noqa: PLC0415

    path = log or default_path()
    s, bad = read_summary(path)
    console = Console(highlight=False)
    console.print(f"{path}: {s.generations} generations, {s.first[:19]} .. {s.last[:19]}")
    if bad:
        console.print(f"({bad} line(s) skipped: not log records)", style="dim")
    console.print(_summary_table(s))
    if s.drafted_by_pos:
        console.print(_position_table(s))
    if plot is not None:
        _plot(s, plot)
        console.print(f"wrote {plot}")


def _summary_table(s):  # noqa: ANN001, ANN202
    from rich.table import Table  # noqa: PLC0415

    t = Table(title="summary", show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("value")
    t.add_row(
        "generations", f"{s.generations} ({', '.join(f'{k} {v}' for k, v in sorted(s.sources.items()))})"
    )
    t.add_row("speculative generations", str(s.speculative))
    t.add_row("tokens generated", str(s.generated_tokens))
    t.add_row("prompt tokens (prefilled)", f"{s.prompt_tokens} ({s.prefilled_tokens})")
    if s.drafted:
        t.add_row("acceptance", f"{s.acceptance:.1%} ({s.accepted}/{s.drafted})")
        t.add_row("mean accepted length", f"{s.mean_accepted_len:.2f} per round")
        for name, c in sorted(s.draft_sources.items()):  # the draft model, the lookup, the grammar
            rate = c["accepted"] / c["drafted"] if c["drafted"] else 0.0
            t.add_row(f"  drafted by {name}", f"{c['accepted']}/{c['drafted']} kept ({rate:.1%})")
        ratio = s.verify_draft_ratio
        hint = "" if ratio >= 1 else " (< 1: drafting costs more than verifying)"
        t.add_row("verify/draft time", f"{ratio:.2f}{hint}")
    q = s.tok_s_quantiles()
    if q:
        t.add_row("decode tok/s median", f"{q['median']:.1f}")
        t.add_row("decode tok/s p10 .. p90", f"{q['p10']:.1f} .. {q['p90']:.1f}")
        t.add_row("decode tok/s min .. max", f"{q['min']:.1f} .. {q['max']:.1f}")
    return t


def _position_table(s):  # noqa: ANN001, ANN202
    from rich.table import Table  # noqa: PLC0415

    t = Table(title="acceptance by draft position", title_justify="left")
    for name in ("position", "drafted", "accepted", "rate"):
        t.add_column(name, justify="right")
    for i, (d, a, r) in enumerate(zip(s.drafted_by_pos, s.accepted_by_pos, s.acceptance_by_pos), 1):
        t.add_row(str(i), str(d), str(a), f"{r:.1%}")
    return t


def _plot(s, out: Path) -> None:  # noqa: ANN001
    from datetime import datetime, timezone  # noqa: PLC0415

    from localspec.errors import LocalspecError  # noqa: PLC0415

    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise LocalspecError("--plot needs matplotlib: pip install 'localspec[bench]'") from None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if s.drafted_by_pos:
        pos = range(1, len(s.drafted_by_pos) + 1)
        ax1.bar(pos, s.acceptance_by_pos, color="tab:cyan")
        for p, r, d in zip(pos, s.acceptance_by_pos, s.drafted_by_pos):
            ax1.annotate(f"n={d}", (p, r), ha="center", va="bottom", fontsize=8)
        ax1.set_ylim(0, 1.1)
        ax1.set_xticks(list(pos))
    else:
        ax1.text(0.5, 0.5, "no drafted tokens", ha="center", va="center", transform=ax1.transAxes)
    ax1.set_title("acceptance by draft position")
    ax1.set_xlabel("draft position")
    ax1.set_ylabel("P(accepted | drafted)")
    points = [
        (datetime.fromtimestamp(t, timezone.utc), x) for t, x in zip(s.started, s.tok_s) if t == t and x > 0
    ]  # t == t: not NaN
    if points:
        ax2.plot([p[0] for p in points], [p[1] for p in points], "o-", color="tab:blue", markersize=4)
        ax2.tick_params(axis="x", labelrotation=30)
    ax2.set_title("decode speed over time")
    ax2.set_ylabel("tok/s")
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        raise LocalspecError(f"cannot write {out}: {e}") from None
    finally:
        plt.close(fig)
