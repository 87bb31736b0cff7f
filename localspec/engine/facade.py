"""What the floor above the engine (localspec/serving) may know of the loaded model: its text
(`TextModel`: tokenize, spell, render, the template and FIM tokens) and its facts (`ModelFacts`,
what a card reports). Serving reaches the model only through these (tests/unit/test_layers.py):
llama.cpp's wrappers stay below, for the engine, the CLI and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from localspec import llama


class TextModel(Protocol):
    """The model's text API (llama.Model has it): what serving tokenizes, spells and renders with."""

    @property
    def n_vocab(self) -> int: ...

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]: ...

    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...

    def token_text(self, token: int) -> str: ...

    def token_attr(self, token: int) -> int: ...

    def is_eog(self, token: int) -> bool: ...

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str: ...

    def chat_template(self) -> str | None: ...

    def fim_tokens(self) -> dict[str, int | None]: ...


@dataclass(frozen=True)
class ModelFacts:
    """The loaded target's facts, as a model card reports them (serving/facade.py ModelCard)."""

    n_ctx: int  # the context one request may use (one slot's; an embedding model's --embed-ctx)
    n_ctx_train: int
    n_vocab: int
    n_params: int
    size: int  # bytes of its weights
    n_embd: int
    arch: str  # general.architecture
    file_type: str | None  # general.file_type, as the header has it
    chat_template: str | None
    bos: int | None  # the BOS its vocabulary puts first, None where it adds none
    embeds_only: bool
    vision: bool  # a projector is loaded: prompts may hold images
    fim: bool  # its vocabulary has the prefix, suffix and middle tokens


def facts_of(target: llama.Model, n_ctx: int, *, embeds_only: bool, vision: bool) -> ModelFacts:
    vocab = target.vocab
    return ModelFacts(
        n_ctx=n_ctx, n_ctx_train=target.n_ctx_train, n_vocab=target.n_vocab, n_params=target.n_params,
        size=target.size_bytes, n_embd=target.n_embd, arch=target.meta("general.architecture") or "",
        file_type=target.meta("general.file_type"), chat_template=target.chat_template(),
        bos=vocab.bos if vocab.add_bos else None, embeds_only=embeds_only, vision=vision,
        fim=has_fim(target),
    )  # fmt: skip


def has_fim(target: TextModel) -> bool:
    """Its vocabulary has the prefix, suffix and middle tokens (llama.cpp finds them by their text
    where the GGUF names none)."""
    fim = target.fim_tokens()
    return all(fim[k] is not None for k in ("pre", "suf", "mid"))


def devices() -> list[tuple[str, str, int, int]]:
    """(name, kind, free bytes, total bytes) of each device llama.cpp sees, as it sees them now."""
    return [(d.name, d.kind, d.free_bytes, d.total_bytes) for d in llama.devices()]
