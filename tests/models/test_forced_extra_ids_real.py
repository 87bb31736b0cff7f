"""A grammar-forced token only the target's vocabulary has, on a real pair (issue 60, #11): SmolLM2
drafts for SmolLM2 with one more token, '{"name":"' (tests/wide_vocab.py), which the output's
opening forces (a grammar: JSON's own leaves room for whitespace, so nothing is forced there).
The draft is never handed it (llama.cpp refused the whole batch), and the answer
equals plain decoding's."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.llama import Model

from ..wide_vocab import write_wider

GRAMMAR = 'root ::= "{\\"name\\":\\"" [a-z]+ "\\"}"'
ASK = [{"role": "user", "content": "Give a person's name as JSON."}]


@pytest.fixture(scope="module")
def wide_target(smollm2_path, tmp_path_factory):
    with Model(smollm2_path, vocab_only=True) as m:
        like = m.tokenize("{", add_special=False)
    return write_wider(smollm2_path, tmp_path_factory.mktemp("wide") / "target.gguf", ['{"name":"'], like)


def test_a_forced_id_the_draft_lacks_answers_as_plain_decoding(wide_target, smollm2_path):
    s = Settings(target=wide_target, draft=smollm2_path, draft_max="4", n_ctx=512, n_threads=2)
    with Engine(s) as eng:
        kw = {"chat": True, "temperature": 0, "max_tokens": 24, "grammar": GRAMMAR}
        plain = eng.generate(ASK, spec=False, **kw)
        spec = eng.generate(ASK, **kw)
    assert plain.tokens[0] == 49152  # the opening is the target's extra token
    assert spec.tokens == plain.tokens and spec.stats.speculative
    assert spec.text.startswith('{"name":"')  # (cut by max_tokens, maybe: the grammar's name is unbounded)
