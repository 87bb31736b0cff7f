"""The decoding algorithm: rounds over a list of sequences (state.py), pure over a narrow backend
protocol. One round (`decode_round`):

  1. draft: every sequence that wants drafts gets them - its lookup's proposal (lookup.py), the draft
     model's, or the lookup's extended by the draft model, as its K controller plans - with one
     batched draft decode per draft-model position;
  2. verify: ONE target decode scores every sequence's `[last, d_1..d_K]`;
  3. accept and roll back, per sequence.

Invariant between rounds, per sequence: the target's KV cache holds every token but the last one
(`tokens[:-1]`; a sequence that ended may hold fewer), so the verify batch starts at `tokens[-1]`;
the draft's cache holds some prefix of `tokens` and catches up on what it has not seen at the start
of its next drafting round. Every cached position holds the token emitted there, and a matcher has
consumed exactly the emitted tokens (decode/invariants.py checks both after each round in debug
mode).
A prompt is prefilled in chunks that ride in the rounds' target decodes (`filling`).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from localspec.decode import invariants
from localspec.decode.rows import (
    constrained,
    distributions,
    draft_token,
    forced_run,
    grammar_aware,
    needs_q,
    one_point_q,
    sample_token,
    shape_rows,
    target_row,
    top_logits_suffice,
    unbanned,
    verify_rows,
    verify_token,
    with_logprobs,
)
from localspec.decode.sampling import Dist
from localspec.decode.state import Evaluator, Item, SeqState, Step
from localspec.draft_len.batch import plan_batch
from localspec.draft_len.controller import Facts, Outcome

LOOKUP_MAX = 16  # tokens a lookup proposes at most (AUTO_K_MAX)


def _eval(ctx: Evaluator, items: Sequence[Item]) -> list[np.ndarray]:
    """One decode of items; the rows without a copy where the evaluator can (the round is done
    with them before its next decode of that evaluator)."""
    return ctx.eval_views(items)


def _ask_for_rows(ctx: Evaluator | None, live: Sequence[SeqState]) -> None:
    """Tell an evaluator that can give rows as their largest logits (`use_top_logits`: llama.cpp's
    backend top-k, `top_k` of them) which sequences read no more of a row than that."""
    if ctx is not None:
        for st in live:
            ctx.use_top_logits(st.seq, top_logits_suffice(st, ctx.top_k))


def _prefill_items(
    target: Evaluator, states: Sequence[SeqState], budget: int | None
) -> tuple[list[Item], list[bool]]:
    """The target's next prompt chunk for each sequence (at most `budget` tokens each) and whether
    that chunk completes its prompt."""
    items: list[Item] = []
    done = [True] * len(states)
    for i, st in enumerate(states):
        upto = len(st.tokens) - 1
        if len(st.tokens) >= target.n_ctx:
            st.finish = "context"
            continue
        if target.past(st.seq) >= upto:
            target.truncate(upto, st.seq)  # a recurrent memory may land below upto: re-evaluate the rest
        have = target.past(st.seq)
        end = upto if budget is None else min(upto, have + budget)
        st.counters.n_prefilled += max(end - have, 0) + (end == upto)  # + the first verify's token
        if have >= upto:
            continue
        items.append((st.seq, st.tokens[have:end], have, 1))
        done[i] = end == upto
    return items, done


# -- one round -----------------------------------------------------------------------------------
def _offer_lookup(st: SeqState, forced: list[int]) -> tuple[list[int], int]:
    """The lookup's proposal for this round past the grammar's forced tokens (only if it agrees with
    them), and its match's length (the K controller plans with both)."""
    if st.lookup is None:
        return [], 0
    tokens, match_len = st.lookup.propose(LOOKUP_MAX)
    if forced:
        tokens = tokens[len(forced) :] if tokens[: len(forced)] == forced else []
    return tokens, match_len


def decode_round(
    target: Evaluator,
    draft: Evaluator | None,
    states: Sequence[SeqState],
    filling: Sequence[SeqState] = (),
    budget: int | None = None,
) -> list[bool]:
    """One round over every running sequence: new tokens go to each state's `out`, and a sequence
    that ends (EOG, max_new, a full context, a complete or stuck constraint) gets its `finish` set;
    the others go on.

    `filling` are sequences still prefilling: their next prompt chunk (at most `budget` tokens each)
    rides in the same target decode as the verify batch - one pass over the weights per round, as
    llama-server does. Returns, per filling sequence, whether its prompt is now in.

    A constrained sequence (`track`) has the tokens its grammar forces drafted first, for free; every
    draft and target row it uses is masked to what the grammar allows at that position. A round that
    raises (a decode llama.cpp refused) undoes its drafts in every matcher, as one that settles does;
    the caller puts the caches back (the scheduler's resync)."""
    try:
        done = _round(target, draft, states, filling, budget)
    finally:
        for st in states:
            if st.track is not None:
                st.track.end_round()
    if invariants.ON:
        invariants.check(target, draft, [*states, *filling])
    return done


def _round(
    target: Evaluator,
    draft: Evaluator | None,
    states: Sequence[SeqState],
    filling: Sequence[SeqState],
    budget: int | None,
) -> list[bool]:
    t_round = time.perf_counter()
    live = []
    for st in states:
        if st.finish is None and len(st.tokens) >= target.n_ctx:  # no position left for a verify batch
            st.finish = "context"
        if st.finish is None and st.track is not None:
            constrained(st, st.track.begin)
        if st.finish is None:
            live.append(st)
    fill_items, fill_done = _prefill_items(target, filling, budget)
    _ask_for_rows(target, live)
    _ask_for_rows(draft, live)
    if not live:
        if fill_items:
            _eval(target, fill_items)
        _charge_prefill(filling, time.perf_counter() - t_round)
        return fill_done
    # -- draft length per sequence, for the batch it is in: the grammar's forced tokens first (they
    # ride in the batch, so the K controller prices its plans with them in front) ------------------
    forced, ks, looked, cap, lefts = {}, {}, {}, {}, {}
    model_source = draft.source if draft is not None else "draft"  # a draft model, or the target's MTP head
    max_draft = target.max_draft  # what the target's rollback can take back
    for st in live:
        room = target.n_ctx - len(st.tokens)  # positions beyond tokens[-1] the verify batch may use
        left = lefts[st] = st.max_new - st.n_new - 1 if st.max_new is not None else room
        cap[st] = min(room - 1, left, max_draft if max_draft is not None else room)  # drafts, every source
        if target.past(st.seq) < len(st.tokens) - 1:
            cap[st] = 0  # a restored snapshot: this round replays the kept tokens (drafting on top of a
            # replay would put them back under a snapshot a rejection returns to)
        forced[st] = forced_run(st, min(cap[st], LOOKUP_MAX))
    drafting = [st for st in live if st.speculative and (draft is not None or st.lookup is not None)]
    facts = {}
    offered = {}
    for st in drafting:
        # a draft far behind pays a catch-up before it drafts
        lag = len(st.tokens) - 1 - draft.past(st.seq) if draft is not None and st.draft_model else 0
        offered[st], match_len = _offer_lookup(st, forced[st])
        facts[st] = Facts(len(forced[st]), len(offered[st]), match_len, lag, lefts[st])
    wanted = dict(zip(drafting, plan_batch([st.k_ctl for st in drafting], [facts[st] for st in drafting])))
    for st in live:
        plan = wanted.get(st)
        k = plan.k if plan is not None else 0
        if plan is not None and not k and plan.forced_take < len(forced[st]):  # a cheaper batch size
            constrained(st, st.track.take_back, len(forced[st]) - plan.forced_take)
            forced[st] = forced[st][: plan.forced_take]
            offered[st] = []  # it continued the whole run
        nf = len(forced[st])
        k = max(0, min(k, cap[st] - nf))
        proposal = offered.get(st, [])
        looked[st] = unbanned(st, proposal[:k]) if k and plan.lookup_first else []
        if grammar_aware(st):
            looked[st] = st.track.valid(looked[st])
            looked[st] = looked[st][: st.track.push(looked[st])]
        elif st.track is not None:
            for x in looked[st]:
                st.track.follow(x)
        ks[st] = k if draft is not None and st.k_ctl.has_model and st.draft_model else len(looked[st])

    # -- draft: forced tokens, the lookup's, then one batched draft-model decode per position, each
    # token the draft model writes followed by what the grammar then forces (free: no draft step) --
    drafts = {st: forced[st] + looked[st] for st in live}
    srcs = {st: ["grammar"] * len(forced[st]) + ["lookup"] * len(looked[st]) for st in live}
    total = {st: len(forced[st]) + ks[st] for st in live}  # drafts wanted, forced ones included
    qs: dict[SeqState, list[Dist | None]] = {st: [one_point_q(st, x) for x in drafts[st]] for st in live}
    t0 = time.perf_counter()
    t_deval = 0.0  # time inside the draft's decodes, for the overhead figure
    active = [st for st in live if total[st] > len(drafts[st]) and not _ended(st, drafts[st], draft)]
    t_catch, caught = _draft_catch_up(draft, active)  # the draft's prompt pass, late: prefill, not drafting
    catch_per_token = t_catch / max(sum(caught.values()), 1)
    if active:
        items = []
        for st in active:
            n = len(st.tokens)
            if draft.past(st.seq) >= n:  # fully cached: re-evaluate the last token for its logits
                draft.truncate(n - 1, st.seq)
            have = draft.past(st.seq)
            items.append((st.seq, st.tokens[have:n] + drafts[st], have, 1))
        while active:
            te = time.perf_counter()
            rows = _eval(draft, items)
            t_deval += time.perf_counter() - te
            still, items = [], []
            # each row as sampled (penalties, the mask when drafting under the constraint), then the
            # distributions of every row that needs one (and the coupled choices) in one call
            shaped = [
                shape_rows(st, row[:1], drafts[st], len(drafts[st]), grammar_aware(st))
                for st, row in zip(active, rows)
            ]
            dq, dy = distributions(
                [(st, row, len(st.tokens) + len(drafts[st])) for st, row in zip(active, shaped)
                 if needs_q(st, len(drafts[st]))]
            )  # fmt: skip
            for st, row in zip(active, shaped):
                i = len(drafts[st])
                aware = grammar_aware(st)
                x, q = draft_token(
                    row[0], st, i, dq[st][0] if st in dq else None, dy[st][0] if st in dy else None
                )
                if x is None or (aware and not st.track.push([x])):
                    continue
                if st.track is not None and not aware:
                    st.track.follow(x)
                drafts[st].append(x)
                qs[st].append(q)
                srcs[st].append(model_source)
                # free: they ride in the next draft step; within the batch a tuned K priced (so
                # they take the place of model drafts), on top of a fixed K
                tuned = st.k_ctl.costs is not None
                room = (total[st] if tuned else cap[st]) - len(drafts[st])
                run = forced_run(st, room) if aware and not draft.is_eog(x) else []
                if run:
                    drafts[st] += run
                    qs[st] += [one_point_q(st, t) for t in run]
                    srcs[st] += ["grammar"] * len(run)
                    if not tuned:
                        total[st] = min(total[st] + len(run), cap[st])
                if len(drafts[st]) < total[st] and not draft.is_eog(drafts[st][-1]):
                    still.append(st)
                    items.append((st.seq, [x, *run], len(st.tokens) + i, 1))
            active = still
    t1 = time.perf_counter()

    # -- verify: one target decode for every sequence --------------------------------------------
    replaying = {st: target.past(st.seq) < len(st.tokens) - 1 for st in live}
    items = [
        (st.seq, st.tokens[target.past(st.seq) :] + drafts[st], target.past(st.seq), len(drafts[st]) + 1)
        for st in live
    ]
    all_rows = _eval(target, items + fill_items)[: len(items)]
    t2 = time.perf_counter()
    batch_tokens = sum(len(it[1]) for it in items + fill_items)
    _charge_prefill(filling, t2 - t1)

    # -- accept and roll back, per sequence -------------------------------------------------------
    ts = time.perf_counter()
    # a sampling sequence's rows as sampled (those that can be: a constraint has no mask past a lost
    # blind draft or an EOG, where the round never samples), and their distributions and coupled
    # choices, every row of the step at once
    vrows = {st: verify_rows(st, rows, drafts[st]) for st, rows in zip(live, all_rows) if not st.sp.greedy}
    ps, ys = distributions([(st, rows, len(st.tokens)) for st, rows in vrows.items()])
    t_dists = time.perf_counter() - ts  # shared: charged to each sequence's sampling time
    for st, rows in zip(live, all_rows):
        ts = time.perf_counter() - t_dists
        new: list[Step] = []
        n_acc = 0
        d = drafts[st]
        src = srcs[st]
        n_look = len(looked[st])
        p: Sequence[Dist | None] = ps.get(st, ())
        y: Sequence[int | None] = ys.get(st, ())
        have = len(p)
        shaped: list[np.ndarray] = []  # the rows as sampled (penalties, then the constraint's mask)
        for i, x in enumerate(d):
            shaped.append(vrows[st][i] if i < have else target_row(st, rows, i, d))
            pi, yi = (p[i], y[i] if y else None) if i < have else (None, None)
            ok, tok = verify_token(shaped[i], st, x, qs[st][i], len(st.tokens) + i, pi, yi)
            new.append(Step(tok, ok, i if ok else -1, src[i] if ok else ""))
            if not ok:
                break
            n_acc += 1
            if target.is_eog(x):
                break
        else:  # every draft accepted (or none drafted): the target's next token comes free
            i = len(d)
            shaped.append(vrows[st][i] if i < have else target_row(st, rows, i, d))
            pi, yi = (p[i], y[i] if y else None) if i < have else (None, None)
            new.append(Step(sample_token(shaped[-1], st, len(st.tokens) + i, pi, yi), False))
        if st.max_new is not None:
            new = new[: st.max_new - st.n_new]
        for j, step in enumerate(new):  # EOG ends the sequence; nothing after it is emitted
            if target.is_eog(step.token):
                new = new[: j + 1]
                st.finish = "stop"
                break
        if st.logprobs >= 0:
            new = with_logprobs(
                st, new, rows, shaped, [p[i] if i < have else None for i in range(len(shaped))]
            )
        if st.track is not None:
            _settle(st, n_acc, new)
        verified = len(st.tokens) + _agreeing(d, new)  # the positions whose cached token was emitted
        st.tokens.extend(s.token for s in new)
        if draft is not None and st.draft_model and any(s.token >= draft.n_vocab for s in new):
            st.draft_model = False  # the target made an id the draft has not got: no more model drafts
        if st.lookup is not None:
            st.lookup.extend([s.token for s in new])
        st.n_new += len(new)
        if st.finish is None and st.max_new is not None and st.n_new >= st.max_new:
            st.finish = "length"
        keep = min(verified, len(st.tokens) - 1)  # never a token no decode evaluated there
        target.truncate(keep, st.seq)
        if draft is not None and st.speculative and st.k_ctl.has_model:
            draft.truncate(min(draft.past(st.seq), keep), st.seq)
        st.out.extend(new)
        t3 = time.perf_counter()

        c = st.counters
        c.record_round(ks[st], len(d), n_acc, sources=src)
        c.trace_round(
            k=ks[st],
            drafted=len(d),
            accepted=n_acc,
            lookup=n_look,
            grammar=src.count("grammar"),
            draft_ms=(t1 - t0) * 1e3,
            verify_ms=(t2 - t1) * 1e3,
        )
        c.draft_s += t1 - t0 - t_catch
        c.verify_s += t2 - t1
        c.sample_s += t3 - ts
        c.llama_s += (t2 - t1) + t_deval
        if st.track is not None:
            c.constrain_s += st.track.take_spent()
        round_s = (t2 - t_round) + (t3 - ts)  # the shared decodes plus this sequence's own work
        c.loop_s += round_s
        # the K controller plans the lookup's and the draft model's tokens, and learns from those only
        own = [j for j, name in enumerate(src) if name != "grammar"]
        n_own_acc = sum(j < n_acc for j in own)
        reached = n_own_acc == len(own) or own[n_own_acc] <= n_acc  # not cut by a forced token's miss
        unused = offered.get(st) and not n_look
        checked, kept = _offer_outcome(offered[st], new[len(forced[st]) :]) if unused else (0, 0)
        st.k_ctl.observe(
            Outcome(
                k=ks[st],
                n_drafted=len(own) if reached else 0,
                n_accepted=n_own_acc if reached else 0,
                n_emitted=len(new),
                draft_s=t1 - t0 - t_catch,
                verify_s=t2 - t1,
                round_s=round_s - t_catch,
                batch_tokens=batch_tokens,
                n_lookup=n_look if reached else 0,
                n_forced=len(src) - len(own),
                replay=replaying[st],
                catch_tokens=caught.get(st, 0),
                catch_s=catch_per_token * caught.get(st, 0),
                offer_checked=checked,
                offer_kept=kept,
                match_len=facts[st].match_len if st in facts else 0,
            )
        )
        c.fallbacks = st.k_ctl.fallbacks
        c.started_plain = st.k_ctl.started_plain
    return fill_done


def _ended(st: SeqState, drafts: list[int], draft: Evaluator | None) -> bool:
    """The drafts so far end the output (EOG), so the draft model has nothing to add."""
    return bool(drafts) and draft is not None and draft.is_eog(drafts[-1])


def _settle(st: SeqState, n_acc: int, new: list[Step]) -> None:
    """Move the matcher to where the sequence now ends: back to the kept drafts, on by the target's
    token. A grammar now complete ends the output as the target would: only EOG is allowed next, so
    it is emitted without a pass (any EOG; they all end the text the same way) - and never counts
    as cached: no decode evaluated it (`_agreeing`)."""
    kept = min(n_acc, len(new))
    constrained(st, st.track.settle, kept, [s.token for s in new[kept:]])
    if st.finish is None and st.track.done:
        eog = st.track.matcher.vocab.eog[0]
        new.append(Step(eog, False))
        constrained(st, st.track.matcher.consume, [eog])
        st.finish = "stop"


def _agreeing(drafts: Sequence[int], new: Sequence[Step]) -> int:
    """How many of the round's emitted tokens lead in agreement with its drafts: the verify decode
    evaluated draft i at the position where new[i] was emitted, so exactly these positions of the
    caches hold what the sequence emitted (a token the round appends unverified - the EOG after a
    complete grammar - or the target's own token where a draft was rejected never does)."""
    n = 0
    while n < min(len(drafts), len(new)) and drafts[n] == new[n].token:
        n += 1
    return n


def _offer_outcome(proposal: Sequence[int], emitted: Sequence[Step]) -> tuple[int, int]:
    """(how many of an unused lookup proposal's tokens the round's output can judge, how many of
    those lead in agreement with it)."""
    checked = min(len(proposal), len(emitted))
    kept = 0
    while kept < checked and proposal[kept] == emitted[kept].token:
        kept += 1
    return checked, kept


def _charge_prefill(filling: Sequence[SeqState], dt: float) -> None:
    for st in filling:
        st.counters.prefill_s += dt


def _draft_catch_up(draft: Evaluator | None, active: Sequence[SeqState]) -> tuple[float, dict[SeqState, int]]:
    """Bring the draft's cache of each drafting sequence to `tokens[:-1]` in one decode where it lags
    by more than a round's worth (its prompt, or the tokens of plain rounds), counted as those
    sequences' prefill; returns the seconds and the tokens each caught up on (for the tuner, which
    prices the next catch-up). A short lag (the last draft and the bonus token) rides
    in the first draft step. A draft that rolls back through snapshots catches up whenever it lags
    by more than one token and settles there: its snapshot is taken at the first draft step, and a
    replay riding in that step would be undone with the drafts at every rejection. Such a replay
    (no longer than a round) is drafting's cost, not prefill: it is charged to the draft's time."""
    if not active:
        return 0.0, {}
    t0 = time.perf_counter()
    items, behind = [], []
    snapshots = draft.rollback == "snapshot"
    replay_only = True
    for st in active:
        have, upto = draft.past(st.seq), len(st.tokens) - 1
        if upto - have > (1 if snapshots else 2):
            items.append((st.seq, st.tokens[have:upto], have, 1))
            behind.append(st)
            replay_only &= snapshots and upto - have <= LOOKUP_MAX + 2
    if not items:
        return 0.0, {}
    _eval(draft, items)
    if snapshots:
        for st in behind:
            draft.truncate(len(st.tokens) - 1, st.seq)
    if replay_only:
        return 0.0, {}
    dt = time.perf_counter() - t0
    _charge_prefill(behind, dt)
    return dt, {st: len(toks) for st, (_, toks, _, _) in zip(behind, items)}
