"""K for each sequence of a round that several sequences share. The target's verify pass is one
batch of all their tokens, and its cost a function of the *total* batch size (the engine's one
`Costs`, shared by every tuned controller), so draft tokens are added where they raise the batch's
expected tokens per second most, stopping - at no drafting at all - once batching alone already
uses the hardware. Acceptance stays per sequence."""

from __future__ import annotations

from typing import Sequence

from localspec.draft_len.controller import Facts, KController, Plan


def plan_batch(
    ctls: Sequence[KController], facts: Sequence[Facts], draft_batch_cost: float = 0.15
) -> list[Plan]:
    """Each sequence's plan for one round. Alone, a sequence's controller decides as it always has.
    Together, fixed Ks stay as asked and every forced run rides whole (no cutting one short for a
    cheaper batch size); for the auto ones the round's expected tokens per second is maximised over
    a common draft depth (the batched draft steps cost the same whoever drafts in them), never above
    what each one's own controller picks, and then a sequence whose drafts do not pay for their
    share of the verify batch drafts less. Each extra sequence in a batched draft step is assumed to
    cost `draft_batch_cost` of a single one."""
    own = [c.plan(f) for c, f in zip(ctls, facts)]
    if len(ctls) <= 1:
        return own
    autos = [i for i, c in enumerate(ctls) if c.costs is not None]
    if not autos:
        return own
    ks = _batch_ks(ctls, facts, own, autos, draft_batch_cost)
    return [p._replace(k=k, forced_take=f.n_forced) for p, f, k in zip(own, facts, ks)]


def _batch_ks(ctls, facts, own, autos, draft_batch_cost) -> list[int]:  # noqa: ANN001
    costs = ctls[autos[0]].costs  # forks of one engine's tuner share these timings
    plain = [0 if i in autos else p.k for i, p in enumerate(own)]
    forced = sum(f.n_forced for f in facts)
    if costs.measured(forced + sum(k + 1 for k in plain)) is None:  # time the plain batch first: a
        return plain  # plain round is never a bad one, and drafting must beat its measured cost
    t_d = costs.t_draft.value or 0.0
    o = costs.t_overhead.value or 0.0

    def rate(ks: list[int]) -> float:
        tokens = sum(c.expected_tokens(f, p, k) for c, f, p, k in zip(ctls, facts, own, ks))
        model = [c.model_tokens(f, p, k) for c, f, p, k in zip(ctls, facts, own, ks)]  # lookup: no draft step
        n_drafting = sum(m > 0 for m in model)
        draft_s = max(model) * t_d * (1 + draft_batch_cost * max(n_drafting - 1, 0))
        return tokens / (draft_s + costs.verify_time(forced + sum(k + 1 for k in ks)) + o)

    def at_depth(depth: int) -> list[int]:
        ks = [p.k for p in own]
        for i in autos:
            k = min(own[i].k, depth)
            ks[i] = max(k, ctls[i].k_min) if k > 0 else 0
        return ks

    depths = range(max(p.k for p in own) + 1)
    best, ks = max(((rate(at_depth(d)), at_depth(d)) for d in depths), key=lambda x: x[0])
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
