"""`insert` (fill-in-the-middle) in a served model's capabilities comes from its vocabulary, as
llama.cpp reads it (llama_vocab_fim_pre/suf/mid: the GGUF's keys, or the tokens found by their
text at load - Qwen2.5-Coder's GGUF has no keys, its tokens are found): vocabularies only."""

from __future__ import annotations

from localspec import llama
from localspec.engine.facade import has_fim


def test_a_coder_vocabulary_has_fim_tokens_and_a_chat_or_embedding_one_has_none(
    qwen_target_path, smollm2_path, nomic_path
):
    with llama.Model(qwen_target_path, vocab_only=True) as qwen:
        fim = qwen.fim_tokens()
        assert has_fim(qwen)
        assert [qwen.token_bytes(fim[k], special=True) for k in ("pre", "suf", "mid")] == [
            b"<|fim_prefix|>", b"<|fim_suffix|>", b"<|fim_middle|>",
        ]  # fmt: skip
    for path in (smollm2_path, nomic_path):
        with llama.Model(path, vocab_only=True) as m:
            assert not has_fim(m)
