"""What routes and dialects know of a model: this protocol and nothing else (never localspec.llama,
never the Engine). `LocalModel` (local.py) is the in-process engine behind it; tests/fake_engine.py's
FakeModel is one with queued events and no model; the router (#49) keeps one per model, by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Protocol, Sequence

from localspec.serving.events import Event, Finished
from localspec.serving.request import Request
from localspec.serving.totals import Counting


@dataclass(frozen=True)
class ModelCard:
    """The facts /v1/models (and Ollama's /api/show) report."""

    name: str
    created: int  # when it was loaded (Unix seconds)
    n_ctx: int  # the context one request may use (one slot's)
    n_ctx_train: int
    n_vocab: int
    n_params: int
    size: int  # bytes of the target's weights
    target: str  # the target GGUF's file name
    draft: str | None  # the draft GGUF's file name, "mtp" (the target's own head), or None
    parallel: int  # requests decoded at once
    chat_template: str | None
    n_embd: int = 0  # the width of its hidden state: what an embedding of it holds
    arch: str = ""  # the target's architecture (general.architecture)
    quantization: str = ""  # the target's file type (Q4_0, Q8_0, F16, ...)
    embeds_only: bool = False  # an embedding model: embeddings, no generation (n_ctx: its --embed-ctx)
    vision: bool = False  # a vision projector is loaded (--mmproj): prompts may hold images
    fim: bool = False  # its vocabulary has fill-in-the-middle tokens (prefix, suffix, middle)

    @property
    def capabilities(self) -> list[str]:
        """What it does, in Ollama's words (/api/show: Copilot's BYOK and Zed read them; /v1/models
        too). `embedding` only for an embedding model, as Ollama says it: clients take it to mean a
        model that does nothing else (a chat model here answers /v1/embeddings too, with --embed-ctx)."""
        if self.embeds_only:
            return ["embedding"]
        template = self.chat_template or ""
        optional = [("insert", self.fim), ("vision", self.vision), ("thinking", "think" in template)]
        return ["completion", "tools"] + [name for name, has in optional if has]


@dataclass(frozen=True)
class Embedded:
    """Embeddings of a request's inputs: unit-length vectors, and each input's tokens as embedded."""

    vectors: list[list[float]]
    n_tokens: list[int]

    @property
    def total_tokens(self) -> int:
        return sum(self.n_tokens)


@dataclass(frozen=True)
class Prompt:
    """A chat request as the model reads it: its template's text, and its tokens."""

    text: str
    ids: list[int]


class Stream(Protocol):
    """One request's events (events.py), every choice's interleaved. Leaving the iteration early
    cancels the generation; `finished` runs it to the end."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    async def finished(self, is_disconnected: Callable[[], Awaitable[bool]]) -> list[Finished]: ...

    def cancel(self) -> None: ...


class Model(Protocol):
    name: str
    card: ModelCard
    totals: Counting  # what its finished requests did, for /metrics

    def load(self) -> tuple[int, int]:
        """(running, waiting): requests in a slot and requests queued for one."""
        ...

    # a client's text work: bounded (text_ops.py: a 400 past the bounds) and off the event loop
    async def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[int]: ...

    async def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes (special tokens as their text); 400 for an id outside the vocabulary."""
        ...

    async def detokenize(self, tokens: Sequence[int]) -> str:
        """Raises APIError 400 for an id outside the vocabulary."""
        ...

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """One token's bytes (what a stream spells its chunks with)."""
        ...

    async def render(self, req: Request) -> Prompt:
        """The chat template applied to a chat request (nothing is generated); admitted as a
        request is (a 503 past slots + queue)."""
        ...

    async def wind_down(self, grace: float) -> None:
        """The server is shutting down: requests in flight get `grace` seconds to finish, then the
        rest are cancelled (each answered: a 503, a stream's error frame)."""
        ...

    async def submit(self, req: Request) -> Stream:
        """Admit and start a request; bad input raises APIError here, before anything streams."""
        ...

    async def embed(
        self,
        inputs: Sequence[str | Sequence[int]],
        *,
        truncate: bool = False,
        is_disconnected: Callable[[], Awaitable[bool]] | None = None,
    ) -> Embedded:
        """Embeddings of texts or token-id lists; an input longer than the model's embeddings context
        is cut to it when `truncate`, else refused (APIError 400, param "input"). Admitted as a
        request is; stops at its next pass once `is_disconnected()` says the client left."""
        ...
