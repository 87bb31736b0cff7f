"""Does a change to the round keep its output? Greedy generations of the bundled bench prompts on a
pair, at fixed K and auto, written to a JSON file; `--compare A B` says where two such files part.

    .venv/bin/python research/round_identity.py --out before.json        # in a checkout of main
    .venv/bin/python research/round_identity.py --out after.json         # in the changed checkout
    .venv/bin/python research/round_identity.py --compare before.json after.json

Each prompt runs alone (one slot), then `--batch` prompts at a time share the rounds (parallel
slots), with the JSON prompts under their schemas (the grammar's forced tokens draft too) and the
lookup on, as the defaults have it. Greedy text at a fixed K is a function of the code and the
binary (the same batch shapes every run); at auto the K each round takes follows measured timings,
so a difference there is checked against the K histories: the same Ks and different tokens is a
change of behaviour, different Ks is the machine. The request cost bound (#48) cuts a fixed K on
measured timings too, so it is off here (`--cost-bound` sets it): with it on, a fixed K's history
follows the machine as auto's does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from localspec.bench.prompts import fit_prompts, load_prompts, select
from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.paths import default_pair

CONFIGS = ("1", "3", "auto")


def _run(eng: Engine, prompts, k: str, n: int, batch: int) -> dict:  # noqa: ANN001
    out = {}
    for i in range(0, len(prompts), batch):
        group = prompts[i : i + batch]
        handles = [
            (p, eng.submit(list(p.tokens), max_tokens=n, temperature=0, draft_max=k, seed=0,
                           json_schema=p.schema))
            for p in group
        ]  # fmt: skip
        for p, h in handles:
            for _ in h:
                pass
            r = h.response
            out[p.id] = {
                "tokens": list(r.tokens),
                "k_history": list(r.stats.k_history),
                "sources": {s: [v["drafted"], v["accepted"]] for s, v in sorted(r.stats.sources.items())},
            }
    return out


def record(
    pair: Path,
    n: int,
    prompt_tokens: int,
    batch: int,
    per_kind: int | None,
    out: Path | None,
    bound: float,
    configs: tuple[str, ...] = CONFIGS,
) -> dict:
    """Every configuration, the shared rounds first; written to `out` after each (a partial run on a
    loaded machine still compares)."""
    got = {}
    s = Settings.load(pair=pair, tuner_cache=False, parallel=batch, no_log=True, cost_bound=bound)
    with Engine(s) as eng:
        prompts = fit_prompts(select(load_prompts(None), per_kind), eng.target, prompt_tokens)
        for b in (batch, 1):
            for k in configs:
                t0 = time.perf_counter()
                got[f"x{b} K={k}"] = _run(eng, prompts, k, n, b)
                print(f"K={k} x{b}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
                if out is not None:
                    out.write_text(json.dumps(got))
    return got


def compare(a: dict, b: dict) -> int:
    bad = 0
    for cfg in [c for c in a if c in b]:  # the configurations both runs finished
        same = diff_k = 0
        for pid, ra in a[cfg].items():
            rb = b[cfg][pid]
            if ra["tokens"] == rb["tokens"] and ra["sources"] == rb["sources"]:
                same += 1
                continue
            at = next((i for i, (x, y) in enumerate(zip(ra["tokens"], rb["tokens"])) if x != y), None)
            if ra["k_history"] != rb["k_history"]:
                diff_k += 1
                print(f"  {cfg} {pid}: differs (token {at}) after different Ks (timing)")
            else:
                bad += 1
                print(f"  {cfg} {pid}: DIFFERS at token {at} with the same Ks")
        print(f"{cfg}: {same}/{len(a[cfg])} identical, {diff_k} with other Ks")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per prompt")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=3, help="prompts per round in the shared runs")
    ap.add_argument("--per-kind", type=int, help="the first N prompts of each kind (default: all)")
    ap.add_argument("--cost-bound", type=float, default=0.0, help="the request cost bound (0: off)")
    ap.add_argument("--configs", nargs="+", default=CONFIGS, help="the Ks to run (default: 1 3 auto)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        return compare(*(json.loads(p.read_text()) for p in args.compare))
    got = record(
        args.pair, args.tokens, args.prompt_tokens, args.batch, args.per_kind, args.out, args.cost_bound,
        tuple(args.configs),
    )  # fmt: skip
    if not args.out:
        print(json.dumps(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
