"""Does a speculative round leave the caches and the grammar where plain decoding would (issue #45)?

Three experiments on the fake backend, with the toy JSON vocabulary and schema (tests/toy_json.py),
greedy, each counting the runs that go wrong:

  cache     K in {2,3,4,6} x 40 seeds, one constrained request alone: does the target's cache hold
            exactly the emitted tokens when it ends (tokens[:past])?
  next      a fake whose rows read every token cached before them (as attention does), K in {0,2,3,4}
            x 40 seeds: a constrained request, then a request whose prompt extends its prompt and
            answer (the chat's next turn, reusing the slot's prefix); does the second request's
            output equal a fresh engine's?
  isolate   20 seeds: a constrained request beside one whose rows llama.cpp refuses mid-way (the
            fault model of tests/unit/test_engine_faults.py); does it end valid, with plain's text?

    .venv/bin/python research/round_invariants.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.constrain import ConstraintStuck  # noqa: E402
from localspec.decode.round import decode_round  # noqa: E402
from localspec.decode.sampling import SamplingParams  # noqa: E402
from localspec.decode.state import SeqState, SpecConfig  # noqa: E402
from localspec.decode.stats import Counters  # noqa: E402
from localspec.draft_len.fixed import FixedK  # noqa: E402
from localspec.engine.scheduler import Schedulable, Scheduler  # noqa: E402
from localspec.errors import LocalspecError  # noqa: E402
from tests.fake_backend import AttentionContext, FakeContext, markov_tables  # noqa: E402
from tests.toy_json import EOG, GRAMMAR, PIECES, TOY  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)
V = len(PIECES)


class ToyJob(Schedulable):
    """One greedy request; `constrained`: under the toy schema."""

    def __init__(self, prompt, k, *, constrained=True, n=40):  # noqa: ANN001
        self.prompt, self.k, self.constrained, self.n = list(prompt), k, constrained, n
        self.got: list[int] = []
        self.error: BaseException | None = None

    def start(self, seq):  # noqa: ANN001, ANN201
        return SeqState.start(
            seq, self.prompt, GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), FixedK(self.k),
            max_new=self.n, speculative=self.k > 0, matcher=GRAMMAR.matcher() if self.constrained else None,
        )  # fmt: skip

    def deliver(self, steps):  # noqa: ANN001, ANN201
        self.got += [s.token for s in steps]
        return True

    def fail(self, error):  # noqa: ANN001, ANN201
        self.error = error


def _drain(sched: Scheduler) -> None:
    for _ in range(5000):
        if not sched.busy:
            return
        sched.step()
    raise RuntimeError("the scheduler never went idle")


def _valid(tokens: list[int]) -> bool:
    if not tokens or tokens[-1] != EOG:
        return False
    try:
        obj = json.loads(TOY.text(tokens))
    except json.JSONDecodeError:
        return False
    return isinstance(obj, dict) and set(obj) == {"a", "b"}


def cache_experiment() -> tuple[int, int]:
    bad = runs = 0
    for k in (2, 3, 4, 6):
        for seed in range(40):
            t, d = markov_tables(v=V, noise=1.5, seed=seed, scale=2.0)
            target, draft = FakeContext(t, eog=frozenset({EOG})), FakeContext(d, eog=frozenset({EOG}))
            st = SeqState.start(
                0, [1], GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), FixedK(k),
                max_new=40, matcher=GRAMMAR.matcher(),
            )  # fmt: skip
            decode_round(target, draft, [], filling=[st])
            while st.finish is None:
                decode_round(target, draft, [st])
            runs += 1
            bad += target.cache != st.tokens[: target.past()]
    return bad, runs


def _attention_pair(seed: int) -> tuple[AttentionContext, AttentionContext]:
    t, d = markov_tables(v=V, noise=1.5, seed=seed, scale=2.0)
    ctx = np.random.default_rng(seed + 1000).normal(size=(7, V)) * 2.0
    eog = frozenset({EOG})
    return AttentionContext(t, ctx, eog=eog), AttentionContext(d, ctx, eog=eog)


def next_request_experiment(ks: tuple[int, ...]) -> tuple[int, int]:
    bad = runs = 0
    tail = [14, 15, 14]  # the template's tail after the answer ("x y x")
    for k in ks:
        for seed in range(40):
            target, draft = _attention_pair(seed)
            sched = Scheduler(target, draft, 1)
            first = ToyJob([1], k)
            sched.add(first)
            _drain(sched)
            second = ToyJob([1, *first.got[:-1], *tail], k, constrained=False, n=12)
            sched.add(second)
            _drain(sched)
            fresh_target, fresh_draft = _attention_pair(seed)
            fresh = Scheduler(fresh_target, fresh_draft, 1)
            again = ToyJob(second.prompt, k, constrained=False, n=12)
            fresh.add(again)
            _drain(fresh)
            runs += 1
            bad += second.got != again.got
    return bad, runs


def isolate_experiment() -> tuple[int, int]:
    bad = runs = 0
    for seed in range(20):
        t, d = markov_tables(v=V, noise=1.5, seed=seed, scale=2.0)
        eog = frozenset({EOG})
        target, draft = FakeContext(t, eog=eog, n_seq=2), FakeContext(d, eog=eog, n_seq=2)
        real, poisoned = target.eval_batch, []

        def eval_batch(items, real=real, poisoned=poisoned):  # noqa: ANN001, ANN202
            if any(seq in poisoned for seq, *_ in items):
                raise LocalspecError("llama_decode failed (code 1)")
            return real(items)

        target.eval_batch = eval_batch
        sched = Scheduler(target, draft, 2)
        json_job, victim = ToyJob([1], 3), ToyJob([2], 3)
        sched.add(json_job)
        sched.add(victim)
        sched.step()  # both prompts in: the next round decodes both, and raises for the victim
        poisoned.append(next(st.seq for job, st, _ in sched.running if job is victim))
        _drain(sched)
        alone_target = FakeContext(t, eog=eog)
        alone = Scheduler(alone_target, FakeContext(d, eog=eog), 1)
        want = ToyJob([1], 3)
        alone.add(want)
        _drain(alone)
        runs += 1
        broken = isinstance(json_job.error, ConstraintStuck) or not _valid(json_job.got)
        bad += broken or json_job.got != want.got
    return bad, runs


def main() -> None:
    bad, runs = cache_experiment()
    print(f"cache:   the target's cache differs from the tokens in {bad} of {runs} runs")
    for ks in ((2, 3, 4), (0,)):
        bad, runs = next_request_experiment(ks)
        print(f"next:    K in {ks}: the next request differs from a fresh engine's in {bad} of {runs} runs")
    bad, runs = isolate_experiment()
    print(f"isolate: the constrained request ends invalid, stuck or unlike plain in {bad} of {runs} runs")


if __name__ == "__main__":
    main()
