"""The engine: owns the loaded pair and its preallocated contexts, and serves requests
(`submit` -> `Handle`; `stream` and `generate` on top) from one engine thread that runs decoding
rounds over every active request at once (see scheduler.py and speculative.py).

Contexts are created once with `parallel` sequences of n_ctx tokens each and warmed up with one
decode so compute buffers are reserved before the first request; requests never allocate contexts.
A request reuses the KV cache of the slot holding the longest common prompt prefix.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np

from . import backend, calibrate, chat, placement, rpc
from .compat import check_pair
from .draft_len import LOOKUP_PRIORS, LOOKUP_PRIORS_SAMPLED, AutoK, FixedK
from .errors import LocalspecError, PromptTooLong
from .sampling import SamplingParams
from .scheduler import Job, Scheduler
from .settings import AUTO_K_MAX, Settings
from .speculative import SeqState, SpecConfig, Step
from .stats import Counters, Stats
from .stream import TextStream
from .text_input import require_text
from .tuner_memory import TunerMemory, TunerRecord, memory_key

T = TypeVar("T")

# a neutral prefix for timing decodes at a realistic depth (the text itself does not matter)
CALIBRATION_TEXT = "The quick brown fox jumps over the lazy dog. " * 3


@dataclass(frozen=True)
class Response:
    text: str
    tokens: list[int]
    finish_reason: str  # stop (EOG or stop string) | length (max_tokens) | context (n_ctx full)
    stats: Stats
    prompt_tokens: list[int]
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "finish_reason": self.finish_reason,
            "n_prompt_tokens": self.stats.n_prompt_tokens,
            "n_generated": self.stats.n_generated,
            "decode_tok_s": self.stats.decode_tok_s,
            "prefill_ms": self.stats.prefill_ms,
            "seed": self.seed,
            "stats": self.stats.to_dict(),
        }


@dataclass(frozen=True)
class Chunk:
    text: str
    tokens: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)  # per token: a draft token the target accepted
    response: Response | None = None  # set on the last chunk only


class Engine:
    def __init__(self, settings: Settings, *, log=None) -> None:  # noqa: ANN001
        self.settings = settings
        self._log = log or (lambda msg: None)
        if settings.target is None:
            raise LocalspecError("no target model: pass --target PATH.gguf or --pair DIR")
        self._stack = ExitStack()
        self._closed = False
        self.draft: backend.Model | None = None
        self.draft_ctx: backend.Context | None = None
        self._auto: dict[tuple, AutoK] = {}  # _tuner_key -> the tuner requests fork
        self._known: TunerRecord | None = None  # costs (and acceptance) the tuners start from
        self._memory: TunerMemory | None = None
        self.calibration = "none"  # measured | remembered | none (no draft, or a fixed K)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        # Every decode of this engine, the load's warm-up and calibration included, runs on its one
        # thread: while a second thread's OpenMP team lives, libgomp cuts its barrier spinning (more
        # OpenMP threads than cores) and each small decode took ~12% longer.
        loaded: Future = Future()
        self._thread = threading.Thread(
            target=_load_then_serve,
            args=([self._load_scheduler], loaded, self._inbox),
            name="localspec-engine",
            daemon=True,
        )
        self._thread.start()
        try:
            loaded.result()
        except BaseException:
            if not loaded.done():  # interrupted while loading: let the load end, then the thread
                self._inbox.put(None)
                self._thread.join()
            self._thread = None
            self._stack.close()
            raise

    def _load_scheduler(self) -> Scheduler:
        self._load()
        self._sched = Scheduler(self.target_ctx, self.draft_ctx, self.settings.parallel)
        return self._sched

    def _load(self) -> None:
        s = self.settings
        use_draft = s.speculative  # not with --lookup only
        if use_draft:
            _check_pair(s.target, s.draft)  # before any weights are loaded
        common = s.context_args()
        # -- placement (issue #5): plan from the headers, never spill to system RAM silently ----------
        plan = placement.plan_for(s)
        backend.add_rpc_servers(rpc.parse_endpoints(s.rpc))  # probed first: a dead host is one line
        self.decision = placement.enforce(plan, backend.devices(), s)
        for line in self.decision.messages():
            self._log(line)
        dec = self.decision
        self.target = self._stack.enter_context(
            backend.Model(s.target, n_gpu_layers=dec.target_gpu_layers, devices=dec.model_devices("target"))
        )
        self.target_ctx = self._stack.enter_context(backend.Context(self.target, **common))
        if use_draft:
            self.draft = self._stack.enter_context(
                backend.Model(s.draft, n_gpu_layers=dec.draft_gpu_layers, devices=dec.model_devices("draft"))
            )
            self.draft_ctx = self._stack.enter_context(backend.Context(self.draft, **common))
        self.placement = placement.verify(
            plan,
            self.decision,
            self.target.load_log + self.target_ctx.init_log,
            self.draft.load_log + self.draft_ctx.init_log if self.draft_ctx else None,
        )
        for problem in self.placement.require_clean(s):  # raises unless --allow-partial-offload
            self._log(f"warning: {problem}")
        self._log(self.placement.summary())
        # -- end placement ------------------------------------------------------------------------
        for ctx in self._contexts():  # warm-up: reserve compute buffers now, not on the first request
            ctx.eval([ctx.model.vocab.bos if ctx.model.vocab.bos >= 0 else 0], 0, 1)
            ctx.reset()
        if (use_draft or s.uses_lookup) and s.draft_k is None:
            self._known = self._known_costs()

    def _known_costs(self) -> TunerRecord:
        """The tuner's starting knowledge: remembered from an earlier process on this pair, build
        and device, or measured now (a second or two on a CPU, milliseconds on a GPU)."""
        s = self.settings
        if s.tuner_cache:
            key = memory_key(s, self.decision.target_gpu_layers, self.decision.draft_gpu_layers)
            self._memory = TunerMemory(key, note=self._log)
            record = self._memory.load()
            if record is not None:
                self.calibration = "remembered"
                return record
        cap = min(self.target_ctx.n_batch, self.target_ctx.n_ctx // 2)
        max_batch = min(AUTO_K_MAX + 1, cap)
        # a full round of slots: every sequence plain, and every one drafting one token
        also = [n for n in (s.parallel, 2 * s.parallel) if s.parallel > 1 and n <= cap]
        # the prefix and the largest verify batch must fit one slot, however small --n-ctx is
        prefix = self.target.tokenize(CALIBRATION_TEXT, add_special=True)
        prefix = prefix[: self.target_ctx.n_ctx - max([max_batch, *also])]
        verify, draft_s = calibrate.measure(
            self.target_ctx, self.draft_ctx, prefix, max_batch=max_batch, also=also
        )
        self.calibration = "measured"
        return TunerRecord(verify, draft_s)

    def _new_tuner(self, k_min: int, k_max: int, has_model: bool, sampled: bool) -> AutoK:
        priors = LOOKUP_PRIORS_SAMPLED if sampled else LOOKUP_PRIORS
        tuner = AutoK(k_min=k_min, k_max=k_max, has_model=has_model, prior_lookup=priors)
        if self._known is not None:
            k = self._known
            tuner.prime(k.verify_s, k.draft_s, k.acc, k.tried)
        if self._auto:  # what the other tuners measured since loading is as true for this one
            tuner.share_timings(next(iter(self._auto.values())))
        return tuner

    def _remember(self, tuner: AutoK) -> None:
        if self._memory is not None:
            self._memory.save(TunerRecord(*tuner.snapshot()))

    def _contexts(self) -> list[backend.Context]:
        return [self.target_ctx] + ([self.draft_ctx] if self.draft_ctx else [])

    # -- the engine thread -----------------------------------------------------------------------
    def on_engine_thread(self, fn: Callable[[], T]) -> T:
        """fn() on the engine thread, between rounds, and its result. Tools that drive target_ctx and
        draft_ctx themselves (the scripts' traces and timings) go through this, so that every decode
        stays on one thread (see __init__); called from the engine thread, it just runs fn."""
        self._check_open()
        if threading.current_thread() is self._thread:
            return fn()
        done = threading.Event()
        box: list[tuple[bool, Any]] = []  # (raised, the result or the exception)

        def cmd() -> None:
            try:
                box.append((False, fn()))
            except BaseException as e:
                box.append((True, e))
            done.set()

        self._inbox.put(cmd)
        done.wait()
        raised, value = box[0]
        if raised:
            raise value
        return value

    def clear_cache(self) -> None:
        """Forget the cached prompt prefixes, so the next request pays its full prefill (benchmarks).
        Waits for running requests to finish first."""

        def clear() -> None:
            while self._sched.busy:
                self._sched.step()
            self._sched.clear()

        self.on_engine_thread(clear)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if getattr(self, "_thread", None) is not None:
            self._inbox.put(None)
            self._thread.join()
        self._stack.close()

    def __del__(self) -> None:  # last resort; owners call close()
        try:
            self.close()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise LocalspecError("this engine is closed; create a new Engine")

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- prompts ---------------------------------------------------------------------------------
    def tokenize(self, prompt: str | Sequence[int] | list[dict], *, chat_mode: bool = False) -> list[int]:
        """Token ids for a prompt: a string, a list of chat messages, or ids as they are."""
        self._check_open()
        if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], int):
            return list(prompt)
        if chat_mode or isinstance(prompt, list):
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            ids = self.tokenize_chat(self.render_chat(messages))
        else:
            ids = self.target.tokenize(require_text(str(prompt)), add_special=True, parse_special=False)
        if not ids:
            raise LocalspecError("the prompt is empty")
        return ids

    def render_chat(self, messages: list[dict]) -> str:
        """The conversation as text, through the model's own chat template (generation prompt added)."""
        return chat.render_for(self.target, messages)

    def tokenize_chat(self, text: str, *, continuation: bool = False) -> list[int]:
        """Tokens of rendered chat text; a continuation of a conversation already tokenized gets no BOS."""
        return chat.tokenize_rendered(self.target, text, continuation=continuation)

    # -- generation ------------------------------------------------------------------------------
    def submit(
        self, prompt: str | Sequence[int] | list[dict], *, chat: bool = False, **overrides: Any
    ) -> "Handle":
        """Start a request and return at once: iterate the handle for its chunks, cancel() to stop it.
        Bad input (a prompt that does not fit, bad settings) raises here, before anything is queued."""
        self._check_open()
        s = self.settings.replace(**overrides) if overrides else self.settings
        ids = self.tokenize(prompt, chat_mode=chat)
        self._check_fits(ids, s)
        req = _Request(self, ids, s)
        self._inbox.put(req)
        if self._closed:  # closed meanwhile: the engine thread may be gone
            req.fail(LocalspecError("this engine is closed; create a new Engine"))
        return Handle(req)

    def stream(
        self, prompt: str | Sequence[int] | list[dict], *, chat: bool = False, **overrides: Any
    ) -> Iterator[Chunk]:
        handle = self.submit(prompt, chat=chat, **overrides)
        try:
            yield from handle
        finally:  # an abandoned stream frees its slot; nothing is held that a next call waits on
            handle.cancel()

    def generate(self, prompt: str | Sequence[int] | list[dict], **overrides: Any) -> Response:
        for chunk in self.stream(prompt, **overrides):
            if chunk.response is not None:
                return chunk.response
        raise AssertionError("stream ended without a response")

    def _check_fits(self, ids: list[int], s: Settings) -> None:
        n_ctx = self.target_ctx.n_ctx
        if len(ids) + s.max_tokens > n_ctx:
            raise PromptTooLong(
                f"prompt ({len(ids)} tokens) + max_tokens ({s.max_tokens}) = {len(ids) + s.max_tokens} "
                f"exceeds the context of one slot, n_ctx={n_ctx}; shorten the prompt, lower "
                "--max-tokens or raise --n-ctx",
                n_prompt=len(ids),
                n_ctx=n_ctx,
            )

    def _tuner_key(self, s: Settings) -> tuple[int, int, bool, bool]:
        """Requests that share a tuner: same K bounds, same drafters (--lookup only, per request or
        with no draft loaded, leaves the draft model out), and greedy or sampled (drafts are kept
        less often when sampling: their evidence and priors are kept apart)."""
        has_model = self.draft_ctx is not None and s.lookup != "only"
        k_max = min(AUTO_K_MAX, self.target_ctx.n_batch - 1)
        return max(1, s.draft_min), k_max, has_model, s.temperature > 0

    def _k_controller(self, s: Settings, speculative: bool) -> FixedK | AutoK:
        if not speculative:
            return FixedK(0)
        # one tuner per engine: what it measured of this machine's costs carries over to the next
        # request, so only the first pays the probe rounds; each request forks its own acceptance
        # --lookup only (per request, or with no draft loaded): the draft model sits out
        key = self._tuner_key(s)
        if s.draft_k is not None:
            return FixedK(s.draft_k, has_model=key[2])
        if key not in self._auto:
            self._auto[key] = self._new_tuner(*key)
        return self._auto[key].fork()


class _Request(Job):
    """A submitted request: builds its sequence state, turns its steps into chunks on a queue."""

    def __init__(self, engine: Engine, ids: list[int], s: Settings) -> None:
        self.engine, self.prompt, self.settings = engine, ids, s
        self.seed = s.seed if s.seed is not None else secrets.randbits(32)
        self.lookup = s.uses_lookup
        self.speculative = s.spec and (engine.draft_ctx is not None or self.lookup)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.cancel_event = threading.Event()
        self.counters = Counters(rounds_trace=[] if s.trace else None)
        self.k_ctl = engine._k_controller(s, self.speculative)
        self.text = TextStream(engine.target.token_bytes, engine.target.is_eog, s.stop)
        self.parts: list[str] = []
        self.t_start = time.perf_counter()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def start(self, seq: int) -> SeqState:
        s = self.settings
        sp = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p)
        cfg = SpecConfig(mode=s.spec_mode, draft_min=s.draft_min, draft_p_min=s.draft_p_min)
        rng = np.random.default_rng(self.seed)
        return SeqState.start(
            seq, self.prompt, sp, cfg, rng, self.counters, self.k_ctl,
            max_new=s.max_tokens, speculative=self.speculative, lookup=self.lookup,
        )  # fmt: skip

    def _put(self, deltas: list[tuple[str, list[Step]]]) -> None:
        for delta, steps in deltas:
            self.parts.append(delta)
            self.queue.put(Chunk(delta, [st.token for st in steps], [st.from_draft for st in steps]))

    def deliver(self, steps: list[Step]) -> bool:
        self._put(self.text.feed(steps, time.perf_counter))
        return not self.text.done

    def end(self, state: SeqState | None, reason: str) -> None:
        if isinstance(self.k_ctl, AutoK):
            key = self.engine._tuner_key(self.settings)
            self.engine._auto[key].absorb(self.k_ctl)
            if self.k_ctl.has_model or self.engine.draft_ctx is None:  # the record is the pair's
                self.engine._remember(self.engine._auto[key])
        if reason == "cancelled":
            self.queue.put(None)
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
        resp = Response("".join(self.parts), list(ts.tokens), ts.finish, stats, self.prompt, self.seed)
        self.queue.put(Chunk("", [], [], resp))
        self.queue.put(None)

    def fail(self, error: BaseException) -> None:
        self.queue.put(error)
        self.queue.put(None)


class Handle:
    """One submitted request. Iterating yields its chunks (the last carries the Response); cancel()
    stops it - its slot is free again within one round - after which iteration ends without a
    response. Errors raise where the handle is iterated."""

    def __init__(self, req: _Request) -> None:
        self._req = req
        self.prompt_tokens = req.prompt
        self.response: Response | None = None

    def cancel(self) -> None:
        self._req.cancel_event.set()

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
            if item.response is not None:
                self.response = item.response
            yield item


GATHER_S = 0.02  # against prompt passes of 0.1-10 s; a lone request's first token waits this much more


def _load_then_serve(box: list[Callable[[], Scheduler]], loaded: Future, inbox: queue.SimpleQueue) -> None:
    """The engine thread's life: load (the engine's bound method, taken out of `box` so that once
    loaded the thread holds only the scheduler and an engine nobody closed can still be collected),
    then serve."""
    load = box.pop()
    try:
        sched = load()
    except BaseException as e:
        loaded.set_exception(e)
        return
    finally:
        del load
    loaded.set_result(None)
    _serve(sched, inbox)


def _serve(sched: Scheduler, inbox: queue.SimpleQueue) -> None:
    """The engine thread: take new jobs and commands between rounds; run rounds while any job is
    active; on None, fail whatever is left and end."""
    stop = False
    while not stop:
        items = [inbox.get()] if not sched.busy else []
        # Requests sent together reach this thread a few ms apart; waiting that long for company lets
        # their prompts share one pass over the weights instead of the first one's taking seconds alone.
        gather_until = time.monotonic() + GATHER_S if items and isinstance(items[0], Job) else 0.0
        while True:
            try:
                wait = gather_until - time.monotonic()
                if wait > 0 and len(sched.free) > 1 + sum(isinstance(i, Job) for i in items):
                    items.append(inbox.get(timeout=wait))
                else:
                    items.append(inbox.get_nowait())
            except queue.Empty:
                break
        for item in items:
            if item is None:
                stop = True
            elif isinstance(item, Job):
                sched.add(item)
            else:
                item()  # a command (clear_cache)
        items = item = None  # held while the next get() blocks, they would keep a finished job alive
        if stop:
            break
        try:
            sched.step()
        except BaseException as e:  # a bug: no job may wait forever on it
            for job in list(sched.waiting) + [r[0] for r in sched.running]:
                job.fail(e)
            sched.waiting.clear()
            sched.running.clear()
    closed = LocalspecError("the engine was closed")
    for job in list(sched.waiting) + [r[0] for r in sched.running]:
        job.fail(closed)


def _check_pair(target, draft) -> None:  # noqa: ANN001
    report = check_pair(target, draft)
    if not report.ok:
        raise LocalspecError(report.message)
