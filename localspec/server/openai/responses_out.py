"""The Responses API's answer: one response object whose `output` lists items (reasoning, a message
with its output_text, function calls), or the documented event stream that builds it -
response.created, response.in_progress, then per item output_item.added, its part or arguments
events and deltas, output_item.done, and last response.completed (response.incomplete when the
answer was cut by max_output_tokens or the context; response.failed after an `error` event when the
generation failed). Every event carries a sequence_number. Usage holds the cached prompt tokens;
llama-server's `timings` (with the speculation figures) ride on the response object."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator, Sequence

from fastapi.responses import JSONResponse

from localspec.server import shared
from localspec.server.framing import Frame
from localspec.server.openai import common
from localspec.serving import Delta, Finished, Progress, Stream
from localspec.serving.errors import APIError, as_api_error
from localspec.serving.events import TokenLogprob


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class Output:
    """One response's identity, the request's echoed settings, and its items as they are made."""

    def __init__(self, model: str, body: Any, tools: Any) -> None:
        self.id, self.created, self.model = _id("resp_"), int(time.time()), model
        self.body, self.tools = body, tools
        self.seq = 0
        self.items: list[dict] = []  # the finished items, in output order
        self.open: dict | None = None  # the item being streamed
        self._echo = _echo(body)

    # -- the response object -------------------------------------------------------------------------
    def response(self, status: str, f: Finished | None = None, error: APIError | None = None) -> dict:
        out = {"id": self.id, "object": "response", "created_at": self.created, "status": status,
               "error": None, "incomplete_details": None, "model": self.model, "output": list(self.items),
               "usage": None, **self._echo}  # fmt: skip
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        if error is not None:
            # OpenAI's codes for a failed response; the `error` event before it has ours
            code = "server_error" if error.status >= 500 else "invalid_prompt"
            out["error"] = {"code": code, "message": error.message}
        if f is not None:
            out["completed_at"] = int(time.time())
            out["usage"] = usage(f)
            out["timings"] = shared.timings(f.response).model_dump(mode="json")
        return out

    def whole(self, done: Sequence[Finished]) -> JSONResponse:
        (f,) = done
        status = _status(f)
        m = f.message
        if m.reasoning:
            self.items.append(reasoning_item(_id("rs_"), m.reasoning, "completed"))
        if m.content or not m.tool_calls:
            lps = logprobs(f.logprobs) if f.logprobs is not None and self.body.want_logprobs else None
            self.items.append(message_item(_id("msg_"), m.content, status, lps))
        for c in m.tool_calls:
            self.items.append(self._call_item(c.id, c.name, c.arguments, "completed"))
        return JSONResponse(self.response(status, f))

    # -- the event stream ----------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> Frame:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return {"event": kind, "data": json.dumps(data, ensure_ascii=False, separators=(",", ":"))}

    def keepalive(self, **extra: Any) -> Frame:
        """`response.in_progress` again: what a Responses client may be sent while nothing is new."""
        return self.event("response.in_progress", response=self.response("in_progress"), **extra)

    async def frames(self, stream: Stream) -> AsyncIterator[Frame]:
        yield self.event("response.created", response=self.response("in_progress"))
        yield self.event("response.in_progress", response=self.response("in_progress"))
        try:
            async for e in stream:
                if isinstance(e, Delta):
                    for frame in self._delta(e):
                        yield frame
                    continue
                if isinstance(e, Progress):  # llama-server's: prompt_progress on response.in_progress
                    yield self.keepalive(prompt_progress=common.progress(e).model_dump())
                    continue
                status = _status(e)
                if not self._has_message() and not e.message.tool_calls:
                    for frame in self._open("message"):  # an empty answer still has its message
                        yield frame
                for frame in self._close(status, e.tail_logprobs):
                    yield frame
                kind = "response.completed" if status == "completed" else "response.incomplete"
                yield self.event(kind, response=self.response(status, e))
        except Exception as exc:  # noqa: BLE001 - the headers are sent: the failure goes down the stream
            for frame in self.failure(as_api_error(exc)):
                yield frame

    def _has_message(self) -> bool:
        return any(i["type"] == "message" for i in [*self.items, self.open or {"type": ""}])

    def failure(self, e: APIError) -> list[Frame]:
        return [
            self.event("error", code=e.code or e.type, message=e.message, param=e.param),
            self.event("response.failed", response=self.response("failed", error=e)),
        ]

    def error_frame(self, e: APIError) -> Frame:
        """The last frame of a stream that failed outside `frames` (framing's fallback)."""
        return self.failure(e)[-1]

    def _delta(self, e: Delta) -> list[Frame]:
        frames: list[Frame] = []
        if e.reasoning:
            frames += self._open("reasoning")
            frames.append(self._piece("response.reasoning_text.delta", e.reasoning, "text"))
        if e.content:
            frames += self._open("message")
            lps = logprobs(e.logprobs) if self.body.want_logprobs else []
            self.open["_lps"] += lps  # type: ignore[index]
            frames.append(self._piece("response.output_text.delta", e.content, "text", logprobs=lps))
        if e.call is not None and e.name is not None:
            frames += self._close("completed")
            frames.append(self._start(self._call_item(e.id or _id("call_"), e.name, "", "in_progress")))
        if e.call is not None and e.arguments:
            frames.append(self._piece("response.function_call_arguments.delta", e.arguments, "arguments"))
        return frames

    def _piece(self, kind: str, text: str, key: str, **extra: Any) -> Frame:
        item = self.open
        assert item is not None
        item["_text"] += text
        part = {} if key == "arguments" else {"content_index": 0}
        return self.event(kind, item_id=item["id"], output_index=item["_index"], **part, delta=text, **extra)

    def _open(self, kind: str) -> list[Frame]:
        """Open an item of `kind` (reasoning or message) unless one is open."""
        if self.open is not None and self.open["type"] == kind:
            return []
        frames = self._close("completed")
        if kind == "reasoning":
            item, part = reasoning_item(_id("rs_"), "", "in_progress"), {"type": "reasoning_text", "text": ""}
        else:
            item, part = message_item(_id("msg_"), "", "in_progress", []), _text_part("", [])
        frames.append(self._start(item))
        frames.append(self.event("response.content_part.added", item_id=item["id"], output_index=item["_index"],
                                 content_index=0, part=part))  # fmt: skip
        return frames

    def _start(self, item: dict) -> Frame:
        public = {k: v for k, v in item.items() if not k.startswith("_")}
        item.update(_index=len(self.items), _text="", _lps=[])
        self.open = item
        return self.event("response.output_item.added", output_index=item["_index"], item=public)

    def _close(self, status: str, tail: Sequence[TokenLogprob] = ()) -> list[Frame]:
        item, self.open = self.open, None
        if item is None:
            return []
        at = {"item_id": item["id"], "output_index": item["_index"]}
        text, index = item["_text"], item["_index"]
        if item["type"] == "function_call" or item["type"] == "custom_tool_call":
            done = self._call_item(item["call_id"], item["_name"], text, "completed", item["id"])
            frames = [self._call_done(done, at)]
        elif item["type"] == "reasoning":
            done = reasoning_item(item["id"], text, "completed")
            part = done["content"][0]
            frames = [self.event("response.reasoning_text.done", **at, content_index=0, text=text),
                      self.event("response.content_part.done", **at, content_index=0, part=part)]  # fmt: skip
        else:
            lps = item["_lps"] + (logprobs(tail) if self.body.want_logprobs else [])
            done = message_item(item["id"], text, status, lps if self.body.want_logprobs else None)
            part = done["content"][0]
            frames = [self.event("response.output_text.done", **at, content_index=0, text=text, logprobs=lps),
                      self.event("response.content_part.done", **at, content_index=0, part=part)]  # fmt: skip
        self.items.append(done)
        frames.append(self.event("response.output_item.done", output_index=index, item=done))
        return frames

    def _call_done(self, done: dict, at: dict) -> Frame:
        if done["type"] == "custom_tool_call":
            return self.event("response.custom_tool_call_input.done", **at, input=done["input"])
        return self.event("response.function_call_arguments.done", **at, name=done["name"],
                          arguments=done["arguments"])  # fmt: skip

    def _call_item(self, call_id: str, flat: str, arguments: str, status: str, item_id: str = "") -> dict:
        """A call as the client declared its tool: a function (with its namespace) or a custom tool."""
        namespace, name = self.tools.split(flat)
        if flat in self.tools.custom:
            text = _custom_input(arguments) if status == "completed" else ""
            item = {"id": item_id or _id("ctc_"), "type": "custom_tool_call", "status": status,
                    "call_id": call_id, "name": name, "input": text}  # fmt: skip
        else:
            item = {"id": item_id or _id("fc_"), "type": "function_call", "status": status,
                    "call_id": call_id, "name": name, "arguments": arguments}  # fmt: skip
        if namespace:
            item["namespace"] = namespace
        if status != "completed":
            item["_name"] = flat
        return item


def _status(f: Finished) -> str:
    return "incomplete" if f.reason == "length" else "completed"


def _custom_input(arguments: str) -> str:
    try:
        value = json.loads(arguments).get("input", "")
    except (ValueError, AttributeError):
        return arguments
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# -- items -----------------------------------------------------------------------------------------------
def _text_part(text: str, lps: list | None) -> dict:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if lps is not None:
        part["logprobs"] = lps
    return part


def message_item(item_id: str, text: str, status: str, lps: list | None) -> dict:
    content = [_text_part(text, lps)] if status != "in_progress" else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str, status: str) -> dict:
    """The model's own reasoning as reasoning_text; no summary is written (none is made here)."""
    content = [{"type": "reasoning_text", "text": text}] if status != "in_progress" else []
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content,
            "encrypted_content": None}  # fmt: skip


def usage(f: Finished) -> dict:
    st = f.response.stats
    return {
        "input_tokens": st.n_prompt_tokens,
        # cached: taken from a cached prefix; written: evaluated now, and kept for the next turn
        "input_tokens_details": {
            "cached_tokens": max(st.n_prompt_tokens - st.n_prefilled, 0),
            "cache_write_tokens": st.n_prefilled,
        },
        "output_tokens": st.n_generated,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": st.n_prompt_tokens + st.n_generated,
    }


def logprobs(lps: Sequence[TokenLogprob]) -> list[dict]:
    """OpenAI's output_text logprobs: each token, its bytes, its likeliest alternatives."""

    def one(b: bytes, lp: float) -> dict:
        return {"token": b.decode("utf-8", "replace"), "logprob": lp, "bytes": list(b)}

    return [{**one(t.bytes, t.logprob), "top_logprobs": [one(b, lp) for _, b, lp in t.top]} for t in lps]


def _echo(body: Any) -> dict:
    """The request's settings as a response object repeats them."""
    fmt = body.text.format if body.text and body.text.format else None
    choice = body.tool_choice
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": body.reasoning.model_dump(exclude_none=True) if body.reasoning else None,
        "store": False,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
        "tool_choice": choice.model_dump(exclude_none=True)
        if hasattr(choice, "model_dump")
        else choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
        "truncation": "disabled",
        "background": False,
        "metadata": {},
    }
