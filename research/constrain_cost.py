"""What a constraint costs per decoding step, on real vocabularies: mask, forced tokens, consume,
rollback, and masking one logits row. Random walks (uniform among the allowed tokens, up to
MAX_WALK tokens) under the schemas of the bench's json prompts; prints microseconds per call
(median / p90 / max).

    PYTHONPATH=. .venv/bin/python research/constrain_cost.py [MODEL.gguf ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from localspec.bench.prompts import load_prompts, select
from localspec.constrain import Constraint, apply_mask, compile_constraint, vocabulary_for
from localspec.llama import Model

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = [p.schema for p in select(load_prompts(), None, ["json"])]
MAX_WALK = 300

DEFAULT = ["models/SmolLM2-135M-Instruct.Q4_1.gguf", "models/gemma-3-270m-q4_k_m.gguf"]
WALKS = 8


def _timed(out: list[float], fn, *args):
    t = time.perf_counter()
    r = fn(*args)
    out.append((time.perf_counter() - t) * 1e6)
    return r


def _fmt(xs: list[float]) -> str:
    a = np.asarray(xs)
    return f"{np.median(a):7.1f} {np.percentile(a, 90):7.1f} {a.max():8.1f}  (n={len(a)})"


def measure(path: str) -> None:
    with Model(ROOT / path, vocab_only=True) as model:
        t0 = time.perf_counter()
        vocab = vocabulary_for(model)
        build_s = time.perf_counter() - t0
        cost: dict[str, list[float]] = {
            k: [] for k in ("compile", "mask", "forced", "consume", "rollback", "apply")
        }
        row = np.random.default_rng(0).normal(size=vocab.n_vocab).astype(np.float32)
        for schema in SCHEMAS:
            c = Constraint(kind="json_schema", text=schema)
            g = _timed(cost["compile"], compile_constraint, c, vocab)
            for seed in range(WALKS):
                rng = np.random.default_rng(seed)
                m = g.matcher()
                while not m.ended and m.n_consumed < MAX_WALK:
                    mask = _timed(cost["mask"], m.mask)
                    _timed(cost["forced"], m.forced)
                    _timed(cost["apply"], apply_mask, row, mask)
                    tok = int(rng.choice(np.flatnonzero(mask)))
                    _timed(cost["consume"], m.consume, [tok])
                    if m.n_consumed > 4 and rng.random() < 0.3:  # a verify that kept part of a draft
                        _timed(cost["rollback"], m.rollback, 2)  # the walk goes on from there
        print(f"{Path(path).name}: vocab {vocab.n_vocab}, built in {build_s:.2f} s")
        print(f"  {'us per call':<10} {'median':>7} {'p90':>7} {'max':>8}")
        for k, xs in cost.items():
            print(f"  {k:<10} {_fmt(xs)}")


if __name__ == "__main__":
    for p in sys.argv[1:] or DEFAULT:
        measure(p)
