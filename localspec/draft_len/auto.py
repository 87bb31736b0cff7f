"""`--draft-max auto`: AutoK picks K to maximise expected tokens per second from online
measurements: per-position acceptance, the draft's per-token time and the target's verify time per
batch size (nearly flat on a GPU; steep and saw-toothed on a CPU, so it is measured per batch size,
with a line through the measurements only for sizes not yet seen). K = 0 means a plain target step.

The parts: its configuration (`AutoConfig`); the machine's costs (costs.py, one per engine, shared
by every controller); the acceptance evidence per source (evidence.py, one per request, forked from
the tuner's); the pricing of a round's plans (pricing.py, pure); the fall back to plain decoding
when the realised rate loses, and its re-probes (fallback.py); and this policy over them: probe
rounds, which plan to take, the draft's catch-up, exploration and retaking a stalled timing.

Free sources of drafts (the lookup, decode/lookup.py; the history) offer a match's continuation at
no draft cost. Each round's `Facts` carry their offers in order; the policy prices every plan - the
drafter alone, or an offer's tokens first with the drafter extending them - with acceptance learned
per source by its name (an offer's per match length, as its confidence), and picks the best plan
and K together. Batches of several sequences are priced in batch.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from localspec.draft_len.controller import Facts, Outcome, Plan
from localspec.draft_len.costs import Costs
from localspec.draft_len.evidence import LOOKUP_PRIORS, Evidence, lookup_bucket
from localspec.draft_len.fallback import Fallback
from localspec.draft_len.pricing import Pricing

PROBE_SHARE = 0.03  # a lost re-probe may cost this much of the plain stretch before it
MIN_REPROBE_GAP = 4  # plain steps, at least, between re-probes
CATCH_UP_FREE = 2  # a draft this many tokens behind catches up within its first draft step (round.py)
RETAKE_AFTER = 8  # rounds into speculating before a suspect plain timing is retaken (then 16, 32...)
# an unseen limit past this is a ceiling, not a length: an agent's "until the context ends" (Codex
# sends no limit; Claude Code asks 64000) priced Codex's first-turn catch-up over 24k tokens, and
# the draft caught up on 8641 prompt tokens (~110 s on a CPU) for a 121-token answer
UNSEEN_LIMIT_CAP = 1024


@dataclass(frozen=True)
class AutoConfig:
    k_max: int = 16
    k_min: int = 1
    prior_accept: float = 0.7  # before any evidence: a typical same-family pair
    prior_weight: float = 2.0
    # a match's next token is right this often before any evidence, by match-length bucket
    prior_lookup: tuple[float, ...] = LOOKUP_PRIORS
    has_model: bool = True  # False: offers only (--lookup only, no drafter)
    window: int = 16  # rounds over which the realised speculative rate is judged
    reprobe_after: int = 32  # plain steps before speculation is tried again, at most (see _reprobe_gap)
    decay: float = 0.95  # per-round forgetting of acceptance evidence (~20-round memory)
    explore_every: int = 32  # every Nth round tries a neighbour of the best K, so its cost stays measured
    min_evidence: float = 6.0  # drafted rounds (decayed) before the model may switch to plain: a few
    # unlucky first rounds, or one stalled calibration timing, must not cost a whole plain stretch

    def __post_init__(self) -> None:
        object.__setattr__(self, "k_min", min(max(1, self.k_min), self.k_max))


class AutoK:
    learns = True

    def __init__(
        self, *, costs: Costs | None = None, evidence: Evidence | None = None, **config: Any
    ) -> None:
        """`config`: AutoConfig's fields; `costs`: the engine's (new, to be probed, if not given)."""
        self.cfg = c = AutoConfig(**config)
        self.costs = costs if costs is not None else Costs.unmeasured(c.k_min, c.k_max)
        if evidence is None:
            evidence = Evidence(c.k_max, c.prior_accept, c.prior_weight, c.prior_lookup, c.decay)
        self.evidence = evidence
        self.fallback = Fallback(c.window)
        self._rounds = 0  # rounds observed (the explorer's clock)
        self._explores = 0
        self._seen_first = False  # the first round pays one-off costs (graph building): not a timing
        self._retake_at: int | None = None  # the round this request retakes a suspect plain timing at
        self._retake_gap = RETAKE_AFTER
        self.emitted = 0  # tokens this request's rounds emitted
        self.expected_len: float | None = None  # what requests like it generated (lengths.py)

    has_model = property(lambda self: self.cfg.has_model)
    k_min = property(lambda self: self.cfg.k_min)
    k_max = property(lambda self: self.cfg.k_max)
    fallbacks = property(lambda self: self.fallback.fallbacks)
    started_plain = property(lambda self: self.fallback.started_plain)
    plain_left = property(lambda self: self.fallback.plain_left)

    def fork(self) -> "AutoK":
        """A controller for one more request on the same pair: the same costs (they belong to the
        machine, and concurrent requests measure the same batch costs) and this one's acceptance
        evidence at a quarter weight (the new text may draft better or worse)."""
        c = AutoK(costs=self.costs, evidence=self.evidence.scaled(0.25), **vars(self.cfg))
        c._seen_first, c._rounds, c._explores = self._seen_first, self._rounds, self._explores
        c.fallback.predict_start = not self.costs.probe  # costs known (primed, or probed once)
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
        self.fallback.predict_start = True

    # -- what it believes -----------------------------------------------------------------------
    def pricing(self, facts: Facts) -> Pricing:
        c = self.cfg
        return Pricing(c.k_min, c.k_max, c.has_model, self.costs, self.evidence, facts)

    def best_k(self, facts: Facts | None = None) -> int:
        """The K the costs and evidence price best (as if speculation were on)."""
        return self.pricing(facts or Facts()).best_plan()[0]

    def expected_rate(self, k: int, facts: Facts | None = None) -> float:
        """Tokens per second a round of K drafts by the draft model is priced at."""
        return self.pricing(facts or Facts()).expected_rate(k, None)

    def accept_probs(self) -> np.ndarray:
        return self.evidence.accept_probs()

    def verify_time(self, n: int) -> float:
        return self.costs.verify_time(n)

    def expected_tokens(self, facts: Facts, plan: Plan, k: int) -> float:
        return self.pricing(facts).expected_tokens(k, plan.lead)

    def model_tokens(self, facts: Facts, plan: Plan, k: int) -> int:
        return self.pricing(facts).model_tokens(k, plan.lead)

    # -- plan -----------------------------------------------------------------------------------
    def plan(self, facts: Facts) -> Plan:
        """This round's K and plan. A grammar's forced run rides in the batch whatever K is; where
        no drafts beat taking only part of it (a cheaper batch size), the rest waits a round."""
        price = self.pricing(facts)
        k, lead = self._choose(price)
        if facts.n_forced and not self.costs.probe:
            take, rate = price.best_cut()
            if k == 0 or rate > price.expected_rate(k, lead):
                return Plan(0, None, take)
        return Plan(k, lead, facts.n_forced)

    def _choose(self, price: Pricing) -> tuple[int, str | None]:
        """(K, lead) before the forced run's cut."""
        if self.costs.probe:  # a few probe rounds measure the costs before the model is trusted
            return self.costs.probe.pop(0), None
        if self.fallback.plain_step():
            return self._offer_or_plain(price, None)
        k, lead = price.best_plan()
        if k == 0:  # nothing to draft with (offers only, and none this round)
            return 0, lead
        first, self.fallback.predict_start = self.fallback.predict_start, False
        if first and price.expected_rate(k, lead) < price.expected_rate(0, None):
            self.fallback.start_plain(self._reprobe_gap())
            return self._offer_or_plain(price, lead)
        if self.fallback.reprobe and self.has_model:
            return self._reprobe(price)
        if price.expected_rate(k, lead) < price.expected_rate(0, None):
            # the evidence gate guards a request's first rounds; after a fallback, or a start the
            # costs predicted plain, this request has judged the model once already, and a re-probe
            # that loses falls back at once
            judged = self.fallbacks or self.started_plain
            if self.has_model and (self.evidence.tried[0] >= self.cfg.min_evidence or judged):
                self.fallback.fall_back(self._reprobe_gap())
                return self._offer_or_plain(price, lead)
            if lead is not None or not self.has_model:  # this round's offer cannot pay: a plain step
                return 0, None
            # else: too little evidence to judge the draft model yet; its best K keeps measuring
        if not self._catch_up_pays(price, k, lead):  # the draft model was never judged here
            return self._offer_or_plain(price, lead)
        self.fallback.stretch = 1  # speculation pays again: the next fallback re-probes soon
        if self._retake_plain_now():
            return 0, None
        if lead is None and self._rounds and self._rounds % self.cfg.explore_every == 0:
            return self._explore(k), None
        return k, lead

    def _reprobe(self, price: Pricing) -> tuple[int, str | None]:
        """One real round after a fallback, at the K measured longest ago: fresh evidence where the
        estimate is stalest. The stretch moved the text on as far as its steps' rounds would have:
        the misses that caused the fallback fade as those rounds' would, or one kept re-probe could
        never outweigh them (a reply whose first tokens the draft misses stays plain)."""
        self.fallback.reprobe = False
        self.evidence.age_model(self.cfg.decay**self.fallback.stretch_len)
        k, lead = price.best_plan(offers=False)  # can win speculation back
        if not self._catch_up_pays(price, k, lead, probe=True):  # too little left to repay it
            self.fallback.start_stretch(self._reprobe_gap())
            return self._offer_or_plain(price, lead)
        return self._stalest(range(self.cfg.k_min, k + 1), k), lead

    def _offer_or_plain(self, price: Pricing, lead: str | None) -> tuple[int, str | None]:
        """While the drafter sits out, an offer may still pay on its own (it costs no draft time):
        its best K if that beats a plain step, else 0."""
        k, alone = price.best_plan(model=False)
        if k and price.expected_rate(k, alone) > price.expected_rate(0, None):
            return k, alone
        return 0, lead

    def _catch_up_pays(self, price: Pricing, k: int, lead: str | None, *, probe: bool = False) -> bool:
        """Whether drafting with the model at K can repay the draft's catch-up (its prompt pass, on
        a request's first model draft): the seconds its expected rate saves over the best plan
        without it (the lookup's or plain), for every token the request may still emit, against the
        catch-up's measured seconds. A short request whose drafts gain little stays without it. A
        re-probe is exploration: it is judged by what drafts that were all kept would save, so only
        one that could not pay even then is skipped."""
        f = price.facts
        if not self.has_model or f.behind <= CATCH_UP_FREE or f.left is None:
            return True
        left = self._expected_left(f.left)
        if not price.model_tokens(k, lead):
            return True
        per_token = self.costs.t_catch.value
        if per_token is None:  # not measured yet: the first catch-up measures it
            return True
        alt_k, alone = price.best_plan(model=False)
        alt = max(price.expected_rate(0, None), price.expected_rate(alt_k, alone) if alt_k else 0.0)
        rate = price.all_kept_rate() if probe else price.expected_rate(k, lead)
        saved = left * (1.0 / alt - 1.0 / rate)
        return saved > f.behind * per_token

    def _expected_left(self, left: int) -> float:
        """Tokens this request should still emit: `left` (what its max_tokens allows, at most
        UNSEEN_LIMIT_CAP while no request that asked the same has ended), or fewer where requests
        that asked the same max_tokens ended sooner (an editor's completion: 128 asked, 20
        written). A short answer cannot repay a long prompt's catch-up."""
        if self.expected_len is None:
            return min(left, UNSEEN_LIMIT_CAP)
        return min(left, max(self.expected_len - self.emitted, 1.0))

    def _reprobe_gap(self) -> int:
        """The first stretch's plain steps: long enough that a re-probe which loses (one drafted
        token, rejected) costs the stretch at most PROBE_SHARE of its time. On a flat GPU curve that
        is a few steps, so a reply whose draft turns good after a bad opening is not left plain for
        32 steps; on a steep CPU curve, where a lost probe costs a whole plain step, it is 32. (The
        draft's catch-up on the stretch grows with it: the same share at any length.)"""
        plain = self.costs.verify_time(1)
        loss = (self.costs.t_draft.value or 0.0) + self.costs.verify_time(2) - plain
        if plain <= 0 or not self.has_model:
            return self.cfg.reprobe_after
        gap = math.ceil(max(loss, 0.0) / (PROBE_SHARE * plain))
        return min(max(gap, MIN_REPROBE_GAP), self.cfg.reprobe_after)

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

    # -- observe --------------------------------------------------------------------------------
    def observe(self, o: Outcome) -> None:
        """Learn from one round: its costs (alone in the batch, or the batch's shared verify) and
        the acceptance of its drafts; a window of them against the plain rate; each unused offer's
        worth, judged against the output (without this, a match-length bucket that one early miss
        put below the drafter would never be tried again)."""
        bucket = lookup_bucket(o.lead_confidence)
        self.emitted += o.n_emitted
        if o.catch_tokens:  # the round's catch-up decode, timed (round.py runs one only for a real lag)
            self.costs.t_catch.add(o.catch_s / o.catch_tokens)
        if o.replay:  # it re-evaluated what a snapshot rollback undid: speculation's cost
            self._judge(o.n_emitted, o.round_s)
        if o.batch_tokens is None or o.batch_tokens == o.n_drafted + o.n_forced + 1:
            self._observe_alone(o, bucket)
        else:
            self._observe_shared(o, bucket)
        for j in o.judged:
            if j.checked and (b := lookup_bucket(j.confidence)) >= 0:
                self.evidence.learn_offer(j.source, b, j.checked, j.kept)

    def _observe_alone(self, o: Outcome, bucket: int) -> None:
        self._rounds += 1
        if self._seen_first:
            self.costs.add_verify(o.n_drafted + o.n_forced + 1, o.verify_s, self._rounds)
            self.costs.t_overhead.add(max(o.round_s - o.draft_s - o.verify_s, 0.0))
            if o.n_drafted > o.n_offered:
                self.costs.t_draft.add(o.draft_s / (o.n_drafted - o.n_offered))
        self._seen_first = True
        if o.n_drafted == 0:
            return
        self.evidence.learn(o.n_drafted, o.n_accepted, o.n_offered, o.lead, bucket)
        if o.n_offered or o.n_forced:  # an offer's plan is judged each round by its match's own evidence;
            return  # the window is the drafter's verdict, not swayed by short matches' misses
            # or by the grammar's free tokens (a plain round takes those too)
        self._judge(o.n_emitted, o.round_s)

    def _observe_shared(self, o: Outcome, bucket: int) -> None:
        """A round shared with other sequences: the verify time belongs to the whole batch (each of
        its sequences reports the same one, kept once), acceptance to this sequence; the realised-rate
        fallback is a single-stream judgement and is not applied."""
        self._rounds += 1
        floor = self.costs.verify.get(o.batch_tokens)
        if self._seen_first and (floor is None or not floor.samples or floor.samples[-1] != o.verify_s):
            self.costs.add_verify(o.batch_tokens, o.verify_s, self._rounds)
        self._seen_first = True
        if o.n_drafted:
            self.evidence.learn(o.n_drafted, o.n_accepted, o.n_offered, o.lead, bucket)

    def _judge(self, n_emitted: int, round_s: float) -> None:
        """The realised-rate fallback: a window of drafted rounds against the mean plain step."""
        plain = self.costs.verify.get(1)
        plain_s = plain.mean + (self.costs.t_overhead.value or 0.0) if plain is not None else None
        if self.fallback.losing(n_emitted, round_s, plain_s):
            self.fallback.fall_back(self._reprobe_gap())
