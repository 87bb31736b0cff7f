"""Replay the adaptive-K tuner over real greedy acceptance traces, against every fixed K.

A real benchmark of `auto` against one K is noisy in two ways: the machine's timing drifts, and at
temperature 0 each K produces a slightly different text (llama.cpp is not batch-invariant, a flipped
near-tie changes the continuation), so part of a 4-prompt comparison is a lottery over texts. This
script takes both out, to judge the tuner itself:

1. For each bundled bench prompt, generate the target's greedy continuation (speculatively at K=3,
   as the benchmark would) and teacher-force the draft over it: m[t] = 1 when the draft's argmax
   equals the target's token t. At temperature 0 a round that starts at t with K drafted tokens
   accepts exactly min(run of ones from t, K) of them, so any K policy can be replayed exactly.
2. Measure this machine's costs once: the target's verify time for batches of 1..K_MAX+1 tokens and
   the draft's per-token time at the prompt's depth (minimum of a few tries).
3. Replay `AutoK` (the real class, fed the same observations as in the engine) and `FixedK` for
   K=1..8 over the bench's order of requests (a warm-up request, then runs x prompts on one tuner),
   with seeded timing noise (4% jitter, 5% of rounds stalled by 30%).

    .venv/bin/python scripts/replay_autok.py                 # models/default, ~10 min on 2 cores
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.bench.prompts import fit_prompts, load_prompts, select  # noqa: E402
from localspec.draft_len import AutoK, FixedK  # noqa: E402
from localspec.engine import Engine  # noqa: E402
from localspec.settings import DEFAULT_PAIR, Settings  # noqa: E402

K_MAX = 8
OVERHEAD_S = 0.0013  # a round's time outside draft and verify (0.4-1.3 ms measured in the engine)


def match_traces(eng: Engine, prompts, n: int) -> dict[str, list[int]]:  # noqa: ANN001
    out = {}
    for p in prompts:
        eng.clear_cache()
        resp = eng.generate(list(p.tokens), max_tokens=n, temperature=0, stop=(), spec=True, draft_max="3")
        toks = list(resp.tokens)
        eng.clear_cache()  # empties both contexts: the draft is teacher-forced below from position 0
        rows = eng.draft_ctx.eval(list(p.tokens) + toks, 0, n_logits=len(toks) + 1)
        guess = rows.argmax(axis=1)  # row j predicts generated token j
        out[p.id] = [int(guess[j] == toks[j]) for j in range(len(toks))]
    eng.clear_cache()
    return out


def costs(eng: Engine, prompt: list[int], tries: int = 3) -> tuple[dict[int, float], float]:
    """Verify seconds per batch size and draft seconds per token, at the prompt's depth."""

    def floor(ctx, n: int) -> float:  # noqa: ANN001 - backend.Context
        best = float("inf")
        for _ in range(tries):
            t0 = time.perf_counter()
            ctx.eval(prompt[-1:] * n, len(prompt), n_logits=n)
            best = min(best, time.perf_counter() - t0)
            ctx.truncate(len(prompt))
        return best

    eng.clear_cache()
    for ctx in (eng.target_ctx, eng.draft_ctx):
        ctx.eval(prompt, 0)
    verify = {n: floor(eng.target_ctx, n) for n in range(1, K_MAX + 2)}
    draft = floor(eng.draft_ctx, 1)
    eng.clear_cache()
    return verify, draft


def _noisy(x: float, rng: random.Random) -> float:
    return x * (1 + abs(rng.gauss(0, 0.04)) + (0.3 if rng.random() < 0.05 else 0.0))


def replay_request(ctl, m: list[int], n: int, verify: dict, draft: float, rng: random.Random):  # noqa: ANN001
    """One request of n tokens under controller ctl; returns (tokens, seconds)."""
    ctl.begin()
    t, secs = 0, 0.0
    while t < n:
        k = min(ctl.choose(), K_MAX, n - t - 1)
        run = 0
        while t + run < len(m) and run < k and m[t + run]:
            run += 1
        v = _noisy(verify[k + 1], rng)
        d = _noisy(draft * k, rng) if k else 0.0
        r = v + d + OVERHEAD_S
        ctl.observe(k=k, n_drafted=k, n_accepted=run, n_emitted=run + 1, draft_s=d, verify_s=v, round_s=r)
        t, secs = t + run + 1, secs + r
    return t, secs


def replay_bench(make, traces, ids, n, runs, verify, draft, seed) -> float:  # noqa: ANN001
    rng = random.Random(seed)
    ctl = make()
    replay_request(ctl, traces[ids[0]], n, verify, draft, rng)  # the warm-up, not counted
    toks = secs = 0.0
    for _ in range(runs):
        for i in ids:
            a, b = replay_request(ctl, traces[i], n, verify, draft, rng)
            toks, secs = toks + a, secs + b
    return toks / secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=DEFAULT_PAIR)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--sets", type=int, default=4, help="random 4-prompt sets besides the bench's own")
    args = ap.parse_args()
    with Engine(Settings.load(pair=args.pair)) as eng:
        prompts = fit_prompts(select(load_prompts(None), None), eng.target, args.prompt_tokens)
        print(f"tracing {len(prompts)} prompts ...", file=sys.stderr)
        traces = match_traces(eng, prompts, args.gen_tokens + K_MAX)
        verify, draft = costs(eng, list(prompts[0].tokens))
    print("verify ms by batch size: " + ", ".join(f"{n}: {v * 1e3:.0f}" for n, v in verify.items()))
    print(f"draft ms per token: {draft * 1e3:.1f}")
    rng = random.Random(1)
    ids = list(traces)
    sets = {"bench (1 per kind)": [p.id for p in select(prompts, 1)]}
    for j in range(args.sets):
        rng.shuffle(ids)
        sets[f"random set {j + 1}"] = ids[:4]
    sets["all prompts"] = list(traces)
    n, runs = args.gen_tokens, args.runs
    print("\n| prompts | best fixed K | tok/s | auto tok/s (mean, min over seeds) | auto / best |")
    print("|---|---|---|---|---|")
    for name, chosen in sets.items():
        fixed = {
            k: np.mean(
                [
                    replay_bench(functools.partial(FixedK, k), traces, chosen, n, runs, verify, draft, s)
                    for s in range(3)
                ]
            )
            for k in range(1, K_MAX + 1)
        }
        best = max(fixed, key=fixed.get)
        auto = [replay_bench(AutoK, traces, chosen, n, runs, verify, draft, s) for s in range(args.seeds)]
        print(
            f"| {name} | K={best} | {fixed[best]:.2f} | {np.mean(auto):.2f}, {min(auto):.2f} "
            f"| {np.mean(auto) / fixed[best]:.3f} (min {min(auto) / fixed[best]:.3f}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
