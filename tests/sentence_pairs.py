"""Six questions and the passage that answers each, written for the embeddings tests: every pair
shares its topic and no other pair does, so a real embedding model puts each question nearest its
own passage. With nomic-embed-text's prefixes, as its model card asks (docs/apps.md)."""

from __future__ import annotations

import numpy as np

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
QUERIES = ["search_query: " + q for q, _ in PAIRS]
DOCS = ["search_document: " + d for _, d in PAIRS]
TEXTS = QUERIES + DOCS


def assert_each_pair_nearest(vectors) -> None:  # noqa: ANN001 - rows for TEXTS, any array-like
    """Each question's best passage is its own, and each passage's best question."""
    v = np.asarray(vectors, dtype=np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    n = len(PAIRS)
    sim = v[:n] @ v[n:].T
    for i in range(n):
        others = np.delete(np.arange(n), i)
        assert sim[i, i] > sim[i, others].max(), (i, sim[i].round(3))
        assert sim[i, i] > sim[others, i].max(), (i, sim[:, i].round(3))
