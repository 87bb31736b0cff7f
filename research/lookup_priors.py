"""How often the lookup's first proposed token is kept, per match-length bucket, greedy and sampled.

For each bench prompt (every kind, copy included): the target's continuation at the given temperature
(plain decoding), teacher-forced once more for its filtered distributions. At every position the
lookup proposes from prompt + output so far; its first token would be kept with probability
1[x = argmax] greedy, and p(x) under the p/q rule or the coupled rule when sampling. The mean per
bucket is what `draft_len.LOOKUP_PRIORS` (greedy) and `LOOKUP_PRIORS_SAMPLED` encode.

    .venv/bin/python research/lookup_priors.py --temperature 0,0.8     # ~4 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from localspec.bench.prompts import fit_prompts, load_prompts, select
from localspec.config.settings import Settings
from localspec.decode.lookup import Lookup
from localspec.decode.sampling import SamplingParams, process
from localspec.draft_len.evidence import LOOKUP_BUCKETS, lookup_bucket
from localspec.engine import Engine
from localspec.paths import default_pair


def kept_first(eng: Engine, prompt: list[int], n: int, temp: float, seed: int) -> list[tuple[int, float]]:
    """(bucket, chance the first lookup token is kept) at every position the lookup proposes."""
    eng.clear_cache()
    out = list(eng.generate(prompt, max_tokens=n, temperature=temp, seed=seed, stop=(), spec=False).tokens)
    eng.clear_cache()
    # row j predicts out[j]; on the engine thread, where every decode of eng runs
    rows = eng.on_engine_thread(lambda: np.array(eng.target_ctx.eval(prompt + out, 0, n_logits=len(out) + 1)))
    eng.clear_cache()
    sp = SamplingParams(temperature=temp)
    lk, found = Lookup(prompt), []
    for j in range(len(out)):
        proposal, match_len = lk.propose(1)
        if proposal:
            x = proposal[0]
            p = float(rows[j].argmax() == x) if temp <= 0 else process(rows[j], sp).prob(x)
            found.append((lookup_bucket(match_len), p))
        lk.extend([out[j]])
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--temperature", default="0,0.8")
    ap.add_argument("--per-kind", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=2, help="sampled continuations per prompt")
    args = ap.parse_args()
    with Engine(Settings.load(pair=args.pair, n_ctx=1024)) as eng:
        prompts = fit_prompts(select(load_prompts(None), args.per_kind), eng.target, 128)
        print("| T | kind | " + " | ".join(f"match {b}+" for b in LOOKUP_BUCKETS) + " |")
        print("|---|---|" + "--:|" * len(LOOKUP_BUCKETS))
        for temp in (float(t) for t in args.temperature.split(",")):
            by_kind: dict[str, list[tuple[int, float]]] = {}
            for p in prompts:
                for seed in range(1 if temp <= 0 else args.seeds):
                    found = kept_first(eng, list(p.tokens), args.gen_tokens, temp, seed)
                    by_kind.setdefault(p.kind, []).extend(found)
                    by_kind.setdefault("all", []).extend(found)
            for kind, found in sorted(by_kind.items()):
                cells = []
                for b in range(len(LOOKUP_BUCKETS)):
                    ps = [p for bb, p in found if bb == b]
                    cells.append(f"{np.mean(ps):.2f} ({len(ps)})" if ps else "-")
                print(f"| {temp:g} | {kind} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
