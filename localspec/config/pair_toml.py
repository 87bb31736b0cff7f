"""pair.toml: where a converted pair lives and how to run it.

[pair]
target = "target-q4_k_m.gguf"      # paths relative to the pair folder
draft = "draft-q8_0.gguf"
mmproj = "mmproj-f16.gguf"         # optional: the target's vision projector
draft_mmproj = "draft-mmproj.gguf" # optional: the draft's own (it then sees images too)
vocab_fingerprint = "sha256:..."
[runtime]                          # any Settings field: recommended defaults for this pair
draft_max = "auto"
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from localspec.config.toml import read_toml
from localspec.errors import LocalspecError
from localspec.files import write_text_atomic

PAIR_TOML = "pair.toml"
PROJECTORS = ("mmproj", "draft_mmproj")  # [pair] keys naming vision projectors (target's, draft's)


@dataclass(frozen=True)
class PairFile:
    path: Path
    target: Path
    draft: Path
    info: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    mmproj: Path | None = None  # the target's vision projector
    draft_mmproj: Path | None = None  # the draft's own projector


def pair_toml_path(path: Path) -> Path:
    return path / PAIR_TOML if path.is_dir() else path


def read_pair(path: Path) -> PairFile:
    toml_path = pair_toml_path(Path(path))
    hint = " (run `make models` to build the default pair)" if "default" in str(path) else ""
    data = read_toml(toml_path, "pair file", missing=f"no pair at {path}: {toml_path} does not exist{hint}")
    pair, runtime = data.get("pair", {}), data.get("runtime", {})
    if not isinstance(pair, dict) or not all(isinstance(pair.get(k), str) for k in ("target", "draft")):
        raise LocalspecError(f'{toml_path} needs [pair] target = "FILE.gguf" and draft = "FILE.gguf"')
    if not isinstance(runtime, dict):
        raise LocalspecError(f"{toml_path}: [runtime] must be a table of settings")
    for key in PROJECTORS:
        if not isinstance(pair.get(key, ""), str):
            raise LocalspecError(f'{toml_path}: [pair] {key} must be a file name ("mmproj-f16.gguf")')
    base = toml_path.parent
    found = {key: (base / pair[key]).resolve() for key in PROJECTORS if pair.get(key)}
    return PairFile(
        path=toml_path,
        target=(base / pair["target"]).resolve(),
        draft=(base / pair["draft"]).resolve(),
        info={k: v for k, v in pair.items() if k not in ("target", "draft", *PROJECTORS)},
        runtime=dict(runtime),
        **found,
    )


def _stored_path(path: Path, out_dir: Path) -> str:
    path, base = Path(os.path.abspath(path)), Path(os.path.abspath(out_dir))
    return os.path.relpath(path, base) if base in path.parents else str(path)


def write_pair_toml(
    out_dir: Path,
    target: Path,
    draft: Path,
    *,
    info: dict[str, Any],
    runtime: dict[str, Any],
    mmproj: Path | None = None,
    draft_mmproj: Path | None = None,
) -> Path:
    """pair.toml beside the models (and the vision projectors, if any); paths inside out_dir
    are stored relative to it so the folder can move, others (e.g. files in the Hugging Face cache)
    as absolute paths. `info` carries the models'
    facts (`gguf.compat.pair_facts`) and where the pair came from."""
    out_dir = Path(out_dir)
    pair = {
        "target": _stored_path(Path(target), out_dir),
        "draft": _stored_path(Path(draft), out_dir),
        **{
            k: _stored_path(Path(v), out_dir)
            for k, v in zip(PROJECTORS, (mmproj, draft_mmproj))
            if v is not None
        },
        **info,
    }
    text = "# written by localspec; [runtime] holds recommended settings for this pair\n"
    text += tomli_w.dumps({"pair": pair, "runtime": runtime})
    dst = out_dir / PAIR_TOML
    write_text_atomic(dst, text)
    return dst
