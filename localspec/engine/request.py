"""One request inside the engine (the scheduler's `Schedulable`) and the `Handle` its caller holds."""

from __future__ import annotations

import queue
import secrets
import threading
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from localspec.config.settings import Settings
from localspec.constrain import Constraint, Grammar, compile_constraint, vocabulary_for
from localspec.decode.infill import Infill
from localspec.decode.sampling import Penalties, SamplingParams
from localspec.decode.state import SeqState, SpecConfig, Step
from localspec.decode.stats import Counters, Stats
from localspec.decode.text_stream import TextStream
from localspec.draft_len.pool import TunerPool
from localspec.engine.loader import LoadedPair
from localspec.engine.scheduler import Schedulable
from localspec.engine.types import Chunk, Progress, Response
from localspec.errors import GenerationFailed


class Request(Schedulable):
    """A submitted request: builds its sequence state, turns its steps into chunks on a queue."""

    def __init__(
        self,
        ids: list[int],
        s: Settings,
        pair: LoadedPair,
        tuners: TunerPool,
        keep_special: frozenset[int] = frozenset(),
        *,
        draft_model: bool = True,
        sink: Callable[[object], None] | None = None,
        images: Sequence[object] = (),
        lookup_text: Sequence[int] = (),
        infill: Infill | None = None,
    ) -> None:
        """`draft_model=False`: the prompt holds an id the draft model does not know; only the lookup
        may draft for it. `sink`: where the chunks go instead of the handle's queue (Engine.submit).
        `images`: the image runs (llama.ImageRun) the prompt's image ids come from, held while it runs.
        `lookup_text`: more tokens the lookup drafts from; `infill`: the vocabulary's infill sampler
        (decode/infill.py), used when the settings ask for it."""
        self.prompt, self.settings, self.tuners = ids, s, tuners
        self.lookup_text = lookup_text
        self.sampling = sampling_of(s, infill if s.infill else None)
        self.images = images
        self.seed = s.seed if s.seed is not None else secrets.randbits(32)
        self.lookup = s.uses_lookup
        self.draft_model = draft_model and pair.draft_ctx is not None
        self.speculative = s.spec and (self.draft_model or self.lookup)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.post = sink or self.queue.put  # chunks, an error, then None at the end
        self.cancel_event = threading.Event()
        self.counters = Counters(rounds_trace=[] if s.trace else None)
        self.k_ctl = tuners.controller(s, self.speculative, draft_model=self.draft_model)
        self.grammar = grammar_for(s, pair)  # compiled here: a bad schema is refused before queueing
        target = pair.target
        # control tokens a chat syntax is written with (Llama 3's <|python_tag|>) come out as text
        token_bytes = (
            (lambda t: target.token_bytes(t, special=t in keep_special))
            if keep_special
            else target.token_bytes
        )
        self.text = TextStream(
            token_bytes, target.is_eog, s.stop, n_indent=s.n_indent, t_max_predict_ms=s.t_max_predict_ms
        )
        self.parts: list[str] = []
        self.logprobs: list | None = [] if s.logprobs else None
        self.t_start = time.perf_counter()
        self._cached: int | None = None  # the prefix its admission reused, and when
        self._t_admitted = 0.0

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def start(self, seq: int) -> SeqState:
        s = self.settings
        cfg = SpecConfig(
            mode=s.spec_mode,
            draft_min=s.draft_min,
            draft_p_min=s.draft_p_min,
            grammar_drafts=s.grammar_drafts,
        )
        rng = np.random.default_rng(self.seed)
        return SeqState.start(
            seq, self.prompt, self.sampling, cfg, rng, self.counters, self.k_ctl,
            max_new=s.max_tokens, speculative=self.speculative, lookup=self.lookup,
            matcher=self.grammar.matcher() if self.grammar is not None else None,
            penalties=penalties_of(s),
            logprobs=s.top_logprobs if s.logprobs else -1, post_sampling_probs=s.post_sampling_probs,
            draft_model=self.draft_model,
            bound=self.tuners.bound(s) if self.speculative else None, lookup_text=self.lookup_text,
        )  # fmt: skip

    def _put(self, deltas: list[tuple[str, list[Step]]]) -> None:
        for delta, steps in deltas:
            self.parts.append(delta)
            lps = [(st.logprob, st.top) for st in steps] if self.logprobs is not None else []
            if self.logprobs is not None:
                self.logprobs += lps
            self.post(Chunk(delta, [st.token for st in steps], [st.from_draft for st in steps], logprobs=lps))

    def prefilled(self, n: int) -> None:
        now = time.perf_counter()
        if self._cached is None:
            self._cached, self._t_admitted = n, now
        ms = int((now - self._t_admitted) * 1e3)
        self.post(Progress(len(self.prompt), self._cached, n, ms))

    def deliver(self, steps: list[Step]) -> bool:
        self._put(self.text.feed(steps, time.perf_counter))
        return not self.text.done

    def end(self, state: SeqState | None, reason: str) -> None:
        self.tuners.finished(self.settings, self.k_ctl, whole=reason != "cancelled")
        if reason == "cancelled":
            self.post(None)
            return
        ts = self.text
        self._put(ts.close())
        if reason == "context" and not ts.done:
            ts.finish = "context"
        self.counters.unaccept(ts.dropped)
        t_end = time.perf_counter()
        t_first = ts.first_token_at
        stats = Stats.build(
            self.counters,
            speculative=self.speculative,
            n_prompt=len(self.prompt),
            n_generated=len(ts.tokens) + ts.saw_eog,
            decode_s=(t_end - t_first) if t_first else 0.0,
            total_s=t_end - self.t_start,
        )
        resp = Response(
            "".join(self.parts),
            list(ts.tokens),
            ts.finish,
            stats,
            self.prompt,
            self.seed,
            self.logprobs,
            ts.stop_hit,
        )
        self.post(Chunk("", [], [], resp))
        self.post(None)

    def fail(self, error: BaseException) -> None:
        if not isinstance(error, GenerationFailed):  # bad input raised in submit(); this is ours
            cause, error = error, GenerationFailed(f"the generation failed: {error}")
            error.__cause__ = cause
        self.post(error)
        self.post(None)


def sampling_of(s: Settings, infill: Infill | None = None) -> SamplingParams:
    return SamplingParams(
        temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, infill=infill
    )


def penalties_of(s: Settings) -> Penalties:
    return Penalties(
        repeat=s.repeat_penalty, presence=s.presence_penalty, frequency=s.frequency_penalty,
        last_n=s.repeat_last_n, bias=s.logit_bias,
    )  # fmt: skip


def constraint_of(s: Settings) -> Constraint | None:
    """The output constraint the settings ask for, if any."""
    if s.json_schema is not None:
        return Constraint(kind="json_schema", text=s.json_schema, strict=s.json_strict)
    if s.grammar is not None:
        return Constraint(kind="grammar", text=s.grammar)
    return None


def grammar_for(s: Settings, pair: LoadedPair) -> Grammar | None:
    """The constraint compiled for the target's vocabulary (its llguidance tokenizer is built on the
    first constrained request and kept with the model); raises ConstraintError on bad input."""
    c = constraint_of(s)
    if c is None:
        return None
    return compile_constraint(c, vocabulary_for(pair.target, pair.target_ctx.n_vocab))


class Handle:
    """One submitted request. Iterating yields its chunks (the last carries the Response); cancel()
    stops it - its slot is free again within one round, at once where no other request runs in it
    (its decode is interrupted) - after which iteration ends without a response. Errors raise where the handle is iterated."""

    def __init__(self, req: Request, on_cancel: Callable[[], None] | None = None) -> None:
        """`on_cancel`: told after a cancel, on the canceller's thread (Scheduler.cancelled)."""
        self._req = req
        self._on_cancel = on_cancel
        self.prompt_tokens = req.prompt
        self.settings = req.settings  # what this request runs with: the engine's and its overrides
        self.response: Response | None = None

    def cancel(self) -> None:
        self._req.cancel_event.set()
        if self._on_cancel is not None:
            self._on_cancel()

    @property
    def cancelled(self) -> bool:
        return self._req.cancelled

    def __iter__(self) -> Iterator[Chunk]:
        while True:
            item = self._req.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, Progress):  # its prompt's progress: the server's streams show it
                continue
            if item.response is not None:
                self.response = item.response
            yield item
