"""What `localspec list` shows: the presets, and the pairs present locally (models/*/pair.toml,
pulled or built) with their sizes and the last acceptance measured with them (the acceptance log)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LocalspecError
from ..pair_file import PAIR_TOML, read_pair
from .presets import Preset, load_presets
from .pull import models_dir


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


def local_pairs(folder: Path | None = None) -> list[LocalPair]:
    root = Path(folder) if folder else models_dir()
    log = list(_acclog_records())
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


# -- the acceptance log (written by localspec.acclog; read defensively: it may not exist) -----------
def acclog_path() -> Path | None:
    try:
        from .. import acclog  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError:
        acclog = None
    for attr in ("log_path", "LOG_PATH", "PATH", "default_path"):
        value = getattr(acclog, attr, None)
        if value is not None:
            try:
                return Path(value() if callable(value) else value)
            except Exception:  # noqa: BLE001 - a log we cannot locate is a log we do not show
                return None
    env = os.environ.get("LOCALSPEC_ACCLOG")
    return Path(env) if env else None


def _acclog_records() -> Iterator[dict[str, Any]]:
    path = acclog_path()
    if path is None or not path.is_file():
        return
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def _strings(x: Any) -> Iterator[str]:
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


def last_acceptance(records: list[dict[str, Any]], target: Path, draft: Path) -> float | None:
    """The acceptance rate of the last record that names both model files (by path)."""
    want = {os.path.realpath(target), os.path.realpath(draft)}
    for rec in reversed(records):
        rate = (rec.get("stats") or {}).get("acceptance_rate") if isinstance(rec.get("stats"), dict) else None
        if not isinstance(rate, (int, float)):
            continue
        seen = {os.path.realpath(s) for s in _strings(rec) if s.endswith(".gguf") or os.sep in s}
        if want <= seen:
            return float(rate)
    return None
