"""What a GGUF says of its embeddings, from its header alone: how its hidden states are pooled
(`{arch}.pooling_type`, llama.h's enum) and whether it is an embedding model - made to be pooled
(its converter wrote mean, cls or last) or reading both ways (`{arch}.attention.causal` false, as
BERTs do) - which is served for embeddings only: it has no language-model head to generate with.
A chat model's GGUF says none, or nothing, and is causal."""

from __future__ import annotations

from pathlib import Path

from localspec.gguf.file import GGUFHeader, read_header

POOLING = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}  # llama.h's llama_pooling_type


def declared_pooling(raw: object) -> str:
    """The pooling a `{arch}.pooling_type` value names (none for an absent or unknown one)."""
    if isinstance(raw, str):
        raw = int(raw) if raw.strip().isdigit() else None
    return POOLING.get(raw, "none") if isinstance(raw, int) and not isinstance(raw, bool) else "none"


def is_embedding_model(model: GGUFHeader | str | Path) -> bool:
    h = model if isinstance(model, GGUFHeader) else read_header(model)
    return (
        declared_pooling(h.get("{arch}.pooling_type")) != "none" or h.get("{arch}.attention.causal") is False
    )
