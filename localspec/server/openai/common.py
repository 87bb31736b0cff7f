"""What OpenAI's dialects share when they format events: the response's identity, usage,
llama-server's `timings` (with the speculation figures), logprobs in both of OpenAI's shapes, and
the JSON that goes on the wire. Stats are data; this is where the server formats them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from localspec.chat.deltas import Delta as Part
from localspec.chat.deltas import Message
from localspec.server import framing
from localspec.server.app_state import models_of
from localspec.server.openai import errors
from localspec.server.openai import schemas as s
from localspec.serving import Stream
from localspec.serving import request as internal
from localspec.serving.events import Finished, Progress, TokenLogprob, total_usage

# extras we leave out of a chunk when they are empty; OpenAI's own keys are always sent (null included)
_OPTIONAL_EXTRAS = ("usage", "timings", "localspec", "prompt_progress")


@dataclass
class Ids:
    """The identity every object of one response shares (id, created, model)."""

    model: str
    prefix: str  # chatcmpl- | cmpl-
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.id = self.id or self.prefix + uuid.uuid4().hex[:24]


async def respond(
    request: Request,
    req: internal.Request,
    prefix: str,
    whole: Callable[[list[Finished], Ids], dict],
    frames: Callable[[Stream, Ids], AsyncIterator[dict[str, str]]],
) -> Any:
    """`req` answered by the model it names: one JSON body (`whole`) or, streamed, SSE frames."""
    model = models_of(request).get(req.model)
    stream = await model.submit(req)
    ids = Ids(model.name, prefix)
    if req.stream:
        return framing.sse(request, stream, frames(stream, ids), errors.event)
    return JSONResponse(whole(await stream.finished(request.is_disconnected), ids))


def closing(cls: type, done: Sequence[Finished], ids: Ids, include_usage: bool) -> Iterator[dict[str, str]]:
    """A stream's last frames: with stream_options.include_usage a chunk of `cls` with no choices
    and the usage, then [DONE]."""
    if include_usage:
        last = cls(id=ids.id, created=ids.created, model=ids.model, choices=[], usage=usage(done))
        yield {"data": dump(last)}
    yield {"data": "[DONE]"}


def progress(p: Progress) -> s.PromptProgress:
    return s.PromptProgress(total=p.total, cache=p.cache, processed=p.processed, time_ms=p.time_ms)


def usage(done: Sequence[Finished]) -> s.Usage:
    u = total_usage(done)
    return s.Usage(
        prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, total_tokens=u.total_tokens
    )


def dump(obj: BaseModel, *, usage_null: bool = False) -> str:
    """JSON for the wire. With stream_options.include_usage every chunk but the last carries
    "usage": null, as OpenAI's do; otherwise empty extras are left out."""
    return json.dumps(wire(obj, usage_null=usage_null), ensure_ascii=False, separators=(",", ":"))


def wire(obj: BaseModel, *, usage_null: bool = False) -> dict:
    data = obj.model_dump(mode="json")
    for key in _OPTIONAL_EXTRAS:
        if key in data and data[key] is None and not (key == "usage" and usage_null):
            del data[key]
    for choice in data.get("choices", []):
        if "delta" in choice:  # a delta says what it carries and nothing else (the last one: {})
            choice["delta"] = _pruned(choice["delta"])
            for call in choice["delta"].get("tool_calls", []):
                call.update(_pruned(call))
                call["function"] = _pruned(call["function"])
        if "message" in choice:
            for key in ("reasoning_content", "tool_calls"):
                if choice["message"].get(key) is None:
                    choice["message"].pop(key, None)
    return data


def _pruned(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def chat_logprobs(lps: Sequence[TokenLogprob]) -> s.ChoiceLogprobs:
    """OpenAI's chat logprobs: each token with its text, bytes and the likeliest alternatives."""

    def top(b: bytes, lp: float) -> s.TopLogprob:
        return s.TopLogprob(token=_text(b), logprob=lp, bytes=list(b))

    content = [
        s.TokenLogprob(
            **top(t.bytes, t.logprob).model_dump(), top_logprobs=[top(b, lp) for _, b, lp in t.top]
        )
        for t in lps
    ]
    return s.ChoiceLogprobs(content=content)


def completion_logprobs(lps: Sequence[TokenLogprob], offset: int = 0) -> s.CompletionLogprobs:
    """The legacy completions shape: token texts, their logprobs, {text: logprob} alternatives."""
    texts, offsets = [], []
    for t in lps:
        texts.append(_text(t.bytes))
        offsets.append(offset)
        offset += len(texts[-1])
    return s.CompletionLogprobs(
        tokens=texts,
        token_logprobs=[t.logprob for t in lps],
        top_logprobs=[{_text(b): lp for _, b, lp in t.top} for t in lps],
        text_offset=offsets,
    )


def tool_calls_out(msg: Message) -> list[s.ToolCallOut] | None:
    if not msg.tool_calls:
        return None
    return [
        s.ToolCallOut(id=c.id, function=s.FunctionOut(name=c.name, arguments=c.arguments))
        for c in msg.tool_calls
    ]


def delta_out(d: Part) -> s.Delta:
    """A piece of the answer as OpenAI's delta: content, reasoning_content, or one piece of one tool call."""
    calls = None
    if d.call is not None:
        fn = s.FunctionDelta(name=d.name, arguments=d.arguments if (d.arguments or d.name is None) else "")
        calls = [s.ToolCallDelta(index=d.call, id=d.id, type="function" if d.name else None, function=fn)]
    return s.Delta(
        content=d.content or None,
        reasoning_content=d.reasoning or None,
        tool_calls=calls,
    )


def draft_marks(from_draft: Sequence[bool]) -> s.DraftMarks | None:
    """Which of a piece's tokens were accepted drafts (request `localspec.mark_drafts`)."""
    return s.DraftMarks(from_draft=list(from_draft), all_draft=all(from_draft)) if from_draft else None
