"""Machine instructions per zero-cost round, counted by valgrind: a load-independent before/after
for the round's own cost, where the timed grid (`bench --round-overhead`, round_overhead_ab.py)
drowns in a shared machine's noise.

    .venv/bin/python research/round_instructions.py /path/to/before . --cells 1,1,greedy,64 8,8,pq,64

Per checkout and cell, the round_cost grid's `measure` runs R and R + 50 rounds under
`valgrind --tool=cachegrind` (one thread, fixed hash seed); the difference over 50 is one round,
start-up excluded. Both sides run the same decoder (this file's, not the checkout's), so what
differs is the round's own work; the counts include the decoder's and the harness's, the same on
both sides, so the ratios understate the round's own change.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

EXTRA = 50  # rounds between the two runs


def child(repo: str, n_seq: int, k: int, mode: str, top_k: int, rounds: int) -> None:
    sys.path.insert(0, repo)
    import localspec.bench.round_cost as rc  # noqa: PLC0415 - the checkout's own

    assert rc.__file__.startswith(str(Path(repo).resolve())), rc.__file__

    class Decoder(rc.ZeroCostDecoder):
        """The zero-cost decoder with the protocol's fields, one eval_views for every checkout."""

        rollback, max_draft, source, memory_kind = "truncate", None, "draft", "attention"
        prefix_copy = checkpoints = False

        def eval_views(self, items):  # noqa: ANN001, ANN201
            t0, c0 = time.perf_counter(), time.thread_time()
            rows, spans = [], []
            for seq, tokens, pos, n_logits in items:
                end = pos + len(tokens)
                self._past[seq] = end
                first = len(rows)
                rows.extend(self._row(seq, p) for p in range(end - n_logits, end))
                spans.append((first, len(rows)))
            out = self._buf[: len(rows)]
            if not all(self._top_on[seq] for seq, *_ in items):
                np.take(self.pool, rows, axis=0, out=out)
            views = [
                out[a:b] if not self._top_on[it[0]] else self._top[np.array(rows[a:b])]
                for it, (a, b) in zip(items, spans)
            ]
            self.decode_s += time.perf_counter() - t0
            self.decode_cpu_s += time.thread_time() - c0
            return views

    pool = rc.random_pool(4096 if top_k else 49152)
    n_ctx = 64 + (rounds + 8) * (k + 1) + 10
    t, d = (Decoder(pool, n_ctx=n_ctx, n_seq=n_seq, top_k=top_k) for _ in range(2))
    rc.measure(t, d, backend="x", n_vocab=pool.shape[1], n_seq=n_seq, k=k, mode=mode, rounds=rounds)


def count(repo: str, cell: str, rounds: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    cmd += [sys.executable, __file__, "--child", repo, cell, str(rounds)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd="/tmp").stderr
    return int(re.search(r"I\s+refs:\s+([\d,]+)", out)[1].replace(",", ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repos", nargs="*", help="checkouts; the first is the reference")
    ap.add_argument("--cells", nargs="+", default=["1,1,greedy,64", "1,8,greedy,64", "8,1,greedy,64"],
                    help="n_seq,K,mode,top_k (0: whole rows)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        repo, cell, rounds = args.child
        n, k, mode, top_k = cell.split(",")
        child(repo, int(n), int(k), mode, int(top_k), int(rounds))
        return 0
    for cell in args.cells:
        per = [
            (count(r, cell, args.rounds + EXTRA) - count(r, cell, args.rounds)) // EXTRA for r in args.repos
        ]
        ratios = " ".join(f"{p / per[0]:.3f}" for p in per[1:])
        print(
            f"{cell}: "
            + " ".join(f"{p:,}" for p in per)
            + f" instructions/round; against the first: {ratios}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
