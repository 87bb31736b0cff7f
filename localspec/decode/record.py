"""The round's record phase, the only one that touches stats: each sequence's counters (drafted and
accepted per position and per source, draft, verify and sample time, K) and what its K controller
learns from the round (`Outcome`: the drafts each source's evidence covers, per the registered
sources' specs)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from localspec.decode.clock import Clock
from localspec.decode.seqplan import SeqPlan, offered
from localspec.decode.settle import Verdict
from localspec.decode.sources import Sources
from localspec.decode.state import SeqState, Step
from localspec.draft_len.controller import Judged, Offer, Outcome
from localspec.draft_len.cost_bound import round_charge


def record_prefill(filling: Sequence[SeqState], prefilled: Sequence[int], seconds: float) -> None:
    """The prompt chunks of the sequences still prefilling: their tokens and the round's time."""
    for st, n in zip(filling, prefilled):
        st.counters.n_prefilled += n
        st.counters.prefill_s += seconds


class Shared(NamedTuple):
    """The round's times every sequence shares (seconds), taken once per round."""

    draft: float  # drafting, less a catch-up charged as prefill
    draft_wall: float  # drafting with it (the trace's draft_ms)
    verify: float
    llama: float  # inside the decodes: the verify and the draft steps
    decodes: float  # from the round's start to the verify's end
    catch: float  # the draft's catch-up (charged as prefill) ...
    per_token: float  # ... per token caught up on
    batch_tokens: int  # the verify batch's size over every sequence
    longest: int  # the draft loop's steps: its decodes


def record(
    plans: Sequence[SeqPlan], verdicts: Sequence[Verdict], clock: Clock, batch_tokens: int, sources: Sources
) -> None:
    m = clock.marks
    t_catch = clock.spent["catch"] if clock.caught else 0.0  # a replay-only catch-up is drafting's
    for st in clock.caught:  # the draft's prompt pass, late: prefill, not drafting
        st.counters.prefill_s += t_catch
    for st, n in clock.draft_prompt.items():
        st.counters.n_draft_prefilled += n
    evs = [_evidence(p.sources, v.n_accepted, sources) for p, v in zip(plans, verdicts)]
    drafting, verify_s = m["drafted"] - m["drafting"], m["verified"] - m["drafted"]
    t = Shared(
        drafting - t_catch, drafting, verify_s, verify_s + clock.spent["draft"], m["verified"] - m["start"],
        t_catch, t_catch / max(sum(clock.caught.values()), 1), batch_tokens,
        max((ev[0] - ev[2] for ev in evs), default=0),
    )  # fmt: skip
    starts = [m["dists"], *clock.done[:-1]]
    shared = m["dists"] - m["verified"]  # the round's distributions: charged to each one's sampling
    for p, v, ev, t0, t1 in zip(plans, verdicts, evs, starts, clock.done):
        _record_one(p, v, ev, t, (t1 - t0) + shared, clock.caught, sources)


def _record_one(
    p: SeqPlan,
    v: Verdict,
    ev: tuple[int, int, int, bool],
    t: Shared,
    sample_s: float,
    caught: dict,
    sources: Sources,
) -> None:
    st, c = p.st, p.st.counters
    k = p.k if p.model else ev[2]  # the K asked: the offer's alone without the drafter
    c.record_round(k, len(p.drafts), v.n_accepted, sources=p.sources)
    if c.rounds_trace is not None:  # the free sources' drafts by name (the rest: the drafter's)
        free = {name: p.sources.count(name) for name in sources.free}
        c.trace_round(
            k=k, drafted=len(p.drafts), accepted=v.n_accepted, **free,
            draft_ms=t.draft_wall * 1e3, verify_ms=t.verify * 1e3,
        )  # fmt: skip
    c.draft_s += t.draft
    c.verify_s += t.verify
    c.sample_s += sample_s
    c.llama_s += t.llama
    if st.track is not None:
        c.constrain_s += st.track.take_spent()
    round_s = t.decodes + sample_s  # the shared decodes plus this sequence's own work
    c.loop_s += round_s
    if st.k_ctl.learns:  # a fixed K's observe is a no-op: no Outcome to build
        st.k_ctl.observe(_outcome(p, v, ev, k, t, round_s - t.catch, caught.get(st, 0) if caught else 0))
    if st.bound is not None:  # its own draft steps and its share of the verify batch
        st.bound.observe(round_charge(t.draft, ev[0] - ev[2], t.longest, t.verify, len(p.drafts) + 1, t.batch_tokens),
                         len(v.new), len(p.drafts))  # fmt: skip
        c.cost_cuts = st.bound.cut
    c.fallbacks = st.k_ctl.fallbacks
    c.started_plain = st.k_ctl.started_plain


def _evidence(names: Sequence[str], n_accepted: int, sources: Sources) -> tuple[int, int, int, bool]:
    """The round's drafts that feed the tuner (sources with evidence: the grammar's are free and
    certain): (how many, how many kept, how many the lookup's, whether the round reached them - not
    cut short by a forced token's miss). It runs per sequence per round: counted in C where no draft
    is free, one plain pass where some are."""
    n_look = n_free = 0
    for name in sources.by_match:
        n_look += names.count(name)
    for name in sources.certain:
        n_free += names.count(name)
    if not n_free:  # every draft is evidence, and the round reached them all
        return len(names), min(n_accepted, len(names)), n_look, True
    n_own = n_acc = 0
    first_missed = -1  # the first draft with evidence past the kept ones
    evidence = sources.evidence
    for j, name in enumerate(names):
        if evidence[name] is None:
            continue
        n_own += 1
        if j < n_accepted:
            n_acc += 1
        elif first_missed < 0:
            first_missed = j
    return n_own, n_acc, n_look, first_missed < 0 or first_missed == n_accepted


def _outcome(p, v, ev, k, t, round_s, caught) -> Outcome:  # noqa: ANN001
    """What the K controller learns: only the drafts of sources with evidence, and only when the
    round reached them."""
    n_own, n_acc, n_look, reached = ev
    lead = offered(p, p.kplan.lead) if n_look and p.kplan is not None and p.kplan.lead else None
    unused = [o for o in p.offers if o is not lead] if p.offers else ()
    emitted = v.new[len(p.forced) :]
    return Outcome(
        k=k,
        n_drafted=n_own if reached else 0,
        n_accepted=n_acc if reached else 0,
        n_emitted=len(v.new),
        draft_s=t.draft,
        verify_s=t.verify,
        round_s=round_s,
        batch_tokens=t.batch_tokens,
        n_offered=n_look if reached else 0,
        n_forced=len(p.sources) - n_own,
        replay=p.replay,
        catch_tokens=caught,
        catch_s=t.per_token * caught,
        lead=lead.source if lead is not None else "",
        lead_confidence=lead.confidence if lead is not None else 0,
        judged=tuple(_judged(o, emitted) for o in unused),
    )


def _judged(o: Offer, emitted: Sequence[Step]) -> Judged:
    """An unused offer against the round's output: how many of its tokens the output can judge, and
    how many of those lead in agreement with it."""
    checked = min(len(o.tokens), len(emitted))
    kept = 0
    while kept < checked and o.tokens[kept] == emitted[kept].token:
        kept += 1
    return Judged(o.source, o.confidence, checked, kept)
