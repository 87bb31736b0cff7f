"""Between HTTP and the engine: admission (slots + a bounded queue), the hop from the engine's
threads onto the event loop, cancellation, and the one place a finished response is handled.

The engine does the scheduling (its scheduler runs up to `parallel` requests in every round): the
server only bounds how many requests may be in the engine at all.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio

from localspec.config.settings import Settings
from localspec.engine import Chunk, Handle, Response
from localspec.server.errors import APIError
from localspec.server.metrics import ServerMetrics
from localspec.telemetry.acclog import AccLog

log = logging.getLogger("localspec.server")

_END = object()
RETRY_AFTER_S = 1


class Job:
    """One admitted request. A thread drains the engine handle (whose iteration blocks) onto an
    asyncio queue, so no request holds a worker of the event loop's thread pool while it waits."""

    def __init__(
        self,
        handle: Handle,
        loop: asyncio.AbstractEventLoop,
        done: Callable[["Job"], None],
        *,
        started: float,
        overrides: dict[str, Any],
    ) -> None:
        self.handle = handle
        self.started, self.overrides = started, overrides  # for the acceptance log
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._done = done
        self._ended = False  # the dispatcher has been told this request left the engine
        self.error: BaseException | None = None  # how it failed, when it did
        threading.Thread(target=self._pump, daemon=True, name="localspec-job").start()

    def _pump(self) -> None:
        try:
            for chunk in self.handle:
                self._post(chunk)
        except BaseException as e:  # raised again where the route iterates
            self.error = e
            self._post(e)
        finally:
            self._post(self)  # the engine is free of this request; then the route sees the end

    def _post(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._deliver, item)
        except RuntimeError:  # the loop is closed: the server is gone, nobody is listening
            pass

    def _deliver(self, item: object) -> None:
        if item is self:
            # book-keeping (metrics, acceptance log) first, so a client that has its answer sees them
            self._end()
            self._queue.put_nowait(_END)
        else:
            self._queue.put_nowait(item)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._done(self)

    def fail(self, error: BaseException) -> None:
        """End the request with `error` without the engine (on the event loop's thread): the engine
        is gone and its thread will never post this request's end."""
        if not self._ended:
            self.error = error
            self._queue.put_nowait(error)
            self._queue.put_nowait(_END)
            self._end()

    @property
    def response(self) -> Response | None:
        return self.handle.response

    def cancel(self) -> None:
        self.handle.cancel()

    async def chunks(self) -> AsyncIterator[Chunk]:
        """The request's chunks; leaving early (the client went away, the task was cancelled)
        cancels the generation, which the engine notices at its next token."""
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
        finally:
            if self.handle.response is None:
                self.cancel()

    async def result(self, is_disconnected: Callable[[], Awaitable[bool]]) -> Response:
        """Run to the end (non-streaming), cancelling if the client disconnects meanwhile."""

        async def watch() -> None:
            while not await is_disconnected():
                await asyncio.sleep(0.25)
            self.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            async for _ in self.chunks():
                pass
        finally:
            watcher.cancel()
        if self.response is None:
            raise APIError(503, "the request was cancelled (server shutting down)", type="server_error")
        return self.response


class Dispatcher:
    def __init__(self, engine: Any, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.jobs: set[Job] = set()
        self._admitted = 0  # in the engine or about to be: jobs + submits under way
        self.metrics = ServerMetrics(self.load)
        self.acclog = AccLog(settings, source="server", warn=lambda msg: log.warning("%s", msg))
        self._idle = asyncio.Event()
        self._idle.set()
        self.loop = asyncio.get_running_loop()  # created in the app's lifespan, on the event loop
        self.lost: APIError | None = None  # set when the engine is gone for good (see server/reload.py)

    def load(self) -> tuple[int, int]:
        """(running, waiting): requests in a slot and requests queued for one."""
        running = min(self._admitted, self.settings.parallel)
        return running, self._admitted - running

    async def submit(
        self, prompt: Any, *, chat: bool, overrides: dict[str, Any], keep_special: tuple[int, ...] = ()
    ) -> Job:
        """Admit a request or refuse it with 503. Bad input raises here (Engine.submit checks it)."""
        if self.lost is not None:
            raise self.lost
        if self._admitted >= self.settings.parallel + self.settings.max_queue:
            self.metrics.count("rejected")
            raise APIError(
                503,
                f"the server is busy ({self._admitted} requests in progress or queued); retry shortly",
                type="server_error",
                code="server_overloaded",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._admitted += 1
        self._idle.clear()
        started = time.time()
        try:
            # tokenizing and the prompt-fit check run off the event loop
            handle = await anyio.to_thread.run_sync(
                lambda: self.engine.submit(prompt, chat=chat, keep_special=keep_special, **overrides)
            )
        except BaseException:
            self._release()
            raise
        job = Job(handle, asyncio.get_running_loop(), self._finished, started=started, overrides=overrides)
        self.jobs.add(job)
        if self.lost is not None:  # the engine was lost while this request was being submitted
            job.fail(self.lost)
        return job

    def fail_all(self, error: APIError) -> None:
        """The engine is gone (an rpc-server dropped): every request in it ends with `error`, and so
        does every request that comes after. Runs on the event loop's thread."""
        self.lost = error
        for job in list(self.jobs):
            job.fail(error)

    def _release(self) -> None:
        self._admitted -= 1
        if self._admitted == 0:
            self._idle.set()

    def _finished(self, job: Job) -> None:
        self.jobs.discard(job)
        self._release()
        resp = job.response
        if resp is None:
            self.metrics.count("cancelled" if job.error is None else "failed")
            return
        self.metrics.record(resp.stats, resp.finish_reason)
        self.acclog.write(resp, self.settings.replace(**job.overrides), started=job.started)

    async def drain(self, timeout: float) -> bool:
        """Cancel everything still running and wait until the engine has let go of it all."""
        for job in list(self.jobs):
            job.cancel()
        with anyio.move_on_after(timeout):
            await self._idle.wait()
        return self._idle.is_set()
