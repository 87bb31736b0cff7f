"""Which CPU variant a GGML_BACKEND_DL build loads (localspec/llama/backends.py): ggml's own score
decides, AMX's variant never wins on its own, LOCALSPEC_CPU_VARIANT overrides. The scores are
stubbed here; `localspec doctor` shows the real choice (tests/system/test_doctor.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.errors import LocalspecError
from localspec.llama import backends

# the scores ggml gives these variants on a Sapphire Rapids Xeon (0: the CPU cannot run it)
XEON = {"x64": 1, "haswell": 64, "skylakex": 128, "icelake": 640, "zen4": 1200, "sapphirerapids": 9000}


@pytest.fixture
def variants(monkeypatch) -> list[Path]:
    monkeypatch.setattr(backends, "score", lambda p: XEON[backends.variant_name(p)])
    return [Path(f"/lib/libggml-cpu-{name}.so") for name in XEON]


def test_the_best_variant_without_amx_is_chosen(variants):
    got = backends.choose(variants)
    assert got.name == "zen4" and got.score == 1200
    assert "sapphirerapids skipped" in got.reason


def test_a_variant_can_be_asked_for_by_name(variants):
    assert backends.choose(variants, "sapphirerapids").name == "sapphirerapids"  # AMX, when shown safe
    assert backends.choose(variants, "haswell").path == Path("/lib/libggml-cpu-haswell.so")


def test_an_unknown_or_unrunnable_variant_is_one_clear_error(variants, monkeypatch):
    with pytest.raises(LocalspecError, match="has CPU variants x64, haswell"):
        backends.choose(variants, "power9")
    monkeypatch.setitem(XEON, "icelake", 0)
    with pytest.raises(LocalspecError, match="cannot run"):
        backends.choose(variants, "icelake")


def test_module_names_split_into_cpu_variants_and_other_backends(tmp_path):
    for name in ("libggml-cpu-haswell.so", "libggml-cpu-x64.so", "libggml-rpc.so", "libggml-base.so",
                 "libggml.so", "libllama.so"):  # fmt: skip
        (tmp_path / name).touch()
    cpu, others = backends.modules(tmp_path)
    assert [p.name for p in cpu] == ["libggml-cpu-haswell.so", "libggml-cpu-x64.so"]
    assert [p.name for p in others] == ["libggml-rpc.so"]
