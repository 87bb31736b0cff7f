"""Tools, tool calls and tool results through the model's own template. What a template cannot
render itself is written the way llama.cpp's templates polyfill it: the tools described in the
system message, the assistant's calls written in its family's syntax, tool results as user turns.
What a template can render is found by rendering probes through it (as minja does), not guessed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from localspec.chat import template as chat
from localspec.chat.deltas import ToolCall
from localspec.chat.families import Family

_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_fn_q7x",
        "description": "probe",
        "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
    },
}
_CALL = {
    "id": "call_probe00000001",
    "type": "function",
    "function": {"name": "probe_call_q7x", "arguments": {"a": "b"}},
}


@dataclass(frozen=True)
class Caps:
    tools: bool  # describes `tools` itself
    tool_calls: bool  # writes an assistant message's tool_calls
    tool_results: bool  # writes role "tool" messages
    object_arguments: bool = True  # wants a call's arguments as an object (else as JSON text)


def _renders(template: str, messages: list[dict], needle: str, **extra: Any) -> bool:
    try:
        return needle in chat.render(template, messages, add_generation_prompt=False, **extra)
    except Exception:  # noqa: BLE001 - a template that raises on the probe cannot render it
        return False


@lru_cache(maxsize=16)
def capabilities(template: str) -> Caps:
    user = {"role": "user", "content": "hi"}
    tools = _renders(template, [user], "probe_fn_q7x", tools=[_TOOL])
    called = {"role": "assistant", "content": "", "tool_calls": [_CALL]}
    tool_calls = object_arguments = _renders(template, [user, called], "probe_call_q7x")
    if not tool_calls:  # templates that concatenate the arguments want them as text (DeepSeek-R1)
        as_text = {**_CALL, "function": {**_CALL["function"], "arguments": '{"a": "b"}'}}
        called = {**called, "tool_calls": [as_text]}
        tool_calls = _renders(template, [user, called], "probe_call_q7x")
    plain = called if tool_calls else {"role": "assistant", "content": "calling"}
    result = {
        "role": "tool",
        "content": "probe_result_q7x",
        "tool_call_id": _CALL["id"],
        "name": "probe_call_q7x",
    }
    tool_results = _renders(
        template, [user, plain, result, {"role": "user", "content": "ok"}], "probe_result_q7x"
    )
    return Caps(tools, tool_calls, tool_results, object_arguments)


def _describe(tools: list[dict], family: Family, choice: str | None, parallel: bool) -> str:
    """What the model is told about tools its template cannot describe, and how to call them."""
    listing = json.dumps([t["function"] for t in tools], ensure_ascii=False, indent=1)
    if family.name == "generic":
        ways = ['{"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}} to call a tool']
        if parallel:
            ways.append('{"tool_calls": [<several such calls>]} to call several')
        if not choice:
            ways.append('{"response": "<your reply>"} to reply to the user')
        how = f"Respond in JSON format, one object: {', or '.join(ways)}."
    else:
        example = family.write_calls([ToolCall("call_example01", "<tool name>", '{"<argument>": "<value>"}')])
        how = f"To call a tool, write: {example}"
    only = f" Call the tool {choice}." if choice and choice != "required" else ""
    return f"You can call these tools:\n{listing}\n\n{how}{only}"


def prepare(
    template: str,
    messages: list[dict],
    tools: list[dict] | None,
    family: Family,
    *,
    choice: str | None = None,
    parallel: bool = True,
) -> tuple[list[dict], dict[str, Any]]:
    """(messages, template variables) for rendering a tool conversation through `template`.
    choice: None (auto), "required" or a function's name; with tool_choice none pass tools=None."""
    caps = capabilities(template)
    out: list[dict] = []
    for m in messages:
        if m.get("tool_calls") and not caps.tool_calls:
            calls = [
                ToolCall(c.get("id", ""), c["function"]["name"], _text(c["function"].get("arguments")))
                for c in m["tool_calls"]
            ]
            written = family.write_calls(calls)
            m = {
                "role": "assistant",
                "content": (m.get("content") or "") + ("\n" if m.get("content") else "") + written,
            }
        elif m.get("tool_calls"):
            m = {**m, "tool_calls": [_arguments_as(c, caps.object_arguments) for c in m["tool_calls"]]}
        elif m.get("role") == "tool" and not caps.tool_results:
            body = json.dumps(
                {"tool_response": {"tool_call_id": m.get("tool_call_id"), "content": m.get("content")}},
                ensure_ascii=False,
            )
            if out and out[-1].get("_tool_results"):  # results of one turn: one user message
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + body}
                continue
            m = {"role": "user", "content": body, "_tool_results": True}
        out.append(m)
    out = [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]
    extra: dict[str, Any] = {}
    if tools:
        if caps.tools and family.name != "generic":
            extra["tools"] = tools
        else:
            note = _describe(tools, family, choice, parallel)
            if out and out[0].get("role") == "system":
                out[0] = {**out[0], "content": note + "\n\n" + (out[0].get("content") or "")}
            else:
                out.insert(0, {"role": "system", "content": note})
    return out, extra


def _text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)


def _arguments_as(call: dict, as_object: bool) -> dict:
    """A call with its arguments as the template wants them: an object (parsed) or JSON text."""
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if as_object and isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except ValueError:
            pass
    elif not as_object and not isinstance(args, str):
        fn["arguments"] = _text(args)
    return {**call, "type": call.get("type", "function"), "function": fn}
