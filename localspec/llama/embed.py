"""The served model's embeddings context: a second llama.cpp context on the target's weights with
embeddings on, pooled as the GGUF says (`{arch}.pooling_type`), mean where it says none (a chat
model's GGUF says none: llama.cpp would then give one vector per token).

llama.cpp pools each sequence over the micro-batch it rides in, so an input must fit one micro-batch:
the context's n_ctx, n_batch and n_ubatch are all `n_ctx` (llama-server refuses longer inputs the
same way). Several short inputs share one decode, a sequence each. Its buffers are reserved at
creation by a warm-up decode, so a request never allocates; the memory plan counts them
(gguf/memory_plan.py, `embeddings_plan`)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import llama_cpp as C
import numpy as np

from localspec.errors import LocalspecError
from localspec.gguf.memory_plan import EMBED_SEQS
from localspec.gguf.pooling import declared_pooling
from localspec.llama.context import FLASH_ATTN, KV_TYPES, _Batch
from localspec.llama.log import default_threads, last_error, log_mark, log_since
from localspec.llama.model import Model
from localspec.llama.owner import Owner

_TO_LLAMA = {
    "mean": C.LLAMA_POOLING_TYPE_MEAN,
    "cls": C.LLAMA_POOLING_TYPE_CLS,
    "last": C.LLAMA_POOLING_TYPE_LAST,
}


def pooling_of(model: Model) -> str:
    """How this model's embeddings are pooled: mean, cls or last (its GGUF's pooling_type; none,
    or no key, is mean here: a chat model's GGUF says none and llama.cpp would give a vector per token)."""
    arch = model.meta("general.architecture") or ""
    kind = declared_pooling(model.meta(f"{arch}.pooling_type"))
    if kind == "rank":
        raise LocalspecError(
            f"{model.path.name} is a reranker (pooling_type rank): it makes scores, not embeddings"
        )
    return "mean" if kind == "none" else kind


class Embedder(Owner):
    """Pooled embeddings of token sequences, one decode per call. Owns its context."""

    _ptr = None  # until llama.cpp made the context (close() may run on a half-made one)

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_threads: int | None = None,
        flash_attn: str = "auto",
        kv_type: str = "f16",
    ) -> None:
        self.model, self.pooling = model, pooling_of(model)
        threads = n_threads or default_threads()
        params = C.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx  # an input in one micro-batch
        params.n_seq_max = EMBED_SEQS
        params.kv_unified = True  # the sequences of one decode share n_ctx cells
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = FLASH_ATTN[flash_attn]
        params.type_k = params.type_v = KV_TYPES[kv_type]
        params.embeddings = True
        params.pooling_type = _TO_LLAMA[self.pooling]
        params.no_perf = True
        mark = log_mark()
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise LocalspecError(
                f"llama.cpp could not create the embeddings context (--embed-ctx {n_ctx}): {last_error(mark)}"
            )
        self._ptr = ptr
        self.n_ctx = min(n_ctx, int(C.llama_n_ctx(ptr)), int(C.llama_n_ubatch(ptr)))
        self.n_embd = int(C.llama_model_n_embd(model.ptr))
        self._mem = C.llama_get_memory(ptr)
        self._batch = _Batch(self.n_ctx)
        self.embed([[model.vocab.bos if model.vocab.bos >= 0 else 0]] * 2)  # reserve the buffers now
        self.init_log = log_since(mark)

    def close(self) -> None:
        if self._ptr:
            C.llama_free(self._ptr)
            self._ptr = None

    def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One pooled vector per input, (len(inputs), n_embd) float32, in one decode: together the
        inputs hold at most n_ctx tokens, and there are at most EMBED_SEQS of them."""
        lens = [len(x) for x in inputs]
        if not inputs or len(inputs) > EMBED_SEQS or min(lens) == 0 or sum(lens) > self.n_ctx:
            raise LocalspecError(
                f"an embeddings pass takes 1-{EMBED_SEQS} non-empty inputs of {self.n_ctx} tokens in all (got {lens})"
            )
        if not self._ptr:
            raise LocalspecError("the embeddings context is closed")
        tok = np.fromiter((t for x in inputs for t in x), np.int32, sum(lens))
        pos = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
        seq = np.repeat(np.arange(len(inputs), dtype=np.int32), lens)
        self._batch.fill(tok, pos, seq, np.ones(len(tok), np.int8))
        C.llama_memory_clear(self._mem, True)
        mark = log_mark()
        rc = C.llama_decode(self._ptr, self._batch.struct)
        if rc != 0:
            raise LocalspecError(f"llama_decode failed (code {rc}) for embeddings: {last_error(mark)}")
        out = np.empty((len(inputs), self.n_embd), np.float32)
        for s in range(len(inputs)):
            ptr = C.llama_get_embeddings_seq(self._ptr, s)
            if not ptr:
                raise LocalspecError(f"llama.cpp returned no embedding for sequence {s}")
            out[s] = np.ctypeslib.as_array(
                ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.n_embd,)
            )
        return out
