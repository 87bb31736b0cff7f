"""RoPE scaling on the real SmolLM2 (trained on 8192 tokens), loaded through the one load pipeline
with a 16k context: unscaled, the load warns that the context is past the trained one and names the
fix; YaRN (scale 2) reaches llama.cpp and changes the logits; `--rope-scaling none` with a scale is
the unscaled model. (That YaRN keeps answers coherent past 8192 tokens is tests/system/
test_claude_code.py's ~12.8k-token prompt: a prefill that long costs minutes here.)"""

from __future__ import annotations

import numpy as np

from localspec.config.settings import Settings
from localspec.engine.loader import load_pair

PROMPT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"


def _logits(smollm2_path, **rope) -> tuple[np.ndarray, list[str]]:
    s = Settings(target=smollm2_path, n_ctx=16384, lookup="only", n_threads=2, **rope)
    lines: list[str] = []
    with load_pair(s, log=lines.append) as lp:
        assert lp.target is not None and lp.target_ctx is not None
        ids = lp.target.tokenize(PROMPT)
        return lp.target_ctx.eval(ids, 0, len(ids)).copy(), lines


def test_yarn_reaches_llama_cpp_and_the_unscaled_load_warns(smollm2_path):
    plain, plain_log = _logits(smollm2_path)
    yarn, yarn_log = _logits(smollm2_path, rope_scaling="yarn", rope_scale=2.0, yarn_orig_ctx=8192)
    off, _ = _logits(smollm2_path, rope_scaling="none", rope_scale=2.0)
    warned = [line for line in plain_log if "trained context" in line]
    assert warned and "past SmolLM2-135M-Instruct.Q4_1.gguf's trained context (8192 tokens)" in warned[0]
    assert "--rope-scaling yarn --rope-scale 2" in warned[0]
    assert not [line for line in yarn_log if "trained context" in line]
    assert np.abs(yarn - plain).max() > 0.1  # every row moves (YaRN's attention temperature, its long dims)
    assert np.array_equal(off, plain)  # scaling `none` ignores a scale, as llama.cpp documents
    assert plain[-1].argmax() == yarn[-1].argmax()  # a short prompt reads the same either way: " Madrid"
