"""Router mode: every model of a models folder served by name, each loaded on demand into a process
of its own (remote.py) and unloaded by use and by memory. `Router` is the registry the routes see
(`get`, `ready`, `load`, `unload`, `status`, as registry.Models has them); each model's `Served`
is its facade, whose `submit` and `render` wait for the model to load.

A model's states: unloaded -> loading -> loaded -> unloading -> unloaded, and error (with its
reason) when a load fails or its process dies. A failed load stays an error until `load` retries
it; a process that died (an OOM kill) is loaded again by the next request after a back-off that
doubles with each death in a row (a 503 with Retry-After until then).

Making room (room.py), under one lock so two loads never count the same free memory: past
--models-max, or when the incoming model's memory plan is more than is free, the least recently
used idle models are unloaded first; their processes exit before the new one starts, so their
memory is back. Loads and unloads happen in other processes: requests to the loaded models go on."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Callable, Iterator, Sequence

import anyio
import psutil

from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.serving.catalog import Entry, Facts
from localspec.serving.errors import APIError
from localspec.serving.facade import Embedded, ModelCard, Prompt
from localspec.serving.registry import Status, pick
from localspec.serving.remote import Child, RemoteStream, accelerator
from localspec.serving.request import Request
from localspec.serving.room import Held, make_room
from localspec.serving.totals import Counting

UNLOADED, LOADING, LOADED, UNLOADING, ERROR = "unloaded", "loading", "loaded", "unloading", "error"
LOAD_TIMEOUT_S = 600.0  # a load that takes longer is killed; requests wait for it at most this long
REAP_EVERY_S = 1.0
RETRY_AFTER_S = 5
BACKOFF_S, BACKOFF_MAX_S = 2.0, 300.0  # a dead model's next load waits this, doubled per death in a row
_SAME = object()  # a release that leaves the model's keep_alive as the last request set it


class Served:
    """One model of the folder: its state, and the model facade requests use."""

    def __init__(self, router: "Router", entry: Entry) -> None:
        self.router, self.entry, self.name = router, entry, entry.name
        self.state, self.error = UNLOADED, None
        self.child: Child | None = None
        self.facts: Facts | None = None
        self.totals = Counting()  # kept across loads: /metrics counters never go back
        self.users = 0  # requests in the model or waiting for its load
        self.last_used = 0.0
        self.keep_alive: float | None = None  # the last request's (Ollama's keep_alive), seconds
        self.load_s: float | None = None
        self.loaded_at: float | None = None
        self.changed = asyncio.Event()
        self.died_at: float | None = None  # its process died while serving (retried after a back-off)
        self.deaths = 0  # in a row: each doubles the back-off; a clean unload or `load` resets it
        self.streams: set[Any] = set()  # its requests in flight (a shutdown cancels what is left)
        self.quiet = asyncio.Event()  # set whenever none is
        self.quiet.set()

    def _set(self, state: str, error: str | None = None) -> None:
        self.state, self.error = state, error
        self.changed.set()  # wakes everyone waiting on this model; the next wait gets a fresh event
        self.changed = asyncio.Event()

    # -- the facade --------------------------------------------------------------------------------
    @property
    def card(self) -> ModelCard:
        if self.child is not None and self.child.card is not None:
            return self.child.card
        if self.facts is not None:
            return self.facts.card
        return ModelCard(self.name, 0, 0, 0, 0, 0, 0, self.entry.path.name, None, 0, None)

    def load(self) -> tuple[int, int]:
        return self.child.busy if self.child is not None and self.state == LOADED else (0, 0)

    def _loaded(self) -> Child:
        if self.state != LOADED or self.child is None:
            raise APIError(
                409,
                f"{self.name} is not loaded ({self.state}); POST /models/load loads it, as does a request to it",
                param="model",
                code="model_not_loaded",
            )
        return self.child

    async def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[int]:
        return await self._forward("tokenize", text, add_special=add_special, parse_special=parse_special)

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        return await self._forward("pieces", list(tokens))

    async def detokenize(self, tokens: Sequence[int]) -> str:
        return await self._forward("detokenize", list(tokens))

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return self._loaded().call("token_bytes", token, special=special)

    async def render(self, req: Request) -> Prompt:
        return await self._forward("render", req)

    async def embed(
        self, inputs: Sequence[str | Sequence[int]], *, truncate: bool = False, is_disconnected: Any = None
    ) -> Embedded:
        # the model's process admits it; a client that leaves is not told across the pipe (yet)
        return await self._forward("embed", list(inputs), truncate=truncate)

    async def _forward(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """An awaited facade call, made in the model's process once it is loaded (loading it if
        need be): every such call goes through here, whichever dialect asks."""
        child = await self.router._acquire(self)
        try:
            return await child.acall(method, *args, **kwargs)
        finally:
            self.router._release(self)

    async def submit(self, req: Request) -> RemoteStream:
        child = await self.router._acquire(self)
        stream: Any = None
        released = False

        def ended() -> None:  # once, whether the process refused it, answered it or died
            nonlocal released
            if not released:
                released = True
                self.router._release(self, req.keep_alive)
            self.streams.discard(stream)
            if not self.streams:
                self.quiet.set()

        try:
            stream = await child.submit(req, ended)
        except BaseException:
            if not released:  # a refusal has ended it already (its on_end ran)
                released = True
                self.router._release(self)
            raise
        if not released:
            self.streams.add(stream)
            self.quiet.clear()
        return stream

    async def wind_down(self, grace: float) -> None:
        """The server is shutting down (LocalModel.wind_down, for a model in its own process): no
        load starts any more; its requests get `grace` seconds to finish, then what still runs is
        cancelled in the process, which answers each with its 503 (a stream: its error frame)."""
        self.router._closing = True
        with anyio.move_on_after(grace):
            await self.quiet.wait()
        for stream in list(self.streams):
            stream.cancel()

    def status(self, idle_unload: float) -> Status:
        f, c = self.facts, self.child
        ttl = self.keep_alive if self.keep_alive is not None else (idle_unload or None)
        expires = (
            time.time() + ttl - (time.monotonic() - self.last_used)
            if self.state == LOADED and ttl is not None and ttl >= 0 and not self.users
            else None
        )
        return Status(
            name=self.name, state=self.state, card=self.card, kind=self.entry.kind, path=str(self.entry.path),
            error=self.error, load_s=self.load_s, loaded_at=self.loaded_at if self.state == LOADED else None,
            expires_at=expires, pid=c.pid if c is not None and self.state in (LOADING, LOADED) else None,
            memory=None if f is None else {"cpu_bytes": f.cpu_bytes, "device_bytes": f.device_bytes},
            running=self.load()[0], waiting=self.load()[1],
        )  # fmt: skip


class Router:
    def __init__(
        self,
        entries: Sequence[Entry],
        settings: Settings,
        measure: Callable[[Entry], Facts],
        *,
        spawn: Callable[..., Child] = Child,
        available: Callable[[], int] = lambda: psutil.virtual_memory().available,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        """`settings`: the server's (--models-max, --idle-unload, --default-model, ...);
        `measure(entry)` the model's own settings and needs (catalog.measure); `spawn` makes a
        model's process (remote.Child; the tests give an in-process one); `available()` the
        system memory free for it."""
        self.settings, self._measure, self._spawn, self._say = settings, measure, spawn, say
        self._available = available
        self._served = {e.name: Served(self, e) for e in entries}
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._accelerated: bool | None = False if settings.n_gpu_layers == 0 else None
        self._reaper: asyncio.Task | None = None
        self._closing = False

    # -- the registry --------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Served]:
        return iter(self._served.values())

    def get(self, name: str | None, *, exact: bool = False) -> Served:
        """The model `name` names, by the one rule (registry.pick): a name not served gets
        --default-model, or the one model when the folder holds only one, else a 404."""
        return pick(self._served, name, default=self.settings.default_model, exact=exact)

    async def ready(self, name: str | None, *, exact: bool = False) -> Served:
        """The model, loaded (for the facade's quick calls: tokenize, detokenize)."""
        served = self.get(name, exact=exact)
        await self._acquire(served)
        self._release(served)
        return served

    async def load(self, name: str) -> Served:
        """POST /models/load: load it now (an error is retried)."""
        served = self.get(name, exact=True)
        if served.state == ERROR:
            served.died_at, served.deaths = None, 0
            served._set(UNLOADED)
        return await self.ready(name, exact=True)

    async def unload(self, name: str) -> Served:
        """POST /models/unload: cancel what it is doing, free its memory; returns once it has."""
        served = self.get(name, exact=True)
        if served.state not in (LOADING, LOADED, UNLOADING):
            raise APIError(400, f"{served.name} is not loaded ({served.state})", param="model")
        self._unload(served)
        while served.state == UNLOADING:
            await served.changed.wait()
        return served

    def status(self) -> list[Status]:
        return [s.status(self.settings.idle_unload) for s in self._served.values()]

    # -- life ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._reaper = asyncio.ensure_future(self._reap())
        self._bg(self._measure_all())

    async def _measure_all(self) -> None:
        """Read every model's headers once at start (nothing loads): /v1/models can then show
        their facts, and a broken file is an error at once."""
        for s in list(self._served.values()):
            try:
                facts = await anyio.to_thread.run_sync(self._measure, s.entry)
            except LocalspecError as e:
                if s.state == UNLOADED:
                    self._fail(s, str(e))
                continue
            s.facts = s.facts or facts

    async def close(self) -> None:
        """Unload every model (the server is stopping)."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        for s in self._served.values():
            self._unload(s)
        for s in self._served.values():
            while s.state == UNLOADING:
                await s.changed.wait()

    def _bg(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- use -----------------------------------------------------------------------------------------
    async def _acquire(self, s: Served) -> Child:
        """Count a request in (so its model is not unloaded under it) and wait until the model is
        loaded, loading it if need be."""
        s.users += 1
        s.last_used = time.monotonic()
        try:
            return await self._ensure(s)
        except BaseException:
            s.users -= 1
            raise

    def _release(self, s: Served, keep_alive: Any = _SAME) -> None:
        """A request is done with `s`; `keep_alive`: how long the model stays loaded now (seconds;
        0: unload at once, negative: until evicted; None: --idle-unload)."""
        s.users -= 1
        s.last_used = time.monotonic()
        if keep_alive is not _SAME:
            s.keep_alive = keep_alive
        if s.users == 0 and s.state == LOADED and s.keep_alive == 0:
            self._unload(s)

    async def _ensure(self, s: Served) -> Child:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            if s.state == LOADED and s.child is not None:
                return s.child
            if s.state == ERROR and s.died_at is not None:
                self._retry(s)
                continue
            if s.state == ERROR:
                raise APIError(
                    500,
                    f"{s.name} failed to load: {s.error} (fix it, then POST /models/load to retry)",
                    param="model",
                    code="model_load_failed",
                )
            if s.state == UNLOADED:
                await self._begin_load(s)
                continue
            changed = s.changed
            with anyio.move_on_after(max(deadline - time.monotonic(), 0)) as scope:
                await changed.wait()
            if scope.cancelled_caught:
                raise APIError(
                    503, f"{s.name} is still {s.state}; retry shortly", code="model_loading",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )  # fmt: skip

    def _retry(self, s: Served) -> None:
        """A model whose process died: loaded again once its back-off has passed, else a 503."""
        assert s.died_at is not None
        wait = s.died_at + min(BACKOFF_S * 2 ** (s.deaths - 1), BACKOFF_MAX_S) - time.monotonic()
        if wait > 0:
            raise APIError(
                503, f"{s.name} is restarting after {s.error}; retry in {math.ceil(wait)} s",
                param="model", code="model_restarting", headers={"Retry-After": str(math.ceil(wait))},
            )  # fmt: skip
        self._say(f"loading {s.name} again: {s.error}")
        s.died_at = None
        s._set(UNLOADED)

    async def _begin_load(self, s: Served) -> None:
        async with self._lock:
            if self._closing:
                raise APIError(
                    503, f"the server is shutting down; {s.name} is not loaded", code="shutting_down"
                )
            if s.state != UNLOADED:
                return
            try:
                if s.facts is None:
                    s.facts = await anyio.to_thread.run_sync(self._measure, s.entry)
            except LocalspecError as e:
                self._fail(s, str(e))
                return
            room = await self._room_for(s)
            if room.refused:
                raise APIError(
                    503, room.refused, code="model_does_not_fit", headers={"Retry-After": str(RETRY_AFTER_S)}
                )
            leaving = [self._served[n] for n in room.evict]
            for other in leaving:
                self._say(f"unloading {other.name} to make room for {s.name}")
                self._unload(other)
            s._set(LOADING)
            self._bg(self._load(s))

    async def _room_for(self, s: Served) -> Any:
        assert s.facts is not None
        here = [o for o in self._served.values() if o.state in (LOADING, LOADED) and o.facts]
        leaving = [o for o in self._served.values() if o.state == UNLOADING and o.facts]
        free = await self._free(here, leaving)
        held = [
            Held(o.name, self._need(o.facts), o.last_used,
                 "loading" if o.state == LOADING else (f"{o.users} requests" if o.users else ""))
            for o in here
        ]  # fmt: skip
        others = [(o.name, self._need(o.facts)) for o in self._served.values() if o.facts and o is not s]
        return make_room(s.name, self._need(s.facts), free, held, self.settings.models_max, others)

    def _need(self, f: Facts) -> int:
        return f.device_bytes if self._accelerated else f.cpu_bytes

    async def _free(self, here: list[Served], leaving: list[Served]) -> int | None:
        """Bytes free for a model now, counting the models already on their way out as gone; None
        when not known (no model has loaded yet to tell whether there is an accelerator)."""
        gone = sum(self._need(o.facts) for o in leaving if o.facts)
        if self._accelerated is None:
            return None
        if not self._accelerated:  # the mapped files of loaded models count as available: take them off
            mapped = sum(o.facts.file_bytes for o in here + leaving if o.facts)
            return self._available() - mapped + gone
        asker = next((o.child for o in here if o.state == LOADED and o.child is not None), None)
        if asker is None:
            return None
        try:
            devices = await anyio.to_thread.run_sync(asker.call, "devices")
        except APIError:
            return None
        best = accelerator(devices)
        return None if best is None else best[1] + gone

    async def _load(self, s: Served) -> None:
        assert s.facts is not None
        for other in list(self._served.values()):  # the memory they hold must be back first
            while other.state == UNLOADING:
                await other.changed.wait()
        if s.state != LOADING:  # unloaded while it waited
            return
        self._say(f"loading {s.name}")
        started = time.monotonic()
        s.child = child = self._spawn(s.name, s.facts.settings, s.totals, self._exited, self._say)
        try:
            await asyncio.wait_for(child.start(), LOAD_TIMEOUT_S)
        except (LocalspecError, asyncio.TimeoutError, OSError) as e:
            child.kill()
            if s.state == LOADING and s.child is child:
                why = (
                    str(e)
                    if not isinstance(e, asyncio.TimeoutError)
                    else f"not loaded within {LOAD_TIMEOUT_S:g} s"
                )
                self._fail(s, why)
            return
        if s.state != LOADING or s.child is not child:  # unloaded while loading: _unload has stopped it
            return
        s.load_s, s.loaded_at = time.monotonic() - started, time.time()
        if self._accelerated is None:
            self._accelerated = accelerator(child.devices) is not None
        self._say(f"loaded {s.name} in {s.load_s:.1f} s")
        s._set(LOADED)

    def _fail(self, s: Served, reason: str) -> None:
        self._say(f"error: {s.name}: {reason}")
        s.child = None
        s._set(ERROR, reason)

    def _unload(self, s: Served) -> None:
        if s.state not in (LOADING, LOADED) or s.child is None:
            return
        child = s.child
        was_loading = s.state == LOADING
        s._set(UNLOADING)
        if was_loading:
            child.stopping = True
            child.kill()  # a load cannot be interrupted politely
        else:
            self._bg(child.stop())

    def _exited(self, child: Child, reason: str) -> None:
        """A model's process is gone (on the event loop): unloaded as asked, or dead."""
        s = self._served[child.name]
        if s.child is not child:
            return
        if s.state == UNLOADING:
            s.child, s.deaths = None, 0
            s._set(UNLOADED)
        elif s.state == LOADED:  # it died while serving: every other model goes on
            self._fail(s, reason)
            s.died_at, s.deaths = time.monotonic(), s.deaths + 1

    async def _reap(self) -> None:
        """Unload the models idle past their keep_alive (or --idle-unload)."""
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            now = time.monotonic()
            for s in list(self._served.values()):
                ttl = s.keep_alive if s.keep_alive is not None else (self.settings.idle_unload or math.inf)
                if s.state == LOADED and not s.users and 0 <= ttl <= now - s.last_used:
                    self._say(f"unloading {s.name}: idle for {now - s.last_used:.0f} s")
                    self._unload(s)
