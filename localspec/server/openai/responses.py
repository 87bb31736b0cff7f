"""OpenAI's Responses API, POST /v1/responses: the body -> the internal request (`parse`), the
events -> one response object (`responses_out.render`) or its typed event stream
(`responses_out.render_stream`). Stateless: a conversation comes whole in `input` (Codex sends
`store: false`); `previous_response_id` is refused. Built-in tools this server cannot run
(web_search, file_search, ...) are not offered to the model; the response's `X-Localspec-Ignored-Tools`
header names them."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request

from localspec.server import framing, offload
from localspec.server.app_state import models_of
from localspec.server.auth import require_key
from localspec.server.fields import refuse_unsupported
from localspec.server.openai import errors, responses_out
from localspec.server.openai import responses_schemas as s
from localspec.serving import request as internal
from localspec.serving.errors import APIError
from localspec.serving.images import from_data_url

router = APIRouter(dependencies=[Depends(require_key)], route_class=offload.Route)
error_response = errors.error_response
IGNORED_TOOLS_HEADER = "X-Localspec-Ignored-Tools"
# a custom tool (free text in) is offered as a function of one string argument
CUSTOM_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
ASSISTANT_ITEMS = ("message", "reasoning", "function_call", "custom_tool_call")


@router.post("/v1/responses")
async def responses(body: s.ResponsesRequest, request: Request) -> Any:
    tools = await offload.run(Tools, body)
    req = await offload.run(parse, body, tools)
    model = models_of(request).get(req.model)
    stream = await model.submit(req)
    out = responses_out.Output(model.name, body, tools)
    headers = {IGNORED_TOOLS_HEADER: ", ".join(tools.ignored)} if tools.ignored else None
    if req.stream:
        response = framing.sse(request, stream, out.frames(stream), out.error_frame, out.keepalive)
    else:
        response = out.whole(await stream.finished(request.is_disconnected))
    response.headers.update(headers or {})
    return response


def parse(body: s.ResponsesRequest, tools: Tools | None = None) -> internal.Request:
    refuse_unsupported(body)
    if body.previous_response_id:
        raise APIError(
            400,
            "this server keeps no responses: send the whole conversation in 'input' (and 'store': false)",
            param="previous_response_id",
        )
    if body.background:
        raise APIError(
            400, "background responses are not supported: leave 'background' out", param="background"
        )
    if body.truncation == "auto":
        raise APIError(
            400, "'truncation': 'auto' is not supported: a prompt too long is refused", param="truncation"
        )
    tools = tools or Tools(body)
    choice, forced = tools.choice()
    return internal.Request(
        messages=messages(body),
        overrides=overrides(body),
        tools=tools.offered,
        tool_choice=choice,
        forced_tool=forced,
        parallel_tool_calls=body.parallel_tool_calls,
        reasoning=_reasoning(body.reasoning),
        stream=body.stream,
        progress=body.stream and body.return_progress,
        model=body.model,
        clamp_max_tokens=body.max_output_tokens is None,
    )


def overrides(body: s.ResponsesRequest) -> dict[str, Any]:
    out = body.setting_overrides()
    # no max_output_tokens: until the end of text or of the context, as OpenAI, llama-server, vLLM
    # and Ollama run it, not the server's --max-tokens (Codex sends none; its answers are code edits)
    limit = body.max_output_tokens
    out |= internal.until_context_end() if limit is None else {"max_tokens": limit}
    if body.want_logprobs:
        out["logprobs"] = True
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_schema":
        if fmt.schema_ is None:
            raise APIError(400, "text.format json_schema needs a 'schema'", param="text.format.schema")
        out.update(internal.json_schema(fmt.schema_, strict=bool(fmt.strict), param="text.format.schema"))
    elif fmt is not None and fmt.type == "json_object":
        out.update(internal.json_object())
    return out


def _reasoning(r: s.ReasoningConfig | None) -> bool | None:
    if r is None or r.effort is None:
        return None  # the template's default
    return r.effort != "none"


# -- input -> messages -----------------------------------------------------------------------------
def messages(body: s.ResponsesRequest) -> tuple[internal.Message, ...]:
    out: list[internal.Message] = []
    if body.instructions:
        out.append(internal.Message("system", body.instructions))
    if isinstance(body.input, str):
        out.append(internal.Message("user", body.input))
    else:
        turn: _Turn | None = None  # an assistant's consecutive items (its reasoning, text and calls)
        for i, item in enumerate(body.input):
            if item.type in ASSISTANT_ITEMS and (item.type != "message" or item.role == "assistant"):
                turn = turn or _Turn()
                turn.add(item, f"input.{i}")
                continue
            if turn is not None:
                out.append(turn.message())
                turn = None
            _add(out, item, f"input.{i}")
        if turn is not None:
            out.append(turn.message())
    if not out:
        raise APIError(400, "'input' is empty: send a string or at least one item", param="input")
    return tuple(out)


def _add(out: list[internal.Message], item: s.Item, at: str) -> None:
    """Append `item` (not an assistant's: `_Turn` gathers those) to the conversation."""
    kind = item.type
    if kind == "message" and item.role in ("user", "system", "developer"):
        role = "system" if item.role == "developer" else item.role
        if role == "user" and isinstance(item.content, list):
            out.append(internal.Message(role, *internal.joined(_user_parts(item.content, at + ".content"))))
        else:
            out.append(internal.Message(role, _text(item.content, at + ".content", ("input_text",))))
    elif kind == "function_call_output" or kind == "custom_tool_call_output":
        out.append(_output(item, at))
    elif kind == "item_reference":
        raise APIError(
            400, "item references need stored responses, which this server does not keep", param=at
        )
    elif kind == "message":
        raise APIError(400, f"a message's role is user, assistant, system or developer, not {item.role!r}",
                       param=at + ".role")  # fmt: skip
    else:
        raise APIError(400, f"input items of type {kind!r} are not supported here", param=at + ".type")


def _output(item: s.Item, at: str) -> internal.Message:
    """A tool's output: the answer to the call `call_id` names or, without one, context the client
    hands the model as a named tool's output (Codex 0.171 sends its goal so: {"name":
    "goal_objective", "namespace": "agent", "output": ...}, after the model's create_goal call)."""
    text = _text(item.output, at + ".output", ("input_text", "output_text"))
    if item.call_id:
        return internal.Message("tool", text, tool_call_id=item.call_id)
    if not item.name:
        raise APIError(400, "a tool's output needs the 'call_id' of the call it answers, or its tool's 'name'",
                       param=at + ".call_id")  # fmt: skip
    return internal.Message(
        "tool", text, name=f"{item.namespace}.{item.name}" if item.namespace else item.name
    )


class _Turn:
    """An assistant's consecutive items as one assistant message, as a chat request writes them:
    each item's part is appended, the message made once (95k calls were merged a message per item)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[internal.ToolCall] = []

    def add(self, item: s.Item, at: str) -> None:
        if item.type == "message":
            self.text.append(_text(item.content, at + ".content", ("output_text", "input_text", "refusal")))
        elif item.type == "reasoning":
            parts = [p.text or "" for p in item.content or ()] if isinstance(item.content, list) else []
            self.reasoning.append("".join(parts) or "".join(p.text or "" for p in item.summary or ()))
        else:
            self.calls.append(_call(item, at))

    def message(self) -> internal.Message:
        return internal.Message(
            "assistant",
            internal.joined(self.text)[0],
            tool_calls=tuple(self.calls),
            reasoning="".join(self.reasoning),
        )


def _call(item: s.Item, at: str) -> internal.ToolCall:
    call_id = _need(item.call_id, at + ".call_id")
    name = _need(item.name, at + ".name")
    if item.type == "custom_tool_call":
        args = json.dumps({"input": item.input or ""}, ensure_ascii=False)
    else:
        args = item.arguments if item.arguments is not None else "{}"
    name = f"{item.namespace}.{name}" if item.namespace else name
    return internal.ToolCall(call_id, name, args)


def _text(content: str | list[s.Part] | None, at: str, kinds: tuple[str, ...]) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for j, p in enumerate(content):
        if p.type not in kinds:
            raise APIError(400, f"only text content is supported here ({', '.join(kinds)}), not {p.type!r}",
                           param=f"{at}.{j}.type")  # fmt: skip
    return internal.joined([(p.refusal if p.type == "refusal" else p.text) or "" for p in content])[0]


def _user_parts(content: list[s.Part], at: str) -> list[str | bytes]:
    """A user message's text and images, in order (an image as the bytes its data URL carries)."""
    parts: list[str | bytes] = []
    for j, p in enumerate(content):
        if p.type == "input_image":
            if not p.image_url:
                raise APIError(400, "an input_image needs image_url (a data URL): file ids are not kept here",
                               param=f"{at}.{j}.image_url")  # fmt: skip
            parts.append(from_data_url(p.image_url, f"{at}.{j}.image_url"))
        elif p.type == "input_text":
            parts.append(p.text or "")
        else:
            raise APIError(400, f"a user message's parts are input_text or input_image, not {p.type!r}",
                           param=f"{at}.{j}.type")  # fmt: skip
    return parts


def _need(value: str | None, at: str) -> str:
    if not value:
        raise APIError(400, f"'{at.rsplit('.', 1)[-1]}' is required here", param=at)
    return value


# -- tools -------------------------------------------------------------------------------------------
class Tools:
    """The request's tools as the model is offered them: functions, custom tools (one string
    argument) and the members of namespaces (named "namespace.name"); built-ins are left out and
    named in `ignored`."""

    def __init__(self, body: s.ResponsesRequest) -> None:
        self.body = body
        self.custom: set[str] = set()
        self.namespaced: dict[str, tuple[str, str]] = {}  # "ns.name" -> (ns, name)
        self.ignored: list[str] = []
        offered: list[internal.Tool] = []
        for i, t in enumerate(body.tools or ()):
            if t.type == "namespace":
                for j, member in enumerate(t.tools or ()):
                    tool = self._tool(member, f"tools.{i}.tools.{j}", namespace=t.name)
                    offered += [tool] if tool else []
            else:
                tool = self._tool(t, f"tools.{i}")
                offered += [tool] if tool else []
        self.offered = self._allowed(offered)

    def _tool(self, t: s.ToolIn, at: str, namespace: str | None = None) -> internal.Tool | None:
        if t.type not in ("function", "custom"):
            self.ignored.append(t.type)
            return None
        name = _need(t.name, at + ".name")
        if namespace:
            self.namespaced[f"{namespace}.{name}"] = (namespace, name)
            name = f"{namespace}.{name}"
        if t.type == "custom":
            self.custom.add(name)
            return internal.Tool(name, t.description, CUSTOM_PARAMETERS)
        return internal.Tool(name, t.description, t.parameters)

    def _allowed(self, offered: list[internal.Tool]) -> tuple[internal.Tool, ...]:
        c = self.body.tool_choice
        if not (isinstance(c, s.ToolChoiceObject) and c.type == "allowed_tools"):
            return tuple(offered)
        names = {t.get("name") for t in c.tools or ()}
        return tuple(t for t in offered if t.name in names)

    def choice(self) -> tuple[str, str | None]:
        """(tool_choice, the function forced, if one is)."""
        c = self.body.tool_choice
        if c is None or isinstance(c, str):
            return c or "auto", None
        if c.type in ("function", "custom"):
            return "required", _need(c.name, "tool_choice.name")
        if c.type == "allowed_tools":
            return c.mode or "auto", None
        raise APIError(400, f"tool_choice {c.type!r} names a built-in tool this server cannot run",
                       param="tool_choice.type")  # fmt: skip

    def split(self, name: str) -> tuple[str | None, str]:
        """A called tool's (namespace, name) as the client declared it."""
        return self.namespaced.get(name, (None, name))
