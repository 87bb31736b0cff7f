"""Position-keyed Gumbel noise: g_t(v) is a pure function of (seed, t, v).

The coupled verification rule (accept.coupled) and plain sampling in that mode both pick
argmax_v(log p_t(v) + g_t(v)), a sample from p_t (the Gumbel-max trick). Because the noise is a hash
of the position and token id rather than a draw from a stream, no state is carried between positions:
the same seed gives the same token at position t whatever K, the tuner, the batch or the draft did.

The hash is splitmix64's finaliser (Steele et al. 2014), which maps a counter to 64 well-mixed bits;
it is evaluated in numpy uint64 only for the ids a distribution keeps, so a position costs a few
microseconds however large the vocabulary.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from localspec.decode import sampling
from localspec.decode.sampling import Dist

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's counter increment
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))


def _mix(z: int) -> int:
    """splitmix64 on one Python int (per-position keys: cheaper than a numpy round trip)."""
    z = (z + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over a uint64 array (wrapping multiplication is what it wants)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


class KeyedGumbel:
    """The noise of one sequence. `seed` is any non-negative int (NumPy seeds may be 128-bit)."""

    def __init__(self, seed: int) -> None:
        seed = int(seed)
        if seed < 0:
            raise ValueError("seed must be >= 0")
        key = 0
        while True:  # fold every 64-bit limb in, so big seeds keep all their entropy
            key = _mix(key ^ (seed & _MASK))
            seed >>= 64
            if not seed:
                break
        self.key = key

    @classmethod
    def of(cls, rng: np.random.Generator) -> "KeyedGumbel":
        """The noise for the seed `rng` was made from (`default_rng(seed)`), so the loops can keep
        taking a Generator: plain and speculative decoding of one seed share the same noise."""
        return cls(rng.bit_generator.seed_seq.entropy)

    def pos_key(self, pos: int) -> int:
        """The key of position pos: g_pos(v) hashes it with v."""
        return _mix(self.key ^ _mix(int(pos)))

    def pos_keys(self, first: int, n: int) -> list[int]:
        """The keys of positions first .. first + n - 1."""
        if sampling.KERNEL is not None:
            return sampling.KERNEL.pos_keys(self.key, first, n)
        return [self.pos_key(first + j) for j in range(n)]

    def uniform(self, pos: int, ids: np.ndarray) -> np.ndarray:
        """U(0,1) per id at position pos, never exactly 0 or 1 (53 bits, centred in its bucket)."""
        return _uniform(np.uint64(self.pos_key(pos)), np.asarray(ids, dtype=np.uint64))

    def gumbel(self, pos: int, ids: np.ndarray) -> np.ndarray:
        """Standard Gumbel noise g_pos(v) for each v in ids."""
        return -np.log(-np.log(self.uniform(pos, ids)))

    def sample(self, d: Dist, pos: int) -> int:
        """The Gumbel-max choice argmax_v(log d(v) + g_pos(v)): exactly a draw from d."""
        return choose([self.pos_key(pos)], d.ids[None], d.probs[None])[0]


def _uniform(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    h = _mix_array(keys + ids * np.uint64(_GOLDEN))
    return ((h >> _S11).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


def choose(pos_keys: Sequence[int], ids: np.ndarray, probs: np.ndarray) -> list[int]:
    """`KeyedGumbel.sample` of several rows at once: row i's argmax over its ids of
    log probs + g (keyed by pos_keys[i]). Probability 0 (underflow, or padding) never wins."""
    ids, probs = np.asarray(ids, dtype=np.int64), np.asarray(probs, dtype=np.float64)
    if sampling.KERNEL is not None and ids.strides[1] == 8 and probs.strides[1] == 8:
        return sampling.KERNEL.choose(pos_keys, ids, probs)
    keys = np.array(pos_keys, dtype=np.uint64)[:, None]
    with np.errstate(divide="ignore"):
        score = np.log(probs) - np.log(-np.log(_uniform(keys, ids.astype(np.uint64))))
    return ids[np.arange(len(ids)), np.argmax(score, axis=1)].tolist()
