"""The scheduler's side of the prompt cache on disk: where a prompt's prefix is loaded from disk
instead of evaluated, and when a prefix is saved.

- **Load**, when a job is admitted: after the slot's own prefix (or another slot's, copied) is in
  place, each context (the target's, then the draft's) takes the saved prefix sharing the most with
  the prompt, where that gives at least `min_tokens` more than it holds; the state is loaded whole
  and cut back to what the prompt shares (a KV cache forgets any suffix). A file that does not
  check out, or that llama.cpp refuses, is a miss: the prompt is evaluated.
- **Save**: the target's state when its prefill ends (it then holds exactly `prompt[:-1]`), the
  draft's when its job leaves (its cache, filled lazily at the first drafting round, holds the
  prompt and the answer by then); each only when it holds `min_tokens` that no saved prefix has.

The copy out of llama.cpp runs on the engine thread (it reads the cache tensors); checksumming and
writing run on the store's own thread.
"""

from __future__ import annotations

from typing import Callable, Sequence

from localspec.decode.state import SeqState
from localspec.engine.prompt_disk.store import Store
from localspec.errors import LocalspecError
from localspec.evaluator import Evaluator


class PromptDisk:
    def __init__(
        self,
        contexts: Sequence[tuple[Evaluator, Store]],
        *,
        min_tokens: int,
        log: Callable[[str], None],
    ) -> None:
        """`contexts`: the target's context and its store first, then the draft's (if any)."""
        self.contexts, self.min_tokens, self._log = list(contexts), min_tokens, log
        self.target, self.target_store = self.contexts[0]

    def reach(self, prompt: Sequence[int]) -> int:
        """How much of `prompt` the target could load (0 when under min_tokens): the scheduler
        picks a slot by it."""
        _, n = self.target_store.best(prompt, len(prompt) - 1)
        return n if n >= self.min_tokens else 0

    def restore(self, slot: int, prompt: Sequence[int]) -> None:
        """Each context's saved prefix of `prompt`, into `slot`, where it beats what the slot holds.
        The draft never goes past the target (it holds a prefix of what the target holds)."""
        cap = len(prompt) - 1  # the last token is evaluated anyway: its logits start the answer
        for ctx, store in self.contexts:
            have = ctx.past(slot)
            path, n = store.best(prompt, cap)
            if path is not None and n - have >= self.min_tokens:
                self._load(ctx, store, slot, path, n)
            cap = min(cap, self.target.past(slot))
        for ctx, _ in self.contexts[1:]:  # a target llama.cpp refused is empty: nor may the draft lead
            if ctx.past(slot) > cap:
                ctx.truncate(cap, slot)

    def _load(self, ctx: Evaluator, store: Store, slot: int, path, n: int) -> None:  # noqa: ANN001
        got = store.load(path)
        if got is None:
            return
        tokens, state = got
        if not ctx.set_seq_state(slot, state, tokens):  # the slot is empty now: evaluated from scratch
            # the file checked out: llama.cpp found no run of free cells that long (a unified cache
            # that other slots' rounds left fragmented), which a later load may find
            self._log(
                f"prompt cache: {path.name} could not be restored into this context; the prompt is evaluated"
            )
            return
        ctx.truncate(n, slot)

    def prefilled(self, st: SeqState) -> None:
        """The target's prefill of st's prompt is in: save it if it holds enough that is new."""
        n = len(st.tokens) - 1
        if self.target.past(st.seq) == n:
            self._save(self.target, self.target_store, st.seq, st.tokens[:n])

    def left(self, st: SeqState) -> None:
        """st's job left its slot: save the draft's cache (a prefix of st's tokens) if its prompt
        was long enough to save."""
        if len(st.tokens) - st.n_new - 1 < self.min_tokens:
            return
        for ctx, store in self.contexts[1:]:
            self._save(ctx, store, st.seq, st.tokens[: ctx.past(st.seq)])

    def _save(self, ctx: Evaluator, store: Store, slot: int, tokens: Sequence[int]) -> None:
        n = len(tokens)
        if n < self.min_tokens or min(tokens) < 0:  # an image's rows are not only tokens: not kept
            return
        _, have = store.best(tokens, n)
        if n - have < self.min_tokens:
            return
        try:
            state = ctx.seq_state(slot)
        except (LocalspecError, MemoryError) as e:  # remembering is an optimisation: never a failed request
            self._log(f"warning: prompt cache: could not copy the state out ({e})")
            return
        store.save(tokens, state)

    def flush(self, timeout: float | None = None) -> bool:
        return all(store.flush(timeout) for _, store in self.contexts)
