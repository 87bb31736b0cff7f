"""Where a served token's extra milliseconds go: the same greedy decode at the same depth, timed four
ways, interleaved pass by pass - our bare `llama.Context` loop (a one-token decode and an argmax),
our `Engine` (a plain request), `llama-bench -d DEPTH`, and llama-server's `/completion` (its own
`predicted_per_token_ms`). The FIM comparison (docs/benchmarks.md) found ours ~12% slower a token
than llama-server after the first; this says whether the gap is in the kernels' build, the engine's
loop, or llama-server's side.

    LOCALSPEC_PEER_BIN=third_party/llama.cpp-build/bin .venv/bin/python research/decode_gap.py \\
        --pair models/default --depth 700 --tokens 32 --passes 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np

from localspec import llama
from localspec.bench import peer as peer_mod
from localspec.bench.concurrency import PeerServer
from localspec.bench.suite import peer_settings
from localspec.config import Settings
from localspec.engine import Engine

FA = ("auto", "on", "off")  # our bare loop under each flash-attention setting


def prompt_ids(model: llama.Model, depth: int) -> list[int]:
    text = Path(__file__).read_text("utf-8") * 8  # any code-like text, cut to `depth` tokens
    return model.tokenize(text, add_special=True)[:depth]


def bare_ms(ctx: llama.Context, ids: list[int], n: int) -> float:
    """ms a token of n one-token decodes after the prompt, argmax on the host."""
    ctx.truncate(0)
    row = ctx.eval(ids, 0, 1)
    tok, pos = int(np.argmax(row[-1])), len(ids)
    t0 = time.perf_counter()
    for _ in range(n):
        row = ctx.eval([tok], pos, 1)
        tok, pos = int(np.argmax(row[-1])), pos + 1
    ms = (time.perf_counter() - t0) * 1e3 / n
    ctx.truncate(0)
    return ms


def engine_ms(eng: Engine, ids: list[int], n: int) -> float:
    """ms a token after the first of a plain greedy request (its decode time over n - 1 tokens)."""
    eng.clear_cache()
    first, count = None, 0
    for chunk in eng.submit(ids, max_tokens=n, temperature=0.0, stop=(), spec=False):
        if chunk.tokens:
            first = first or time.perf_counter()
            count += len(chunk.tokens)
    return (time.perf_counter() - first) * 1e3 / max(count - 1, 1)


def server_ms(server: PeerServer, ids: list[int], n: int) -> float:
    body = {
        "prompt": ids,
        "n_predict": n,
        "cache_prompt": False,
        "temperature": 0,
        "top_k": 1,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/completion", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=server.timeout_s) as r:
        return float(json.loads(r.read())["timings"]["predicted_per_token_ms"])


def bench_ms(ps: peer_mod.PeerSettings, depth: int, n: int) -> float:
    cmd = peer_mod.llama_bench_cmd(ps, ps.target, depth=depth, gen_tokens=n, runs=1)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return 1e3 / peer_mod.parse_llama_bench(out)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", type=Path, default=Path("models/default"))
    ap.add_argument("--depth", type=int, default=700)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    s = Settings.load(pair=args.pair)
    ps = peer_settings(s)
    out: dict[str, list[float]] = {}
    with Engine(s.replace(spec=False)) as eng, PeerServer(ps, 1, None) as server:
        ids = prompt_ids(eng.target, args.depth)
        ctxs = {
            fa: llama.Context(eng.target, n_ctx=s.n_ctx, n_threads=s.n_threads, flash_attn=fa) for fa in FA
        }
        sides = {
            **{f"bare loop, fa {fa}": lambda c=c: bare_ms(c, ids, args.tokens) for fa, c in ctxs.items()},
            "engine": lambda: engine_ms(eng, ids, args.tokens),
            "llama-bench": lambda: bench_ms(ps, len(ids), args.tokens),
            "llama-server": lambda: server_ms(server, ids, args.tokens),
        }
        for p in range(args.passes):
            names = list(sides)[p % len(sides) :] + list(sides)[: p % len(sides)]  # each goes first in turn
            for name in names:
                out.setdefault(name, []).append(sides[name]())
            print(f"pass {p + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in out.items()), flush=True)
    base = statistics.median(out["llama-server"])
    print(f"\nms a token at depth {len(ids)}, {args.tokens} tokens, median of {args.passes} passes:")
    for name, xs in out.items():
        print(
            f"  {name:13s} {statistics.median(xs):6.1f}  ({statistics.median(xs) / base:.2f}x llama-server)"
        )


if __name__ == "__main__":
    main()
