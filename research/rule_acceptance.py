"""Per-position acceptance of the three verification rules (pq, coupled, match), teacher-forced over
the bench prompts: a count of accept decisions, so it does not depend on how loaded the machine is.

The target samples a continuation of each prompt (its own text is what speculation meets); the draft
scores the same positions in one batch. At each position, with p and q the processed distributions:
  pq       accepts x ~ q with probability min(1, p(x)/q(x)): in expectation sum_v min(p, q) = 1 - TV
  match    drafts argmax q and accepts iff a sample of p equals it: p(argmax q)
  coupled  accepts iff argmax(log p + g) == argmax(log q + g): counted over --noise-seeds keyed noises
(pq and match are exact expectations; coupled is a Monte Carlo count.) Also printed: the paired
difference coupled - pq with its standard error, and the expected tokens per verify round at
K = --k, 1 + sum_j prod_{i<j} a(t+i) averaged over start positions t (acceptance events at different
positions are independent given the text, for coupled too: each position has its own noise).

    .venv/bin/python research/rule_acceptance.py                          # models/default, ~5-10 min
    .venv/bin/python research/rule_acceptance.py --per-kind 1 --tokens 24 # a quick look
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from localspec.bench.prompts import fit_prompts, load_prompts, select
from localspec.config.pair_toml import read_pair
from localspec.decode.noise import KeyedGumbel
from localspec.decode.sampling import Dist, SamplingParams, process
from localspec.llama import Context, Model
from localspec.paths import default_pair

RULES = ("pq", "coupled", "match")


def position_rates(p: Dist, q: Dist, noises: list[KeyedGumbel], pos: int) -> dict[str, float]:
    ids = np.union1d(p.ids, q.ids)
    pd, qd = np.zeros(len(ids)), np.zeros(len(ids))
    pd[np.searchsorted(ids, p.ids)], qd[np.searchsorted(ids, q.ids)] = p.probs, q.probs
    hits = sum(n.sample(p, pos) == n.sample(q, pos) for n in noises)
    return {
        "pq": float(np.minimum(pd, qd).sum()),
        "coupled": hits / len(noises),
        "match": p.prob(int(q.ids[np.argmax(q.probs)])),
        "tv": 0.5 * float(np.abs(pd - qd).sum()),
    }


def tokens_per_round(a: np.ndarray, k: int) -> float:
    """Mean over start positions of the expected tokens a K-draft round emits."""
    starts = range(max(1, len(a) - k + 1))
    return float(np.mean([1.0 + np.cumprod(a[t : t + k]).sum() for t in starts]))


def continuation(ctx: Context, prompt: list[int], sp: SamplingParams, n: int, seed: int):
    """The target's sampled continuation and its logits row at each generated position."""
    rng = np.random.default_rng(seed)
    ctx.reset()
    row = ctx.eval(prompt, 0, 1)[0]
    out, rows = [], []
    for _ in range(n):
        tok = process(row, sp).sample(rng)
        out.append(tok)
        rows.append(row.copy())
        if ctx.is_eog(tok):
            break
        row = ctx.eval([tok], ctx.n_past, 1)[0]
    return out, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=Path, default=default_pair() / "pair.toml")
    ap.add_argument("--temperatures", default="0.5,0.8,1.0")
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--min-p", type=float, default=0.05)
    ap.add_argument("--per-kind", type=int, default=None, help="first N bench prompts of each kind")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=48, help="sampled positions per prompt")
    ap.add_argument("--noise-seeds", type=int, default=256, help="keyed noises per position (coupled)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=4, help="draft length for the tokens-per-round figure")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (1 on a crowded machine)")
    ap.add_argument("--json", type=Path, default=None, help="write the per-temperature means here")
    args = ap.parse_args()

    pair = read_pair(args.pair)
    temps = [float(t) for t in args.temperatures.split(",")]
    noises = [KeyedGumbel(args.seed * 100_003 + i) for i in range(args.noise_seeds)]
    results = []
    t0 = time.perf_counter()
    n_ctx = args.prompt_tokens + args.tokens + 8
    with Model(pair.target) as tm, Model(pair.draft) as dm:
        ctx_args = dict(n_ctx=n_ctx, n_threads=args.threads)
        with Context(tm, **ctx_args) as tc, Context(dm, **ctx_args) as dc:
            prompts = fit_prompts(select(load_prompts(), args.per_kind), tm, args.prompt_tokens)
            for temp in temps:
                sp = SamplingParams(temperature=temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
                per_pos: list[dict[str, float]] = []
                per_round: dict[str, list[float]] = {r: [] for r in RULES}
                for j, fp in enumerate(prompts):
                    prompt = list(fp.tokens)
                    cont, trows = continuation(tc, prompt, sp, args.tokens, args.seed + j)
                    dc.reset()  # the draft's rows predicting each continuation token, in one batch
                    drows = dc.eval(prompt + cont[:-1], 0, len(cont))
                    here = [
                        position_rates(process(tr, sp), process(dr, sp), noises, len(prompt) + i)
                        for i, (tr, dr) in enumerate(zip(trows, drows))
                    ]
                    per_pos += here
                    for r in RULES:
                        per_round[r].append(tokens_per_round(np.array([x[r] for x in here]), args.k))
                mean = {k: float(np.mean([r[k] for r in per_pos])) for k in (*RULES, "tv")}
                bound = float(np.mean([(1 - r["tv"]) / (1 + r["tv"]) for r in per_pos]))
                diff = np.array([r["coupled"] - r["pq"] for r in per_pos])
                se = float(diff.std() / np.sqrt(len(diff)))
                rounds = {r: float(np.mean(v)) for r, v in per_round.items()}
                results.append(
                    {
                        "temperature": temp,
                        "positions": len(per_pos),
                        **mean,
                        "coupled_bound": bound,
                        "coupled_minus_pq_se": se,
                        f"tokens_per_round_k{args.k}": rounds,
                    }
                )
                print(
                    f"T={temp:g}: {len(per_pos)} positions over {len(prompts)} prompts | "
                    f"pq {mean['pq']:.3f}  coupled {mean['coupled']:.3f} (bound {bound:.3f})  "
                    f"match {mean['match']:.3f} | coupled/pq {mean['coupled'] / mean['pq']:.3f} "
                    f"(coupled-pq {mean['coupled'] - mean['pq']:+.3f} ±{se:.3f}) | tokens/round at "
                    f"K={args.k}: " + " ".join(f"{r} {v:.2f}" for r, v in rounds.items()) + " "
                    f"[{time.perf_counter() - t0:.0f} s]",
                    flush=True,
                )
    if args.json:
        settings = {
            k: v if isinstance(v, (int, float, type(None))) else str(v) for k, v in vars(args).items()
        }
        args.json.write_text(json.dumps({"settings": settings, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
