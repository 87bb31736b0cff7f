"""A tool call written without its family's markers (Qwen2.5-Coder's ```json block, or a bare object):
a call only when it names a declared tool (Ollama's parser checks the names too) and has arguments.
Until that is known it is held; then its name goes out and its arguments stream on, or, once it
cannot be a call (another name, an object that closes without arguments), it is text as written."""

from __future__ import annotations

from localspec.chat.deltas import Delta, new_call_id
from localspec.chat.jsonstream import CallObject


class Tentative:
    def __init__(self, parser, lead: str, names: frozenset[str]) -> None:  # noqa: ANN001 - a Parser
        """`lead`: the text held before the object (a fence, whitespace), text again if not a call."""
        self.lead, self._parser, self._names = lead, parser, names
        self._index = parser.n_calls
        self._name: str | None = None
        self.obj = CallObject(self._on, opened=False)
        self.committed = self.rejected = False

    @property
    def text(self) -> str:
        """Everything held, as written."""
        return self.lead + self.obj.raw

    @property
    def settled(self) -> bool:
        """Nothing more to read: a call that closed, or text."""
        return self.rejected or self.obj.done

    def feed(self, buf: str) -> str:
        """Read buf until the object closes or turns out to be text; what was not read."""
        for i, ch in enumerate(buf):
            if not self.obj.push(ch):
                return buf[i:]
            if self.settled:
                return buf[i + 1 :]
        return ""

    def _on(self, kind: str, text: str) -> None:
        if self.rejected:
            return
        if kind == "name":
            self._name = text
            self.rejected = text not in self._names
        elif kind == "arguments":
            if not self.committed:
                if self.obj.done:  # CallObject's "{}" for an object that closed without arguments
                    self.rejected = True
                    return
                self.committed = True
                self._parser.n_calls = self._index + 1
                self._parser.out.append(Delta(call=self._index, id=new_call_id(), name=self._name))
            self._parser.out.append(Delta(call=self._index, arguments=text))
