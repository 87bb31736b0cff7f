"""A chat request's plan: its messages, tools and template variables rendered through the model's own
template, the parser its answer goes through (content, reasoning, tool calls of the template's
family), the control tokens that parser must see as text, and the constraint a forced call needs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from localspec.chat import families, tool_grammar, tool_prompt
from localspec.chat.output import answer_parser
from localspec.server import schemas as s
from localspec.server.errors import APIError

RESERVED_VARS = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")


@dataclass
class ChatPlan:
    prompt_text: str
    prompt_ids: list[int]
    family: families.Family
    tools_on: bool  # the answer may call tools (tools given, tool_choice not none)
    make_parser: Callable[[], Any]
    keep_special: tuple[int, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)  # the constraint a call needs, if any


def tool_choice(body: s.ChatRequest) -> str | None:
    """None (auto), "none", "required", or the name of the function that must be called."""
    c = body.tool_choice
    if isinstance(c, s.NamedToolChoice):
        names = [t.function.name for t in body.tools or []]
        if c.function.name not in names:
            raise APIError(
                400,
                f"tool_choice names {c.function.name!r}, which is not among the tools",
                param="tool_choice",
            )
        return c.function.name
    if c in ("required",) and not body.tools:
        raise APIError(400, "tool_choice 'required' needs tools", param="tool_choice")
    return None if c in (None, "auto") else c


def messages(body: s.ChatRequest) -> list[dict[str, Any]]:
    """OpenAI messages -> what chat templates read (HF's conventions): role, text content,
    tool_calls with their arguments, tool results with their call's id."""
    out = []
    for i, m in enumerate(body.messages):
        if isinstance(m.content, list):
            if any(p.type != "text" for p in m.content):
                raise APIError(400, "only text content is supported", param=f"messages.{i}.content")
            content = "".join(p.text or "" for p in m.content)
        else:
            content = m.content or ""
        msg: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": content}
        if m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id or f"call_{i}_{j}", "type": "function",
                 "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                for j, c in enumerate(m.tool_calls)
            ]  # fmt: skip
        if m.role == "tool":
            msg["tool_call_id"] = m.tool_call_id or ""
            if m.name:
                msg["name"] = m.name
        out.append(msg)
    return out


def _arguments(a: str | dict) -> str:
    return a if isinstance(a, str) else json.dumps(a, ensure_ascii=False)


def plan(engine: Any, body: s.ChatRequest, reasoning_format: str) -> ChatPlan:
    """Render and tokenize a chat request (runs off the event loop: templates and tokenizing cost)."""
    template = engine.target.chat_template()
    family = families.detect(template)
    choice = tool_choice(body)
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    tools_on = bool(tools) and choice != "none"
    extra = dict(body.chat_template_kwargs or {})
    bad = [k for k in extra if k in RESERVED_VARS]
    if bad:
        raise APIError(400, f"chat_template_kwargs may not set {bad[0]!r}", param="chat_template_kwargs")
    msgs = messages(body)
    if template and (tools_on or any("tool_calls" in m or m["role"] == "tool" for m in msgs)):
        msgs, tool_vars = tool_prompt.prepare(
            template, msgs, tools if tools_on else None, family,
            choice=choice if choice != "none" else None, parallel=body.parallel_tool_calls,
        )  # fmt: skip
        extra.update(tool_vars)
    text = engine.render_chat(msgs, **extra)
    ids = engine.tokenize_chat(text)
    specials = {}  # the family's markers that are control tokens (kept as text, named by id in grammars)
    for marker in family.specials if tools_on else ():
        toks = engine.target.tokenize(marker, add_special=False, parse_special=True)
        if len(toks) == 1 and not engine.target.token_bytes(toks[0]):
            specials[marker] = toks[0]
    own = body.response_format is not None or body.grammar is not None or body.json_schema is not None
    overrides = (
        tool_grammar.constraint(family, tools, choice, parallel=body.parallel_tool_calls, specials=specials)
        if tools_on and not own  # a request's own constraint wins (docs/apps.md)
        else {}
    )
    return ChatPlan(
        text, ids, family, tools_on,
        lambda: answer_parser(family, tools=tools_on, template=template, prompt=text, reasoning_format=reasoning_format),
        tuple(specials.values()), overrides,
    )  # fmt: skip
