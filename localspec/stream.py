"""Tokens -> text deltas: UTF-8-safe detokenizing, stop strings and EOG, independent of any model.

`TextStream` consumes a step generator and closes it as soon as the output is decided, so tokens
the draft ran past a stop string are never emitted.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from .detok import Detokenizer, StopMatcher
from .speculative import Step


class TextStream:
    def __init__(
        self, token_bytes: Callable[[int], bytes], is_eog: Callable[[int], bool], stop: Sequence[str] = ()
    ) -> None:
        self._detok = Detokenizer(token_bytes)
        self._stops = StopMatcher(stop)
        self._is_eog = is_eog
        self.tokens: list[int] = []  # emitted tokens (EOG excluded)
        self.finish = "length"
        self.saw_eog = False
        self.first_token_at: float | None = None

    def run(self, steps: Iterator[Step], clock: Callable[[], float]) -> Iterator[tuple[str, list[Step]]]:
        """Yield (text, steps) deltas. A delta's steps may carry no text yet (held-back bytes)."""
        pending: list[Step] = []
        try:
            for step in steps:
                if self.first_token_at is None:
                    self.first_token_at = clock()
                if self._is_eog(step.token):
                    self.finish, self.saw_eog = "stop", True
                    break
                self.tokens.append(step.token)
                pending.append(step)
                delta = self._stops.push(self._detok.push(step.token))
                if delta or self._stops.hit is not None:
                    yield delta, pending
                    pending = []
                if self._stops.hit is not None:
                    self.finish = "stop"
                    return
        finally:
            steps.close()
        tail = self._stops.push(self._detok.flush())
        if self._stops.hit is not None:
            self.finish = "stop"
        else:
            tail += self._stops.flush()
        if tail or pending:
            yield tail, pending
