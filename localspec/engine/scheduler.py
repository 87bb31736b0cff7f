"""Continuous batching: which sequences run in the next round. No logits in here.

Requests (`Schedulable` jobs) wait for a free slot (a backend sequence id in both models' contexts). A
new job lands on the free slot whose cached tokens share the longest prefix with its prompt (a chat's next
turn finds its history); where another slot, free or running, holds a longer prefix, that prefix is
copied into the new slot instead of evaluated again (a KV cache only: sharing.py). The rest of its
prompt is prefilled in chunks that ride in the rounds' verify decodes (a
long prompt never freezes the streams already running, and costs them no extra pass over the
weights), and then it joins the rounds. A job leaves when it ends, when it wants no more tokens (a
stop string) or when it is cancelled - at the latest one round later (a prompt alone is prefilled
a batch a round, so that is never a whole long prefill). A stage that raises (admit,
prefill, round, deliver, end) fails only the job it raised for, which gives its slot back.

A cancel does not wait for the round: where every job in it is cancelled, `cancelled()` (on the
canceller's thread) interrupts its decode part way (llama/interrupt.py), so an editor's stale
completion gives its slot to the next keystroke at once. An interrupted round is put back as a
failed one is; a job still live in it (it came in meanwhile) has it run again.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from typing import Any, Mapping, Protocol, Sequence

from localspec.decode.round import decode_round
from localspec.decode.sources import sources_for
from localspec.decode.sources.base import DraftSource
from localspec.decode.sources.model import ModelSource
from localspec.decode.state import SeqState
from localspec.engine.prompt_disk.warm import PromptDisk
from localspec.engine.sharing import Sharing, common_prefix
from localspec.errors import Interrupted, LocalspecError
from localspec.evaluator import Evaluator

# a recurrent target keeps prompt checkpoints inside a long prefill at 256, 512, 1024, ... tokens (and
# where it ends): a later prompt sharing a long prefix (a system prompt) reuses at least half of it
CHECKPOINT_FIRST = 256
# for tests only: every round that prefills takes this many seconds more (a slow machine's long
# prompt, made on a small model: tests/system/test_long_prefill.py)
PREFILL_DELAY_S = float(os.environ.get("LOCALSPEC_TEST_PREFILL_DELAY", "0") or 0)


def checkpoint_marks(n_prompt: int, have: int) -> list[int]:
    """Where a prefill from `have` to the end of an n_prompt-token prompt stops for a checkpoint."""
    marks, p = [], CHECKPOINT_FIRST
    while p < n_prompt - 1:
        if p > have:
            marks.append(p)
        p *= 2
    return marks


class Schedulable:
    """One request as the scheduler sees it (a job; the engine's `Request` is one); the engine fills
    in what the steps mean."""

    prompt: Sequence[int]

    @property
    def cancelled(self) -> bool:
        return False

    def start(self, seq: int) -> SeqState:
        """The sequence state to decode in backend sequence `seq`."""
        raise NotImplementedError

    def prefilled(self, n: int) -> None:
        """`n` of its prompt's tokens are in the cache (after its admission, the prefix it reused;
        then after each round of its prefill): a long prompt's progress, which streams show."""

    def deliver(self, steps: list) -> bool:
        """New steps; return False when the job wants no more (its output is decided)."""
        raise NotImplementedError

    def end(self, state: SeqState | None, reason: str) -> None:
        """The job left its slot: reason is its state's finish, 'done' (deliver said so) or 'cancelled'."""

    def fail(self, error: BaseException) -> None:
        """The job ended with `error` (its decode, its start, its delivery or its end raised); it
        must not raise itself."""


class Stop(Protocol):
    """What interrupts a decode part way (llama.Interrupt); set from any thread."""

    def set(self) -> None: ...

    def clear(self) -> None: ...


class NoStop:
    """Decodes run to their end (a fake backend, or no abort callback)."""

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass


class Scheduler:
    def __init__(
        self,
        target: Evaluator,
        draft: Evaluator | None,
        n_slots: int,
        *,
        prefill_chunk: int = 128,
        prefill_alone: int = 512,
        disk: PromptDisk | None = None,
        drafting: type[DraftSource] = ModelSource,
        kept: Mapping[type, Any] | None = None,
        stop: Stop | None = None,
        cache_reuse: int = 0,
    ) -> None:
        """`drafting`: the source that decodes with `draft` (its kind's, draft_kinds.source_of);
        `kept`: what the free sources keep across this engine's requests (sources.remembered);
        `stop`: what interrupts the target's and the draft's decodes (llama.Interrupt);
        `cache_reuse`: cached runs of at least this many tokens that moved are shifted, not
        evaluated again (0: only the common prefix is kept; the target must `can_shift`)."""
        self.target, self.draft = target, draft
        self.sources = sources_for(draft, drafting, kept)  # the draft sources every round walks
        self.prefill_chunk = prefill_chunk  # prompt tokens per sequence and round beside running streams
        # and with no stream running: a whole n_batch decode (what a long prompt is split into anyway),
        # so a cancel or a newcomer is seen between batches, not once a 10k-token prefill is done
        self.prefill_alone = prefill_alone
        self.cached: list[list[int]] = [[] for _ in range(n_slots)]  # what each slot's caches hold
        self.free: list[int] = list(range(n_slots))
        self.waiting: deque[Schedulable] = deque()
        self.running: list[tuple[Schedulable, SeqState, bool]] = []  # (job, state, still prefilling)
        self.marks: dict[int, list[int]] = {}  # slot -> checkpoint positions its prefill stops at
        self._recurrent = target.checkpoints  # a recurrent target: prompt checkpoints
        self.sharing = Sharing(target, draft)
        self.disk = disk  # long prompts' states saved and loaded (prompt_disk/warm.py)
        self.stop = stop or NoStop()
        self.cache_reuse = cache_reuse
        self._in_round = False  # a decode of the round runs (what `cancelled` may interrupt)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, job: Schedulable) -> None:
        self.waiting.append(job)

    def clear(self) -> None:
        """Forget every slot's cached prefix (only between jobs)."""
        assert not self.running
        for ctx in self._contexts():
            ctx.reset()
        self.cached = [[] for _ in self.cached]

    def step(self) -> None:
        """One round: drop cancelled jobs, admit waiting ones, prefill a chunk, decode, deliver.
        What raises in a stage fails only the job it raised for, and that job's slot is free again."""
        self.stop.clear()  # one a cancel set just as the last round ended: those jobs are dropped now
        for job in [j for j in self.waiting if j.cancelled]:
            self.waiting.remove(job)
            self._end(job, None, "cancelled")
        for job, st, _ in [r for r in self.running if r[0].cancelled]:
            self._leave(job, st, "cancelled")
        self._admit_waiting()
        runs = [(job, st) for job, st, _ in self.running]
        if runs:
            drafter = self.sources.drafter
            if drafter is not None:  # the sequences it drafts for (it holds their state)
                self.sharing.top_up_drafts(
                    self._held,
                    [st for _, st, pre in self.running if not pre and drafter.mine(st) is not None],
                )
            self._in_round = True
            try:
                self._round(runs)
            except Interrupted:  # its jobs were cancelled: they leave below or next step
                self._resync(runs)
            except Exception as e:  # noqa: BLE001 - find whose rows caused it, fail only those
                self._isolate(runs, e)
            finally:
                self._in_round = False
                self.stop.clear()
        for job, st, pre in list(self.running):
            if pre and st.finish is None and not job.cancelled:
                continue
            try:
                steps = st.take()
                if job.cancelled:
                    self._leave(job, st, "cancelled")
                elif not job.deliver(steps):
                    self._leave(job, st, "done")
                elif st.finish == "error":  # its constraint cannot go on: this request fails, no other
                    self._leave(job, st, "error", error=st.error)
                elif st.finish is not None:
                    self._leave(job, st, st.finish)
            except Exception as e:  # noqa: BLE001 - this job's own text or bookkeeping
                self._leave(job, st, "error", error=e)

    def cancelled(self) -> None:
        """A job was cancelled (called on the canceller's thread). Where no running job is live any
        more, the round's decode stops now instead of at its end (a long prompt's batch: seconds)."""
        running = self.running
        if self._in_round and running and all(job.cancelled for job, _, _ in running):
            self.stop.set()

    def abort(self, error: BaseException) -> None:
        """Fail every job and free every slot, caches forgotten (a bug of ours, or the engine
        closing): nothing stays busy and no job waits forever."""
        jobs = list(self.waiting) + [r[0] for r in self.running]
        self.waiting.clear()
        self.running.clear()
        for slot in range(len(self.cached)):
            self._forget(slot)
        self.free = list(range(len(self.cached)))
        for job in jobs:
            job.fail(error)

    # -- stages ------------------------------------------------------------------------------------
    def _admit_waiting(self) -> None:
        """Admit waiting jobs in order while slots are free. One whose prompt a running slot is still
        prefilling (n choices of one prompt) waits until that prefill has passed their common prefix,
        then copies it (llama-server's WAIT_OTHER); the jobs behind it take only the slots it leaves."""
        held_back = 0
        for job in list(self.waiting):
            if len(self.free) <= held_back:
                break
            prefilling = [st for _, st, pre in self.running if pre]
            if self.sharing.should_wait(self._held(), prefilling, job.prompt):
                held_back += 1
                continue
            self.waiting.remove(job)
            self._admit(job)

    def _admit(self, job: Schedulable) -> None:
        src, n_src = self.sharing.source(self._held(), job.prompt)
        own = max(common_prefix(self.cached[s], job.prompt) for s in self.free)
        on_disk = self.disk.reach(job.prompt) if self.disk is not None else 0
        if max(n_src, on_disk) > own:  # the prefix comes from elsewhere: the slot whose cache loses least
            slot = min(self.free, key=lambda s: len(self.cached[s]))
        else:
            slot = max(
                self.free, key=lambda s: (common_prefix(self.cached[s], job.prompt), -len(self.cached[s]))
            )
        self.free.remove(slot)
        try:
            if n_src > own:
                self.sharing.copy(src, slot, n_src, common_prefix(self.cached[slot], job.prompt))
                self.cached[slot] = list(job.prompt[:n_src])
            else:
                self._reuse_prefix(slot, job.prompt)
            if self.disk is not None:  # where the disk holds more of the prompt than memory does
                self.disk.restore(slot, job.prompt)
                self.cached[slot] = list(job.prompt[: self.target.past(slot)])
            st = job.start(slot)
            self.marks[slot] = (
                checkpoint_marks(len(job.prompt), self.target.past(slot)) if self._recurrent else []
            )
            job.prefilled(self.target.past(slot))
        except Exception as e:  # noqa: BLE001
            self._forget(slot)
            self.free.append(slot)
            job.fail(e)
            return
        self.running.append((job, st, True))

    def _held(self) -> dict[int, Sequence[int]]:
        """Each slot's tokens as its target cache holds them now (its draft holds a prefix of them)."""
        held: dict[int, Sequence[int]] = {slot: self.cached[slot] for slot in self.free}
        for _, st, _ in self.running:
            held[st.seq] = st.tokens[: self.target.past(st.seq)]
        return held

    def _reuse_prefix(self, slot: int, prompt: Sequence[int]) -> None:
        """Keep the slot's cached prefix of `prompt`. A cache that cannot be cut part-way (a
        recurrent model's state) starts empty instead: a full prefill, not a failed request."""
        n = common_prefix(self.cached[slot], prompt)
        try:
            if self.cache_reuse:
                n = self._reuse_moved(slot, prompt, n)
            for ctx in self._contexts():  # both caches hold prefixes of cached[slot]
                ctx.truncate(min(n, ctx.past(slot)), slot)
        except LocalspecError:
            n = 0
            for ctx in self._contexts():
                ctx.truncate(0, slot)
        self.cached[slot] = list(prompt[:n])

    def _reuse_moved(self, slot: int, prompt: Sequence[int], n: int) -> int:
        """--cache-reuse: the target keeps its prefix of `prompt` and the runs that moved back in it
        (shifted); a draft that can shift does the same, one that cannot keeps the common prefix
        `n`. Both hold prefixes of `prompt` after it; returns the target's."""
        held = self.target.reuse_chunks(slot, prompt, self.cache_reuse)
        if self.draft is not None and self.draft.can_shift:
            self.draft.reuse_chunks(slot, prompt, self.cache_reuse)
        elif self.draft is not None:
            self.draft.truncate(min(n, self.draft.past(slot)), slot)
        return held

    def _round(self, runs: list[tuple[Schedulable, SeqState]]) -> None:
        """One decode_round over `runs` (each either decoding or still prefilling)."""
        filling = {st for _, st, pre in self.running if pre}
        decoding = [st for _, st in runs if st not in filling]
        states = [st for _, st in runs if st in filling]
        # beside running streams, a chunk per round in their decode; alone, a batch a round
        budget = self.prefill_chunk if decoding else self.prefill_alone
        for st in states:  # stop where a checkpoint goes (every filling sequence: one budget)
            past = self.target.past(st.seq)
            gap = next((m - past for m in self.marks.get(st.seq, ()) if m > past), None)
            budget = gap if gap is not None and gap < budget else budget
        done = decode_round(self.target, self.draft, decoding, states, budget, self.sources)
        if states and PREFILL_DELAY_S:
            time.sleep(PREFILL_DELAY_S)
        for st in states:
            if self.target.past(st.seq) in self.marks.get(st.seq, ()):
                self.target.checkpoint(st.seq)
        filled = {st for st, d in zip(states, done) if d}
        for st in filled if self.disk is not None else ():  # the target holds the prompt now
            self.disk.prefilled(st)
        for st in filled:  # a recurrent memory keeps the prompt's state for the next request; a
            for ctx in self._contexts():  # draft still catching up, once it gets there
                if ctx.checkpoints:
                    ctx.checkpoint(st.seq, at=len(st.tokens) - 1)
        self.running = [(j, st, pre and st not in filled) for j, st, pre in self.running]
        for job, st, _ in self.running:
            if st in states:
                job.prefilled(len(job.prompt) if st in filled else self.target.past(st.seq))

    def _isolate(self, runs: list[tuple[Schedulable, SeqState]], error: Exception) -> None:
        """A round raised. llama.cpp refuses a whole batch for one bad row, so: the round again
        without the newcomers (their prompt chunks are what changed), and if that passes, each
        newcomer alone; else every sequence alone. Only a sequence that fails alone is failed."""
        self._resync(runs)
        filling = {st for _, st, pre in self.running if pre}
        newcomers = [r for r in runs if r[1] in filling]
        others = [r for r in runs if r[1] not in filling]
        suspects = runs
        if newcomers and others and self._passes(others):
            suspects = newcomers
        if len(suspects) == 1:  # the only one left to blame
            self._leave(*suspects[0], "error", error=error)
            return
        for run in suspects:
            try:
                self._round([run])
            except Interrupted:  # cancelled meanwhile: not its failure
                self._resync([run])
            except Exception as e:  # noqa: BLE001
                self._leave(*run, "error", error=e)

    def _passes(self, runs: list[tuple[Schedulable, SeqState]]) -> bool:
        try:
            self._round(runs)
            return True
        except Exception:  # noqa: BLE001
            self._resync(runs)
            return False

    def _resync(self, runs: list[tuple[Schedulable, SeqState]]) -> None:
        """After a failed decode, back to the round's invariant: the target holds tokens[:-1] (a
        prompt being filled holds less, and llama.Context dropped the failed decode's entries), the
        draft a prefix of that."""
        for _, st in runs:
            upto = len(st.tokens) - 1
            for ctx in self._contexts():
                if ctx.past(st.seq) > upto:
                    ctx.truncate(upto, st.seq)

    def _leave(self, job: Schedulable, st: SeqState, reason: str, error: BaseException | None = None) -> None:
        self.running = [r for r in self.running if r[0] is not job]
        if error is not None:  # what its caches hold is not known to be right: forget it
            self._forget(st.seq)
        else:
            self.cached[st.seq] = st.tokens[: self.target.past(st.seq)]
            if self.disk is not None:  # the draft's cache caught up on the prompt by now, if it drafted
                self.disk.left(st)
            for src in self.sources.finishing:
                src.finish(st)
        self.free.append(st.seq)
        if error is not None:
            job.fail(error)
        else:
            self._end(job, st, reason)

    def _end(self, job: Schedulable, st: SeqState | None, reason: str) -> None:
        try:
            job.end(st, reason)
        except Exception as e:  # noqa: BLE001 - its response could not be built: it fails alone
            job.fail(e)

    def _forget(self, slot: int) -> None:
        for ctx in self._contexts():
            with contextlib.suppress(Exception):
                ctx.truncate(0, slot)
        self.cached[slot] = []

    def _contexts(self) -> list[Evaluator]:
        return [ctx for ctx in (self.target, self.draft) if ctx is not None]
