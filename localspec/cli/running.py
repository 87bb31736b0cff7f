"""How `localspec list` finds the servers running here: each `localspec serve` leaves a file in the
user's state folder (servers/PORT.json: its URL and process id) while it runs, and `list` asks
each one's GET /models. A file whose process is gone (a server killed) is skipped and removed."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from localspec.config.settings import API_KEY_ENV
from localspec.files import write_text_atomic
from localspec.paths import state_dir

ASK_TIMEOUT_S = 3.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy


def folder() -> Path:
    return state_dir() / "servers"


def announce(url: str, port: int) -> Path:
    """Note this process as the server at `url`; the caller removes the file when it stops."""
    path = folder() / f"{port}.json"
    write_text_atomic(path, json.dumps({"url": url, "pid": os.getpid()}), private=True)
    return path


def withdraw(path: Path) -> None:
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def servers() -> list[dict[str, Any]]:
    """The servers running here: {url, pid, models: [GET /models' entries] or error: why not}."""
    out = []
    for path in sorted(folder().glob("*.json")) if folder().is_dir() else ():
        try:
            info = json.loads(path.read_text())
            alive = psutil.pid_exists(int(info["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not alive:
            path.unlink(missing_ok=True)
            continue
        out.append({**info, **_ask(str(info.get("url", "")))})
    return out


def _ask(url: str) -> dict[str, Any]:
    if not url.startswith("http://"):
        return {"error": "not a server address"}
    req = urllib.request.Request(url + "/models")
    if os.environ.get(API_KEY_ENV):
        req.add_header("Authorization", f"Bearer {os.environ[API_KEY_ENV]}")
    try:
        with _DIRECT.open(req, timeout=ASK_TIMEOUT_S) as resp:
            return {"models": json.loads(resp.read())["data"]}
    except urllib.error.HTTPError as e:
        why = f"it needs its API key (set {API_KEY_ENV})" if e.code == 401 else f"HTTP {e.code}"
        return {"error": why}
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"no answer ({getattr(e, 'reason', None) or e})"}
