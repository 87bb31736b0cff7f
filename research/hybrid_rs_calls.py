"""How a hybrid target's decode of several sequences goes to llama.cpp (llama/recurrent.py
`rs_calls`): is the output right, and what does the cut cost? Four requests at once on the
synthetic qwen35 (rs rollback), drafted by its noisy sibling.

    .venv/bin/python research/hybrid_rs_calls.py --stress 25   # random K, order and delays: divergences
    .venv/bin/python research/hybrid_rs_calls.py --speed 5     # tokens/s per way of cutting, interleaved

`--stress` counts requests whose greedy output differs from plain decoding and the largest
teacher-forced gap of each (a near-tie, <= 0.25, is llama.cpp's batch noise; more is a wrong state).
`--speed` runs the same four requests with every decode in one call (`batched`: what llama.cpp was
given before, and wrong), one sequence a call (`singles`) and `rs_calls` (`grouped`), as ratios."""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ and tests/ of this checkout

import localspec.llama.recurrent as recurrent  # noqa: E402
from localspec.config.settings import Settings  # noqa: E402
from localspec.engine import Engine  # noqa: E402
from tests.helpers import teacher_forced_gaps  # noqa: E402
from tools.synthetic.arch import write_qwen35  # noqa: E402

SMOLLM2 = Path("models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["The history of the lighthouse begins in the ancient world, where fires were lit",
           "Once upon a time", "def fibonacci(n):", "The capital of France is"]  # fmt: skip
KS = ["1", "2", "3", "4", "5", "6", "7", "8", "auto"]


def engine(folder: Path) -> Engine:
    target = write_qwen35(SMOLLM2, folder / "t.gguf", seed=1)
    draft = write_qwen35(SMOLLM2, folder / "d.gguf", seed=1, perturb=0.25)
    return Engine(
        Settings.load(target=target, draft=draft, n_ctx=512, lookup="off", tuner_cache=False, parallel=4)
    )


def run(eng: Engine, ks: list[str], order: list[int], delays: list[float], n: int = 32) -> dict:
    handles = {}
    for i, pause in zip(order, delays):
        handles[i] = eng.submit(PROMPTS[i], temperature=0, max_tokens=n, draft_max=ks[i])
        time.sleep(pause)
    for h in handles.values():
        for _ in h:
            pass
    return {i: h.response for i, h in handles.items()}


def stress(eng: Engine, iters: int, seed: int) -> None:
    rng = random.Random(seed)
    plains = [eng.generate(p, temperature=0, max_tokens=32, spec=False) for p in PROMPTS]
    bad = 0
    for it in range(iters):
        ks = [rng.choice(KS) for _ in PROMPTS]
        order = rng.sample(range(len(PROMPTS)), len(PROMPTS))
        delays = [rng.choice([0, 0, 0.001, 0.005, 0.02, 0.05]) for _ in PROMPTS]
        for i, resp in run(eng, ks, order, delays).items():
            if resp.tokens != plains[i].tokens:
                gaps = teacher_forced_gaps(eng, resp.prompt_tokens, resp.tokens)
                bad += gaps.max() > 0.25
                print(f"run {it} request {i} K {ks[i]}: differs, largest gap {gaps.max():.3f}")
    print(f"wrong: {bad} of {iters * len(PROMPTS)}; {eng.target_ctx.rollback_stats}")


def speed(eng: Engine, reps: int) -> None:
    ways = {"batched": lambda lens, *_: [list(range(len(lens)))],
            "singles": lambda lens, *_: [[i] for i in range(len(lens))],
            "grouped": recurrent.rs_calls}  # fmt: skip
    real, tok_s = recurrent.rs_calls, {w: [] for w in ways}
    try:
        for _ in range(reps):
            for way, calls in ways.items():
                recurrent.rs_calls = calls
                for ks in (["2", "3", "4", "4"], ["auto"] * 4):
                    t0 = time.perf_counter()
                    out = run(eng, ks, list(range(len(PROMPTS))), [0.0] * len(PROMPTS), n=64)
                    tok_s[way].append(sum(len(r.tokens) for r in out.values()) / (time.perf_counter() - t0))
    finally:
        recurrent.rs_calls = real
    for way in ("singles", "grouped"):
        r = [a / b for a, b in zip(tok_s[way], tok_s["batched"])]
        print(
            f"{way} / batched: K 2,3,4,4 {statistics.median(r[0::2]):.3f}, auto {statistics.median(r[1::2]):.3f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stress", type=int, default=0, help="runs of four requests")
    p.add_argument("--speed", type=int, default=0, help="rounds of the three ways, interleaved")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d, engine(Path(d)) as eng:
        if args.stress:
            stress(eng, args.stress, args.seed)
        if args.speed:
            speed(eng, args.speed)


if __name__ == "__main__":
    main()
