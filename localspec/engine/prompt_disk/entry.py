"""One file of the prompt cache: one context's state of one token prefix, framed so that nothing
unverified reaches llama.cpp (its own file format, `llama_state_seq_save_file`'s, has no checksum
and no key: llama.cpp would parse whatever bytes are there).

    0    8   magic b"LSPCACHE"
    8    4   format version (u32, little-endian)
    12   4   header length H (u32) <= MAX_HEADER
    16   32  sha256 of every byte after these 48
    48   H   header, JSON: {"key": {...}, "n_tokens": N, "state_bytes": S}
    ..   4N  the tokens the state holds, int32 little-endian
    ..   S   the state (llama/seq_state.py)

A file is read whole, its size and checksum checked, and its key compared with the reader's
before a byte of it is handed on (`read_verified`); indexing reads only the header and the tokens
(`read_header`), so a file that passes there may still be refused when it is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from localspec.errors import LocalspecError
from localspec.files import open_regular

MAGIC = b"LSPCACHE"
VERSION = 1
PREFIX = struct.Struct("<8sII32s")
MAX_HEADER = 64 << 10  # a key and three counts: ~1 KB
FOREIGN = "written for another model, llama.cpp build or context settings"
TOKEN = np.dtype("<i4")


class Refused(Exception):
    """A file that does not check out: the reason, in words."""


@dataclass(frozen=True)
class Header:
    key: dict[str, Any]
    tokens: np.ndarray  # int32
    state_at: int  # where the state begins
    size: int  # the file's size


def canonical(key: dict[str, Any]) -> dict[str, Any]:
    """The key as it reads back from JSON (tuples become lists), so a file's key compares equal."""
    return json.loads(json.dumps(key, sort_keys=True))


def chunks(key: dict[str, Any], tokens: np.ndarray, state: bytes | bytearray) -> list[bytes | memoryview]:
    """The file's bytes, in order, without joining them (a state may be hundreds of MB)."""
    toks = np.ascontiguousarray(tokens, TOKEN)
    header = json.dumps(
        {"key": key, "n_tokens": len(toks), "state_bytes": len(state)}, sort_keys=True
    ).encode()
    body = [header, memoryview(toks).cast("B"), memoryview(state)]
    digest = hashlib.sha256()
    for part in body:
        digest.update(part)
    return [PREFIX.pack(MAGIC, VERSION, len(header), digest.digest()), *body]


def read_header(f: BinaryIO, max_tokens: int) -> Header:
    """The key and tokens of an open file, its sizes checked against its length (not its checksum)."""
    size = os.fstat(f.fileno()).st_size
    head = _parse_prefix(f.read(PREFIX.size), size)
    meta = _parse_meta(f.read(head), max_tokens)
    n, state = meta["n_tokens"], meta["state_bytes"]
    state_at = PREFIX.size + head + TOKEN.itemsize * n
    if state_at + state != size:
        raise Refused(f"{size} bytes where its header says {state_at + state} (truncated or padded)")
    tokens = np.frombuffer(f.read(TOKEN.itemsize * n), TOKEN).astype(np.int32)
    if len(tokens) != n:
        raise Refused("truncated in its token list")
    return Header(meta["key"], tokens, state_at, size)


def read_verified(
    path: Path, key: dict[str, Any], max_bytes: int, max_tokens: int
) -> tuple[np.ndarray, memoryview]:
    """The tokens and the state of the file at `path`, read whole and checked: its framing, its
    size, its checksum and that it was written for `key`. Raises Refused (or FileNotFoundError when
    it is gone)."""
    try:
        f = open_regular(path, "prompt cache file")
    except LocalspecError as e:
        if not path.exists():
            raise FileNotFoundError(path) from None
        raise Refused(str(e)) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise Refused(f"{size} bytes, over the cache's cap of {max_bytes}")
        buf = bytearray(size)
        got = f.readinto(buf)
    if got != size:
        raise Refused("shorter than it was a moment ago (being rewritten?)")
    view = memoryview(buf)
    head = _parse_prefix(bytes(view[: PREFIX.size]), size)
    if hashlib.sha256(view[PREFIX.size :]).digest() != PREFIX.unpack_from(buf)[3]:
        raise Refused("its checksum does not match its contents (a changed or damaged file)")
    meta = _parse_meta(bytes(view[PREFIX.size : PREFIX.size + head]), max_tokens)
    if meta["key"] != key:
        raise Refused(FOREIGN)
    n = meta["n_tokens"]
    at = PREFIX.size + head
    state = view[at + TOKEN.itemsize * n :]
    if len(state) != meta["state_bytes"]:
        raise Refused("its sizes do not add up")
    tokens = np.frombuffer(buf, TOKEN, n, at).astype(np.int32)
    return tokens, state


def _parse_prefix(raw: bytes, size: int) -> int:
    """The header's length, from the fixed 48 bytes."""
    if len(raw) < PREFIX.size:
        raise Refused(f"{size} bytes: shorter than the cache's framing")
    magic, version, head, _ = PREFIX.unpack(raw)
    if magic != MAGIC:
        raise Refused("not a localspec prompt cache file")
    if version != VERSION:
        raise Refused(f"format version {version}, this localspec reads {VERSION}")
    if not 0 < head <= MAX_HEADER:
        raise Refused(f"a header of {head} bytes")
    return head


def _parse_meta(raw: bytes, max_tokens: int) -> dict[str, Any]:
    try:
        meta = json.loads(raw.decode())
        n, state = meta["n_tokens"], meta["state_bytes"]
        key = meta["key"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise Refused("its header does not parse") from None
    if not isinstance(key, dict) or type(n) is not int or type(state) is not int:
        raise Refused("its header does not parse")
    if not 0 < n <= max_tokens or state <= 0:
        raise Refused(f"{n} tokens and {state} state bytes: out of range (at most {max_tokens} tokens)")
    return meta
