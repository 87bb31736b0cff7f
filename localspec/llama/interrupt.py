"""Stopping a decode part way: llama.cpp asks an abort callback after every node of its graph, and a
decode it stops returns 2 with that ubatch's cache entries dropped. The callback is C (the compiled
kernels' `abort_callback`, reading one int), so the question costs a load, never the GIL; the int
is set from whichever thread cancels. Without the compiled kernels there is no callback: a decode
runs to its end, as before (`available` says which)."""

from __future__ import annotations

import ctypes

import llama_cpp as C

try:
    from localspec.decode import _kernels
except ImportError:  # pragma: no cover - a build without a C compiler
    _kernels = None


def _callback_address() -> int | None:
    try:
        return _kernels.abort_callback()
    except AttributeError:  # no compiled kernels, or kernels built before the callback was added
        return None


_ADDRESS = _callback_address()


class Interrupt:
    """One flag over the contexts it is attached to: `set()` stops the decode running in any of them
    (it raises `Interrupted`, llama/context.py) and every later one until `clear()`."""

    def __init__(self) -> None:
        self._flag = ctypes.c_int(0)
        self._callback = C.ggml_abort_callback(_ADDRESS) if _ADDRESS is not None else None

    @property
    def available(self) -> bool:
        return self._callback is not None

    def attach(self, ctx_ptr) -> None:  # noqa: ANN001 - a llama_context pointer
        if self._callback is not None:
            C.llama_set_abort_callback(ctx_ptr, self._callback, ctypes.addressof(self._flag))

    def set(self) -> None:
        self._flag.value = 1

    def clear(self) -> None:
        self._flag.value = 0
