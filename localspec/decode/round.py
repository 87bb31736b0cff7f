"""The decoding algorithm: rounds over a list of sequences (state.py), pure over a narrow backend
protocol (localspec/evaluator.py). One round (`decode_round`) is five phases:

  plan    per sequence a `SeqPlan`: its budget, what each draft source offers for free, and the K
          its controller picks for the batch it shares (plan.py);
  draft   each source proposes into the plans, in order: the grammar's forced run, the lookup's
          tokens, then the drafter's (a draft model, or another kind's), one batched decode per position
          (sources/);
  verify  ONE target decode scores every sequence's `[last, d_1..d_K]`, prompt chunks riding along;
  accept  per sequence: the acceptance rule over its rows, then every cache and the matcher cut
          to what it emitted (settle.py);
  record  counters, timings and what each K controller learns (record.py) - the only phase that
          touches stats.

Invariant between rounds, per sequence: the target's KV cache holds every token but the last one
(`tokens[:-1]`; a sequence that ended may hold fewer), so the verify batch starts at `tokens[-1]`;
the draft's cache holds some prefix of `tokens` and catches up on what it has not seen at the start
of its next drafting round. Every cached position holds the token emitted there, and a matcher has
consumed exactly the emitted tokens (decode/invariants.py checks both after each round in debug
mode). A prompt is prefilled in chunks that ride in the rounds' target decodes (`filling`).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from localspec.decode import invariants
from localspec.decode.clock import Clock
from localspec.decode.plan import plan_round
from localspec.decode.record import record, record_prefill
from localspec.decode.rows import constrained, top_logits_suffice
from localspec.decode.seqplan import SeqPlan
from localspec.decode.settle import sampled, settle
from localspec.decode.sources import Sources, sources_for
from localspec.decode.state import SeqState
from localspec.evaluator import Evaluator, Item


def decode_round(
    target: Evaluator,
    draft: Evaluator | None,
    states: Sequence[SeqState],
    filling: Sequence[SeqState] = (),
    budget: int | None = None,
    sources: Sources | None = None,
) -> list[bool]:
    """One round over every running sequence: new tokens go to each state's `out`, and a sequence
    that ends (EOG, max_new, a full context, a complete or stuck constraint) gets its `finish` set;
    the others go on.

    `filling` are sequences still prefilling: their next prompt chunk (at most `budget` tokens each)
    rides in the same target decode as the verify batch - one pass over the weights per round, as
    llama-server does (an image's rows, a decode of their own, go one image a round: `_chunk_end`).
    Returns, per filling sequence, whether its prompt is now in.

    A constrained sequence (`track`) has the tokens its grammar forces drafted first, for free; every
    draft and target row it uses is masked to what the grammar allows at that position. A round that
    raises (a decode llama.cpp refused) has every source undo its part in each sequence (the drafts
    in every matcher), as one that settles does; the caller puts the caches back (the scheduler's
    resync). `sources`: `sources_for(draft)`, built once by a caller that runs many rounds."""
    if sources is None:
        sources = sources_for(draft)
    try:
        done = _round(target, draft, sources, states, filling, budget)
    finally:
        for src in sources.resetting:
            src.reset(states)
    if invariants.ON:
        invariants.check(target, draft, [*states, *filling])
    return done


def _round(
    target: Evaluator,
    draft: Evaluator | None,
    sources: Sources,
    states: Sequence[SeqState],
    filling: Sequence[SeqState],
    budget: int | None,
) -> list[bool]:
    clock = Clock()
    live = _live(target, states)
    fill = _prefill(target, filling, budget, beside=bool(live))
    for ctx in (target, draft):
        _ask_for_rows(ctx, live)
    if not live:
        if fill.items:
            target.eval_views(fill.items)
        record_prefill(filling, fill.tokens, clock.since("start"))
        return fill.done
    plans = plan_round(target, draft, sources, live)
    clock.mark("drafting")
    for src in sources.all:
        src.propose(plans, clock)
    clock.mark("drafted")
    items = [_verify_item(target, p) for p in plans] + fill.items
    rows = target.eval_views(items)[: len(plans)]
    clock.mark("verified")
    shared = sampled(plans, rows)
    clock.mark("dists")
    verdicts = []
    for p, r in zip(plans, rows):
        verdicts.append(settle(p, r, shared, target, sources.accepting))
        clock.seq_done()
    record(plans, verdicts, clock, sum(len(it.tokens) for it in items), sources)
    if filling:
        record_prefill(filling, fill.tokens, clock.marks["verified"] - clock.marks["drafted"])
    return fill.done


def _verify_item(target: Evaluator, p: SeqPlan) -> Item:
    """The sequence's last token (and any a restored snapshot needs replayed), then its drafts: a
    logits row for every draft and one past them."""
    have = target.past(p.st.seq)
    return Item(p.st.seq, p.st.tokens[have:] + p.drafts, have, len(p.drafts) + 1)


def _live(target: Evaluator, states: Sequence[SeqState]) -> list[SeqState]:
    """The sequences that go on this round (a new round begins in each one's matcher)."""
    live = []
    for st in states:
        if st.finish is None and len(st.tokens) >= target.n_ctx:  # no position left for a verify batch
            st.finish = "context"
        if st.finish is None and st.track is not None:
            constrained(st, st.track.begin)
        if st.finish is None:
            live.append(st)
    return live


def _ask_for_rows(ctx: Evaluator | None, live: Sequence[SeqState]) -> None:
    """Tell an evaluator that can give rows as their largest logits (`use_top_logits`: llama.cpp's
    backend top-k, `top_k` of them) which sequences read no more of a row than that."""
    if ctx is not None:
        for st in live:
            ctx.use_top_logits(st.seq, top_logits_suffice(st, ctx.top_k))


class Fill(NamedTuple):
    items: list[Item]  # the prompt chunks that ride in this round's target decode
    done: list[bool]  # per filling sequence: its prompt is in after this round
    tokens: list[int]  # per filling sequence: prompt tokens this round evaluates (+ the first verify's)


def _prefill(target: Evaluator, states: Sequence[SeqState], budget: int | None, beside: bool) -> Fill:
    """The target's next prompt chunk for each sequence (at most `budget` tokens each; `beside`:
    running streams share this round, so its images take turns: `_chunk_end`)."""
    fill = Fill([], [True] * len(states), [0] * len(states))
    turn = [True] if beside else None  # beside running streams: whether an image may still go in
    for i, st in enumerate(states):
        upto = len(st.tokens) - 1
        if len(st.tokens) >= target.n_ctx:
            st.finish = "context"
            continue
        if target.past(st.seq) >= upto:
            target.truncate(upto, st.seq)  # a recurrent memory may land below upto: re-evaluate the rest
        have = target.past(st.seq)
        end = upto if budget is None else min(upto, have + budget)
        end = _chunk_end(st.tokens, have, end, upto, turn, target.images_whole)
        fill.tokens[i] = max(end - have, 0) + (end == upto)
        if have < upto:
            fill.done[i] = end == upto
            if end > have:
                fill.items.append(Item(st.seq, st.tokens[have:end], have, 1))
    return fill


def _chunk_end(
    tokens: Sequence[int], have: int, end: int, upto: int, turn: list[bool] | None, whole: bool
) -> int:
    """Where a prompt chunk from `have` stops: at `end` (the budget's), or past it to the end of an
    image it reaches when the image goes `whole` (its rows attend both ways: Gemma 3's). An image's
    rows are a decode of their own (a llama_batch holds token ids or embedding rows, never both), so
    beside running streams (`turn` set) a round takes text up to the next image, which rides in
    their decode, or one image (a causal one's rows within the budget) if no other sequence's took
    the round's `turn` (issue 60: three clients' 64^2 images, a prompt's runs all in one round, left
    a neighbour a quarter of its speed)."""
    if turn is not None and have < end:
        if tokens[have] >= 0:  # text: up to the next image, if any
            return next((j for j in range(have, end) if tokens[j] < 0), end)
        if not turn[0]:
            return have  # an image waits for a round of its own
        turn[0], stop = False, have + 1
        while stop < (upto if whole else end) and _same_image(tokens, stop):
            stop += 1
        return stop
    while whole and 0 < end < upto and _same_image(tokens, end):
        end += 1
    return end


def _same_image(tokens: Sequence[int], j: int) -> bool:
    """Whether token j is a row of the image at j - 1: an image's rows are consecutive ids,
    descending (llama/vision.py)."""
    return tokens[j] < 0 and tokens[j] == tokens[j - 1] - 1
