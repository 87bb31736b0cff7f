"""llguidance's tokenizer made from a GGUF vocabulary: no Hugging Face tokenizer needed.

llguidance wants the bytes of every token id, which of them are special (prefixed with 0xFF, so a
grammar never spells `<|im_end|>` out of text) and the end-of-generation ids it may allow once the
grammar is satisfied. It also calls back into the model's own tokenizer to turn forced bytes into
the tokens the model would have written (fast-forward tokens must be canonical). Building one walks
the whole vocabulary (~0.1-1 s), so it is done once per model and shared by every request.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

import llguidance

from .errors import ConstraintError

_ATTR_USER_DEFINED = 1 << 4  # llama.h's LLAMA_TOKEN_ATTR_USER_DEFINED
_SPECIAL_MARKER = b"\xff"  # llguidance's TokTrie::SPECIAL_TOKEN_MARKER


class VocabSource(Protocol):
    """What a vocabulary must offer (backend.Model does)."""

    n_vocab: int

    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...

    def token_attr(self, token: int) -> int: ...

    def is_eog(self, token: int) -> bool: ...

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """A model's vocabulary as llguidance sees it; `n_vocab` is the width of the logits masked.
    `grammars` keeps the last grammars compiled for it (compile.py)."""

    tokenizer: llguidance.LLTokenizer
    n_vocab: int
    eog: tuple[int, ...]
    special: frozenset[int]
    grammars: OrderedDict = field(default_factory=OrderedDict, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def special_text(model: VocabSource, token: int, plain: bytes | None = None) -> bytes | None:
    """The text llguidance sees for a special token (b"" for an unused one), None for a text token.

    A token is special when llama.cpp shows it only if asked to render special tokens (control and
    unknown tokens: the detokenizer, which renders without, prints nothing for them); user-defined
    tokens that look like markup (`<start_of_image>`, Qwen's `<tool_call>`) are treated the same, as
    llguidance's own llama.cpp adapter does, so a string field cannot contain one. `plain`: the
    token's bytes rendered without specials, when the caller has them."""
    plain = model.token_bytes(token, special=False) if plain is None else plain
    if not plain:
        return model.token_bytes(token, special=True)
    if plain[:1] == b"<" and plain[-1:] == b">" and model.token_attr(token) & _ATTR_USER_DEFINED:
        return plain
    return None


def token_table(model: VocabSource, n_vocab: int | None = None) -> tuple[list[bytes], frozenset[int]]:
    """Every token's bytes, special ones marked (special_text), padded with empty (never allowed)
    tokens to n_vocab."""
    n_tok = model.n_vocab
    size = max(n_vocab or n_tok, n_tok)
    tokens: list[bytes] = []
    special: set[int] = set()
    for t in range(n_tok):
        plain = model.token_bytes(t, special=False)
        shown = special_text(model, t, plain)
        if shown is None:
            tokens.append(plain)
            continue
        if shown:
            special.add(t)
            shown = _SPECIAL_MARKER + shown
        tokens.append(shown)
    tokens.extend(b"" for _ in range(size - n_tok))
    return tokens, frozenset(special)


class _Tokenize:
    """The model's tokenizer as llguidance calls it (bytes of valid UTF-8 -> ids). It holds the model
    weakly: the cached vocabulary must not keep a closed model alive."""

    def __init__(self, model: VocabSource) -> None:
        self._model = weakref.ref(model)

    def __call__(self, data: bytes | str) -> list[int]:
        model = self._model()
        if model is None:
            raise ConstraintError("the model this constraint was built for is gone")
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return model.tokenize(text, add_special=False, parse_special=False)


class _Wrapped:
    """The duck type llguidance.TokenizerWrapper reads its fields from."""

    def __init__(self, model: VocabSource, tokens: list[bytes], eos: int) -> None:
        self.tokens = tokens
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids: list[int] = []  # already marked in `tokens`
        self._tokenize = _Tokenize(model)

    def __call__(self, data: bytes | str) -> list[int]:
        return self._tokenize(data)


def build_vocabulary(model: VocabSource, n_vocab: int | None = None) -> Vocabulary:
    """A fresh Vocabulary for `model` (see vocabulary_for for the cached one)."""
    tokens, special = token_table(model, n_vocab)
    eog = tuple(t for t in range(model.n_vocab) if model.is_eog(t))
    if not eog:
        raise ConstraintError("the model has no end-of-generation token, so a constraint could never end")
    _check_tokenize(model, tokens)
    wrapper = llguidance.TokenizerWrapper(_Wrapped(model, tokens, eog[0]))
    tok = llguidance.LLTokenizer(wrapper, eos_token=list(eog))
    return Vocabulary(tok, len(tokens), eog, special)


def _check_tokenize(model: VocabSource, tokens: list[bytes]) -> None:
    """llguidance needs tokenize(text) to spell exactly text: a tokenizer that adds a space prefix
    (some SentencePiece vocabularies) would shift every forced token by a byte."""
    ids = model.tokenize("a", add_special=False, parse_special=False)
    got = b"".join(tokens[i] for i in ids)
    if got != b"a":
        raise ConstraintError(f"this vocabulary tokenizes 'a' as {got!r}; constraints need it to round-trip")


_cache: "weakref.WeakKeyDictionary[object, Vocabulary]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def vocabulary_for(model: VocabSource, n_vocab: int | None = None) -> Vocabulary:
    """The model's Vocabulary, built on first use and then shared (it lives as long as the model)."""
    with _lock:  # one build per model even when two requests arrive together
        voc = _cache.get(model)
        if voc is None or voc.n_vocab < (n_vocab or 0):
            voc = build_vocabulary(model, n_vocab)
            _cache[model] = voc
        return voc
