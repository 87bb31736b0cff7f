"""One choice's chunks -> its events: the place the engine's output becomes a dialect-free answer.
Chat text goes through the request's parser (content, reasoning, tool calls); a raw prompt's text
is content as it comes. A chunk's draft marks and log-probabilities are held until a Delta carries
them (a parser may hold text back); the last ones ride on the Finished event."""

from __future__ import annotations

from typing import Any, Callable

from localspec.chat.deltas import Delta as Part
from localspec.chat.deltas import assemble, merge
from localspec.engine import Chunk, Response
from localspec.serving.events import Delta, Event, Finished, TokenLogprob, finish_reason


class Answer:
    def __init__(
        self, choice: int, parser: Any | None, token_bytes: Callable[[int], bytes], *, truncated: bool = False
    ) -> None:
        """`parser`: feed(text) / finish() -> chat Deltas, or None for a raw prompt's completion;
        `truncated`: its prompt was cut to the context (a fill-in-the-middle request's)."""
        self.choice, self.parser, self.token_bytes = choice, parser, token_bytes
        self.truncated = truncated
        self.parts: list[Part] = []
        self.logprobs: list[TokenLogprob] = []
        self._held: list[bool] = []
        self._held_lp: list[TokenLogprob] = []

    def feed(self, chunk: Chunk) -> list[Event]:
        self._held += chunk.from_draft
        if chunk.logprobs:
            lps = self._resolve(chunk.logprobs, chunk.tokens)
            self._held_lp += lps
            self.logprobs += lps
        if not chunk.text:
            return []
        if self.parser is None:
            return self._out([Part(content=chunk.text)])
        return self._out(merge(self.parser.feed(chunk.text)))

    def finish(self, resp: Response) -> list[Event]:
        events = self._out(merge(self.parser.finish())) if self.parser is not None else []
        message = assemble(self.parts)
        reason = finish_reason(resp, bool(message.tool_calls))
        every = tuple(self.logprobs) if resp.logprobs is not None else None
        events.append(
            Finished(self.choice, reason, message, resp, every, tuple(self._held_lp), self.truncated)
        )
        return events

    def _out(self, parts: list[Part]) -> list[Event]:
        """Events for new parts; the held marks and logprobs go on the first."""
        events: list[Event] = []
        for part in parts:
            self.parts.append(part)
            held = {"from_draft": tuple(self._held), "logprobs": tuple(self._held_lp)}
            events.append(Delta(**vars(part), choice=self.choice, **held))
            self._held, self._held_lp = [], []
        return events

    def _resolve(self, entries: list, tokens: list[int]) -> list[TokenLogprob]:
        """The engine's (logprob, ((token, logprob), ...)) per token, with each token's text."""
        tb = self.token_bytes
        return [
            TokenLogprob(t, tb(t), lp, tuple((a, tb(a), alp) for a, alp in alts))
            for t, (lp, alts) in zip(tokens, entries)
        ]
