"""A model facade with no model (serving.facade.Model): replies are queued as events, every request
it was sent is kept, and its tokenizer is the text's UTF-8 bytes. A dialect's unit tests mount it
with `create_app(settings, model=fake)` and drive the dialect's routes through Starlette's
TestClient - parse, render, framing, errors - in tests/unit, with no engine and no thread."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from localspec.chat.deltas import assemble
from localspec.config.settings import Settings
from localspec.decode.stats import Counters, Stats
from localspec.engine import Response
from localspec.serving import (
    APIError,
    Delta,
    Embedded,
    Event,
    Finished,
    ModelCard,
    Prompt,
    Request,
    TokenLogprob,
    text_ops,
)
from localspec.serving.request import settings_for
from localspec.serving.totals import Counting


def answer(
    text: str = "",
    *,
    reasoning: str = "",
    calls: Sequence[tuple[str, str]] = (),
    choice: int = 0,
    finish: str = "stop",
    pieces: int = 2,
    prompt_tokens: int = 7,
    logprobs: bool = False,
    drafted: tuple[int, int] = (6, 4),
    stop_string: str | None = None,
) -> list[Event]:
    """One choice's events: its reasoning, its text in `pieces` pieces, its tool calls (name,
    arguments JSON) - each call's id and name first, then its arguments in two pieces - and its end.
    `finish`: the engine's reason (stop, length); `drafted`: (drafted, accepted) for the stats;
    `stop_string`: the stop string that ended it."""
    tokens = list(text.encode())
    lps = [TokenLogprob(t, bytes([t]), -0.25, ((t, bytes([t]), -0.25),)) for t in tokens] if logprobs else []
    events: list[Event] = [Delta(reasoning=reasoning, choice=choice)] if reasoning else []
    size = -(-len(text) // pieces) if text else 0
    at = 0
    for k in range(0, len(text), size or 1):
        piece = text[k : k + size]
        n = len(piece.encode())
        events.append(Delta(piece, choice=choice, from_draft=(True,) * n, logprobs=tuple(lps[at : at + n])))
        at += n
    for i, (name, args) in enumerate(calls):
        half = len(args) // 2
        events.append(Delta(call=i, id=f"call_{choice}_{i}", name=name, choice=choice))
        events += [
            Delta(call=i, arguments=part, choice=choice) for part in (args[:half], args[half:]) if part
        ]
    message = assemble([e for e in events if isinstance(e, Delta)])
    reason = "length" if finish != "stop" else ("tool_calls" if calls else "stop")
    resp = Response(
        text, tokens, finish, _stats(prompt_tokens, len(tokens), drafted), list(range(prompt_tokens)), seed=1234,
        logprobs=[(lp.logprob, ()) for lp in lps] if logprobs else None, stop_string=stop_string,
    )  # fmt: skip
    events.append(Finished(choice, reason, message, resp, logprobs=tuple(lps) if logprobs else None))
    return events


def _stats(n_prompt: int, n_generated: int, drafted: tuple[int, int]) -> Stats:
    c = Counters(rounds=2, n_drafted=drafted[0], n_accepted=drafted[1], n_prefilled=n_prompt)
    c.drafted_by_pos, c.accepted_by_pos, c.k_history = [2, 2, 2], [2, 1, 1], [3, 3]
    return Stats.build(
        c, speculative=True, n_prompt=n_prompt, n_generated=n_generated, decode_s=0.1, total_s=0.2
    )


@dataclass(frozen=True)
class Pause:
    """Queued among a reply's events: the stream says nothing for `seconds` (a long prefill)."""

    seconds: float


class FakeStream:
    def __init__(self, events: list[Any]) -> None:
        self.events, self.cancelled = events, False

    async def _events(self) -> AsyncIterator[Event]:
        for e in self.events:
            await asyncio.sleep(e.seconds if isinstance(e, Pause) else 0)
            if isinstance(e, BaseException):
                raise e
            if not isinstance(e, Pause):
                yield e

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def finished(self, is_disconnected: Callable[[], Awaitable[bool]]) -> list[Finished]:
        return sorted([e async for e in self if isinstance(e, Finished)], key=lambda e: e.choice)

    def cancel(self) -> None:
        self.cancelled = True


class FakeModel:
    def __init__(
        self, name: str = "fake", *, n_ctx: int = 4096, parallel: int = 4, embed_ctx: int = 16
    ) -> None:
        self.name = name
        self.card = ModelCard(
            name=name, created=1_700_000_000, n_ctx=n_ctx, n_ctx_train=8192, n_vocab=256, n_params=1000,
            size=2000, target=f"{name}.gguf", draft="draft.gguf", parallel=parallel, chat_template=None, n_embd=4,
        )  # fmt: skip
        self.requests: list[Request] = []  # every request submitted, as its dialect parsed it
        self.settings: list[Settings] = []  # and the settings it asked for
        self.streams: list[FakeStream] = []
        self.embed_ctx = embed_ctx
        self.embedded: list[tuple[list, bool]] = []  # every embed call: its inputs and truncate
        self.totals = Counting()
        self._replies: deque[list[Any] | BaseException] = deque()

    def queue(self, *events: Any) -> None:
        """The next request's events (or an exception among them, raised where it stands)."""
        self._replies.append(list(events))

    def refuse(self, error: APIError) -> None:
        """The next request is refused at submit (before any header is sent)."""
        self._replies.append(error)

    def load(self) -> tuple[int, int]:
        return 0, 0

    async def wind_down(self, grace: float) -> None:  # nothing runs between its queued events
        pass

    async def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[int]:
        text_ops.check_text(text)
        return list(text.encode())

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        text_ops.check_tokens(tokens, text_ops.MAX_PIECES, "spelled out piece by piece")
        self._check_ids(tokens)
        return [bytes([t]) for t in tokens]

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return bytes([token])

    async def detokenize(self, tokens: Sequence[int]) -> str:
        text_ops.check_tokens(tokens)
        self._check_ids(tokens)
        return bytes(tokens).decode("utf-8", "replace")

    @staticmethod
    def _check_ids(tokens: Sequence[int]) -> None:
        bad = next((t for t in tokens if not 0 <= t < 256), None)
        if bad is not None:
            raise APIError(400, f"token {bad} is not in the vocabulary (0..255)", param="tokens")

    async def render(self, req: Request) -> Prompt:
        text = "".join(f"<{m.role}>{m.content}\n" for m in req.messages) + "<assistant>"
        return Prompt(text, list(text.encode()))

    async def submit(self, req: Request) -> FakeStream:
        self.requests.append(req)
        self.settings.append(settings_for(Settings(), req))  # the real check of every field
        reply = self._replies.popleft() if self._replies else answer("ok")
        if isinstance(reply, BaseException):
            raise reply
        self.streams.append(FakeStream(reply))
        return self.streams[-1]

    async def embed(
        self, inputs: Sequence[str | Sequence[int]], *, truncate: bool = False, is_disconnected: Any = None
    ) -> Embedded:
        """A text's tokens are its UTF-8 bytes, cut or refused past `embed_ctx` as the real model
        does; its vector counts its tokens by value mod 4, scaled to unit length."""
        self.embedded.append((list(inputs), truncate))
        vectors, counts = [], []
        for i, x in enumerate(inputs):
            ids = (await self.tokenize(x)) if isinstance(x, str) else list(x)
            if not ids:
                raise APIError(400, f"input {i} is empty: there is nothing to embed", param="input")
            if len(ids) > self.embed_ctx and not truncate:
                raise APIError(
                    400, f"input {i} is {len(ids)} tokens; the embeddings context takes {self.embed_ctx}",
                    param="input", code="context_length_exceeded",
                )  # fmt: skip
            ids = ids[: self.embed_ctx]
            v = [float(sum(1 for t in ids if t % 4 == k)) for k in range(4)]
            norm = sum(a * a for a in v) ** 0.5
            vectors.append([a / norm for a in v])
            counts.append(len(ids))
        return Embedded(vectors, counts)
