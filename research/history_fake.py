"""The history source's mechanism on the fake backend (tests/fake_backend.py), load-independent:
target passes per request with --history-tokens on over off, for repeated agent-like requests (one
long shared "system prompt and tools" block, then one of a few asks) and one-off prompts (random
tokens, seen once), interleaved on one scheduler, greedy (both sides must emit the same tokens).
A fixed K (no timings involved): the history drafts where the plan leads with its offer.

    .venv/bin/python research/history_fake.py --requests 200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.config.settings import Settings  # noqa: E402
from localspec.decode.sampling import SamplingParams  # noqa: E402
from localspec.decode.sources import remembered  # noqa: E402
from localspec.decode.state import SeqState, SpecConfig  # noqa: E402
from localspec.decode.stats import Counters  # noqa: E402
from localspec.draft_len.fixed import FixedK  # noqa: E402
from localspec.engine.scheduler import Schedulable, Scheduler  # noqa: E402
from tests.fake_backend import FakeContext, markov_tables  # noqa: E402

V = 256


class Job(Schedulable):
    def __init__(self, prompt: list[int], n: int, k: int, model: bool) -> None:
        self.prompt, self.n, self.k, self.model, self.got, self.state = prompt, n, k, model, [], None

    def start(self, seq: int) -> SeqState:
        self.state = SeqState.start(
            seq, self.prompt, SamplingParams(temperature=0.0), SpecConfig(), np.random.default_rng(0),
            Counters(), FixedK(self.k, has_model=self.model), max_new=self.n, speculative=True, lookup=True,
        )  # fmt: skip
        return self.state

    def deliver(self, steps) -> bool:  # noqa: ANN001
        self.got += [s.token for s in steps]
        return True


def traffic(n: int, asks: int, rng: np.random.Generator) -> list[tuple[str, list[int]]]:
    """Interleaved: an agent turn (the shared block + one of `asks` asks), a one-off prompt."""
    system = [int(t) for t in rng.integers(0, V, 200)]
    ask = [[int(t) for t in rng.integers(0, V, 12)] for _ in range(asks)]
    out = []
    for i in range(n):
        out.append(("agent", system + ask[i % asks]))
        out.append(("one-off", [int(t) for t in rng.integers(0, V, 60)]))
    return out


def run(args: argparse.Namespace) -> dict:
    t, d = markov_tables(v=V, noise=args.noise, seed=1)  # a draft close to the target, not equal
    reqs = traffic(args.requests, args.asks, np.random.default_rng(2))
    out = {}
    for model in (False, True):
        sides = {}
        for on in (False, True):
            kept = remembered(Settings(history_tokens=args.history if on else 0))
            sched = Scheduler(
                FakeContext(t, n_ctx=1024), FakeContext(d, n_ctx=1024) if model else None, 1, kept=kept
            )
            rows = []
            for kind, prompt in reqs:
                job = Job(prompt, args.tokens, args.k, model)
                sched.add(job)
                while sched.busy:
                    sched.step()
                c = job.state.counters
                h = c.sources.get("history")
                rows.append((kind, job.got, c.rounds + c.plain_steps, h.accepted if h else 0))
            sides[on] = rows
        assert all(a[1] == b[1] for a, b in zip(sides[False], sides[True])), "history changed an output"
        for kind in ("agent", "one-off"):
            off = [r for r in sides[False] if r[0] == kind][1:]  # the first has nothing to remember
            on = [r for r in sides[True] if r[0] == kind][1:]
            out[f"{'draft model + lookup' if model else 'lookup only'}, {kind}"] = {
                "requests": len(on),
                "passes_off_over_on": sum(r[2] for r in off) / sum(r[2] for r in on),
                "history_accepted_share": sum(r[3] for r in on) / sum(len(r[1]) for r in on),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200, help="of each kind")
    ap.add_argument("--asks", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--history", type=int, default=65536)
    print(json.dumps(run(ap.parse_args()), indent=1))


if __name__ == "__main__":
    main()
