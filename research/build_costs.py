"""What this environment's llama.cpp build costs per decode: the target's verify batches of 1/2/4/8
tokens and the draft's one-token step, timed as auto K's calibration times them (the fastest of a
few tries, at a prompt's depth). Run it from each venv to set two builds side by side (the AVX2
wheel before issue #32, the native one after), alternating:

    make setup VENV=.venv-avx2 CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_RPC=ON"
    for v in .venv-avx2 .venv .venv-avx2 .venv; do $v/bin/python research/build_costs.py; done

Prints one JSON line: the build's flags (what llama.cpp's system_info reports) and the milliseconds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from localspec import llama
from localspec.config.pair_toml import read_pair
from localspec.draft_len.calibrate import measure

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", type=Path, default=ROOT / "models" / "default")
    ap.add_argument("--depth", type=int, default=128, help="prompt tokens in the cache when timing")
    ap.add_argument("--tries", type=int, default=5)
    args = ap.parse_args()
    pair = read_pair(args.pair)
    with llama.Model(pair.target) as tm, llama.Model(pair.draft) as dm:
        kw = dict(n_ctx=512, n_batch=64)
        with llama.Context(tm, **kw) as target, llama.Context(dm, **kw) as draft:
            prefix = [(7 * i + 11) % tm.n_vocab for i in range(args.depth)]
            verify, draft_s = measure(target, draft, prefix, max_batch=4, tries=args.tries, also=(8,))
    print(
        json.dumps(
            {
                "system_info": llama.system_info(),
                "verify_ms": {n: round(s * 1e3, 1) for n, s in sorted(verify.items())},
                "draft_ms": round(draft_s * 1e3, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
