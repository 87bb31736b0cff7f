"""The pair check: llama.cpp's vocabulary rules, read from GGUF headers only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFWriter

from localspec.gguf.compat import VocabHeader, check_pair, vocab_fingerprint

BASE = [f"<s{i}>" for i in range(5)] + [f"tok{i}" for i in range(295)]


def vocab_gguf(path: Path, tokens=BASE, *, model="gpt2", bos=1, eos=2, add_bos=None) -> Path:  # noqa: ANN001
    """A header-only GGUF carrying just a vocabulary (enough for the check; it loads no weights)."""
    w = GGUFWriter(path, "llama")
    w.add_tokenizer_model(model)
    w.add_token_list(list(tokens))
    w.add_token_types([3] * 5 + [1] * (len(tokens) - 5))
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


def test_identical(tmp_path):
    a, b = vocab_gguf(tmp_path / "a.gguf"), vocab_gguf(tmp_path / "b.gguf")
    r = check_pair(a, b)
    assert r.ok and r.identical and "identical" in r.message
    assert vocab_fingerprint(a) == vocab_fingerprint(b)


def test_special_ids_below_5_are_tolerated(tmp_path):
    b = vocab_gguf(tmp_path / "b.gguf", ["<other>"] + BASE[1:])
    r = check_pair(vocab_gguf(tmp_path / "a.gguf"), b)
    assert r.ok and not r.identical
    assert "special token 0" in r.message
    assert vocab_fingerprint(tmp_path / "a.gguf") != vocab_fingerprint(b)


def test_first_differing_token_is_named(tmp_path):
    changed = list(BASE)
    changed[42], changed[77] = "forty-two", "seventy-seven"
    r = check_pair(vocab_gguf(tmp_path / "a.gguf"), vocab_gguf(tmp_path / "b.gguf", changed))
    assert not r.ok
    assert r.first_diff == (42, "tok37", "forty-two")
    assert "token 42 differs: target 'tok37', draft 'forty-two'" in r.message


@pytest.mark.parametrize(
    ("kwargs", "expect"),
    [
        ({"model": "llama"}, "vocabulary types differ"),
        ({"bos": 3}, "BOS id differs"),
        ({"eos": 4}, "EOS id differs"),
        ({"add_bos": True}, "add-BOS differs"),
    ],
)
def test_header_facts_must_match(tmp_path, kwargs, expect):
    r = check_pair(vocab_gguf(tmp_path / "a.gguf"), vocab_gguf(tmp_path / "b.gguf", **kwargs))
    assert not r.ok and expect in r.message


def test_size_difference_limit(tmp_path):
    a = vocab_gguf(tmp_path / "a.gguf")
    near = vocab_gguf(tmp_path / "near.gguf", BASE + [f"x{i}" for i in range(128)])
    far = vocab_gguf(tmp_path / "far.gguf", BASE + [f"x{i}" for i in range(129)])
    assert check_pair(a, near).ok and "sizes differ" in check_pair(a, near).message
    r = check_pair(a, far)
    assert not r.ok and "differ by 129" in r.message


def test_header_facts_agree_with_llama_cpp(smollm2_path, gemma_path):
    """Defaults we derive for absent keys (e.g. add-BOS) must be what llama.cpp itself reports."""
    from localspec.llama import Model

    for path in (smollm2_path, gemma_path):
        v = VocabHeader.read(path)
        with Model(path, vocab_only=True) as m:
            assert (v.add_bos, v.add_eos, v.bos, v.eos, v.n_tokens) == (
                m.vocab.add_bos,
                m.vocab.add_eos,
                m.vocab.bos,
                m.vocab.eos,
                m.vocab.n_tokens,
            )
            assert all(v.tokens[i] == m.token_text(i) for i in range(0, v.n_tokens, 997))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localspec", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_smollm2_vs_gemma_exits_1(smollm2_path, gemma_path):
    p = _cli("check-pair", str(smollm2_path), str(gemma_path))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "token 5 differs: target '<file_sep>', draft '[multimodal]'" in p.stdout
    assert "vocabulary types differ" in p.stdout


def test_cli_same_model_exits_0(smollm2_path):
    p = _cli("check-pair", str(smollm2_path), str(smollm2_path))
    assert p.returncode == 0 and "identical" in p.stdout


def test_cli_missing_file(tmp_path, smollm2_path):
    p = _cli("check-pair", str(smollm2_path), str(tmp_path / "none.gguf"))
    assert p.returncode == 1 and "no such file" in p.stderr and "Traceback" not in p.stderr
