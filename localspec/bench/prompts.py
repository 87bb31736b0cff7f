"""The benchmark's prompt set, fitted to an exact token length.

Every prompt becomes exactly N target tokens, so prefill cost and attention length are the same for
every prompt and configuration. Short texts are padded by repeating themselves; long ones are cut
(continuation prompts then end mid-sentence, which is what "continue this document" looks like).
Chat prompts are wrapped in the target's chat template, with only the user's text cut or padded.
Copy prompts (text the answer should copy from) end with the cue to copy, so they keep their end:
cut from the front, padded with blank lines before the text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from localspec.chat import template as chat
from localspec.errors import LocalspecError

if TYPE_CHECKING:
    from localspec.llama import VocabFacts

# json: each answer follows its schema. completion, edit and summary came after the set's own gaps
# closed: a document continued in its own pattern, a text returned with edits, a summary of a text
# (the lookup finds the prompt's n-grams everywhere, and the answer continues few of them).
KINDS = ("chat", "chinese", "code", "long", "copy", "json", "completion", "edit", "summary")
_SENTINEL = "\u0000LOCALSPEC-BENCH\u0000"


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    kind: str
    text: str
    chat: bool = False
    schema: str | None = None  # the JSON schema the answer must follow (JSON text)


@dataclass(frozen=True)
class FittedPrompt:
    id: str
    kind: str
    tokens: tuple[int, ...]
    schema: str | None = None


class Tokenizer(Protocol):  # what backend.Model offers
    vocab: VocabFacts

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]: ...

    def token_text(self, token: int) -> str: ...

    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...

    def chat_template(self) -> str | None: ...


def load_prompts(path: Path | None = None) -> list[BenchPrompt]:
    """The bundled prompt set, or a JSONL file of {"id", "kind", "text", "chat"?} objects."""
    if path is None:
        raw = resources.files("localspec").joinpath("data/bench_prompts.jsonl").read_text("utf-8")
        where = "bundled bench_prompts.jsonl"
    else:
        if not Path(path).exists():
            raise LocalspecError(f"prompt file not found: {path}")
        raw, where = Path(path).read_text("utf-8"), str(path)
    prompts = []
    for i, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            prompts.append(
                BenchPrompt(
                    id=str(d.get("id", f"p{i}")),
                    kind=str(d.get("kind", "text")),
                    text=str(d["text"]),
                    chat=bool(d.get("chat", False)),
                    schema=json.dumps(d["schema"]) if d.get("schema") is not None else None,
                )
            )
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise LocalspecError(
                f"{where} line {i}: expected a JSON object with a 'text' field ({e})"
            ) from None
    if not prompts:
        raise LocalspecError(f"{where} holds no prompts")
    return prompts


def select(
    prompts: Sequence[BenchPrompt], per_kind: int | None, kinds: Sequence[str] | None = None
) -> list[BenchPrompt]:
    """The first `per_kind` prompts of each kind (all when None) of the `kinds` asked for (all when
    None), in file order."""
    if kinds is not None:
        missing = sorted(set(kinds) - {p.kind for p in prompts})
        if missing:
            raise LocalspecError(f"no prompts of kind {', '.join(missing)} in the prompt set")
        prompts = [p for p in prompts if p.kind in kinds]
    if per_kind is None:
        return list(prompts)
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        if seen.get(p.kind, 0) < per_kind:
            out.append(p)
            seen[p.kind] = seen.get(p.kind, 0) + 1
    return out


def fit(body: Sequence[int], n: int, separator: Sequence[int] = ()) -> list[int]:
    """`body` cut to n tokens, or repeated (joined by `separator`) until it reaches n."""
    if n <= 0:
        return []
    if not body:
        raise LocalspecError("cannot pad an empty prompt")
    out = list(body)
    while len(out) < n:
        out += list(separator) + list(body)
    return out[:n]


def fit_end(body: Sequence[int], n: int, pad: Sequence[int]) -> list[int]:
    """`body`'s last n tokens, or `body` after as many `pad` tokens as it lacks (the end is kept)."""
    return list(pad) * max(n - len(body), 0) + list(body[-n:] if n > 0 else [])


def _whole_characters(model: Tokenizer, tokens: list[int], n: int) -> list[int]:
    """The first n tokens, but never ending inside a character: byte-level BPE splits CJK and emoji
    into several tokens, and a prompt cut through one is broken text (a peer that re-tokenizes it
    sees U+FFFD and may loop on garbage). The cut moves back to a boundary; newlines fill the rest."""
    pieces = [model.token_bytes(t) for t in tokens[:n]]
    cut = n
    while cut > 0:
        try:
            b"".join(pieces[:cut]).decode("utf-8")
            break
        except UnicodeDecodeError:
            cut -= 1
    if cut == 0:  # no boundary at all (binary-ish text): keep the plain cut
        return tokens[:n]
    newline = model.tokenize("\n", add_special=False)[:1]
    return tokens[:cut] + newline * (n - cut)


def chat_frame(model: Tokenizer) -> tuple[str, str] | None:
    """The text the chat template puts before and after one user message, or None without a template."""
    template = model.chat_template()
    if not template:
        return None
    bos = model.token_text(model.vocab.bos) if model.vocab.bos >= 0 else ""
    rendered = chat.render(template, [{"role": "user", "content": _SENTINEL}], bos_token=bos)
    if rendered.count(_SENTINEL) != 1:
        return None
    head, tail = rendered.split(_SENTINEL)
    return head, tail


def fit_prompts(prompts: Sequence[BenchPrompt], model: Tokenizer, n_tokens: int) -> list[FittedPrompt]:
    """Tokenize with the target and fit each prompt to exactly `n_tokens` tokens."""
    frame = chat_frame(model) if any(p.chat for p in prompts) else None
    bos = [model.vocab.bos] if model.vocab.add_bos and model.vocab.bos >= 0 else []
    sep = model.tokenize("\n\n", add_special=False)
    out = []
    for p in prompts:
        head, tail = list(bos), []
        if p.chat and frame is not None:
            framed = model.tokenize(frame[0], add_special=False, parse_special=True)
            head = framed if framed[:1] == bos else bos + framed  # templates that write BOS themselves
            tail = model.tokenize(frame[1], add_special=False, parse_special=True)
        room = n_tokens - len(head) - len(tail)
        if room < 1:
            raise LocalspecError(
                f"--prompt-tokens {n_tokens} is too small for prompt {p.id!r}: the chat template alone "
                f"takes {len(head) + len(tail)} tokens"
            )
        text = model.tokenize(p.text, add_special=False)
        if p.kind == "copy":
            body = fit_end(text, room, model.tokenize("\n", add_special=False)[:1])
        else:
            body = _whole_characters(model, fit(text, room, sep), room)
        out.append(FittedPrompt(p.id, p.kind, tuple(head + body + tail), p.schema))
    return out
