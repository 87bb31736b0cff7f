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

TOMLDecodeError = tomllib.TOMLDecodeError


def loads(text: str) -> dict[str, Any]:
    return tomllib.loads(text)


def read_toml(path: Path | Traversable, what: str = "file") -> dict[str, Any]:
    """The parsed file, or a LocalspecError naming it (bad TOML, not UTF-8, unreadable)."""
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise LocalspecError(f"{path} is not valid TOML: {e}") from None
    except IsADirectoryError:
        raise LocalspecError(f"cannot read {what} {path}: Is a directory") from None
    except OSError as e:
        raise LocalspecError(f"cannot read {what} {path}: {e.strerror}") from None
