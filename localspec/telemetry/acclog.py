"""The acceptance log: one JSON line appended per generation by every front end (run, chat, the
server), so how well a draft does can be studied later (`localspec stats`).

Logging is a side job, and bounded: `write` hands the response to a writer thread (deferred.py), so
neither the event loop nor the engine thread waits on the disk; the thread appends each batch
with one write() on an O_APPEND descriptor, so lines from several processes never interleave. A
line holds no setting longer than MAX_SETTING_BYTES (a 49k-entry logit_bias is its digest), and a
file past MAX_LOG_BYTES is renamed to `NAME.1` (the one before it goes) and started anew. A failing
write warns once and generation carries on. The file is created 0600 in folders created 0700, and
no server setting (the API key) is ever in it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from localspec import paths
from localspec.config.settings import Settings, setting_fields
from localspec.deferred import Deferred
from localspec.files import PRIVATE_FILE, fingerprint, private_dir

LOG_NAME = "acceptance.jsonl"
MAX_SETTING_BYTES = 1024  # a setting's value in a line; a longer one is its digest
MAX_LOG_BYTES = 64 << 20  # then the log is renamed to NAME.1 and started anew
MAX_PENDING = 1000  # lines waiting for the writer thread; more are dropped (and counted)


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
    """The settings of a generation; a schema or grammar (up to 64 KB), and any value longer than
    MAX_SETTING_BYTES (a request's logit_bias, its stop strings), as a digest and a size."""
    out = {}
    for f in dataclasses.fields(s):
        if f.name in _SKIP:
            continue
        v = getattr(s, f.name)
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
        if f.name in ("json_schema", "grammar") and v is not None or len(text) > MAX_SETTING_BYTES:
            data = text.encode("utf-8", "surrogatepass")
            v = {"sha256": hashlib.sha256(data).hexdigest()[:16], "bytes": len(data)}
        out[f.name] = v
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
    """The writer a front end keeps for its lifetime; `write` never raises and never waits on the
    disk (the line is built and appended on the writer thread); `flush` waits for it."""

    def __init__(self, settings: Settings, *, source: str, warn: Callable[[str], None] | None = None) -> None:
        self.path = log_path(settings)
        self.source = source
        self._warn = warn or (lambda msg: print(msg, file=sys.stderr))
        self._warned = False
        self._pending: Deferred = Deferred(self._append, name="localspec-acclog", max_items=MAX_PENDING)

    def write(self, response: Any, settings: Settings, *, started: float, ended: float | None = None) -> None:
        if self.path is None or response is None:
            return
        if not self._pending.put((response, settings, started, ended or time.time())):
            self._warn_once(f"it cannot keep up: {self._pending.dropped} line(s) dropped")

    def flush(self, timeout: float | None = None) -> bool:
        return self._pending.flush(timeout)

    def _append(self, batch: list[tuple[Any, Settings, float, float]]) -> None:
        try:
            lines = b"".join(
                (json.dumps(record(r, s, source=self.source, started=t0, ended=t1), ensure_ascii=False,
                            default=str) + "\n").encode("utf-8", "surrogatepass")
                for r, s, t0, t1 in batch
            )  # fmt: skip
            private_dir(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, PRIVATE_FILE)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):  # a FIFO or a device would block or swallow it
                    raise OSError(f"{self.path} is not a regular file")
                if info.st_size + len(lines) > MAX_LOG_BYTES:
                    _rotate(self.path, info)
                    os.close(fd)
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
                os.write(fd, lines)
            finally:
                os.close(fd)
        except Exception as e:  # noqa: BLE001 - a log must never break a generation
            self._warn_once(str(e))

    def _warn_once(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            self._warn(f"warning: cannot write the acceptance log {self.path}: {why} (--no-log turns it off)")


def _rotate(path: Path, info: os.stat_result) -> None:
    """NAME -> NAME.1, unless another process got there first (NAME is already another file)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return
    if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
        os.replace(path, path.with_name(path.name + ".1"))
