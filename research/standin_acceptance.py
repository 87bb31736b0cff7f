"""Greedy acceptance of the stand-in pair, teacher-forced: how often the draft's argmax equals the
target's on the target's own greedy continuation (what greedy speculation meets at every position).

    .venv/bin/python research/standin_acceptance.py                      # models/default
    .venv/bin/python research/standin_acceptance.py --sigma 0.2 0.3      # builds variants in /tmp first
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from localspec.config.pair_toml import read_pair
from localspec.convert.embedded import smollm2_path
from localspec.convert.standin import R, build_standin
from localspec.llama import Context, Model
from localspec.paths import default_pair

PROMPTS = (
    "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain how a hash map works.<|im_end|>\n<|im_start|>assistant\n",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "The history of the Roman Empire begins",
    "<|im_start|>user\nGive me three tips for learning a new language.<|im_end|>\n<|im_start|>assistant\n",
)


def acceptance(pair_toml: Path, n_pos: int, follow: str = "target") -> tuple[float, list[float], float]:
    """follow="draft" teacher-forces on the draft's greedy text instead: one batched target pass per
    prompt, ~10x quicker for comparing recipes, slightly optimistic in absolute terms."""
    pair = read_pair(pair_toml)
    rates, decode_s, n_decoded = [], 0.0, 0
    with Model(pair.target) as tm, Model(pair.draft) as dm:
        with Context(tm, n_ctx=512) as tc, Context(dm, n_ctx=512) as dc:
            for prompt in PROMPTS:
                tc.reset()
                dc.reset()
                toks = tm.tokenize(prompt, add_special=True, parse_special=True)
                lead, other = (tc, dc) if follow == "target" else (dc, tc)
                nxt = int(lead.eval(toks, 0, 1)[0].argmax())
                cont = [nxt]
                t0 = time.perf_counter()
                for _ in range(n_pos - 1):  # the leading model's greedy continuation
                    nxt = int(lead.eval([nxt], lead.n_past, 1)[0].argmax())
                    cont.append(nxt)
                if follow == "target":
                    decode_s += time.perf_counter() - t0
                    n_decoded += n_pos - 1
                seq = toks + cont
                # the other model's logits at the positions predicting cont, in one teacher-forced batch
                logits = other.eval(seq[:-1], 0, n_pos)
                rates.append(float(np.mean(logits.argmax(axis=1) == np.array(cont))))
    return float(np.mean(rates)), rates, (n_decoded / decode_s if decode_s else float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sigma", type=float, nargs="*", default=[], help="build and measure these sigmas")
    ap.add_argument("--r", type=int, default=R)
    ap.add_argument("--positions", type=int, default=64)
    ap.add_argument(
        "--follow",
        choices=("target", "draft"),
        default="target",
        help="whose greedy text to teacher-force on (draft: quick, for comparing sigmas)",
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/localspec-standin"))
    args = ap.parse_args()
    pairs = [default_pair() / "pair.toml"] if not args.sigma else []
    for s in args.sigma:
        t0 = time.perf_counter()
        pairs.append(build_standin(smollm2_path(), args.workdir / f"r{args.r}-s{s}", r=args.r, sigma=s))
        print(f"built sigma={s} in {time.perf_counter() - t0:.0f} s")
    for p in pairs:
        info = read_pair(p).info
        mean, rates, tok_s = acceptance(p, args.positions, args.follow)
        print(
            f"r={info.get('r')} sigma={info.get('sigma')}: greedy acceptance {mean:.3f} "
            f"(per prompt {' '.join(f'{x:.2f}' for x in rates)}; following the {args.follow}); "
            f"target decode {tok_s:.1f} tok/s"
        )


if __name__ == "__main__":
    main()
