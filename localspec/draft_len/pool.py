"""The engine's draft-length controllers. One `Costs` for the machine (calibrated at load or
remembered), one tuner per kind of request, and for each request a fork of its tuner; when the
request ends its evidence goes back to the tuner (the next request starts from it) and, for the
pair, into the tuner memory. A fixed `--draft-max K` gets a `FixedK` and learns nothing."""

from __future__ import annotations

from typing import Any, Callable

from localspec.config.settings import AUTO_K_MAX
from localspec.draft_len import calibrate
from localspec.draft_len.auto import AutoK
from localspec.draft_len.controller import KController
from localspec.draft_len.cost_bound import CostBound
from localspec.draft_len.costs import Costs
from localspec.draft_len.evidence import LOOKUP_PRIORS, LOOKUP_PRIORS_SAMPLED
from localspec.draft_len.fixed import FixedK
from localspec.draft_len.lengths import Lengths
from localspec.draft_len.memory import TunerMemory, TunerRecord

# a neutral prefix for timing decodes at a realistic depth (the text itself does not matter)
CALIBRATION_TEXT = "The quick brown fox jumps over the lazy dog. " * 3


class TunerPool:
    def __init__(
        self,
        *,
        n_batch: int,
        has_draft: bool,
        known: TunerRecord | None,
        memory: TunerMemory | None,
        replay: bool = False,
    ) -> None:
        self.n_batch, self.has_draft, self.replay = n_batch, has_draft, replay
        self.known, self.memory = known, memory
        self.costs: Costs | None = None  # made with the first tuner (its K bounds clip the probes)
        self.by_kind: dict[tuple, AutoK] = {}
        self.plain_at_load: float | None = None  # a one-token decode's seconds, timed at load
        self.lengths = Lengths()  # how long requests turned out: a tuned request's expected length

    @classmethod
    def for_pair(
        cls,
        settings: Any,
        target_ctx: Any,
        draft_ctx: Any | None,
        *,
        memory_key: Callable[[], dict[str, Any]],
        log: Callable[[str], None],
        own_cache: bool = True,
    ) -> tuple["TunerPool", str]:
        """The pool for a loaded pair, and how its costs were found: remembered from an earlier
        process on this pair, build and device, measured now (a second or two on a CPU,
        milliseconds on a GPU), or none (a fixed K, or nothing to draft with). `own_cache`: the
        drafter keeps a cache of its own, so its catch-up is timed (its kind's, draft_kinds)."""
        s = settings
        replay = target_ctx.rollback == "snapshot"  # its rejections cost a replay
        pool = lambda known, mem: cls(  # noqa: E731
            n_batch=target_ctx.n_batch,
            has_draft=draft_ctx is not None,
            known=known,
            memory=mem,
            replay=replay,
        )
        if not ((s.drafter is not None or s.uses_lookup) and s.draft_k is None):
            out = pool(None, None)
            if s.cost_bound > 0:  # requests may still draft: their bound is priced in plain steps
                out.plain_at_load = _plain_step(target_ctx)
            return out, "none"
        memory = None
        if s.tuner_cache:
            memory = TunerMemory(memory_key(), note=log)
            record = memory.load()
            if record is not None:
                return pool(record, memory), "remembered"
        return pool(_calibrate(s, target_ctx, draft_ctx, own_cache), memory), "measured"

    def key(self, s: Any, draft_model: bool = True) -> tuple[int, int, bool, bool]:
        """Requests that share a tuner: same K bounds, same drafters (--lookup only, per request or
        with no draft loaded, leaves the draft model out, as does a prompt with ids the draft does
        not know), and greedy or sampled (drafts are kept less often when sampling: their evidence
        and priors are kept apart)."""
        has_model = self.has_draft and s.lookup != "only" and draft_model
        return (
            max(1, s.draft_min),
            min(AUTO_K_MAX, self.n_batch - 1),
            has_model,
            s.temperature > 0 or s.infill,
        )

    def controller(self, s: Any, speculative: bool, *, draft_model: bool = True) -> KController:
        """One request's controller. One tuner per kind: what it measured of this machine's costs
        carries over to the next request, so only the first pays any probe rounds."""
        if not speculative:
            return FixedK(0)
        key = self.key(s, draft_model)
        if s.draft_k is not None:
            return FixedK(s.draft_k, has_model=key[2])
        if key not in self.by_kind:
            self.by_kind[key] = self._new_tuner(*key)
        ctl = self.by_kind[key].fork()
        ctl.expected_len = self.lengths.expected(s.max_tokens)
        return ctl

    def plain_s(self) -> float | None:
        """A plain step's seconds on this engine: the one-token verify as measured now, else as
        measured at load."""
        if self.costs is not None and self.costs.measured(1) is not None:
            return self.costs.measured(1)
        if self.known is not None and 1 in self.known.verify_s:
            return self.known.verify_s[1]
        return self.plain_at_load

    def bound(self, s: Any) -> CostBound | None:
        """A drafting request's cost bound (`cost_bound` plain steps per token), starting from the
        most drafts its controller may ask for."""
        if s.cost_bound <= 0:
            return None
        return CostBound(s.cost_bound, self.plain_s, s.draft_k or AUTO_K_MAX)

    def finished(self, s: Any, ctl: KController, *, whole: bool = True) -> None:
        """A request ended: its evidence goes back to its tuner, and the pair's to the memory; its
        length, where it ran to its end (`whole`: not cancelled), to the lengths."""
        if ctl.costs is None:
            return
        if whole:
            self.lengths.add(s.max_tokens, ctl.emitted)
        tuner = self.by_kind[self.key(s, ctl.has_model)]
        tuner.absorb(ctl)
        if self.memory is not None and (ctl.has_model or not self.has_draft):  # the record is the pair's
            verify, draft_s, catch_s = tuner.costs.snapshot()
            ev = tuner.evidence
            self.memory.remember(  # written by another thread, not this one (the engine's)
                TunerRecord(verify, draft_s, ev.acc.tolist(), ev.tried.tolist(), catch_s=catch_s)
            )

    def flush(self, timeout: float = 5.0) -> None:
        """Write what the tuner memory still holds (at close: it is written off the engine thread)."""
        if self.memory is not None:
            self.memory.flush(timeout)

    def _new_tuner(self, k_min: int, k_max: int, has_model: bool, sampled: bool) -> AutoK:
        if self.costs is None:
            self.costs = Costs.unmeasured(min(max(1, k_min), k_max), k_max, replay=self.replay)
            if self.known is not None:
                self.costs.prime(self.known.verify_s, self.known.draft_s, self.known.catch_s)
        priors = LOOKUP_PRIORS_SAMPLED if sampled else LOOKUP_PRIORS
        tuner = AutoK(k_min=k_min, k_max=k_max, has_model=has_model, prior_lookup=priors, costs=self.costs)
        if self.known is not None:
            tuner.prime(acc=self.known.acc, tried=self.known.tried)  # the costs are primed above
        return tuner


def _calibrate(s: Any, target_ctx: Any, draft_ctx: Any | None, own_cache: bool) -> TunerRecord:
    cap = min(target_ctx.n_batch, target_ctx.n_ctx // 2)
    max_draft = target_ctx.max_draft  # an rs target: no more drafts than it rolls back
    max_batch = min(AUTO_K_MAX + 1, cap, max_draft + 1 if max_draft is not None else cap)
    # a full round of slots: every sequence plain, and every one drafting one token
    also = [n for n in (s.parallel, 2 * s.parallel) if s.parallel > 1 and n <= cap]
    # the prefix and the largest verify batch must fit one slot, however small --n-ctx is
    prefix = target_ctx.model.tokenize(CALIBRATION_TEXT, add_special=True)
    creep = 64 if target_ctx.rollback == "rs" else 0  # rs timings run a position on each
    prefix = prefix[: target_ctx.n_ctx - max([max_batch, *also]) - creep]
    verify, draft_s = calibrate.measure(target_ctx, draft_ctx, prefix, max_batch=max_batch, also=also)
    # a drafter fed by the target's decodes (a head of its own) follows its cache: it never catches up
    catch_s = calibrate.catch_up_time(draft_ctx, prefix) if own_cache and draft_s is not None else None
    return TunerRecord(verify, draft_s, catch_s=catch_s)


def _plain_step(target_ctx: Any) -> float:
    """Seconds for a one-token decode at a realistic depth, the fastest of three (cache left empty)."""
    prefix = target_ctx.model.tokenize(CALIBRATION_TEXT, add_special=True)[: max(1, target_ctx.n_ctx // 2)]
    t = float("inf")
    for _ in range(3):  # the prefix each time: a checkpointing memory cannot go back to its end
        target_ctx.truncate(0)
        target_ctx.eval(prefix, 0, 1)
        t = min(t, calibrate.floor_time(target_ctx, prefix[-1:], len(prefix), tries=1))
    target_ctx.truncate(0)
    return t
