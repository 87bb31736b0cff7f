"""How a streamed response goes on the wire, for every dialect: server-sent events (OpenAI's `data:`
lines; Anthropic's `event:` + `data:`) or NDJSON lines (Ollama); a whole response is one JSON body
(JSONResponse). A stream ends early and cleanly when the client leaves (the generation is cancelled)
or the server shuts down (cancelled too, and the stream ends with the dialect's error frame instead
of being cut): sse-starlette's shutdown event serves both framings.

A stream is never silent for longer than --stream-keepalive: while a long prompt is evaluated (or
the request waits for a slot) it sends its dialect's keepalive - Anthropic's `ping` event, the
Responses API's `response.in_progress`, an SSE comment, an empty Ollama line - so that a client's
idle timer (Codex's and Claude Code's 300 s) does not give up and send the request again."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator, AsyncIterator, Callable

import anyio
from sse_starlette import EventSourceResponse
from starlette.requests import Request

from localspec.serving.errors import APIError, as_api_error
from localspec.serving.facade import Stream

SHUTDOWN_GRACE_S = 5  # a stream gets this long to end cleanly after shutdown starts (below uvicorn's)

# an SSE frame: {"data": text}, {"event": name, "data": text} or {"comment": text}
Frame = dict[str, str]
OnError = Callable[[APIError], Any]  # the error as the dialect's last frame (or line)
Keepalive = Callable[[], Any]  # a frame (or line) that says only "still working"


def comment() -> Frame:
    """An SSE comment: every SSE client skips it, and it resets a socket's read timer."""
    return {"comment": "keepalive"}


def sse(
    request: Request,
    stream: Stream,
    frames: AsyncIterator[Frame],
    on_error: OnError,
    keepalive: Keepalive = comment,
) -> EventSourceResponse:
    shutdown = anyio.Event()  # set by sse-starlette when the server shuts down
    every = request.app.state.settings.stream_keepalive
    return EventSourceResponse(
        _guarded(stream, _paced(frames, keepalive, every), on_error, shutdown),
        sep="\n",
        ping=0,  # the keepalive is ours: the dialect's own frame, sent only when the stream is silent
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )


def ndjson(
    request: Request, stream: Stream, lines: AsyncIterator[Any], on_error: OnError, keepalive: Keepalive
) -> EventSourceResponse:
    """One JSON value a line (`lines` yields them; `on_error` returns the error's)."""
    every = request.app.state.settings.stream_keepalive

    async def encoded() -> AsyncIterator[bytes]:
        async for value in _guarded(stream, _paced(lines, keepalive, every), on_error, shutdown):
            yield json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    shutdown = anyio.Event()
    return EventSourceResponse(
        encoded(),
        media_type="application/x-ndjson",
        ping=0,  # no SSE comments in NDJSON: its keepalive is a line
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )


async def _guarded(
    stream: Stream, frames: AsyncIterator[Any], on_error: OnError, shutdown: anyio.Event
) -> AsyncIterator[Any]:
    """`frames`, ended by the dialect's error frame when something fails once the headers are sent.
    However this generator is left (the client closed the connection while it was suspended at a
    yield included), the generation is cancelled; a shutdown cancels it too."""

    async def cancel_on_shutdown() -> None:
        await shutdown.wait()
        stream.cancel()

    watcher = asyncio.ensure_future(cancel_on_shutdown())
    try:
        async for frame in frames:
            yield frame
    except Exception as e:  # headers are sent: the error goes down the stream
        yield on_error(as_api_error(e))
    finally:
        watcher.cancel()
        stream.cancel()
        with anyio.CancelScope(shield=True):  # the frames' own clean-up, now rather than when collected
            await frames.aclose()  # type: ignore[attr-defined]


async def _paced(frames: AsyncGenerator[Any, None], keepalive: Keepalive, every: float) -> AsyncIterator[Any]:
    """`frames`, with `keepalive()` wherever `every` seconds pass without one (0: never). The next
    frame is awaited in a task of its own, so that a keepalive never interrupts its making."""
    it = frames  # a dialect's async generator
    if not every:
        async for frame in it:
            yield frame
        return
    pending: asyncio.Future | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=every)
            if not done:
                yield keepalive()
                continue
            try:
                frame = pending.result()
            except StopAsyncIteration:
                pending = None
                return
            pending = None
            yield frame
    finally:
        if pending is not None:  # left while a frame was being made: stop making it
            pending.cancel()
            pending.add_done_callback(lambda f: f.cancelled() or f.exception())  # its end is no news
        else:  # left between frames: its own clean-up runs now
            with anyio.CancelScope(shield=True):
                await it.aclose()
