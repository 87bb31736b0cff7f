"""Shared fixtures: the real models from PyPI (`make models` puts them in models/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


@pytest.fixture(autouse=True, scope="session")
def _private_state_dir(tmp_path_factory):
    """The acceptance log and chat history that tests write stay out of the user's state dir (Linux:
    platformdirs reads XDG_STATE_HOME; subprocesses inherit it)."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make models` first")
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _need(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _need(MODELS / "gemma-3-270m-q4_k_m.gguf")


@pytest.fixture(scope="session")
def default_pair() -> Path:
    """The embedded stand-in pair: INT8 SmolLM2 draft + INT4 widened SmolLM2 target."""
    return _need(MODELS / "default" / "pair.toml")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from localspec.backend import Model

    with Model(smollm2_path) as m:
        yield m
