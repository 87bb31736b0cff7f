"""The GGUF header check every command runs before llama.cpp opens a file: each corruption gives one
LocalspecError naming the file, and Hypothesis mutations of valid headers (bit flips, cuts, huge
counts) never give anything else — no MemoryError, no struct.error, no hang."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localspec.errors import LocalspecError
from localspec.gguf.file import read_header, validate_gguf

from ..gguf_bytes import F32, Gguf, kv_array_str, kv_array_u32, kv_str, kv_u32, s, tensor_info

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_the_hand_built_file_is_valid(tmp_path):
    h = validate_gguf(write(tmp_path, Gguf().bytes()))
    assert [t.name for t in h.tensors] == ["a.weight", "b.weight"] and h.file_size == h.data_offset + 96


def with_kv(kv: bytes) -> Gguf:
    g = Gguf()
    g.kvs[1] = kv
    return g


@pytest.mark.parametrize(
    "gguf, needle",
    [
        (with_kv(kv_u32("general.alignment", 0)), "general.alignment is 0, not a power of two"),
        (with_kv(kv_u32("general.alignment", 24)), "general.alignment is 24"),
        (with_kv(kv_str("general.alignment", "abc")), "general.alignment is 'abc'"),
        (
            with_kv(kv_array_u32("tokenizer.ggml.merges", [], count=2**61)),
            "array of 2305843009213693952 items",
        ),
        (with_kv(kv_array_str("tokenizer.ggml.merges", [], count=2**62)), "is larger than the whole file"),
        (with_kv(s("k") + struct.pack("<I", 99)), "unknown value type 99"),
        (with_kv(s("k") + struct.pack("<IIQ", 9, 9, 1)), "an array of arrays"),
        (Gguf(tensors=[tensor_info("a.weight", (8,), 77, 0)]), "unknown type 77"),
        (Gguf(tensors=[tensor_info("a.weight", (), F32, 0)]), "has 0 dimensions"),
        (Gguf(tensors=[tensor_info("a.weight", (1, 1, 1, 1, 1), F32, 0)]), "has 5 dimensions"),
        (Gguf(tensors=[tensor_info("a.weight", (7,), 8, 0)]), "impossible shape"),  # Q8_0 rows are 32s
        (Gguf(tensors=[tensor_info("a.weight", (8,), F32, 3)]), "not a multiple of the alignment"),
        (Gguf(tensors=[tensor_info("a.weight", (8,), F32, 0)] * 2, data=bytes(32)), "same name"),
    ],
)
def test_corrupt_headers_are_named(tmp_path, gguf, needle):
    with pytest.raises(LocalspecError, match="not a valid GGUF file") as e:
        validate_gguf(write(tmp_path, gguf.bytes()))
    assert needle in str(e.value) and str(tmp_path) in str(e.value)


@pytest.mark.parametrize(
    "gguf, needle",
    [
        (Gguf(data=bytes(95)), "truncated: 4"),  # the last tensor is one byte short
        (Gguf(tensors=[tensor_info("a.weight", (8,), F32, 2**40)]), "truncated"),  # offset past the end
        (Gguf(version=1), "unsupported GGUF version 1"),
    ],
)
def test_truncated_and_unsupported(tmp_path, gguf, needle):
    with pytest.raises(LocalspecError, match=needle):
        validate_gguf(write(tmp_path, gguf.bytes()))


def test_header_cut_anywhere_is_truncated(tmp_path):
    data = Gguf().header()
    for n in range(5, len(data), 7):
        with pytest.raises(LocalspecError, match="truncated"):
            read_header(write(tmp_path, data[:n]))


def test_check_pair_names_truncated_tensor_data(tmp_path, smollm2_path):
    # it used to read only the header and pass a file whose weights were cut short
    cut = write(tmp_path, smollm2_path.read_bytes()[:-1000], "cut.gguf")
    proc = subprocess.run(
        [sys.executable, "-m", "localspec", "check-pair", str(smollm2_path), str(cut)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 1 and "truncated" in proc.stderr and "Traceback" not in proc.stderr, proc


# -- fuzz ------------------------------------------------------------------------------------------
VALID = Gguf().bytes()
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _only_clean_errors(tmp_path: Path, data: bytes) -> None:
    p = write(tmp_path, data)
    try:
        read_header(p, load_arrays=("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"))
    except LocalspecError as e:
        assert str(p) in str(e) and "\n" not in str(e)


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 7)), min_size=1, max_size=8))
def test_fuzz_bit_flips(tmp_path, flips):
    data = bytearray(VALID)
    for pos, bit in flips:
        data[pos] ^= 1 << bit
    _only_clean_errors(tmp_path, bytes(data))


@FUZZ
@given(cut=st.integers(0, len(VALID)), tail=st.binary(max_size=64))
def test_fuzz_truncation_and_garbage(tmp_path, cut, tail):
    _only_clean_errors(tmp_path, VALID[:cut] + tail)


# offsets of every 8-byte count in the header (tensor and kv counts, string and array lengths)
def _u64_slots() -> list[int]:
    head = Gguf().header()
    return [i for i in range(8, len(head) - 8) if 0 < struct.unpack_from("<Q", head, i)[0] < 4096]


@FUZZ
@given(slot=st.sampled_from(_u64_slots()), value=st.one_of(st.integers(2**20, 2**64 - 1), st.just(2**64 - 1)))
def test_fuzz_huge_counts(tmp_path, slot, value):
    data = bytearray(VALID)
    struct.pack_into("<Q", data, slot, value)
    _only_clean_errors(tmp_path, bytes(data))
