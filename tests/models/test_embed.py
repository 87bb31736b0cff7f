"""The embeddings context on a real model: its memory against the plan, inputs packed into one pass
equal to each alone, and Engine.embed running its passes on the engine thread beside a generation
without changing what the generation says."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from localspec.config import Settings
from localspec.engine import Engine
from localspec.engine.placement import parse_log
from localspec.gguf.memory_plan import MiB, Runtime, plan_embeddings, read_spec
from localspec.llama import Embedder

TEXTS = ["The cat sat on the mat.", "Quarterly revenue rose by eight percent.", "Bonjour à tous !"]


@pytest.fixture(scope="module")
def embedder(smollm2):
    with Embedder(smollm2, n_ctx=256) as e:
        yield e


def test_the_plan_matches_llama_cpp(smollm2, embedder):
    plan = plan_embeddings(read_spec(smollm2.path), Runtime(embed_ctx=256))
    seen = parse_log(embedder.init_log)
    assert embedder.pooling == "mean"  # SmolLM2's GGUF says none: mean
    assert abs(plan.cache_bytes - seen.kv_total) <= 0.1 * seen.kv_total, (
        plan.cache_bytes / MiB,
        seen.kv_total / MiB,
    )
    compute = seen.host_sum("compute")
    assert abs(plan.compute_bytes - compute) <= 0.1 * compute, (plan.compute_bytes / MiB, compute / MiB)


def test_a_packed_pass_equals_each_input_alone(smollm2, embedder):
    ids = [smollm2.tokenize(t, add_special=True) for t in TEXTS]
    together = embedder.embed(ids)
    alone = np.concatenate([embedder.embed([x]) for x in ids])
    cos = (together * alone).sum(1) / np.linalg.norm(together, axis=1) / np.linalg.norm(alone, axis=1)
    assert cos.min() > 0.9999, cos
    with pytest.raises(Exception, match="non-empty inputs of 256 tokens"):
        embedder.embed([[1] * 257])


def test_embed_runs_on_the_engine_thread_beside_a_generation(smollm2_path, monkeypatch):
    threads: set[str] = set()
    made = Embedder.embed

    def spy(self, inputs):  # noqa: ANN001, ANN202
        threads.add(threading.current_thread().name)
        return made(self, inputs)

    monkeypatch.setattr(Embedder, "embed", spy)
    s = Settings(target=smollm2_path, draft=smollm2_path, draft_max="4", n_ctx=512, embed_ctx=64)
    with Engine(s) as eng:
        alone = eng.generate("Name three rivers.", chat=True, max_tokens=24, temperature=0).text
        handle = eng.submit("Name three rivers.", chat=True, max_tokens=24, temperature=0)
        e = eng.embed(TEXTS * 8)  # 24 inputs: two passes at least, between the generation's rounds
        assert "".join(c.text for c in handle) == alone
    assert threads == {"localspec-engine"}
    assert e.vectors.shape == (24, 576) and np.allclose(np.linalg.norm(e.vectors, axis=1), 1, atol=1e-5)
    assert np.allclose(e.vectors[0], e.vectors[3], atol=1e-4)  # the same text, another pass
