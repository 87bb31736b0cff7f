"""The round's own cost, before and after: `bench --round-overhead`'s zero-cost grid run against the
`decode_round` of two checkouts, interleaved (per vocabulary: A, B, A, B), in fresh processes.

    .venv/bin/python research/round_overhead_ab.py /path/to/main-checkout . --markdown out.md

The grid's code (localspec/bench/round_cost.py) is this checkout's for both sides, so a checkout
from before the bench mode existed is measured the same way; with --own-grid each side runs its own
(the round redesign, #47, changed how the grid calls the round). Passes alternate the order (A, B,
then B, A). The figure per cell is the lower of
the runs' medians of CPU ms per round outside the decodes (a shared machine inflates wall time), or
with --wall of wall ms: the figure to read where a side's row kernels use a second thread, whose
CPU time the calling thread's clock does not see.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MODES = ("greedy", "coupled", "pq")


def _one(repo: str, vocab: int, rounds: int, out: str, own_grid: bool) -> None:
    """In a fresh process: the grid on `repo`'s decode_round."""
    sys.path.insert(0, repo)
    import localspec.decode.round as r  # noqa: PLC0415

    assert r.__file__.startswith(str(Path(repo).resolve())), r.__file__
    grid = Path(repo if own_grid else HERE) / "localspec/bench/round_cost.py"
    spec = importlib.util.spec_from_file_location("round_cost", grid)
    rc = importlib.util.module_from_spec(spec)
    sys.modules["round_cost"] = rc
    spec.loader.exec_module(rc)
    rows = rc.zero_cost_grid(vocabs=(vocab,), rounds=rounds)
    Path(out).write_text(json.dumps(rc.to_dicts(rows)))


def _best(runs: dict[str, list[list[dict]]], figure: str, backend: str) -> dict[str, dict]:
    """Per side, per (seqs, K, mode) cell: the lower of the runs' medians."""
    best: dict[str, dict] = {}
    for side, side_runs in runs.items():
        cells: dict = {}
        for run in side_runs:
            for r in run:
                if r["backend"] != backend:
                    continue
                key = (r["n_seq"], r["k"], r["mode"])
                cells[key] = min(cells.get(key, float("inf")), r[figure])
        best[side] = cells
    return best


def ratio(runs: dict[str, list[list[dict]]], figure: str) -> tuple[float, float, float]:
    """B / A over every cell of every backend: the geometric mean, the lowest and the highest."""
    logs = []
    for backend in dict.fromkeys(r["backend"] for r in runs["a"][0]):
        best = _best(runs, figure, backend)
        logs += [math.log(best["b"][k] / best["a"][k]) for k in best["a"]]
    return math.exp(sum(logs) / len(logs)), math.exp(min(logs)), math.exp(max(logs))


def _table(runs: dict[str, list[list[dict]]], vocab: int, figure: str, backend: str) -> list[str]:
    best = _best(runs, figure, backend)
    a, b = best["a"], best["b"]
    what = "wall" if figure == "ms_per_round" else "CPU"
    lines = [f"**{backend}, vocabulary {vocab}** ({what} ms per round outside the decodes, A → B)", ""]
    lines += ["| seqs | K | " + " | ".join(MODES) + " |", "|--:|--:|" + "--:|" * len(MODES)]
    for n, k in sorted({(n, k) for n, k, _ in a}):
        row = [f"{a[n, k, m]:.2f} → {b[n, k, m]:.2f} ({a[n, k, m] / b[n, k, m]:.1f}×)" for m in MODES]
        lines.append(f"| {n} | {k} | " + " | ".join(row) + " |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="the 'before' checkout")
    ap.add_argument("b", help="the 'after' checkout")
    ap.add_argument("--vocabs", default="49152,151936,262144")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--wall", action="store_true", help="wall ms, not the calling thread's CPU ms")
    ap.add_argument("--own-grid", action="store_true", help="each side runs its own checkout's grid")
    ap.add_argument("--one", nargs=5, help=argparse.SUPPRESS)  # REPO VOCAB ROUNDS OUT OWN: a child
    args = ap.parse_args()
    if args.one:
        _one(args.one[0], int(args.one[1]), int(args.one[2]), args.one[3], args.one[4] == "own")
        return
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for vocab in (int(v) for v in args.vocabs.split(",")):
            runs: dict[str, list] = {"a": [], "b": []}
            for p in range(args.passes):
                sides = (("a", args.a), ("b", args.b))
                for side, repo in sides if p % 2 == 0 else sides[::-1]:
                    out = f"{tmp}/{side}{vocab}_{p}.json"
                    cmd = [
                        sys.executable,
                        __file__,
                        "x",
                        "x",
                        "--one",
                        repo,
                        str(vocab),
                        str(args.rounds),
                        out,
                        "own" if args.own_grid else "this",
                    ]
                    subprocess.run(cmd, check=True)
                    runs[side].append(json.loads(Path(out).read_text()))
                    print(f"done {side} vocab {vocab} pass {p + 1}", file=sys.stderr)
            figure = "ms_per_round" if args.wall else "cpu_ms_per_round"
            for backend in dict.fromkeys(r["backend"] for r in runs["a"][0]):
                lines += _table(runs, vocab, figure, backend)
            mean, lo, hi = ratio(runs, figure)
            lines += [
                f"vocabulary {vocab}: B / A {mean:.3f} (geometric mean over cells; {lo:.2f}-{hi:.2f})",
                "",
            ]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
