"""Continuous batching: which sequences run in the next round. No logits in here.

Requests (`Job`s) wait for a free slot (a backend sequence id in both models' contexts). A new job
lands on the free slot whose cached tokens share the longest prefix with its prompt (a chat's next
turn finds its history), its prompt is prefilled in chunks that ride in the rounds' verify decodes (a
long prompt never freezes the streams already running, and costs them no extra pass over the
weights), and then it joins the rounds. A job leaves when it ends, when it wants no more tokens (a
stop string) or when it is cancelled - at the latest one round later.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

from localspec.decode.round import decode_round
from localspec.decode.state import Evaluator, SeqState


class Job:
    """One request as the scheduler sees it; the engine fills in what the steps mean."""

    prompt: Sequence[int]

    @property
    def cancelled(self) -> bool:
        return False

    def start(self, seq: int) -> SeqState:
        """The sequence state to decode in backend sequence `seq`."""
        raise NotImplementedError

    def deliver(self, steps: list) -> bool:
        """New steps; return False when the job wants no more (its output is decided)."""
        raise NotImplementedError

    def end(self, state: SeqState | None, reason: str) -> None:
        """The job left its slot: reason is its state's finish, 'done' (deliver said so) or 'cancelled'."""

    def fail(self, error: BaseException) -> None:
        """The backend failed while this job ran."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Scheduler:
    def __init__(
        self, target: Evaluator, draft: Evaluator | None, n_slots: int, *, prefill_chunk: int = 128
    ) -> None:
        self.target, self.draft = target, draft
        self.prefill_chunk = prefill_chunk  # prompt tokens per sequence and round beside running streams
        self.cached: list[list[int]] = [[] for _ in range(n_slots)]  # what each slot's caches hold
        self.free: list[int] = list(range(n_slots))
        self.waiting: deque[Job] = deque()
        self.running: list[tuple[Job, SeqState, bool]] = []  # (job, state, still prefilling)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, job: Job) -> None:
        self.waiting.append(job)

    def clear(self) -> None:
        """Forget every slot's cached prefix (only between jobs)."""
        assert not self.running
        for ctx in (self.target, self.draft):
            if ctx is not None:
                ctx.reset()
        self.cached = [[] for _ in self.cached]

    def step(self) -> None:
        """One round: drop cancelled jobs, admit waiting ones, prefill a chunk, decode, deliver."""
        for job in [j for j in self.waiting if j.cancelled]:
            self.waiting.remove(job)
            job.end(None, "cancelled")
        for job, st, _ in [r for r in self.running if r[0].cancelled]:
            self._leave(job, st, "cancelled")
        while self.waiting and self.free:
            self._admit(self.waiting.popleft())
        try:
            decoding = [st for _, st, pre in self.running if not pre]
            filling = [i for i, (_, _, pre) in enumerate(self.running) if pre]
            # alone, whole prompts at once; beside running streams, a chunk per round in their decode
            budget = self.prefill_chunk if decoding else None
            states = [self.running[i][1] for i in filling]
            done = decode_round(self.target, self.draft, decoding, states, budget)
            for i, d in zip(filling, done):
                job, st, _ = self.running[i]
                self.running[i] = (job, st, not d)
        except Exception as e:  # a backend failure: every running job gets it, their caches are dropped
            for job, st, _ in list(self.running):
                self._leave(job, st, "error", forget=True)
                job.fail(e)
            return
        for job, st, pre in list(self.running):
            if pre and st.finish is None:
                continue
            steps = st.take()
            if job.cancelled:
                self._leave(job, st, "cancelled")
            elif not job.deliver(steps):
                self._leave(job, st, "done")
            elif st.finish == "error":  # its constraint cannot go on: this request fails, no other
                self._leave(job, st, "error")
                job.fail(st.error)
            elif st.finish is not None:
                self._leave(job, st, st.finish)

    def _admit(self, job: Job) -> None:
        slot = max(self.free, key=lambda s: (common_prefix(self.cached[s], job.prompt), -len(self.cached[s])))
        self.free.remove(slot)
        n = common_prefix(self.cached[slot], job.prompt)
        for ctx in (self.target, self.draft):  # both caches hold prefixes of cached[slot]
            if ctx is not None:
                ctx.truncate(min(n, ctx.past(slot)), slot)
        self.cached[slot] = list(job.prompt[:n])
        st = job.start(slot)
        self.running.append((job, st, True))

    def _leave(self, job: Job, st: SeqState, reason: str, forget: bool = False) -> None:
        self.running = [r for r in self.running if r[0] is not job]
        if forget:
            for ctx in (self.target, self.draft):
                if ctx is not None:
                    ctx.truncate(0, st.seq)
        self.cached[st.seq] = st.tokens[: self.target.past(st.seq)]
        self.free.append(st.seq)
        if reason != "error":
            job.end(st, reason)
