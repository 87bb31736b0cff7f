"""Random schemas, draft lengths, acceptance rules and injected failures through the scheduler on the
fake backend (issue #45): every round keeps both invariants - each cache holds exactly the emitted
tokens, each matcher is exactly where they put it (decode/invariants.py, on in the tests: a broken
one raises inside the round, and the request it raised for fails) - a request the failure is not
about gets what it gets alone (greedy and coupled: plain decoding's text), and a constrained answer
that ends is valid under its schema."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localspec.constrain import Constraint, build_vocabulary, compile_constraint
from localspec.decode import invariants
from localspec.decode.sampling import SamplingParams
from localspec.decode.state import SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Schedulable, Scheduler
from localspec.errors import LocalspecError

from ..fake_backend import FakeContext, markov_tables
from ..toy_json import EOG, PIECES, ToyVocab

TOY = ToyVocab(PIECES + list("[]-.03456789") + ["ba"])  # every digit: any integer range can be spelled
VOCAB = build_vocabulary(TOY)
NAMES = ["a", "b", "ab", "ba", "x", "y"]
N_SLOTS = 3

leaves = st.one_of(
    st.lists(st.sampled_from(["a", "b", "ab", "ba", "xy"]), min_size=1, max_size=3, unique=True).map(
        lambda vals: {"enum": vals}
    ),
    st.tuples(st.integers(-30, 30), st.integers(0, 300)).map(
        lambda r: {"type": "integer", "minimum": r[0], "maximum": r[0] + r[1]}
    ),
    st.sampled_from([{"type": "integer"}, {"type": "number"}]),
    st.integers(0, 4).map(lambda n: {"type": "string", "pattern": "^[abxy]*$", "maxLength": n}),
)


def _nodes(children: st.SearchStrategy) -> st.SearchStrategy:
    objects = st.tuples(
        st.dictionaries(st.sampled_from(NAMES), children, min_size=1, max_size=3), st.booleans()
    )
    arrays = st.tuples(children, st.integers(0, 3))
    return st.one_of(
        objects.map(
            lambda o: {
                "type": "object",
                "properties": o[0],
                "required": sorted(o[0]) if o[1] else sorted(o[0])[:1],
                "additionalProperties": False,
            }
        ),
        arrays.map(lambda a: {"type": "array", "items": a[0], "maxItems": a[1]}),
    )


schemas = st.recursive(leaves, _nodes, max_leaves=5)
requests = st.fixed_dictionaries(
    {
        "schema": st.one_of(st.none(), schemas),
        "k": st.integers(0, 6),
        "lookup": st.booleans(),
        "seed": st.integers(0, 99),
    }
)


class PropJob(Schedulable):
    def __init__(self, req: dict, rule: str, aware: bool) -> None:
        self.req, self.rule, self.aware = req, rule, aware
        self.prompt = [1, 14, req["seed"] % 5 + 6]
        schema = req["schema"]
        self.grammar = (
            compile_constraint(Constraint(kind="json_schema", text=json.dumps(schema)), VOCAB)
            if schema
            else None
        )
        self.got: list[int] = []
        self.reason: str | None = None
        self.error: BaseException | None = None

    def start(self, seq: int) -> SeqState:
        greedy = self.rule == "greedy"
        sp = (
            SamplingParams(temperature=0.0)
            if greedy
            else SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
        )
        return SeqState.start(
            seq, self.prompt, sp, SpecConfig(mode="pq" if greedy else self.rule, grammar_drafts=self.aware),
            np.random.default_rng(self.req["seed"]), Counters(), FixedK(self.req["k"]), max_new=30,
            speculative=self.req["k"] > 0 or self.req["lookup"], lookup=self.req["lookup"],
            matcher=self.grammar.matcher() if self.grammar else None,
        )  # fmt: skip

    def deliver(self, steps: list) -> bool:
        self.got += [s.token for s in steps]
        return True

    def end(self, state: SeqState | None, reason: str) -> None:
        self.reason = reason

    def fail(self, error: BaseException) -> None:
        self.error = error


def _contexts(seed: int, n_seq: int) -> tuple[FakeContext, FakeContext]:
    t, d = markov_tables(v=TOY.n_vocab, noise=1.5, seed=seed, scale=2.0)
    eog = frozenset({EOG})
    return FakeContext(t, eog=eog, n_seq=n_seq), FakeContext(d, eog=eog, n_seq=n_seq)


def _run(sched: Scheduler, jobs: list[PropJob], fail=None, ctxs=None) -> None:  # noqa: ANN001
    """Every job through `sched`; `fail` = (which context, whose rows, from which step) refuses."""
    refused: list[int] = []
    if fail is not None:
        ctx = ctxs[0] if fail[0] == "target" else ctxs[1]
        real = ctx.eval_batch

        def eval_batch(items):  # noqa: ANN001, ANN202 - llama.cpp refuses a whole batch for one bad row
            if any(seq in refused for seq, *_ in items):
                raise LocalspecError("llama_decode failed (code 1)")
            return real(items)

        ctx.eval_batch = eval_batch
    for job in jobs:
        sched.add(job)
    for step in range(2000):
        if not sched.busy:
            return
        if fail is not None and step == fail[2]:
            refused += [st.seq for job, st, _ in sched.running if job is jobs[fail[1]]]
        sched.step()
    raise AssertionError("the scheduler never went idle")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reqs=st.lists(requests, min_size=1, max_size=N_SLOTS),
    rule=st.sampled_from(["greedy", "pq", "match", "coupled"]),
    aware=st.booleans(),
    table_seed=st.integers(0, 20),
    fail=st.one_of(
        st.none(), st.tuples(st.sampled_from(["target", "draft"]), st.integers(0, 2), st.integers(0, 6))
    ),
)
def test_every_round_keeps_the_invariants_and_no_request_pays_for_another(
    reqs, rule, aware, table_seed, fail
):
    assert invariants.ON  # tests/conftest.py: a broken invariant raises in the round
    if fail is not None:
        fail = (fail[0], fail[1] % len(reqs), fail[2])
    jobs = [PropJob(r, rule, aware) for r in reqs]
    ctxs = _contexts(table_seed, N_SLOTS)
    _run(Scheduler(*ctxs, N_SLOTS), jobs, fail, ctxs)
    for i, job in enumerate(jobs):
        assert not isinstance(job.error, invariants.InvariantBroken), job.error
        if fail is not None and i == fail[1]:
            continue
        assert job.error is None, job.error
        if rule in ("greedy", "coupled"):  # the same text as plain decoding, whoever shared the rounds
            plain = PropJob({**job.req, "k": 0, "lookup": False}, rule, aware)
            _run(Scheduler(*_contexts(table_seed, 1), 1), [plain])
            assert job.got == plain.got
        if job.grammar is not None and job.got and job.got[-1] == EOG:
            jsonschema.validate(json.loads(TOY.text(job.got)), job.req["schema"])
