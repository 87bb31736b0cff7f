"""What a chat answer is made of, as it streams: content, reasoning and tool-call deltas, and the
message they add up to. A tool call streams as OpenAI's do: its index, id and name once, then its
arguments (JSON text) in pieces; `assemble` joins the pieces, so a streamed answer and a whole one
are the same message by construction (the whole one is the streamed one, assembled)."""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass, field
from typing import Iterable

_ALNUM = string.ascii_letters + string.digits


def new_call_id() -> str:
    # alphanumeric after the prefix: Mistral's templates keep the last 9 characters and want them so
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


@dataclass(frozen=True)
class Delta:
    """One piece of an answer: content or reasoning text, or a piece of tool call `call` (its
    first piece carries id and name)."""

    content: str = ""
    reasoning: str = ""
    call: int | None = None  # the tool call's index, for a tool-call piece
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    @property
    def empty(self) -> bool:
        return not (self.content or self.reasoning or self.call is not None)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str = ""


@dataclass
class Message:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


def assemble(deltas: Iterable[Delta]) -> Message:
    msg = Message()
    for d in deltas:
        msg.content += d.content
        msg.reasoning += d.reasoning
        if d.call is not None:
            if d.call == len(msg.tool_calls):
                msg.tool_calls.append(ToolCall(d.id or "", d.name or ""))
            msg.tool_calls[d.call].arguments += d.arguments
    return msg


def merge(deltas: Iterable[Delta]) -> list[Delta]:
    """Adjacent pieces of the same kind joined (fewer, larger stream chunks; the same message)."""
    out: list[Delta] = []
    for d in deltas:
        if d.empty:
            continue
        last = out[-1] if out else None
        if last is not None and d.call is None and last.call is None and not (last.content and d.reasoning):
            if not (last.reasoning and d.content):
                out[-1] = Delta(content=last.content + d.content, reasoning=last.reasoning + d.reasoning)
                continue
        if last is not None and d.call is not None and d.call == last.call and d.name is None:
            out[-1] = Delta(
                call=last.call, id=last.id, name=last.name, arguments=last.arguments + d.arguments
            )
            continue
        out.append(d)
    return out
