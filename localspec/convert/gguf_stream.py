"""Write a GGUF file one tensor at a time.

`gguf.GGUFWriter.add_tensor` keeps every array until the end, so a converter built on it holds the
whole model in memory. Here the header and tensor table are written from a plan (names, shapes,
dtypes), then each tensor is produced, written and dropped: peak memory is one tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

# keys GGUFReader reports that are file structure, not metadata (the writer sets them itself)
_STRUCTURAL = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


@dataclass(frozen=True)
class KV:
    key: str
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None  # element type of an ARRAY


@dataclass(frozen=True)
class PlannedTensor:
    name: str
    shape: tuple[int, ...]  # numpy (row-major) order
    dtype: np.dtype  # what is written (uint16 carries bf16 bits, with ggml_type=BF16)
    produce: Callable[[], np.ndarray | Iterable[np.ndarray]]  # the tensor, or its row blocks in order
    ggml_type: GGMLQuantizationType | None = None  # None: from dtype (F32/F16)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def write_gguf(
    path: Path,
    arch: str,
    kvs: Iterable[KV],
    tensors: Sequence[PlannedTensor],
    progress: Callable[[int, int, str], None] | None = None,
) -> None:
    """Write `path` (callers pass a temporary path and rename it when this returns).

    Produced blocks are written straight to the file, so only one block is ever in memory."""
    w = GGUFWriter(path, arch)
    try:
        for kv in kvs:
            w.add_key_value(kv.key, kv.value, kv.vtype, kv.sub_type)
        for t in tensors:
            w.add_tensor_info(t.name, t.shape, np.dtype(t.dtype), t.nbytes, raw_dtype=t.ggml_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        assert w.fout is not None and len(w.fout) == 1
        fout = w.fout[0]
        for i, t in enumerate(tensors, 1):
            fout.write(bytes(-fout.tell() % w.data_alignment))  # each tensor starts aligned
            out = t.produce()
            written = 0
            for block in [out] if isinstance(out, np.ndarray) else out:
                block = np.ascontiguousarray(block, dtype=t.dtype)
                block.tofile(fout)
                written += block.nbytes
            if written != t.nbytes:
                raise ValueError(f"{t.name}: produced {written} bytes, planned {t.nbytes}")
            if progress is not None:
                progress(i, len(tensors), t.name)
        fout.write(bytes(-fout.tell() % w.data_alignment))
    finally:
        w.close()


def copy_metadata(reader: GGUFReader, *, skip: Iterable[str] = ()) -> list[KV]:
    """Every metadata key of an open GGUF, with its original types, except `skip`."""
    skipped = _STRUCTURAL | set(skip)
    out = []
    for name, f in reader.fields.items():
        if name in skipped:
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        out.append(KV(name, f.contents(), vtype, sub))
    return out
