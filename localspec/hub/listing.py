"""What `localspec list` shows: the presets, and the pairs present locally (models/*/pair.toml,
pulled or built) with their sizes and the last acceptance measured with them (the acceptance log)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from localspec.config.pair_toml import PAIR_TOML, read_pair
from localspec.errors import LocalspecError
from localspec.hub.presets import Preset, load_presets
from localspec.paths import models_dir
from localspec.telemetry.acclog import default_path
from localspec.telemetry.logstats import iter_records


@dataclass(frozen=True)
class LocalPair:
    name: str
    folder: Path
    target: Path
    draft: Path
    size_bytes: int | None  # both files (and the projector); None when one is missing
    preset: str | None
    acceptance: float | None  # stats.acceptance_rate of the last logged generation with this pair
    problem: str | None = None


def local_pairs(folder: Path | None = None, log_path: Path | None = None) -> list[LocalPair]:
    root = Path(folder) if folder else models_dir()
    log = _acceptances(log_path)
    out = []
    for toml in sorted(root.glob(f"*/{PAIR_TOML}")):
        try:
            p = read_pair(toml)
        except LocalspecError as e:
            out.append(LocalPair(toml.parent.name, toml.parent, Path(), Path(), None, None, None, str(e)))
            continue
        files = (p.target, p.draft, *([p.mmproj] if p.mmproj else []))
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
Acceptances = dict[tuple[str | None, str | None], float]


def _acceptances(path: Path | None = None) -> Acceptances:
    """The last acceptance rate logged per (target, draft) path, read a line at a time."""
    out: Acceptances = {}
    try:
        for rec in iter_records(path or default_path()):
            rate = rec["stats"].get("acceptance_rate") if rec is not None else None
            t, d = (rec.get("target") or {}, rec.get("draft") or {}) if rec is not None else ({}, {})
            key = (t.get("path"), d.get("path"))
            if isinstance(rate, (int, float)) and all(isinstance(p, (str, type(None))) for p in key):
                out[key] = float(rate)
    except (LocalspecError, OSError):
        pass
    return out


def last_acceptance(log: Acceptances, target: Path, draft: Path) -> float | None:
    """The acceptance rate of the last speculative generation logged with these two files."""
    return log.get((os.path.realpath(target), os.path.realpath(draft)))
