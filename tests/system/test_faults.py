"""Faults while writing outputs: a writer killed with SIGKILL leaves nothing that looks finished, and
a full disk (a 1 MiB tmpfs) gives one clear error and removes the partial file, for quantize, convert's
writer, pair and pair.toml. Without permission to mount, a fault-injecting writer stands in."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from localspec.errors import LocalspecError
from localspec.files import PARTIAL_SUFFIX, atomic_output, copy_atomic, output_error, write_text_atomic
from localspec.gguf.file import validate_gguf

from ..helpers import localspec

ROOT = Path(__file__).resolve().parents[2]


def test_sigkill_mid_write_leaves_nothing_finished_looking(smollm2_path, tmp_path):
    dst = tmp_path / "q8.gguf"
    proc = subprocess.Popen(
        [sys.executable, "-m", "localspec", "quantize", str(smollm2_path), str(dst), "--type", "q8_0"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            partial = [p for p in tmp_path.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
            if partial and partial[0].stat().st_size > 1 << 20:  # the header and some tensors are out
                break
            time.sleep(0.005)
        assert proc.poll() is None, "quantize finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not dst.exists()
    (left,) = tmp_path.iterdir()  # a hidden partial named after the killed pid, not a model
    assert left.name == f".q8.gguf.{proc.pid}{PARTIAL_SUFFIX}"
    with pytest.raises(LocalspecError):  # llama.cpp writes the header last: here it is still zeros
        validate_gguf(left)
    # the next writer of the same output removes what the dead one left
    with atomic_output(dst) as tmp:
        tmp.write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.gguf"]


def test_partials_of_live_writers_are_kept(tmp_path):
    live = tmp_path / f".out.gguf.{os.getppid()}{PARTIAL_SUFFIX}"
    live.write_text("being written")
    write_text_atomic(tmp_path / "out.gguf", "done")
    assert live.exists()


# -- a full disk ------------------------------------------------------------------------------------
@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs: every output bigger than that hits ENOSPC."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); test_injected_enospc covers the logic")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def assert_disk_full_error(proc: subprocess.CompletedProcess, folder: Path) -> None:
    assert proc.returncode == 1, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "no space left on the device" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert [p for p in folder.rglob("*") if p.is_file()] == []


def test_quantize_to_a_full_disk(full_disk, smollm2_path):
    # llama.cpp itself only says 'iostream error'
    proc = localspec("quantize", str(smollm2_path), str(full_disk / "q.gguf"), "--type", "q8_0")
    assert_disk_full_error(proc, full_disk)


def test_pair_to_a_full_disk(full_disk, smollm2_path):
    proc = localspec("pair", str(smollm2_path), str(smollm2_path), "--out-dir", str(full_disk / "p"))
    assert_disk_full_error(proc, full_disk)


def test_gguf_writer_to_a_full_disk(full_disk):
    # convert's writer (gguf_stream) writes through Python's file object: ENOSPC is an OSError
    from localspec.convert.gguf_stream import PlannedTensor, write_gguf

    big = PlannedTensor("w", (1024, 1024), np.dtype(np.float32), lambda: np.zeros((1024, 1024), np.float32))
    with pytest.raises(LocalspecError, match="no space left on the device"):
        with atomic_output(full_disk / "c.gguf") as tmp:
            write_gguf(tmp, "llama", [], [big])
    assert list(full_disk.iterdir()) == []


def test_text_output_to_a_full_disk(full_disk):
    (full_disk / "filler").write_bytes(bytes((1 << 20) - 4096))
    with pytest.raises(LocalspecError, match="no space left"):
        write_text_atomic(full_disk / "pair.toml", "x" * 100_000)
    assert [p.name for p in full_disk.iterdir()] == ["filler"]


def test_a_copy_to_a_full_disk(full_disk, tmp_path):
    # another filesystem: no hard link, a copy (pair --mmproj into a pair folder elsewhere)
    src = tmp_path / "mmproj.gguf"
    src.write_bytes(os.urandom(2 << 20))
    with pytest.raises(LocalspecError, match="no space left on the device"):
        copy_atomic(src, full_disk / "mmproj.gguf")
    assert list(full_disk.iterdir()) == []


def test_copy_atomic_links_where_it_can_else_copies(tmp_path, monkeypatch):
    src = tmp_path / "mmproj.gguf"
    src.write_bytes(b"projector")
    (tmp_path / "alias.gguf").symlink_to(src.name)  # a link to the file, not to the symlink
    linked = copy_atomic(tmp_path / "alias.gguf", tmp_path / "pair" / "mmproj.gguf")
    assert not linked.is_symlink() and os.path.samefile(linked, src)
    assert copy_atomic(linked, linked) == linked and linked.read_bytes() == b"projector"  # already there

    def cross_device(*_a, **_k):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", cross_device)
    copied = copy_atomic(src, tmp_path / "elsewhere" / "mmproj.gguf")
    assert copied.read_bytes() == b"projector" and not os.path.samefile(copied, src)
    assert not list(tmp_path.rglob(f"*{PARTIAL_SUFFIX}"))


def test_injected_enospc(tmp_path):
    dst = tmp_path / "out.gguf"
    with pytest.raises(LocalspecError, match="no space left on the device"):
        with atomic_output(dst) as tmp:
            tmp.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert list(tmp_path.iterdir()) == []


def test_read_only_folder_is_named():
    err = output_error("/proc/out.gguf", OSError(errno.EROFS, "Read-only file system"))
    assert err is not None and "Read-only file system" in str(err) and "/proc/out.gguf" in str(err)


def test_other_errors_pass_through(tmp_path):
    with pytest.raises(ValueError):
        with atomic_output(tmp_path / "x.gguf") as tmp:
            tmp.write_text("y")
            raise ValueError("a bug, not a disk problem")
    assert list(tmp_path.iterdir()) == []
