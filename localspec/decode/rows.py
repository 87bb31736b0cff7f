"""What a round does with a logits row: shape it (penalties, logit_bias, the constraint's mask),
turn rows into distributions (one call for a step's rows), and draft, verify or sample a token from
them. Pure numpy over the rows the evaluator returned; round.py decides which rows and when."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from localspec.constrain import ConstraintStuck
from localspec.decode import accept, noise
from localspec.decode.sampling import Dist, Dists, argmax, logprobs, process, process_rows, row_logprobs
from localspec.decode.state import SeqState, Step
from localspec.top_logits import TopLogits


def shape_row(st: SeqState, row: np.ndarray, drafted: Sequence[int], i: int) -> np.ndarray:
    """The logits at draft position i as the sequence samples from them: logit_bias and penalties
    from the tokens before it (`drafted[:i]` after the sequence's own) - the same for the draft's row
    and the target's there, and for plain decoding."""
    if st.penalties is None:
        return row
    return st.penalties.apply(row, penalty_history(st, drafted, i))


def penalty_history(st: SeqState, drafted: Sequence[int], i: int) -> list[int]:
    """The tokens the penalties look back over at draft position i."""
    pen = st.penalties
    if pen.last_n < 0:
        return st.tokens + list(drafted[:i])
    return (st.tokens[-pen.last_n :] + list(drafted[:i]))[-pen.last_n :] if pen.last_n else []


def top_logits_suffice(st: SeqState, width: int) -> bool:
    """Whether st reads no more of a row than its `width` largest logits (`TopLogits`): nothing edits
    its rows first (penalties, logit_bias and masks need whole rows), and it samples with a top_k
    within them - or greedily, from the argmax, without draft_p_min's whole-row softmax."""
    if width <= 0 or needs_shaping(st):
        return False
    if st.logprobs >= 0 and not st.post_sampling_probs:  # the model's log-softmax: the whole row
        return False
    if st.sp.greedy and st.cfg.draft_p_min > 0:
        return False
    return (st.sp.greedy and st.logprobs < 0) or 0 < st.sp.top_k <= width


def needs_shaping(st: SeqState) -> bool:
    """Whether st's rows are edited before sampling (penalties, logit_bias, a constraint's mask)."""
    return st.penalties is not None or st.track is not None


def shape_rows(st: SeqState, rows: np.ndarray, drafted: Sequence[int], i0: int, masked: bool) -> np.ndarray:
    """`rows` (draft positions i0, i0 + 1, ...) as the sequence samples from them: the rows
    themselves when nothing shapes them, else one copy edited in place - the penalties' sparse
    edits, then the constraint's mask (`masked`). The same values as `shape_row` and `target_row`."""
    if st.penalties is None and not masked:
        return rows
    out = np.array(rows, dtype=np.float32)
    for j in range(len(out)):
        if st.penalties is not None:
            st.penalties.apply_(out[j], penalty_history(st, drafted, i0 + j))
        if masked:
            st.track.mask_(out[j], i0 + j)
    return out


def unbanned(st: SeqState, tokens: list[int]) -> list[int]:
    """A lookup proposal up to the first token logit_bias bans (the target would never keep it)."""
    if st.penalties is None or not st.penalties.bias:
        return tokens
    banned = st.penalties.banned()
    for i, t in enumerate(tokens):
        if t in banned:
            return tokens[:i]
    return tokens


def with_logprobs(
    st: SeqState, new: list[Step], rows: np.ndarray, shaped: list[np.ndarray], ps: Sequence[Dist | None]
) -> list[Step]:
    """Each step's log-probability where it was emitted (its row in the verify pass, drafted or not)
    and `st.logprobs` alternatives: the target's own log-softmax after logit_bias and the
    constraint's mask (what it could say there, before penalties and the samplers' filters), or
    with `post_sampling_probs` the distribution the token was drawn from (`shaped`: the rows as
    sampled; `ps`: those distributions where the round has them already)."""
    out = []
    for i, step in enumerate(new[: len(shaped)]):
        if st.post_sampling_probs:
            p = ps[i] if i < len(ps) and ps[i] is not None else process(shaped[i], st.sp)
            lp, top = logprobs(p, step.token, st.logprobs)
        else:
            lp, top = row_logprobs(model_row(st, rows[i], i), step.token, st.logprobs)
        out.append(dataclasses.replace(step, logprob=lp, top=top))
    return out + new[len(out) :]


def model_row(st: SeqState, row: np.ndarray, i: int) -> np.ndarray:
    """The target's row at draft position i with logit_bias and the constraint's mask only."""
    if st.penalties is not None and st.penalties.bias:
        row = st.penalties.biased(row)
    return st.track.masked(row, i) if st.track is not None and st.track.has_mask(i) else row


def one_point_q(st: SeqState, x: int) -> Dist | None:
    """A lookup token's q for the p/q rule: it was proposed with certainty, so q is one-point and
    the rule accepts x with probability p(x), else samples from p without x (see accept.pq)."""
    if st.sp.greedy or st.cfg.mode != "pq":
        return None
    return Dist(np.array([x], dtype=np.int64), np.ones(1))


def needs_q(st: SeqState, i: int) -> bool:
    """Whether the draft's token at draft position i needs its distribution q (it is sampled from q,
    the p/q rule weighs it, or draft_p_min checks its top probability)."""
    if st.sp.greedy:
        return False
    return st.cfg.mode != "match" or (st.cfg.draft_p_min > 0 and i >= st.cfg.draft_min)


def draft_q(row: np.ndarray, st: SeqState, i: int, q: Dist | None = None) -> Dist | None:
    """The draft's distribution at draft position i where something needs it (`needs_q`): `q` when
    already processed from `row`."""
    if st.sp.greedy or q is not None or not needs_q(st, i):
        return q
    return process(row, st.sp)


def top_prob(row: np.ndarray, q: Dist | None, greedy: bool) -> float:
    """The draft's most likely token's probability (the plan's draft_p_min stop): from its q, or,
    greedy, from the row's softmax."""
    if not greedy:
        return q.top_prob()
    e = np.exp(row - row.max())
    return 1.0 / e.sum()


def draft_token(
    row: np.ndarray, st: SeqState, i: int, q: Dist | None = None, y: int | None = None
) -> tuple[int, Dist | None]:
    """The draft's token at draft position i and the rule's q (`q`: already processed from `row`;
    `y`: the coupled rule's choice from it). Draft position i is sequence position len(tokens) + i
    (the coupled rule's noise key)."""
    sp, cfg = st.sp, st.cfg
    if sp.greedy:
        return argmax(row), None
    q = draft_q(row, st, i, q)
    if cfg.mode == "match":  # sample-and-match drafts greedily, as llama.cpp does
        return argmax(row), None
    if st.noise is not None:
        return (st.noise.sample(q, len(st.tokens) + i) if y is None else y), q
    return q.sample(st.draft_rng), q


def verify_token(
    row: np.ndarray,
    st: SeqState,
    x: int,
    q: Dist | None,
    pos: int,
    p: Dist | None = None,
    y: int | None = None,
) -> tuple[bool, int]:
    """The acceptance rule for one drafted token x at sequence position pos: (kept, the token
    emitted at this position). `p`: the target's distribution, already processed from `row`;
    `y`: the coupled rule's choice from it."""
    if st.sp.greedy:
        return accept.greedy(row, x)
    p = p or process(row, st.sp)
    if st.cfg.mode == "pq":
        return accept.pq(p, q, x, st.verify_rng)
    if st.cfg.mode == "coupled":
        return accept.coupled(p, x, st.noise, pos, y)
    return accept.match(p, x, st.verify_rng)


def sample_token(row: np.ndarray, st: SeqState, pos: int, p: Dist | None = None, y: int | None = None) -> int:
    """The target's own token at sequence position pos (plain decoding, the bonus token)."""
    if st.sp.greedy:
        return argmax(row)
    p = p or process(row, st.sp)
    if st.noise is not None:
        return st.noise.sample(p, pos) if y is None else y
    return p.sample(st.verify_rng)


def distributions(
    pairs: Sequence[tuple[SeqState, np.ndarray, int]],
) -> tuple[dict[SeqState, Dists], dict[SeqState, list[int]]]:
    """Every row's distribution, for each (sequence, its rows, the position of the first) that
    samples: one `process_rows` call per set of sampling parameters, over the rows of all its
    sequences at once (a sequence whose rows were shaped into their own copy gets its own call:
    joining it to the others would copy them all); and for the coupled rule each row's Gumbel-max
    choice, in one call too."""
    by_sp: dict = {}
    for st, rows, pos in pairs:
        if not st.sp.greedy and len(rows):
            key = (st.sp, st if needs_shaping(st) else None, isinstance(rows, TopLogits))
            by_sp.setdefault(key, []).append((st, rows, pos))
    dists: dict[SeqState, Dists] = {}
    choices: dict[SeqState, list[int]] = {}
    for (sp, *_), group in by_sp.items():
        batch = process_rows([rows for _, rows, _ in group], sp)
        keys, at, i = [], [], 0
        for st, rows, pos in group:
            dists[st] = batch[i : i + len(rows)]
            if st.noise is not None:
                keys += st.noise.pos_keys(pos, len(rows))
                at += range(i, i + len(rows))
            i += len(rows)
        if keys:
            ids, probs = batch.ids, batch.probs
            if len(at) < len(batch):  # some rows' sequences sample otherwise
                sel = np.array(at)
                ids, probs = ids[sel], probs[sel]
            w = max(batch.kept)  # the columns past every kept set have probability 0: none wins
            ys = noise.choose(keys, ids[:, :w], probs[:, :w])
            j = 0
            for st, rows, _ in group:
                if st.noise is not None:
                    choices[st], j = ys[j : j + len(rows)], j + len(rows)
    return dists, choices


def verify_rows(st: SeqState, rows: np.ndarray, drafted: Sequence[int]) -> np.ndarray:
    """A sampling sequence's verify rows as sampled, from the first on while each has its mask."""
    n = len(rows)
    if st.track is not None:
        n = next((i for i in range(n) if not st.track.has_mask(i)), n)
    return shape_rows(st, rows[:n], drafted, 0, st.track is not None)


def target_row(st: SeqState, rows: np.ndarray, i: int, drafted: Sequence[int]) -> np.ndarray:
    """The target's logits at draft position i as sampled: penalties and biases, then masked by the
    sequence's constraint there."""
    row = shape_row(st, rows[i], drafted, i)
    return row if st.track is None else st.track.masked(row, i)


def constrained(st: SeqState, fn, *args):  # noqa: ANN001, ANN202
    """Run one constraint operation; a grammar that cannot go on ends this sequence, not the round."""
    try:
        return fn(*args)
    except ConstraintStuck as e:
        st.finish, st.error = "error", e
        return None


def grammar_aware(st: SeqState) -> bool:
    """st's drafts are made under its constraint (forced tokens first, the draft's rows masked)."""
    return st.track is not None and st.cfg.grammar_drafts


def forced_run(st: SeqState, limit: int) -> list[int]:
    """The tokens st's grammar forces next (free drafts), when it speculates."""
    if not grammar_aware(st) or not st.speculative or limit <= 0:
        return []
    return constrained(st, st.track.forced, limit) or []
