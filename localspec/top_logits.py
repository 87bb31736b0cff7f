"""Logits rows given as their m largest entries: what llama.cpp's backend top-k leaves of a row
(`llama_set_sampler` with a top-k chain runs inside llama_decode, on the device that made the
logits), so no full-vocabulary row crosses to the host or is read by numpy. A leaf: the llama.cpp
boundary makes them and the decoding algorithm reads them, neither importing the other.

Any top-k <= m of the full row is the top-k of these m (ties at the m-th value aside, which top-k
breaks arbitrarily anyway), so the distributions sampling builds from them are the same."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TopLogits:
    """Rows (axis 0) of m candidates each: ids[..., j] is the token whose logit is logits[..., j],
    in no particular order. One row when the arrays are 1-D (an index of a 2-D one)."""

    ids: np.ndarray  # int
    logits: np.ndarray  # float32

    @property
    def width(self) -> int:
        return int(self.ids.shape[-1])

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - an int (one row) or a slice (rows)
        return TopLogits(self.ids[i], self.logits[i])

    def copy(self) -> "TopLogits":
        return TopLogits(self.ids.copy(), self.logits.copy())

    def argmax(self) -> int:
        """The row's most likely token; the lowest id among equal maxima, as np.argmax of the whole
        row gives."""
        x = self.logits
        return int(self.ids[x == x.max()].min())

    @classmethod
    def of_rows(cls, rows: np.ndarray, m: int) -> "TopLogits":
        """The m largest of each row of a full (n, n_vocab) array (what the backend's top-k gives)."""
        rows = np.asarray(rows, dtype=np.float32)
        ids = rows.argpartition(rows.shape[1] - m, axis=1)[:, rows.shape[1] - m :]
        return cls(ids.astype(np.int32), np.take_along_axis(rows, ids, axis=1))

    @classmethod
    def concat(cls, parts: "list[TopLogits]") -> "TopLogits":
        return cls(np.concatenate([p.ids for p in parts]), np.concatenate([p.logits for p in parts]))
