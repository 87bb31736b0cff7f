"""pair.toml: where a converted pair lives and how to run it.

[pair]
target = "target-q4_k_m.gguf"      # paths relative to the pair folder
draft = "draft-q8_0.gguf"
vocab_fingerprint = "sha256:..."
[runtime]                          # any Settings field: recommended defaults for this pair
draft_max = "auto"
"""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LocalspecError

PAIR_TOML = "pair.toml"


@dataclass(frozen=True)
class PairFile:
    path: Path
    target: Path
    draft: Path
    info: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)


def pair_toml_path(path: Path) -> Path:
    return path / PAIR_TOML if path.is_dir() else path


def read_pair(path: Path) -> PairFile:
    toml_path = pair_toml_path(Path(path))
    if not toml_path.exists():
        hint = " (run `make models` to build the default pair)" if "default" in str(path) else ""
        raise LocalspecError(f"no pair at {path}: {toml_path} does not exist{hint}")
    try:
        data = tomllib.loads(toml_path.read_bytes().decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise LocalspecError(f"{toml_path} is not valid TOML: {e}") from None
    except OSError as e:
        raise LocalspecError(f"cannot read {toml_path}: {e.strerror}") from None
    pair, runtime = data.get("pair", {}), data.get("runtime", {})
    if not isinstance(pair, dict) or not all(isinstance(pair.get(k), str) for k in ("target", "draft")):
        raise LocalspecError(f'{toml_path} needs [pair] target = "FILE.gguf" and draft = "FILE.gguf"')
    if not isinstance(runtime, dict):
        raise LocalspecError(f"{toml_path}: [runtime] must be a table of settings")
    base = toml_path.parent
    return PairFile(
        path=toml_path,
        target=(base / pair["target"]).resolve(),
        draft=(base / pair["draft"]).resolve(),
        info={k: v for k, v in pair.items() if k not in ("target", "draft")},
        runtime=dict(runtime),
    )
