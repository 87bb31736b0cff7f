"""nomic-embed-text-v1.5 served alone by the engine: real similarity (each question nearest its own
answer, with the model card's prefixes), its GGUF's mean pooling on a non-causal model (several
inputs in one pass equal each alone), vectors equal to llama.cpp's own `llama-embedding`, and
generation refused in one line. One engine for the module: the model is 274 MB."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from localspec import paths
from localspec.config import Settings
from localspec.engine import Engine
from localspec.errors import LocalspecError

# six questions and the passage that answers each, written for this test: every pair shares its
# topic and no other pair does
PAIRS = [
    ("How do I bake sourdough bread at home?",
     "Mix flour, water and a starter, let the dough rise overnight, then bake it in a hot oven."),
    ("What causes the seasons on Earth?",
     "The tilt of the planet's axis changes how directly sunlight strikes each hemisphere over a year."),
    ("How can I fix a flat bicycle tyre?",
     "Take out the inner tube, find the puncture, patch it and pump the tyre back up."),
    ("Which programming language is good for data analysis?",
     "Python, with pandas and NumPy, is widely used to clean, explore and chart tables of data."),
    ("Why do cats purr?",
     "A content cat purrs, and cats also purr to soothe themselves when they are hurt or stressed."),
    ("When did the Western Roman Empire fall?",
     "In 476 AD Odoacer deposed Romulus Augustulus, and Rome's last western emperor was gone."),
]  # fmt: skip
# nomic-embed-text's model card: a query and a document each carry their task's prefix
QUERIES = ["search_query: " + q for q, _ in PAIRS]
DOCS = ["search_document: " + d for _, d in PAIRS]
EMBED_CTX = 512


@pytest.fixture(scope="module")
def engine(nomic_path):
    with Engine(Settings(target=nomic_path, embed_ctx=EMBED_CTX, n_threads=2)) as eng:
        yield eng


@pytest.fixture(scope="module")
def vectors(engine) -> np.ndarray:
    return engine.embed(QUERIES + DOCS).vectors


def test_each_question_is_nearest_its_own_answer(vectors):
    q, d = vectors[: len(PAIRS)], vectors[len(PAIRS) :]
    sim = q @ d.T  # unit vectors: cosine similarity
    for i in range(len(PAIRS)):
        others = np.delete(np.arange(len(PAIRS)), i)
        assert sim[i, i] > sim[i, others].max(), (i, sim[i].round(3))  # the question's best passage
        assert sim[i, i] > sim[others, i].max(), (i, sim[:, i].round(3))  # the passage's best question
    assert np.diag(sim).min() > 0.6, sim.round(3)


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
        with pytest.raises(LocalspecError, match="is an embedding model .nomic-bert.: it answers /v1/embeddings"):
            call()
    with pytest.raises(LocalspecError, match="embedding model: it generates nothing, so it takes no --draft"):
        Engine(Settings(target=nomic_path, draft=smollm2_path, embed_ctx=64))
    with pytest.raises(LocalspecError, match="--embed-ctx 0 turns embeddings off"):
        Engine(Settings(target=nomic_path))


def test_vectors_equal_llama_cpps_own(nomic_path, vectors):
    """llama.cpp's llama-embedding on the same file and texts (`make peer` builds it)."""
    binary = paths.peer_bin() / "llama-embedding"
    if not binary.is_file():
        pytest.skip(f"llama.cpp's llama-embedding is not built ({binary}): `make peer` builds it")
    texts = QUERIES + DOCS
    cmd = [str(binary), "-m", str(nomic_path), "-p", "\n".join(texts), "--pooling", "mean",
           "--embd-normalize", "2", "--embd-output-format", "raw", "-c", str(EMBED_CTX), "-t", "2"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = np.array([[float(x) for x in line.split()] for line in out.stdout.splitlines() if line.strip()])
    assert theirs.shape == vectors.shape, (theirs.shape, out.stdout[:500])
    cos = (theirs * vectors).sum(1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() >= 0.999, cos.round(5)
