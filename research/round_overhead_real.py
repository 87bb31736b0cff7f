"""The round's own cost on a real model, with the compiled row kernels and with numpy's definition
doing the same work (`sampling.KERNEL` switched off), interleaved in one process: what the kernels
save once real decodes have streamed the weights through the caches.

    LOCALSPEC_MODELS=$PWD/models .venv/bin/python research/round_overhead_real.py \\
        --target models/gemma-3-270m-q4_k_m.gguf --passes 2

The figure per cell is the lower of the passes' medians of wall ms per round outside the decodes
(`bench --round-overhead`'s real grid: the target drafting for itself, whole rows).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.bench import round_cost
from localspec.config import Settings
from localspec.decode import sampling

KERNEL = sampling.KERNEL


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    settings = Settings(target=args.target)
    best: dict[tuple, dict[str, float]] = {}
    for _ in range(args.passes):
        for side in ("numpy", "kernel"):
            sampling.KERNEL = KERNEL if side == "kernel" else None
            rows = round_cost.real_grid(
                settings, sequences=(1, 8), draft_lengths=(1, 4), rounds=args.rounds, top_ks=(0,)
            )
            for r in rows:
                cell = best.setdefault((r.n_seq, r.k, r.mode), {})
                cell[side] = min(cell.get(side, float("inf")), r.ms_per_round)
                cell["decode"] = r.decode_ms_per_round
    print(f"**{args.target.name}** (wall ms per round outside the decodes, numpy → kernels; decodes)\n")
    print("| seqs | K | mode | numpy | kernels | decodes |\n|--:|--:|---|--:|--:|--:|")
    for (n, k, mode), c in sorted(best.items()):
        print(f"| {n} | {k} | {mode} | {c['numpy']:.2f} | {c['kernel']:.2f} | {c['decode']:.0f} |")


if __name__ == "__main__":
    main()
