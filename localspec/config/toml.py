"""Reading TOML (tomllib, or tomli before Python 3.11) with one clear error for a bad file."""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from localspec.errors import LocalspecError
from localspec.files import read_capped

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


MAX_TOML_BYTES = 1 << 20  # settings, a pair, a preset: a few KB


def read_toml(path: Path | Traversable, what: str = "file", *, missing: str | None = None) -> dict[str, Any]:
    """The parsed file, or a LocalspecError naming it (missing - `missing` says so in the caller's
    words -, bad TOML, not UTF-8, not a regular file, over MAX_TOML_BYTES, unreadable)."""
    try:
        if isinstance(path, Path):
            data = read_capped(path, what, MAX_TOML_BYTES, missing=missing)
        else:  # package data
            data = path.read_bytes()
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise LocalspecError(f"{path} is not valid TOML: {e}") from None
    except RecursionError:
        raise LocalspecError(f"{path} is not valid TOML: nested too deeply") from None
    except OSError as e:
        raise LocalspecError(f"cannot read {what} {path}: {e.strerror}") from None
