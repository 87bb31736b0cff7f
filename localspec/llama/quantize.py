"""Quantization (llama_model_quantize)."""

from __future__ import annotations

import ctypes
import os
import re
from typing import Callable

import llama_cpp as C

from localspec.errors import LocalspecError
from localspec.gguf.file import validate_gguf
from localspec.llama.log import default_threads, init_backend, last_error, listening, log_mark

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
    init_backend()
    params = C.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[key]
    params.nthread = nthread or default_threads()
    params.allow_requantize = allow_requantize

    def on_line(_level: int, line: str) -> None:
        m = _QUANT_LINE.match(line)
        if m and progress is not None:
            progress(int(m.group(1)), int(m.group(2)), m.group(3))

    mark = log_mark()
    with listening(on_line):
        rc = C.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise LocalspecError(f"llama.cpp could not quantize {src} to {ftype}: {last_error(mark)}")
