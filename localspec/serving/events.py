"""The one event stream out of a model, whatever the dialect: pieces of each choice's answer - text,
reasoning, or a piece of a tool call (chat/deltas.py's Delta) - with the draft marks and
log-probabilities of the tokens behind them, then each choice's end: its finish reason, the whole
message, and the engine's Response (usage, timings, the speculation Stats). Plain data: a dialect
only formats it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from localspec.chat import deltas
from localspec.engine import Response  # what a finished choice carries; dialects take it from here


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    bytes: bytes  # the token's text as the model writes it (part of a character, maybe)
    logprob: float
    top: tuple[tuple[int, bytes, float], ...] = ()  # the most likely tokens there, best first


@dataclass(frozen=True)
class Delta(deltas.Delta):
    """A piece of choice `choice`'s answer: `content`, `reasoning`, or a piece of tool call `call`
    (its first piece carries `id` and `name`, then `arguments` come in pieces)."""

    choice: int = 0
    from_draft: tuple[bool, ...] = ()  # per token since the last Delta: an accepted draft token
    logprobs: tuple[TokenLogprob, ...] = ()  # those tokens', when the request asked


@dataclass(frozen=True)
class Progress:
    """Choice `choice`'s prompt being evaluated (only for a request that asked, `Request.progress`):
    llama-server's prompt_progress - `processed` of `total` tokens in the cache, `cache` of them
    reused, `time_ms` since it was admitted."""

    choice: int
    total: int
    cache: int
    processed: int
    time_ms: int


@dataclass(frozen=True)
class Finished:
    choice: int
    reason: str  # stop | length | tool_calls
    message: deltas.Message  # the choice's Deltas, assembled
    response: Response  # text, tokens, seed, Stats (usage, timings, speculation)
    logprobs: tuple[TokenLogprob, ...] | None = None  # every token's, when the request asked
    tail_logprobs: tuple[TokenLogprob, ...] = ()  # the last tokens', which no Delta carried
    truncated: bool = False  # a fill-in-the-middle prompt was cut to the context (serving/fim.py)

    @property
    def usage(self) -> "Usage":
        st = self.response.stats
        return Usage(st.n_prompt_tokens, st.n_generated)


Event = Union[Delta, Progress, Finished]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def total_usage(done: Sequence[Finished]) -> Usage:
    """n choices of one prompt: the prompt once (they share it), every choice's tokens."""
    return Usage(done[0].usage.prompt_tokens, sum(d.usage.completion_tokens for d in done))


def finish_reason(resp: Response, calls: bool) -> str:
    if resp.finish_reason != "stop":
        return "length"  # a full context is a length stop too
    return "tool_calls" if calls else "stop"
