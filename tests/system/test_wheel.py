"""The package as a user installs it: a wheel built with `pip wheel .`, installed into a fresh venv
outside the checkout, run from another folder. Presets and defaults must come from package data."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (whl,) = tmp.glob("localspec-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(
        subprocess.check_output(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(purelib), str(whl)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # the dependencies come from this environment (appended after the venv's own site-packages, and
    # without its .pth files, so the checkout's editable install stays out)
    deps = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p).is_dir()]
    (purelib / "deps-from-test-env.pth").write_text("\n".join(deps) + "\n")
    return venv


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCALSPEC_") and k != "PYTHONPATH"}
    env["HOME"] = str(cwd)  # the user's folders (platformdirs) are this test's
    for var in ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        env.pop(var, None)
    return subprocess.run(
        [venv / "bin" / "python", "-m", "localspec", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_wheel_runs_outside_the_checkout(installed, tmp_path, smollm2_path):
    where = _run(installed, tmp_path, "--help")
    assert where.returncode == 0, where.stderr
    probe = subprocess.run(
        [installed / "bin" / "python", "-c", "import localspec; print(localspec.__file__)"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert str(ROOT) not in probe.stdout and str(installed) in probe.stdout, probe.stdout

    listing = _run(installed, tmp_path, "list")
    assert listing.returncode == 0, listing.stderr
    for preset in ("qwen2.5-32b", "gemma3-27b", "llama3.1-8b"):  # shipped in localspec/data/presets
        assert preset in listing.stdout, listing.stdout

    run = _run(
        installed, tmp_path, "run", "--target", str(smollm2_path), "--temperature", "0", "--max-tokens", "8",
        "--no-log", "The capital of France is",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    assert not (tmp_path / "models").exists()  # nothing is written beside where it runs

    # the chat page is package data: read from the installed package, vendored libraries and licences too
    files = ("index.html", "app.js", "app.css", "vendor/marked.esm.js", "vendor/dompurify.LICENSE.txt")
    page = subprocess.run(
        [installed / "bin" / "python", "-c",
         f"from localspec.server.page import _read; print(all(_read(f) for f in {files!r}))"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert page.stdout.strip() == "True", page.stderr

    # the sampler's row kernels are compiled into the wheel, and load from the installed package
    kernel = subprocess.run(
        [installed / "bin" / "python", "-c",
         "from localspec.decode import sampling as s; print(s.KERNEL.__file__, s.KERNEL.isa())"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert kernel.returncode == 0 and str(installed) in kernel.stdout, kernel.stdout + kernel.stderr
