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
4. `--fresh`: every request in a new process, as one-shot `localspec run`s are. The tuner starts
   from costs calibrated at load (the curve with one-shot noise) and, with `--memory`, from what the
   previous process remembered. Compared with the best of plain, K=1 and K=3 (issue #15's bar).

Other machines' cost curves replace the measured one with `--curve xeon|epyc|gpu` (acceptance is a
property of the pair, not of the machine); `--traces FILE` keeps the traces, so later replays need
no model. `--curve-json FILE:LABEL` takes a curve research/bench_rpc.py measured (its `--json` output;
LABEL is a row of its table, e.g. "RPC split, 20 ms RTT"): a target split over rpc-servers.

    .venv/bin/python research/replay_autok.py                 # models/default, ~10 min on 2 cores
    .venv/bin/python research/replay_autok.py --traces t.json --fresh --memory --curve gpu
    .venv/bin/python research/replay_autok.py --traces t.json --fresh --curve xeon --per-prompt
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from localspec.bench.prompts import fit_prompts, load_prompts, select
from localspec.config.settings import Settings
from localspec.draft_len.auto import AutoK
from localspec.draft_len.calibrate import BASE_SIZES, FLAT
from localspec.draft_len.controller import Facts, Outcome
from localspec.draft_len.fixed import FixedK
from localspec.engine import Engine
from localspec.paths import default_pair

K_MAX = 8
OVERHEAD_S = 0.0013  # a round's time outside draft and verify (0.4-1.3 ms measured in the engine)


def greedy_matches(eng: Engine, prompt: list[int], n: int) -> tuple[list[int], list[int]]:
    """The target's greedy continuation of n tokens, and per token whether the draft, teacher-forced
    over it, guesses it (1) or not (0)."""
    eng.clear_cache()
    resp = eng.generate(prompt, max_tokens=n, temperature=0, stop=(), spec=True, draft_max="3", lookup="off")
    toks = list(resp.tokens)
    eng.clear_cache()  # empties both contexts: the draft is teacher-forced below from position 0
    # row j predicts generated token j; on the engine thread, where every decode of eng runs
    guess = eng.on_engine_thread(
        lambda: eng.draft_ctx.eval(prompt + toks, 0, n_logits=len(toks) + 1).argmax(1)
    )
    eng.clear_cache()
    return toks, [int(guess[j] == toks[j]) for j in range(len(toks))]


def match_traces(eng: Engine, prompts, n: int) -> dict[str, list[int]]:  # noqa: ANN001
    return {p.id: greedy_matches(eng, list(p.tokens), n)[1] for p in prompts}


def prime_as_loaded(ctl: AutoK, verify: dict, draft: float, rng: random.Random) -> AutoK:
    """Prime ctl as a fresh engine does from its calibration at load: the sizes calibrate.measure
    times, each timed once more, with the same noise as a round."""
    sizes = {b: t for b, t in verify.items() if b in BASE_SIZES or t <= FLAT * verify[1]}
    ctl.prime({b: _noisy(t, rng) for b, t in sizes.items()}, _noisy(draft, rng))
    return ctl


def costs(eng: Engine, prompt: list[int], tries: int = 3) -> tuple[dict[int, float], float]:
    """Verify seconds per batch size and draft seconds per token, at the prompt's depth (call it on
    the engine thread: `eng.on_engine_thread`)."""

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
    """One request of n tokens under controller ctl; returns (tokens, seconds). A tuner gives the
    request its own fork and takes its evidence back at the end, as the engine's pool does."""
    tuner, ctl = ctl, (ctl.fork() if ctl.costs is not None else ctl)
    t, secs = 0, 0.0
    while t < n:
        k = min(ctl.plan(Facts()).k, K_MAX, n - t - 1)
        run = 0
        while t + run < len(m) and run < k and m[t + run]:
            run += 1
        v = _noisy(verify[k + 1], rng)
        d = _noisy(draft * k, rng) if k else 0.0
        r = v + d + OVERHEAD_S
        ctl.observe(
            Outcome(k=k, n_drafted=k, n_accepted=run, n_emitted=run + 1, draft_s=d, verify_s=v, round_s=r)
        )
        t, secs = t + run + 1, secs + r
    if ctl is not tuner:
        tuner.absorb(ctl)
    return t, secs


def replay_bench(make, traces, ids, n, runs, verify, draft, seed, fresh=False) -> float:  # noqa: ANN001
    """make(previous tuner or None, rng) -> a tuner. With fresh, each request gets a new one."""
    rng = random.Random(seed)
    ctl = make(None, rng)
    replay_request(ctl, traces[ids[0]], n, verify, draft, rng)  # the warm-up, not counted
    toks = secs = 0.0
    for _ in range(runs):
        for i in ids:
            if fresh:
                ctl = make(ctl, rng)
            a, b = replay_request(ctl, traces[i], n, verify, draft, rng)
            toks, secs = toks + a, secs + b
    return toks / secs


def fixed(k: int):  # noqa: ANN201
    return lambda _prev, _rng: FixedK(k)


def auto(fresh: bool, memory: bool, verify: dict, draft: float):  # noqa: ANN201
    """The engine's tuner: long-lived (probing once), or per process primed as TunerPool does."""

    def make(prev, rng):  # noqa: ANN001, ANN202
        if not fresh:
            return prev or AutoK()
        ctl = AutoK()
        if memory and prev is not None:  # what the previous process saved, as tuner_memory does
            v, d, _ = prev.costs.snapshot()  # the replays price no catch-up
            ctl.prime(v, d, prev.evidence.acc.tolist(), prev.evidence.tried.tolist())
        else:
            prime_as_loaded(ctl, verify, draft, rng)
        return ctl

    return make


# other machines' costs for the stand-in pair (seconds): the Xeon of docs/benchmarks-full.md, the
# EPYC of issues #15/#17 (5, 6, 7, 9 tokens interpolated), and a GPU-like flat curve
CURVES = {
    "xeon": (
        {1: 0.129, 2: 0.136, 3: 0.216, 4: 0.202, 5: 0.279, 6: 0.286, 7: 0.365, 8: 0.387, 9: 0.474},
        0.018,
    ),
    "epyc": (
        {1: 0.057, 2: 0.079, 3: 0.124, 4: 0.131, 5: 0.190, 6: 0.205, 7: 0.260, 8: 0.299, 9: 0.350},
        0.0092,
    ),
    "gpu": ({n: 0.020 + 0.0004 * n for n in range(1, 10)}, 0.002),
}


def bench_rpc_curve(path: str, label: str) -> tuple[dict[int, float], float]:
    """One configuration of research/bench_rpc.py --json: its calibrated verify curve (seconds), carried
    on to K_MAX + 1 tokens along its mean slope where calibration stopped early (a CPU curve is
    saw-toothed: its last step alone may be nearly flat), and its draft cost."""
    got = json.loads(Path(path).read_text())[label]
    verify = {int(n): ms / 1e3 for n, ms in got["verify_ms"].items()}
    last = max(verify)
    slope = (verify[last] - verify[1]) / (last - 1) if last > 1 else verify[1]
    for n in range(last + 1, K_MAX + 2):
        verify[n] = verify[last] + slope * (n - last)
    return verify, got["draft_ms"] / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--sets", type=int, default=4, help="random 4-prompt sets besides the bench's own")
    ap.add_argument("--traces", type=Path, help="read traces and costs from this JSON file, or write it")
    ap.add_argument("--fresh", action="store_true", help="a new process (and tuner) for every request")
    ap.add_argument("--memory", action="store_true", help="with --fresh: each starts from the last's memory")
    ap.add_argument("--curve", choices=sorted(CURVES), help="replay with another machine's costs")
    ap.add_argument("--curve-json", metavar="FILE:LABEL", help="replay with a curve bench_rpc.py measured")
    ap.add_argument("--per-prompt", action="store_true", help="also auto / best fixed K for each prompt")
    args = ap.parse_args()
    if args.traces and args.traces.exists():
        saved = json.loads(args.traces.read_text())
        traces, bench_ids = saved["traces"], saved["bench_ids"]
        verify, draft = {int(n): t for n, t in saved["verify"].items()}, saved["draft"]
    else:
        with Engine(Settings.load(pair=args.pair, tuner_cache=False)) as eng:
            prompts = fit_prompts(select(load_prompts(None), None), eng.target, args.prompt_tokens)
            print(f"tracing {len(prompts)} prompts ...", file=sys.stderr)
            traces = match_traces(eng, prompts, args.gen_tokens + K_MAX)
            verify, draft = eng.on_engine_thread(lambda: costs(eng, list(prompts[0].tokens)))
        bench_ids = [p.id for p in select(prompts, 1)]
        if args.traces:
            data = {"traces": traces, "bench_ids": bench_ids, "verify": verify, "draft": draft}
            args.traces.write_text(json.dumps(data))
    if args.curve:
        verify, draft = CURVES[args.curve]
    if args.curve_json:
        verify, draft = bench_rpc_curve(*args.curve_json.rsplit(":", 1))
    print("verify ms by batch size: " + ", ".join(f"{n}: {v * 1e3:.0f}" for n, v in verify.items()))
    print(f"draft ms per token: {draft * 1e3:.1f}")
    rng = random.Random(1)
    ids = list(traces)
    sets = {"bench (1 per kind)": bench_ids}
    for j in range(args.sets):
        rng.shuffle(ids)
        sets[f"random set {j + 1}"] = ids[:4]
    sets["all prompts"] = list(traces)
    n, runs, fresh = args.gen_tokens, args.runs, args.fresh
    print(
        "\n| prompts | best fixed K | tok/s | auto tok/s (mean, min over seeds) | auto / best "
        "| auto / best of plain, K=1, K=3 | auto / plain |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, chosen in sets.items():
        rates = {
            k: np.mean([replay_bench(fixed(k), traces, chosen, n, runs, verify, draft, s) for s in range(3)])
            for k in range(0, K_MAX + 1)
        }
        best = max((k for k in rates if k), key=rates.get)
        bar = max(rates[0], rates[1], rates[3])
        make = auto(fresh, args.memory, verify, draft)
        got = [
            replay_bench(make, traces, chosen, n, runs, verify, draft, s, fresh) for s in range(args.seeds)
        ]
        print(
            f"| {name} | K={best} | {rates[best]:.2f} | {np.mean(got):.2f}, {min(got):.2f} "
            f"| {np.mean(got) / rates[best]:.3f} (min {min(got) / rates[best]:.3f}) "
            f"| {np.mean(got) / bar:.3f} | {np.mean(got) / rates[0]:.3f} |"
        )
    if args.per_prompt:
        per_prompt(traces, n, verify, draft, fresh, args.memory, args.seeds)
    return 0


def per_prompt(traces, n, verify, draft, fresh, memory, seeds) -> None:  # noqa: ANN001
    """One request per prompt: where a set's gap comes from (one text, or all of them a little)."""
    print("\n| prompt | draft keeps | best fixed K | tok/s | auto tok/s | auto / best | auto / plain |")
    print("|---|--:|---|--:|--:|--:|--:|")
    for pid, m in traces.items():
        rates = {k: np.mean([replay_bench(fixed(k), traces, [pid], n, 1, verify, draft, s) for s in range(3)])
                 for k in range(0, K_MAX + 1)}  # fmt: skip
        best = max((k for k in rates if k), key=rates.get)
        make = auto(fresh, memory, verify, draft)
        got = np.mean(
            [replay_bench(make, traces, [pid], n, 1, verify, draft, s, fresh) for s in range(seeds)]
        )
        print(f"| {pid} | {np.mean(m[:n]):.2f} | K={best} | {rates[best]:.2f} | {got:.2f} "
              f"| {got / rates[best]:.3f} | {got / rates[0]:.3f} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
