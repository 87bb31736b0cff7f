"""Acceptance rules: decide, position by position, whether the target keeps a drafted token.

Each rule looks at one drafted token x with the target's distribution p and the draft's q at that
position, and returns (accepted, token): token is x when accepted, else the target's replacement.
Greedy is the temperature-0 case; `pq` is speculative sampling (Leviathan et al. 2023, Chen et al.
2023), which leaves the output distribution exactly p; `match` is llama.cpp's sample-and-match;
`coupled` shares position-keyed Gumbel noise between draft and target (noise.py), so its output is,
token for token, what plain sampling with the same seed gives.
"""

from __future__ import annotations

import numpy as np

from localspec.decode.noise import KeyedGumbel
from localspec.decode.sampling import Dist, argmax
from localspec.top_logits import TopLogits


def greedy(p_logits: np.ndarray | TopLogits, x: int) -> tuple[bool, int]:
    """Keep x iff it is the target's argmax; otherwise emit the argmax."""
    best = argmax(p_logits)
    return best == x, best


def pq(p: Dist, q: Dist, x: int, rng: np.random.Generator) -> tuple[bool, int]:
    """Accept x ~ q with prob min(1, p(x)/q(x)); on rejection draw from norm(max(0, p - q))."""
    px, qx = p.prob(x), q.prob(x)
    u = rng.random()
    if qx > 0 and u * qx < px:  # u < p/q without dividing
        return True, x
    return False, residual(p, q).sample(rng)


def residual(p: Dist, q: Dist) -> Dist:
    """norm(max(0, p - q)) over the union of both supports."""
    ids = np.union1d(p.ids, q.ids)
    pd = np.zeros(len(ids))
    qd = np.zeros(len(ids))
    pd[np.searchsorted(ids, p.ids)] = p.probs
    qd[np.searchsorted(ids, q.ids)] = q.probs
    r = np.maximum(pd - qd, 0.0)
    s = r.sum()
    if s <= 1e-12:  # p == q: rejection is then impossible, but stay defined
        return p
    keep = r > 0
    return Dist(ids[keep], r[keep] / s)


def match(p: Dist, x: int, rng: np.random.Generator) -> tuple[bool, int]:
    """Sample the target's own token from p; keep the draft token only if they coincide."""
    y = p.sample(rng)
    return y == x, y


def coupled(p: Dist, x: int, noise: KeyedGumbel, pos: int, y: int | None = None) -> tuple[bool, int]:
    """Keep x iff it is the target's Gumbel-max choice y = argmax(log p + g_pos); otherwise emit y
    (`y`: that choice, when the round made it for every row at once).

    The draft proposed x = argmax(log q + g_pos) with the same noise (or x is a one-point guess, e.g.
    a lookup draft), so the two agree often when p is close to q, and y is always exactly what plain
    sampling emits at this position: the output is p's, and the same for every K.
    """
    y = noise.sample(p, pos) if y is None else y
    return y == x, y
