"""How a streamed response goes on the wire, for every dialect: server-sent events (OpenAI's `data:`
lines; Anthropic's `event:` + `data:`) or NDJSON lines (Ollama); a whole response is one JSON body
(JSONResponse). A stream ends early and cleanly when the client leaves (the generation is cancelled)
or the server shuts down (cancelled too, and the stream ends with the dialect's error frame instead
of being cut): sse-starlette's shutdown event serves both framings."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Callable

import anyio
from sse_starlette import EventSourceResponse

from localspec.serving.errors import APIError, as_api_error
from localspec.serving.facade import Stream

SHUTDOWN_GRACE_S = 5  # a stream gets this long to end cleanly after shutdown starts (below uvicorn's)
PING_S = 15  # an SSE comment line this often keeps proxies from closing an idle stream

# an SSE frame: {"data": text} or {"event": name, "data": text}
Frame = dict[str, str]
OnError = Callable[[APIError], Any]  # the error as the dialect's last frame (or line)


def sse(stream: Stream, frames: AsyncIterator[Frame], on_error: OnError) -> EventSourceResponse:
    shutdown = anyio.Event()  # set by sse-starlette when the server shuts down
    return EventSourceResponse(
        _guarded(stream, frames, on_error, shutdown),
        sep="\n",
        ping=PING_S,
        shutdown_event=shutdown,
        shutdown_grace_period=SHUTDOWN_GRACE_S,
    )


def ndjson(stream: Stream, lines: AsyncIterator[Any], on_error: OnError) -> EventSourceResponse:
    """One JSON value a line (`lines` yields them; `on_error` returns the error's)."""

    async def encoded() -> AsyncIterator[bytes]:
        async for value in _guarded(stream, lines, on_error, shutdown):
            yield json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    shutdown = anyio.Event()
    return EventSourceResponse(
        encoded(),
        media_type="application/x-ndjson",
        ping=0,  # no SSE comments in NDJSON
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
