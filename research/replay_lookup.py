"""Replay lookup drafting over real greedy traces of the copy prompts, against an oracle.

For each copy-kind bench prompt: generate the target's greedy continuation, teacher-force the draft
over it (d[t] = 1 when the draft's argmax is the target's token t), and at every position t ask the
lookup what it proposes from prompt + output[:t] and how many of those tokens the target keeps. At
temperature 0 every policy - which source, how many tokens - can then be replayed exactly: a round
at t with l lookup tokens and m draft-model tokens accepts the lookup's run, then (if all l were
kept) the draft's run from t + l.

Policies replayed with the machine's measured costs, or another machine's (`--curve`, the curves
of replay_autok.py): plain; the real `AutoK` with the draft model alone, with the lookup alone, and
chained; and the oracle: the fastest schedule of rounds a perfect chooser could pick with the same
drafters and costs (dynamic programming over positions). ours / oracle is the machine-independent
figure of issue #17. The last lines set it beside the best fixed plan picked in hindsight per text,
and set chained / draft model alone (ours) beside the same ratio of the two oracles: what the
lookup can add to the draft model at all with these costs.

    .venv/bin/python research/replay_lookup.py --traces /tmp/lookup_traces.json   # ~3 min on 2 cores
    .venv/bin/python research/replay_lookup.py --traces /tmp/lookup_traces.json --curve gpu
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_autok import CURVES, OVERHEAD_S, _noisy, costs, greedy_matches, prime_as_loaded

from localspec.bench.prompts import fit_prompts, load_prompts
from localspec.config.settings import Settings
from localspec.decode.lookup import Lookup
from localspec.draft_len.auto import AutoK
from localspec.draft_len.controller import Facts, Judged, Offer, Outcome
from localspec.engine import Engine
from localspec.paths import default_pair

K_MAX = 8


def trace(eng: Engine, prompt: list[int], n: int) -> dict:
    """The greedy continuation's draft matches and, per position, the lookup's proposal facts."""
    toks, draft = greedy_matches(eng, prompt, n)
    lk = Lookup(prompt)
    avail, run, length = [], [], []
    for t in range(len(toks)):
        proposal, match_len = lk.propose(K_MAX)
        r = 0
        while r < len(proposal) and t + r < len(toks) and proposal[r] == toks[t + r]:
            r += 1
        avail.append(len(proposal))
        run.append(r)
        length.append(match_len)
        lk.extend([toks[t]])
    return {"draft": draft, "avail": avail, "run": run, "len": length}


def _draft_run(tr: dict, t: int, m: int) -> int:
    r = 0
    while r < m and t + r < len(tr["draft"]) and tr["draft"][t + r]:
        r += 1
    return r


def outcome(tr: dict, t: int, k: int, lookup_first: bool) -> tuple[int, int]:
    """(accepted drafts, lookup tokens used) of a round at t with k drafts."""
    if not lookup_first:
        return _draft_run(tr, t, k), 0
    n_look = min(k, tr["avail"][t])
    acc = min(tr["run"][t], n_look)
    if acc == n_look and k > n_look:
        acc += _draft_run(tr, t + n_look, k - n_look)
    return acc, n_look


def round_cost(k: int, n_look: int, verify: dict, draft: float) -> float:
    return verify[k + 1] + draft * (k - n_look) + OVERHEAD_S


def oracle(tr: dict, n: int, verify: dict, draft: float, sources: str) -> float:
    """Tokens per second of the fastest schedule: V(t) = min over rounds of cost + V(t + emitted)."""
    best = [0.0] * (n + 1)
    for t in range(n - 1, -1, -1):
        options = [(0, False)]
        if sources in ("model", "both"):
            options += [(k, False) for k in range(1, K_MAX + 1)]
        if sources in ("lookup", "both") and tr["avail"][t]:
            top = K_MAX if sources == "both" else min(tr["avail"][t], K_MAX)
            options += [(k, True) for k in range(1, top + 1)]
        v = float("inf")
        for k, lf in options:
            acc, n_look = outcome(tr, t, min(k, n - t - 1), lf)
            step = min(acc + 1, n - t)
            v = min(v, round_cost(min(k, n - t - 1), n_look, verify, draft) + best[t + step])
        best[t] = v
    return n / best[0]


def fixed_plan(tr: dict, n: int, verify: dict, draft: float, k: int, min_match: int | None) -> float:
    """Tokens per second of one fixed plan: K drafts every round, the lookup's first when its match
    has at least min_match tokens (None: the draft model alone)."""
    t, secs = 0, 0.0
    while t < n:
        kk = min(k, n - t - 1)
        lf = min_match is not None and tr["avail"][t] > 0 and tr["len"][t] >= min_match
        acc, n_look = outcome(tr, t, kk, lf)
        t, secs = t + acc + 1, secs + round_cost(kk, n_look, verify, draft)
    return t / secs


def best_fixed(tr: dict, n: int, verify: dict, draft: float) -> float:
    """The best fixed plan for this text, picked in hindsight: a bound no fixed setting beats."""
    mins = (None, 2, 3, 4, 8, 16)
    return max(fixed_plan(tr, n, verify, draft, k, m) for k in range(K_MAX + 1) for m in mins)


def replay(tr: dict, n: int, make, verify: dict, draft: float, rng: random.Random) -> float:  # noqa: ANN001
    """The real AutoK over one request (fed what the engine feeds it); tokens per second."""
    ctl, lookup = make(rng)
    ctl = ctl.fork()  # a request's own controller, as the engine's pool gives it
    t, secs = 0, 0.0
    while t < n:
        n_av, m = tr["avail"][t], tr["len"][t]
        facts = Facts(offers=(Offer("lookup", [0] * n_av, m),)) if lookup and n_av and m else Facts()
        plan = ctl.plan(facts)
        k, lf = min(plan.k, K_MAX, n - t - 1), plan.lead is not None
        if not ctl.has_model:
            k = min(k, tr["avail"][t])
        acc, n_look = outcome(tr, t, k, lf)
        v = _noisy(verify[k + 1], rng)
        d = _noisy(draft * (k - n_look), rng) if k > n_look else 0.0
        r = v + d + OVERHEAD_S
        checked = kept = 0
        if lookup and not n_look and tr["avail"][t]:  # as the engine does: an unused offer is still evidence
            checked = min(tr["avail"][t], acc + 1)
            kept = min(tr["run"][t], checked)
        ctl.observe(
            Outcome(k=k, n_drafted=k, n_accepted=acc, n_emitted=acc + 1, draft_s=d, verify_s=v, round_s=r,
                    n_offered=n_look, lead="lookup" if n_look else "", lead_confidence=m,
                    judged=(Judged("lookup", m, checked, kept),) if checked else ())
        )  # fmt: skip
        t, secs = t + acc + 1, secs + r
    return t / secs


def plain_rate(n: int, verify: dict, rng: random.Random) -> float:
    """Plain decoding's tokens per second under the same timing noise as the replays (a noiseless
    plain would flatter plain by the noise's mean, ~5%)."""
    return n / sum(_noisy(verify[1], rng) + OVERHEAD_S for _ in range(n))


def primed(has_model: bool, lookup: bool, verify: dict, draft: float):  # noqa: ANN201
    """A tuner as a fresh engine makes it: primed with costs calibrated at load (with noise)."""

    def make(rng: random.Random) -> tuple[AutoK, bool]:
        return prime_as_loaded(AutoK(k_max=K_MAX, has_model=has_model), verify, draft, rng), lookup

    return make


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument(
        "--kind", default="copy", help="bench prompt kinds to trace, comma-separated (default: copy)"
    )
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--traces", type=Path, help="read traces and costs from this JSON file, or write it")
    ap.add_argument("--curve", choices=sorted(CURVES), help="replay with another machine's costs")
    args = ap.parse_args()
    if args.traces and args.traces.exists():
        saved = json.loads(args.traces.read_text())
        traces, verify, draft = (
            saved["traces"],
            {int(k): v for k, v in saved["verify"].items()},
            saved["draft"],
        )
    else:
        with Engine(Settings.load(pair=args.pair, tuner_cache=False, n_ctx=1024)) as eng:
            chosen = [p for p in load_prompts(None) if p.kind in args.kind.split(",")]
            prompts = fit_prompts(chosen, eng.target, args.prompt_tokens)
            print(f"tracing {len(prompts)} prompts ...", file=sys.stderr)
            traces = {p.id: trace(eng, list(p.tokens), args.gen_tokens + K_MAX) for p in prompts}
            verify, draft = eng.on_engine_thread(lambda: costs(eng, list(prompts[0].tokens)))
        if args.traces:
            args.traces.write_text(json.dumps({"traces": traces, "verify": verify, "draft": draft}))
    if args.curve:
        verify, draft = CURVES[args.curve]
    verify = {n: t for n, t in verify.items() if n <= K_MAX + 1}
    print("verify ms by batch size: " + ", ".join(f"{n}: {v * 1e3:.0f}" for n, v in verify.items()))
    print(f"draft ms per token: {draft * 1e3:.1f}\n")
    n = args.gen_tokens
    policies = {
        "draft model (auto)": primed(True, False, verify, draft),
        "lookup only (auto)": primed(False, True, verify, draft),
        "chained (auto)": primed(True, True, verify, draft),
    }
    oracle_of = {"draft model (auto)": "model", "lookup only (auto)": "lookup", "chained (auto)": "both"}
    print("| prompt | plain | policy | tok/s | × plain | oracle tok/s | / oracle |")
    print("|---|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {name: [] for name in policies}
    hindsight: list[tuple[float, float]] = []  # (best fixed plan / oracle, chained / best fixed plan)
    gains: list[tuple[float, float]] = []  # (chained / draft model alone: ours, the oracles')
    for pid, tr in traces.items():
        plain = np.mean([plain_rate(n, verify, random.Random(s)) for s in range(args.seeds)])
        got_of, best_of = {}, {}
        for name, make in policies.items():
            got = np.mean([replay(tr, n, make, verify, draft, random.Random(s)) for s in range(args.seeds)])
            best = oracle(tr, n, verify, draft, oracle_of[name])
            got_of[oracle_of[name]], best_of[oracle_of[name]] = got, best
            ratios[name].append(got / best)
            if oracle_of[name] == "both":
                fixed_best = best_fixed(tr, n, verify, draft)
                hindsight.append((fixed_best / best, got / fixed_best))
            print(
                f"| {pid} | {plain:.1f} | {name} | {got:.1f} | {got / plain:.2f} | {best:.1f} | {got / best:.2f} |"
            )
        gains.append((got_of["both"] / got_of["model"], best_of["both"] / best_of["model"]))
    print()
    for name, r in ratios.items():
        print(f"{name}: mean {np.mean(r):.2f} of the oracle (min {min(r):.2f})")
    of_oracle, ours = zip(*hindsight)
    print(
        f"best fixed plan in hindsight (K, lookup first from a match length): mean {np.mean(of_oracle):.2f} of "
        f"the oracle; chained (auto) reaches {np.mean(ours):.2f} of it (min {min(ours):.2f})"
    )
    ours_gain, oracle_gain = zip(*gains)
    print(
        f"chained / draft model alone: ours {np.mean(ours_gain):.2f}, the oracles' {np.mean(oracle_gain):.2f} "
        f"(per prompt {', '.join(f'{g:.2f}' for g in oracle_gain)}): what the lookup can add to the draft "
        "model with these costs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
