"""A cold tuner's rounds, one line each, on the bench prompts of one kind: K, who drafted, the draft's
milliseconds (a catch-up shows as hundreds), and for every drafting round, what the tuner saw and
priced. How the json kind's 0.88x (docs/benchmarks.md) was found.

    .venv/bin/python research/trace_rounds.py --pair models/default --kind json --prompts 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from localspec.bench import prompts as bench_prompts
from localspec.config import Settings
from localspec.draft_len import auto
from localspec.engine import Engine

_plan = auto.AutoK.plan


def traced_plan(self: auto.AutoK, facts):  # noqa: ANN001, ANN201 - AutoK.plan, printing its model rounds
    p = _plan(self, facts)
    if p.k:  # a drafting round
        price = self.pricing(facts)
        offers = [(o.source, len(o.tokens), o.confidence) for o in facts.offers]
        print(
            f"   plan {p} | forced {facts.n_forced}, offers {offers}, draft behind {facts.behind}"
            f" | priced {price.expected_rate(p.k, p.lead):.1f} tok/s against plain"
            f" {price.expected_rate(0, None):.1f}, model tokens {price.model_tokens(p.k, p.lead)}"
        )
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", type=Path, default=Path("models/default"))
    ap.add_argument("--kind", default="json")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=64)
    args = ap.parse_args()
    auto.AutoK.plan = traced_plan
    chosen = [p for p in bench_prompts.load_prompts() if p.kind == args.kind][: args.prompts]
    s = Settings.load(pair=args.pair).replace(tuner_cache=False, draft_max="auto", trace=True)
    with Engine(s) as eng:
        for fp in bench_prompts.fit_prompts(chosen, eng.target, 128):
            eng.clear_cache()
            t0 = time.perf_counter()
            r = eng.generate(
                list(fp.tokens), max_tokens=args.gen_tokens, temperature=0.0, stop=(), json_schema=fp.schema
            )
            st = r.stats
            print(
                f"{fp.id}: {(time.perf_counter() - t0) * 1e3:.0f} ms, prefill {st.prefill_ms:.0f}, draft {st.draft_ms:.0f}"
            )
            for i, rec in enumerate(st.rounds_trace or []):
                free = {
                    k: v
                    for k, v in rec.items()
                    if k not in ("k", "drafted", "accepted", "draft_ms", "verify_ms")
                }
                print(
                    f"  round {i}: K {rec['k']}, drafted {rec['drafted']} ({free}), kept {rec['accepted']},"
                    f" draft {rec['draft_ms']:.0f} ms, verify {rec['verify_ms']:.0f} ms"
                )


if __name__ == "__main__":
    main()
