"""Anthropic's Messages API, POST /v1/messages (`?beta=true` too) and /v1/messages/count_tokens:
the body -> the internal request (`parse`), the events -> a message or its event stream (blocks.py).
A model name follows the one rule of every dialect (registry.pick): Claude Code's own names get the
loaded model."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from localspec.server import framing, offload
from localspec.server.anthropic import blocks, errors
from localspec.server.anthropic import schemas as s
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.serving import request as internal
from localspec.serving.errors import APIError
from localspec.serving.images import from_base64

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response
PREFIX = "/v1/messages"  # its unrouted paths (batches) answer in Anthropic's shape too
TOOL_CHOICES = {"auto": "auto", "any": "required", "tool": "required", "none": "none"}
THINKING = {"enabled": True, "disabled": False, "adaptive": None}  # adaptive: the template's default
# a header Claude Code writes into its system prompt; it changes per version and entry point, says
# nothing to a model, and would end a cached prefix early
BILLING_HEADER = "x-anthropic-billing-header:"


@router.post("/v1/messages")
async def messages(body: s.MessagesBody, request: Request) -> Any:
    req = await offload.run(parse, body)
    model = models_of(request).get(req.model)
    stream = await model.submit(req)
    reply = blocks.Reply(model.name, body)
    if req.stream:
        return framing.sse(request, stream, reply.frames(stream), errors.event, blocks.ping)
    (done,) = await stream.finished(request.is_disconnected)
    return JSONResponse(reply.message(done))


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: s.CountBody, request: Request) -> dict[str, int]:
    req = await offload.run(parse, body)
    prompt = await models_of(request).get(req.model).render(req)
    return {"input_tokens": len(prompt.ids)}


def parse(body: s.CountBody) -> internal.Request:
    refuse_unsupported(body)
    msgs = [internal.Message("system", text)] if (text := _system(body.system)) else []
    for i, m in enumerate(body.messages):
        msgs += _turn(i, m)
    if body.messages[-1].role == "assistant":
        raise APIError(
            400, "the last message is the assistant's (a prefill): continuing it is not supported; "
            "end with a user message", param=f"messages.{len(body.messages) - 1}",
        )  # fmt: skip
    choice = body.tool_choice or s.ToolChoice(type="auto")
    if choice.type == "tool" and not choice.name:
        raise APIError(400, "tool_choice of type 'tool' needs the tool's name", param="tool_choice.name")
    thinking = body.thinking.type if body.thinking else "adaptive"
    full = isinstance(body, s.MessagesBody)
    return internal.Request(
        messages=tuple(msgs),
        overrides=(body.overrides() if full else {}) | _format(body),
        tools=_tools(body.tools or []),
        tool_choice=TOOL_CHOICES[choice.type],
        forced_tool=choice.name if choice.type == "tool" else None,
        parallel_tool_calls=not choice.disable_parallel_tool_use,
        reasoning=THINKING[thinking],
        stream=full and body.stream,
        model=body.model,
        clamp_max_tokens=True,  # clients send a fixed max_tokens, often past any local context
    )


def _system(system: str | list[s.Text] | None) -> str:
    if isinstance(system, list):
        return "".join(b.text for b in system if not b.text.startswith(BILLING_HEADER))
    return system or ""


def _turn(i: int, m: s.InputMessage) -> list[internal.Message]:
    """One Anthropic message -> internal messages: its text (and images), an assistant's tool calls
    and thinking, as one message; then a user's tool results, each a message of its own. The text
    goes first wherever it was among the results, as llama.cpp converts it: Claude Code sends a
    `<system-reminder>` after a command's result, and the model reads the result last."""
    if isinstance(m.content, str):
        return [internal.Message(m.role, m.content)]
    results: list[internal.Message] = []
    text: list[str | bytes] = []  # text and images, in order
    reasoning, calls = [], []
    for j, b in enumerate(m.content):
        where = f"messages.{i}.content.{j}"
        if isinstance(b, s.Text):
            if not (m.role == "system" and b.text.startswith(BILLING_HEADER)):
                text.append(b.text)
        elif isinstance(b, s.Image) and m.role == "user":
            text.append(_image(b.source, where))
        elif isinstance(b, s.ToolResult) and m.role == "user":
            results.append(internal.Message("tool", _result(b, where), tool_call_id=b.tool_use_id))
        elif isinstance(b, s.ToolUse) and m.role == "assistant":
            calls.append(internal.ToolCall(b.id, b.name, json.dumps(b.input, ensure_ascii=False)))
        elif isinstance(b, s.Thinking) and m.role == "assistant":
            reasoning.append(blocks.reasoning_of(b))
        elif not isinstance(b, s.RedactedThinking) or m.role != "assistant":
            kind = getattr(b, "type", "?")
            raise APIError(
                400, f"content blocks of type {kind!r} are not supported in a {m.role} message", param=where
            )
    out: list[internal.Message] = []
    if text or calls or reasoning or not results:
        content, images = internal.joined(text)
        out.append(internal.Message(m.role, content, images, tuple(calls), reasoning="".join(reasoning)))
    return out + results


def _image(src: s.ImageSource, where: str) -> bytes:
    """An image block's bytes: base64 only (a url source is refused: the server fetches nothing)."""
    if src.type != "base64" or src.data is None:
        raise APIError(
            400, f"image sources of type {src.type!r} are not read: send the image as base64 data",
            param=f"{where}.source",
        )  # fmt: skip
    return from_base64(src.data, f"{where}.source.data")


def _result(b: s.ToolResult, where: str) -> str:
    """A tool result's text; an error is said so in it (templates have no place for the flag)."""
    if isinstance(b.content, str):
        text = b.content
    else:
        bad = next((k for k, c in enumerate(b.content) if not isinstance(c, s.Text)), None)
        if bad is not None:
            kind = b.content[bad].type
            raise APIError(
                400,
                f"content blocks of type {kind!r} are not supported in a tool result",
                param=f"{where}.content.{bad}",
            )
        text = "".join(c.text for c in b.content)
    return f"Error: {text}" if b.is_error else text


def _tools(tools: list[s.Tool]) -> tuple[internal.Tool, ...]:
    out = []
    for i, t in enumerate(tools):
        if (t.type not in (None, "custom")) or t.input_schema is None:
            raise APIError(
                400, f"tool {t.name!r} ({t.type or 'no input_schema'}) is a tool this server cannot run: "
                "only client tools with an input_schema are supported", param=f"tools.{i}",
            )  # fmt: skip
        if not t.defer_loading:
            # no description is an empty one, as llama.cpp renders it
            out.append(internal.Tool(t.name, t.description or "", t.input_schema))
    return tuple(out)


def _format(body: s.CountBody) -> dict[str, Any]:
    """Structured output: output_config.format (or the beta's output_format) -> the JSON constraint."""
    fmt = (body.output_config.format if body.output_config else None) or body.output_format
    return internal.json_schema(fmt.schema_, strict=True, param="output_config.format.schema") if fmt else {}
