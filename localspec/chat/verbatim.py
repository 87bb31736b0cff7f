"""Message content is text, never markup. A rendered prompt is tokenized with special-token parsing,
so the template's own markers (ChatML's <|im_start|>, <|im_end|>) become their control tokens; the
same text written inside a message or returned by a tool would too, and could forge a system or
assistant turn. llama-server's --jinja path has the same hole (it tokenizes the whole prompt with
parse_special; its `is_input` marking of template inputs is unfinished), Ollama marks the rendered
segments that came from content. Here, before the template sees them, every control token's text
inside the messages, the tools and the template variables is swapped for a mark naming the token
(private-use characters and a nonce of this process); the tokenizer cuts the rendered text at the
marks and spells each one as plain text (`parse_special=False`). The marks are all a template sees
of such text, and `plain` gives back the text as a person reads it."""

from __future__ import annotations

import re
import secrets
import weakref
from typing import Any, Callable, Iterable

_NONCE = secrets.token_hex(6)
_MARK = re.compile(f"\ue000{_NONCE}:(\\d+)\ue001")
_ATTR_CONTROL = 1 << 3  # llama.h's LLAMA_TOKEN_ATTR_CONTROL: tokenized as one only with parse_special
_found: "weakref.WeakKeyDictionary[Any, tuple[re.Pattern | None, dict[str, int]]]" = (
    weakref.WeakKeyDictionary()
)


def _controls(model: Any) -> tuple[re.Pattern | None, dict[str, int]]:
    """The model's control tokens' texts as one pattern (longest first), and each text's id; read
    from the vocabulary once per model."""
    if model not in _found:
        ids = {}
        for t in range(model.n_vocab):
            if model.token_attr(t) & _ATTR_CONTROL and (text := model.token_text(t)):
                ids.setdefault(text, t)
        _found[model] = (re.compile(_trie(ids)) if ids else None, ids)
    return _found[model]


def _trie(words: Iterable[str]) -> str:
    """One pattern matching the longest of `words` at a place, as a trie (a vocabulary may have
    thousands of control tokens, <unused0>...: an alternation of them all would try each one at
    every character)."""
    root: dict = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}  # a word ends here

    def emit(node: dict) -> str:
        ends = "" in node
        alts = [re.escape(ch) + emit(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if ends else body  # greedy: the longer word first

    return emit(root)


def protect(model: Any, value: Any) -> Any:
    """`value` (messages, tools, template variables: dicts, lists, strings) with every control
    token's text in its strings swapped for that token's mark; what holds none is returned as is."""
    pattern, ids = _controls(model)
    if pattern is None:
        return value
    return _walk(value, lambda s: pattern.sub(lambda m: f"\ue000{_NONCE}:{ids[m.group()]}\ue001", s))


def _walk(value: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, dict):
        return {k: _walk(v, fix) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v, fix) for v in value)
    return value  # numbers, booleans, None, an image part's Image


def tokenize(model: Any, text: str, *, add_special: bool) -> list[int]:
    """Rendered chat text's tokens: special tokens parsed, except at the marks, each spelled as text."""
    pieces = _MARK.split(text)  # text, id, text, id, ..., text
    ids = model.tokenize(pieces[0], add_special=add_special, parse_special=True)
    for i in range(1, len(pieces), 2):
        ids += model.tokenize(model.token_text(int(pieces[i])), add_special=False, parse_special=False)
        if pieces[i + 1]:
            ids += model.tokenize(pieces[i + 1], add_special=False, parse_special=True)
    return ids


def plain(model: Any, text: str) -> str:
    """`text` with each mark back as the token's text (what a person, a parser or /apply-template
    reads)."""
    return _MARK.sub(lambda m: model.token_text(int(m.group(1))), text) if "\ue000" in text else text
