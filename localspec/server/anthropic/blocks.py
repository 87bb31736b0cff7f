"""The events -> Anthropic's content blocks: one message (`Reply.message`) or its event stream
(`Reply.frames`: message_start, ping, each block's start / deltas / stop, message_delta with the
stop reason and usage, message_stop). Reasoning becomes `thinking` blocks, tool calls `tool_use`
blocks. The speculation figures ride along as llama-server's `timings` (an extra key)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from typing import Any, AsyncIterator

from localspec.server.anthropic import schemas as s
from localspec.server.shared import timings
from localspec.serving import Delta, Finished, Stream

# our signature carries the reasoning itself, so that a thinking block sent back with its text
# omitted (display "omitted") still renders as it was generated; Claude's own are opaque to us
SIGNED = "ls1."


def signature(reasoning: str) -> str:
    return SIGNED + base64.b64encode(reasoning.encode()).decode()


def reasoning_of(block: s.Thinking) -> str:
    """A thinking block's text: as sent, else what our signature carries."""
    if block.thinking or not block.signature.startswith(SIGNED):
        return block.thinking
    try:
        return base64.b64decode(block.signature[len(SIGNED) :], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:  # a call cut off by max_tokens
        return {}
    return value if isinstance(value, dict) else {}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Reply:
    """One response's identity and what its request asked about thinking and limits."""

    def __init__(self, model: str, body: s.MessagesBody) -> None:
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.model, self.max_tokens = model, body.max_tokens
        thinking = body.thinking
        self.show_reasoning = thinking is None or thinking.type != "disabled"
        self.omit_text = thinking is not None and thinking.display in ("omitted", "updates")

    # -- the whole message --------------------------------------------------------------------
    def message(self, done: Finished) -> dict[str, Any]:
        msg = done.message
        content: list[dict[str, Any]] = []
        if msg.reasoning and self.show_reasoning:
            content.append(self._thinking(msg.reasoning))
        if msg.content:
            content.append({"type": "text", "text": msg.content})
        for c in msg.tool_calls:
            content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)})
        reason, sequence = self.stop(done)
        return {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": self.usage(done),
            "timings": timings(done.response).model_dump(),
        }  # fmt: skip

    def _thinking(self, reasoning: str) -> dict[str, Any]:
        text = "" if self.omit_text else reasoning
        return {"type": "thinking", "thinking": text, "signature": signature(reasoning)}

    def stop(self, done: Finished) -> tuple[str, str | None]:
        """stop_reason and stop_sequence: a max_tokens clamped to the context is the context's stop."""
        if done.reason == "tool_calls":
            return "tool_use", None
        if done.reason == "length":
            full = done.usage.completion_tokens < self.max_tokens
            return ("model_context_window_exceeded" if full else "max_tokens"), None
        hit = done.response.stop_string
        return ("stop_sequence", hit) if hit else ("end_turn", None)

    @staticmethod
    def usage(done: Finished) -> dict[str, int]:
        """Anthropic's split: input_tokens were evaluated, cache_read_input_tokens came from a cached
        prefix; their sum is the prompt."""
        st = done.response.stats
        cached = max(st.n_prompt_tokens - st.n_prefilled, 0)
        return {
            "input_tokens": st.n_prompt_tokens - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": st.n_generated,
        }  # fmt: skip

    # -- the event stream ---------------------------------------------------------------------
    async def frames(self, stream: Stream) -> AsyncIterator[dict[str, str]]:
        start = {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0},
        }  # fmt: skip
        yield _event("message_start", {"message": start})
        yield ping()
        blocks = _Blocks(self)
        async for e in stream:
            if isinstance(e, Delta):
                for frame in blocks.feed(e):
                    yield frame
                continue
            for frame in blocks.close():
                yield frame
            reason, sequence = self.stop(e)
            yield _event("message_delta", {
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": self.usage(e), "timings": timings(e.response).model_dump(),
            })  # fmt: skip
        yield _event("message_stop", {})


def ping() -> dict[str, str]:
    """Anthropic's keepalive event: its API sends it while nothing else is to be said."""
    return _event("ping", {})


def _event(name: str, data: dict[str, Any]) -> dict[str, str]:
    return {"event": name, "data": _json({"type": name, **data})}


class _Blocks:
    """The open content block: a delta of another kind closes it and opens the next."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.index = -1
        self.kind: str | None = None
        self.reasoning = ""  # the open thinking block's, signed when it closes

    def feed(self, d: Delta) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        if d.reasoning and self.reply.show_reasoning:
            out += self._open("thinking", {"thinking": "", "signature": ""})
            self.reasoning += d.reasoning
            if not self.reply.omit_text:
                out.append(self._delta({"type": "thinking_delta", "thinking": d.reasoning}))
        if d.content:
            out += self._open("text", {"text": ""})
            out.append(self._delta({"type": "text_delta", "text": d.content}))
        if d.call is not None:
            if d.name is not None:  # a call's first piece
                out += self._open("tool_use", {"id": d.id, "name": d.name, "input": {}}, new=True)
            if d.arguments:
                out.append(self._delta({"type": "input_json_delta", "partial_json": d.arguments}))
        return out

    def _open(self, kind: str, block: dict[str, Any], new: bool = False) -> list[dict[str, str]]:
        if self.kind == kind and not new:
            return []
        out = self.close()
        self.index, self.kind = self.index + 1, kind
        out.append(
            _event("content_block_start", {"index": self.index, "content_block": {"type": kind, **block}})
        )
        return out

    def _delta(self, delta: dict[str, Any]) -> dict[str, str]:
        return _event("content_block_delta", {"index": self.index, "delta": delta})

    def close(self) -> list[dict[str, str]]:
        if self.kind is None:
            return []
        out = []
        if self.kind == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": signature(self.reasoning)}))
            self.reasoning = ""
        out.append(_event("content_block_stop", {"index": self.index}))
        self.kind = None
        return out
