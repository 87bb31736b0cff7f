"""What a GGUF header says of pooling: the enum's values as the reader gives them (ints, or text
from llama.cpp's metadata), and which models are served for embeddings only."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.gguf.file import GGUFHeader
from localspec.gguf.pooling import declared_pooling, is_embedding_model


@pytest.mark.parametrize(
    ("raw", "kind"),
    [(1, "mean"), ("2", "cls"), (3, "last"), (4, "rank"), (0, "none"), (None, "none"), (9, "none"),
     ("x", "none"), (True, "none")],
)  # fmt: skip
def test_declared_pooling(raw, kind):
    assert declared_pooling(raw) == kind


def header(arch: str, **meta: object) -> GGUFHeader:
    md = {"general.architecture": arch} | {f"{arch}.{k.replace('__', '.')}": v for k, v in meta.items()}
    return GGUFHeader(Path("m.gguf"), 3, md, [], 0, 0)


def test_which_models_only_embed():
    assert is_embedding_model(header("nomic-bert", pooling_type=1, attention__causal=False))
    assert is_embedding_model(header("qwen3", pooling_type=3))  # a decoder converted for embeddings
    assert is_embedding_model(header("bert", attention__causal=False))  # no pooling key: still a BERT
    assert not is_embedding_model(header("llama"))  # a chat model: no key at all
    assert not is_embedding_model(header("llama", pooling_type=0, attention__causal=True))
