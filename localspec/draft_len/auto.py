"""`--draft-max auto`: AutoK picks K to maximise expected tokens per second from online
measurements: per-position acceptance a_i, the draft's per-token time t_d and the target's verify
time T(n) for a batch of n tokens (nearly flat on a GPU; steep and saw-toothed on a CPU, so it is
measured per batch size, with a line through the measurements only for sizes not yet seen):

    rate(K) = (1 + sum_{k<=K} prod_{i<=k} a_i) / (K * t_d + T(K + 1) + o)

where o is the per-round overhead. K = 0 means a plain target step. When the measured speculative
rate over a window falls below the measured plain rate, AutoK falls back to plain decoding and
re-probes later.

The parts: the machine's costs (costs.py, one per engine, shared by every controller), the
acceptance evidence per source (evidence.py, one per request, forked from the tuner's), and this
policy: probe rounds, the fall back to plain and its re-probes, exploration. Batches of several
sequences are priced in batch.py.

A second source of drafts, the lookup (lookup.py), proposes a match's continuation at no draft
cost. Each round the sequence `offer`s what its lookup found; the controller then prices both plans -
the draft model alone, or the lookup's tokens first with the draft model extending them - with
acceptance learned per source (the lookup's per match length, as its confidence), and picks the best
plan and K together.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from localspec.draft_len.costs import Costs
from localspec.draft_len.evidence import LOOKUP_PRIORS, Evidence, lookup_bucket

PROBE_SHARE = 0.03  # a lost re-probe may cost this much of the plain stretch before it
MIN_REPROBE_GAP = 4  # plain steps, at least, between re-probes
CATCH_UP_FREE = 2  # a draft this many tokens behind catches up within its first draft step (round.py)
RETAKE_AFTER = 8  # rounds into speculating before a suspect plain timing is retaken (then 16, 32...)


@dataclass
class AutoK:
    k_max: int = 16
    k_min: int = 1
    prior_accept: float = 0.7  # before any evidence: a typical same-family pair
    prior_weight: float = 2.0
    # a match's next token is right this often before any evidence, by match-length bucket
    prior_lookup: tuple[float, ...] = LOOKUP_PRIORS
    has_model: bool = True  # False: lookup drafts only (--lookup only, no draft model)
    window: int = 16  # rounds over which the realised speculative rate is judged
    reprobe_after: int = 32  # plain steps before speculation is tried again, at most (see _reprobe_gap)
    decay: float = 0.95  # per-round forgetting of acceptance evidence (~20-round memory)
    explore_every: int = 32  # every Nth round tries a neighbour of the best K, so its cost stays measured
    min_evidence: float = 6.0  # drafted rounds (decayed) before the model may switch to plain: a few
    # unlucky first rounds, or one stalled calibration timing, must not cost a whole plain stretch
    costs: Costs = field(default=None)  # type: ignore[assignment]  # the engine's; new if not given
    evidence: Evidence = field(default=None)  # type: ignore[assignment]
    # per request ------------------------------------------------------------------------------
    lookup_first: bool = False  # this round's plan: the lookup's tokens first, the model extends them
    _n_lookup: int = 0  # what this round's lookup offers: tokens, and its match's bucket
    _bucket: int = -1
    # this round's leading run of tokens the grammar forces: drafted free and kept with certainty, but
    # they ride in the verify batch, so every plan is priced with them in front
    n_forced: int = 0
    forced_take: int = 0  # of them, how many the plan puts in this round's batch (the rest: next round)
    recent: deque = field(default_factory=lambda: deque(maxlen=8))
    plain_left: int = 0
    fallbacks: int = 0
    _reprobe: bool = False
    _seen_first: bool = False
    _rounds: int = 0
    _explores: int = 0
    _predict_start: bool = False  # primed: a request's first choice may be "plain" outright
    _stretch: int = 1  # plain stretches between re-probes grow while speculation keeps losing
    _stretch_len: int = 0  # plain steps in the current stretch
    started_plain: bool = False  # this request began plain because speculation was predicted to lose
    behind: int = 0  # tokens the draft model must catch up on before it drafts (offer_lag)
    left: int | None = None  # tokens this request may still emit (None: unknown)
    _retake_at: int | None = None  # the round this request retakes a suspect plain timing at
    _retake_gap: int = RETAKE_AFTER

    def __post_init__(self) -> None:
        self.k_min = min(max(1, self.k_min), self.k_max)
        if self.costs is None:
            self.costs = Costs.unmeasured(self.k_min, self.k_max)
        if self.evidence is None:
            self.evidence = Evidence(
                self.k_max, self.prior_accept, self.prior_weight, self.prior_lookup, self.decay
            )
        self.recent = deque(maxlen=self.window)

    def fork(self) -> "AutoK":
        """A controller for one more request on the same pair: the same costs (they belong to the
        machine, and concurrent requests measure the same batch costs) and this one's acceptance
        evidence at a quarter weight (the new text may draft better or worse)."""
        c = AutoK(
            k_max=self.k_max,
            k_min=self.k_min,
            prior_accept=self.prior_accept,
            prior_weight=self.prior_weight,
            window=self.window,
            reprobe_after=self.reprobe_after,
            decay=self.decay,
            explore_every=self.explore_every,
            prior_lookup=self.prior_lookup,
            has_model=self.has_model,
            costs=self.costs,
            evidence=self.evidence.scaled(0.25),
        )
        c._seen_first, c._rounds, c._explores = self._seen_first, self._rounds, self._explores
        c._predict_start = not self.costs.probe  # costs known (primed, or probed once): start predicted
        return c

    def absorb(self, other: "AutoK") -> None:
        """Take a finished request's acceptance evidence back (the next fork starts from it)."""
        self.evidence.take(other.evidence)
        self._seen_first = self._seen_first or other._seen_first
        self._rounds, self._explores = max(self._rounds, other._rounds), max(self._explores, other._explores)

    def prime(
        self,
        verify: dict[int, float] | None = None,
        draft_s: float | None = None,
        acc: Sequence[float] = (),
        tried: Sequence[float] = (),
    ) -> None:
        """Start from known costs (calibrated at load, or remembered; None: already in the shared
        `costs`) and, when remembered, acceptance evidence: no probe rounds, the first round runs at
        the best K they predict. Remembered evidence enters at full weight here: each request's
        `fork` takes it at a quarter, as it does between requests of one process."""
        if verify is not None:
            self.costs.prime(verify, draft_s)
        self.evidence.prime(acc, tried)
        self.costs.probe = []
        self._seen_first = True  # the known timings already exclude first-use costs
        self._predict_start = True

    # -- model --------------------------------------------------------------------------------
    def accept_probs(self) -> np.ndarray:
        return self.evidence.accept_probs()

    def verify_time(self, n: int) -> float:
        return self.costs.verify_time(n)

    def offer(self, n_lookup: int, match_len: int) -> None:
        """What this round's lookup proposes: n_lookup tokens from a match of match_len tokens."""
        self._n_lookup = n_lookup if match_len > 0 else 0
        self._bucket = lookup_bucket(match_len) if self._n_lookup else -1

    def offer_forced(self, n: int) -> None:
        """The grammar forces the next n tokens (a constrained request; 0 otherwise)."""
        self.n_forced = self.forced_take = n

    def offer_lag(self, behind: int, left: int) -> None:
        """The draft model's cache is `behind` tokens behind the text (its prompt, before its first
        draft; a plain stretch's tokens), and the request may emit `left` more tokens."""
        self.behind, self.left = behind, left

    def _plan(self, lookup_first: bool | None) -> bool:
        return self.lookup_first if lookup_first is None else lookup_first

    def model_tokens(self, k: int, lookup_first: bool | None = None) -> int:
        """Of K drafts, how many the draft model makes (the rest come from the lookup)."""
        return k - min(k, self._n_lookup) if self._plan(lookup_first) else k

    def expected_tokens(self, k: int, lookup_first: bool | None = None) -> float:
        """Tokens one round with K drafts emits, on average (the target's own token included)."""
        if k <= 0:
            return 1.0 + self.n_forced
        return 1.0 + self.n_forced + float(np.cumprod(self._plan_probs(self._plan(lookup_first))[:k]).sum())

    def expected_rate(self, k: int, lookup_first: bool | None = None) -> float:
        o = self.costs.t_overhead.value or 0.0
        f = self.n_forced
        if k == 0:
            return (1.0 + f) / (self.verify_time(1 + f) + o)
        draft_s = self.model_tokens(k, lookup_first) * (self.costs.t_draft.value or 0.0)
        replay = 0.0
        if self.costs.replay:
            reach = np.cumprod(self._plan_probs(self._plan(lookup_first)))[:k]
            replay = float(self.costs.replay_cost(reach, self.costs.curve(self.k_max + f))[k - 1])
        return self.expected_tokens(k, lookup_first) / (draft_s + self.verify_time(f + k + 1) + o + replay)

    def _plans(self, sources: str) -> list[tuple[int, bool]]:
        """(K, lookup first) candidates. sources: both; model (the draft model alone); lookup (the
        lookup's tokens alone, no draft model time)."""
        model = self.has_model and sources != "lookup"
        plans = [(k, False) for k in range(self.k_min, self.k_max + 1)] if model else []
        if self._n_lookup and sources != "model":
            top = self.k_max if model else min(self._n_lookup, self.k_max)
            plans += [(k, True) for k in range(self.k_min if model else 1, top + 1)]
        return plans

    def _plan_probs(self, lookup_first: bool) -> np.ndarray:
        """Acceptance by draft position (up to k_max) of a plan: the lookup's first, when it leads."""
        probs = self.evidence.accept_probs()
        if not lookup_first:
            return probs
        n = min(self._n_lookup, self.k_max)
        return np.concatenate([self.evidence.lookup_probs(self._bucket)[:n], probs[: self.k_max - n]])

    def _rates(self, lookup_first: bool, curve: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """expected_rate for K = 1..k_max at once (this runs every round: no Python loop over K);
        `probs`: acceptance by position in place of the plan's evidence."""
        k = np.arange(1, self.k_max + 1)
        model = np.maximum(k - self._n_lookup, 0) if lookup_first else k
        reach = np.cumprod(self._plan_probs(lookup_first) if probs is None else probs)
        f = self.n_forced
        tokens = 1.0 + f + np.cumsum(reach)
        t_d, o = self.costs.t_draft.value or 0.0, self.costs.t_overhead.value or 0.0
        cost = model * t_d + curve[f + k + 1] + o
        return tokens / (cost + self.costs.replay_cost(reach, curve))

    def best_plan(self, sources: str = "both") -> tuple[int, bool]:
        """(K, lookup first) with the highest expected tokens per second; (0, False) when none."""
        plans = self._plans(sources)
        if not plans:
            return 0, False
        curve = self.costs.curve(self.k_max + self.n_forced)
        rates = {lf: self._rates(lf, curve) for lf in {lf for _, lf in plans}}
        return max(plans, key=lambda p: rates[p[1]][p[0] - 1])

    def best_k(self) -> int:
        k, self.lookup_first = self.best_plan()
        return k

    # -- protocol -----------------------------------------------------------------------------
    def choose(self) -> int:
        k = self._choose_k()
        if self.n_forced and not self.costs.probe:
            take, rate = self._best_cut()
            if k == 0 or rate > self.expected_rate(k):
                self.forced_take, self.lookup_first = take, False
                return 0
        return k

    def _best_cut(self) -> tuple[int, float]:
        """(forced tokens to take, the rate) of the best plan without drafts: all of the forced run,
        or only its first t where a batch of t + 1 tokens costs less per token (a saw-toothed CPU
        curve). Either way t + 1 tokens come out: the target's token after the last one taken."""
        o = self.costs.t_overhead.value or 0.0
        curve = self.costs.curve(self.n_forced)
        t = np.arange(self.n_forced + 1)
        rates = (t + 1) / (curve[t + 1] + o)
        best = int(np.argmax(rates))
        return best, float(rates[best])

    def _choose_k(self) -> int:
        self.lookup_first = False
        if self.costs.probe:  # a few probe rounds measure the costs before the model is trusted
            return self.costs.probe.pop(0)
        if self.plain_left > 0:
            self.plain_left -= 1
            self._reprobe = self.plain_left == 0
            return self._lookup_or_plain()
        k = self.best_k()
        if k == 0:  # nothing to draft with (lookup only, and no match this round)
            return 0
        first, self._predict_start = self._predict_start, False
        if first and self.expected_rate(k) < self.expected_rate(0):
            self.started_plain = True  # said once in the stats, instead of a "fallback"
            self._plain_stretch()
            return self._lookup_or_plain()
        if self._reprobe and self.has_model:  # one real round after a fallback, at the K measured
            self._reprobe = False  # longest ago: fresh evidence where the estimate is stalest
            # the stretch moved the text on as far as its steps' rounds would have: the misses
            # that caused the fallback fade as those rounds' would, or one kept re-probe could
            # never outweigh them (a reply whose first tokens the draft misses stays plain)
            self.evidence.age_model(self.decay**self._stretch_len)
            k, self.lookup_first = self.best_plan("model")  # can win speculation back
            if not self._catch_up_pays(k, probe=True):  # too little of the request left to repay it
                self._plain_stretch()
                return self._lookup_or_plain()
            return self._stalest(range(self.k_min, k + 1), k)
        if self.expected_rate(k) < self.expected_rate(0):
            # the evidence gate guards a request's first rounds; after a fallback, or a start the
            # costs predicted plain, this request has judged the model once already, and a re-probe
            # that loses falls back at once
            judged = self.fallbacks or self.started_plain
            if self.has_model and (self.evidence.tried[0] >= self.min_evidence or judged):
                self._fall_back()
                return self._lookup_or_plain()
            if self.lookup_first or not self.has_model:  # this round's lookup cannot pay: a plain step
                self.lookup_first = False
                return 0
            # else: too little evidence to judge the draft model yet; its best K keeps measuring
        if not self._catch_up_pays(k):  # not a fallback: the draft model was never judged here
            return self._lookup_or_plain()
        self._stretch = 1  # speculation pays again: the next fallback re-probes soon
        if self._retake_plain_now():
            self.lookup_first = False
            return 0
        if not self.lookup_first and self._rounds and self._rounds % self.explore_every == 0:
            return self._explore(k)
        return k

    def _catch_up_pays(self, k: int, *, probe: bool = False) -> bool:
        """Whether drafting with the model at K can repay the draft's catch-up (its prompt pass, on
        a request's first model draft): the seconds its expected rate saves over the best plan
        without it (the lookup's or plain), for every token the request may still emit, against the
        catch-up's measured seconds. A short request whose drafts gain little stays without it. A
        re-probe is exploration: it is judged by what drafts that were all kept would save, so only
        one that could not pay even then is skipped."""
        if (
            not self.has_model
            or self.behind <= CATCH_UP_FREE
            or self.left is None
            or not self.model_tokens(k)
        ):
            return True
        per_token = self.costs.t_catch.value
        if per_token is None:  # not measured yet: the first catch-up measures it
            return True
        alt_k, _ = self.best_plan("lookup")
        alt = max(self.expected_rate(0), self.expected_rate(alt_k, True) if alt_k else 0.0)
        rate = self._all_kept_rate() if probe else self.expected_rate(k)
        saved = self.left * (1.0 / alt - 1.0 / rate)
        return saved > self.behind * per_token

    def _retake_plain_now(self) -> bool:
        """Whether this round is a plain step to retake the plain step's timing: every plan is priced
        against it, and no speculative round measures it. One above a 2-token verify's is a stall (a
        single token never costs more than two; another process was busy when it was taken, as at
        load), and priced against it every draft looks cheap for good: a CI machine kept a never-kept
        MTP head drafting. It is retaken RETAKE_AFTER rounds in, and while it stays above, at doubling
        intervals (a retake can stall too). Milder staleness is the explorer's (`_explore`)."""
        t1, t2 = self.costs.measured(1), self.costs.measured(2)
        if t1 is None or t2 is None or t1 <= t2:
            return False
        if self._retake_at is None:
            self._retake_at = self._rounds + self._retake_gap
        if self._rounds < self._retake_at:
            return False
        self._retake_gap *= 2
        self._retake_at = self._rounds + self._retake_gap
        return True

    def _all_kept_rate(self) -> float:
        """The draft model's rate at its best K if it drafted every token right."""
        curve = self.costs.curve(self.k_max + self.n_forced)
        return float(self._rates(False, curve, np.ones(self.k_max)).max())

    def _lookup_or_plain(self) -> int:
        """While the draft model sits out, a lookup match may still pay on its own (it costs no
        draft time): its best K if that beats a plain step, else 0."""
        k, _ = self.best_plan("lookup")
        if k and self.expected_rate(k, True) > self.expected_rate(0):
            self.lookup_first = True
            return k
        return 0

    def _explore(self, best: int) -> int:
        """In turn: whichever of the two K above the best was measured longer ago (a hill climb for
        flat GPU verify curves that can step over a bad batch size on a saw-toothed CPU curve), and
        the smaller K, or the plain step, measured longest ago (so a timing a one-off stall left too
        high is retaken; every plan is priced against the plain step, and only a plain step retakes it)."""
        self._explores += 1
        if self._explores % 2 and best < self.k_max:
            return self._stalest(range(best + 1, min(best + 2, self.k_max) + 1), best)
        return self._stalest([0, *range(self.k_min, best)], best)

    def _stalest(self, ks: Sequence[int], best: int) -> int:
        return min(ks, key=lambda j: (self.costs.seen_at.get(j + 1, -1), abs(best - j)))

    def _fall_back(self) -> None:
        self.fallbacks += 1
        self._plain_stretch()
        self.recent.clear()

    def _plain_stretch(self) -> None:
        """Plain rounds before the next re-probe: a re-probe is not free (the draft first catches up
        on every token since it last drafted), so each one that finds speculation still losing
        doubles the wait, up to 16x."""
        self.plain_left = self._stretch_len = self._reprobe_gap() * self._stretch - 1
        self._stretch = min(2 * self._stretch, 16)

    def _reprobe_gap(self) -> int:
        """The first stretch's plain steps: long enough that a re-probe which loses (one drafted
        token, rejected) costs the stretch at most PROBE_SHARE of its time. On a flat GPU curve that
        is a few steps, so a reply whose draft turns good after a bad opening is not left plain for
        32 steps; on a steep CPU curve, where a lost probe costs a whole plain step, it is 32. (The
        draft's catch-up on the stretch grows with it: the same share at any length.)"""
        plain = self.verify_time(1)
        loss = (self.costs.t_draft.value or 0.0) + self.verify_time(2) - plain
        if plain <= 0 or not self.has_model:
            return self.reprobe_after
        gap = math.ceil(max(loss, 0.0) / (PROBE_SHARE * plain))
        return min(max(gap, MIN_REPROBE_GAP), self.reprobe_after)

    def observe(
        self,
        *,
        k: int,
        n_drafted: int,
        n_accepted: int,
        n_emitted: int,
        draft_s: float,
        verify_s: float,
        round_s: float,
        batch_tokens: int | None = None,
        n_lookup: int = 0,
        n_forced: int = 0,
        replay: bool = False,
        catch_tokens: int = 0,
        catch_s: float = 0.0,
    ) -> None:
        """One round's outcome; `batch_tokens` is the verify batch's size over every sequence in it
        (None or n_drafted + n_forced + 1 when this sequence was alone); the first `n_lookup` drafts
        came from the lookup (at no draft time), the rest from the draft model, and `n_forced` more
        tokens of the batch were the grammar's (free, and not this controller's to learn from). A
        `replay` round re-evaluated what a snapshot rollback undid: speculation's cost, so it counts
        in the realised rate. Before drafting, the draft caught up on `catch_tokens` tokens in
        `catch_s` seconds (its share of the round's catch-up decode; not in `round_s`)."""
        if catch_tokens:  # the round's catch-up decode, timed (round.py runs one only for a real lag)
            self.costs.t_catch.add(catch_s / catch_tokens)
        if replay:
            self._judge(n_emitted, round_s)
        alone = batch_tokens is None or batch_tokens == n_drafted + n_forced + 1
        if not alone:
            self._observe_shared(n_drafted, n_accepted, verify_s, batch_tokens, n_lookup)
            return
        self._rounds += 1
        if self._seen_first:  # the first round pays one-off costs (graph building): not a timing
            self.costs.add_verify(n_drafted + n_forced + 1, verify_s, self._rounds)
            self.costs.t_overhead.add(max(round_s - draft_s - verify_s, 0.0))
            if n_drafted > n_lookup:
                self.costs.t_draft.add(draft_s / (n_drafted - n_lookup))
        self._seen_first = True
        if n_drafted == 0:
            return
        self._learn_acceptance(n_drafted, n_accepted, n_lookup)
        if n_lookup or n_forced:  # a lookup plan is judged each round by its match's own evidence;
            return  # the window below is the draft model's verdict, not swayed by short matches' misses
            # or by the grammar's free tokens (a plain round takes those too)
        self._judge(n_emitted, round_s)

    def _judge(self, n_emitted: int, round_s: float) -> None:
        """The realised-rate fallback: a window of drafted rounds against the plain rate."""
        self.recent.append((n_emitted, round_s))
        plain = self.costs.verify.get(1)
        if len(self.recent) == self.recent.maxlen and plain:
            toks = sum(n for n, _ in self.recent)
            secs = sum(s for _, s in self.recent)
            # like with like: realised rounds (stalls included) against the mean plain step, not its
            # floor; a 10% margin, as a 16-round window is noisy and the model already judges close calls
            self.recent.clear()  # windows do not overlap: one verdict per window, not a test per round
            if toks / secs < 0.9 / (plain.mean + (self.costs.t_overhead.value or 0.0)):
                self._fall_back()

    def _observe_shared(
        self, n_drafted: int, n_accepted: int, verify_s: float, batch_tokens: int, n_lookup: int
    ) -> None:
        """A round shared with other sequences: the verify time belongs to the whole batch (each of
        its sequences reports the same one, kept once), acceptance to this sequence; the realised-rate
        fallback is a single-stream judgement and is not applied."""
        self._rounds += 1
        floor = self.costs.verify.get(batch_tokens)
        if self._seen_first and (floor is None or not floor.samples or floor.samples[-1] != verify_s):
            self.costs.add_verify(batch_tokens, verify_s, self._rounds)
        self._seen_first = True
        if n_drafted:
            self._learn_acceptance(n_drafted, n_accepted, n_lookup)

    def observe_unused_offer(self, n_checked: int, n_kept: int) -> None:
        """A round that did not use the lookup's proposal still shows what it was worth: its first
        n_checked tokens set against the n_checked tokens the round emitted, the first n_kept of
        them equal. An emitted token is the target's own choice (greedy; coupled sampling's noise
        pick; or, marginally, a sample from p), so equality is what verifying the proposal would
        have found (for a sample: with probability p(x), as the one-point p/q rule keeps it).
        Without this, a match-length bucket that one early miss put below the draft model would
        never be tried again."""
        if n_checked and self._bucket >= 0:
            self.evidence.learn_lookup(self._bucket, n_checked, n_kept)

    def _learn_acceptance(self, n_drafted: int, n_accepted: int, n_lookup: int = 0) -> None:
        self.evidence.learn(n_drafted, n_accepted, n_lookup, self._bucket)
