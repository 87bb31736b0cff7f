"""Big models on paper: real GGUF headers with realistic tensor shapes over sparse files.

The header is written with gguf.GGUFWriter and the file is then extended to its full size with
truncate(), so a 20 GB "Qwen2.5-32B" takes a few KB of disk and passes validate_gguf. Only the
planner reads these; llama.cpp never loads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter
from gguf import GGMLQuantizationType as Q

ALIGN = 32


def _nbytes(ne: tuple[int, ...], t: Q) -> int:
    block, size = GGML_QUANT_SIZES[t]
    n = 1
    for d in ne:
        n *= d
    return n // block * size


def write_sparse(
    path: Path, arch: str, meta: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], Q]]
) -> Path:
    """`tensors`: (name, shape in GGUF order ne0 first, type). Metadata keys may contain {arch}."""
    w = GGUFWriter(str(path), arch)
    for key, v in meta.items():
        key = key.format(arch=arch)
        if isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, int):
            w.add_uint32(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, list):
            w.add_array(key, v)
        else:
            w.add_string(key, v)
    data = 0
    for name, ne, t in tensors:
        nb = _nbytes(ne, t)
        w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nb, raw_dtype=t)
        data += (nb + ALIGN - 1) // ALIGN * ALIGN
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    end = w.fout[0].tell()
    w.close()
    os.truncate(path, (end + ALIGN - 1) // ALIGN * ALIGN + data)  # a hole: no disk used
    return path


def decoder(
    path: Path,
    *,
    arch: str = "qwen2",
    n_layer: int,
    n_embd: int,
    n_ff: int,
    n_head: int,
    n_kv: int,
    n_vocab: int,
    quant: str,
    tied: bool,
    bias: bool = True,
    extra: dict[str, Any] | None = None,
) -> Path:
    """A llama/qwen2-style decoder quantized the way llama.cpp's Q4_K_M or Q8_0 recipes do."""
    hd = n_embd // n_head

    def more_bits(i: int) -> bool:  # llama.cpp's use_more_bits(): Q4_K_M keeps these at Q6_K
        return i < n_layer // 8 or i >= 7 * n_layer // 8 or (i - n_layer // 8) % 3 == 2

    if quant == "q4_k_m":
        emb, out = Q.Q4_K, Q.Q6_K

        def qt(kind: str, i: int) -> Q:
            return Q.Q6_K if kind in ("attn_v", "ffn_down") and more_bits(i) else Q.Q4_K
    else:
        emb = out = Q.Q8_0

        def qt(kind: str, i: int) -> Q:
            return Q.Q8_0

    t: list[tuple[str, tuple[int, ...], Q]] = [("token_embd.weight", (n_embd, n_vocab), emb)]
    for i in range(n_layer):
        p = f"blk.{i}."
        t += [
            (p + "attn_norm.weight", (n_embd,), Q.F32),
            (p + "attn_q.weight", (n_embd, n_head * hd), qt("attn_q", i)),
            (p + "attn_k.weight", (n_embd, n_kv * hd), qt("attn_k", i)),
            (p + "attn_v.weight", (n_embd, n_kv * hd), qt("attn_v", i)),
            (p + "attn_output.weight", (n_head * hd, n_embd), qt("attn_output", i)),
            (p + "ffn_norm.weight", (n_embd,), Q.F32),
            (p + "ffn_gate.weight", (n_embd, n_ff), qt("ffn_gate", i)),
            (p + "ffn_up.weight", (n_embd, n_ff), qt("ffn_up", i)),
            (p + "ffn_down.weight", (n_ff, n_embd), qt("ffn_down", i)),
        ]
        if bias:
            t += [
                (p + "attn_q.bias", (n_head * hd,), Q.F32),
                (p + "attn_k.bias", (n_kv * hd,), Q.F32),
                (p + "attn_v.bias", (n_kv * hd,), Q.F32),
            ]
    t.append(("output_norm.weight", (n_embd,), Q.F32))
    if not tied:
        t.append(("output.weight", (n_embd, n_vocab), out))
    meta = {
        "general.name": path.stem,
        "{arch}.block_count": n_layer,
        "{arch}.context_length": 32768,
        "{arch}.embedding_length": n_embd,
        "{arch}.feed_forward_length": n_ff,
        "{arch}.attention.head_count": n_head,
        "{arch}.attention.head_count_kv": n_kv,
        **(extra or {}),
    }
    return write_sparse(path, arch, meta, t)


# Shapes from the models' config.json files.
def qwen25_32b_q4_k_m(d: Path) -> Path:
    return decoder(
        d / "qwen2.5-32b-q4_k_m.gguf",
        n_layer=64,
        n_embd=5120,
        n_ff=27648,
        n_head=40,
        n_kv=8,
        n_vocab=152064,
        quant="q4_k_m",
        tied=False,
    )


def qwen25_05b_q8_0(d: Path) -> Path:
    return decoder(
        d / "qwen2.5-0.5b-q8_0.gguf",
        n_layer=24,
        n_embd=896,
        n_ff=4864,
        n_head=14,
        n_kv=2,
        n_vocab=151936,
        quant="q8_0",
        tied=True,
    )


def qwen25_3b_q8_0(d: Path) -> Path:
    return decoder(
        d / "qwen2.5-3b-q8_0.gguf",
        n_layer=36,
        n_embd=2048,
        n_ff=11008,
        n_head=16,
        n_kv=2,
        n_vocab=151936,
        quant="q8_0",
        tied=True,
    )


def llama3_70b_q4_k_m(d: Path) -> Path:
    return decoder(
        d / "llama-3-70b-q4_k_m.gguf",
        arch="llama",
        n_layer=80,
        n_embd=8192,
        n_ff=28672,
        n_head=64,
        n_kv=8,
        n_vocab=128256,
        quant="q4_k_m",
        tied=False,
        bias=False,
    )
