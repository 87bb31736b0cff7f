"""Constrained speculative rounds on the fake backend: lossless under the mask, forced drafts, rollback.

The fake's Markov chain gets a toy vocabulary of JSON pieces (tests/toy_json.py). The exact
constrained distribution of a short output is then computable by enumeration, for the chi-square.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from localspec.constrain import Constraint, ConstraintStuck, compile_constraint
from localspec.decode.round import decode_round
from localspec.decode.sampling import SamplingParams, process
from localspec.decode.state import SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.auto import AutoK
from localspec.draft_len.controller import Facts
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Scheduler
from tests.fake_backend import AttentionContext, FakeContext, markov_tables
from tests.fake_recurrent import FakeRecurrentContext, recurrent_tables
from tests.helpers import FakeJob, drain, plain_steps, prefill, speculative_steps
from tests.toy_json import EOG, GRAMMAR, PIECES, SCHEMA, TOY, VOCAB

GREEDY = SamplingParams(temperature=0.0)


def _tables(seed: int, noise: float = 1.5):
    t, d = markov_tables(v=len(PIECES), noise=noise, seed=seed, scale=2.0)
    return t, d


def spec(
    t, d, sp=GREEDY, k=3, n=40, mode="pq", seed=0, lookup=False, grammar=GRAMMAR, counters=None, aware=True,
    k_ctl=None, target=None,
):  # fmt: skip
    c = counters if counters is not None else Counters()
    target = target or FakeContext(t, eog=frozenset({EOG}))
    draft = FakeContext(d, eog=frozenset({EOG})) if d is not None else None
    cfg = SpecConfig(mode=mode, grammar_drafts=aware)
    steps = speculative_steps(
        target, draft, [1], sp, cfg, np.random.default_rng(seed), c, k_ctl or FixedK(k),
        max_new=n, lookup=lookup, matcher=grammar.matcher(),
    )  # fmt: skip
    return [s.token for s in steps], c


def plain(t, sp=GREEDY, n=40, mode="pq", seed=0, grammar=GRAMMAR):
    c = Counters()
    target = FakeContext(t, eog=frozenset({EOG}))
    steps = plain_steps(
        target, [1], sp, np.random.default_rng(seed), c, n, mode=mode, matcher=grammar.matcher()
    )
    return [s.token for s in steps]


def _valid(tokens) -> dict:
    assert tokens[-1] == EOG, "the answer did not finish"
    obj = json.loads(TOY.text(tokens))
    jsonschema.validate(obj, SCHEMA)
    return obj


# -- greedy: the constrained target's argmax text, whatever the draft ------------------------------
def test_blind_drafts_stay_lossless_and_accept_less():
    """llama.cpp's way (drafts that ignore the grammar; the target's masked rows reject what breaks
    it) gives the same text, with fewer drafts kept."""
    aware, blind = Counters(), Counters()
    for seed in range(8):
        t, d = _tables(seed)
        want = plain(t)
        assert spec(t, d, k=4, counters=aware)[0] == want
        assert spec(t, d, k=4, counters=blind, aware=False)[0] == want
    assert blind.sources["grammar"].drafted == 0
    assert blind.n_accepted / blind.n_drafted < aware.n_accepted / aware.n_drafted


@pytest.mark.parametrize("lookup", [False, True])
def test_greedy_constrained_spec_equals_constrained_plain(lookup):
    c = Counters()
    for seed in range(12):
        t, d = _tables(seed)
        want = plain(t)
        _valid(want)
        for k in (1, 3, 6):
            got, _ = spec(t, d, k=k, lookup=lookup, counters=c)
            assert got == want, f"seed {seed} K={k}"
    g = c.sources["grammar"]
    assert g.drafted > 0 and 0 < g.accepted <= g.drafted
    assert c.sources["draft"].drafted > 0


def test_forced_drafts_alone_speed_up_a_constrained_answer():
    """Without a draft model the grammar's forced runs still give more than one token per pass."""
    t, _ = _tables(3)
    c = Counters()
    got, _ = spec(t, None, k=0, lookup=True, counters=c)
    assert got == plain(t)
    assert c.sources["grammar"].accepted > 0
    assert len(got) / (c.rounds + c.plain_steps) > 1.0


def test_what_the_grammar_forces_after_a_draft_token_rides_along_for_free():
    """After the draft model picks a value, the grammar's next run (`","b":`) is drafted without a
    draft step: one draft-model token per round (K=1) still yields longer accepted runs."""
    t, _ = _tables(6)
    target, draft = FakeContext(t, eog=frozenset({EOG})), FakeContext(t, eog=frozenset({EOG}))
    c = Counters()
    steps = list(
        speculative_steps(
            target,
            draft,
            [1],
            GREEDY,
            SpecConfig(),
            np.random.default_rng(0),
            c,
            FixedK(1),
            max_new=40,
            matcher=GRAMMAR.matcher(),
        )  # fmt: skip
    )
    assert [s.token for s in steps] == plain(t)
    pairs = list(zip(steps, steps[1:]))
    assert any(a.source == "draft" and b.source == "grammar" for a, b in pairs)
    draft_evals = sum(1 for call in draft.calls if call[0] == "eval")
    assert (
        c.sources["draft"].drafted <= draft_evals < c.sources["draft"].drafted + c.sources["grammar"].drafted
    )


# the stand-in pair's verify costs on the 2-core EPYC (seconds per batch of n tokens): saw-toothed,
# an even batch no dearer than the odd one below it
EPYC = {1: 0.090, 2: 0.147, 3: 0.192, 4: 0.189, 5: 0.292, 6: 0.285, 7: 0.368, 8: 0.352}


def _tuned_on_epyc() -> AutoK:
    ctl = AutoK(k_min=1, k_max=8)
    ctl.prime(EPYC, 0.013, acc=[9.0, 8.0, 7.0, 6.0], tried=[10.0, 9.0, 8.0, 7.0])  # ~85% acceptance
    return ctl


def test_a_tuned_k_prices_the_forced_tokens_in_front_of_its_drafts():
    """The forced run rides in the verify batch, so K is chosen for the batch it makes with it; a run
    that would land on a dear batch size is cut short (the rest is forced again next round)."""
    plans = {}
    for nf in range(7):
        ctl = _tuned_on_epyc()
        plan = ctl.plan(Facts(n_forced=nf))
        plans[nf] = (plan.k, plan.forced_take)
    assert plans[0] == (3, 0)  # alone: a batch of 4
    assert plans[1] == (2, 1) and plans[2] == (1, 2)  # ... with the forced ones in it too
    assert plans[3] == (0, 3) and plans[4] == (0, 3)  # 4 tokens for 189 ms beat 5 for 292 ms
    assert plans[6] == (1, 6)  # 7 + 0.89 tokens for 352 + 13 ms beat 4 for 189


@pytest.mark.parametrize("sp", [GREEDY, SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)])
def test_a_tuned_k_keeps_the_batches_it_priced_and_the_text(sp):
    """With the tuner on the EPYC's curve, every verify batch is one of the sizes its plans price
    best (the grammar's runs after a draft token take the place of model drafts, and are not piled
    on top), and the text is the constrained target's (coupled: same seed, same text)."""
    sizes, c = set(), Counters()
    for seed in range(10):
        t, d = _tables(seed)
        target = FakeContext(t, eog=frozenset({EOG}))
        want = plain(t, sp=sp, mode="coupled", seed=seed)
        got, _ = spec(
            t, d, sp=sp, mode="coupled", seed=seed, counters=c, k_ctl=_tuned_on_epyc(), target=target
        )
        assert got == want, f"seed {seed}"
        sizes |= {len(toks) for kind, toks, _ in target.calls if kind == "eval"}  # (the prompt: 0 tokens)
    assert c.sources["grammar"].accepted and c.sources["draft"].accepted
    # never a batch past what the plans price (the forced runs piled on top once made 13 and 14
    # tokens), nor 5 or 7 (dearer than 6 and 8, and than 4 per token)
    assert sizes <= {1, 2, 3, 4, 6, 8}, sizes


def test_a_complete_answer_ends_without_another_pass():
    t, d = _tables(5)
    c = Counters()
    got, c = spec(t, d, k=2, counters=c)
    _valid(got)
    assert got.count(EOG) == 1


def test_self_draft_under_the_mask_accepts_everything():
    t, _ = _tables(4)
    got, c = spec(t, t, k=4)
    assert got == plain(t)
    assert c.n_accepted == c.n_drafted


# -- sampling: the constrained target's distribution exactly -------------------------------------
def _exact(t, sp, n: int) -> dict[tuple[int, ...], float]:
    """P(first n tokens) under the target restricted to the grammar, by enumeration."""
    out: dict[tuple[int, ...], float] = {}

    def walk(m, prev: int, prefix: tuple[int, ...], p: float) -> None:
        if len(prefix) == n or (prefix and prefix[-1] == EOG):
            out[prefix] = out.get(prefix, 0.0) + p
            return
        row = np.where(m.allowed(), t[prev], -np.inf)
        d = process(row, sp)
        for tok, q in zip(d.ids.tolist(), d.probs.tolist()):
            if q <= 0:
                continue
            f = m.fork()
            f.consume([tok])
            nxt = prefix + (tok,)
            if f.is_done() and tok != EOG:  # the round ends a complete answer with EOG at once
                nxt = nxt + (EOG,) if len(nxt) < n else nxt
            walk(f, tok, nxt, p * q)

    walk(GRAMMAR.matcher(), 1, (), 1.0)
    return out


@pytest.mark.parametrize("mode,aware", [("pq", True), ("match", True), ("coupled", True), ("pq", False)])
def test_sampled_constrained_spec_keeps_the_constrained_distribution(mode, aware):
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    t, d = _tables(2, noise=1.0)
    t = t * 0.5  # flatter, so many outputs are likely
    n = 14  # past the forced opening, into the value and the integer (48 outputs possible)
    exact = _exact(t, sp, n)
    keys = sorted(exact)
    counts = dict.fromkeys(keys, 0)
    trials = 4000
    c = Counters()
    for s in range(trials):
        got, _ = spec(t, d, sp=sp, k=3, n=n, mode=mode, seed=s, counters=c, aware=aware)
        key = tuple(got[:n])
        assert key in counts, f"an output the constrained target cannot produce: {key}"
        counts[key] += 1
    probs = np.array([exact[k] for k in keys])
    obs = np.array([counts[k] for k in keys], dtype=float)
    keep = probs * trials >= 5  # pool the rare outputs into one bin
    obs = np.append(obs[keep], obs[~keep].sum())
    probs = np.append(probs[keep], probs[~keep].sum())
    chi = float((((obs - probs * trials) ** 2) / np.maximum(probs * trials, 1e-9)).sum())
    df = len(obs) - 1
    crit = df + 3.1 * np.sqrt(2 * df) + 6  # ~ the 0.999 quantile for moderate df
    assert chi < crit, (chi, df)
    assert c.sources["draft"].drafted and (c.sources["grammar"].drafted > 0) == aware


def test_coupled_same_seed_same_text_as_no_spec():
    sp = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)
    for seed in range(30):
        t, d = _tables(seed % 5, noise=1.0)
        want = plain(t, sp=sp, mode="coupled", seed=seed)
        for k in (2, 5):
            got, _ = spec(t, d, sp=sp, k=k, mode="coupled", seed=seed, lookup=seed % 2 == 0)
            assert got == want, f"seed {seed} K={k}"


# -- rollback and batching ------------------------------------------------------------------------
def test_matcher_ends_each_round_where_the_sequence_does():
    t, d = _tables(7)
    target, draft = FakeContext(t, eog=frozenset({EOG})), FakeContext(d, eog=frozenset({EOG}))
    st = SeqState.start(
        0, [1], GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), FixedK(4),
        max_new=60, matcher=GRAMMAR.matcher(),
    )  # fmt: skip
    prefill(target, draft, st)
    while st.finish is None:
        decode_round(target, draft, [st])
        assert st.track.matcher.n_consumed == st.n_new
    assert st.finish == "stop"
    _valid(st.tokens[1:])


def _finish_alone(target, draft, k, seed=0):
    st = SeqState.start(
        0, [1], GREEDY, SpecConfig(), np.random.default_rng(seed), Counters(), FixedK(k),
        max_new=40, matcher=GRAMMAR.matcher(),
    )  # fmt: skip
    prefill(target, draft, st)
    while st.finish is None:
        decode_round(target, draft, [st])
    return st


@pytest.mark.parametrize("kind", ["attention", "rs"])
def test_a_grammar_the_targets_own_token_completes_leaves_no_rejected_draft_cached(kind):
    """The target rejects draft x_j, emits its own y_j, and y_j completes the grammar: the EOG the round
    then appends was never evaluated, so each cache keeps only the positions a decode evaluated with
    the emitted token - not x_j where y_j belongs (issue #45: 16 of these 160 runs kept it; an rs
    recurrent target too)."""
    ended_below = 0
    for k in (2, 3, 4, 6):
        for seed in range(40):
            t, d = _tables(seed)
            if kind == "rs":
                (rt, rc), _ = recurrent_tables(v=len(PIECES), seed=seed, scale=2.0)
                target = FakeRecurrentContext(rt, rc, n_rs=16, eog=frozenset({EOG}))
            else:
                target = FakeContext(t, eog=frozenset({EOG}))
            draft = FakeContext(d, eog=frozenset({EOG}))
            st = _finish_alone(target, draft, k)
            for ctx in (target, draft):
                past = ctx.past()
                assert list(ctx.cached_tokens()[:past]) == st.tokens[:past], f"K={k} seed {seed}"
            ended_below += target.past() < len(st.tokens) - 1  # the unverified EOG's case
    assert ended_below > 0


class ConstrainedJob(FakeJob):
    """A scheduler job under the toy schema (or `grammar`)."""

    def __init__(self, prompt, k, *, grammar=GRAMMAR, n=40):
        super().__init__(prompt, n=n, k=k)
        self.grammar = grammar

    def start(self, seq):
        return SeqState.start(
            seq, self.prompt, GREEDY, SpecConfig(), np.random.default_rng(0), self.counters, FixedK(self.k),
            max_new=self.n, speculative=self.k > 0, matcher=self.grammar.matcher() if self.grammar else None,
        )  # fmt: skip


def test_the_next_turn_on_a_reused_cache_equals_a_fresh_engines():
    """Rows that read the cache (as attention does): a request whose prompt extends a constrained
    one's prompt and answer (the chat's next turn, on the slot's cached prefix) gets what a fresh
    engine gives it (issue #45: 11 of 120 differed; research/round_invariants.py)."""

    def scheduler(seed: int) -> Scheduler:
        t, d = _tables(seed)
        ctx = np.random.default_rng(seed + 1000).normal(size=(7, len(PIECES))) * 2.0
        eog = frozenset({EOG})
        return Scheduler(AttentionContext(t, ctx, eog=eog), AttentionContext(d, ctx, eog=eog), 1)

    for k in (2, 3, 4):
        for seed in range(40):
            sched, fresh = scheduler(seed), scheduler(seed)
            first = ConstrainedJob([1], k)
            sched.add(first)
            drain(sched)
            prompt = [1, *first.got[:-1], 14, 15, 14]  # the answer, then the template's tail
            second, again = (ConstrainedJob(prompt, k, grammar=None, n=12) for _ in range(2))
            sched.add(second)
            drain(sched)
            fresh.add(again)
            drain(fresh)
            assert second.got == again.got, f"K={k} seed {seed}"


def test_batched_sequences_each_keep_their_own_constraint():
    other = compile_constraint(Constraint(kind="regex", text='(ab|ba){2,4}"}'), VOCAB)
    t, d = _tables(9)
    grammars = [GRAMMAR, other, None, GRAMMAR]
    alone = []
    for g in grammars:
        target = FakeContext(t, eog=frozenset({EOG}))
        c = Counters()
        m = g.matcher() if g else None
        steps = speculative_steps(
            target, FakeContext(d, eog=frozenset({EOG})), [1], GREEDY, SpecConfig(), np.random.default_rng(0),
            c, FixedK(3), max_new=30, matcher=m,
        )  # fmt: skip
        alone.append([s.token for s in steps])
    target = FakeContext(t, eog=frozenset({EOG}), n_seq=4)
    draft = FakeContext(d, eog=frozenset({EOG}), n_seq=4)
    states = [
        SeqState.start(
            i,
            [1],
            GREEDY,
            SpecConfig(),
            np.random.default_rng(0),
            Counters(),
            FixedK(3),
            max_new=30,
            matcher=g.matcher() if g else None,
        )  # fmt: skip
        for i, g in enumerate(grammars)
    ]
    for st in states:
        prefill(target, draft, st)
    while any(st.finish is None for st in states):
        decode_round(target, draft, states)
    assert [st.tokens[1:] for st in states] == alone
    assert TOY.text(alone[1]).endswith('"}')


def test_a_grammar_that_cannot_go_on_ends_with_an_error():
    # after "a" the grammar wants a byte no token spells: the request ends with a clear error
    stuck = compile_constraint(Constraint(kind="regex", text="a[qz]"), VOCAB)
    t, d = _tables(1)
    with pytest.raises(ConstraintStuck, match="cannot continue"):
        spec(t, d, grammar=stuck)


@pytest.mark.parametrize("draft", [True, False])
def test_a_grammar_complete_exactly_at_max_tokens_ends_there_without_an_eog(draft):
    """The EOG a complete grammar adds comes within max_tokens or not at all (it made usage say
    max_tokens + 1, finish stop; issue 60)."""
    for seed in range(4):
        t, d = _tables(seed)
        whole = spec(t, d if draft else None, n=40, lookup=not draft)[0]
        assert whole[-1] == EOG
        cut, _ = spec(t, d if draft else None, n=len(whole) - 1, lookup=not draft)
        assert cut == whole[:-1]  # the whole answer but its EOG: the limit ends it
        _valid(whole)
