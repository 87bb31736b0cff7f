"""A loaded GGUF model: weights and vocabulary. Owns the `llama_model *`."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import llama_cpp as C

from localspec.errors import LocalspecError
from localspec.gguf.file import validate_gguf
from localspec.llama.devices import device_array, supports_gpu_offload
from localspec.llama.log import init_backend, last_error, log_mark, log_since
from localspec.llama.owner import Owner

AUTO_BACKEND_TOP_K = 64  # >= any top_k a request usually sends (llama.cpp's default is 40)


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


class Model(Owner):
    """A loaded GGUF model (weights and vocabulary). Owns the `llama_model *`."""

    _ptr = None  # until llama.cpp loaded it (close() may run on a half-made model)

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        n_gpu_layers: int = -1,
        vocab_only: bool = False,
        devices: Sequence[str] | None = None,
        model_params: Mapping[str, Any] | None = None,
    ) -> None:
        """`model_params`: llama_model_params fields a kind of drafter needs set (draft_kinds)."""
        self.path = Path(path)
        validate_gguf(self.path)
        init_backend()
        params = C.llama_model_default_params()
        params.n_gpu_layers = self.n_gpu_layers = n_gpu_layers
        self._cpu_only = devices is not None and not devices
        params.vocab_only = vocab_only
        self.model_params = dict(model_params or {})
        for name, value in self.model_params.items():
            setattr(params, name, value)
        if devices is not None:  # pin to these devices (llama.cpp otherwise spreads layers over every
            # GPU and RPC server); an empty list pins to the CPU
            self._devices = device_array(devices)  # referenced until the load has read it
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        mark = log_mark()
        ptr = C.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            raise LocalspecError(f"llama.cpp could not load {self.path}: {last_error(mark)}")
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
        if self._ptr:
            C.llama_model_free(self._ptr)
            self._ptr = None

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
    def n_embd(self) -> int:
        return int(C.llama_model_n_embd(self.ptr))

    @property
    def n_layer(self) -> int:
        return int(C.llama_model_n_layer(self.ptr))

    def backend_top_k(self) -> int:
        """`--backend-top-k auto` for this model: 64 where its output layer sits on a GPU (the top-k
        runs there and no whole row is copied to the host), 0 on a CPU, where ggml's top-k - a
        partial sort per row - costs the decode more than numpy's pass over the row costs the round
        (docs/sampling.md)."""
        on_gpu = supports_gpu_offload() and not self._cpu_only
        on_gpu = on_gpu and (self.n_gpu_layers < 0 or self.n_gpu_layers > self.n_layer)
        return min(AUTO_BACKEND_TOP_K, self.n_vocab) if on_gpu else 0

    @property
    def n_ctx_train(self) -> int:
        return int(C.llama_model_n_ctx_train(self.ptr))

    @property
    def rope_freq_scale_train(self) -> float:
        """The GGUF's RoPE frequency scale (1 / its context scaling factor; 1 when it has none)."""
        return float(C.llama_model_rope_freq_scale_train(self.ptr)) or 1.0

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        C.llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        raw = C.llama_vocab_get_text(self._live_vocab(), token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def token_attr(self, token: int) -> int:
        """llama.h's llama_token_attr bits (control, user-defined, ...): constrain/ reads them."""
        return int(C.llama_vocab_get_attr(self._live_vocab(), token))

    def is_eog(self, token: int) -> bool:
        return token in self.vocab.eog

    def fim_tokens(self) -> dict[str, int | None]:
        """The vocabulary's fill-in-the-middle tokens (llama.cpp's llama_vocab_fim_*: from the GGUF's
        tokenizer.ggml.fim_*_token_id, or found by their text at load), None where it has none;
        with `eot`, the token the infill sampler ends on."""
        v = self._live_vocab()
        raw = {
            "pre": C.llama_vocab_fim_pre(v), "suf": C.llama_vocab_fim_suf(v), "mid": C.llama_vocab_fim_mid(v),
            "pad": C.llama_vocab_fim_pad(v), "rep": C.llama_vocab_fim_rep(v), "sep": C.llama_vocab_fim_sep(v),
            "eot": C.llama_vocab_eot(v),
        }  # fmt: skip
        return {k: int(t) if 0 <= t < self.n_vocab else None for k, t in raw.items()}

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
        if not self._ptr:
            raise LocalspecError("model already closed")
        return self._vocab

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.token_bytes(t, special=special) for t in tokens).decode(
            "utf-8", errors="replace"
        )
