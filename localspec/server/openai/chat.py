"""OpenAI's chat completions, POST /v1/chat/completions: the body -> the internal request (`parse`),
the events -> one chat.completion object (`render`) or its chunk stream (`render_stream`: the role,
deltas - text, reasoning, tool calls - with optional draft marks and logprobs, each choice's finish
with timings, the include_usage chunk, [DONE]; n > 1: the choices' chunks interleave by index)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Sequence

from fastapi import APIRouter, Depends, Request

from localspec.server import offload, shared
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.openai import common, errors
from localspec.server.openai import schemas as s
from localspec.serving import Delta, Finished, Progress, Stream
from localspec.serving import request as internal
from localspec.serving.errors import APIError
from localspec.serving.images import from_data_url

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response


@router.post("/v1/chat/completions")
async def chat_completions(body: s.ChatRequest, request: Request) -> Any:
    return await common.respond(
        request,
        await offload.run(parse, body),
        "chatcmpl-",
        render,
        lambda stream, ids: render_stream(stream, ids, body),
    )


def parse(body: s.ChatRequest) -> internal.Request:
    refuse_unsupported(body)
    choice = body.tool_choice
    return internal.Request(
        messages=tuple(_message(i, m) for i, m in enumerate(body.messages)),
        overrides=body.overrides(),
        tools=tuple(
            internal.Tool(t.function.name, t.function.description, t.function.parameters)
            for t in body.tools or ()
        ),
        tool_choice="required" if isinstance(choice, s.NamedToolChoice) else (choice or "auto"),
        forced_tool=choice.function.name if isinstance(choice, s.NamedToolChoice) else None,
        parallel_tool_calls=body.parallel_tool_calls,
        template_vars=body.chat_template_kwargs or {},
        n=body.n,
        stream=body.stream,
        progress=body.stream and body.return_progress,
        model=body.model,
        keep_alive=internal.keep_alive(body.keep_alive),
    )


def _message(i: int, m: s.Message) -> internal.Message:
    images: tuple[internal.Image, ...] = ()
    if isinstance(m.content, list):
        content, images = internal.joined(
            [_part(f"messages.{i}.content.{j}", p) for j, p in enumerate(m.content)]
        )
    else:
        content = m.content or ""
    calls = tuple(
        internal.ToolCall(c.id or f"call_{i}_{j}", c.function.name, _arguments(c.function.arguments))
        for j, c in enumerate(m.tool_calls or ())
    )
    return internal.Message(
        role="system" if m.role == "developer" else m.role,
        content=content,
        images=images,
        tool_calls=calls,
        tool_call_id=m.tool_call_id if m.role == "tool" else None,
        name=m.name if m.role == "tool" else None,
    )


def _part(param: str, p: s.ContentPart) -> str | bytes:
    """A content part: its text, or an image's bytes (from a data URL)."""
    if p.type == "text":
        return p.text or ""
    if p.type == "image_url":
        if p.image_url is None:
            raise APIError(400, "an image_url part needs image_url.url (a data URL)", param=param)
        return from_data_url(p.image_url.url, param)
    raise APIError(400, f"content parts are text or image_url, not {p.type!r}", param=param)


def _arguments(a: str | dict) -> str:
    return a if isinstance(a, str) else json.dumps(a, ensure_ascii=False)


def render(done: Sequence[Finished], ids: common.Ids) -> dict:
    choices = []
    for f in done:
        msg = f.message
        message = s.ChatMessage(
            content=msg.content if (msg.content or not msg.tool_calls) else None,
            reasoning_content=msg.reasoning or None,
            tool_calls=common.tool_calls_out(msg),
        )
        lp = common.chat_logprobs(f.logprobs) if f.logprobs is not None else None
        choices.append(s.ChatChoice(index=f.choice, message=message, logprobs=lp, finish_reason=f.reason))
    completion = s.ChatCompletion(
        id=ids.id, created=ids.created, model=ids.model, choices=choices,
        usage=common.usage(done), timings=shared.timings(done[0].response),
    )  # fmt: skip
    return common.wire(completion)


async def render_stream(
    stream: Stream, ids: common.Ids, body: s.ChatRequest
) -> AsyncIterator[dict[str, str]]:
    want_lp = bool(body.logprobs)

    def chunk(index: int, delta: s.Delta, **extra: Any) -> dict[str, str]:
        lp = extra.pop("logprobs", None)
        c = s.ChatCompletionChunk(
            id=ids.id, created=ids.created, model=ids.model,
            choices=[s.ChunkChoice(index=index, delta=delta, logprobs=lp, finish_reason=extra.pop("finish", None))],
            **extra,
        )  # fmt: skip
        return {"data": common.dump(c, usage_null=body.include_usage)}

    for i in range(body.n):
        yield chunk(i, s.Delta(role="assistant", content=""))
    done = []
    async for e in stream:
        if isinstance(e, Delta):
            lp = common.chat_logprobs(e.logprobs) if want_lp and e.logprobs else None
            marks = common.draft_marks(e.from_draft) if body.mark_drafts else None
            yield chunk(e.choice, common.delta_out(e), logprobs=lp, localspec=marks)
        elif isinstance(e, Progress):  # as llama-server sends it: the role again, and the progress
            yield chunk(e.choice, s.Delta(role="assistant"), prompt_progress=common.progress(e))
        else:
            done.append(e)
            lp = common.chat_logprobs(e.tail_logprobs) if want_lp and e.tail_logprobs else None
            yield chunk(e.choice, s.Delta(), finish=e.reason, timings=shared.timings(e.response), logprobs=lp)
    for frame in common.closing(s.ChatCompletionChunk, done, ids, body.include_usage):
        yield frame
