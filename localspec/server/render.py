"""Engine results -> OpenAI objects. Stats are data; this is where the server formats them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from pydantic import BaseModel

from localspec.chat.deltas import Delta as ChatDelta
from localspec.chat.deltas import Message
from localspec.engine import Response
from localspec.server import schemas as s

# extras we leave out of a chunk when they are empty; OpenAI's own keys are always sent (null included)
_OPTIONAL_EXTRAS = ("usage", "timings", "localspec")


def finish_reason(resp: Response, calls: bool = False) -> str:
    if resp.finish_reason != "stop":
        return "length"  # a full context is a length stop too
    return "tool_calls" if calls else "stop"


def usage(resp: Response) -> s.Usage:
    n_prompt, n_gen = resp.stats.n_prompt_tokens, resp.stats.n_generated
    return s.Usage(prompt_tokens=n_prompt, completion_tokens=n_gen, total_tokens=n_prompt + n_gen)


def timings(resp: Response) -> s.Timings:
    st = resp.stats
    prompt_s = st.prefill_ms / 1e3
    return s.Timings(
        prompt_n=st.n_prompt_tokens,
        prompt_ms=st.prefill_ms,
        prompt_per_token_ms=st.prefill_ms / st.n_prompt_tokens if st.n_prompt_tokens else 0.0,
        prompt_per_second=st.n_prompt_tokens / prompt_s if prompt_s > 0 else 0.0,
        predicted_n=st.n_generated,
        predicted_ms=st.decode_ms,
        predicted_per_token_ms=1e3 / st.decode_tok_s if st.decode_tok_s else 0.0,
        predicted_per_second=st.decode_tok_s,
        draft_n=st.n_drafted,
        draft_n_accepted=st.n_accepted,
        speculative=st.speculative,
        acceptance_rate=st.acceptance_rate,
        mean_accepted_len=st.mean_accepted_len,
        tokens_per_round=st.tokens_per_round,
        acceptance_by_pos=st.acceptance_by_pos,
        k_history=st.k_history,
        fell_back=st.fell_back,
        seed=resp.seed,
        draft_sources={
            k: {"drafted": v["drafted"], "accepted": v["accepted"]} for k, v in st.sources.items()
        },
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


def chat_logprobs(entries: list, tokens: list[int], token_bytes: Callable[[int], bytes]) -> s.ChoiceLogprobs:
    """OpenAI's chat logprobs for emitted tokens: entries are (logprob, ((token, logprob), ...))."""

    def top(t: int, lp: float) -> s.TopLogprob:
        b = token_bytes(t)
        return s.TopLogprob(token=b.decode("utf-8", "replace"), logprob=lp, bytes=list(b))

    content = []
    for t, (lp, alts) in zip(tokens, entries):
        head = top(t, lp)
        content.append(s.TokenLogprob(**head.model_dump(), top_logprobs=[top(a, alp) for a, alp in alts]))
    return s.ChoiceLogprobs(content=content)


def completion_logprobs(
    entries: list, tokens: list[int], token_bytes: Callable[[int], bytes], offset: int = 0
) -> s.CompletionLogprobs:
    """The legacy completions shape: token texts, their logprobs, {text: logprob} alternatives."""
    texts, offsets = [], []
    for t in tokens:
        texts.append(token_bytes(t).decode("utf-8", "replace"))
        offsets.append(offset)
        offset += len(texts[-1])
    tops = [{token_bytes(a).decode("utf-8", "replace"): alp for a, alp in alts} for _, alts in entries]
    return s.CompletionLogprobs(
        tokens=texts, token_logprobs=[lp for lp, _ in entries], top_logprobs=tops, text_offset=offsets
    )


def tool_calls_out(msg: Message) -> list[s.ToolCallOut] | None:
    if not msg.tool_calls:
        return None
    return [
        s.ToolCallOut(id=c.id, function=s.FunctionOut(name=c.name, arguments=c.arguments))
        for c in msg.tool_calls
    ]


def delta_out(d: ChatDelta, role: bool = False) -> s.Delta:
    """A parser's delta as OpenAI's: content, reasoning_content, or one piece of one tool call."""
    calls = None
    if d.call is not None:
        fn = s.FunctionDelta(name=d.name, arguments=d.arguments if (d.arguments or d.name is None) else "")
        calls = [s.ToolCallDelta(index=d.call, id=d.id, type="function" if d.name else None, function=fn)]
    return s.Delta(
        role="assistant" if role else None,
        content=d.content or None,
        reasoning_content=d.reasoning or None,
        tool_calls=calls,
    )


@dataclass
class Reply:
    """The identity every object of one response shares (id, created, model)."""

    model: str
    chat: bool
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    token_bytes: Callable[[int], bytes] | None = None  # for logprobs: the target's token text

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]

    # -- whole responses ---------------------------------------------------------------------------
    def full(self, resps: list[Response], messages: list[Message | None] | None = None) -> BaseModel:
        """One response object for n choices: each engine response with, for chat, its parsed message."""
        total = _summed(resps)
        if self.chat:
            choices = []
            for i, (resp, msg) in enumerate(zip(resps, messages or [None] * len(resps))):
                msg = msg or Message(content=resp.text)
                message = s.ChatMessage(
                    content=msg.content if (msg.content or not msg.tool_calls) else None,
                    reasoning_content=msg.reasoning or None,
                    tool_calls=tool_calls_out(msg),
                )
                lp = (
                    chat_logprobs(resp.logprobs, resp.tokens, self.token_bytes)
                    if resp.logprobs is not None
                    else None
                )
                choices.append(
                    s.ChatChoice(
                        index=i,
                        message=message,
                        logprobs=lp,
                        finish_reason=finish_reason(resp, bool(msg.tool_calls)),
                    )
                )
            return s.ChatCompletion(
                id=self.id, created=self.created, model=self.model, choices=choices,
                usage=total, timings=timings(resps[0]),
            )  # fmt: skip
        choices = [
            s.CompletionChoice(
                index=i,
                text=resp.text,
                finish_reason=finish_reason(resp),
                logprobs=completion_logprobs(resp.logprobs, resp.tokens, self.token_bytes)
                if resp.logprobs is not None
                else None,
            )  # fmt: skip
            for i, resp in enumerate(resps)
        ]
        return s.Completion(
            id=self.id, created=self.created, model=self.model, choices=choices,
            usage=total, timings=timings(resps[0]),
        )  # fmt: skip

    # -- stream pieces -------------------------------------------------------------------------------
    def piece(
        self,
        text: str | None = None,
        *,
        delta: s.Delta | None = None,
        index: int = 0,
        role: bool = False,
        finish: str | None = None,
        draft_marks: s.DraftMarks | None = None,
        resp: Response | None = None,
        logprobs: tuple[list, list[int]] | None = None,
    ) -> BaseModel:
        """One streamed object: text or a chat delta, the opening role, or the closing finish_reason
        with timings; `logprobs`: (entries, tokens) of the tokens this piece carries."""
        tim = timings(resp) if resp is not None else None
        if self.chat:
            if delta is None:
                delta = s.Delta(role="assistant" if role else None, content=text)
            lp = chat_logprobs(logprobs[0], logprobs[1], self.token_bytes) if logprobs else None
            return s.ChatCompletionChunk(
                id=self.id, created=self.created, model=self.model,
                choices=[s.ChunkChoice(index=index, delta=delta, logprobs=lp, finish_reason=finish)],
                timings=tim, localspec=draft_marks,
            )  # fmt: skip
        lp = completion_logprobs(logprobs[0], logprobs[1], self.token_bytes) if logprobs else None
        return s.Completion(
            id=self.id, created=self.created, model=self.model,
            choices=[s.CompletionChoice(index=index, text=text or "", finish_reason=finish, logprobs=lp)],
            timings=tim, localspec=draft_marks,
        )  # fmt: skip

    def usage_piece(self, resps: list[Response]) -> BaseModel:
        """The extra last chunk of stream_options.include_usage: empty choices, the usage."""
        cls = s.ChatCompletionChunk if self.chat else s.Completion
        return cls(id=self.id, created=self.created, model=self.model, choices=[], usage=_summed(resps))


def _summed(resps: list[Response]) -> s.Usage:
    """Usage of n choices: the prompt once (it is shared), every choice's tokens."""
    n_prompt = resps[0].stats.n_prompt_tokens
    n_gen = sum(r.stats.n_generated for r in resps)
    return s.Usage(prompt_tokens=n_prompt, completion_tokens=n_gen, total_tokens=n_prompt + n_gen)
