"""Time to first token on a long prompt with and without the prompt cache on disk (issue 57).

Each run is a fresh Engine (a restart) over one cache folder: the first evaluates the prompt and
saves its state, the next loads it. Prints, per run, the time to the first token, the prompt tokens
each model evaluated, and what the save and the load cost (the copy out of llama.cpp on the engine
thread; the files' sizes).

    .venv/bin/python research/prompt_disk_ttft.py --pair models/default --tokens 4096
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.engine.prompt_disk.store import SUFFIX

SOURCES = sorted((Path(__file__).resolve().parent.parent / "localspec").rglob("*.py"))


def prompt_ids(eng: Engine, n: int) -> list[int]:
    """n tokens of this repository's own source: code, as an agent's context is."""
    ids: list[int] = []
    for path in SOURCES:
        ids += eng.tokenize(path.read_text())
        if len(ids) >= n:
            return ids[:n]
    raise SystemExit(f"the sources hold fewer than {n} tokens")


def one_run(s: Settings, n: int, label: str) -> None:
    t0 = time.perf_counter()
    with Engine(s) as eng:
        loaded = time.perf_counter()
        ids = prompt_ids(eng, n)
        t_submit = time.perf_counter()
        first = None
        for chunk in eng.stream(ids, temperature=0, max_tokens=8):
            if first is None and chunk.tokens:
                first = time.perf_counter() - t_submit
            if chunk.response is not None:
                st = chunk.response.stats
        copy = eng.on_engine_thread(lambda: _copy_s(eng))
        t_close = time.perf_counter()
    print(
        f"{label}: load {loaded - t0:.1f} s, time to first token {first:.2f} s, prompt evaluated "
        f"{st.n_prefilled} (target) / {st.n_draft_prefilled} (draft) of {n}; copying the target's state "
        f"out {copy:.3f} s; close (pending saves written) {time.perf_counter() - t_close:.1f} s"
    )


def _copy_s(eng: Engine) -> float:
    t = time.perf_counter()
    eng.target_ctx.seq_state(0)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", type=Path, default=Path("models/default"))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--n-threads", type=int, default=None)
    ap.add_argument("--draft-max", default="auto")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="localspec-prompt-cache-"))
    s = Settings.load(
        pair=a.pair, n_ctx=a.tokens + 64, prompt_cache=True, prompt_cache_dir=folder,
        n_threads=a.n_threads, draft_max=a.draft_max,
    )  # fmt: skip
    for i in range(a.runs):
        one_run(s, a.tokens, "cold (nothing saved)" if i == 0 else f"restart {i} (loaded from disk)")
    for p in sorted(folder.glob(f"*{SUFFIX}")):
        print(f"  {p.name}: {p.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
