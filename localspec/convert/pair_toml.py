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


def _stored_path(path: Path, out_dir: Path) -> str:
    path, base = Path(os.path.abspath(path)), Path(os.path.abspath(out_dir))
    return os.path.relpath(path, base) if base in path.parents else str(path)


def write_pair_toml(
    out_dir: Path, target: Path, draft: Path, *, info: dict[str, Any], runtime: dict[str, Any]
) -> Path:
    """pair.toml beside the models; paths inside out_dir are stored relative to it so the folder can
    move, others (e.g. files in the Hugging Face cache) as absolute paths."""
    out_dir = Path(out_dir)
    pair: dict[str, Any] = {
        "target": _stored_path(Path(target), out_dir),
        "draft": _stored_path(Path(draft), out_dir),
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
