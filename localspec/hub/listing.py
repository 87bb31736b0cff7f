"""What `localspec list` shows: the presets, and the pairs present locally (models/*/pair.toml,
pulled or built) with their sizes and the last acceptance measured with them (the acceptance log)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec.config.pair_toml import PAIR_TOML, read_pair
from localspec.errors import LocalspecError
from localspec.hub.presets import Preset, load_presets
from localspec.paths import models_dir
from localspec.telemetry.acclog import default_path
from localspec.telemetry.logstats import read_log


@dataclass(frozen=True)
class LocalPair:
    name: str
    folder: Path
    target: Path
    draft: Path
    size_bytes: int | None  # both files; None when one is missing
    preset: str | None
    acceptance: float | None  # stats.acceptance_rate of the last logged generation with this pair
    problem: str | None = None


def local_pairs(folder: Path | None = None, log_path: Path | None = None) -> list[LocalPair]:
    root = Path(folder) if folder else models_dir()
    log = _acclog_records(log_path)
    out = []
    for toml in sorted(root.glob(f"*/{PAIR_TOML}")):
        try:
            p = read_pair(toml)
        except LocalspecError as e:
            out.append(LocalPair(toml.parent.name, toml.parent, Path(), Path(), None, None, None, str(e)))
            continue
        files = (p.target, p.draft)
        size = sum(f.stat().st_size for f in files) if all(f.exists() for f in files) else None
        out.append(
            LocalPair(
                name=toml.parent.name,
                folder=toml.parent,
                target=p.target,
                draft=p.draft,
                size_bytes=size,
                preset=p.info.get("preset") or None,
                acceptance=last_acceptance(log, p.target, p.draft),
                problem=None if size is not None else "a model file is missing",
            )
        )
    return out


def presets() -> list[Preset]:
    return sorted(load_presets().values(), key=lambda p: p.name)


# -- the acceptance log (written by localspec.acclog; a missing log just means nothing measured yet) ---
def _acclog_records(path: Path | None = None) -> list[dict[str, Any]]:

    try:
        return read_log(path or default_path())[0]
    except (LocalspecError, OSError):
        return []


def last_acceptance(records: list[dict[str, Any]], target: Path, draft: Path) -> float | None:
    """The acceptance rate of the last speculative generation logged with these two files."""
    want = (os.path.realpath(target), os.path.realpath(draft))
    for rec in reversed(records):
        t, d = rec.get("target") or {}, rec.get("draft") or {}
        rate = rec["stats"].get("acceptance_rate")
        if isinstance(rate, (int, float)) and (t.get("path"), d.get("path")) == want:
            return float(rate)
    return None
