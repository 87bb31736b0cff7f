"""Fast GGUF header reading and validation, before llama.cpp ever sees a file.

`gguf.GGUFReader` builds a numpy object per array element and takes seconds on a 262k-token
vocabulary (7.5 s for Gemma-3-270M here); startup checks, the pair check and the memory planner only
need the scalar metadata and the tensor table, so this reads the header in one pass and skips the big
arrays unless asked. Type sizes and enums come from the `gguf` package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from .errors import LocalspecError

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


class _Reader:
    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f, self.path = f, path

    def read(self, n: int) -> bytes:
        b = self.f.read(n)
        if len(b) != n:
            raise LocalspecError(f"{self.path} is truncated: the GGUF header ends early")
        return b

    def scalar(self, vtype: GGUFValueType) -> Any:
        fmt = _SCALAR[vtype]
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        (n,) = struct.unpack("<Q", self.read(8))
        if n > 1 << 30:
            raise LocalspecError(f"{self.path} is corrupt: a {n}-byte string in the GGUF header")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: GGUFValueType, keep_array: bool) -> tuple[Any, int | None]:
        if vtype == GGUFValueType.STRING:
            return self.string(), None
        if vtype in _SCALAR:
            return self.scalar(vtype), None
        if vtype == GGUFValueType.ARRAY:
            etype = GGUFValueType(self.scalar(GGUFValueType.UINT32))
            (n,) = struct.unpack("<Q", self.read(8))
            if etype in _SCALAR:
                size = struct.calcsize(_SCALAR[etype]) * n
                if not keep_array:
                    self.f.seek(size, 1)
                    return None, n
                fmt = "<" + _SCALAR[etype][1] * n
                return list(struct.unpack(fmt, self.read(size))), None
            items = [self.value(etype, keep_array)[0] for _ in range(n)]
            return (items if keep_array else None), (None if keep_array else n)
        raise LocalspecError(f"{self.path} is corrupt: unknown GGUF value type {vtype}")


def read_header(path: str | Path, *, load_arrays: tuple[str, ...] = ()) -> GGUFHeader:
    """Parse a GGUF header. Arrays are skipped (their length kept) unless named in `load_arrays`."""
    path = Path(path)
    if not path.exists():
        raise LocalspecError(f"no such file: {path}")
    if path.is_dir():
        raise LocalspecError(f"{path} is a directory, not a GGUF file")
    size = path.stat().st_size
    with path.open("rb") as f:
        r = _Reader(f, path)
        if f.read(4) != GGUF_MAGIC:
            raise LocalspecError(f"{path} is not a GGUF file (bad magic bytes)")
        try:
            version, n_tensors, n_kv = struct.unpack("<IQQ", r.read(20))
            if version not in (2, 3):
                raise LocalspecError(f"{path}: unsupported GGUF version {version}")
            meta: dict[str, Any] = {}
            lengths: dict[str, int] = {}
            for _ in range(n_kv):
                key = r.string()
                vtype = GGUFValueType(r.scalar(GGUFValueType.UINT32))
                val, n = r.value(vtype, key in load_arrays)
                if n is not None:
                    lengths[key] = n
                else:
                    meta[key] = val
            tensors = []
            for _ in range(n_tensors):
                name = r.string()
                (n_dims,) = struct.unpack("<I", r.read(4))
                shape = struct.unpack(f"<{n_dims}Q", r.read(8 * n_dims))
                ttype, offset = struct.unpack("<IQ", r.read(12))
                tensors.append(TensorInfo(name, tuple(shape), GGMLQuantizationType(ttype), offset))
        except (ValueError, struct.error) as e:
            raise LocalspecError(f"{path} is corrupt: {e}") from None
        align = int(meta.get("general.alignment", 32))
        data_offset = (f.tell() + align - 1) // align * align
    return GGUFHeader(path, version, meta, tensors, data_offset, size, lengths)


def validate_gguf(path: str | Path) -> GGUFHeader:
    """Refuse missing, non-GGUF, corrupt and truncated files with one actionable message."""
    h = read_header(path)
    need = h.data_offset + h.data_size
    if h.file_size < need:
        raise LocalspecError(
            f"{h.path} is truncated: {h.file_size} bytes on disk, the header describes {need} "
            "(re-download or re-convert it)"
        )
    return h
