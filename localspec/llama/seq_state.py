"""One sequence's KV cache as bytes, out of a context and back into one: what llama-server's slot save
and restore write (`llama_state_seq_save_file` is this serialisation after a token list), taken as
a buffer so that the prompt cache on disk (engine/prompt_disk) can frame it with its own key and
checksum and hand llama.cpp only bytes it has verified. Both run on the engine thread: the copy
reads the cache tensors (a device-to-host copy on a GPU) while no decode writes them."""

from __future__ import annotations

import ctypes

import llama_cpp as C


def read(ctx_ptr, seq: int) -> bytearray:  # noqa: ANN001 - a llama_context *
    """Sequence seq's cells (positions, K and V of every layer) as llama.cpp serialises them."""
    size = int(C.llama_state_seq_get_size(ctx_ptr, seq))
    buf = bytearray(size)
    if size:
        written = int(C.llama_state_seq_get_data(ctx_ptr, _view(buf), size, seq))
        del buf[written:]  # llama.cpp may write less than it sized (never more)
    return buf


def write(ctx_ptr, seq: int, data: memoryview) -> bool:  # noqa: ANN001
    """Replace sequence seq's cells with `data` (from `read`, verified by the caller). False when
    llama.cpp refused it; the sequence is then empty (it drops the old cells before reading)."""
    if not len(data):
        return False
    return int(C.llama_state_seq_set_data(ctx_ptr, _view(data), len(data), seq)) > 0


def _view(buf: bytearray | memoryview):  # noqa: ANN202 - a ctypes uint8 array over buf, no copy
    return (ctypes.c_uint8 * len(buf)).from_buffer(buf)
