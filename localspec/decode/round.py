"""The decoding algorithm: rounds over a list of sequences (state.py), pure over a narrow backend
protocol. One round (`decode_round`):

  1. draft: every sequence that wants drafts gets them - its lookup's proposal (lookup.py), the draft
     model's, or the lookup's extended by the draft model, as its K controller plans - with one
     batched draft decode per draft-model position;
  2. verify: ONE target decode scores every sequence's `[last, d_1..d_K]`;
  3. accept and roll back, per sequence.

Invariant between rounds, per sequence: the target's KV cache holds every token but the last one
(`tokens[:-1]`), so the verify batch starts at `tokens[-1]`; the draft's cache holds some prefix
of `tokens` and catches up on what it has not seen at the start of its next drafting round.
A prompt is prefilled in chunks that ride in the rounds' target decodes (`filling`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from localspec.constrain import ConstraintStuck
from localspec.decode import accept
from localspec.decode.sampling import Dist, argmax, logprobs, process
from localspec.decode.state import Evaluator, Item, SeqState, Step
from localspec.draft_len.batch import choose_batch

LOOKUP_MAX = 16  # tokens a lookup proposes at most (AUTO_K_MAX)


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
        have = target.past(st.seq)
        end = upto if budget is None else min(upto, have + budget)
        st.counters.n_prefilled += max(end - have, 0) + (end == upto)  # + the first verify's token
        if have >= upto:
            target.truncate(upto, st.seq)
            continue
        items.append((st.seq, st.tokens[have:end], have, 1))
        done[i] = end == upto
    return items, done


# -- one round -----------------------------------------------------------------------------------
def _offer_lookup(st: SeqState) -> list[int]:
    """The lookup's proposal for this round, told to the K controller (which plans with it)."""
    if st.lookup is None:
        return []
    tokens, match_len = st.lookup.propose(LOOKUP_MAX)
    st.k_ctl.offer(len(tokens), match_len)
    return tokens


def _shaped(st: SeqState, row: np.ndarray, drafted: Sequence[int], i: int) -> np.ndarray:
    """The logits at draft position i as the sequence samples from them: logit_bias and penalties
    from the tokens before it (`drafted[:i]` after the sequence's own) - the same for the draft's row
    and the target's there, and for plain decoding."""
    pen = st.penalties
    if pen is None:
        return row
    if pen.last_n < 0:
        history = st.tokens + list(drafted[:i])
    else:
        history = (st.tokens[-pen.last_n :] + list(drafted[:i]))[-pen.last_n :] if pen.last_n else []
    return pen.apply(row, history)


def _unbanned(st: SeqState, tokens: list[int]) -> list[int]:
    """A lookup proposal up to the first token logit_bias bans (the target would never keep it)."""
    if st.penalties is None or not st.penalties.bias:
        return tokens
    banned = st.penalties.banned()
    for i, t in enumerate(tokens):
        if t in banned:
            return tokens[:i]
    return tokens


def _with_logprobs(st: SeqState, new: list[Step], shaped: list[np.ndarray]) -> list[Step]:
    """Each step's log-probability under the target's distribution where it was emitted (its row in
    the verify pass, drafted or not), after the transforms plain decoding applies."""
    out = []
    for step, row in zip(new, shaped):
        lp, top = logprobs(process(row, st.sp), step.token, st.logprobs)
        out.append(dataclasses.replace(step, logprob=lp, top=top))
    return out + new[len(out) :]


def _one_point_q(st: SeqState, x: int) -> Dist | None:
    """A lookup token's q for the p/q rule: it was proposed with certainty, so q is one-point and
    the rule accepts x with probability p(x), else samples from p without x (see accept.pq)."""
    if st.sp.greedy or st.cfg.mode != "pq":
        return None
    return Dist(np.array([x], dtype=np.int64), np.ones(1))


def _draft_token(row: np.ndarray, st: SeqState, i: int) -> tuple[int | None, Dist | None]:
    """The draft's token at draft position i, or None to stop drafting (draft_p_min); the rule's q.
    Draft position i is sequence position len(tokens) + i (the coupled rule's noise key)."""
    sp, cfg = st.sp, st.cfg
    check = cfg.draft_p_min > 0 and i >= cfg.draft_min
    if sp.greedy:
        if check:
            e = np.exp(row - row.max())
            if 1.0 / e.sum() < cfg.draft_p_min:
                return None, None
        return argmax(row), None
    q = process(row, sp) if check or cfg.mode != "match" else None
    if check and q.top_prob() < cfg.draft_p_min:
        return None, None
    if cfg.mode == "match":  # sample-and-match drafts greedily, as llama.cpp does
        return argmax(row), None
    if st.noise is not None:
        return st.noise.sample(q, len(st.tokens) + i), q
    return q.sample(st.draft_rng), q


def _verify_token(row: np.ndarray, st: SeqState, x: int, q: Dist | None, pos: int) -> tuple[bool, int]:
    """The acceptance rule for one drafted token x at sequence position pos: (kept, the token
    emitted at this position)."""
    if st.sp.greedy:
        return accept.greedy(row, x)
    if st.cfg.mode == "pq":
        return accept.pq(process(row, st.sp), q, x, st.verify_rng)
    if st.cfg.mode == "coupled":
        return accept.coupled(process(row, st.sp), x, st.noise, pos)
    return accept.match(process(row, st.sp), x, st.verify_rng)


def _sample(row: np.ndarray, st: SeqState, pos: int) -> int:
    """The target's own token at sequence position pos (plain decoding, the bonus token)."""
    if st.sp.greedy:
        return argmax(row)
    if st.noise is not None:
        return st.noise.sample(process(row, st.sp), pos)
    return process(row, st.sp).sample(st.verify_rng)


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
    draft and target row it uses is masked to what the grammar allows at that position."""
    t_round = time.perf_counter()
    live = []
    for st in states:
        if st.finish is None and len(st.tokens) >= target.n_ctx:  # no position left for a verify batch
            st.finish = "context"
        if st.finish is None and st.track is not None:
            _constrained(st, st.track.begin)
        if st.finish is None:
            live.append(st)
    fill_items, fill_done = _prefill_items(target, filling, budget)
    if not live:
        if fill_items:
            target.eval_batch(fill_items)
        _charge_prefill(filling, time.perf_counter() - t_round)
        return fill_done
    # -- draft length per sequence, for the batch it is in ---------------------------------------
    drafting = [st for st in live if st.speculative and (draft is not None or st.lookup is not None)]
    offered = {st: _offer_lookup(st) for st in drafting}
    wanted = dict(zip(drafting, choose_batch([st.k_ctl for st in drafting]))) if drafting else {}
    forced, ks, looked, cap = {}, {}, {}, {}
    for st in live:
        room = target.n_ctx - len(st.tokens)  # positions beyond tokens[-1] the verify batch may use
        left = st.max_new - st.n_new - 1 if st.max_new is not None else room
        cap[st] = min(room - 1, left)  # drafts of every source this round, at most
        forced[st] = _forced(st, min(cap[st], LOOKUP_MAX))
        nf = len(forced[st])
        k = wanted.get(st, 0)
        k = max(0, min(k, room - 1 - nf, left - nf))
        proposal = offered.get(st, [])
        if nf:  # the lookup continues tokens; past the forced run only if it agrees with it
            proposal = proposal[nf:] if proposal[:nf] == forced[st] else []
        looked[st] = _unbanned(st, proposal[:k]) if k and st.k_ctl.lookup_first else []
        if _aware(st):
            looked[st] = st.track.valid(looked[st])
            looked[st] = looked[st][: st.track.push(looked[st])]
        elif st.track is not None:
            for x in looked[st]:
                st.track.follow(x)
        ks[st] = k if draft is not None and st.k_ctl.has_model else len(looked[st])

    # -- draft: forced tokens, the lookup's, then one batched draft-model decode per position, each
    # token the draft model writes followed by what the grammar then forces (free: no draft step) --
    drafts = {st: forced[st] + looked[st] for st in live}
    srcs = {st: ["grammar"] * len(forced[st]) + ["lookup"] * len(looked[st]) for st in live}
    total = {st: len(forced[st]) + ks[st] for st in live}  # drafts wanted, forced ones included
    qs: dict[SeqState, list[Dist | None]] = {st: [_one_point_q(st, x) for x in drafts[st]] for st in live}
    t0 = time.perf_counter()
    t_deval = 0.0  # time inside the draft's decodes, for the overhead figure
    active = [st for st in live if total[st] > len(drafts[st]) and not _ended(st, drafts[st], draft)]
    t_catch = _draft_catch_up(draft, active)  # the draft's prompt pass, late: prefill, not drafting
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
            rows = draft.eval_batch(items)
            t_deval += time.perf_counter() - te
            still, items = [], []
            for st, row in zip(active, rows):
                i = len(drafts[st])
                aware = _aware(st)
                shaped_row = _shaped(st, row[0], drafts[st], i)
                x, q = _draft_token(st.track.masked(shaped_row, i) if aware else shaped_row, st, i)
                if x is None or (aware and not st.track.push([x])):
                    continue
                if st.track is not None and not aware:
                    st.track.follow(x)
                drafts[st].append(x)
                qs[st].append(q)
                srcs[st].append("draft")
                run = _forced(st, cap[st] - len(drafts[st])) if aware and not draft.is_eog(x) else []
                if run:  # free: they ride in the next draft step and do not count against K
                    drafts[st] += run
                    qs[st] += [_one_point_q(st, t) for t in run]
                    srcs[st] += ["grammar"] * len(run)
                    total[st] = min(total[st] + len(run), cap[st])
                if len(drafts[st]) < total[st] and not draft.is_eog(drafts[st][-1]):
                    still.append(st)
                    items.append((st.seq, [x, *run], len(st.tokens) + i, 1))
            active = still
    t1 = time.perf_counter()

    # -- verify: one target decode for every sequence --------------------------------------------
    items = [(st.seq, [st.tokens[-1], *drafts[st]], len(st.tokens) - 1, len(drafts[st]) + 1) for st in live]
    all_rows = target.eval_batch(items + fill_items)[: len(items)]
    t2 = time.perf_counter()
    batch_tokens = sum(len(it[1]) for it in items + fill_items)
    _charge_prefill(filling, t2 - t1)

    # -- accept and roll back, per sequence -------------------------------------------------------
    for st, rows in zip(live, all_rows):
        ts = time.perf_counter()
        new: list[Step] = []
        n_acc = 0
        d = drafts[st]
        src = srcs[st]
        n_look = len(looked[st])
        shaped: list[np.ndarray] = []  # the rows as sampled (penalties, then the constraint's mask)
        for i, x in enumerate(d):
            shaped.append(_row(st, rows, i, d))
            ok, tok = _verify_token(shaped[i], st, x, qs[st][i], len(st.tokens) + i)
            new.append(Step(tok, ok, i if ok else -1, src[i] if ok else ""))
            if not ok:
                break
            n_acc += 1
            if target.is_eog(x):
                break
        else:  # every draft accepted (or none drafted): the target's next token comes free
            shaped.append(_row(st, rows, len(d), d))
            new.append(Step(_sample(shaped[-1], st, len(st.tokens) + len(d)), False))
        if st.max_new is not None:
            new = new[: st.max_new - st.n_new]
        for j, step in enumerate(new):  # EOG ends the sequence; nothing after it is emitted
            if target.is_eog(step.token):
                new = new[: j + 1]
                st.finish = "stop"
                break
        if st.logprobs >= 0:
            new = _with_logprobs(st, new, shaped)
        if st.track is not None:
            _settle(st, n_acc, new)
        st.tokens.extend(s.token for s in new)
        if st.lookup is not None:
            st.lookup.extend([s.token for s in new])
        st.n_new += len(new)
        if st.finish is None and st.max_new is not None and st.n_new >= st.max_new:
            st.finish = "length"
        target.truncate(len(st.tokens) - 1, st.seq)
        if draft is not None and st.speculative and st.k_ctl.has_model:
            draft.truncate(min(draft.past(st.seq), len(st.tokens) - 1), st.seq)
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
        st.k_ctl.observe(
            k=ks[st],
            n_drafted=len(own) if reached else 0,
            n_accepted=n_own_acc if reached else 0,
            n_emitted=len(new),
            draft_s=t1 - t0 - t_catch,
            verify_s=t2 - t1,
            round_s=round_s - t_catch,
            batch_tokens=batch_tokens,
            n_lookup=n_look if reached else 0,
        )
        if offered.get(st) and not n_look:
            st.k_ctl.observe_unused_offer(*_offer_outcome(offered[st], new))
        c.fallbacks = st.k_ctl.fallbacks
        c.started_plain = st.k_ctl.started_plain
    return fill_done


def _row(st: SeqState, rows: np.ndarray, i: int, drafted: Sequence[int]) -> np.ndarray:
    """The target's logits at draft position i as sampled: penalties and biases, then masked by the
    sequence's constraint there."""
    row = _shaped(st, rows[i], drafted, i)
    return row if st.track is None else st.track.masked(row, i)


def _constrained(st: SeqState, fn, *args):  # noqa: ANN001, ANN202
    """Run one constraint operation; a grammar that cannot go on ends this sequence, not the round."""
    try:
        return fn(*args)
    except ConstraintStuck as e:
        st.finish, st.error = "error", e
        return None


def _aware(st: SeqState) -> bool:
    """st's drafts are made under its constraint (forced tokens first, the draft's rows masked)."""
    return st.track is not None and st.cfg.grammar_drafts


def _forced(st: SeqState, limit: int) -> list[int]:
    """The tokens st's grammar forces next (free drafts), when it speculates."""
    if not _aware(st) or not st.speculative or limit <= 0:
        return []
    return _constrained(st, st.track.forced, limit) or []


def _ended(st: SeqState, drafts: list[int], draft: Evaluator | None) -> bool:
    """The drafts so far end the output (EOG), so the draft model has nothing to add."""
    return bool(drafts) and draft is not None and draft.is_eog(drafts[-1])


def _settle(st: SeqState, n_acc: int, new: list[Step]) -> None:
    """Move the matcher to where the sequence now ends: back to the kept drafts, on by the target's
    token. A grammar now complete ends the output as the target would: only EOG is allowed next, so
    it is emitted without a pass (any EOG; they all end the text the same way)."""
    kept = min(n_acc, len(new))
    _constrained(st, st.track.settle, kept, [s.token for s in new[kept:]])
    if st.finish is None and st.track.done:
        new.append(Step(st.track.matcher.vocab.eog[0], False))
        st.finish = "stop"


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


def _draft_catch_up(draft: Evaluator | None, active: Sequence[SeqState]) -> float:
    """Bring the draft's cache of each drafting sequence to `tokens[:-1]` in one decode where it lags
    by more than a round's worth (its prompt, or the tokens of plain rounds), counted as those
    sequences' prefill; returns the seconds. A short lag (the last draft and the bonus token) rides
    in the first draft step."""
    t0 = time.perf_counter()
    items, behind = [], []
    for st in active:
        have, upto = draft.past(st.seq), len(st.tokens) - 1
        if upto - have > 2:
            items.append((st.seq, st.tokens[have:upto], have, 1))
            behind.append(st)
    if items:
        draft.eval_batch(items)
    dt = time.perf_counter() - t0
    _charge_prefill(behind, dt)
    return dt
