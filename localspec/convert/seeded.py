"""Random weights that are the same on every run: each tensor drawn on demand from (seed, its index),
so a synthetic GGUF (the test projector here, the test architectures in tools/synthetic/) is
written tensor by tensor with the same bytes every time."""

from __future__ import annotations

import numpy as np

from localspec.convert.gguf_stream import PlannedTensor

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


class SeededWeights:
    """Tensors drawn on demand from (seed, tensor index): repeatable and order-free."""

    def __init__(self, seed: int, perturb: float) -> None:
        self.seed, self.perturb = seed, perturb
        self.plan: list[PlannedTensor] = []

    def add(self, name: str, shape: tuple[int, ...], fill, dtype: np.dtype = F16, noisy: bool = True) -> None:  # noqa: ANN001
        """fill: a constant, or the std of a Gaussian, or a function (rng) -> array."""
        i = len(self.plan)

        def produce() -> np.ndarray:
            rng = np.random.default_rng([self.seed, i])
            if callable(fill):
                x = np.asarray(fill(rng), np.float32)
            elif isinstance(fill, tuple):  # ("const", value)
                x = np.full(shape, fill[1], np.float32)
            else:
                x = rng.standard_normal(shape, dtype=np.float32) * fill
            if (
                noisy
                and self.perturb > 0
                and x.ndim == 2
                and not callable(fill)
                and not isinstance(fill, tuple)
            ):
                noise = np.random.default_rng([self.seed, i, 1]).standard_normal(shape, dtype=np.float32)
                x = x + noise * (self.perturb * fill)
            return x.astype(dtype)

        self.plan.append(PlannedTensor(name, shape, dtype, produce))

    def const(self, name: str, shape: tuple[int, ...], value: float) -> None:
        self.add(name, shape, ("const", value), F32)
