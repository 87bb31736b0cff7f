"""Write pair.toml (the format is documented in localspec/pair_file.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tomli_w

from ..compat import vocab_fingerprint
from ..gguf_file import read_header
from ..pair_file import PAIR_TOML
from .atomic import write_text_atomic


def model_facts(path: Path, prefix: str) -> dict[str, Any]:
    """Size, parameter count and quantization of one GGUF, as pair.toml info keys."""
    h = read_header(path)
    return {
        f"{prefix}_bytes": path.stat().st_size,
        f"{prefix}_params": sum(t.n_elements for t in h.tensors),
        f"{prefix}_file_type": int(h.get("general.file_type", -1)),
    }


def write_pair_toml(
    out_dir: Path, target: Path, draft: Path, *, info: dict[str, Any], runtime: dict[str, Any]
) -> Path:
    """pair.toml beside the models; paths are stored relative to out_dir so the folder can move."""
    out_dir = Path(out_dir)
    pair: dict[str, Any] = {
        "target": os.path.relpath(Path(target).resolve(), out_dir.resolve()),
        "draft": os.path.relpath(Path(draft).resolve(), out_dir.resolve()),
        "vocab_fingerprint": vocab_fingerprint(target),
        **model_facts(target, "target"),
        **model_facts(draft, "draft"),
        **info,
    }
    text = "# written by localspec; [runtime] holds recommended settings for this pair\n"
    text += tomli_w.dumps({"pair": pair, "runtime": runtime})
    dst = out_dir / PAIR_TOML
    write_text_atomic(dst, text)
    return dst
