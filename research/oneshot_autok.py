"""What a new user sees: one `localspec run` per fresh process, `--draft-max auto` against plain
decoding, K=1 and K=3, interleaved (the machine's speed drifts between runs, so configurations take
turns rather than running in blocks).

Each auto run is made twice: with an empty tuner cache (a first run ever: costs calibrated at load)
and with the cache the previous auto runs left (the memory of earlier processes). Reported: median
decode tok/s per configuration and temperature, and auto's ratio to the best of plain, K=1 and K=3
and to plain.

    .venv/bin/python research/oneshot_autok.py --pair models/default          # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from localspec.bench.prompts import load_prompts, select
from localspec.paths import default_pair

CONFIGS = {"plain": ["--no-spec"], "K=1": ["--draft-max", "1"], "K=3": ["--draft-max", "3"]}


def one_run(pair: Path, prompt: str, chat: bool, temp: float, n: int, flags: list[str], cache: str) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    cmd = [sys.executable, "-m", "localspec", "run", prompt, "--pair", str(pair), "--json", "--no-log"]
    cmd += ["--temperature", str(temp), "--max-tokens", str(n), "--seed", "1", *flags]
    cmd += ["--chat"] if chat else []
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--gen-tokens", type=int, default=96)
    ap.add_argument("--temperatures", default="0,0.8")
    ap.add_argument("--rounds", type=int, default=1, help="passes over the prompts")
    args = ap.parse_args()
    prompts = select(load_prompts(None), 1)
    remembered = tempfile.mkdtemp(prefix="localspec-oneshot-")
    rates: dict[tuple[float, str], list[float]] = {}
    for temp in (float(t) for t in args.temperatures.split(",")):
        for _ in range(args.rounds):
            for p in prompts:
                runs = dict(CONFIGS)
                for name, flags in runs.items():
                    r = one_run(args.pair, p.text, p.chat, temp, args.gen_tokens, flags, tempfile.mkdtemp())
                    rates.setdefault((temp, name), []).append(r["decode_tok_s"])
                    print(f"T={temp} {p.id} {name}: {r['decode_tok_s']:.1f} tok/s", file=sys.stderr)
                cold = one_run(args.pair, p.text, p.chat, temp, args.gen_tokens, [], tempfile.mkdtemp())
                warm = one_run(args.pair, p.text, p.chat, temp, args.gen_tokens, [], remembered)
                for name, r in (("auto (fresh)", cold), ("auto (remembered)", warm)):
                    rates.setdefault((temp, name), []).append(r["decode_tok_s"])
                    print(
                        f"T={temp} {p.id} {name}: {r['decode_tok_s']:.1f} tok/s, K {r['stats']['k_history'][:12]}",
                        file=sys.stderr,
                    )
    print("| T | plain | K=1 | K=3 | auto (fresh) | auto (remembered) | fresh / best | fresh / plain |")
    print("|---|---|---|---|---|---|---|---|")
    for temp in sorted({t for t, _ in rates}):
        med = {name: statistics.median(v) for (t, name), v in rates.items() if t == temp}
        best = max(med["plain"], med["K=1"], med["K=3"])
        print(
            f"| {temp} | {med['plain']:.1f} | {med['K=1']:.1f} | {med['K=3']:.1f} | {med['auto (fresh)']:.1f} "
            f"| {med['auto (remembered)']:.1f} | {med['auto (fresh)'] / best:.2f} "
            f"| {med['auto (fresh)'] / med['plain']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
