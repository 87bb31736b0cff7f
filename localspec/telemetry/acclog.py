"""The acceptance log: one JSON line appended per generation by every front end (run, chat, the
server), so how well a draft does can be studied later (`localspec stats`).

Each line is written with one write() on an O_APPEND descriptor, so lines from several processes
never interleave. Logging is a side job: a failing write warns once and generation carries on. The
file is created 0600 in folders created 0700, and no server setting (the API key) is ever in it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from localspec import paths
from localspec.config.settings import Settings, setting_fields
from localspec.files import PRIVATE_FILE, fingerprint, private_dir

LOG_NAME = "acceptance.jsonl"


def default_path() -> Path:
    return paths.acceptance_log()


def log_path(settings: Settings) -> Path | None:
    """Where these settings log to, or None with --no-log."""
    if settings.no_log:
        return None
    return Path(settings.log).expanduser() if settings.log else default_path()


def model_fingerprint(path: Path | str | None) -> dict[str, Any] | None:
    """File name, size, mtime and a cheap hash (files.fingerprint): tells models apart without reading GBs."""
    if path is None:
        return None
    p = Path(path)
    try:
        st = p.stat()
        head = "sha256:" + fingerprint(p)
    except OSError:
        return {"path": str(p)}
    return {"path": str(p.resolve()), "size": st.st_size, "mtime": _iso(st.st_mtime), "head": head}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")


# the server's own settings (its address, its API key) say nothing of a generation: never in a record
_SKIP = {f.name for group in ("server", "log") for f in setting_fields(group)}


def _settings_dict(s: Settings) -> dict[str, Any]:
    # a schema's text can be 64 KB: its digest instead
    out = {
        f.name: getattr(s, f.name)
        for f in dataclasses.fields(s)
        if f.name not in _SKIP | {"json_schema", "grammar"}
    }
    for name in ("json_schema", "grammar"):
        text = getattr(s, name)
        if text is not None:
            out[name] = {
                "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
                "bytes": len(text.encode()),
            }
    return out


def record(response: Any, settings: Settings, *, source: str, started: float, ended: float) -> dict[str, Any]:
    """One log line for a finished generation (`response` is an engine Response)."""
    stats = response.stats.to_dict()
    rounds = stats.pop("rounds_trace", None)
    rec = {
        "v": 1,
        "source": source,
        "started": _iso(started),
        "ended": _iso(ended),
        "target": model_fingerprint(settings.target),
        "draft": model_fingerprint(settings.draft) if settings.speculative else None,
        "settings": _settings_dict(settings),
        "finish_reason": response.finish_reason,
        "seed": response.seed,
        "stats": stats,
    }
    if rounds is not None:
        rec["rounds"] = rounds
    return rec


class AccLog:
    """The writer a front end keeps for its lifetime; `write` never raises."""

    def __init__(self, settings: Settings, *, source: str, warn: Callable[[str], None] | None = None) -> None:
        self.path = log_path(settings)
        self.source = source
        self._warn = warn or (lambda msg: print(msg, file=sys.stderr))
        self._warned = False

    def write(self, response: Any, settings: Settings, *, started: float, ended: float | None = None) -> None:
        if self.path is None or response is None:
            return
        try:
            rec = record(response, settings, source=self.source, started=started, ended=ended or time.time())
            line = (json.dumps(rec, ensure_ascii=False, default=str) + "\n").encode()
            private_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except Exception as e:  # noqa: BLE001 - a log must never break a generation
            if not self._warned:
                self._warned = True
                self._warn(
                    f"warning: cannot write the acceptance log {self.path}: {e} (--no-log turns it off)"
                )
