"""The decoding loops, as pure algorithms over a narrow backend protocol.

Invariant between rounds: the target's KV cache holds every token but the last one (`seq[:-1]`),
so each verify batch is `[seq[-1], d_1 .. d_K]` and yields K+1 logits rows; the draft's cache holds
some prefix of `seq` and catches up on what it has not seen at the start of its next round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

import numpy as np

from . import accept
from .draft_len import AutoK, FixedK
from .noise import KeyedGumbel
from .sampling import Dist, SamplingParams, argmax, process
from .stats import Counters


class Evaluator(Protocol):
    """What the loop needs from a model context (backend.Context implements it)."""

    n_ctx: int
    n_past: int

    def eval(self, tokens: Sequence[int], pos: int, n_logits: int = 1) -> np.ndarray: ...

    def truncate(self, pos: int) -> None: ...

    def is_eog(self, token: int) -> bool: ...


@dataclass(frozen=True)
class Step:
    token: int
    from_draft: bool  # a drafted token the target accepted (False: the target's own token)


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    mode: str = "pq"  # pq | match | coupled  (ignored when greedy)
    draft_min: int = 0
    draft_p_min: float = 0.0


class ContextFull(Exception):
    """The context has no room left for another token."""


def _sample(
    row: np.ndarray, sp: SamplingParams, rng: np.random.Generator, noise: KeyedGumbel | None, pos: int
) -> int:
    """The target's own token at sequence position pos (plain decoding, the bonus token)."""
    if sp.greedy:
        return argmax(row)
    return noise.sample(process(row, sp), pos) if noise is not None else process(row, sp).sample(rng)


def _sync(ctx: Evaluator, seq: Sequence[int], upto: int) -> np.ndarray | None:
    """Bring ctx's cache to seq[:upto]; return the logits of seq[upto-1] if it had to be evaluated.
    The caller guarantees the cached prefix matches seq (see Engine)."""
    if ctx.n_past >= upto:
        ctx.truncate(upto)
        return None
    return ctx.eval(seq[ctx.n_past : upto], ctx.n_past, 1)[0]


def prefill(target: Evaluator, draft: Evaluator | None, seq: Sequence[int], c: Counters) -> None:
    """Process the prompt up to seq[:-1] in both models; the last token opens the first round."""
    t0 = time.perf_counter()
    if len(seq) > target.n_ctx - 1:
        raise ContextFull
    c.n_prefilled += len(seq) - min(target.n_past, len(seq) - 1)  # the last one opens the first round
    for ctx in (target, draft):
        if ctx is not None and len(seq) > 1:
            _sync(ctx, seq, len(seq) - 1)
        elif ctx is not None:
            ctx.truncate(0)
    c.prefill_s += time.perf_counter() - t0


def plain_steps(
    target: Evaluator,
    prompt: Sequence[int],
    sp: SamplingParams,
    rng: np.random.Generator,
    c: Counters,
    max_new: int | None = None,
    mode: str = "pq",
) -> Iterator[Step]:
    """Target-only decoding: the baseline, and what --no-spec runs (mode: whose noise it samples with)."""
    cfg = SpecConfig(mode=mode)
    yield from speculative_steps(target, None, prompt, sp, cfg, rng, c, FixedK(0), max_new)


def speculative_steps(
    target: Evaluator,
    draft: Evaluator | None,
    prompt: Sequence[int],
    sp: SamplingParams,
    cfg: SpecConfig,
    rng: np.random.Generator,
    c: Counters,
    k_ctl: FixedK | AutoK,
    max_new: int | None = None,
) -> Iterator[Step]:
    """Yield generated tokens until EOG, `max_new` tokens or a full context.

    Each round: the draft proposes up to K tokens, the target scores `[last, d_1..d_K]` in one
    batch, the acceptance rule keeps a prefix and adds the target's own token, both caches are
    rolled back to the accepted prefix. The caller may stop consuming at any step (stop strings):
    the caches are already consistent whenever a token is yielded.
    """
    seq = list(prompt)
    prefill(target, draft, seq, c)
    draft_rng, verify_rng = (np.random.default_rng(s) for s in rng.bit_generator.seed_seq.spawn(2))
    # coupled: every token at position t, drafted or the target's, is a Gumbel-max under g_t
    noise = KeyedGumbel.of(rng) if cfg.mode == "coupled" else None
    n_new = 0
    while max_new is None or n_new < max_new:
        t_round = time.perf_counter()
        room = target.n_ctx - len(seq)  # positions left for the verify batch beyond seq[-1]
        if room <= 0:
            raise ContextFull
        k = k_ctl.choose() if draft is not None else 0
        k = max(0, min(k, room - 1, (max_new - n_new - 1) if max_new is not None else k))

        # -- draft ------------------------------------------------------------------------------
        drafts: list[int] = []
        qs: list[Dist] = []
        t0 = time.perf_counter()
        t_deval = 0.0  # time inside the draft's llama_decode, for the overhead figure
        if k > 0:
            if draft.n_past >= len(seq):  # fully cached: re-evaluate the last token for its logits
                draft.truncate(len(seq) - 1)
            row = _sync(draft, seq, len(seq))
            t_deval = time.perf_counter() - t0
            for i in range(k):
                if sp.greedy:
                    x = argmax(row)
                    if cfg.draft_p_min > 0 and i >= cfg.draft_min:
                        e = np.exp(row - row.max())
                        if 1.0 / e.sum() < cfg.draft_p_min:
                            break
                else:
                    q = process(row, sp) if cfg.mode != "match" else None
                    if q is None:  # sample-and-match drafts greedily, as llama.cpp does
                        x = argmax(row)
                    else:
                        if cfg.draft_p_min > 0 and i >= cfg.draft_min and q.top_prob() < cfg.draft_p_min:
                            break
                        x = noise.sample(q, len(seq) + i) if noise is not None else q.sample(draft_rng)
                        qs.append(q)
                drafts.append(x)
                if i == k - 1 or draft.is_eog(x):
                    break
                te = time.perf_counter()
                row = draft.eval([x], len(seq) + i, 1)[0]
                t_deval += time.perf_counter() - te
        t1 = time.perf_counter()

        # -- verify -----------------------------------------------------------------------------
        rows = target.eval([seq[-1], *drafts], len(seq) - 1, len(drafts) + 1)
        t2 = time.perf_counter()

        # -- accept -----------------------------------------------------------------------------
        new: list[int] = []
        n_acc = 0
        for i, x in enumerate(drafts):
            if sp.greedy:
                ok, tok = accept.greedy(rows[i], x)
            elif cfg.mode == "pq":
                ok, tok = accept.pq(process(rows[i], sp), qs[i], x, verify_rng)
            elif cfg.mode == "coupled":
                ok, tok = accept.coupled(process(rows[i], sp), x, noise, len(seq) + i)
            else:
                ok, tok = accept.match(process(rows[i], sp), x, verify_rng)
            new.append(tok)
            if not ok:
                break
            n_acc += 1
            if target.is_eog(x):
                break
        else:  # every draft accepted (or none drafted): the target's next token comes free
            new.append(_sample(rows[len(drafts)], sp, verify_rng, noise, len(seq) + len(drafts)))
        if max_new is not None:
            new = new[: max_new - n_new]
        t3 = time.perf_counter()

        # -- roll back to the accepted prefix (the one place caches are trimmed) -------------------
        seq.extend(new)
        target.truncate(len(seq) - 1)
        draft_keep = min(draft.n_past, len(seq) - 1) if draft is not None else 0
        if draft is not None:
            draft.truncate(draft_keep)

        c.record_round(k, len(drafts), n_acc)
        c.trace_round(
            k=k, drafted=len(drafts), accepted=n_acc, draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3
        )
        c.draft_s += t1 - t0
        c.verify_s += t2 - t1
        c.sample_s += t3 - t2
        c.llama_s += (t2 - t1) + t_deval
        round_s = time.perf_counter() - t_round
        c.loop_s += round_s
        k_ctl.observe(
            k=k,
            n_drafted=len(drafts),
            n_accepted=n_acc,
            n_emitted=len(new),
            draft_s=t1 - t0,
            verify_s=t2 - t1,
            round_s=round_s,
        )
        c.fallbacks = k_ctl.fallbacks
        c.started_plain = k_ctl.started_plain

        for i, tok in enumerate(new):
            n_new += 1
            yield Step(tok, i < n_acc)
            if target.is_eog(tok):
                return
