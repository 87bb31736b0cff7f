"""ggml's backend devices. llama-cpp-python binds llama.h but not these ggml calls, so they are
bound here with ctypes on the libggml it already loaded; only plain dataclasses leave this module."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Sequence

from localspec.errors import LocalspecError
from localspec.llama.log import init_backend

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
ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml_abort_callback_t


def ggml_lib():  # noqa: ANN202 - a ctypes.CDLL
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
            ("ggml_set_abort_callback", vp, [ABORT_CB]),
        ):
            f = getattr(lib, fn)
            f.restype, f.argtypes = res, args
        _GGML_LIB = lib
    return _GGML_LIB


def c_str(b: bytes | None) -> str:
    return b.decode("utf-8", errors="replace") if b else ""


def devices() -> list[Device]:
    """Every device this llama.cpp build can use, with its memory as the driver reports it now."""
    init_backend()
    lib = ggml_lib()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        out.append(
            Device(
                name=c_str(lib.ggml_backend_dev_name(dev)),
                description=c_str(lib.ggml_backend_dev_description(dev)),
                kind=DEVICE_KINDS[kind] if 0 <= kind < len(DEVICE_KINDS) else f"type{kind}",
                total_bytes=int(total.value),
                free_bytes=int(free.value),
                backend=c_str(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
            )
        )
    return out


def device_array(names: Sequence[str]):  # noqa: ANN201 - a ctypes array
    """A NULL-terminated ggml_backend_dev_t array for llama_model_params.devices (pins a model to
    these devices). The caller keeps it alive until the model is loaded."""
    init_backend()
    lib = ggml_lib()
    arr = (ctypes.c_void_p * (len(names) + 1))()
    for i, name in enumerate(names):
        dev = lib.ggml_backend_dev_by_name(name.encode())
        if not dev:
            raise LocalspecError(f"no llama.cpp device named {name!r}")
        arr[i] = dev
    return arr


def supports_gpu_offload() -> bool:
    """Whether this build has a local GPU to offload to (llama.cpp's own answer is yes whenever the
    RPC backend is built in, with or without servers)."""
    return any(d.offloads and not d.remote for d in devices())
