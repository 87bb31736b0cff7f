"""Read safetensors checkpoints (single file or sharded) without torch, one slice at a time.

A safetensors file is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
byte offsets) and raw little-endian data. Tensors are read with plain positioned reads in row
blocks rather than a memory map, so the bytes read never count toward this process's RSS and peak
memory is one block, whatever the checkpoint size. numpy has no bfloat16: bf16 becomes f32 by
shifting its 16 bits into the top half of a uint32.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.errors import LocalspecError

INDEX_JSON = "model.safetensors.index.json"
_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,
    "F64": np.float64,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
BLOCK_BYTES = 16 << 20  # rows are read in blocks of about this size (and ~4x that in temporaries)


@dataclass(frozen=True)
class TensorRef:
    name: str
    file: Path
    dtype: str  # safetensors dtype name: F32, F16, BF16, ...
    shape: tuple[int, ...]
    start: int  # absolute byte offset in file
    nbytes: int


def _read_header(path: Path) -> dict[str, TensorRef]:
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise LocalspecError(f"{path} is not a safetensors file (too short)")
            (n,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if n > min(size - 8, 100 << 20):
                raise LocalspecError(f"{path} is not a safetensors file (bad header length)")
            meta = json.loads(f.read(n))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LocalspecError(f"{path} is corrupt: its safetensors header is not valid JSON") from None
    base = 8 + n
    refs = {}
    for name, t in meta.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _DTYPES:
            raise LocalspecError(f"{path}: tensor {name} has unsupported dtype {t['dtype']}")
        a, b = t["data_offsets"]
        ref = TensorRef(name, path, t["dtype"], tuple(int(d) for d in t["shape"]), base + a, b - a)
        itemsize = np.dtype(_DTYPES[ref.dtype]).itemsize
        if ref.nbytes != int(np.prod(ref.shape, dtype=np.int64)) * itemsize or base + b > size:
            raise LocalspecError(f"{path} is truncated or corrupt (tensor {name} lies outside the file)")
        refs[name] = ref
    return refs


class Checkpoint:
    """All tensors of a Hugging Face folder: model.safetensors, or shards listed in the index."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        index = self.folder / INDEX_JSON
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError):
                raise LocalspecError(f"{index} is corrupt (no weight_map)") from None
            files = sorted({self.folder / f for f in weight_map.values()})
        else:
            files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise LocalspecError(
                f"no *.safetensors weights in {self.folder} (only safetensors checkpoints "
                "are supported; .bin/.pt need torch)"
            )
        self.tensors: dict[str, TensorRef] = {}
        for f in files:
            if not f.exists():
                raise LocalspecError(f"{f.name} is listed in {INDEX_JSON} but missing from {self.folder}")
            self.tensors.update(_read_header(f))

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    @property
    def source_dtype(self) -> str:
        """The dtype of most parameters (what the model was saved in)."""
        counts: dict[str, int] = {}
        for t in self.tensors.values():
            counts[t.dtype] = counts.get(t.dtype, 0) + t.nbytes
        return max(counts, key=counts.__getitem__)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def raw_blocks(self, name: str) -> Iterator[np.ndarray]:
        """The tensor in its stored dtype (bf16 as uint16), as consecutive row blocks."""
        ref = self.tensors[name]
        dtype = np.dtype(_DTYPES[ref.dtype])
        shape = ref.shape or (1,)
        row_bytes = max(1, ref.nbytes // max(1, shape[0]))
        rows_per_block = max(1, BLOCK_BYTES // row_bytes)
        with ref.file.open("rb") as f:
            for r0 in range(0, shape[0], rows_per_block):
                r1 = min(shape[0], r0 + rows_per_block)
                f.seek(ref.start + r0 * row_bytes)
                count = (r1 - r0) * row_bytes // dtype.itemsize
                block = np.fromfile(f, dtype=dtype, count=count)
                if block.size != count:
                    raise LocalspecError(f"{ref.file} is truncated (while reading {name})")
                yield block.reshape((r1 - r0, *shape[1:]))

    def f32_blocks(self, name: str) -> Iterator[np.ndarray]:
        bf16 = self.tensors[name].dtype == "BF16"
        for block in self.raw_blocks(name):
            yield bf16_to_f32(block) if bf16 else block.astype(np.float32, copy=False)

    def load_f32(self, name: str) -> np.ndarray:
        """The whole tensor as float32 (for small tensors that need reshaping, e.g. q/k permutes)."""
        blocks = list(self.f32_blocks(name))
        out = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        return out.reshape(self.tensors[name].shape)


def bf16_to_f32(a: np.ndarray) -> np.ndarray:
    u = a.astype(np.uint32)
    u <<= 16  # in place: one temporary per block, not two
    return u.view(np.float32)


def f32_to_bf16(a: np.ndarray) -> np.ndarray:
    """Round to nearest even, as torch does; returns the bf16 bit patterns as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16
    return np.where(np.isnan(a), np.uint32(0x7FC0), rounded).astype(np.uint16)
