"""A streamed response as SSE events: the OpenAI chunk sequence (role, text deltas with optional
draft marks, the finish with timings, the include_usage chunk, [DONE]) and what ends it early."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import anyio

from localspec.errors import LocalspecError
from localspec.server import render
from localspec.server import schemas as s
from localspec.server.errors import APIError, from_localspec
from localspec.server.service import Job

SHUTDOWN_GRACE_S = 5  # a stream gets this long to end cleanly after shutdown starts (below uvicorn's)


async def events(
    job: Job, reply: render.Reply, body: s.RequestBase, shutdown: anyio.Event
) -> AsyncIterator[dict[str, str]]:
    """SSE events of one streamed response. Leaving this generator early (the client closed the
    connection) cancels the generation in Job.chunks; a server shutdown cancels it too, and the
    stream then ends with an error event instead of being cut."""

    async def cancel_on_shutdown() -> None:
        await shutdown.wait()
        job.cancel()

    watcher = asyncio.ensure_future(cancel_on_shutdown())
    try:
        async for item in pieces(job, reply, body):
            yield item
    finally:
        watcher.cancel()
        if job.response is None:  # however we left (closed while suspended at a yield included)
            job.cancel()


async def pieces(job: Job, reply: render.Reply, body: s.RequestBase) -> AsyncIterator[dict[str, str]]:
    usage_null = body.include_usage

    def event(obj: Any) -> dict[str, str]:
        return {"data": render.dump(obj, usage_null=usage_null)}

    if reply.chat:
        yield event(reply.piece("", role=True))
    held: list[bool] = []  # draft flags of tokens whose text is still held back (partial UTF-8, stops)
    try:
        async for chunk in job.chunks():
            held += chunk.from_draft
            if chunk.text:
                marks = (
                    s.DraftMarks(from_draft=held, all_draft=all(held)) if body.mark_drafts and held else None
                )
                yield event(reply.piece(chunk.text, draft_marks=marks))
                held = []
    except Exception as e:  # headers are sent: the error goes down the stream in OpenAI's shape
        if isinstance(e, APIError):  # the server's own verdict, e.g. the engine lost its rpc-server
            err = e
        elif isinstance(e, LocalspecError):
            err = from_localspec(e)
        else:
            err = APIError(500, str(e), type="server_error")
        yield {"data": err.response().body.decode()}
        return
    resp = job.response
    if resp is None:  # cancelled under us: the server is shutting down
        err = APIError(503, "the server is shutting down; the generation was cancelled", type="server_error")
        yield {"data": err.response().body.decode()}
        return
    yield event(reply.piece(None if reply.chat else "", finish=render.finish_reason(resp), resp=resp))
    if body.include_usage:
        yield {"data": render.dump(reply.usage_piece(resp))}
    yield {"data": "[DONE]"}
