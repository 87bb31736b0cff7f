"""The engine: owns the loaded pair and its preallocated contexts, and turns the decoding loop
into a stream of text (`stream`) and a finished response (`generate`).

Contexts are created once with a fixed n_ctx and warmed up with one decode so compute buffers are
reserved before the first request; requests never allocate contexts. The KV cache of the previous
request is reused for the longest common prompt prefix.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from . import backend, chat, placement, rpc
from .compat import check_pair
from .draft_len import AutoK, FixedK
from .errors import LocalspecError
from .sampling import SamplingParams
from .settings import Settings
from .speculative import ContextFull, SpecConfig, speculative_steps
from .stats import Counters, Stats
from .stream import TextStream


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


class _Slot:
    """A context plus the tokens its KV cache holds (for prefix reuse)."""

    def __init__(self, ctx: backend.Context) -> None:
        self.ctx = ctx
        self.tokens: list[int] = []

    def reuse(self, prompt: Sequence[int]) -> None:
        n = 0
        for a, b in zip(self.tokens, prompt):
            if a != b:
                break
            n += 1
        self.ctx.truncate(min(n, self.ctx.n_past))

    def settle(self, history: list[int]) -> None:
        self.ctx.truncate(min(self.ctx.n_past, len(history)))
        self.tokens = history[: self.ctx.n_past]

    def clear(self) -> None:
        self.ctx.reset()
        self.tokens = []


class Engine:
    def __init__(self, settings: Settings, *, log=None) -> None:  # noqa: ANN001
        self.settings = settings
        self._log = log or (lambda msg: None)
        if settings.target is None:
            raise LocalspecError("no target model: pass --target PATH.gguf or --pair DIR")
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self.draft: backend.Model | None = None
        self.draft_slot: _Slot | None = None
        self._auto: dict[int, AutoK] = {}  # draft_min -> the adaptive-K tuner
        try:
            self._load()
        except BaseException:
            self._stack.close()
            raise

    def _load(self) -> None:
        s = self.settings
        use_draft = s.draft is not None and s.spec
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
        self.target_slot = _Slot(self._stack.enter_context(backend.Context(self.target, **common)))
        if use_draft:
            self.draft = self._stack.enter_context(
                backend.Model(s.draft, n_gpu_layers=dec.draft_gpu_layers, devices=dec.model_devices("draft"))
            )
            self.draft_slot = _Slot(self._stack.enter_context(backend.Context(self.draft, **common)))
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
        for slot in self._slots():  # warm-up: reserve compute buffers now, not on the first request
            slot.ctx.eval([slot.ctx.model.vocab.bos if slot.ctx.model.vocab.bos >= 0 else 0], 0, 1)
            slot.clear()

    @property
    def target_ctx(self) -> backend.Context:
        return self.target_slot.ctx

    @property
    def draft_ctx(self) -> backend.Context | None:
        return self.draft_slot.ctx if self.draft_slot else None

    def _slots(self) -> list[_Slot]:
        return [self.target_slot] + ([self.draft_slot] if self.draft_slot else [])

    def clear_cache(self) -> None:
        """Forget the cached prompt prefix, so the next request pays its full prefill (benchmarks)."""
        with self._lock:
            for slot in self._slots():
                slot.clear()

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- prompts ---------------------------------------------------------------------------------
    def tokenize(self, prompt: str | Sequence[int] | list[dict], *, chat_mode: bool = False) -> list[int]:
        """Token ids for a prompt: a string, a list of chat messages, or ids as they are."""
        if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], int):
            return list(prompt)
        m = self.target
        if chat_mode or isinstance(prompt, list):
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            bos = m.token_text(m.vocab.bos) if m.vocab.bos >= 0 else ""
            eos = m.token_text(m.vocab.eos) if m.vocab.eos >= 0 else ""
            text = chat.render(m.chat_template(), messages, bos_token=bos, eos_token=eos)
            add_bos = m.vocab.add_bos and not (bos and text.startswith(bos))
            ids = m.tokenize(text, add_special=add_bos, parse_special=True)
        else:
            ids = m.tokenize(str(prompt), add_special=True, parse_special=False)
        if not ids:
            raise LocalspecError("the prompt is empty")
        return ids

    # -- generation ------------------------------------------------------------------------------
    def stream(
        self, prompt: str | Sequence[int] | list[dict], *, chat: bool = False, **overrides: Any
    ) -> Iterator[Chunk]:
        s = self.settings.replace(**overrides) if overrides else self.settings
        ids = self.tokenize(prompt, chat_mode=chat)
        self._check_fits(ids, s)
        with self._lock:
            yield from self._stream(ids, s)

    def _check_fits(self, ids: list[int], s: Settings) -> None:
        if len(ids) + s.max_tokens > self.target_ctx.n_ctx:
            raise LocalspecError(
                f"prompt ({len(ids)} tokens) + max_tokens ({s.max_tokens}) = {len(ids) + s.max_tokens} "
                f"exceeds the context size n_ctx={self.target_ctx.n_ctx}; shorten the prompt, lower "
                "--max-tokens or raise --n-ctx"
            )

    def submit(
        self, prompt: str | Sequence[int] | list[dict], *, chat: bool = False, **overrides: Any
    ) -> "Handle":
        """Start a request and return at once: iterate the handle for its chunks, cancel() to stop it.
        Bad input (a prompt that does not fit, bad settings) raises here, before anything is queued."""
        s = self.settings.replace(**overrides) if overrides else self.settings
        ids = self.tokenize(prompt, chat_mode=chat)
        self._check_fits(ids, s)
        return Handle(self, ids, s)

    def generate(self, prompt: str | Sequence[int] | list[dict], **overrides: Any) -> Response:
        for chunk in self.stream(prompt, **overrides):
            if chunk.response is not None:
                return chunk.response
        raise AssertionError("stream ended without a response")

    def _stream(self, ids: list[int], s: Settings) -> Iterator[Chunk]:
        seed = s.seed if s.seed is not None else secrets.randbits(32)
        sp = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p)
        speculative = self.draft_slot is not None and s.spec
        k_ctl: FixedK | AutoK
        if not speculative:
            k_ctl = FixedK(0)
        elif s.draft_k is None:
            # one tuner per engine: what it measured of this machine's costs carries over to the
            # next request, so only the first pays the probe rounds
            k_min = max(1, s.draft_min)
            if k_min not in self._auto:
                self._auto[k_min] = AutoK(k_min=k_min)
            k_ctl = self._auto[k_min]
        else:
            k_ctl = FixedK(s.draft_k)
        k_ctl.begin()
        counters = Counters()
        for slot in self._slots():
            slot.reuse(ids)
        steps = speculative_steps(
            self.target_ctx,
            self.draft_ctx if speculative else None,
            ids,
            sp,
            SpecConfig(mode=s.spec_mode, draft_min=s.draft_min, draft_p_min=s.draft_p_min),
            np.random.default_rng(seed),
            counters,
            k_ctl,
            max_new=s.max_tokens,
        )
        ts = TextStream(self.target.token_bytes, self.target.is_eog, s.stop)
        text_parts: list[str] = []
        t_start = time.perf_counter()
        try:
            for delta, done in ts.run(steps, time.perf_counter):
                text_parts.append(delta)
                yield Chunk(delta, [st.token for st in done], [st.from_draft for st in done])
        except ContextFull:
            ts.finish = "context"
        except BaseException:
            for slot in self._slots():  # error path of the rollback: nothing cached is trusted
                slot.clear()
            raise
        t_end = time.perf_counter()
        for slot in self._slots():
            slot.settle(ids + ts.tokens)
        t_first = ts.first_token_at
        stats = Stats.build(
            counters,
            speculative=speculative,
            n_prompt=len(ids),
            n_generated=len(ts.tokens) + ts.saw_eog,
            decode_s=(t_end - t_first) if t_first else 0.0,
            total_s=t_end - t_start,
        )
        yield Chunk("", response=Response("".join(text_parts), ts.tokens, ts.finish, stats, ids, seed))


class Handle:
    """One submitted request. Iterating yields its chunks (the last carries the Response); cancel()
    stops it at the next token, after which iteration ends without a response. Today a worker thread
    runs the request under the engine lock; the batched scheduler replaces that (issue #12)."""

    def __init__(self, engine: Engine, ids: list[int], settings: Settings) -> None:
        self.prompt_tokens = ids
        self.response: Response | None = None
        self._cancel = threading.Event()
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, args=(engine, ids, settings), daemon=True)
        self._thread.start()

    def _work(self, engine: Engine, ids: list[int], s: Settings) -> None:
        try:
            with engine._lock:
                gen = engine._stream(ids, s)
                try:
                    for chunk in gen:
                        if self._cancel.is_set():
                            break
                        self._queue.put(chunk)
                finally:
                    gen.close()
        except BaseException as e:  # handed to the consumer, raised where it iterates
            self._queue.put(e)
        self._queue.put(None)

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __iter__(self) -> Iterator[Chunk]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            if item.response is not None:
                self.response = item.response
            yield item


def _check_pair(target, draft) -> None:  # noqa: ANN001
    report = check_pair(target, draft)
    if not report.ok:
        raise LocalspecError(report.message)
