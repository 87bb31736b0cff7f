"""Tokenizing for a client (llama-server's /tokenize and /detokenize, a dialect's token counts), as the
model facade does it: bounded in what one request may ask, and off the event loop, one at a time
per model. A 7.9 MB body with its pieces froze a whole server for 18.5 s (2M tokens, a 121 MB
answer); 2.6M ids to detokenize froze it 6 s."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import anyio

from localspec.serving.errors import APIError

T = TypeVar("T")
MAX_TEXT = 1 << 20  # characters one request may tokenize (~1 s of a CPU's time)
MAX_TOKENS = 1 << 20  # ids one request may detokenize
MAX_PIECES = 1 << 16  # tokens one request may have spelled out piece by piece


def check_text(text: str) -> None:
    if len(text) > MAX_TEXT:
        raise APIError(
            400,
            f"the text is {len(text)} characters; at most {MAX_TEXT} are tokenized at once",
            param="content",
        )


def check_tokens(tokens: Sequence[int], most: int = MAX_TOKENS, what: str = "detokenized") -> None:
    if len(tokens) > most:
        raise APIError(400, f"{len(tokens)} tokens; at most {most} are {what} at once", param="tokens")


class OffLoop:
    """Text work in a worker thread, one at a time (more at once would take the engine's cores)."""

    def __init__(self) -> None:
        self._one = anyio.CapacityLimiter(1)

    async def run(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn, limiter=self._one)
