"""A multi-turn conversation kept as the token ids the model actually saw and generated.

Re-rendering the whole conversation through the chat template and tokenizing it again would not
always give back the generated tokens (a sampled answer need not be tokenized the canonical way),
and then the engine's prefix cache would miss from the first differing token on. So each new prompt
is the previous prompt's ids + the answer's ids + the tokens of only what the template adds after
the answer. When the template rewrites earlier turns (the rendered text no longer starts with what
was sent), the whole conversation is tokenized again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from localspec.chat import media


class ChatTokenizer(Protocol):
    """What a conversation needs from the engine (Engine implements it)."""

    def render_chat(self, messages: list[dict]) -> str: ...

    def tokenize_chat(self, text: str, *, continuation: bool = False) -> list[int]: ...

    def tokenize_images(self, text: str, images: list[Any], marker: str) -> media.Prompt: ...


@dataclass
class Conversation:
    system: str | None = None
    turns: list[tuple[str, str]] = field(default_factory=list)  # (user, assistant)
    images: list[Any] = field(default_factory=list)  # shown with the first user message (chat --image)
    runs: list[Any] = field(default_factory=list)  # their image runs: the prompt's image ids come from them
    _text: str | None = None  # rendered text of the conversation through the last answer
    _ids: list[int] | None = None  # ... and the tokens the model saw for it
    _marker: str = field(default_factory=media.new_marker)  # where the images go in the text

    def messages(self, user: str | None = None) -> list[dict]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        for u, a in self.turns:
            msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        if user is not None:
            msgs.append({"role": "user", "content": user})
        first = next((m for m in msgs if m["role"] == "user"), None)
        if self.images and first is not None:
            parts = [{"type": "image", "image": im} for im in self.images]
            first["content"] = [*parts, {"type": "text", "text": first["content"]}]
        return msgs

    def prompt(self, tok: ChatTokenizer, user: str) -> tuple[str, list[int]]:
        """The rendered text and token ids of the conversation with `user` asking next."""
        messages, images = media.flatten(self.messages(user), self._marker)
        text = tok.render_chat(messages)
        if self._ids is not None and self._text is not None and text.startswith(self._text):
            return text, self._ids + tok.tokenize_chat(text[len(self._text) :], continuation=True)
        if not images:
            return text, tok.tokenize_chat(text)
        p = tok.tokenize_images(text, images, self._marker)
        self.runs = p.runs
        return text, p.ids

    def add(
        self, user: str, prompt_text: str, prompt_ids: list[int], answer: str, answer_ids: list[int] | None
    ) -> None:
        """Record a finished turn. `answer_ids=None` when they may not spell `answer` exactly (a stop
        string cut the text, the answer was interrupted): the next prompt is then tokenized afresh."""
        self.turns.append((user, answer))
        if answer_ids is None:
            self._text = self._ids = None
        else:
            self._text, self._ids = prompt_text + answer, list(prompt_ids) + list(answer_ids)

    def drop_oldest(self) -> None:
        self.turns.pop(0)
        self.images = []  # they came with the first turn
        self._text = self._ids = None

    def set_system(self, text: str | None) -> None:
        self.system = text or None
        self._text = self._ids = None

    def reset(self) -> None:
        self.turns.clear()
        self.images = []
        self._text = self._ids = None
