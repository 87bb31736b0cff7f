"""One sequence's place in its grammar: the tokens allowed next, consume, roll back, forced tokens.

A speculative round advances a matcher along its draft (one mask per drafted position), verifies,
then rolls it back to the accepted prefix and consumes the target's own token - so rollback is the
one operation that must be exact. llguidance keeps the history; this wrapper adds the numpy mask,
errors a person can read, a cached mask per state, and two guards llguidance leaves to its caller:
a refused token would put it in an error state for good (so tokens are checked before they are
consumed), and end of generation after a complete grammar is not kept in its history (so it is
counted here, for rollback).
"""

from __future__ import annotations

from typing import Sequence

import llguidance
import numpy as np

from .errors import ConstraintStuck
from .vocab import Vocabulary


class Matcher:
    def __init__(self, ll: llguidance.LLMatcher, vocab: Vocabulary) -> None:
        self._ll = ll
        self.vocab = vocab
        self._eog = frozenset(vocab.eog)
        self.consumed: list[int] = []  # every token consumed since the start, rolled back ones gone
        self._uncounted_eog = False  # the last token is an EOG llguidance did not record
        self._bits = np.zeros((vocab.n_vocab + 31) // 32, dtype=np.int32)
        self._mask: np.ndarray | None = None  # the current state's mask, until the state changes

    # -- the next token -------------------------------------------------------------------------
    def bitmask(self) -> np.ndarray:
        """The allowed next tokens as llguidance's bitmask: bit t % 32 of word t // 32 (int32 words).
        A view of the matcher's buffer: valid until the state changes."""
        self._compute()
        return self._bits

    def allowed(self) -> np.ndarray:
        """The allowed next tokens as a bool array over the vocabulary (vocab.n_vocab entries); may
        allow none (a dead end), which `mask` refuses."""
        return self._compute()

    def mask(self) -> np.ndarray:
        """`allowed`, raising ConstraintStuck when nothing is."""
        m = self._compute()
        if not m.any():
            self._stuck("no token is allowed next")
        return m

    def _compute(self) -> np.ndarray:
        if self._mask is None:
            self._ll.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            if self._ll.is_error():
                self._stuck("")
            bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")  # word t//32, bit t%32
            self._mask = bits[: self.vocab.n_vocab].view(bool)
        return self._mask

    def forced(self) -> list[int]:
        """Tokens the grammar forces next, whatever the model would say: llguidance's fast-forward
        run (the forced bytes, tokenized as the model would, short of any token that might span past
        them), else the one token the mask allows. Empty when the next token is a real choice."""
        ff = list(self._ll.compute_ff_tokens())
        if ff:
            return ff
        m = self._compute()
        return [int(np.argmax(m))] if np.count_nonzero(m) == 1 else []  # count: no index of 262k

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the grammar accepts from here (state unchanged)."""
        tokens = [int(t) for t in tokens]
        if not tokens or self.ended:
            return 0
        n = int(self._ll.validate_tokens(tokens))
        if n < len(tokens) and tokens[n] in self._eog:
            # llguidance refuses EOG once the grammar is complete, though it is the one token allowed
            self._ll.consume_tokens(tokens[:n])
            ok = self._ll.is_accepting()
            self._ll.rollback(n)
            n += bool(ok)
        return n

    # -- moving ---------------------------------------------------------------------------------
    def consume(self, tokens: Sequence[int]) -> None:
        """Advance past `tokens`; raises ConstraintStuck (state unchanged) if the grammar refuses one."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            return
        ok = self.valid_prefix(tokens)
        if ok < len(tokens):
            bad = tokens[ok]
            self._stuck(
                f"token {bad} ({self._show(bad)}) is not allowed after {ok} of {len(tokens)} consumed"
            )
        last = tokens[-1]
        body = tokens[:-1] if last in self._eog else tokens
        if body and not self._ll.consume_tokens(body):
            self._stuck("")
        if last in self._eog:
            if self._ll.is_stopped():  # complete already: llguidance would not record it
                self._uncounted_eog = True
            elif not self._ll.consume_token(last):
                self._stuck("")
        self.consumed += tokens
        self._mask = None

    def rollback(self, n: int) -> None:
        """Undo the last n consumed tokens."""
        if n <= 0:
            return
        if n > self.n_consumed:
            raise ValueError(f"rollback of {n} tokens with {self.n_consumed} consumed")
        n_ll = n - self._uncounted_eog
        if n_ll and not self._ll.rollback(n_ll):
            self._stuck(f"rollback of {n} failed")
        self._uncounted_eog = False
        del self.consumed[-n:]
        self._mask = None

    def fork(self) -> "Matcher":
        """An independent copy of this state (llguidance's deep_copy shares the compiled grammar)."""
        m = Matcher(self._ll.deep_copy(), self.vocab)
        m.consumed, m._uncounted_eog = list(self.consumed), self._uncounted_eog
        return m

    # -- where it stands ------------------------------------------------------------------------
    @property
    def n_consumed(self) -> int:
        """Tokens consumed since the start (rollback can undo at most this many)."""
        return len(self.consumed)

    @property
    def accepting(self) -> bool:
        """The text so far is a complete answer: an end-of-generation token is allowed now."""
        return bool(self._ll.is_accepting())

    @property
    def ended(self) -> bool:
        """An end-of-generation token was consumed: nothing at all can follow."""
        return self._uncounted_eog or self._ll.stop_reason() == "EndOfSentence"

    def is_done(self) -> bool:
        """Nothing but end of generation can follow (the grammar is complete, or EOG was consumed)."""
        return bool(self._ll.is_stopped()) and not self._ll.is_error()

    @property
    def error(self) -> str:
        return self._ll.get_error()

    def _show(self, token: int) -> str:
        return repr(self.vocab.tokenizer.decode_bytes([token]))[1:]

    def _stuck(self, what: str) -> None:
        reason = self._ll.get_error() or self._ll.stop_reason()
        detail = "; ".join(s for s in (what, reason) if s and s != "NotStopped")
        raise ConstraintStuck(f"the output cannot continue under its constraint: {detail}")
