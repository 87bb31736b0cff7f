"""A streamed response as SSE events: the OpenAI chunk sequence (role, deltas - text, reasoning, tool
calls - with optional draft marks and logprobs, each choice's finish with timings, the include_usage
chunk, [DONE]) and what ends it early. n > 1: the choices' chunks interleave, each with its index."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import anyio

from localspec.chat.deltas import merge
from localspec.errors import LocalspecError
from localspec.server import render
from localspec.server import schemas as s
from localspec.server.errors import APIError, from_localspec
from localspec.server.service import Job

SHUTDOWN_GRACE_S = 5  # a stream gets this long to end cleanly after shutdown starts (below uvicorn's)
_END = object()


async def events(
    jobs: list[Job],
    reply: render.Reply,
    body: s.RequestBase,
    shutdown: anyio.Event,
    parsers: list[Any] | None = None,
) -> AsyncIterator[dict[str, str]]:
    """SSE events of one streamed response. Leaving this generator early (the client closed the
    connection) cancels the generations in Job.chunks; a server shutdown cancels them too, and the
    stream then ends with an error event instead of being cut. `parsers`: per choice, the chat
    answer's parser (content / reasoning / tool calls)."""

    async def cancel_on_shutdown() -> None:
        await shutdown.wait()
        for job in jobs:
            job.cancel()

    watcher = asyncio.ensure_future(cancel_on_shutdown())
    try:
        async for item in pieces(jobs, reply, body, parsers):
            yield item
    finally:
        watcher.cancel()
        for job in jobs:
            if job.response is None:  # however we left (closed while suspended at a yield included)
                job.cancel()


async def _merged(jobs: list[Job]) -> AsyncIterator[tuple[int, Any]]:
    """(choice, chunk) from every job as they come; (choice, _END) when one ends."""
    if len(jobs) == 1:
        async for chunk in jobs[0].chunks():
            yield 0, chunk
        yield 0, _END
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def drain(i: int, job: Job) -> None:
        try:
            async for chunk in job.chunks():
                await queue.put((i, chunk))
            await queue.put((i, _END))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            await queue.put((i, e))

    tasks = [asyncio.ensure_future(drain(i, j)) for i, j in enumerate(jobs)]
    try:
        left = len(jobs)
        while left:
            i, item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            left -= item is _END
            yield i, item
    finally:
        for t in tasks:
            t.cancel()


async def pieces(
    jobs: list[Job], reply: render.Reply, body: s.RequestBase, parsers: list[Any] | None = None
) -> AsyncIterator[dict[str, str]]:
    usage_null = body.include_usage
    want_lp = getattr(body, "logprobs", None) not in (None, False)

    def event(obj: Any) -> dict[str, str]:
        return {"data": render.dump(obj, usage_null=usage_null)}

    n = len(jobs)
    if reply.chat:
        for i in range(n):
            yield event(reply.piece("", role=True, index=i))
    held: list[list[bool]] = [[] for _ in range(n)]  # draft flags of tokens whose text is held back
    held_lp: list[tuple[list, list[int]]] = [([], []) for _ in range(n)]  # logprobs not yet sent

    def out(i: int, deltas: list, text: str | None) -> list[dict[str, str]]:
        """Events for choice i's new deltas (chat) or text (completions), the held marks and logprobs
        on the first of them."""
        evs = []
        items: list = deltas if parsers else ([text] if text else [])
        for k, item in enumerate(items):
            first = k == 0
            marks = (
                s.DraftMarks(from_draft=held[i], all_draft=all(held[i]))
                if first and body.mark_drafts and held[i]
                else None
            )
            lp = held_lp[i] if first and want_lp and held_lp[i][1] else None
            if parsers:
                evs.append(
                    event(reply.piece(delta=render.delta_out(item), index=i, draft_marks=marks, logprobs=lp))
                )
            else:
                evs.append(event(reply.piece(item, index=i, draft_marks=marks, logprobs=lp)))
            if first:
                held[i], held_lp[i] = [], ([], [])
        return evs

    try:
        async for i, chunk in _merged(jobs):
            if chunk is _END:
                resp = jobs[i].response
                if resp is None:  # cancelled under us: the server is shutting down
                    err = APIError(
                        503, "the server is shutting down; the generation was cancelled", type="server_error"
                    )
                    yield {"data": err.response().body.decode()}
                    return
                calls = False
                if parsers:
                    for e in out(i, merge(parsers[i].finish()), None):
                        yield e
                    calls = parsers[i].n_calls > 0
                lp = held_lp[i] if want_lp and held_lp[i][1] else None
                yield event(
                    reply.piece(
                        None if reply.chat else "",
                        index=i,
                        finish=render.finish_reason(resp, calls),
                        resp=resp,
                        logprobs=lp,
                    )
                )
                continue
            held[i] += chunk.from_draft
            if chunk.logprobs:
                held_lp[i][0].extend(chunk.logprobs)
                held_lp[i][1].extend(chunk.tokens)
            if chunk.text or chunk.tokens:
                deltas = merge(parsers[i].feed(chunk.text)) if parsers and chunk.text else []
                for e in out(i, deltas, chunk.text):
                    yield e
    except Exception as e:  # headers are sent: the error goes down the stream in OpenAI's shape
        if isinstance(e, APIError):  # the server's own verdict, e.g. the engine lost its rpc-server
            err = e
        elif isinstance(e, LocalspecError):
            err = from_localspec(e)
        else:
            err = APIError(500, str(e), type="server_error")
        yield {"data": err.response().body.decode()}
        return
    if body.include_usage:
        yield {"data": render.dump(reply.usage_piece([j.response for j in jobs]))}
    yield {"data": "[DONE]"}
