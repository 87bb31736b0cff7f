"""One request's events on the event loop, every choice's interleaved as they come.

The engine thread posts each choice's chunks with `loop.call_soon_threadsafe` (Engine.submit's
sink): no thread per request. A choice's end is booked (admission, metrics, the acceptance log) on
the loop as soon as the engine lets go of it, whether or not anyone still reads; its events are
made (answer.py) only as they are read. Leaving the iteration early cancels every choice."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable

from localspec.engine import Progress, Response
from localspec.serving import events
from localspec.serving.answer import Answer
from localspec.serving.errors import APIError
from localspec.serving.events import Event, Finished

_END = object()
# how often a whole response's request checks that its client is still there: an editor drops a
# stale completion at the next keystroke, and its slot should be free for the one that follows
DISCONNECT_POLL_S = 0.05
SHUT_DOWN = "the server is shutting down; the generation was cancelled"
# (the stream, the choice, its Response or None when cancelled, the error it ended with); given the
# stream rather than closing over it, so that nothing holds a finished stream in a cycle
OnEnd = Callable[["EventStream", int, "Response | None", "BaseException | None"], None]


class EventStream:
    def __init__(
        self, answers: list[Answer], loop: asyncio.AbstractEventLoop, on_end: OnEnd, *, progress: bool = False
    ) -> None:
        """`progress`: the prompt's evaluation comes as Progress events (else it is not posted)."""
        self._answers, self._loop, self._on_end = answers, loop, on_end
        self._progress = progress
        n = len(answers)
        self.handles: list[Any] = [None] * n  # each choice's engine Handle, once submitted
        self.responses: list[Response | None] = [None] * n
        self._errors: list[BaseException | None] = [None] * n
        self._ended = [False] * n
        self._queue: asyncio.Queue = asyncio.Queue()

    @property
    def n(self) -> int:
        return len(self._answers)

    @property
    def done(self) -> bool:
        return all(self._ended)

    def sink(self, choice: int) -> Callable[[object], None]:
        """What the engine thread calls with choice `choice`'s chunks, an error, then None."""

        def post(item: object) -> None:
            try:
                self._loop.call_soon_threadsafe(self._deliver, choice, item)
            except RuntimeError:  # the loop is closed: the server is gone, nobody is listening
                pass

        return post

    def _deliver(self, i: int, item: Any) -> None:
        if self._ended[i]:  # ended by fail(): the engine's late word changes nothing
            return
        if item is None:
            self._end(i)  # booked first, so a client that has its answer sees the metrics
            self._queue.put_nowait((i, _END))
            return
        if isinstance(item, Progress):
            if self._progress:
                self._queue.put_nowait(
                    (i, events.Progress(i, item.total, item.cache, item.processed, item.time_ms))
                )
            return
        if isinstance(item, BaseException):
            self._errors[i] = item
        elif item.response is not None:
            self.responses[i] = item.response
        self._queue.put_nowait((i, item))

    def _end(self, i: int) -> None:
        self._ended[i] = True
        self.handles[i] = None  # the engine is done with it (a handle holds its request, whose sink holds us)
        self._on_end(self, i, self.responses[i], self._errors[i])

    def fail(self, error: BaseException) -> None:
        """End every choice still running with `error`, without the engine (it is gone)."""
        for i in range(self.n):
            if not self._ended[i]:
                self._errors[i] = error
                self._queue.put_nowait((i, error))
                self._queue.put_nowait((i, _END))
                self._end(i)

    def drop_unstarted(self) -> int:
        """Mark the choices the engine never took as ended (a later one's submit failed): how many."""
        unstarted = [i for i, h in enumerate(self.handles) if h is None and not self._ended[i]]
        for i in unstarted:
            self._ended[i] = True
        return len(unstarted)

    def cancel(self) -> None:
        """Stop every choice still generating; the engine frees its slot within one round."""
        for handle, resp in zip(self.handles, self.responses):
            if handle is not None and resp is None:
                handle.cancel()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        left = self.n
        try:
            while left:
                i, item = await self._queue.get()
                if item is _END:
                    left -= 1
                    resp = self.responses[i]
                    if resp is None:  # cancelled under us: the server is shutting down
                        raise APIError(503, SHUT_DOWN)
                    for event in self._answers[i].finish(resp):
                        yield event
                elif isinstance(item, BaseException):
                    raise item
                elif isinstance(item, events.Progress):
                    yield item
                else:
                    for event in self._answers[i].feed(item):
                        yield event
        finally:
            self.cancel()

    async def finished(self, is_disconnected: Callable[[], Awaitable[bool]]) -> list[Finished]:
        return await collect_finished(self, is_disconnected)


async def collect_finished(stream: Any, is_disconnected: Callable[[], Awaitable[bool]]) -> list[Finished]:
    """Run a stream to the end (a whole response): each choice's Finished event, cancelling if the
    client disconnects meanwhile."""

    async def watch() -> None:
        while not await is_disconnected():
            await asyncio.sleep(DISCONNECT_POLL_S)
        stream.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        done = [e async for e in stream if isinstance(e, Finished)]
    finally:
        watcher.cancel()
    return sorted(done, key=lambda e: e.choice)
