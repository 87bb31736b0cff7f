"""MTP ("nextn") self-drafting: the target's own multi-token-prediction head drafts for it.

A model with MTP layers (`llama_model_n_layer_nextn` > 0, loaded with `load_mtp`) gets a second
context of type LLAMA_CONTEXT_TYPE_MTP over the same weights, which runs only the MTP block and
keeps its own small KV cache. The head at position p reads the token x_p and the target's hidden
state h_{p-1} (`h_nextn`, the row that predicted x_p) and predicts x_{p+1}; drafting further, it
reads its own output row instead of the target's. This mirrors llama.cpp's `draft-mtp` driver
(common/speculative.cpp, one trained head as qwen35 has):

- every target decode is *fed* to the MTP context: its tokens, each paired with the target's row of
  the position before (`Context.on_decode`), so the MTP cache always mirrors the target's;
- a draft step decodes (token, h) entries and returns logits rows, like a draft model's context.

The hidden-state calls are llama.cpp's staging API (`src/llama-ext.h`): C++ symbols, bound here by
their mangled names, in this one place, for the tested llama-cpp-python only.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import llama_cpp as C
import numpy as np

from localspec.errors import LocalspecError
from localspec.evaluator import Item
from localspec.llama.context import set_rope

TESTED = ("0.3.36",)  # llama-cpp-python versions whose libllama exports these symbols as bound here
_F32P = ctypes.POINTER(ctypes.c_float)
_CTX = ctypes.c_void_p
_SIGNATURES = {  # name: (Itanium mangled, MSVC mangled, restype, argtypes)
    "set_embeddings_nextn": (
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z",
        None,
        [_CTX, ctypes.c_bool, ctypes.c_bool],
    ),
    "get_embeddings_nextn": (
        "_Z26llama_get_embeddings_nextnP13llama_context",
        "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z",
        _F32P,
        [_CTX],
    ),
    "get_embeddings_nextn_ith": (
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        "?llama_get_embeddings_nextn_ith@@YAPEAMPEAUllama_context@@H@Z",
        _F32P,
        [_CTX, ctypes.c_int32],
    ),
}
_BOUND: dict[str, object] = {}


def staging():  # noqa: ANN201 - a namespace of ctypes functions
    """The MTP staging calls, bound once; one clear refusal when this build lacks them."""
    if not _BOUND:
        version = str(getattr(C, "__version__", "?"))
        if version not in TESTED:
            raise LocalspecError(
                f"MTP drafting uses llama.cpp's staging API, tested with llama-cpp-python {', '.join(TESTED)}; "
                f"this is {version}: install the tested version (make setup) or draft with a model"
            )
        from llama_cpp import llama_cpp as bindings  # noqa: PLC0415 - the handle llama_cpp loaded

        lib = bindings._lib
        for name, (itanium, msvc, res, args) in _SIGNATURES.items():
            fn = getattr(lib, itanium, None) or getattr(lib, msvc, None)
            if fn is None:
                raise LocalspecError(
                    f"this libllama has no llama_{name} (llama.cpp's MTP staging API): "
                    "MTP drafting needs a build that exports it; draft with a model instead"
                )
            fn.restype, fn.argtypes = res, args
            _BOUND[name] = fn
    return type("Staging", (), dict(_BOUND))


def n_layer_nextn(model_ptr) -> int:  # noqa: ANN001 - a llama_model *
    return int(C.llama_model_n_layer_nextn(model_ptr))


class MtpDrafter:
    """The MTP head of `target`'s model as a draft context (the round's draft Evaluator).

    Its cache mirrors the target's: every target decode is fed to it (hence `past` follows the
    target without a catch-up), and the round truncates it as it does a draft model's."""

    # the Evaluator protocol's fields: what the stats call its drafts; the MTP block is attention
    # only, a plain KV cache, but fed by the target's decodes: no prefix copy or checkpoint of its own
    source = "mtp"
    rollback = "truncate"
    memory_kind = "attention"
    max_draft = None
    top_k = 0  # whole rows
    prefix_copy = False
    checkpoints = False
    saves_state = False  # its cache follows the target's decodes: a restored target would leave it behind
    can_shift = False  # ... and so do its positions
    images_whole = True
    _ptr = None  # until llama.cpp made the context

    def __init__(self, target, *, n_threads: int | None = None) -> None:  # noqa: ANN001 - a llama.Context
        model = target.model
        if n_layer_nextn(model.ptr) <= 0:
            raise LocalspecError(
                f"{model.path.name} has no MTP layers (nextn_predict_layers): --draft mtp needs them"
            )
        if not model.model_params.get("load_mtp"):
            raise LocalspecError(
                "the target was loaded without its MTP layers (load_mtp): reload it for --draft mtp"
            )
        S = staging()
        self._S, self.target, self.model = S, target, model
        self.n_seq, self.n_ctx, self.n_vocab = target.n_seq, target.n_ctx, target.n_vocab
        self.n_embd = int(C.llama_model_n_embd_out(model.ptr))
        params = C.llama_context_default_params()
        params.ctx_type = C.LLAMA_CONTEXT_TYPE_MTP
        params.n_ctx = target.n_ctx * target.n_seq
        params.n_batch = target.n_batch
        params.n_ubatch = target.n_batch
        params.n_seq_max = target.n_seq
        params.kv_unified = True
        threads = n_threads or int(C.llama_n_threads(target.ptr))
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        params.ctx_other = target.ptr
        set_rope(params, **target.rope)  # the head reads the target's positions as the target does
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise LocalspecError("llama.cpp could not create the MTP context (see LOCALSPEC_VERBOSE=1)")
        self._ptr, self._mem = ptr, C.llama_get_memory(ptr)
        self._batch = C.llama_batch_ext_init(ptr)
        S.set_embeddings_nextn(
            target.ptr, True, False
        )  # the target's h row for every token, not only logits rows
        S.set_embeddings_nextn(ptr, True, True)  # the head's own h for its output rows (deeper drafts)
        self._past = [0] * self.n_seq
        self._held = np.zeros((self.n_seq, self.n_ctx), np.int32)  # the token at each cached position
        self._rows: list[dict[int, np.ndarray]] = [{} for _ in range(self.n_seq)]  # target h by position
        self._own: list[tuple[int, np.ndarray] | None] = [None] * self.n_seq  # the head's last h row
        self._zero = np.zeros(self.n_embd, np.float32)
        self.feed_s = 0.0  # time spent feeding target decodes (prefill and verify), for the cost model
        target.on_decode = self._feed

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        if self._ptr:
            if self.target.on_decode == self._feed:
                self.target.on_decode = None
            C.llama_batch_ext_free(self._batch)
            C.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> "MtpDrafter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the Evaluator protocol ----------------------------------------------------------------
    def past(self, seq: int = 0) -> int:
        return self._past[seq]

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def cached_tokens(self, seq: int = 0) -> np.ndarray:
        """The token at each cached position, as llama.Context.cached_tokens."""
        return self._held[seq, : self._past[seq]]

    def truncate(self, pos: int, seq: int = 0) -> None:
        if pos < self._past[seq]:
            C.llama_memory_seq_rm(self._mem, seq, pos, -1)
            self._past[seq] = pos

    def reset(self) -> None:
        C.llama_memory_clear(self._mem, True)
        self._past = [0] * self.n_seq
        self._rows = [{} for _ in range(self.n_seq)]
        self._own = [None] * self.n_seq

    def eval(self, tokens: Sequence[int], pos: int, n_logits: int = 1, seq: int = 0) -> np.ndarray:
        return self.eval_batch([Item(seq, tokens, pos, n_logits)])[0]

    def use_top_logits(self, seq: int, on: bool) -> bool:
        return False  # the head gives whole rows

    def eval_views(self, items: Sequence[Item]) -> list[np.ndarray]:
        return self.eval_batch(items)  # its rows are copies already

    def eval_batch(self, items: Sequence[Item]) -> list[np.ndarray]:
        """Draft steps: (seq, tokens, pos, 1) -> the head's logits for each item's last token. The
        first token of an item pairs with the head's own row when the item continues its last step,
        else with the target's row of the position before; later tokens of a multi-token item (a
        lookup's proposal the head extends) reuse that row - an approximation: they are drafts."""
        entries, outs = [], []
        for seq, tokens, pos, n_logits in items:
            if pos != self._past[seq] or n_logits != 1:
                raise LocalspecError(f"MTP step at {pos} with {self._past[seq]} cached (or {n_logits} rows)")
            own = self._own[seq]
            h = own[1] if own is not None and own[0] == pos - 1 else self._row(seq, pos - 1)
            for i, tok in enumerate(tokens):
                entries.append((seq, int(tok), pos + i, h, i == len(tokens) - 1))
            outs.append(len(entries) - 1)
        self._process(entries)
        rows = []
        for (seq, _tokens, _pos, _n), idx in zip(items, outs):
            logits = C.llama_get_logits_ith(self._ptr, idx)
            rows.append(np.array(np.ctypeslib.as_array(logits, shape=(1, self.n_vocab))))
            h = self._S.get_embeddings_nextn_ith(self._ptr, idx)
            self._own[seq] = (entries[idx][2], np.array(np.ctypeslib.as_array(h, shape=(self.n_embd,))))
        return rows

    # -- feeding -------------------------------------------------------------------------------
    def _row(self, seq: int, pos: int) -> np.ndarray:
        return self._rows[seq].get(pos, self._zero)  # a position no target decode showed: no state

    def _feed(self, batch: Sequence[tuple[int, int, int]]) -> None:
        """After a target llama_decode of `batch` [(seq, pos, token)]: its h rows, kept by position,
        and the same tokens through the head, each with the row of the position before."""
        import time  # noqa: PLC0415

        t0 = time.perf_counter()
        h = np.ctypeslib.as_array(
            self._S.get_embeddings_nextn(self.target.ptr), shape=(len(batch), self.n_embd)
        )
        first: dict[int, int] = {}
        for seq, pos, _tok in batch:
            first.setdefault(seq, pos)
        for seq, p0 in first.items():
            self.truncate(p0, seq)  # the head's own draft steps from the last round go
            rows = self._rows[seq]
            for p in [p for p in rows if p < p0 - 1]:  # only the row before this batch is still needed
                del rows[p]
            self._own[seq] = None
        entries = []
        for k, (seq, pos, tok) in enumerate(batch):
            entries.append((seq, tok, pos, self._row(seq, pos - 1), False))
            self._rows[seq][pos] = h[k].copy()
        self._process(entries)
        self.feed_s += time.perf_counter() - t0

    def _process(self, entries: Sequence[tuple[int, int, int, np.ndarray, bool]]) -> None:
        b = self._batch
        C.llama_batch_ext_clear(b)
        pos_c = ctypes.c_int32()
        keep = []
        for seq, tok, pos, h, out in entries:
            idx = C.llama_batch_ext_add_token(b, seq, tok)
            if idx < 0:
                raise LocalspecError(f"the MTP batch is full ({len(entries)} entries)")
            pos_c.value = pos
            C.llama_batch_ext_set_pos(b, idx, ctypes.byref(pos_c))
            row = np.ascontiguousarray(h, np.float32)
            keep.append(row)
            C.llama_batch_ext_set_embd_token(b, idx, C.llama_embd(row.ctypes.data_as(_F32P), 1, self.n_embd))
            if out:
                C.llama_batch_ext_set_output_logits(b, idx, True)
        rc = C.llama_process(self._ptr, C.LLAMA_PROCESS_TYPE_DECODE, b)
        if rc != 0:
            for seq in {e[0] for e in entries}:
                self.truncate(min(e[2] for e in entries if e[0] == seq), seq)
            raise LocalspecError(f"the MTP head's decode failed (code {rc})")
        for seq, tok, pos, _h, _out in entries:
            self._past[seq] = max(self._past[seq], pos + 1)
            self._held[seq, pos] = tok
