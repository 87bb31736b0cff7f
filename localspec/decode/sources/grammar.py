"""The tokens the output's grammar forces (a JSON schema's keys, quotes and punctuation): drafts that
cost nothing to make and, the target's rows being masked alike, that it keeps for certain - a
one-point q, as the lookup's. The leading run is drafted while the round plans (every plan is
priced with it in front); after each token the draft model writes, what the grammar then forces
rides along (ModelSource)."""

from __future__ import annotations

from typing import Sequence

from localspec.decode.clock import Clock
from localspec.decode.rows import forced_run, one_point_q
from localspec.decode.seqplan import SeqPlan
from localspec.decode.sources.base import DraftSource, SourceSpec
from localspec.decode.state import SeqState
from localspec.evaluator import Evaluator

MAX_RUN = 16  # forced tokens drafted in front of a round at most (AUTO_K_MAX)


class GrammarSource(DraftSource):
    spec = SourceSpec("grammar", evidence=None)

    @classmethod
    def for_round(cls, draft: Evaluator | None, kept: None = None) -> "GrammarSource":
        return cls()

    def offer(self, p: SeqPlan) -> None:
        p.forced = forced_run(p.st, min(p.cap, MAX_RUN))

    def propose(self, plans: Sequence[SeqPlan], clock: Clock) -> None:
        for p in plans:
            if p.forced:
                p.add(p.forced, [one_point_q(p.st, x) for x in p.forced], self.spec.name)

    def after(self, p: SeqPlan, room: int) -> list[int]:
        """What the grammar forces after the draft model's last token, up to `room` tokens."""
        run = forced_run(p.st, room)
        p.add(run, [one_point_q(p.st, x) for x in run], self.spec.name)
        return run

    # no accept: the matcher settles with the sequence (settle.py), every source's drafts are in it

    def reset(self, states: Sequence[SeqState]) -> None:
        for st in states:
            if st.track is not None:  # every source's drafts of the round, undone in the matcher
                st.track.end_round()
