"""The round's plan phase: for each running sequence, its budget (how many drafts the round may hold
for it), what each source can say for free before anything is decoded, and the K the controllers
choose together for the batch it shares (draft_len/batch.py)."""

from __future__ import annotations

from typing import Sequence

from localspec.decode.rows import constrained
from localspec.decode.seqplan import SeqPlan
from localspec.decode.sources import Sources
from localspec.decode.state import SeqState
from localspec.draft_len.batch import plan_batch
from localspec.draft_len.controller import Facts
from localspec.evaluator import Evaluator


def plan_round(
    target: Evaluator, draft: Evaluator | None, sources: Sources, live: Sequence[SeqState]
) -> list[SeqPlan]:
    """One plan per running sequence. Every source offers in order (the grammar drafts its forced
    run: it rides in the verify batch, so every plan is priced with it in front); a sequence that
    drafts (a draft model or a lookup to draft with) gets the K controller's plan."""
    plans = [_budget(target, st) for st in live]
    drafting, ctls, facts = [], [], []
    for p in plans:
        for src in sources.offering:
            src.offer(p)
        st = p.st
        if st.speculative and (draft is not None or _free_drafts(st)):
            p.facts = Facts(len(p.forced), p.offers, p.behind, p.left)
            drafting.append(p)
            ctls.append(st.k_ctl)
            facts.append(p.facts)
    for p, kplan in zip(drafting, plan_batch(ctls, facts)):
        p.kplan = kplan
    for p in plans:
        _take(p)
    return plans


def _free_drafts(st: SeqState) -> bool:
    """Whether a free source drafts for st (it opened its own state for it: sources/base.py)."""
    return any(mine is not None for mine in st.drafting.values())


def _budget(target: Evaluator, st: SeqState) -> SeqPlan:
    """Drafts, every source's, this round may hold for st: what the context has room for beyond
    tokens[-1], what max_new leaves, what the target's rollback can take back and what the
    request's cost bound allows. None on top of a restored snapshot: this round replays the kept
    tokens (drafting on top of a replay would put them back under a snapshot a rejection returns to)."""
    room = target.n_ctx - len(st.tokens)  # positions beyond tokens[-1] the verify batch may use
    left = st.max_new - st.n_new - 1 if st.max_new is not None else room  # to emit after the first
    max_draft = target.max_draft
    cap = min(room - 1, left, max_draft if max_draft is not None else room)
    if st.bound is not None:  # what the request's rounds may cost it (draft_len/cost_bound.py)
        cap = min(cap, st.bound.k_cap)
    replay = target.past(st.seq) < len(st.tokens) - 1
    return SeqPlan(st, 0 if replay else cap, replay, left, st.cfg.draft_p_min, st.cfg.draft_min)


def _take(p: SeqPlan) -> None:
    """The controller's plan as this round takes it: a forced run cut where a shorter batch costs
    less (the rest is forced again next round, and the offers past it go), and K within
    the budget left."""
    st, kplan = p.st, p.kplan
    if kplan is not None and not kplan.k and kplan.forced_take < len(p.forced):  # a cheaper batch size
        constrained(st, st.track.take_back, len(p.forced) - kplan.forced_take)
        p.forced, p.offers = p.forced[: kplan.forced_take], ()
    p.k = max(0, min(kplan.k if kplan is not None else 0, p.cap - len(p.forced)))
    p.total = len(p.forced) + p.k
