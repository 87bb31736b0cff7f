"""A target whose vocabulary is wider than its draft's, made from a real GGUF: its tokens with
`extra` pieces appended as user-defined tokens (the tokenizer takes them whole, as a padded or
extended vocabulary's), their embedding rows copies of the first piece's own (SmolLM2 ties its
output to them). Every other tensor is copied byte for byte, so the pair agrees on everything else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from localspec.convert.gguf_stream import KV, PlannedTensor, copy_metadata, write_gguf

USER_DEFINED = 4  # llama.cpp's token type for an added token


def write_wider(src: Path, dst: Path, extra: list[str], like: list[int]) -> Path:
    """`src` with the tokens `extra` appended; token i's embedding row is a copy of `like[i]`'s."""
    reader = GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    grown = {
        "tokenizer.ggml.tokens": lambda v: [*v, *extra],
        "tokenizer.ggml.token_type": lambda v: [*v, *[USER_DEFINED] * len(extra)],
    }
    kvs = [KV(kv.key, grown[kv.key](kv.value), kv.vtype, kv.sub_type) if kv.key in grown else kv
           for kv in copy_metadata(reader)]  # fmt: skip
    plan = []
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            rows = (
                dequantize(t.data, t.tensor_type).astype(np.float32).reshape(int(t.shape[1]), int(t.shape[0]))
            )
            wide = np.vstack([rows, rows[like]]).astype(np.float16)
            plan.append(PlannedTensor(t.name, wide.shape, np.dtype(np.float16), lambda w=wide: w))
        else:
            data = np.asarray(t.data)
            plan.append(
                PlannedTensor(t.name, data.shape, data.dtype, lambda d=data: d, ggml_type=t.tensor_type)
            )
    write_gguf(dst, arch, kvs, plan)
    return dst
