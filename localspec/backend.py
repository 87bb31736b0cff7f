"""The llama.cpp backend: the only module that imports `llama_cpp`.

Built on the low-level C API (not `llama_cpp.Llama`): that class forces an n_ctx x n_vocab logits
buffer when drafting and hides the KV cache, and the speculative loop needs both under its control.
Every C handle has one owner and is freed deterministically through `close()` / context managers.
"""

from __future__ import annotations

import collections
import ctypes
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp as C
import numpy as np

from . import rpc
from .errors import LocalspecError
from .gguf_file import validate_gguf

KV_TYPES = {
    "f32": C.GGML_TYPE_F32,
    "f16": C.GGML_TYPE_F16,
    "q8_0": C.GGML_TYPE_Q8_0,
    "q4_0": C.GGML_TYPE_Q4_0,
}
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}

# ---------------------------------------------------------------------------------------------------
# Logging: llama.cpp logs through one process-wide callback. We keep every line in a ring buffer
# (doctor and placement checks read it) and only echo when LOCALSPEC_VERBOSE is set.
_LOG_LINES: collections.deque[tuple[int, str]] = collections.deque(maxlen=20000)
_LOG_LOCK = threading.Lock()
_LOG_PARTIAL: list[str] = []
_LOG_LISTENERS: list[Callable[[int, str], None]] = []
_LOG_COUNT = [0]  # lines ever logged: marks stay valid after the ring wraps (one model load ~3000)
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
        _LOG_COUNT[0] += 1
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
    """A position in the log; `log_since(mark)` are the lines logged after it."""
    with _LOG_LOCK:
        return _LOG_COUNT[0]


def log_since(mark: int) -> list[str]:
    """The lines logged since `log_mark()` returned `mark` (the newest 20000 at most)."""
    with _LOG_LOCK:
        n = min(_LOG_COUNT[0] - mark, len(_LOG_LINES))
        return [line for _, line in list(_LOG_LINES)[len(_LOG_LINES) - n :]] if n > 0 else []


def system_info() -> str:
    _init_backend()
    return C.llama_print_system_info().decode("utf-8", errors="replace").strip()


def supports_gpu_offload() -> bool:
    """Whether this build has a local GPU to offload to (llama.cpp's own answer is yes whenever the
    RPC backend is built in, with or without servers)."""
    return any(d.offloads and not d.remote for d in devices())


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
        devices: Sequence[str] | None = None,
    ) -> None:
        self.path = Path(path)
        validate_gguf(self.path)
        _init_backend()
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        if devices is not None:  # pin to these devices (llama.cpp otherwise spreads layers over every
            # GPU and RPC server); an empty list pins to the CPU
            self._devices = device_array(devices)  # referenced until the load has read it
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        mark = log_mark()
        ptr = C.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            raise LocalspecError(f"llama.cpp could not load {self.path}: {_last_error(mark)}")
        self._ptr = ptr
        self.load_log = log_since(mark)
        self._vocab = C.llama_model_get_vocab(ptr)
        self.n_vocab = int(C.llama_vocab_n_tokens(self._vocab))
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
        raw = C.llama_vocab_get_text(self._live_vocab(), token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def token_attr(self, token: int) -> int:
        return int(C.llama_vocab_get_attr(self._live_vocab(), token))

    def is_eog(self, token: int) -> bool:
        return token in self.vocab.eog

    # -- text ----------------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        # a buffer per call: ctypes releases the GIL inside llama_tokenize, so a shared one would let
        # two threads write into each other's result
        vocab = self._live_vocab()
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (C.llama_token * cap)()
        n = C.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            buf = (C.llama_token * -n)()
            n = C.llama_tokenize(vocab, data, len(data), buf, -n, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The raw bytes of one token; may be part of a UTF-8 character (see detok.Detokenizer)."""
        vocab = self._live_vocab()
        buf = ctypes.create_string_buffer(64)  # per call, like tokenize: any thread may ask
        n = C.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = C.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def _live_vocab(self):  # noqa: ANN202 - a ctypes pointer
        if not getattr(self, "_ptr", None):
            raise LocalspecError("model already closed")
        return self._vocab

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.token_bytes(t, special=special) for t in tokens).decode(
            "utf-8", errors="replace"
        )


def _last_error(mark: int) -> str:
    lines = [ln for ln in log_since(mark) if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    return (errs or lines or ["(no log)"])[-1].strip()


# when the running llama_decode started (0: none runs): the RPC watchdog's measure of a stall
_BUSY_SINCE = [0.0]


class Context:
    """One inference context (KV cache + compute buffers) over a Model, for `n_seq` sequences.

    Created once; the batch is allocated once. Each sequence (0..n_seq-1) may hold up to `n_ctx`
    tokens: the KV cache is one unified buffer of n_ctx * n_seq cells shared by all sequences, so
    every sequence can always reach its n_ctx whatever the others hold. `eval()` (one sequence)
    returns logits rows as numpy *views* into llama.cpp's buffer, valid until the next decode;
    `eval_batch()` (several sequences in one decode) returns copies.
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
        n_seq: int = 1,
    ) -> None:
        if kv_type not in KV_TYPES:
            raise LocalspecError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
        if flash_attn not in FLASH_ATTN:
            raise LocalspecError(f"flash_attn must be one of {', '.join(FLASH_ATTN)}")
        if n_seq < 1:
            raise LocalspecError(f"n_seq must be >= 1 (got {n_seq})")
        self.model = model
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
        mark = log_mark()
        ptr = C.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise LocalspecError(
                f"llama.cpp could not create a context (n_ctx={n_ctx} x {n_seq} sequences): {_last_error(mark)}"
            )
        self._ptr = ptr
        self.init_log = log_since(mark)
        self.n_seq = n_seq
        self.n_ctx = min(n_ctx, int(C.llama_n_ctx(ptr)))  # per sequence
        self.n_batch = int(C.llama_n_batch(ptr))  # llama.cpp clamps n_batch to n_ctx
        self.n_vocab = model.n_vocab
        self._mem = C.llama_get_memory(ptr)
        self._batch = C.llama_batch_init(self.n_batch, 0, 1)
        self._has_batch = True
        self._past = [0] * n_seq  # tokens each sequence has in the KV cache (positions 0..past-1)

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

    @property
    def ptr(self):  # noqa: ANN201 - a ctypes pointer
        if not getattr(self, "_ptr", None):
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

    def eval(self, tokens: Sequence[int], pos: int, n_logits: int = 1, seq: int = 0) -> np.ndarray:
        """Decode `tokens` of sequence `seq` at positions pos.. and return logits for the last
        `n_logits` of them: a (n_logits, n_vocab) float32 view, valid until the next decode.

        Positions past `pos` must be empty (call `truncate` first). Long inputs are split into n_batch
        chunks; only the final chunk asks for logits."""
        self._check(seq, tokens, pos, n_logits)
        self._decode([(seq, tokens, pos, n_logits)])
        return np.ctypeslib.as_array(C.llama_get_logits(self.ptr), shape=(n_logits, self.n_vocab))

    def eval_batch(self, items: Sequence[tuple[int, Sequence[int], int, int]]) -> list[np.ndarray]:
        """Several sequences at once: items are (seq, tokens, pos, n_logits); returns one
        (n_logits, n_vocab) array per item (copies). Everything goes into as few decodes as n_batch
        allows - one, whenever the tokens fit."""
        for seq, tokens, pos, n_logits in items:
            self._check(seq, tokens, pos, n_logits)
        if len({seq for seq, *_ in items}) != len(items):
            raise LocalspecError("eval_batch() takes each sequence at most once")
        return self._decode(items, copy=True)

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

    def _decode(self, items, copy: bool = False) -> list[np.ndarray]:  # noqa: ANN001
        """Pack the items' tokens into batches of at most n_batch and decode them in order. A batch
        boundary never splits one item's logits rows unless that item alone fills a batch."""
        ptr, b = self.ptr, self._batch
        rows: list[list[np.ndarray]] = [[] for _ in items]
        queue = []  # (item index, token, pos, wants logits)
        for idx, (_seq, tokens, pos, n_logits) in enumerate(items):
            first_out = len(tokens) - n_logits
            queue.extend((idx, tokens[i], pos + i, i >= first_out) for i in range(len(tokens)))
        start = 0
        while start < len(queue):
            end = min(len(queue), start + self.n_batch)
            # keep an item's logits rows in one decode when they can be (a single view suffices)
            if (
                end < len(queue)
                and queue[end][3]
                and queue[end - 1][3]
                and queue[end][0] == queue[end - 1][0]
            ):
                idx = queue[end][0]
                first = next(j for j in range(start, end) if queue[j][0] == idx and queue[j][3])
                if first > start:
                    end = first
            for j in range(start, end):
                idx, tok, p, want = queue[j]
                b.token[j - start] = tok
                b.pos[j - start] = p
                b.n_seq_id[j - start] = 1
                b.seq_id[j - start][0] = items[idx][0]
                b.logits[j - start] = 1 if want else 0
            b.n_tokens = end - start
            _BUSY_SINCE[0] = time.monotonic()  # the RPC watchdog's measure of a stalled decode
            try:
                rc = C.llama_decode(ptr, b)
            finally:
                _BUSY_SINCE[0] = 0.0
            if rc != 0:
                # a failed decode can leave partial entries: drop them so every cache stays consistent
                for seq in {items[queue[j][0]][0] for j in range(start, end)}:
                    first_pos = min(queue[j][2] for j in range(start, end) if items[queue[j][0]][0] == seq)
                    C.llama_memory_seq_rm(self._mem, seq, first_pos, -1)
                    self._past[seq] = first_pos
                raise LocalspecError(f"llama_decode failed (code {rc}) at position {queue[start][2]}")
            n_out = 0
            for j in range(start, end):
                idx, _tok, p, want = queue[j]
                self._past[items[idx][0]] = p + 1
                n_out += want
            if copy and n_out:
                # a copy: the next decode overwrites llama.cpp's logits buffer
                logits = np.array(np.ctypeslib.as_array(C.llama_get_logits(ptr), shape=(n_out, self.n_vocab)))
                r = 0
                for j in range(start, end):
                    if queue[j][3]:
                        rows[queue[j][0]].append(logits[r])
                        r += 1
            start = end
        if not copy:
            return []
        return [np.stack(rs) if rs else np.zeros((0, self.n_vocab), np.float32) for rs in rows]

    def truncate(self, pos: int, seq: int = 0) -> None:
        """Forget every cached position >= pos of sequence `seq` (the single KV-rollback operation)."""
        if pos < self._past[seq]:
            if not C.llama_memory_seq_rm(self._mem, seq, pos, -1):
                raise LocalspecError(f"this model's cache cannot be rolled back to position {pos}")
            self._past[seq] = pos

    def reset(self) -> None:
        C.llama_memory_clear(self._mem, True)
        self._past = [0] * self.n_seq


# ---------------------------------------------------------------------------------------------------
# Quantization (llama_model_quantize). llama.cpp logs one "[  i/ n] name ..." line per tensor; that
# log is the only progress signal it gives, so a listener turns those lines into progress(i, n, name).
QUANT_TYPES = {
    "f32": C.LLAMA_FTYPE_ALL_F32,
    "f16": C.LLAMA_FTYPE_MOSTLY_F16,
    "bf16": C.LLAMA_FTYPE_MOSTLY_BF16,
    "q8_0": C.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q6_k": C.LLAMA_FTYPE_MOSTLY_Q6_K,
    "q5_k_m": C.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "q5_k_s": C.LLAMA_FTYPE_MOSTLY_Q5_K_S,
    "q5_0": C.LLAMA_FTYPE_MOSTLY_Q5_0,
    "q5_1": C.LLAMA_FTYPE_MOSTLY_Q5_1,
    "q4_k_m": C.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "q4_k_s": C.LLAMA_FTYPE_MOSTLY_Q4_K_S,
    "q4_0": C.LLAMA_FTYPE_MOSTLY_Q4_0,
    "q4_1": C.LLAMA_FTYPE_MOSTLY_Q4_1,
    "q3_k_m": C.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    "q2_k": C.LLAMA_FTYPE_MOSTLY_Q2_K,
}
_QUANT_LINE = re.compile(r"^\[\s*(\d+)/\s*(\d+)\]\s+(\S+)")


def quantize(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    ftype: str,
    *,
    nthread: int | None = None,
    allow_requantize: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
) -> None:
    """Quantize GGUF `src` into `dst` (written in place: callers wanting atomicity pass a temp path)."""
    key = ftype.lower()
    if key not in QUANT_TYPES:
        raise LocalspecError(f"unknown quantization type {ftype!r}; choose one of {', '.join(QUANT_TYPES)}")
    validate_gguf(src)
    _init_backend()
    params = C.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[key]
    params.nthread = nthread or default_threads()
    params.allow_requantize = allow_requantize

    def on_line(_level: int, line: str) -> None:
        m = _QUANT_LINE.match(line)
        if m and progress is not None:
            progress(int(m.group(1)), int(m.group(2)), m.group(3))

    mark = log_mark()
    with _LOG_LOCK:
        _LOG_LISTENERS.append(on_line)
    try:
        rc = C.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    finally:
        with _LOG_LOCK:
            _LOG_LISTENERS.remove(on_line)
    if rc != 0:
        raise LocalspecError(f"llama.cpp could not quantize {src} to {ftype}: {_last_error(mark)}")


# ---------------------------------------------------------------------------------------------------
# Devices (ggml's backend device API). llama-cpp-python binds llama.h but not these ggml calls, so they
# are bound here with ctypes on the libggml it already loaded; only plain dataclasses leave this module.
DEVICE_KINDS = ("cpu", "gpu", "igpu", "accel")  # enum ggml_backend_dev_type, in order


@dataclass(frozen=True)
class Device:
    name: str  # "CPU", "CUDA0", "Vulkan0", "MTL0", ... as llama.cpp's log names buffers
    description: str
    kind: str  # one of DEVICE_KINDS
    total_bytes: int
    free_bytes: int
    backend: str  # the registry it belongs to: "CPU", "CUDA", "Metal", ...

    @property
    def offloads(self) -> bool:
        """Whether llama.cpp can put model layers on it (n_gpu_layers)."""
        return self.kind in ("gpu", "igpu")

    @property
    def remote(self) -> bool:
        """A device of an rpc-server (its description is the server's HOST:PORT)."""
        return self.backend == "RPC"


_GGML_LIB = None
_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml_abort_callback_t


def _ggml():  # noqa: ANN202 - a ctypes.CDLL
    global _GGML_LIB
    if _GGML_LIB is None:
        from llama_cpp import _ggml as G  # noqa: PLC0415 - the handle llama_cpp already holds

        lib = G.libggml
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for fn, res, args in (
            ("ggml_backend_dev_count", sz, []),
            ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_reg_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_by_name", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_by_name", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
            ("ggml_backend_register", None, [vp]),
            ("ggml_set_abort_callback", vp, [_ABORT_CB]),
        ):
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        _GGML_LIB = lib
    return _GGML_LIB


def _str(b: bytes | None) -> str:
    return b.decode("utf-8", errors="replace") if b else ""


def devices() -> list[Device]:
    """Every device this llama.cpp build can use, with its memory as the driver reports it now."""
    _init_backend()
    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        out.append(
            Device(
                name=_str(lib.ggml_backend_dev_name(dev)),
                description=_str(lib.ggml_backend_dev_description(dev)),
                kind=DEVICE_KINDS[kind] if 0 <= kind < len(DEVICE_KINDS) else f"type{kind}",
                total_bytes=int(total.value),
                free_bytes=int(free.value),
                backend=_str(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
            )
        )
    return out


def device_array(names: Sequence[str]):  # noqa: ANN201 - a ctypes array
    """A NULL-terminated ggml_backend_dev_t array for llama_model_params.devices (pins a model to
    these devices). The caller keeps it alive until the model is loaded."""
    _init_backend()
    lib = _ggml()
    arr = (ctypes.c_void_p * (len(names) + 1))()
    for i, name in enumerate(names):
        dev = lib.ggml_backend_dev_by_name(name.encode())
        if not dev:
            raise LocalspecError(f"no llama.cpp device named {name!r}")
        arr[i] = dev
    return arr


# ---------------------------------------------------------------------------------------------------
# RPC servers (ggml-rpc): ggml_backend_rpc_add_server is reached through the RPC registry's proc
# address, as llama.cpp's own --rpc does, then registered so llama.cpp sees its devices. llama.cpp
# aborts the process on any RPC connection failure, so the endpoints are probed first and an abort
# callback turns a later failure into one line and exit status 1 (rpc.py says why).
_RPC_ADD = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_RPC_ENDPOINTS: list[str] = []  # registered in this process, in order (a registry is never removed)
_RPC_GUARD: list = []  # the abort callback and the watchdog, kept alive for the process


def rpc_supported() -> bool:
    """Whether this llama.cpp was built with -DGGML_RPC=ON."""
    _init_backend()
    return bool(C.llama_supports_rpc())


def rpc_endpoints() -> tuple[str, ...]:
    return tuple(_RPC_ENDPOINTS)


def add_rpc_servers(endpoints: Sequence[str], *, stall_s: float = 30.0) -> None:
    """Make each rpc-server's devices llama.cpp devices (probing each first; idempotent)."""
    new = [e for e in endpoints if e not in _RPC_ENDPOINTS]
    if not new:
        return
    if not rpc_supported():
        raise LocalspecError(
            "--rpc needs llama-cpp-python built with -DGGML_RPC=ON: rebuild with `make setup` (GPU "
            'users: add it to their flags, e.g. CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=ON")'
        )
    for e in new:  # before llama.cpp connects: its own failure to connect is an abort
        rpc.probe(e)
    lib = _ggml()
    _guard_rpc(lib, stall_s)
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server") if reg else None
    if not fn:
        raise LocalspecError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server")
    add = _RPC_ADD(fn)
    for e in new:
        server_reg = add(e.encode())
        if not server_reg:
            raise LocalspecError(f"rpc-server at {e} reports no devices")
        lib.ggml_backend_register(server_reg)
        _RPC_ENDPOINTS.append(e)


_RPC_ON_LOST: list[Callable[[str], None]] = []  # `localspec serve`'s recovery, see on_rpc_lost


def on_rpc_lost(handler: Callable[[str], None] | None) -> None:
    """Who hears first that an rpc-server is lost (the one line rpc.py makes of it). The handler runs
    on llama.cpp's thread, which must never return into llama.cpp (abort() follows): it either takes
    over for good (blocks, then ends the process its own way) or returns to decline, and the process
    exits with the line and status 1 as without a handler."""
    _RPC_ON_LOST[:] = [handler] if handler else []


def _rpc_fatal(line: str) -> None:
    for handler in list(_RPC_ON_LOST):
        handler(line)
    os.write(2, f"error: {line}\n".encode())
    os._exit(1)


def _guard_rpc(lib, stall_s: float) -> None:  # noqa: ANN001
    if _RPC_GUARD:
        return

    def on_abort(message: bytes | None) -> None:  # runs on llama.cpp's thread, just before abort()
        text = _str(message)
        _rpc_fatal(rpc.explain_abort(text, _RPC_ENDPOINTS, log_lines()[-50:]))

    cb = _ABORT_CB(on_abort)
    lib.ggml_set_abort_callback(cb)
    _RPC_GUARD.extend([cb, rpc.Watchdog(_RPC_ENDPOINTS, decode_busy_s, _rpc_fatal, stall_s=stall_s)])


def decode_busy_s() -> float:
    """How long the llama_decode running now has taken (0 when none runs)."""
    started = _BUSY_SINCE[0]
    return time.monotonic() - started if started else 0.0


def llama_cpp_version() -> str:
    return str(getattr(C, "__version__", "?"))
