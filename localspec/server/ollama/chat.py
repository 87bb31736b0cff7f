"""Ollama's generation calls, POST /api/chat and /api/generate: the body -> the internal request
(`parse_chat`, `parse_generate`), the events -> one object (`render`) or NDJSON lines
(`render_stream`: a line per piece of text or thinking, the tool calls whole - Ollama gives their
arguments as an object - then the last line with `done`, `done_reason` and the durations in
nanoseconds, plus llama-server's `timings` with the speculation figures). Ollama streams unless the
body says `"stream": false`. An empty message list or prompt only says the model is loaded."""

from __future__ import annotations

import collections
import functools
import json
import time
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Sequence

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from localspec.server import framing, offload
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.ollama import errors
from localspec.server.ollama import schemas as s
from localspec.server.shared import timings
from localspec.serving import Delta, Finished, Stream, TokenLogprob
from localspec.serving import request as internal
from localspec.serving.errors import APIError
from localspec.serving.fim import Fill
from localspec.serving.images import from_base64

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response
PREFIX = "/api/"


@router.post("/api/chat")
async def chat(body: s.ChatRequest, request: Request) -> Any:
    return await _respond(request, body, await offload.run(parse_chat, body), "chat")


@router.post("/api/generate")
async def generate(body: s.GenerateRequest, request: Request) -> Any:
    return await _respond(request, body, await offload.run(parse_generate, body), "generate")


async def _respond(request: Request, body: s.GenerationBase, req: internal.Request, kind: str) -> Any:
    started = time.monotonic()
    model = models_of(request).get(req.model)
    if body.options is not None:
        body.options.check_context(model.card.n_ctx)
    if not (
        req.messages or req.prompt or req.fill
    ):  # Ollama's way of asking for the model to be loaded: it is
        return JSONResponse(
            _object(model.name, kind, {"content": ""}) | {"done": True, "done_reason": "load"}
        )
    stream = await model.submit(req)
    if req.stream:
        lines = render_stream(stream, model.name, kind, started)
        return framing.ndjson(
            request, stream, lines, errors.line, functools.partial(_empty, model.name, kind)
        )
    return JSONResponse(render(await stream.finished(request.is_disconnected), model.name, kind, started))


def model_name(name: str) -> str:
    """Ollama's clients add the default tag: "default:latest" is the model "default"."""
    return name.removesuffix(":latest")


# -- parse ----------------------------------------------------------------------------------------
def parse_chat(body: s.ChatRequest) -> internal.Request:
    refuse_unsupported(body)
    reasoning, extra = body.reasoning()
    return internal.Request(
        messages=_messages(body.messages),
        tools=tuple(
            internal.Tool(t.function.name, t.function.description, t.function.parameters)
            for t in body.tools or ()
        ),
        overrides=body.overrides(),
        reasoning=reasoning,
        template_vars=extra,
        stream=body.stream,
        model=model_name(body.model),
        keep_alive=internal.keep_alive(body.keep_alive),
    )


def parse_generate(body: s.GenerateRequest) -> internal.Request:
    """A prompt through the model's template as one user turn (after `system`), as it is with `raw`,
    or with `suffix` the text before a middle the model fills (its own FIM tokens)."""
    refuse_unsupported(body)
    for name, why in (
        ("template", "the model's own chat template is used; a template of your own is not supported"),
        ("context", "the older conversation memory is not kept; send the conversation to /api/chat"),
    ):
        if getattr(body, name):
            raise APIError(400, f"{name}: {why}", param=name)
    if body.raw and body.system:
        raise APIError(
            400, "system: a raw prompt goes to the model as it is; put the system text in it", param="system"
        )
    if body.raw and body.images:
        raise APIError(400, "images: a raw prompt is text only; leave raw out to send images", param="images")
    reasoning, extra = body.reasoning()
    common = {
        "overrides": body.overrides(), "reasoning": reasoning, "template_vars": extra,
        "stream": body.stream, "model": model_name(body.model), "keep_alive": internal.keep_alive(body.keep_alive),
    }  # fmt: skip
    if body.suffix:  # fill-in-the-middle: Ollama's templates put the prompt before the middle
        if body.images:
            raise APIError(400, "images: a fill-in-the-middle request is text only", param="images")
        return internal.Request(fill=Fill(body.prompt, body.suffix), **common)
    if body.raw:  # as it is, its special tokens read as such (a client's own FIM prompt)
        return internal.Request(prompt=body.prompt or None, special=True, **common)
    msgs = []  # none: Ollama's way of asking for the model to be loaded
    if body.prompt or body.images:
        content, images = _content(body.prompt, body.images, "images")
        msgs = [internal.Message("system", body.system)] * bool(body.system) + [
            internal.Message("user", content, images)
        ]
    return internal.Request(messages=tuple(msgs), **common)


def _messages(msgs: Sequence[s.Message]) -> tuple[internal.Message, ...]:
    """Ollama's messages; a tool result without an id answers its assistant turn's calls in order."""
    out, pending = [], collections.deque()  # the last calls' ids, answered from the left
    for i, m in enumerate(msgs):
        role = m.role.lower()
        content, images = _content(m.content, m.images, f"messages.{i}.images")
        calls = tuple(
            internal.ToolCall(
                c.id or f"call_{i}_{j}",
                c.function.name,
                _arguments(c.function.arguments, f"messages.{i}.tool_calls.{j}.function.arguments"),
            )
            for j, c in enumerate(m.tool_calls or ())
        )
        if calls:
            pending = collections.deque(c.id for c in calls)
        call_id = m.tool_call_id or (pending.popleft() if role == "tool" and pending else None)
        out.append(internal.Message(
            role=role, content=content, images=images, tool_calls=calls, reasoning=m.thinking or "",
            tool_call_id=call_id if role == "tool" else None, name=m.tool_name if role == "tool" else None,
        ))  # fmt: skip
    return tuple(out)


def _content(text: str, images: list[str] | None, at: str) -> tuple[str, tuple[internal.Image, ...]]:
    """A message's text with its images (bare base64, Ollama's way) before it, as Ollama places them."""
    return internal.joined([*(from_base64(b, f"{at}.{j}") for j, b in enumerate(images or ())), text])


def _arguments(a: dict | str, path: str) -> str:
    """A call's arguments: Ollama's are an object; the JSON text of one is taken too."""
    if isinstance(a, dict):
        return json.dumps(a, ensure_ascii=False)
    try:
        if isinstance(json.loads(a or "{}"), dict):
            return a or "{}"
    except json.JSONDecodeError:
        pass
    raise APIError(400, f"{path} must be a JSON object (got {a[:40]!r})", param=path)


# -- render ---------------------------------------------------------------------------------------
def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _object(model: str, kind: str, message: dict[str, Any]) -> dict[str, Any]:
    """One line's common part: chat carries a message, generate its text as `response`."""
    head: dict[str, Any] = {"model": model, "created_at": _now()}
    if kind == "chat":
        return head | {"message": {"role": "assistant", **message}}
    out = head | {"response": message.get("content", "")}
    return out | ({"thinking": message["thinking"]} if message.get("thinking") else {})


def _empty(model: str, kind: str) -> dict[str, Any]:
    """A line with no text: the first one, sent at once, and the keepalive while a prompt is read."""
    return _object(model, kind, {"content": ""}) | {"done": False}


def _piece(d: Delta) -> dict[str, Any]:
    return {"content": d.content} | ({"thinking": d.reasoning} if d.reasoning else {})


def _calls(f: Finished) -> list[dict[str, Any]]:
    out = []
    for i, c in enumerate(f.message.tool_calls):
        try:
            args = json.loads(c.arguments or "{}")
        except json.JSONDecodeError:
            raise APIError(500, f"the model's call of {c.name} has arguments that are not JSON") from None
        out.append({"id": c.id, "function": {"index": i, "name": c.name, "arguments": args}})
    return out


def _done(f: Finished, started: float) -> dict[str, Any]:
    """The last line's fields: why it ended, and what it took (Ollama's durations are nanoseconds)."""
    st = f.response.stats
    return {
        "done": True,
        "done_reason": "length" if f.reason == "length" else "stop",
        "total_duration": int((time.monotonic() - started) * 1e9),
        "load_duration": 0,  # the model is loaded before the server answers anything
        "prompt_eval_count": st.n_prompt_tokens,
        "prompt_eval_duration": int(st.prefill_ms * 1e6),
        "eval_count": st.n_generated,
        "eval_duration": int(st.decode_ms * 1e6),
        "timings": timings(f.response).model_dump(),  # llama-server's, with the speculation figures
    }


def _logprobs(lps: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    def one(b: bytes, lp: float) -> dict[str, Any]:
        return {"token": b.decode("utf-8", "replace"), "logprob": lp, "bytes": list(b)}

    return [one(t.bytes, t.logprob) | {"top_logprobs": [one(b, lp) for _, b, lp in t.top]} for t in lps]


def render(done: Sequence[Finished], model: str, kind: str, started: float) -> dict[str, Any]:
    f = done[0]
    message: dict[str, Any] = {"content": f.message.content}
    if f.message.reasoning:
        message["thinking"] = f.message.reasoning
    if f.message.tool_calls:
        message["tool_calls"] = _calls(f)
    out = _object(model, kind, message) | _done(f, started)
    return out | ({"logprobs": _logprobs(f.logprobs)} if f.logprobs is not None else {})


async def render_stream(
    stream: Stream, model: str, kind: str, started: float
) -> AsyncIterator[dict[str, Any]]:
    yield _empty(model, kind)  # at once: the client knows the request is in before its prompt is read
    async for e in stream:
        if isinstance(e, Delta):
            if e.call is None and (e.content or e.reasoning):  # a call's pieces come whole, below
                line = _object(model, kind, _piece(e)) | {"done": False}
                yield line | ({"logprobs": _logprobs(e.logprobs)} if e.logprobs else {})
            continue
        if e.message.tool_calls:  # only chat offers tools
            yield _object(model, kind, {"content": "", "tool_calls": _calls(e)}) | {"done": False}
        last = _object(model, kind, {"content": ""}) | _done(e, started)
        yield last | ({"logprobs": _logprobs(e.tail_logprobs)} if e.tail_logprobs else {})
