"""nomic-embed-text-v1.5 served alone by the engine: real similarity (each question nearest its own
answer, with the model card's prefixes), its GGUF's mean pooling on a non-causal model (several
inputs in one pass equal each alone), vectors equal to llama.cpp's own `llama-embedding`, and
generation refused in one line. One engine for the module: the model is 274 MB."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from localspec import paths
from localspec.config import Settings
from localspec.engine import Engine
from localspec.errors import LocalspecError

from ..sentence_pairs import QUERIES, TEXTS, assert_each_pair_nearest

EMBED_CTX = 512
RPC_BUILD = Path(__file__).resolve().parents[2] / "third_party" / "rpc-build" / "bin"


@pytest.fixture(scope="module")
def engine(nomic_path):
    with Engine(Settings(target=nomic_path, embed_ctx=EMBED_CTX, n_threads=2)) as eng:
        yield eng


@pytest.fixture(scope="module")
def vectors(engine) -> np.ndarray:
    return engine.embed(TEXTS).vectors


def test_each_question_is_nearest_its_own_answer(vectors):
    assert_each_pair_nearest(vectors)
    n = len(QUERIES)
    assert np.diag(vectors[:n] @ vectors[n:].T).min() > 0.6  # and near in earnest


def test_pooled_by_its_gguf_unit_length_and_packed_equals_alone(engine, vectors):
    assert engine.embeds_only and engine._embedder.pooling == "mean"  # nomic-bert.pooling_type 1
    assert vectors.shape == (12, 768) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    alone = np.concatenate([engine.embed([t]).vectors for t in QUERIES[:3]])
    # non-causal: an input attends to all of itself and to nothing of the others in its pass
    assert (alone * vectors[:3]).sum(1).min() > 0.9999
    e = engine.embed(["word " * 600], truncate=True)  # cut to --embed-ctx, in one micro-batch
    assert e.n_tokens == [EMBED_CTX] and np.isfinite(e.vectors).all()
    with pytest.raises(LocalspecError, match="--embed-ctx"):
        engine.embed(["word " * 600])


def test_generation_and_a_draft_are_refused_in_one_line(engine, nomic_path, smollm2_path):
    for call in (lambda: engine.generate("Hello", max_tokens=4),
                 lambda: engine.render_chat([{"role": "user", "content": "Hi"}])):  # fmt: skip
        with pytest.raises(
            LocalspecError, match="is an embedding model .nomic-bert.: it answers /v1/embeddings"
        ):
            call()
    with pytest.raises(LocalspecError, match="embedding model: it generates nothing, so it takes no --draft"):
        Engine(Settings(target=nomic_path, draft=smollm2_path, embed_ctx=64))
    with pytest.raises(
        LocalspecError, match="embedding model: it generates no text, and makes embeddings with --embed-ctx"
    ):
        Engine(Settings(target=nomic_path))


def test_vectors_equal_llama_cpps_own(nomic_path, vectors):
    """llama.cpp's llama-embedding on the same file and texts (`make peer` builds it), pooling as
    the GGUF says and scaled to unit length (--embd-normalize 2). Measured: cosine 1.000000 on every
    text; CLS pooling instead gives 0.90-0.95, so the bound tells the poolings apart."""
    # `make peer` builds it with the other peer tools, `make rpc-server` (what `make test` runs) beside rpc-server
    binary = next(
        (b for b in (paths.peer_bin(), RPC_BUILD) if (b / "llama-embedding").is_file()), paths.peer_bin()
    )
    binary = binary / "llama-embedding"
    if not binary.is_file():
        pytest.skip(
            f"llama.cpp's llama-embedding is not built ({binary}): `make rpc-server` or `make peer` builds it"
        )
    cmd = [str(binary), "-m", str(nomic_path), "-p", "\n".join(TEXTS),
           "--embd-normalize", "2", "--embd-output-format", "raw", "-c", str(EMBED_CTX), "-t", "2"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = np.array([[float(x) for x in line.split()] for line in out.stdout.splitlines() if line.strip()])
    assert theirs.shape == vectors.shape, (theirs.shape, out.stdout[:500])
    cos = (theirs * vectors).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() >= 0.999, cos.round(5)
