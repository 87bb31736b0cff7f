"""Formats a finished benchmark: a rich table on the terminal, JSON, Markdown and a plot.
Nothing here measures anything; it only reads the summaries."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from localspec.bench.aggregate import ConfigSummary, Spread, best, spread
from localspec.bench.runner import PLAIN, BenchTable
from localspec.files import write_text_atomic


@dataclass(frozen=True)
class TempResult:
    """One temperature: localspec's table, and llama.cpp's when --peer was given."""

    ours: BenchTable
    peer: BenchTable | None = None
    spec_mode: str = "pq"  # localspec's verification rule (only matters at T > 0)

    @property
    def temperature(self) -> float:
        return self.ours.temperature

    @property
    def label(self) -> str:
        """'T=0', or 'T=0.8 pq' / 'T=0.8 match' where the rule matters."""
        return f"T={self.temperature:g}" + (f" {self.spec_mode}" if self.temperature > 0 else "")

    def peer_plain(self) -> ConfigSummary | None:
        """llama-bench's plain decode of the target, when it ran in the interleave."""
        return next((s for s in self.peer.summaries if not s.speculative), None) if self.peer else None

    def plain_ratio(self) -> Spread | None:
        """Our plain decode over llama-bench's, each run's pair (same run, same prompt) a ratio of
        their tok/s: the drift between two samples taken seconds apart, not the whole benchmark's."""
        if self.peer is None:
            return None
        theirs = {(s.run, s.prompt_id): s for s in self.peer.samples if s.config == PLAIN.name}
        ratios = []
        for s in self.ours.samples:
            t = theirs.get((s.run, s.prompt_id))
            if s.config == PLAIN.name and t is not None and s.decode_ms > 0 and t.decode_ms > 0:
                ratios.append((s.decode_tokens / s.decode_ms) / (t.decode_tokens / t.decode_ms))
        return spread(ratios) if ratios else None

    def comparison(self) -> dict[str, Any] | None:
        """Each side at its best draft length, and localspec's speed over llama.cpp's."""
        if self.peer is None:
            return None
        a, b = best(self.ours.summaries), best(self.peer.summaries)
        if a is None or b is None:
            return None
        ratio = a.decode_tok_s.median / b.decode_tok_s.median if b.decode_tok_s.median > 0 else 0.0
        return {
            "localspec_config": a.config,
            "localspec_tok_s": a.decode_tok_s.median,
            "llamacpp_config": b.config,
            "llamacpp_tok_s": b.decode_tok_s.median,
            "ratio": ratio,
            "plain_ratio": asdict(pr) if (pr := self.plain_ratio()) else None,
        }


@dataclass(frozen=True)
class BenchReport:
    params: dict[str, Any]
    machine: dict[str, Any]
    results: list[TempResult] = field(default_factory=list)


# -- JSON ----------------------------------------------------------------------------------------
def to_dict(rep: BenchReport, *, samples: bool = True) -> dict[str, Any]:
    tables = []
    for r in rep.results:
        t: dict[str, Any] = {
            "temperature": r.temperature,
            "spec_mode": r.spec_mode,
            "localspec": [s.to_dict() for s in r.ours.summaries],
        }
        if r.peer is not None:
            t["llamacpp"] = [s.to_dict() for s in r.peer.summaries]
            t["llamacpp_plain_tok_s"] = asdict(pp.decode_tok_s) if (pp := r.peer_plain()) else None
            t["comparison"] = r.comparison()
        if samples:
            t["samples"] = [asdict(s) for s in r.ours.samples]
            if r.peer is not None:
                t["llamacpp_samples"] = [asdict(s) for s in r.peer.samples]
        tables.append(t)
    return {"params": rep.params, "machine": rep.machine, "tables": tables}


def write_json(rep: BenchReport, path: Path) -> None:
    write_text_atomic(Path(path), json.dumps(to_dict(rep), indent=2, default=str) + "\n")


# -- text cells ----------------------------------------------------------------------------------
def _tok_s(sp: Spread) -> str:
    return f"{sp.median:.1f}" if sp.n <= 1 else f"{sp.median:.1f} ({sp.lo:.1f}-{sp.hi:.1f})"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _row(s: ConfigSummary) -> list[str]:
    spec = s.speculative
    return [
        s.config,
        _tok_s(s.decode_tok_s),
        _tok_s(s.e2e_tok_s),
        f"{s.speedup:.2f}x" if s.speedup else "-",
        _pct(s.acceptance_rate) if spec else "-",
        f"{s.mean_accepted_len:.2f}" if spec and s.mean_accepted_len else "-",
        _pct(s.lookup_accepted_share) if s.lookup_accepted_share else "-",
        _pct(s.grammar_token_share) if s.grammar_token_share else "-",
        f"{s.constrain_ms_per_round:.2f}" if s.constrain_ms_per_round else "-",
        _pct(s.draft_share) if spec else "-",
        _pct(s.verify_share),
        _pct(max(1.0 - s.draft_share - s.verify_share, 0.0)),
        f"{s.early_stops}/{s.n_samples}",
    ]


HEADERS = [
    "config",
    "decode tok/s (min-max)",
    "e2e tok/s",
    "speedup",
    "accept",
    "mean acc len",
    "from lookup",
    "from grammar",
    "mask ms/pass",
    "draft time",
    "verify time",
    "other",
    "early EOG",
]
PEER_HEADERS = ["llama.cpp config", "decode tok/s (min-max)", "e2e tok/s", "accept", "localspec / llama.cpp"]


def _peer_rows(r: TempResult) -> list[list[str]]:
    ours = {s.config: s for s in r.ours.summaries}
    rows = []
    for s in r.peer.summaries if r.peer else []:
        mine = ours.get(s.config)
        ratio = mine.decode_tok_s.median / s.decode_tok_s.median if mine and s.decode_tok_s.median else 0.0
        if s.speculative:
            rows.append([s.config, _tok_s(s.decode_tok_s), _tok_s(s.e2e_tok_s), _pct(s.acceptance_rate)])
        else:  # llama-bench times the decode steps alone, and the pairs give the steadier ratio
            rows.append([f"{s.config} (llama-bench)", _tok_s(s.decode_tok_s), "-", "-"])
            pr = r.plain_ratio()
            ratio = pr.median if pr else ratio
        rows[-1].append(f"{ratio:.2f}x" if ratio else "-")
    return rows


def _comparison_line(r: TempResult) -> str | None:
    c = r.comparison()
    if c is None:
        return None
    line = (
        f"best K: localspec {c['localspec_config']} {c['localspec_tok_s']:.1f} tok/s vs llama.cpp "
        f"{c['llamacpp_config']} {c['llamacpp_tok_s']:.1f} tok/s -> {c['ratio']:.2f}x"
    )
    if (pr := r.plain_ratio()) is not None:
        line += (
            f"; plain: localspec / llama-bench {pr.median:.2f}x ({pr.lo:.2f}-{pr.hi:.2f},"
            f" {pr.n} paired samples)"
        )
    return line


# -- Markdown ------------------------------------------------------------------------------------
def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(rep: BenchReport, *, plot: str | None = None) -> str:
    p = rep.params
    out = [
        f"Prompts: {p.get('n_prompts')} ({', '.join(p.get('kinds', []))}), each exactly "
        f"{p.get('prompt_tokens')} tokens; up to {p.get('gen_tokens')} generated tokens; "
        f"{p.get('runs')} measured runs after {p.get('warmup')} warm-up; seed {p.get('seed')}; "
        f"{p.get('n_threads')} threads. decode tok/s = generated tokens / time after the prompt's prefill "
        "(llama.cpp's own definition), pooled over the prompts of a run; median over runs, min-max in "
        "brackets. e2e includes prompt processing. draft / verify / other are shares of decode time "
        "(other: sampling, acceptance and the Python loop).",
        "",
    ]
    for r in rep.results:
        out += [
            f"### {r.label}" + (" (localspec verification)" if r.temperature > 0 else ""),
            "",
            _md_table(HEADERS, [_row(s) for s in r.ours.summaries]),
            "",
        ]
        if r.peer is not None:
            out += [_md_table(PEER_HEADERS, _peer_rows(r)), ""]
            line = _comparison_line(r)
            if line:
                out += [f"**{line}**", ""]
    if plot:
        out += [f"![tok/s and acceptance against K]({plot})", ""]
    return "\n".join(out)


def write_markdown(rep: BenchReport, path: Path, *, plot: str | None = None) -> None:
    write_text_atomic(Path(path), markdown(rep, plot=plot))


# -- terminal ------------------------------------------------------------------------------------
def print_rich(rep: BenchReport, console=None) -> None:  # noqa: ANN001
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    if console is None:  # piped output would wrap the table at 80 columns
        console = Console() if Console().is_terminal else Console(width=150)
    for r in rep.results:
        t = Table(title=f"localspec, {r.label}", title_justify="left")
        for h in HEADERS:
            t.add_column(h, justify="left" if h == "config" else "right")
        for s in r.ours.summaries:
            t.add_row(*_row(s))
        console.print(t)
        if r.peer is not None:
            pt = Table(title=f"llama.cpp (sample-and-match), T={r.temperature:g}", title_justify="left")
            for h in PEER_HEADERS:
                pt.add_column(h, justify="left" if h == PEER_HEADERS[0] else "right")
            for row in _peer_rows(r):
                pt.add_row(*row)
            console.print(pt)
            line = _comparison_line(r)
            if line:
                console.print(line)


# -- plot ----------------------------------------------------------------------------------------
def plot(rep: BenchReport, path: Path) -> None:
    """Decode tok/s (left) and acceptance (right) against K, one line per temperature; 'auto' sits
    right of the largest K, the plain baseline is a dashed line."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(11, 4.2))
    ks = sorted({int(s.draft_max) for r in rep.results for s in _spec(r) if s.draft_max.isdigit()})
    x_auto = (max(ks) + 1) if ks else 1
    for i, r in enumerate(rep.results):
        color = f"C{i}"
        label = r.label
        xs, ys, lo, hi, acc = [], [], [], [], []
        for s in _spec(r):
            x = int(s.draft_max) if s.draft_max.isdigit() else x_auto
            xs.append(x)
            ys.append(s.decode_tok_s.median)
            lo.append(s.decode_tok_s.median - s.decode_tok_s.lo)
            hi.append(s.decode_tok_s.hi - s.decode_tok_s.median)
            acc.append(s.acceptance_rate)
        ax_t.errorbar(xs, ys, yerr=[lo, hi], marker="o", color=color, capsize=3, label=f"localspec {label}")
        ax_a.plot(xs, acc, marker="o", color=color, label=f"localspec {label}")
        plain = next((s for s in r.ours.summaries if not s.speculative), None)
        if plain is not None:
            ax_t.axhline(
                plain.decode_tok_s.median, color=color, linestyle="--", linewidth=1, label=f"plain {label}"
            )
        peer = [s for s in r.peer.summaries if s.speculative] if r.peer else []
        if peer:
            px = [int(s.draft_max) for s in peer]
            ax_t.plot(
                px,
                [s.decode_tok_s.median for s in peer],
                marker="s",
                color=color,
                linestyle=":",
                label=f"llama.cpp {label}",
            )
            ax_a.plot(
                px,
                [s.acceptance_rate for s in peer],
                marker="s",
                color=color,
                linestyle=":",
                label=f"llama.cpp {label}",
            )
    ticks = ks + [x_auto]
    for ax in (ax_t, ax_a):
        ax.set_xticks(ticks, [str(k) for k in ks] + ["auto"])
        ax.set_xlabel("draft length K")
        ax.grid(alpha=0.3)
    ax_t.set_ylabel("decode tok/s")
    ax_a.set_ylabel("acceptance rate")
    ax_a.set_ylim(0, 1.05)
    ax_t.legend(fontsize=7)
    ax_a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _spec(r: TempResult) -> list[ConfigSummary]:
    return [s for s in r.ours.summaries if s.speculative]
