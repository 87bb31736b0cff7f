"""The history source's wall-clock cost where it cannot help (one-off prompts), each side in its own
process, the order alternating per pair. research/history_ab.py runs both engines in one process,
which reads the history side 2-3% slower even where it drafted nothing (its A/A control: 1-2%):
two engines' OpenMP teams in one process disturb each other (docs/benchmarks.md's trap).

    .venv/bin/python research/history_wall.py --pair models/default --pairs 3

Prints per process: history tokens, tokens generated, target passes, seconds for the requests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from history_ab import chat  # noqa: E402


def one_side(pair: str, history: int, requests: int, tokens: int) -> dict:
    from localspec.config.settings import Settings  # noqa: PLC0415
    from localspec.engine import Engine  # noqa: PLC0415

    s = Settings.load(
        pair=pair, lookup="on", tuner_cache=False, no_log=True, n_ctx=1024, history_tokens=history
    )
    with Engine(s) as eng:
        eng.generate(chat("one-off", 0), chat=True, max_tokens=4, temperature=0.0)  # load and calibrate
        t0, n, passes = time.perf_counter(), 0, 0
        for i in range(1, requests + 1):
            r = eng.generate(chat("one-off", i), chat=True, max_tokens=tokens, temperature=0.0, seed=0)
            n, passes = n + r.stats.n_generated, passes + r.stats.rounds + r.stats.plain_steps
        return {"history": history, "tokens": n, "passes": passes, "s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default="models/default")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--history", type=int, default=65536)
    ap.add_argument("--side", type=int, help=argparse.SUPPRESS)  # a child: run one side, print it
    a = ap.parse_args()
    if a.side is not None:
        print(json.dumps(one_side(a.pair, a.side, a.requests, a.tokens)))
        return
    ratios = []
    for i in range(a.pairs):
        order = [a.history, 0] if i % 2 == 0 else [0, a.history]
        got = {}
        for h in order:
            cmd = [sys.executable, __file__, "--pair", a.pair, "--requests", str(a.requests), "--tokens", str(a.tokens), "--side", str(h)]  # fmt: skip
            got[h] = json.loads(
                subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1]
            )
            print(got[h], flush=True)
        ratios.append(got[0]["s"] / got[a.history]["s"])
    print("speed with history / without, per pair:", " ".join(f"{r:.3f}" for r in ratios))


if __name__ == "__main__":
    main()
