"""Fast GGUF header reading and validation, before llama.cpp ever sees a file.

`gguf.GGUFReader` builds a numpy object per array element and takes seconds on a 262k-token
vocabulary (7.5 s for Gemma-3-270M here); startup checks, the pair check and the memory planner only
need the scalar metadata and the tensor table, so this reads the header in one pass and skips the big
arrays unless asked. Type sizes and enums come from the `gguf` package.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from localspec.errors import LocalspecError
from localspec.files import open_regular

GGUF_MAGIC = b"GGUF"
_SCALAR = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne[0] (fastest) first
    type: GGMLQuantizationType
    offset: int  # relative to the data section

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        block, type_size = GGML_QUANT_SIZES[self.type]
        return self.n_elements // block * type_size


@dataclass
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int
    array_lengths: dict[str, int] = field(default_factory=dict)  # for arrays not loaded

    @property
    def arch(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))

    def get(self, key: str, default: Any = None) -> Any:
        """Metadata value; `{arch}` in the key is replaced by the architecture name."""
        return self.metadata.get(key.replace("{arch}", self.arch), default)

    @property
    def data_size(self) -> int:
        return max((t.offset + t.n_bytes for t in self.tensors), default=0)

    @property
    def weights_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


GGML_MAX_DIMS = 4


class _Corrupt(Exception):
    """Raised inside the parser; read_header turns it into one LocalspecError naming the file."""


class _Reader:
    """Reads the header from a memory map of the file (no per-field system calls); every count is
    checked against the bytes left, so a corrupt count fails at once instead of allocating or
    looping for it."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def left(self) -> int:
        return self.size - self.pos

    def read(self, n: int) -> bytes:
        if n > self.left():
            raise EOFError
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def count(self, n: int, item_bytes: int, what: str) -> int:
        if n * item_bytes > self.left():
            if n * item_bytes < 1 << 40:
                raise EOFError  # plausible for a real model: the file was cut short
            raise _Corrupt(what.format(n=n) + " is larger than the whole file")
        return n

    def scalar(self, vtype: GGUFValueType) -> Any:
        fmt = _SCALAR[vtype]
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.read(8))[0]

    def string(self) -> str:
        n = self.count(self.u64(), 1, "a {n}-byte string")
        return self.read(n).decode("utf-8", errors="replace")

    def strings(self, n: int, keep: bool) -> list[str]:
        # the vocabulary: up to 262k strings, so this loop is kept tight
        buf, pos, end, out = self.buf, self.pos, self.size, []
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(n):
            if pos + 8 > end:
                raise EOFError
            (k,) = unpack(buf, pos)
            if k > end - pos - 8:
                self.pos = pos
                self.count(k, 1, "a {n}-byte string")
            if keep:
                out.append(buf[pos + 8 : pos + 8 + k].decode("utf-8", errors="replace"))
            pos += 8 + k
        self.pos = pos
        return out

    def vtype(self) -> GGUFValueType:
        code = self.scalar(GGUFValueType.UINT32)
        try:
            return GGUFValueType(code)
        except ValueError:
            raise _Corrupt(f"unknown value type {code}") from None

    def value(self, vtype: GGUFValueType, keep_array: bool) -> tuple[Any, int | None]:
        if vtype == GGUFValueType.STRING:
            return self.string(), None
        if vtype in _SCALAR:
            return self.scalar(vtype), None
        if vtype == GGUFValueType.ARRAY:
            etype = self.vtype()
            if etype == GGUFValueType.ARRAY:
                raise _Corrupt("an array of arrays")
            item = struct.calcsize(_SCALAR[etype]) if etype in _SCALAR else 8  # a string is >= 8 bytes
            n = self.count(self.u64(), item, "an array of {n} items")
            if etype in _SCALAR:
                data = self.read(item * n)
                return (
                    (list(struct.unpack("<" + _SCALAR[etype][1] * n, data)), None)
                    if keep_array
                    else (None, n)
                )
            items = self.strings(n, keep_array)
            return (items if keep_array else None), (None if keep_array else n)
        raise _Corrupt(f"unknown value type {vtype}")

    def tensor(self, align: int) -> TensorInfo:
        name = self.string()
        (n_dims,) = struct.unpack("<I", self.read(4))
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions (1 to {GGML_MAX_DIMS} allowed)")
        shape = struct.unpack(f"<{n_dims}Q", self.read(8 * n_dims))
        ttype, offset = struct.unpack("<IQ", self.read(12))
        try:
            qtype = GGMLQuantizationType(ttype)
            block = GGML_QUANT_SIZES[qtype][0]
        except (ValueError, KeyError):
            raise _Corrupt(f"tensor {name!r} has unknown type {ttype}") from None
        if shape[0] % block or any(d >= 1 << 62 for d in shape):
            raise _Corrupt(f"tensor {name!r} has an impossible shape {list(shape)} for {qtype.name}")
        if offset % align:
            raise _Corrupt(
                f"tensor {name!r} starts at offset {offset}, not a multiple of the alignment {align}"
            )
        return TensorInfo(name, tuple(shape), qtype, offset)


def _alignment(meta: dict[str, Any]) -> int:
    align = meta.get("general.alignment", 32)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise _Corrupt(f"general.alignment is {align!r}, not a power of two")
    return align


def read_header(path: str | Path, *, load_arrays: tuple[str, ...] = ()) -> GGUFHeader:
    """Parse and check a GGUF header: corrupt counts, types, shapes and alignment, and a file too
    short for its tensor data, are refused with one message. Arrays are skipped (their length kept)
    unless named in `load_arrays`."""
    path = Path(path)
    try:
        with open_regular(path, "GGUF file") as f:  # a FIFO would hang the open; a loop is named
            size = os.fstat(f.fileno()).st_size
            if size < 4:
                raise LocalspecError(f"{path} is not a GGUF file ({size} bytes)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                h = _parse(_Reader(buf, size), path, load_arrays)
    except PermissionError:
        raise LocalspecError(f"cannot read {path}: permission denied") from None
    except OSError as e:
        raise LocalspecError(f"cannot read {path}: {e.strerror or e}") from None
    need = h.data_offset + h.data_size if h.tensors else 0  # a vocabulary-only file needs no padding
    if h.file_size < need:
        raise LocalspecError(
            f"{path} is truncated: {h.file_size} bytes on disk, its header describes {need} "
            "(re-download or re-convert it)"
        )
    return h


def _parse(r: _Reader, path: Path, load_arrays: tuple[str, ...]) -> GGUFHeader:
    if r.read(4) != GGUF_MAGIC:
        raise LocalspecError(f"{path} is not a GGUF file (bad magic bytes)")
    try:
        version = struct.unpack("<I", r.read(4))[0]
        if version not in (2, 3):
            raise LocalspecError(f"{path}: unsupported GGUF version {version} (2 or 3 expected)")
        n_tensors = r.count(r.u64(), 8 + 4 + 8 + 4 + 8, "a table of {n} tensors")  # the smallest entry
        n_kv = r.count(r.u64(), 8 + 4, "a table of {n} metadata keys")
        meta: dict[str, Any] = {}
        lengths: dict[str, int] = {}
        for _ in range(n_kv):
            key = r.string()
            val, n = r.value(r.vtype(), key in load_arrays)
            if n is not None:
                lengths[key] = n
            else:
                meta[key] = val
        align = _alignment(meta)
        tensors = [r.tensor(align) for _ in range(n_tensors)]
        if len({t.name for t in tensors}) != len(tensors):
            raise _Corrupt("two tensors have the same name")
        data_offset = (r.pos + align - 1) // align * align
    except EOFError:
        raise LocalspecError(f"{path} is truncated: the GGUF header ends early") from None
    except (_Corrupt, struct.error) as e:
        raise LocalspecError(f"{path} is not a valid GGUF file: {e}") from None
    return GGUFHeader(path, version, meta, tensors, data_offset, r.size, lengths)


def validate_gguf(path: str | Path) -> GGUFHeader:
    """Refuse missing, non-GGUF, corrupt and truncated files with one actionable message (every
    reader of a header gets the same checks; this is the name callers use for the check)."""
    return read_header(path)
