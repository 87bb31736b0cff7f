"""The llama.cpp backend: the only module that imports `llama_cpp`.

Built on the low-level C API (not `llama_cpp.Llama`): that class forces an n_ctx x n_vocab logits
buffer when drafting and hides the KV cache, and the speculative loop needs both under its control.
Every C handle has one owner and is freed deterministically through `close()` / context managers.
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import llama_cpp as C

from .errors import LocalspecError
from .gguf_file import validate_gguf

KV_TYPES = {"f32": C.GGML_TYPE_F32, "f16": C.GGML_TYPE_F16, "q8_0": C.GGML_TYPE_Q8_0, "q4_0": C.GGML_TYPE_Q4_0}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}

# ---------------------------------------------------------------------------------------------------
# Logging: llama.cpp logs through one process-wide callback. We keep every line in a ring buffer
# (doctor and placement checks read it) and only echo when LOCALSPEC_VERBOSE is set.
_LOG_LINES: collections.deque[tuple[int, str]] = collections.deque(maxlen=20000)
_LOG_LOCK = threading.Lock()
_LOG_PARTIAL: list[str] = []
_LOG_LISTENERS: list[Callable[[int, str], None]] = []
_VERBOSE = bool(os.environ.get("LOCALSPEC_VERBOSE"))


def _on_log(level: int, text: bytes | None, _user: ctypes.c_void_p) -> None:
    if not text:
        return
    s = text.decode("utf-8", errors="replace")
    with _LOG_LOCK:
        _LOG_PARTIAL.append(s)
        if not s.endswith("\n"):
            return  # llama.cpp sometimes emits one line in several calls (GGML_LOG_LEVEL_CONT)
        line = "".join(_LOG_PARTIAL).rstrip("\n")
        _LOG_PARTIAL.clear()
        _LOG_LINES.append((level, line))
        listeners = list(_LOG_LISTENERS)
    for fn in listeners:
        fn(level, line)
    if _VERBOSE:
        os.write(2, (line + "\n").encode())


# C keeps this pointer for the life of the process: the module-level reference keeps it alive.
_LOG_CALLBACK = C.llama_log_callback(_on_log)
_BACKEND_READY = False


def _init_backend() -> None:
    global _BACKEND_READY
    if not _BACKEND_READY:
        C.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        C.llama_backend_init()
        _BACKEND_READY = True


def log_lines() -> list[str]:
    """Every llama.cpp log line captured so far in this process (most recent last)."""
    with _LOG_LOCK:
        return [line for _, line in _LOG_LINES]


def log_mark() -> int:
    """A position in the log; `log_lines()[mark:]` are the lines since (until the ring wraps)."""
    with _LOG_LOCK:
        return len(_LOG_LINES)


def system_info() -> str:
    _init_backend()
    return C.llama_print_system_info().decode("utf-8", errors="replace").strip()


def supports_gpu_offload() -> bool:
    _init_backend()
    return bool(C.llama_supports_gpu_offload())


def default_threads() -> int:
    import psutil

    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VocabFacts:
    """What the pair check and the loop need to know about a vocabulary."""

    vocab_type: int
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool
    eog: frozenset[int]


class Model:
    """A loaded GGUF model (weights and vocabulary). Owns the `llama_model *`."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        n_gpu_layers: int = -1,
        vocab_only: bool = False,
    ) -> None:
        self.path = Path(path)
        validate_gguf(self.path)
        _init_backend()
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        mark = log_mark()
        ptr = C.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            raise LocalspecError(f"llama.cpp could not load {self.path}: {_last_error(mark)}")
        self._ptr = ptr
        self.load_log = log_lines()[mark:]
        self._vocab = C.llama_model_get_vocab(ptr)
        self.n_vocab = int(C.llama_vocab_n_tokens(self._vocab))
        self._piece_buf = ctypes.create_string_buffer(256)
        self._tok_buf = (C.llama_token * 0)()
        eog = frozenset(t for t in range(self.n_vocab) if C.llama_vocab_is_eog(self._vocab, t))
        self.vocab = VocabFacts(
            vocab_type=int(C.llama_vocab_type(self._vocab)),
            n_tokens=self.n_vocab,
            bos=int(C.llama_vocab_bos(self._vocab)),
            eos=int(C.llama_vocab_eos(self._vocab)),
            add_bos=bool(C.llama_vocab_get_add_bos(self._vocab)),
            add_eos=bool(C.llama_vocab_get_add_eos(self._vocab)),
            eog=eog,
        )

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_ptr", None):
            C.llama_model_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; owners call close()
        try:
            self.close()
        except Exception:
            pass

    @property
    def ptr(self):  # noqa: ANN201 - a ctypes pointer
        if not self._ptr:
            raise LocalspecError("model already closed")
        return self._ptr

    # -- facts ---------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(8192)
        n = C.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            C.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        tmpl = C.llama_model_chat_template(self.ptr, None)
        return tmpl.decode("utf-8") if tmpl else None

    @property
    def n_params(self) -> int:
        return int(C.llama_model_n_params(self.ptr))

    @property
    def size_bytes(self) -> int:
        return int(C.llama_model_size(self.ptr))

    @property
    def n_layer(self) -> int:
        return int(C.llama_model_n_layer(self.ptr))

    @property
    def n_ctx_train(self) -> int:
        return int(C.llama_model_n_ctx_train(self.ptr))

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        C.llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        raw = C.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def token_attr(self, token: int) -> int:
        return int(C.llama_vocab_get_attr(self._vocab, token))

    def is_eog(self, token: int) -> bool:
        return token in self.vocab.eog

    # -- text ----------------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        if len(self._tok_buf) < cap:
            self._tok_buf = (C.llama_token * cap)()
        n = C.llama_tokenize(self._vocab, data, len(data), self._tok_buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            self._tok_buf = (C.llama_token * -n)()
            n = C.llama_tokenize(self._vocab, data, len(data), self._tok_buf, -n, add_special, parse_special)
        return list(self._tok_buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The raw bytes of one token; may be part of a UTF-8 character (see detok.Detokenizer)."""
        n = C.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        if n < 0:
            self._piece_buf = ctypes.create_string_buffer(-n)
            n = C.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, special)
        return self._piece_buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.token_bytes(t, special=special) for t in tokens).decode("utf-8", errors="replace")


def _last_error(mark: int) -> str:
    lines = [ln for ln in log_lines()[mark:] if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errs or lines or ["(no log)"])[-1].strip()


class Context:
    """One inference context (KV cache + compute buffers) over a Model, for a single sequence.

    Created once with a fixed n_ctx; the batch is allocated once. `eval()` returns logits rows as
    numpy *views* into llama.cpp's buffer: they are valid until the next `eval()` on this context.
    """

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
    ) -> None:
        if kv_type not in KV_TYPES:
            raise LocalspecError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
        if flash_attn not in FLASH_ATTN:
            raise LocalspecError(f"flash_attn must be one of {', '.join(FLASH_ATTN)}")
        self.model = model
        threads = n_threads or default_threads()
        params = C.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = min(n_ubatch, n_batch)
        params.n_seq_max = 1
        params.n_threads = threads
        params.n_threads_batch = threads
        params.flash_attn_type = FLASH_ATTN[flash_attn]
        params.type_k = KV_TYPES[kv_type]
        params.type_v = KV_TYPES[kv_type]
        params.no_perf = True
        mark = log_mark()
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise LocalspecError(f"llama.cpp could not create a context (n_ctx={n_ctx}): {_last_error(mark)}")
        self._ptr = ptr
        self.init_log = log_lines()[mark:]
        self.n_ctx = int(C.llama_n_ctx(ptr))
        self.n_batch = n_batch
        self.n_vocab = model.n_vocab
        self._mem = C.llama_get_memory(ptr)
        self._batch = C.llama_batch_init(n_batch, 0, 1)
        self._has_batch = True
        self.n_past = 0  # tokens currently in the KV cache (positions 0..n_past-1)

    def close(self) -> None:
        if getattr(self, "_has_batch", False):
            C.llama_batch_free(self._batch)
            self._has_batch = False
        if getattr(self, "_ptr", None):
            C.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)

    def eval(self, tokens: Sequence[int], pos: int, n_logits: int = 1) -> np.ndarray:
        """Decode `tokens` at positions pos.. and return logits for the last `n_logits` of them.

        Positions past `pos` must be empty (call `truncate` first); returns a (n_logits, n_vocab)
        float32 view. Long inputs are split into n_batch chunks; only the final chunk asks for logits.
        """
        n = len(tokens)
        if n == 0:
            raise LocalspecError("eval() needs at least one token")
        if not 0 < n_logits <= min(n, self.n_batch):
            raise LocalspecError(f"n_logits={n_logits} must be in 1..{min(n, self.n_batch)}")
        if pos != self.n_past:
            raise LocalspecError(f"eval at position {pos} but the cache holds {self.n_past} tokens")
        if pos + n > self.n_ctx:
            raise LocalspecError(
                f"context is full: {pos + n} tokens needed, n_ctx is {self.n_ctx} (raise --n-ctx)"
            )
        b = self._batch
        start = 0
        while start < n:
            end = min(n, start + self.n_batch)
            # keep the last chunk big enough to hold every row that wants logits
            if end < n and n - end < n_logits:
                end = n - n_logits
            first_out = n - n_logits
            for j, i in enumerate(range(start, end)):
                b.token[j] = tokens[i]
                b.pos[j] = pos + i
                b.n_seq_id[j] = 1
                b.seq_id[j][0] = 0
                b.logits[j] = 1 if i >= first_out else 0
            b.n_tokens = end - start
            rc = C.llama_decode(self._ptr, b)
            if rc != 0:
                # a failed decode can leave partial entries: drop them so the cache stays consistent
                C.llama_memory_seq_rm(self._mem, 0, pos + start, -1)
                self.n_past = pos + start
                raise LocalspecError(f"llama_decode failed (code {rc}) at position {pos + start}")
            self.n_past = pos + end
            start = end
        ptr = C.llama_get_logits(self._ptr)
        return np.ctypeslib.as_array(ptr, shape=(n_logits, self.n_vocab))

    def truncate(self, pos: int) -> None:
        """Forget every cached position >= pos (the single KV-rollback operation)."""
        if pos < self.n_past:
            if not C.llama_memory_seq_rm(self._mem, 0, pos, -1):
                raise LocalspecError(f"this model's cache cannot be rolled back to position {pos}")
            self.n_past = pos

    def reset(self) -> None:
        C.llama_memory_clear(self._mem, True)
        self.n_past = 0
