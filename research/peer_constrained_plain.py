"""llama-server's constrained plain decoding on the bench's `json` prompts: its best configuration
there, since its draft proposes without the grammar. `bench --peer` reports llama.cpp's plain speed
from llama-bench, which runs no grammar; this measures the same prompts as `bench --kinds json`
(fitted to 128 tokens, greedy) through llama-server's `/completion` with each prompt's
`json_schema`, one request at a time, and checks every finished answer against its schema.

    make peer
    LOCALSPEC_PEER_BIN=$PWD/third_party/llama.cpp-build/bin \
        .venv/bin/python research/peer_constrained_plain.py [--pair models/default] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import jsonschema

from localspec.bench.concurrency import PeerServer
from localspec.bench.prompts import fit_prompts, load_prompts, select
from localspec.bench.suite import _peer_settings, _peer_texts
from localspec.config.settings import Settings
from localspec.llama import Model, default_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", type=Path, default=Path("models/default"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=128)
    a = ap.parse_args()
    s = Settings.load(pair=a.pair).replace(n_threads=default_threads())
    ps = _peer_settings(s)
    with Model(s.target) as target:
        fitted = fit_prompts(select(load_prompts(), None, ["json"]), target, a.prompt_tokens)
        texts = _peer_texts(target, fitted)
    speeds, invalid, finished = [], 0, 0
    with PeerServer(ps, 1, None) as server:
        for run in range(a.runs + 1):  # the first pass warms the server up and is not counted
            n = ms = 0.0
            for p in fitted:
                out = server.complete(
                    texts[p.id], gen_tokens=a.gen_tokens, temperature=0, seed=0, ps=ps, json_schema=p.schema
                )
                t = out["timings"]
                n, ms = n + t["predicted_n"], ms + t["predicted_ms"]
                if run and out.get("stop_type") != "limit":
                    finished += 1
                    try:
                        jsonschema.validate(json.loads(out["content"]), json.loads(p.schema))
                    except (ValueError, jsonschema.ValidationError):
                        invalid += 1
            if run:
                speeds.append(1000 * n / ms)
                print(f"run {run}: {speeds[-1]:.1f} tok/s", flush=True)
    print(
        f"llama-server constrained plain: {statistics.median(speeds):.1f} tok/s "
        f"({min(speeds):.1f}-{max(speeds):.1f}); {finished} finished answers, {invalid} invalid"
    )


if __name__ == "__main__":
    main()
