"""The template families and how each writes a tool call - the one table that knows them (llama.cpp's
common/chat.cpp detects the same ones from the same template text). A family gives the parser for
an answer, how calls are written back into a conversation for a template that cannot, and the
opening markers a lazy constraint waits for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from localspec.chat.deltas import ToolCall
from localspec.chat.parsers.base import Parser
from localspec.chat.parsers.generic import Generic
from localspec.chat.parsers.hermes import Hermes
from localspec.chat.parsers.llama3 import TAG, Llama3
from localspec.chat.parsers.mistral import Mistral


def _args(call: ToolCall) -> object:
    try:
        return json.loads(call.arguments or "{}")
    except ValueError:
        return call.arguments


def _hermes(calls: list[ToolCall]) -> str:
    return "\n".join(
        "<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": _args(c)}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in calls
    )


def _llama3(calls: list[ToolCall]) -> str:
    return "; ".join(json.dumps({"name": c.name, "parameters": _args(c)}, ensure_ascii=False) for c in calls)


def _mistral(calls: list[ToolCall]) -> str:
    items = [{"name": c.name, "arguments": _args(c), "id": c.id[-9:]} for c in calls]
    return "[TOOL_CALLS]" + json.dumps(items, ensure_ascii=False)


def _generic(calls: list[ToolCall]) -> str:
    items = [{"name": c.name, "arguments": _args(c), "id": c.id} for c in calls]
    return json.dumps(
        {"tool_calls": items} if len(items) > 1 else {"tool_call": items[0]}, ensure_ascii=False
    )


@dataclass(frozen=True)
class Family:
    name: str
    parser: Callable[..., Parser]  # (the declared tools' names) -> a parser for one answer
    write_calls: Callable[[list[ToolCall]], str]  # calls as the model writes them
    # markers of the syntax that may be special tokens: detokenizing keeps them as text, grammars
    # name them by id (a grammar's text cannot match a special token)
    specials: tuple[str, ...] = ()

    @property
    def triggers(self) -> tuple[str, ...]:
        return self.parser.triggers  # type: ignore[attr-defined]


HERMES = Family("hermes", Hermes, _hermes, specials=("<tool_call>", "</tool_call>"))
LLAMA3 = Family("llama3", Llama3, _llama3, specials=(TAG,))
MISTRAL = Family("mistral", Mistral, _mistral, specials=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"))
GENERIC = Family("generic", Generic, _generic)

# (what the template's text holds, its family): the first that matches, in llama.cpp's order
TABLE: tuple[tuple[str, Family], ...] = (
    ("<tool_call>", HERMES),
    ("<|start_header_id|>ipython<|end_header_id|>", LLAMA3),
    ("[TOOL_CALLS]", MISTRAL),
)
FAMILIES = {f.name: f for f in (HERMES, LLAMA3, MISTRAL, GENERIC)}


def detect(template: str | None) -> Family:
    """The family of a chat template; templates that know no tool syntax are generic."""
    for marker, family in TABLE:
        if template and marker in template:
            return family
    return GENERIC
