"""The model facade over an in-process Engine: admission (slots and a bounded queue, else 503), one
validation of a request's fields (`Settings.replace` over its overrides), the chat plan, the n
choices started with their chunks going straight to the event loop, and the one place a finished
choice is booked (metrics totals, the acceptance log). The engine schedules; this only bounds how
many requests may be in it at all."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

import anyio
from gguf import LlamaFileType

from localspec import draft_kinds
from localspec.config.settings import Settings
from localspec.engine import Engine, Response
from localspec.engine.facade import ModelFacts
from localspec.errors import LocalspecError
from localspec.serving import bulk, fim, text_ops
from localspec.serving import plan as chat_plan
from localspec.serving.answer import Answer
from localspec.serving.errors import APIError, from_localspec
from localspec.serving.facade import Embedded, ModelCard, Prompt
from localspec.serving.request import Request, settings_for
from localspec.serving.stream import EventStream
from localspec.serving.totals import Counting
from localspec.telemetry.acclog import AccLog
from localspec.text_input import require_text

log = logging.getLogger("localspec.server")
RETRY_AFTER_S = 1


class LocalModel:
    def __init__(self, engine: Engine, settings: Settings, name: str) -> None:
        """`settings`: the server's (slots, queue, log); a request's own start from the engine's."""
        self.engine, self.settings, self.name = engine, settings, name
        self.facts = engine.facts()
        self.card = card_of(self.facts, engine.settings, name, settings.parallel)
        self.totals = Counting()
        self.acclog = AccLog(settings, source="server", warn=lambda msg: log.warning("%s", msg))
        self.loop = asyncio.get_running_loop()  # made in the app's lifespan, on the event loop
        self.lost: APIError | None = None  # set when the engine is gone for good (server/reload.py)
        self.streams: set[EventStream] = set()
        self._admitted = 0  # choices in the engine or about to be
        self._idle = asyncio.Event()
        self._idle.set()
        self._big = text_ops.Large()  # bounds a prompt's text; a large embedding's tokenizing: one at a time

    def load(self) -> tuple[int, int]:
        running = min(self._admitted, self.settings.parallel)
        return running, self._admitted - running

    # -- text ------------------------------------------------------------------------------------
    async def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[int]:
        text_ops.check_text(text)
        model = self.engine.text
        return await bulk.run(
            lambda: model.tokenize(text, add_special=add_special, parse_special=parse_special)
        )

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        text_ops.check_tokens(tokens, text_ops.MAX_PIECES, "spelled out piece by piece")
        self._check_ids(tokens)
        model = self.engine.text
        return await bulk.run(lambda: [model.token_bytes(t, special=True) for t in tokens])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return self.engine.text.token_bytes(token, special=special)

    async def detokenize(self, tokens: Sequence[int]) -> str:
        text_ops.check_tokens(tokens)

        def work() -> str:
            self._check_ids(tokens)  # a million ids: checked off the loop too
            return self.engine.text.detokenize(tokens, special=True)

        return await bulk.run(work)

    def _check_ids(self, tokens: Sequence[int]) -> None:
        n_vocab = self.card.n_vocab
        bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
        if bad is not None:
            raise APIError(400, f"token {bad} is not in the vocabulary (0..{n_vocab - 1})", param="tokens")

    async def render(self, req: Request) -> Prompt:
        self._check_generates()
        s = settings_for(self.engine.settings, req)
        self._admit(1)  # a count of tokens costs what a request's plan does: it takes a place too
        try:
            p = await anyio.to_thread.run_sync(lambda: self._plan(req, s))
        finally:
            self._release()
        return Prompt(p.prompt_text, p.prompt_ids)

    async def embed(
        self,
        inputs: Sequence[str | Sequence[int]],
        *,
        truncate: bool = False,
        is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> Embedded:
        if self.lost is not None:
            raise self.lost
        self._admit(1)
        stop = threading.Event()  # the client left: no further pass
        watcher = asyncio.ensure_future(_watch(is_disconnected, stop)) if is_disconnected else None

        def work() -> Any:
            with self._big.one(sum(len(x) for x in inputs if isinstance(x, str))):
                return self.engine.embed(inputs, truncate=truncate, stop=stop)

        try:  # off the loop: tokenizing, then each pass waits for the engine thread
            e = await anyio.to_thread.run_sync(work)
        except LocalspecError as err:
            raise from_localspec(err, "input") from None
        finally:
            self._release()
            if watcher is not None:
                watcher.cancel()
        return Embedded(e.vectors.tolist(), e.n_tokens)

    # -- generation ------------------------------------------------------------------------------
    async def submit(self, req: Request) -> EventStream:
        if self.lost is not None:
            raise self.lost
        self._check_generates()
        parallel = self.settings.parallel
        if not 1 <= req.n <= parallel:
            raise APIError(400, f"n must be between 1 and --parallel ({parallel}); got {req.n}", param="n")
        s = settings_for(self.engine.settings, req)
        self._admit(req.n)  # before any costly step (images, render, tokenize): past slots + queue a 503 now
        try:
            plan = await anyio.to_thread.run_sync(lambda: self._plan(req, s)) if req.chat else None
            if plan is not None and plan.overrides:  # the constraint a forced tool call needs
                s = s.replace(**plan.overrides)
            if req.clamp_max_tokens and plan is not None:
                s = _clamped(s, self.card.n_ctx - len(plan.prompt_ids))
            raw = await anyio.to_thread.run_sync(lambda: self._raw(req, s)) if not req.chat else None
        except BaseException as e:
            self._release(req.n)
            if isinstance(e, LocalspecError):
                raise from_localspec(e, "messages") from None
            raise
        choices = self._choices(req, s)
        started = time.time()
        cut = raw is not None and raw.truncated
        answers = [
            Answer(i, plan.make_parser() if plan else None, self.token_bytes, truncated=cut)
            for i in range(req.n)
        ]
        stream = EventStream(
            answers, self.loop, functools.partial(self._finished, choices, started), progress=req.progress
        )
        self.streams.add(stream)
        prompt = plan.prompt if plan else (raw.ids if raw is not None else req.prompt)
        keep = plan.keep_special if plan else ()
        also = raw.lookup_text if raw is not None else ()

        def start() -> None:  # n choices: n sequences from one prompt (the slots share its cache)
            chars = len(prompt) if isinstance(prompt, str) else 0  # a raw prompt is tokenized here
            self._big.check(chars, self.card.n_ctx, "prompt")

            def each() -> None:
                for i, si in enumerate(choices):
                    stream.handles[i] = self.engine.submit(
                        prompt, keep_special=keep, sink=stream.sink(i), settings=si, lookup_text=also
                    )

            text_ops.in_turn(chars, each)

        try:
            await anyio.to_thread.run_sync(start)  # tokenizing and the fit check run off the loop
        except BaseException as e:
            stream.cancel()
            self._release(stream.drop_unstarted())  # the started ones are released as they end
            if stream.done:
                self.streams.discard(stream)
            if isinstance(e, LocalspecError):
                raise from_localspec(e, "messages" if req.chat else "prompt") from None
            raise
        if self.lost is not None:  # the engine was lost while this request was being submitted
            stream.fail(self.lost)
        return stream

    def _check_generates(self) -> None:
        """An embedding model served alone has no generation to start (engine/embed_only.py)."""
        e = self.engine.not_generative()
        if e is not None:
            raise APIError(400, str(e), param="model", code="model_not_generative")

    def _raw(self, req: Request, s: Settings) -> fim.Layout | None:
        """A raw prompt's tokens where the model lays them out: a fill-in-the-middle request's
        (serving/fim.py), or text whose special tokens are read as such (None: the engine's)."""
        model = self.engine.text
        try:
            if req.fill is not None:
                f = req.fill
                texts = (f.prefix, f.suffix, f.prompt, *(c.filename + c.text for c in f.extra))
                for text in texts:
                    text_ops.check_text(require_text(text))
                vocab = fim.fim_tokens(model.fim_tokens())  # a model without them: a 400 first
                size = sum(map(len, texts))  # all of it is tokenized: bounded as a chat's messages are
                self._big.check(size, self.card.n_ctx, "input_extra" if f.extra else "prompt")
                lay = functools.partial(
                    fim.layout, f, vocab, functools.partial(model.tokenize, add_special=False),
                    n_ctx=self.card.n_ctx, n_predict=s.max_tokens, bos=self.facts.bos,
                )  # fmt: skip
                return text_ops.in_turn(size, lay)
            if req.special and isinstance(req.prompt, str):
                text_ops.check_text(require_text(req.prompt))
                ids = text_ops.in_turn(
                    len(req.prompt), lambda: model.tokenize(req.prompt, add_special=True, parse_special=True)
                )
                return fim.Layout(ids, False) if ids else None  # none: the engine says it is empty
        except LocalspecError as e:
            raise from_localspec(e, "prompt") from None
        return None

    @staticmethod
    def _choices(req: Request, s: Settings) -> list[Settings]:
        """Each choice's settings (the acceptance log records them): choice i samples with seed + i
        when the request gave a seed."""
        return [
            s if i == 0 or "seed" not in req.overrides else s.replace(seed=s.seed + i) for i in range(req.n)
        ]

    def _plan(self, req: Request, s: Settings) -> chat_plan.ChatPlan:
        """The chat plan (in a worker): its text bounded before anything is rendered or tokenized,
        and a large one's, or one with images, made on the bulk thread (text_ops.in_turn)."""
        size = text_ops.chars_of(req)
        self._big.check(size, self.card.n_ctx, "messages")
        try:
            images = any(m.images for m in req.messages)
            return text_ops.in_turn(size, lambda: chat_plan.plan(self.engine, req, s), images=images)
        except LocalspecError as e:
            raise from_localspec(e, "messages") from None

    def _admit(self, n: int) -> None:
        if self._admitted + n > self.settings.parallel + self.settings.max_queue:
            self.totals.count("rejected")
            raise APIError(
                503,
                f"the server is busy ({self._admitted} requests in progress or queued); retry shortly",
                code="server_overloaded",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._admitted += n
        self._idle.clear()

    def _release(self, n: int = 1) -> None:
        self._admitted -= n
        if self._admitted == 0:
            self._idle.set()

    def _finished(
        self,
        settings: list[Settings],
        started: float,
        stream: EventStream,
        i: int,
        resp: Response | None,
        error: BaseException | None,
    ) -> None:
        """A choice left the engine (on the event loop): free its place, book what it did."""
        self._release()
        if stream.done:
            self.streams.discard(stream)
        if resp is None:
            self.totals.count("cancelled" if error is None else "failed")
            return
        self.totals.record(resp.stats, resp.finish_reason)
        self.acclog.write(resp, settings[i], started=started)  # its line is built and written off the loop

    # -- the engine's life -----------------------------------------------------------------------
    def fail_all(self, error: APIError) -> None:
        """The engine is gone (an rpc-server dropped): every request in it ends with `error`, and so
        does every request that comes after. Runs on the event loop's thread."""
        self.lost = error
        for stream in list(self.streams):
            stream.fail(error)

    async def wind_down(self, grace: float) -> None:
        """Shutting down: what is in flight gets `grace` seconds to finish; then what still runs is
        cancelled, and each request is answered with a 503 (a stream: its error frame)."""
        with anyio.move_on_after(grace):
            await self._idle.wait()
        for stream in list(self.streams):
            stream.cancel()

    async def drain(self, timeout: float) -> bool:
        """Cancel everything still running and wait until the engine has let go of it all."""
        for stream in list(self.streams):
            stream.cancel()
        with anyio.move_on_after(timeout):
            await self._idle.wait()
        return self._idle.is_set()


async def _watch(is_disconnected: Callable[[], Awaitable[bool]], stop: threading.Event) -> None:
    while not await is_disconnected():
        await asyncio.sleep(0.25)
    stop.set()


def _clamped(s: Settings, room: int) -> Settings:
    """max_tokens lowered to the context left after the prompt (none left: 1, and the engine says
    the prompt fills the context, not that a limit the client never sent is too big)."""
    return s.replace(max_tokens=max(room, 1)) if room < s.max_tokens else s


def card_of(f: ModelFacts, s: Settings, name: str, parallel: int) -> ModelCard:
    """The card of the model with these facts, served under these settings as `name`."""
    return ModelCard(
        name=name, created=int(time.time()), n_ctx=f.n_ctx, n_ctx_train=f.n_ctx_train,
        n_vocab=f.n_vocab, n_params=f.n_params, size=f.size, target=Path(s.target).name if s.target else "",
        draft=draft_kinds.label(s), parallel=parallel, chat_template=f.chat_template, n_embd=f.n_embd,
        arch=f.arch, quantization=_file_type(f.file_type), embeds_only=f.embeds_only, vision=f.vision,
        fim=f.fim,
    )  # fmt: skip


def _file_type(raw: str | None) -> str:
    """GGUF's general.file_type as a quantization's name (Q4_0), or "" when absent or unknown."""
    try:
        return LlamaFileType(int(raw or "")).name.removeprefix("MOSTLY_")
    except ValueError:
        return ""
