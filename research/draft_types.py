"""The draft's type on the real pair: the calibrated cost of a draft step (and the target's plain
step) for the Q8_0 draft the pair builder makes and the Q4_K_M one the 0.5B ships as, each in a
fresh engine, alternated (docs/benchmarks.md, "The draft's type").

    python research/draft_types.py [--rounds 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.config.settings import Settings
from localspec.engine import Engine

TARGET = Path("models/default/target-q4_k_m.gguf")
DRAFTS = {
    "q8_0": Path("models/default/draft-q8_0.gguf"),
    "q4_k_m": Path("models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for rnd in range(args.rounds):
        for name, draft in DRAFTS.items():
            with Engine(Settings(target=TARGET, draft=draft, tuner_cache=False, draft_max="auto")) as e:
                r = e.tuners.known
                print(
                    f"{rnd} {name}: target step {r.verify_s[1] * 1e3:.1f} ms, draft step {r.draft_s * 1e3:.1f} ms"
                    f" ({r.draft_s / r.verify_s[1]:.2f}), catch-up {r.catch_s * 1e3:.2f} ms a token",
                    flush=True,
                )


if __name__ == "__main__":
    main()
