"""The draft model (or any drafter whose context decodes as one: the target's own head): it drafts for every sequence the plan
gives it, one batched decode per draft position across them, each token sampled as the sequence
samples (penalties, the constraint's mask) and followed by what the grammar then forces. Drafting
stops at the plan's K, at EOG, where the constraint allows nothing, or where the draft is unsure
(the plan's `draft_p_min`). Its cache catches up lazily, in the first round a sequence drafts."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.decode.clock import Clock
from localspec.decode.rows import (
    distributions,
    draft_q,
    draft_token,
    grammar_aware,
    needs_q,
    shape_rows,
    top_prob,
)
from localspec.decode.sampling import Dist
from localspec.decode.seqplan import SeqPlan
from localspec.decode.sources.base import DraftSource, SourceSpec
from localspec.decode.sources.grammar import GrammarSource
from localspec.decode.sources.lookup import MAX_PROPOSAL
from localspec.decode.state import SeqState, Step
from localspec.draft_len.evidence import MODEL
from localspec.evaluator import Evaluator, Item


class ModelSource(DraftSource):
    """Drafts by decoding with the draft context, under the name its context gives its drafts
    (`Evaluator.source`: "draft" for a draft model; another kind of drafter names its own)."""

    def __init__(self, ctx: Evaluator) -> None:
        self.ctx = ctx
        self.spec = SourceSpec(ctx.source, evidence=MODEL)
        self.grammar = GrammarSource()  # what the grammar forces after each of its tokens

    @classmethod
    def for_round(cls, draft: Evaluator | None, kept: None = None) -> "ModelSource | None":
        """This source drafts wherever there is a draft context."""
        return cls(draft) if draft is not None else None

    def open(self, st: SeqState) -> bool | None:
        """The draft may see the sequence (True), unless it holds an id beyond the draft's
        vocabulary (a target's may be up to 128 ids larger): then it drafts nothing for it."""
        return True if st.cfg.draft_model else None

    def offer(self, p: SeqPlan) -> None:
        """Whether it drafts for the sequence this round, and how far the draft's cache lags the
        text: a catch-up to pay before it drafts."""
        st = p.st
        if self.mine(st):
            p.model = st.k_ctl.has_model
            p.behind = len(st.tokens) - 1 - self.ctx.past(st.seq)

    def propose(self, plans: Sequence[SeqPlan], clock: Clock) -> None:
        is_eog, n_vocab = self.ctx.is_eog, self.ctx.n_vocab  # drafts ending the output add nothing
        active = [
            p
            for p in plans
            if p.model and p.total > len(p.drafts) and not (p.drafts and is_eog(p.drafts[-1]))
            and _known(p.drafts, n_vocab)  # a forced id only the target has: the draft cannot go on
        ]  # fmt: skip
        clock.caught = clock.timed("catch", self._catch_up, [p.st for p in active], clock)
        items = [self._first_item(p, clock) for p in active]
        while active:
            rows = clock.timed("draft", self.ctx.eval_views, items)
            active, items = self._step(active, rows)

    def accept(self, p: SeqPlan, new: Sequence[Step], keep: int) -> None:
        st, ctx = p.st, self.ctx
        if self.mine(st):
            n_vocab = ctx.n_vocab
            for s in new:
                if s.token >= n_vocab:
                    st.drafting[self.spec.name] = None  # the target made an id the draft has not got
                    break
        if st.speculative and st.k_ctl.has_model:
            ctx.truncate(min(ctx.past(st.seq), keep), st.seq)

    # no reset: the caller cuts every cache back after a round that raised

    # -- drafting --------------------------------------------------------------------------------
    def _first_item(self, p: SeqPlan, clock: Clock) -> Item:
        """The first draft step: what the cache lacks of the text, then the drafts so far."""
        st, ctx = p.st, self.ctx
        n = len(st.tokens)
        if ctx.past(st.seq) >= n:  # fully cached: re-evaluate the last token for its logits
            ctx.truncate(n - 1, st.seq)
        have = ctx.past(st.seq)
        if have < n - st.n_new:  # some of the prompt is not in the draft's cache yet
            _count_prompt(clock, st, have, n)
        return Item(st.seq, st.tokens[have:n] + p.drafts, have, 1)

    def _step(self, active: list[SeqPlan], rows: list[np.ndarray]) -> tuple[list[SeqPlan], list[Item]]:
        """One draft position for every active plan: each row as sampled (penalties, the mask when
        drafting under the constraint), the distributions of every row that needs one (and the
        coupled choices) in one call, then a token each; returns who drafts on, and their items."""
        shaped = [
            shape_rows(p.st, row[:1], p.drafts, len(p.drafts), grammar_aware(p.st))
            for p, row in zip(active, rows)
        ]
        dq, dy = distributions(
            [(p.st, row, len(p.st.tokens) + len(p.drafts)) for p, row in zip(active, shaped)
             if needs_q(p.st, len(p.drafts))]
        )  # fmt: skip
        still, items = [], []
        for p, row in zip(active, shaped):
            q, y = (dq[p.st][0], dy[p.st][0] if p.st in dy else None) if p.st in dq else (None, None)
            item = self._draft_one(p, row[0], q, y)
            if item is not None:
                still.append(p)
                items.append(item)
        return still, items

    def _draft_one(self, p: SeqPlan, row: np.ndarray, q: Dist | None, y: int | None) -> Item | None:
        """The draft's token at the plan's next position (and what the grammar forces after it);
        the next step's item, or None where this plan's drafting ends."""
        st, i = p.st, len(p.drafts)
        aware = grammar_aware(st)
        if p.judges(i):
            q = draft_q(row, st, i, q)
            if top_prob(row, q, st.sp.greedy) < p.p_min:
                return None  # unsure: the plan stops here
        x, q = draft_token(row, st, i, q, y)
        if aware and not st.track.push([x]):
            return None  # the grammar allows nothing after it: a dead end the target cannot take
        if st.track is not None and not aware:
            st.track.follow(x)
        p.push(x, q, self.spec.name)
        end, run = self.ctx.is_eog(x), []
        if aware and not end:  # what the grammar forces next: free, it rides in the next draft step
            run = self._forced_after(p)
            # ... and the draft's part ends where it is an id only the target has (it verifies it)
            end = bool(run) and (self.ctx.is_eog(run[-1]) or not _known(run, self.ctx.n_vocab))
        if len(p.drafts) < p.total and not end:
            return Item(st.seq, [x, *run], len(st.tokens) + i, 1)
        return None

    def _forced_after(self, p: SeqPlan) -> list[int]:
        """What the grammar forces after the draft's token, drafted: within the batch a tuned K
        priced (so they take the place of model drafts), on top of a fixed K."""
        tuned = p.st.k_ctl.costs is not None
        run = self.grammar.after(p, (p.total if tuned else p.cap) - len(p.drafts))
        if run and not tuned:
            p.total = min(p.total + len(run), p.cap)
        return run

    def _catch_up(self, active: list[SeqState], clock: Clock) -> dict[SeqState, int]:
        """Bring the draft's cache of each drafting sequence to `tokens[:-1]` in one decode where it
        lags by more than a round's worth (its prompt, or the tokens of plain rounds): those
        sequences' prefill; returns the tokens each caught up on (the tuner prices the next one). A
        short lag (the last draft and the bonus token) rides in the first draft step. A draft that
        rolls back through snapshots catches up whenever it lags by more than one token and settles
        there: its snapshot is taken at the first draft step, and a replay riding in that step would
        be undone with the drafts at every rejection. Such a replay (no longer than a round) is
        drafting's cost, not prefill: nothing is returned for it."""
        ctx = self.ctx
        snapshots = ctx.rollback == "snapshot"
        items, behind = [], []
        replay_only = True
        for st in active:
            have, upto = ctx.past(st.seq), len(st.tokens) - 1
            if upto - have > (1 if snapshots else 2):
                _count_prompt(clock, st, have, upto)
                items.append(Item(st.seq, st.tokens[have:upto], have, 1))
                behind.append(st)
                replay_only &= snapshots and upto - have <= MAX_PROPOSAL + 2
        if not items:
            return {}
        ctx.eval_views(items)
        if snapshots:
            for st in behind:
                ctx.truncate(len(st.tokens) - 1, st.seq)
        return {} if replay_only else {st: len(it.tokens) for st, it in zip(behind, items)}


def _known(tokens: Sequence[int], n_vocab: int) -> bool:
    """Whether the draft has every id of `tokens` (a target's vocabulary may be wider)."""
    return not tokens or max(tokens) < n_vocab


def _count_prompt(clock: Clock, st: SeqState, have: int, end: int) -> None:
    """The draft evaluates positions [have, end): tally those in the prompt for the record phase
    (the target's n_prefilled counterpart; a draft catches up on the prompt late, at its first
    drafting round)."""
    n = max(min(end, len(st.tokens) - st.n_new) - have, 0)
    clock.draft_prompt[st] = clock.draft_prompt.get(st, 0) + n
