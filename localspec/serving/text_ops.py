"""Tokenizing for a client (llama-server's /tokenize and /detokenize, a dialect's token counts), as the
model facade does it: bounded in what one request may ask, and off the event loop, one at a time
per model. A 7.9 MB body with its pieces froze a whole server for 18.5 s (2M tokens, a 121 MB
answer); 2.6M ids to detokenize froze it 6 s."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence, TypeVar

from localspec.serving import bulk
from localspec.serving.errors import APIError

T = TypeVar("T")
MAX_TEXT = 1 << 20  # characters one request may tokenize (~1 s of a CPU's time)
MAX_TOKENS = 1 << 20  # ids one request may detokenize
MAX_PIECES = 1 << 16  # tokens one request may have spelled out piece by piece
CHARS_PER_TOKEN = 8  # a prompt's characters per token of its context, at most (above MAX_TEXT)
LARGE = 1 << 16  # characters: a prompt this long is rendered and tokenized one at a time
# what a message, call or tool counts for at least: every template wraps each in its markers (4 tokens
# or more, 32 characters at CHARS_PER_TOKEN), so no more items than a context could hold are rendered
ITEM_CHARS = 4 * CHARS_PER_TOKEN


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


def in_turn(size: int, fn: Callable[[], T], *, images: bool = False) -> T:
    """`fn()`, the render or tokenizing of a prompt of `size` characters: past LARGE, or with
    `images` to decode and cut, on the bulk thread (one at a time, in its turns), else here (a
    worker thread). Two 4096² PNGs cost 0.5 s of PNG decoding and 0.25 s of the projector's resize,
    in C beside the decoding: three clients sending them took a neighbour to 0.07 of its speed."""
    return bulk.call(fn) if size > LARGE or images else fn()


def chars_of(req: Any) -> int:
    """The text a chat request or a raw prompt holds, in characters (what its render and tokenizing
    cost grows with): its messages' content, reasoning and calls' arguments, its tools' words, and
    ITEM_CHARS for each message, call and tool (60k empty calls are 120k characters of arguments,
    but seconds of a template's loop: issue 60)."""
    n = len(req.prompt) if isinstance(req.prompt, str) else 0
    for m in req.messages:
        n += len(m.content) + len(m.reasoning) + ITEM_CHARS
        n += sum(len(c.arguments) + len(c.name) + ITEM_CHARS for c in m.tool_calls)
    return n + sum(len(t.description or "") + ITEM_CHARS for t in req.tools)


class Large:
    """No prompt past what the context could hold is rendered or tokenized (`check`, before any of
    it: a 7.8 MB one took 4-5 s of a core; three at once slowed a neighbour's decoding to a
    quarter); an embedding's large inputs are tokenized one at a time (`one`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @staticmethod
    def check(size: int, n_ctx: int, param: str) -> None:
        most = max(MAX_TEXT, n_ctx * CHARS_PER_TOKEN)
        if size > most:
            raise APIError(
                400,
                f"{param}: {size} characters (each message, call and tool counts {ITEM_CHARS} more); "
                f"at most {most} are rendered and tokenized (the context holds {n_ctx} tokens)",
                param=param,
                code="context_length_exceeded",
            )

    @contextlib.contextmanager
    def one(self, size: int) -> Iterator[None]:
        """Held while a prompt of `size` characters is worked on (in a worker thread)."""
        if size <= LARGE:
            yield
            return
        with self._lock:
            yield
