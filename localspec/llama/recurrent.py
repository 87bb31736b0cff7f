"""Rollback for memories that `llama_memory_seq_rm` cannot cut at any position: recurrent state.

A KV cache forgets positions >= p with one `seq_rm`. A recurrent layer (Mamba, gated delta net)
holds one state per sequence - the sum of everything it has read - so llama.cpp offers two ways back:

- `n_rs_seq` ("rs"): the context keeps the states after each of the last n_rs_seq + 1 tokens of
  the last decode, and `seq_rm` may then drop up to min(n_rs_seq, tokens of that decode - 1) of
  them, once per decode. Only some archs build those snapshots (`llm_arch_supports_rs_rollback`:
  qwen35, qwen35moe, lfm2, nemotron_h, ...); elsewhere llama.cpp quietly sets n_rs_seq to 0.
  A ubatch of several sequences first gathers their cells side by side (`find_slot` swaps cell
  records, not the state planes behind them): a sequence moved aside reads another's planes at
  its next rollback. So `llama.Context` decodes several sequences in one ubatch first and then
  one sequence a call (`rs_calls`), and a decode of several sequences ends the others' reach
  (`after_call`).
- saved state ("snapshot"): `llama_state_seq_get_data_ext(..., PARTIAL_ONLY)` copies a sequence's
  recurrent part (not its KV cells) out, `..._set_data_ext` puts it back; what came after the
  snapshot is then re-evaluated ("replayed") by the caller, as llama-server does around its verify.

A truncate settles: positions before it are final, so a snapshot context saves a sequence at the
first decode after each truncate of it (the start of a round's tentative tokens) and nowhere else.

Prompt checkpoints (both kinds): the scheduler asks for one when a prompt's prefill completes, so a
later request sharing that prompt but not all of what the slot holds since (a regenerated answer, a
chat turn whose previous answer re-renders differently) restores it and prefills only the rest, as
llama-server's context checkpoints do. A bounded number per slot, and a byte cap per context; a
truncate below a checkpoint's position forgets it (the tokens it summarised changed).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

import llama_cpp as C

from localspec.errors import LocalspecError
from localspec.gguf.memory_plan import CHECKPOINT_CAP_BYTES, CHECKPOINTS_PER_SLOT

ATTENTION, RECURRENT, HYBRID = "attention", "recurrent", "hybrid"
# what truncate does on each: cut the KV cache | rs rollback within the last decode | saved state
TRUNCATE, RS, SNAPSHOT = "truncate", "rs", "snapshot"
PARTIAL = C.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY  # the recurrent part only: attention KV stays in place
# (seq, cache index) -> llama.cpp position: rollbacks count indices, seq_rm takes positions (they
# differ after an M-RoPE image: llama.Context keeps the map)
Where = Callable[[int, int], int]


def _same(seq: int, index: int) -> int:
    return index


def memory_kind(model_ptr) -> str:  # noqa: ANN001 - a llama_model *
    """attention (a KV cache, any architecture without recurrent layers) | recurrent | hybrid."""
    if C.llama_model_is_hybrid(model_ptr):
        return HYBRID
    if C.llama_model_is_recurrent(model_ptr):
        return RECURRENT
    return ATTENTION


@dataclass
class RollbackStats:
    """Where a recurrent context's rollback time went (seconds and counts since load)."""

    snapshots: int = 0
    snapshot_s: float = 0.0
    snapshot_bytes: int = 0  # the last snapshot's size
    restores: int = 0
    restore_s: float = 0.0
    rs_rollbacks: int = 0  # rollbacks llama.cpp's n_rs_seq served (no copy at all)
    drops: int = 0  # rollbacks nothing could serve: the sequence was emptied (re-evaluated later)
    checkpoints: int = 0  # prompt checkpoints saved ...
    checkpoint_restores: int = 0  # ... and restored (a prefill shortened to what follows them)
    checkpoint_bytes: int = 0  # held now, all slots
    checkpoint_s: float = 0.0  # saving and restoring them


class KvTruncate:
    """A KV cache (any attention memory): `seq_rm` forgets any suffix."""

    kind = TRUNCATE
    n_rs = 0  # no n_rs_seq snapshots: seq_rm cuts anywhere

    def __init__(self, mem, where: Where = _same) -> None:  # noqa: ANN001 - a llama_memory_t
        self._mem, self._where = mem, where
        self.stats = RollbackStats()

    def before_decode(self, seq: int, past: int) -> None:
        pass

    def after_decode(self, seq: int, n_tokens: int) -> None:
        pass

    def after_call(self, seqs: Collection[int]) -> None:
        pass

    def truncate(self, seq: int, pos: int, past: int) -> int:
        if pos < past and not C.llama_memory_seq_rm(self._mem, seq, self._where(seq, pos), -1):
            raise LocalspecError(f"this model's cache cannot be rolled back to position {pos}")
        return min(pos, past)

    def checkpoint(self, seq: int, past: int, at: int | None = None) -> None:
        pass  # a KV cache keeps every prefix anyway

    def reset(self) -> None:
        pass


@dataclass
class _Checkpoint:
    pos: int  # the state of the tokens before this position
    buf: ctypes.Array
    order: int  # when it was saved (the oldest goes first)


@dataclass
class _Seq:
    settled: bool = True  # a truncate since the last decode: the next decode saves a snapshot
    snap: ctypes.Array | None = None  # the saved recurrent state ...
    snap_pos: int = -1  # ... of the tokens before this position
    snap_live: bool = False  # the state still equals the snapshot (just restored, nothing decoded)
    last_len: int = 0  # tokens of this sequence in its last llama_decode (what rs can reach back)
    rs_pending: bool = False  # rs rollback used since that decode (llama.cpp allows one)
    checkpoints: list[_Checkpoint] | None = None  # prompt checkpoints, oldest first
    want: int = -1  # a checkpoint asked for here, taken when a decode ends at this position
    start: int = 0  # where the decode now running began


class LlamaState:
    """The memory operations a rollback needs, on one llama.cpp context (tests use a fake)."""

    def __init__(self, ctx_ptr, mem, where: Where = _same) -> None:  # noqa: ANN001 - llama_context *, llama_memory_t
        self._ctx, self._mem, self._where = ctx_ptr, mem, where
        self.n_rs = int(C.llama_n_rs_seq(ctx_ptr))  # 0 where the arch has no rs (llama.cpp clamps it)

    def seq_rm(self, seq: int, p0: int, p1: int) -> bool:
        """Forget cache indices p0.. (p1 -1: to the end; p0 -1: all)."""
        return bool(C.llama_memory_seq_rm(self._mem, seq, self._where(seq, p0) if p0 >= 0 else p0, p1))

    def span(self, seq: int, p0: int, p1: int) -> int:
        """Positions between cache indices p0 and p1 (fewer than p1 - p0 across an M-RoPE image)."""
        return self._where(seq, p1) - self._where(seq, p0)

    def size(self, seq: int) -> int:
        return int(C.llama_state_seq_get_size_ext(self._ctx, seq, PARTIAL))

    def save(self, seq: int, buf: ctypes.Array | None) -> ctypes.Array:
        """The sequence's recurrent state, into buf when it has the size (else a new buffer)."""
        size = self.size(seq)
        if buf is None or len(buf) != size:
            buf = (ctypes.c_uint8 * size)()
        n = C.llama_state_seq_get_data_ext(self._ctx, buf, size, seq, PARTIAL)
        if n != size:
            raise LocalspecError(f"llama.cpp saved {n} of {size} bytes of sequence {seq}'s state")
        return buf

    def load(self, seq: int, buf: ctypes.Array) -> bool:
        return C.llama_state_seq_set_data_ext(self._ctx, buf, len(buf), seq, PARTIAL) == len(buf)


class RecurrentRollback:
    """Rollback for a recurrent or hybrid memory: rs where llama.cpp provides it, else snapshots.

    `truncate(seq, pos, past)` returns the new past, which may be below pos: the caller re-evaluates
    tokens [new past, pos) in its next decode. With rs, snapshots are never taken (the round only
    rolls back within one verify decode); a rollback rs cannot serve empties the sequence."""

    def __init__(self, state: LlamaState, n_seq: int) -> None:
        self._state = state
        self.n_rs = state.n_rs
        self.kind = RS if self.n_rs > 0 else SNAPSHOT
        self._seqs = [_Seq() for _ in range(n_seq)]
        self.stats = RollbackStats()
        self._saved = 0  # checkpoints taken so far (their order)

    def before_decode(self, seq: int, past: int) -> None:
        s = self._seqs[seq]
        if self.kind == SNAPSHOT and s.settled and not (s.snap_live and s.snap_pos == past):
            self._save(seq, s, past)
        s.settled, s.start = False, past

    def after_decode(self, seq: int, n_tokens: int) -> None:
        s = self._seqs[seq]
        s.last_len, s.rs_pending, s.snap_live = n_tokens, False, False
        if n_tokens and s.want >= 0 and s.start + n_tokens >= s.want:  # n_tokens 0: a failed decode
            if s.start + n_tokens == s.want:
                self.checkpoint(seq, s.want)
            s.want = -1

    def after_call(self, seqs: Collection[int]) -> None:
        """After one llama_decode of `seqs`: one of several sequences may have moved the others'
        cells away from their rs planes (the module's note), so only these keep their reach."""
        if len(seqs) > 1:
            for i, s in enumerate(self._seqs):
                if i not in seqs:
                    s.last_len = 0

    def truncate(self, seq: int, pos: int, past: int) -> int:
        s = self._seqs[seq]
        s.settled = True
        if pos >= past:
            return past
        if pos <= 0:
            return self._drop(seq, s, count=False)
        back = past - pos
        # rs steps back token by token: not across an M-RoPE image (its rows share one position)
        plain = self._state.span(seq, pos, past) == back
        if self.kind == RS and not s.rs_pending and back <= min(self.n_rs, s.last_len - 1) and plain:
            if self._state.seq_rm(seq, pos, -1):
                s.rs_pending = True
                self.stats.rs_rollbacks += 1
                return self._forget_after(s, pos)
        cp = max((c for c in s.checkpoints or () if 0 < c.pos <= pos), key=lambda c: c.pos, default=None)
        if s.snap is not None and s.snap_pos <= pos and (cp is None or s.snap_pos >= cp.pos):
            return self._forget_after(s, self._restore(seq, s))
        if cp is not None:
            return self._forget_after(s, self._restore_checkpoint(seq, s, cp))
        return self._drop(seq, s)

    def checkpoint(self, seq: int, past: int, at: int | None = None) -> None:
        """Save sequence seq's state at `past` (a prompt's prefill just ended there) - or, with `at`
        beyond past, when a later decode ends exactly there (a draft still catching up)."""
        s = self._seqs[seq]
        if at is not None and at != past:
            s.want = at if at > past else -1
            return
        if past <= 0 or any(c.pos == past for c in s.checkpoints or ()):
            return
        size = self._state.size(seq)
        if size > CHECKPOINT_CAP_BYTES:
            return
        s.checkpoints = s.checkpoints or []
        while len(s.checkpoints) >= CHECKPOINTS_PER_SLOT:
            self._evict(s, s.checkpoints[0])
        while self.stats.checkpoint_bytes + size > CHECKPOINT_CAP_BYTES:  # the oldest of any slot
            owner, oldest = min(
                ((o, c) for o in self._seqs for c in o.checkpoints or ()), key=lambda oc: oc[1].order
            )
            self._evict(owner, oldest)
        t0 = time.perf_counter()
        buf = self._state.save(seq, None)
        self.stats.checkpoint_s += time.perf_counter() - t0
        self._saved += 1
        s.checkpoints.append(_Checkpoint(past, buf, self._saved))
        self.stats.checkpoints += 1
        self.stats.checkpoint_bytes += len(buf)

    def reset(self) -> None:
        self._seqs = [_Seq() for _ in self._seqs]
        self.stats.checkpoint_bytes = 0

    # -- the state copies -------------------------------------------------------------------------
    def _save(self, seq: int, s: _Seq, past: int) -> None:
        t0 = time.perf_counter()
        s.snap = self._state.save(seq, s.snap)
        s.snap_pos, s.snap_live = past, True
        self.stats.snapshots += 1
        self.stats.snapshot_bytes = len(s.snap)
        self.stats.snapshot_s += time.perf_counter() - t0

    def _restore(self, seq: int, s: _Seq) -> int:
        t0 = time.perf_counter()
        assert s.snap is not None
        if not self._state.load(seq, s.snap):
            return self._drop(seq, s)
        self._state.seq_rm(seq, s.snap_pos, -1)  # the attention part of a hybrid memory holds the rest
        s.snap_live, s.rs_pending, s.last_len = True, False, 0
        self.stats.restores += 1
        self.stats.restore_s += time.perf_counter() - t0
        return s.snap_pos

    def _restore_checkpoint(self, seq: int, s: _Seq, cp: _Checkpoint) -> int:
        t0 = time.perf_counter()
        if not self._state.load(seq, cp.buf):
            return self._drop(seq, s)
        self._state.seq_rm(seq, cp.pos, -1)
        s.snap_live, s.rs_pending, s.last_len = False, False, 0
        self.stats.checkpoint_restores += 1
        self.stats.checkpoint_s += time.perf_counter() - t0
        return cp.pos

    def _forget_after(self, s: _Seq, past: int) -> int:
        """What summarises positions >= past is stale now: the tokens there will change."""
        if s.snap is not None and s.snap_pos > past:
            s.snap, s.snap_pos, s.snap_live = None, -1, False
        for c in [c for c in s.checkpoints or () if c.pos > past]:
            self._evict(s, c)
        return past

    def _evict(self, s: _Seq, c: _Checkpoint) -> None:
        assert s.checkpoints is not None
        s.checkpoints.remove(c)
        self.stats.checkpoint_bytes -= len(c.buf)

    def _drop(self, seq: int, s: _Seq, *, count: bool = True) -> int:
        self._state.seq_rm(seq, -1, -1)  # removing a whole sequence never fails
        s.snap, s.snap_pos, s.snap_live, s.rs_pending, s.last_len = None, -1, False, False, 0
        s.want = -1
        for c in list(s.checkpoints or ()):
            self._evict(s, c)
        self.stats.drops += count
        return 0


def rollback_for(model_ptr, ctx_ptr, mem, n_seq: int, where: Where = _same) -> KvTruncate | RecurrentRollback:  # noqa: ANN001
    """The rollback this context's memory allows, chosen once at load."""
    if memory_kind(model_ptr) == ATTENTION:
        return KvTruncate(mem, where)
    return RecurrentRollback(LlamaState(ctx_ptr, mem, where), n_seq)


def rs_calls(lens: Sequence[int], seqs: Sequence[int], n_ubatch: int, sequential: bool) -> list[list[int]]:
    """The llama_decode calls (item indices) for items of `lens` tokens of sequences `seqs` on an rs
    memory: first the largest set of one length that llama.cpp's equal split takes whole in one
    ubatch (at most n_ubatch tokens; with a `sequential` split, ascending sequences one apart), then
    each other item alone. A gather moves cells only in a ubatch of several sequences: after the
    first call, no call moves a cell whose planes this round's rollbacks read (the module's note)."""
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(lens):
        by_len.setdefault(n, []).append(i)
    group: list[int] = []
    for n, idx in by_len.items():
        idx = idx[: max(1, n_ubatch // n)]
        if sequential and [seqs[i] for i in idx] != list(range(seqs[idx[0]], seqs[idx[0]] + len(idx))):
            idx = idx[:1]
        group = idx if len(idx) > len(group) else group
    group = group if len(group) > 1 else []
    rest = [[i] for i in range(len(lens)) if i not in group]
    return [group, *rest] if group else rest
