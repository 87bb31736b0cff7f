"""The round's accept phase, per sequence: the acceptance rule (accept.py) walks the drafts over the
verify rows as sampled, up to the first rejection, where the target's own token is emitted (and
after the last draft, when every one was kept, its next token comes free); then the sequence moves
on - tokens, the matcher, and every cache cut to the positions that hold what it emitted."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from localspec.decode.rows import (
    constrained,
    distributions,
    sample_token,
    target_row,
    verify_rows,
    verify_token,
    with_logprobs,
)
from localspec.decode.sampling import Dists
from localspec.decode.seqplan import SeqPlan
from localspec.decode.sources import DraftSource
from localspec.decode.state import SeqState, Step
from localspec.evaluator import Evaluator


class Sampled(NamedTuple):
    """The sampling sequences' verify rows as sampled, their distributions and coupled choices,
    made for every row of the round at once (one `process_rows` call per set of parameters)."""

    rows: dict[SeqState, np.ndarray]
    dists: dict[SeqState, Dists]
    choices: dict[SeqState, list[int]]


class Verdict(NamedTuple):
    new: list[Step]  # what the sequence emitted this round
    n_accepted: int  # drafts kept


def sampled(plans: Sequence[SeqPlan], rows: Sequence[np.ndarray]) -> Sampled:
    """Rows as sampled where they can be (a constraint has no mask past a lost blind draft or an EOG,
    where the round never samples), and their distributions, for every sampling sequence."""
    shaped = {p.st: verify_rows(p.st, r, p.drafts) for p, r in zip(plans, rows) if not p.st.sp.greedy}
    dists, choices = distributions([(st, r, len(st.tokens)) for st, r in shaped.items()])
    return Sampled(shaped, dists, choices)


def settle(
    p: SeqPlan, rows: np.ndarray, s: Sampled, target: Evaluator, sources: Sequence[DraftSource]
) -> Verdict:
    """Accept and roll back one sequence: its new steps go to `out`, and a sequence that ends (EOG,
    max_new, a complete grammar) gets its `finish`."""
    st = p.st
    new, n_acc, shaped = _judge(p, rows, s, target)
    if st.max_new is not None:
        new = new[: st.max_new - st.n_new]
    for j, step in enumerate(new):  # EOG ends the sequence; nothing after it is emitted
        if target.is_eog(step.token):
            new = new[: j + 1]
            st.finish = "stop"
            break
    if st.logprobs >= 0:
        have = len(s.dists.get(st, ()))
        ps = [s.dists[st][i] if i < have else None for i in range(len(shaped))]
        new = with_logprobs(st, new, rows, shaped, ps)
    if st.track is not None:
        _settle_matcher(st, n_acc, new)
    verified = len(st.tokens) + _agreeing(p.drafts, new)  # the positions whose cached token was emitted
    st.tokens.extend([s.token for s in new])
    st.n_new += len(new)
    if st.finish is None and st.max_new is not None and st.n_new >= st.max_new:
        st.finish = "length"
    keep = min(verified, len(st.tokens) - 1)  # never a token no decode evaluated there
    target.truncate(keep, st.seq)
    for src in sources:
        src.accept(p, new, keep)
    st.out.extend(new)
    return Verdict(new, n_acc)


def _judge(p: SeqPlan, rows: np.ndarray, s: Sampled, target: Evaluator) -> tuple[list[Step], int, list]:
    """The rule over the drafts: (the steps, drafts kept, each judged row as sampled)."""
    st, d, qs, srcs = p.st, p.drafts, p.qs, p.sources
    dists: Sequence = s.dists.get(st, ())
    choices: Sequence = s.choices.get(st, ())
    have = len(dists)
    srows = s.rows[st] if have else None
    shaped: list[np.ndarray] = []  # the rows as sampled (penalties, then the constraint's mask)
    new: list[Step] = []
    n, n_d = len(st.tokens), len(d)
    for i in range(n_d + 1):  # a plain loop: it runs per draft per round
        r = srows[i] if i < have else target_row(st, rows, i, d)
        shaped.append(r)
        pi, yi = (dists[i], choices[i] if choices else None) if i < have else (None, None)
        if i == n_d:  # every draft accepted (or none drafted): the target's next token comes free
            new.append(Step(sample_token(r, st, n + i, pi, yi), False))
            break
        ok, tok = verify_token(r, st, d[i], qs[i], n + i, pi, yi)
        new.append(Step(tok, ok, i if ok else -1, srcs[i] if ok else ""))
        if not ok:
            return new, i, shaped
        if target.is_eog(d[i]):
            return new, i + 1, shaped
    return new, len(d), shaped


def _settle_matcher(st: SeqState, n_acc: int, new: list[Step]) -> None:
    """Move the matcher to where the sequence now ends: back to the kept drafts, on by the target's
    token. A grammar now complete ends the output as the target would: only EOG is allowed next, so
    it is emitted without a pass (any EOG; they all end the text the same way) - and never counts
    as cached: no decode evaluated it (`_agreeing`). Not past max_new: a grammar complete at the
    limit ends at the limit, as plain decoding does (an EOG there made usage max_tokens + 1)."""
    kept = min(n_acc, len(new))
    constrained(st, st.track.settle, kept, [s.token for s in new[kept:]])
    room = st.max_new is None or st.n_new + len(new) < st.max_new
    if st.finish is None and st.track.done and room:
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
