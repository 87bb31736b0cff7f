"""Every supported architecture, on tiny random checkpoints: llama.cpp running our GGUF must compute
what transformers computes (checked against a numpy forward pass with Hugging Face semantics)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ..fixtures_hf import TINY, hf_reference_logits, tiny_hf

TEXT = "the cat in the hat sat on a mat, then 12345 hats: café ☕"


@pytest.mark.parametrize("arch", sorted(TINY))
@pytest.mark.parametrize("bf16", [False, True], ids=["f16-src", "bf16-src"])
def test_tiny_model_matches_reference(tmp_path, arch, bf16):
    from tokenizers import Tokenizer

    from localspec.convert.hf import convert_hf
    from localspec.llama import Context, Model

    src = tiny_hf(tmp_path / arch, arch, bf16=bf16)
    n_vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    out = convert_hf(src, tmp_path / "out.gguf", out_type="bf16" if bf16 else "f16", log=lambda _m: None)
    with Model(out) as m:
        toks = m.tokenize(TEXT, add_special=False)
        spm_space = (
            " " if arch == "MistralForCausalLM" else ""
        )  # SentencePiece's prefix space, kept per piece
        assert m.detokenize(toks) == spm_space + TEXT
        assert (
            Tokenizer.from_file(str(src / "tokenizer.json")).encode(TEXT, add_special_tokens=False).ids
            == toks
        )
        assert m.n_vocab == n_vocab and m.token_text(n_vocab - 1).startswith(
            "[PAD"
        )  # padded to the embedding rows
        with Context(m, n_ctx=64) as c:
            got = c.eval(toks, 0, len(toks)).copy()
        pre = m.meta("tokenizer.ggml.pre")
    ref = hf_reference_logits(src, toks)
    assert pre == {
        "Qwen2ForCausalLM": "qwen2",
        "Qwen3ForCausalLM": "qwen2",
        "MistralForCausalLM": "default",
    }.get(arch, "llama-bpe")
    # f16/bf16 activations inside llama.cpp's matmuls: a few parts in a thousand of the logit range
    assert np.abs(got - ref).max() < 0.02 * np.abs(ref).max(), np.abs(got - ref).max()
    assert (got.argmax(1) == ref.argmax(1)).mean() > 0.9


def test_llama3_rope_factors_shape():
    from localspec.convert.hf import llama3_rope_factors

    cfg = {"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0, **TINY["LlamaForCausalLM"]}
    f = llama3_rope_factors(cfg)
    assert f.shape == (8,) and f[0] == 1.0 and f[-1] == 8.0  # high frequencies kept, low ones stretched
    assert np.all(np.diff(f) >= 0)
    assert llama3_rope_factors({**cfg, "rope_scaling": None}) is None
