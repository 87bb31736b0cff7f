"""Pair presets: localspec/data/presets/NAME.toml names a Q4_K_M target and a Q8_0 draft on the Hub.

name = "llama3.1-8b"
description = "..."
notes = ["..."]
[target]                 # and [draft]
repo = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"
file = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
quant = "q4_k_m"
size_gb = 4.92           # as the Hub shows it (GB = 1e9 bytes); pull uses the live HEAD size
sha256 = "..."           # the LFS sha256 (the Hub's X-Linked-Etag) where the Hub page shows it
verified = ["repo", "file", "size_gb"]   # fields checked against a Hub page (see sources)
expected = ["sha256"]                     # fields believed but not checked
sources = ["https://huggingface.co/..."]
mmproj = "mmproj-F16.gguf"  # target only, optional: its vision projector, a file in the same repo
mmproj_size_gb = 0.86       # (verified/expected name these two as "mmproj" and "mmproj_size_gb")
[target.arch]            # config.json facts the n_ctx table is computed from (localspec.hub.sizing)
[n_ctx]                  # recommended n_ctx per card, computed from the memory plan; 0 = does not fit
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localspec import paths
from localspec.config import toml
from localspec.errors import LocalspecError

CARDS_GB = (12, 16, 24)
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


@dataclass(frozen=True)
class ModelRef:
    """One model on the Hub: a repo and, for GGUF repos, the file in it (None: pick by quant)."""

    repo: str
    file: str | None = None
    quant: str = "q4_k_m"
    revision: str | None = None
    size_gb: float | None = None
    sha256: str | None = None
    arch: dict[str, Any] = field(default_factory=dict)
    verified: tuple[str, ...] = ()
    expected: tuple[str, ...] = ()
    mmproj: str | None = None  # the model's vision projector: a file in the same repo
    mmproj_size_gb: float | None = None

    @property
    def label(self) -> str:
        return f"{self.repo}:{self.file}" if self.file else self.repo

    def projector(self) -> ModelRef | None:
        """The vision projector as a model of its own (same repo and revision), if there is one."""
        if not self.mmproj:
            return None
        return ModelRef(self.repo, self.mmproj, "f16", self.revision, self.mmproj_size_gb)


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path
    description: str
    target: ModelRef
    draft: ModelRef
    notes: tuple[str, ...] = ()
    n_ctx: dict[str, int] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)

    @property
    def size_gb(self) -> float | None:
        sizes = [m.size_gb for m in (self.target, self.draft)]
        if self.target.mmproj:
            sizes.append(self.target.mmproj_size_gb)
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


def _ref(d: dict[str, Any], where: Path, role: str) -> ModelRef:
    if "repo" not in d:
        raise LocalspecError(f'{where}: [{role}] needs repo = "owner/name"')
    mmproj = d.get("mmproj")
    if mmproj is not None and (
        role != "target" or not isinstance(mmproj, str) or not mmproj.endswith(".gguf")
    ):
        raise LocalspecError(
            f'{where}: [{role}] mmproj: only [target] may name one, as a GGUF file in its repo ("mmproj-F16.gguf")'
        )
    return ModelRef(
        repo=str(d["repo"]),
        file=d.get("file"),
        quant=str(d.get("quant", "q4_k_m" if role == "target" else "q8_0")).lower(),
        revision=d.get("revision"),
        size_gb=d.get("size_gb"),
        sha256=d.get("sha256"),
        arch=dict(d.get("arch", {})),
        verified=tuple(d.get("verified", ())),
        expected=tuple(d.get("expected", ())),
        mmproj=mmproj,
        mmproj_size_gb=d.get("mmproj_size_gb"),
    )


def read_preset(path: Path) -> Preset:
    try:
        data = toml.loads(path.read_text())
    except toml.TOMLDecodeError as e:
        raise LocalspecError(f"{path} is not valid TOML: {e}") from None
    for role in ("target", "draft"):
        if role not in data:
            raise LocalspecError(f"{path}: a preset needs a [{role}] table")
    return Preset(
        name=str(data.get("name", path.stem)),
        path=path,
        description=str(data.get("description", "")),
        target=_ref(data["target"], path, "target"),
        draft=_ref(data["draft"], path, "draft"),
        notes=tuple(data.get("notes", ())),
        n_ctx={k: int(v) for k, v in data.get("n_ctx", {}).items()},
        runtime=dict(data.get("runtime", {})),
    )


def shipped_presets_dir() -> Path:
    """The presets shipped in the package (localspec/data/presets)."""
    return Path(str(paths.package_data("presets")))


def presets_dir() -> Path:
    """The shipped presets, or LOCALSPEC_PRESETS: another folder (your own presets) to use instead."""
    return paths.user_presets_dir() or shipped_presets_dir()


def load_presets(folder: Path | None = None) -> dict[str, Preset]:
    presets = [read_preset(p) for p in sorted(Path(folder or presets_dir()).glob("*.toml"))]
    return {p.name: p for p in presets}


def find_preset(name: str, folder: Path | None = None) -> Preset | None:
    presets = load_presets(folder)
    return presets.get(name) or presets.get(name.lower())


def unknown_preset(name: str, folder: Path | None = None) -> LocalspecError:
    names = sorted(load_presets(folder))
    near = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(near)}? " if near else ""
    return LocalspecError(
        f"unknown pair preset {name!r}: {hint}known presets: {', '.join(names) or 'none'} "
        "(or give a Hub repo as OWNER/NAME[:FILE])"
    )


def parse_ref(text: str, *, quant: str) -> ModelRef:
    """`OWNER/NAME[:FILE]` -> ModelRef (the file is picked by `quant` when not given)."""
    repo, _, file = text.partition(":")
    if not _REPO_ID.fullmatch(repo):
        raise LocalspecError(f"{text!r} is neither a preset nor a Hub repo (OWNER/NAME[:FILE])")
    return ModelRef(repo=repo, file=file or None, quant=quant)


def is_repo_ref(text: str) -> bool:
    return bool(_REPO_ID.fullmatch(text.partition(":")[0]))
