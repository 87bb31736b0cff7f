"""Soak test: process RSS after warm-up vs after N generations on one Engine.

Contexts are allocated once and requests must not allocate, so RSS should stay flat. Generations
mix greedy and sampled decoding, chat and plain prompts, stop strings, and streams abandoned early
(the error/cleanup path of the loop). Prints one JSON object; exits 1 if RSS grew more than
--max-growth-mb.

    .venv/bin/python scripts/soak.py                      # models/default, 200 generations
    .venv/bin/python scripts/soak.py --target models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --draft models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.engine import Engine  # noqa: E402
from localspec.settings import DEFAULT_PAIR, Settings  # noqa: E402

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three prime numbers and say why they are prime.",
    "def fibonacci(n):",
    "The capital of France is",
    "Translate 'good morning' into Spanish, French and German.",
]


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def one(eng: Engine, i: int, max_tokens: int) -> int:
    """Generation i of the mix; returns tokens generated."""
    prompt = PROMPTS[i % len(PROMPTS)]
    kw = dict(max_tokens=max_tokens, seed=i, temperature=0.0 if i % 2 == 0 else 0.8, chat=i % 3 == 0)
    if i % 5 == 4:
        kw["stop"] = ("\n\n",)
    if i % 7 == 6:  # abandon a stream half way
        n = 0
        stream = eng.stream(prompt, **kw)
        for chunk in stream:
            n += len(chunk.tokens)
            if n >= max_tokens // 2:
                break
        stream.close()
        return n
    return len(eng.generate(prompt, **kw).tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=Path, default=None)
    ap.add_argument("--target", type=Path, default=None)
    ap.add_argument("--draft", type=Path, default=None)
    ap.add_argument("-n", "--generations", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--max-growth-mb", type=float, default=4.0)
    args = ap.parse_args()
    if args.target is None and args.pair is None:
        args.pair = DEFAULT_PAIR
    settings = Settings.load(pair=args.pair, target=args.target, draft=args.draft, n_ctx=args.n_ctx)

    t0 = time.perf_counter()
    rss_start = rss_mb()
    with Engine(settings) as eng:
        rss_loaded = rss_mb()
        for i in range(args.warmup):
            one(eng, i, args.max_tokens)
        gc.collect()
        rss_warm = rss_mb()
        trace, tokens = [], 0
        for i in range(args.generations):
            tokens += one(eng, args.warmup + i, args.max_tokens)
            if (i + 1) % 25 == 0:
                gc.collect()
                trace.append(round(rss_mb(), 1))
        gc.collect()
        rss_end = rss_mb()
    growth = rss_end - rss_warm
    result = {
        "target": str(settings.target),
        "draft": str(settings.draft),
        "generations": args.generations,
        "tokens": tokens,
        "seconds": round(time.perf_counter() - t0, 1),
        "rss_mb": {
            "start": round(rss_start, 1),
            "loaded": round(rss_loaded, 1),
            "warm": round(rss_warm, 1),
            "end": round(rss_end, 1),
            "every_25": trace,
        },
        "growth_mb": round(growth, 2),
        "max_growth_mb": args.max_growth_mb,
        "ok": growth < args.max_growth_mb,
    }
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
