"""One inference context over a Model: KV cache, compute buffers, the batch; decode and truncate.

Built on the low-level C API (not `llama_cpp.Llama`): that class forces an n_ctx x n_vocab logits
buffer when drafting and hides the KV cache, and the speculative loop needs both under its control.
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import time
from typing import TYPE_CHECKING, Callable, Sequence

import llama_cpp as C
import numpy as np

from localspec import chunk_reuse
from localspec.errors import Interrupted, LocalspecError
from localspec.evaluator import Item
from localspec.llama import image_rows, recurrent, seq_state
from localspec.llama.log import default_threads, last_error, log_mark, log_since
from localspec.llama.model import Model
from localspec.llama.owner import Owner
from localspec.top_logits import TopLogits

if TYPE_CHECKING:
    from localspec.llama.vision import Projector

KV_TYPES = {
    "f32": C.GGML_TYPE_F32,
    "f16": C.GGML_TYPE_F16,
    "q8_0": C.GGML_TYPE_Q8_0,
    "q4_0": C.GGML_TYPE_Q4_0,
}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
ROPE_SCALING = {
    "none": C.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": C.LLAMA_ROPE_SCALING_TYPE_LINEAR,
    "yarn": C.LLAMA_ROPE_SCALING_TYPE_YARN,
}

# when the running llama_decode started (0: none runs): the RPC watchdog's measure of a stall
BUSY_SINCE = [0.0]


def set_rope(
    params: C.llama_context_params,
    *,
    rope_scaling: str | None = None,
    rope_scale: float | None = None,
    rope_freq_base: float | None = None,
    yarn_orig_ctx: int | None = None,
) -> None:
    """llama-server's --rope-scaling, --rope-scale, --rope-freq-base and --yarn-orig-ctx onto context
    params; None leaves llama.cpp's default (the GGUF's own values)."""
    if rope_scaling is not None:
        if rope_scaling not in ROPE_SCALING:
            raise LocalspecError(
                f"rope_scaling must be one of {', '.join(ROPE_SCALING)} (got {rope_scaling!r})"
            )
        params.rope_scaling_type = ROPE_SCALING[rope_scaling]
    if rope_scale is not None:
        params.rope_freq_scale = 1.0 / rope_scale  # as llama-server: scale N is a frequency scale of 1/N
    if rope_freq_base is not None:
        params.rope_freq_base = rope_freq_base
    if yarn_orig_ctx is not None:
        params.yarn_orig_ctx = yarn_orig_ctx


class Context(Owner):
    """One inference context (KV cache + compute buffers) over a Model, for `n_seq` sequences.

    Created once; the batch is allocated once. Each sequence (0..n_seq-1) may hold up to `n_ctx`
    tokens: the KV cache is one unified buffer of n_ctx * n_seq cells shared by all sequences, so
    every sequence can always reach its n_ctx whatever the others hold. `eval()` (one sequence) and
    `eval_views()` (several sequences in one decode) return logits rows as numpy *views* into
    llama.cpp's buffer, valid until the next decode of this context; `eval_batch()` returns copies.
    """

    _ptr = None  # until llama.cpp made the context (close() may run on a half-made one)
    _chains: Sequence = ()
    _retired: Sequence = ()
    source = "draft"  # as a draft context: a draft model's (the Evaluator protocol's fields)

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: int | None = None,
        flash_attn: str = "auto",
        kv_type: str = "f16",
        n_seq: int = 1,
        n_rs_seq: int = 0,
        backend_top_k: int = 0,
        projector: "Projector | None" = None,
        rope_scaling: str | None = None,
        rope_scale: float | None = None,
        rope_freq_base: float | None = None,
        yarn_orig_ctx: int | None = None,
    ) -> None:
        if kv_type not in KV_TYPES:
            raise LocalspecError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
        if flash_attn not in FLASH_ATTN:
            raise LocalspecError(f"flash_attn must be one of {', '.join(FLASH_ATTN)}")
        if n_seq < 1:
            raise LocalspecError(f"n_seq must be >= 1 (got {n_seq})")
        self.model = model
        # kept for the contexts that share this one's positions (an MTP head)
        self.rope = dict(
            rope_scaling=rope_scaling,
            rope_scale=rope_scale,
            rope_freq_base=rope_freq_base,
            yarn_orig_ctx=yarn_orig_ctx,
        )
        threads = n_threads or default_threads()
        params = C.llama_context_default_params()
        params.n_ctx = n_ctx * n_seq
        params.n_batch = n_batch
        params.n_ubatch = min(n_ubatch, n_batch)
        params.n_seq_max = n_seq
        params.kv_unified = True  # one buffer: any sequence may use n_ctx cells, decodes stay single-stream
        params.n_threads = threads
        params.n_threads_batch = threads
        params.flash_attn_type = FLASH_ATTN[flash_attn]
        params.type_k = KV_TYPES[kv_type]
        params.type_v = KV_TYPES[kv_type]
        params.no_perf = True
        set_rope(params, **self.rope)
        params.n_rs_seq = n_rs_seq  # recurrent states kept per sequence for rollback (rs-capable archs)
        self.top_k = model.backend_top_k() if backend_top_k < 0 else min(backend_top_k, model.n_vocab)
        # referenced while the context lives: llama.cpp keeps the chains' pointers
        self._chains, self._chain_configs = _top_k_chains(params, n_seq, self.top_k)
        mark = log_mark()
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            self.close()
            raise LocalspecError(
                f"llama.cpp could not create a context (n_ctx={n_ctx} x {n_seq} sequences): {last_error(mark)}"
            )
        self._ptr = ptr
        self.init_log = log_since(mark)
        self.n_seq = n_seq
        self._shared = [0] * n_seq  # cells below this a copy_prefix may share with another sequence
        self.n_ctx = min(n_ctx, int(C.llama_n_ctx(ptr)))  # per sequence
        self.n_batch = int(C.llama_n_batch(ptr))  # llama.cpp clamps n_batch to n_ctx
        self.n_ubatch = int(C.llama_n_ubatch(ptr))
        self.n_vocab = model.n_vocab
        self._mem = C.llama_get_memory(ptr)
        self._batch = _Batch(self.n_batch)
        self._past = [0] * n_seq  # tokens each sequence has in the KV cache (positions 0..past-1)
        # the token each sequence's cache holds at each position (read by the round's invariant check;
        # 4 bytes a cell beside the KV cache's kilobytes, pages touched only where positions are used)
        self._held = np.zeros((n_seq, self.n_ctx), np.int32)
        # llama.cpp's position of each cached index, and at past: where the next token goes. The
        # engine counts cache rows (indices); an M-RoPE image (llama/vision.py) has more rows than
        # positions, so text after it sits below its index. The one place the two are told apart.
        self._at = np.zeros((n_seq, self.n_ctx + 1), np.int32)
        # seconds inside llama_decode, wall and this thread's CPU (what the round's overhead leaves out)
        self.decode_s = self.decode_cpu_s = 0.0
        self.cpu_timing = False
        self.memory_kind = recurrent.memory_kind(model.ptr)
        self._rollback = recurrent.rollback_for(model.ptr, ptr, self._mem, n_seq, self.position)
        self.rollback = self._rollback.kind  # truncate | rs | snapshot (llama/recurrent.py)
        self.max_draft = self._rollback.n_rs if self.rollback == recurrent.RS else None
        self.prefix_copy = self.rollback == recurrent.TRUNCATE  # a recurrent state is one per sequence
        self.checkpoints = self.rollback != recurrent.TRUNCATE  # a KV cache keeps every prefix anyway
        self.saves_state = self.rollback == recurrent.TRUNCATE  # a recurrent state is not only its tokens'
        self.can_shift = bool(C.llama_memory_can_shift(self._mem)) and self.rollback == recurrent.TRUNCATE
        self.on_decode: Callable[[list[tuple[int, int, int]]], None] | None = None  # llama/mtp.py
        self._top_on = [self.top_k > 0] * n_seq  # whose rows come back as their top_k largest
        self._retired: list = []  # chains detached since the last decode
        # image ids (llama/vision.py) decode as the projector's rows; without one (a draft without
        # --draft-mmproj) each is read as a newline: the text around an image at the target's positions
        self.projector = projector
        # a causal image's rows may be cut between decodes (as mtmd's helper cuts them by n_batch):
        # each sees the rows before it in the cache; a non-causal one's must see them all at once
        self.images_whole = projector is not None and projector.non_causal
        self.filler = (model.tokenize("\n", add_special=False, parse_special=False) or [model.vocab.eos])[-1]
        self._embd: _Batch | None = None  # made at the first image

    def close(self) -> None:
        if self._ptr:
            C.llama_free(self._ptr)
            self._ptr = None
        for chain in [*self._chains, *self._retired]:  # after the context
            if chain is not None:
                C.llama_sampler_free(chain)
        self._chains, self._retired = [], []

    @property
    def ptr(self):  # noqa: ANN201 - a ctypes pointer
        if not self._ptr:
            raise LocalspecError("this context is closed")
        return self._ptr

    @property
    def n_past(self) -> int:
        """Tokens cached for sequence 0 (the single-sequence view)."""
        return self._past[0]

    def past(self, seq: int = 0) -> int:
        return self._past[seq]

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def position(self, seq: int, index: int) -> int:
        """llama.cpp's position of cached index `index` of seq (at past: the next token's)."""
        return int(self._at[seq, index])

    def eval(self, tokens: Sequence[int], pos: int, n_logits: int = 1, seq: int = 0) -> np.ndarray:
        """Decode `tokens` of sequence `seq` at positions pos.. and return logits for the last
        `n_logits` of them: a (n_logits, n_vocab) float32 view, valid until the next decode.

        Positions past `pos` must be empty (call `truncate` first). Long inputs are split into n_batch
        chunks; only the final chunk asks for logits."""
        self._check(seq, tokens, pos, n_logits)
        self.use_top_logits(seq, False)
        return self._decode([Item(seq, tokens, pos, n_logits)], copy=False)[0]

    def use_top_logits(self, seq: int, on: bool) -> bool:
        """Whether `eval_views` gives seq's rows as their `top_k` largest logits (`TopLogits`, made
        inside llama_decode by llama.cpp's backend top-k) rather than whole; returns what it gives.
        Only contexts made with backend_top_k can; a change costs llama.cpp one graph reserve."""
        on = on and self.top_k > 0
        if self._top_on[seq] == on:
            return on
        old = self._chains[seq]
        # a chain is initialised for the backend once (llama.cpp asserts): attach a new one each time
        new = _top_k_chain(self.top_k) if on else None
        if not C.llama_set_sampler(self.ptr, seq, new):
            C.llama_sampler_free(new)  # the backend cannot run it: whole rows
            new, on = None, False
        self._chains[seq] = new
        if old is not None:  # freed once a decode has rebuilt the graph that used it
            self._retired.append(old)
        self._top_on[seq] = on
        return on

    def eval_batch(self, items: Sequence[Item]) -> list[np.ndarray]:
        """Several sequences at once: items are (seq, tokens, pos, n_logits); returns one
        (n_logits, n_vocab) array per item (copies). Everything goes into as few decodes as n_batch
        allows - one, whenever the tokens fit. Whole rows always."""
        for seq, *_ in self._check_items(items):
            self.use_top_logits(seq, False)
        return self._decode(items, copy=True)

    def eval_views(self, items: Sequence[Item]) -> list[np.ndarray]:
        """`eval_batch` without the copy: the rows are views into llama.cpp's buffer, valid until the
        next decode of this context (copies only where the call itself needed several decodes).
        The round uses it: it is done with a decode's rows before it asks for the next one. A
        sequence `use_top_logits` turned on gets `TopLogits`."""
        return self._decode(self._check_items(items), copy=False)

    def _check_items(self, items):  # noqa: ANN001, ANN202
        for seq, tokens, pos, n_logits in items:
            self._check(seq, tokens, pos, n_logits)
        if len({seq for seq, *_ in items}) != len(items):
            raise LocalspecError("eval_batch() takes each sequence at most once")
        return items

    def _check(self, seq: int, tokens: Sequence[int], pos: int, n_logits: int) -> None:
        n = len(tokens)
        if not 0 <= seq < self.n_seq:
            raise LocalspecError(f"sequence {seq} out of range (this context has {self.n_seq})")
        if n == 0:
            raise LocalspecError("eval() needs at least one token")
        if not 0 < n_logits <= min(n, self.n_batch):
            raise LocalspecError(f"n_logits={n_logits} must be in 1..{min(n, self.n_batch)}")
        if pos != self._past[seq]:
            raise LocalspecError(f"eval at position {pos} but the cache holds {self._past[seq]} tokens")
        if pos + n > self.n_ctx:
            raise LocalspecError(
                f"context is full: {pos + n} tokens needed, n_ctx is {self.n_ctx} (raise --n-ctx)"
            )

    def _decode(self, items, copy: bool) -> list[np.ndarray]:  # noqa: ANN001
        """Pack the items' tokens into batches of at most n_batch and decode them in order. A batch
        boundary never splits one item's logits rows unless that item alone fills a batch."""
        if len(items) > 1 and self.rollback == recurrent.RS:
            # llama.cpp splits a unified hybrid memory's batch in any order, a recurrent one's by sequence
            sequential = self.memory_kind != recurrent.HYBRID
            calls = recurrent.rs_calls(
                [len(it[1]) for it in items], [it[0] for it in items], self.n_ubatch, sequential
            )
            if len(calls) > 1:  # several ubatches would move cells off their rs planes (llama/recurrent.py)
                return self._decode_calls(items, calls, copy)
        tok, pos, owner, want = _pack(items)
        held = tok
        if len(tok) and tok.min() < 0:  # image ids
            if self.projector is not None:
                return image_rows.decode(self, items)
            tok = np.where(tok < 0, self.filler, tok).astype(np.int32)
        seqs = np.array([it[0] for it in items], dtype=np.int32)
        parts: list[list[np.ndarray]] = [[] for _ in items]
        start, n = 0, len(tok)
        while start < n:
            end = _chunk_end(start, min(n, start + self.n_batch), owner, want)
            n_out = self._decode_chunk(
                tok[start:end], pos[start:end], seqs[owner[start:end]], want[start:end], held[start:end]
            )
            if n_out:
                keep = copy or end < n  # the next decode overwrites llama.cpp's buffers
                out_owner = owner[start:end][want[start:end]]  # the item of each row, in order
                logits = None
                for idx in np.unique(out_owner).tolist():
                    r0, r1 = np.searchsorted(out_owner, [idx, idx + 1]).tolist()
                    if self._top_on[items[idx][0]]:
                        top = self._top_rows(r0 - n_out, r1 - r0)
                        parts[idx].append(top.copy() if keep else top)
                        continue
                    if logits is None:
                        logits = np.ctypeslib.as_array(
                            C.llama_get_logits(self.ptr), shape=(n_out, self.n_vocab)
                        )
                        logits = logits.copy() if keep else logits
                    parts[idx].append(logits[r0:r1])
            start = end
        return [image_rows.joined(ps, self.n_vocab) for ps in parts]

    def _decode_calls(self, items, calls: list[list[int]], copy: bool) -> list[np.ndarray]:  # noqa: ANN001
        """`_decode` of the items in these llama_decode calls (item indices each), rows in item order:
        copies but for the last call's (the next decode overwrites llama.cpp's buffers)."""
        out: list[np.ndarray] = [np.empty(0)] * len(items)
        for n, idx in enumerate(calls):
            for i, rows in zip(idx, self._decode([items[i] for i in idx], copy or n < len(calls) - 1)):
                out[i] = rows
        return out

    def _top_rows(self, first: int, n: int) -> TopLogits:
        """Rows first.. (negative: counted from the decode's last output) as the backend's top-k
        left them: views into llama.cpp's buffers, rows n_vocab apart."""
        lp = C.llama_get_sampled_logits_ith(self.ptr, first)
        cp = C.llama_get_sampled_candidates_ith(self.ptr, first)
        m = int(C.llama_get_sampled_logits_count_ith(self.ptr, first))
        if not lp or m != self.top_k:
            raise LocalspecError(f"llama.cpp returned {m} top logits for a row, not {self.top_k}")
        logits = np.ctypeslib.as_array(lp, shape=(n, self.n_vocab))[:, :m]
        ids = np.ctypeslib.as_array(cp, shape=(n, self.n_vocab))[:, :m]
        return TopLogits(ids, logits)

    def _decode_chunk(
        self,
        tok: np.ndarray,
        pos: np.ndarray,
        seq: np.ndarray,
        want: np.ndarray,
        held: np.ndarray,
        embd: np.ndarray | None = None,
        place: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> int:
        """One llama_decode of these tokens (or of `embd`, their embedding rows: an image) at cache
        indices `pos`; returns how many logits rows it made. `held` is what the cache records there.
        Their llama.cpp positions go on from their sequence's, one each, unless `place` gives them
        (an M-RoPE image: its rows' (4, n) position sections, and where each row's successor goes)."""
        if place is None:
            past = np.asarray(self._past, np.int32)[seq]
            at = pos - past + self._at[seq, past]
            cell, after = at, at + 1
        else:
            at, after = place
            cell = at[0]  # the KV cell's position: the first section (llama-kv-cache's pos_set)
        if embd is None:
            b = self._batch
            b.fill(tok, at, seq, want)
        else:
            b = self._embd = self._embd or _Batch(self.n_batch, embd.shape[1], 4 if place is not None else 1)
            b.fill(embd, at, seq, want)
        in_call = collections.Counter(seq.tolist())  # tokens per sequence in this decode
        for s in in_call:  # a recurrent memory saves the state a rollback may return to
            self._rollback.before_decode(s, self._past[s])
        BUSY_SINCE[0] = time.monotonic()  # the RPC watchdog's measure of a stalled decode
        t0, c0 = time.perf_counter(), time.thread_time() if self.cpu_timing else 0.0
        try:
            rc = C.llama_decode(self.ptr, b.struct)
        finally:
            if self.cpu_timing:  # a system call each: only when a benchmark asks
                self.decode_cpu_s += time.thread_time() - c0
            self.decode_s += time.perf_counter() - t0
            BUSY_SINCE[0] = 0.0
        if rc != 0:
            # a failed decode can leave partial entries: drop them so every cache stays consistent
            for s in in_call:
                first_pos = int(pos[seq == s].min())
                self._rollback.after_decode(s, 0)  # no state of the failed call is reused
                self._past[s] = first_pos + 1  # so truncate drops whatever it left
                self.truncate(first_pos, s)
            if rc == 2:  # its abort callback said stop (llama/interrupt.py)
                raise Interrupted("the decode was interrupted")
            raise LocalspecError(f"llama_decode failed (code {rc}) at position {int(pos[0])}")
        for chain in self._retired:  # the graph that used them is rebuilt
            C.llama_sampler_free(chain)
        self._retired.clear()
        for s, n in in_call.items():
            self._rollback.after_decode(s, n)
        self._rollback.after_call(in_call)
        if self.on_decode is not None:  # the MTP head reads this decode's hidden states now
            self.on_decode(list(zip(seq.tolist(), pos.tolist(), tok.tolist())))
        for s, p in zip(seq.tolist(), pos.tolist()):  # each sequence's last position
            self._past[s] = p + 1
        self._held[seq, pos] = held
        self._at[seq, pos], self._at[seq, pos + 1] = cell, after
        return int(want.sum())

    def cached_tokens(self, seq: int = 0) -> np.ndarray:
        """The token evaluated at each of sequence seq's cached positions (`past(seq)` of them)."""
        return self._held[seq, : self._past[seq]]

    def truncate(self, pos: int, seq: int = 0) -> None:
        """Forget every cached position >= pos of sequence `seq` (the single rollback operation).
        Positions before pos are settled. The cache may end up shorter than pos (`past(seq)` says):
        on a recurrent memory (llama/recurrent.py), or inside an M-RoPE image, whose rows share a
        position and go as one; the caller re-evaluates the difference."""
        pos = self._whole(seq, min(pos, self._past[seq]))
        self._past[seq] = self._rollback.truncate(seq, pos, self._past[seq])
        self._shared[seq] = min(self._shared[seq], self._past[seq])

    def _whole(self, seq: int, index: int) -> int:
        """index, or the first row of the M-RoPE image it would cut (rows sharing its position)."""
        return int(np.searchsorted(self._at[seq, : index + 1], self._at[seq, index]))

    def checkpoint(self, seq: int = 0, at: int | None = None) -> None:
        """Keep sequence seq's state here (or where a later decode ends at `at`) for a later prompt
        sharing this prefix (recurrent memories; a KV cache keeps every prefix anyway)."""
        self._rollback.checkpoint(seq, self._past[seq], at)

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Make sequence `dst` hold the first `n` cached positions of sequence `src` (what it held is
        dropped). In the unified KV cache `llama_memory_seq_cp` only adds dst's id to those cells (no
        data moves; a split cache would assert on a partial copy), and a later seq_rm of either
        sequence takes only its own id off them, so each side truncates and reuses on its own. A
        recurrent state cannot be shared this way (llama/recurrent.py): refused."""
        if self.rollback != recurrent.TRUNCATE:
            raise LocalspecError(f"a {self.memory_kind} memory cannot share a prefix between sequences")
        if not (0 <= src < self.n_seq and 0 <= dst < self.n_seq and src != dst):
            raise LocalspecError(f"copy_prefix({src}, {dst}): two different sequences of 0..{self.n_seq - 1}")
        if not 0 <= n <= self._past[src]:
            raise LocalspecError(f"sequence {src} holds {self._past[src]} positions, not {n}")
        self.truncate(0, dst)
        n = self._whole(src, n)
        if n:
            C.llama_memory_seq_cp(self._mem, src, dst, 0, self.position(src, n))
        self._shared[src], self._shared[dst] = max(self._shared[src], n), n
        self._past[dst] = n
        self._held[dst, :n] = self._held[src, :n]
        self._at[dst, : n + 1] = self._at[src, : n + 1]

    def reuse_chunks(self, seq: int, prompt: Sequence[int], n_min: int) -> int:
        """Keep what the cache holds of `prompt`: its common prefix, then the cached runs of at least
        `n_min` tokens that it has further back, shifted there (chunk_reuse.py; llama.cpp re-rotates
        their keys at the next decode). Everything past them is dropped; returns how many of
        `prompt`'s tokens the cache now holds. A cache holding an image's rows keeps its prefix."""
        if not self.can_shift:
            raise LocalspecError(f"a {self.memory_kind} memory cannot shift positions (--cache-reuse)")
        past = self._past[seq]
        held = self._held[seq, :past].tolist()
        n, moves, end = chunk_reuse.plan(held, prompt, n_min, self._shared[seq])
        if int(self._at[seq, past]) != past or min(held, default=0) < 0:  # positions are not indices
            self.truncate(n, seq)
            return self._past[seq]
        for src, dst, m in moves:  # a KV cache of text: each position is its index
            C.llama_memory_seq_rm(self._mem, seq, dst, src)
            C.llama_memory_seq_add(self._mem, seq, src, src + m, dst - src)
            held[dst : dst + m] = held[src : src + m]
        C.llama_memory_seq_rm(self._mem, seq, end, -1)
        self._past[seq] = end
        self._shared[seq] = min(self._shared[seq], end)
        self._held[seq, :end] = held[:end]
        self._at[seq, : end + 1] = np.arange(end + 1)
        return end

    def seq_state(self, seq: int) -> bytearray:
        """Sequence seq's whole cache as bytes (llama/seq_state.py), for the prompt cache on disk.
        Text only: a cache holding an image's rows (M-RoPE positions, embeddings no token names) is
        refused."""
        n = self._past[seq]
        if not self.saves_state or (self._held[seq, :n] < 0).any() or int(self._at[seq, n]) != n:
            raise LocalspecError("only a KV cache of text can be saved")
        return seq_state.read(self.ptr, seq)

    def set_seq_state(self, seq: int, data: memoryview, tokens: Sequence[int]) -> bool:
        """Sequence seq holds `tokens` again, from `data` (`seq_state` of a context like this one,
        verified by the caller). False when llama.cpp refused it: the sequence is then empty."""
        n = len(tokens)
        if not self.saves_state or not 0 < n <= self.n_ctx:
            raise LocalspecError(f"cannot restore {n} positions into this context")
        ok = seq_state.write(self.ptr, seq, data)
        if ok and int(C.llama_memory_seq_pos_max(self._mem, seq)) != n - 1:  # not the cells it claims
            C.llama_memory_seq_rm(self._mem, seq, -1, -1)
            ok = False
        past = n if ok else 0
        self._past[seq] = past
        self._held[seq, :past] = tokens[:past]
        self._at[seq, : past + 1] = np.arange(past + 1)  # text: each position is its index
        return ok

    @property
    def rollback_stats(self) -> recurrent.RollbackStats:
        return self._rollback.stats

    def reset(self) -> None:
        C.llama_memory_clear(self._mem, True)
        self._past = [0] * self.n_seq
        self._shared = [0] * self.n_seq
        self._rollback.reset()


class _Batch:
    """The llama_batch, as numpy arrays this object owns (llama_decode only reads it): filled by
    slice assignment instead of a Python loop over tokens. Each token is in one sequence. With
    `n_embd`, a batch of embedding rows (an image's) instead of token ids."""

    def __init__(self, n: int, n_embd: int = 0, n_sections: int = 1) -> None:
        self.token = np.zeros((n, n_embd) if n_embd else n, np.float32 if n_embd else np.int32)
        self.pos = np.zeros(n * n_sections, np.int32)  # M-RoPE rows: section by section
        self.n_seq_id = np.ones(n, np.int32)
        self.seq = np.zeros(n, np.int32)  # token j's one sequence id: seq_id[j] points at seq[j]
        self.logits = np.zeros(n, np.int8)
        p_int = ctypes.POINTER(ctypes.c_int32)
        base = self.seq.ctypes.data
        self._seq_ptrs = (p_int * n)(*(ctypes.cast(base + 4 * j, p_int) for j in range(n)))
        st = C.llama_batch()
        st.token = None if n_embd else self.token.ctypes.data_as(p_int)
        st.embd = self.token.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) if n_embd else None
        st.pos = self.pos.ctypes.data_as(p_int)
        st.n_seq_id = self.n_seq_id.ctypes.data_as(p_int)
        st.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(p_int))
        st.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.struct = st

    def fill(self, tok: np.ndarray, pos: np.ndarray, seq: np.ndarray, want: np.ndarray) -> None:
        m = len(tok)
        self.token[:m], self.seq[:m], self.logits[:m] = tok, seq, want
        self.pos[: pos.size] = pos.ravel()  # (sections, m): llama.cpp reads section j at j * m
        self.struct.n_tokens = m


def _top_k_chain(k: int):  # noqa: ANN202 - a llama_sampler pointer
    chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
    C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_k(k))  # the chain owns it
    return chain


def _top_k_chains(params, n_seq: int, k: int) -> tuple[list, object]:  # noqa: ANN001
    """A top-k sampler chain per sequence, set on the context params (llama.cpp runs them in the
    decode graph); none when k is 0. A sequence may then have any number of rows (a verify batch)."""
    if k <= 0:
        return [None] * n_seq, None
    chains = [_top_k_chain(k) for _ in range(n_seq)]
    configs = (C.llama_sampler_seq_config * n_seq)(
        *(C.llama_sampler_seq_config(s, ctypes.cast(c, ctypes.c_void_p)) for s, c in enumerate(chains))
    )
    params.samplers = ctypes.cast(configs, ctypes.POINTER(C.llama_sampler_seq_config))
    params.n_samplers = n_seq
    params.n_outputs_max_per_seq = 0  # = n_outputs_max: as many rows per sequence as a batch holds
    return chains, configs


def _pack(items) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    """Every item's tokens in order: (token, position, item index, wants logits) per token."""
    lens = [len(tokens) for _, tokens, _, _ in items]
    tok = np.fromiter(itertools.chain.from_iterable(it[1] for it in items), np.int32, sum(lens))
    pos = np.concatenate([np.arange(p, p + n, dtype=np.int32) for (_, _, p, _), n in zip(items, lens)])
    owner = np.repeat(np.arange(len(items)), lens)
    want = np.concatenate([np.arange(n) >= n - it[3] for it, n in zip(items, lens)])
    return tok, pos, owner, want


def _chunk_end(start: int, end: int, owner: np.ndarray, want: np.ndarray) -> int:
    """Where the batch from `start` ends (at most `end`): before the item whose logits rows `end`
    would split, unless that item's rows begin the batch (then they cannot all fit anyway)."""
    if end < len(owner) and want[end] and want[end - 1] and owner[end] == owner[end - 1]:
        idx = owner[end]
        first = start + int(np.flatnonzero((owner[start:end] == idx) & want[start:end])[0])
        if first > start:
            return first
    return end


def decode_busy_s() -> float:
    """How long the llama_decode running now has taken (0 when none runs)."""
    started = BUSY_SINCE[0]
    return time.monotonic() - started if started else 0.0
