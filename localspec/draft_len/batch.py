"""K for each sequence of a round that several sequences share. The target's verify pass is one
batch of all their tokens, and its cost a function of the *total* batch size (the engine's one
`Costs`, shared by every tuned controller), so draft tokens are added where they raise the batch's
expected tokens per second most, stopping - at no drafting at all - once batching alone already
uses the hardware. Acceptance stays per sequence."""

from __future__ import annotations

from typing import Sequence

from localspec.draft_len.controller import KController


def choose_batch(ctls: Sequence[KController], draft_batch_cost: float = 0.15) -> list[int]:
    """K for each sequence of one round. Alone, a sequence's controller decides as it always has.
    Together, fixed Ks stay as asked; for the auto ones the round's expected tokens per second is
    maximised over a common draft depth (the batched draft steps cost the same whoever drafts in
    them), never above what each one's own controller picks, and then a sequence whose drafts do not
    pay for their share of the verify batch drafts less. Each extra sequence in a batched draft step
    is assumed to cost `draft_batch_cost` of a single one."""
    own = [c.choose() for c in ctls]
    autos = [i for i, c in enumerate(ctls) if c.costs is not None]
    if len(ctls) == 1 or not autos:
        return own
    costs = ctls[autos[0]].costs  # forks of one engine's tuner share these timings
    for c in ctls:  # a batch takes every forced token: no cutting a run short for a cheaper size
        c.forced_take = c.n_forced
    plain = [0 if i in autos else k for i, k in enumerate(own)]
    forced = sum(c.n_forced for c in ctls)
    if (
        costs.measured(forced + sum(k + 1 for k in plain)) is None
    ):  # time the plain batch first: a plain round is never a
        return plain  # bad one, and drafting must beat its measured cost, not a line's guess at it
    t_d = costs.t_draft.value or 0.0
    o = costs.t_overhead.value or 0.0

    def rate(ks: list[int]) -> float:
        tokens = sum(c.expected_tokens(k) for c, k in zip(ctls, ks))
        model = [c.model_tokens(k) for c, k in zip(ctls, ks)]  # lookup drafts cost no draft step
        n_drafting = sum(m > 0 for m in model)
        draft_s = max(model) * t_d * (1 + draft_batch_cost * max(n_drafting - 1, 0))
        return tokens / (draft_s + costs.verify_time(forced + sum(k + 1 for k in ks)) + o)

    def at_depth(depth: int) -> list[int]:
        ks = list(own)
        for i in autos:
            k = min(own[i], depth)
            ks[i] = max(k, ctls[i].k_min) if k > 0 else 0
        return ks

    best, ks = max(((rate(at_depth(d)), at_depth(d)) for d in range(max(own) + 1)), key=lambda x: x[0])
    improved = True
    while improved:  # trim where a sequence's drafts cost the batch more than they bring
        improved = False
        for i in autos:
            if ks[i] > 0:
                trial = list(ks)
                trial[i] = ks[i] - 1 if ks[i] - 1 >= ctls[i].k_min else 0
                r = rate(trial)
                if r > best:
                    best, ks, improved = r, trial, True
    return ks
