"""Every decision the K controllers make, over seeded synthetic rounds, one JSON line each: a change
to the tuner's code that should not change its behaviour (issue #47) shows as a difference here.

The rounds drive the controllers exactly as the engine's round does - the tuner pool's shared costs,
one fork per request and its evidence back at the end, requests alone and several in one batch -
with what a round can bring: the grammar's forced runs, lookup proposals of every match length, a
draft model far behind (its catch-up priced), few tokens left, snapshot targets (replays), unused
lookup proposals, and timings from a saw-toothed CPU curve or a flat GPU one with seeded noise.

    .venv/bin/python research/tuner_decisions.py --out after.txt
    cmp before.txt after.txt   # before.txt: the same script on the checkout before the change

It runs on a checkout from before the controllers took `plan(facts)` and `observe(outcome)` too
(the `offer_*` / `choose` / `observe(**kw)` protocol), so both sides replay the same rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from localspec.draft_len import controller
from localspec.draft_len.auto import AutoK
from localspec.draft_len.costs import Costs
from localspec.draft_len.evidence import LOOKUP_PRIORS, LOOKUP_PRIORS_SAMPLED
from localspec.draft_len.fixed import FixedK

NEW_API = hasattr(controller, "Facts")
OFFERS = hasattr(controller, "Offer")  # Facts carry offers by source (issue 59), not lookup fields
if NEW_API:
    from localspec.draft_len.batch import plan_batch
    from localspec.draft_len.controller import Facts, Outcome
else:
    from localspec.draft_len.batch import choose_batch

CURVES = {  # verify seconds by batch size, draft seconds per token
    "cpu": (
        {1: 0.057, 2: 0.079, 3: 0.124, 4: 0.131, 5: 0.190, 6: 0.205, 7: 0.260, 8: 0.299, 9: 0.350},
        0.0092,
    ),
    "gpu": ({n: 0.020 + 0.0004 * n for n in range(1, 40)}, 0.002),
}


def verify_s(curve: dict, n: int, rng: random.Random) -> float:
    base = curve[min(n, max(curve))] * (1 + 0.05 * max(n - max(curve), 0))
    return base * (1 + abs(rng.gauss(0, 0.04)) + (0.3 if rng.random() < 0.05 else 0.0))


def facts_of(rng: random.Random, lookup: bool, left: int) -> dict:
    forced = rng.choice((0, 0, 0, 1, 2, 5)) if rng.random() < 0.3 else 0
    n_lookup = match_len = 0
    if lookup and rng.random() < 0.5:  # a match (its proposal may disagree with the forced run: none left)
        match_len = rng.choice((0, 2, 3, 5, 9, 20))
        n_lookup = rng.randint(0, 16) if match_len else 0
    behind = rng.choice((0, 1, 2, 40, 130)) if rng.random() < 0.2 else 1
    return {"n_forced": forced, "n_lookup": n_lookup, "match_len": match_len, "behind": behind, "left": left}


def plan(ctls: list, facts: list[dict], lookup: bool) -> list[tuple[int, bool, int]]:
    """(K, lookup first, forced tokens taken) per controller, as the round asks for them."""
    if OFFERS:
        plans = plan_batch(ctls, [_facts(f) for f in facts])
        return [(p.k, p.lead is not None, p.forced_take) for p in plans]
    if NEW_API:
        return [(p.k, p.lookup_first, p.forced_take) for p in plan_batch(ctls, [Facts(**f) for f in facts])]
    for c, f in zip(ctls, facts):
        c.offer_forced(f["n_forced"])
        c.offer_lag(f["behind"], f["left"])
        if lookup:  # a sequence with a lookup offers what it found, if anything, every round
            c.offer(f["n_lookup"], f["match_len"])
    ks = choose_batch(ctls)
    return [(k, c.lookup_first, c.forced_take) for k, c in zip(ks, ctls)]


def _facts(f: dict):  # noqa: ANN202
    """The lookup's fields as the lookup's offer (none where it proposes nothing)."""
    n, m = f["n_lookup"], f["match_len"]
    offers = (controller.Offer("lookup", (0,) * n, m),) if n and m else ()
    return Facts(f["n_forced"], offers, f["behind"], f["left"])


def _outcome(o: dict):  # noqa: ANN202
    n, checked, kept, m = o.pop("n_lookup"), o.pop("offer_checked"), o.pop("offer_kept"), o.pop("match_len")
    judged = (controller.Judged("lookup", m, checked, kept),) if checked else ()
    return Outcome(**o, n_offered=n, lead="lookup" if n else "", lead_confidence=m if n else 0, judged=judged)


def observe(ctl, outcome: dict) -> None:  # noqa: ANN001
    if OFFERS:
        ctl.observe(_outcome(outcome))
        return
    if NEW_API:
        ctl.observe(Outcome(**outcome))
        return
    checked, kept = outcome.pop("offer_checked"), outcome.pop("offer_kept")
    outcome.pop("match_len")
    ctl.observe(**outcome)
    if checked:
        ctl.observe_unused_offer(checked, kept)


def one_round(ctls, facts, lookup, curve, p_acc, rng, log) -> list[int]:  # noqa: ANN001
    """One round of several sequences; returns the tokens each emitted."""
    plans = plan(ctls, facts, lookup)
    n_batch = sum(f["n_forced"] + 1 for f in facts) + sum(k for k, _, _ in plans)
    v = verify_s(curve[0], n_batch, rng)
    out = []
    for c, f, (k, lf, take) in zip(ctls, facts, plans):
        log.append([k, lf, take])
        n_look = min(k, f["n_lookup"]) if lf else 0
        acc = 0
        while acc < k and rng.random() < p_acc:
            acc += 1
        d = curve[1] * (k - n_look) * (1 + abs(rng.gauss(0, 0.04)))
        catch = f["behind"] if f["behind"] > 2 and k > n_look else 0
        offered = f["n_lookup"] and not n_look
        checked = min(f["n_lookup"], acc + 1) if offered else 0
        observe(c, {
            "k": k, "n_drafted": k, "n_accepted": acc, "n_emitted": take + acc + 1, "draft_s": d,
            "verify_s": v, "round_s": v + d + 0.0013, "batch_tokens": n_batch, "n_lookup": n_look,
            "n_forced": take, "replay": rng.random() < 0.1, "catch_tokens": catch,
            "catch_s": 0.0004 * catch, "offer_checked": checked,
            "offer_kept": rng.randint(0, checked) if checked else 0, "match_len": f["match_len"],
        })  # fmt: skip
        out.append(take + acc + 1)
    return out


def session(seed: int, log: list) -> None:
    rng = random.Random(seed)
    curve = CURVES[rng.choice(sorted(CURVES))]
    has_model, sampled, lookup = rng.random() < 0.8, rng.random() < 0.3, rng.random() < 0.6
    replay = rng.random() < 0.2
    costs = Costs.unmeasured(1, 8, replay=replay)
    if rng.random() < 0.5:  # calibrated at load, or remembered
        costs.prime({n: t for n, t in curve[0].items() if n <= 5}, curve[1])
    tuner = AutoK(k_min=1, k_max=8, has_model=has_model, costs=costs,
                  prior_lookup=LOOKUP_PRIORS_SAMPLED if sampled else LOOKUP_PRIORS)  # fmt: skip
    if rng.random() < 0.3:
        tuner.prime(acc=[3.0, 2.0, 1.0], tried=[4.0, 3.0, 2.0])
    for _request in range(4):
        n = rng.choice((1, 1, 2, 3))
        ctls = [tuner.fork() for _ in range(n)] + (
            [FixedK(3, has_model=has_model)] if rng.random() < 0.2 else []
        )
        left = [rng.choice((12, 60, 200)) for _ in ctls]
        p_acc = rng.choice((0.1, 0.5, 0.8, 0.95))
        while any(x > 0 for x in left):
            live = [i for i, x in enumerate(left) if x > 0]
            facts = [facts_of(rng, lookup, left[i]) for i in live]
            made = one_round([ctls[i] for i in live], facts, lookup, curve, p_acc, rng, log)
            for i, m in zip(live, made):
                left[i] -= m
        for c in ctls:
            if c.costs is not None:
                tuner.absorb(c)
        log.append(["fallbacks", [c.fallbacks for c in ctls], [c.started_plain for c in ctls]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with args.out.open("w") as f:
        for seed in range(args.sessions):
            log: list = []
            session(seed, log)
            f.write(json.dumps([seed, log]) + "\n")
    print(f"{args.sessions} sessions written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
