"""GGUF files byte by byte, so tests can write exactly the corruption they mean (a zero alignment,
a huge array count, a tensor past the end) — gguf.GGUFWriter refuses to write most of them."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gguf import GGUFValueType as V

F32 = 0  # ggml type ids
Q8_0 = 8


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(key: str, v: int) -> bytes:
    return s(key) + struct.pack("<II", V.UINT32, v)


def kv_str(key: str, v: str) -> bytes:
    return s(key) + struct.pack("<I", V.STRING) + s(v)


def kv_array_u32(key: str, items: list[int], count: int | None = None) -> bytes:
    n = len(items) if count is None else count
    return s(key) + struct.pack("<IIQ", V.ARRAY, V.UINT32, n) + struct.pack(f"<{len(items)}I", *items)


def kv_array_str(key: str, items: list[str], count: int | None = None) -> bytes:
    n = len(items) if count is None else count
    return s(key) + struct.pack("<IIQ", V.ARRAY, V.STRING, n) + b"".join(s(i) for i in items)


def tensor_info(name: str, shape: tuple[int, ...], ttype: int, offset: int) -> bytes:
    return s(name) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, ttype, offset)


@dataclass
class Gguf:
    kvs: list[bytes] = field(
        default_factory=lambda: [
            kv_str("general.architecture", "llama"),
            kv_u32("general.alignment", 32),
            kv_array_str("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"]),
            kv_array_u32("tokenizer.ggml.token_type", [3, 3, 1, 1]),
        ]
    )
    # two f32 tensors of 8 and 16 floats: 32 and 64 bytes at aligned offsets 0 and 32
    tensors: list[bytes] = field(
        default_factory=lambda: [
            tensor_info("a.weight", (8,), F32, 0),
            tensor_info("b.weight", (16,), F32, 32),
        ]
    )
    data: bytes = bytes(96)
    version: int = 3
    align: int = 32

    def header(self) -> bytes:
        head = b"GGUF" + struct.pack("<IQQ", self.version, len(self.tensors), len(self.kvs))
        return head + b"".join(self.kvs) + b"".join(self.tensors)

    def bytes(self) -> bytes:
        head = self.header()
        return head + bytes(-len(head) % self.align) + self.data
