"""Local vs RPC-split on loopback: the same pair, the target all-local or split over two
`ggml-rpc-server` processes on 127.0.0.1 (CPU backend), the draft local in both. Prints a markdown
table of decode speed and the K the tuner settled on (docs/rpc.md quotes it).

    .venv/bin/python scripts/bench_rpc.py                      # models/default, ~5 min on 2 cores
    .venv/bin/python scripts/bench_rpc.py --pair DIR --max-tokens 128 --threads 1

On one machine the servers share the client's cores, so "network time" here is loopback plus the
RPC protocol plus that contention: an upper bound on LAN overhead for compute, not a LAN figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.bench.prompts import load_prompts  # noqa: E402
from localspec.engine import Engine  # noqa: E402
from localspec.settings import DEFAULT_PAIR, Settings  # noqa: E402
from tests.rpc_servers import Servers, server_binary  # noqa: E402


def run(settings: Settings, prompts: list[str], max_tokens: int) -> dict:
    with Engine(settings, log=lambda m: print(f"  {m}", file=sys.stderr)) as eng:
        eng.generate(prompts[0], max_tokens=16)  # warm-up: the tuner's probe rounds happen here
        speeds, ks = [], Counter()
        for p in prompts:
            eng.clear_cache()
            r = eng.generate(p, max_tokens=max_tokens)
            speeds.append(r.stats.decode_tok_s)
            ks.update(r.stats.k_history)
    return {"tok_s": statistics.median(speeds), "ks": ks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=Path, default=DEFAULT_PAIR)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per rpc-server")
    args = ap.parse_args()
    binary = server_binary()
    if binary is None:
        sys.exit("ggml-rpc-server not found: run scripts/build_rpc_server.sh")
    prompts = [p.text for p in load_prompts()][: args.prompts]
    base = Settings.load(pair=args.pair, temperature=0.0, n_ctx=1024)
    rows = []
    servers = Servers(binary, n=2, threads=args.threads)
    try:
        for label, s in (
            ("local, plain", base.replace(spec=False)),
            ("local, auto-K", base),
            ("RPC split, plain", base.replace(spec=False, rpc=servers.rpc)),
            ("RPC split, auto-K", base.replace(rpc=servers.rpc)),
        ):
            print(label, file=sys.stderr)
            rows.append((label, run(s, prompts, args.max_tokens)))
    finally:
        servers.close()
    print("| target | decode tok/s | K chosen (rounds) |")
    print("|---|---:|---|")
    for label, r in rows:
        ks = ", ".join(f"K={k}: {n}" for k, n in sorted(r["ks"].items()) if k) or "-"
        print(f"| {label} | {r['tok_s']:.1f} | {ks} |")


if __name__ == "__main__":
    main()
