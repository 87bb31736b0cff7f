"""`localspec bench --round-overhead`: what one decoding round costs outside llama_decode.

The round's own work - drafting bookkeeping, turning logits rows into distributions, acceptance,
rollback, counters - is ours, and it does not shrink on a faster accelerator: beside a 25 ms GPU
verify, a few milliseconds of it eat the gain. Two measurements:

- the zero-cost backend: decodes that cost nothing and return vocab-sized random logits (the same
  row for the target and the draft at a position, so every draft is accepted and a round handles
  all of its K + 1 target rows and K draft rows: the worst case);
- the real models, with the time inside llama_decode subtracted (llama.Context.decode_s).

Each runs with whole rows and with rows as their 64 largest logits (llama.cpp's backend top-k,
`--backend-top-k`; the zero-cost backend hands out precomputed ones): the second moves the pass
over the vocabulary into llama_decode, so the real models' figures carry the decode time too.

Each configuration runs its rounds after a few unmeasured ones; the figure is the median over
rounds of (round wall time - time inside the decodes), in milliseconds, and the same in this
thread's CPU time (on a shared machine a descheduled round inflates its wall time, not its CPU time).
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from localspec.decode.round import decode_round
from localspec.decode.sampling import SamplingParams
from localspec.decode.sources import sources_for
from localspec.decode.state import Item, SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK
from localspec.top_logits import TopLogits

VOCABS = (49152, 151936, 262144)  # SmolLM2 / Qwen2.5-3 / Gemma 3
SEQUENCES = (1, 4, 8)
DRAFT_LENGTHS = (1, 4, 8)
# greedy, and the two sampled rules: coupled (the default) and pq; llama.cpp's default sampler chain
MODES = ("greedy", "coupled", "pq")
SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
GREEDY = SamplingParams(temperature=0.0)
LOGIT_SCALE = 2.5  # standard deviation of the random logits
TOP_KS = (0, 64)  # whole rows; rows as their 64 largest logits (the backend's top-k)


class ZeroCostDecoder:
    """An Evaluator whose decodes cost (almost) nothing: the logits of position t of sequence s are
    row (s, t) of a fixed random pool, written into a buffer as llama.cpp writes its outputs, and
    returned as llama.Context returns them (`eval_views`: views into it; `eval_batch`: copies).
    `decode_s` is the writing. With `top_k`, a sequence `use_top_logits` turned on gets its rows as
    their top_k largest logits, picked from the pool once (a backend top-k at no cost)."""

    # the Evaluator protocol's fields: a KV cache that shares nothing between sequences
    rollback = "truncate"
    max_draft = None
    source = "draft"
    prefix_copy = checkpoints = saves_state = can_shift = False
    images_whole = True
    memory_kind = "attention"

    def __init__(
        self, pool: np.ndarray, *, n_ctx: int, n_seq: int, n_batch: int = 512, top_k: int = 0
    ) -> None:
        self.pool, self.n_ctx, self.top_k = pool, n_ctx, top_k
        self.n_vocab = pool.shape[1]
        self._top = TopLogits.of_rows(pool, top_k) if top_k else None
        self._top_on = [False] * n_seq
        self._past = [0] * n_seq
        self._held = np.zeros((n_seq, n_ctx), np.int64)  # the token at each cached position
        self._buf = np.empty((n_batch, self.n_vocab), np.float32)
        self.decode_s = self.decode_cpu_s = 0.0

    def past(self, seq: int = 0) -> int:
        return self._past[seq]

    def truncate(self, pos: int, seq: int = 0) -> None:
        self._past[seq] = min(self._past[seq], pos)

    def cached_tokens(self, seq: int = 0) -> np.ndarray:
        return self._held[seq, : self._past[seq]]

    def is_eog(self, token: int) -> bool:
        return False

    def use_top_logits(self, seq: int, on: bool) -> bool:
        self._top_on[seq] = on and self._top is not None
        return self._top_on[seq]

    def eval_batch(self, items: Sequence[Item]) -> list[np.ndarray]:
        return [rows.copy() for rows in self.eval_views(items)]

    def eval_views(self, items: Sequence[Item]) -> list[np.ndarray]:
        t0, c0 = time.perf_counter(), time.thread_time()  # the clock calls count as decode time
        rows, spans = [], []
        for seq, tokens, pos, n_logits in items:
            assert pos == self._past[seq], "the round evaluated at a position it does not hold"
            end = pos + len(tokens)
            self._past[seq] = end
            self._held[seq, pos:end] = tokens
            first = len(rows)
            rows.extend(self._row(seq, p) for p in range(end - n_logits, end))
            spans.append((first, len(rows)))
        out = self._buf[: len(rows)]
        if not all(self._top_on[seq] for seq, *_ in items):  # some sequence takes whole rows
            np.take(self.pool, rows, axis=0, out=out)
        views = [
            out[a:b] if not self._top_on[it[0]] else self._top[np.array(rows[a:b])]
            for it, (a, b) in zip(items, spans)
        ]
        c1 = time.thread_time()
        self.decode_s += time.perf_counter() - t0
        self.decode_cpu_s += c1 - c0
        return views

    def _row(self, seq: int, pos: int) -> int:
        return (pos * 7919 + seq * 104729) % len(self.pool)


def random_pool(n_vocab: int, n_rows: int = 48, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_rows, n_vocab), dtype=np.float32) * LOGIT_SCALE).astype(np.float32)


@dataclass(frozen=True)
class OverheadRow:
    backend: str  # "zero-cost" or the target model's file name
    n_vocab: int
    n_seq: int
    k: int
    mode: str
    ms_per_round: float  # median over the measured rounds, wall time
    ms_min: float
    ms_max: float
    cpu_ms_per_round: float  # the same in this thread's CPU time: steadier on a shared machine
    rounds: int
    tokens_per_round: float  # emitted, over every sequence
    decode_ms_per_round: float = 0.0  # inside both models' decodes (median): what top-k rows move there


def measure(
    target,  # noqa: ANN001 - an Evaluator with decode_s
    draft,  # noqa: ANN001
    *,
    backend: str,
    n_vocab: int,
    n_seq: int,
    k: int,
    mode: str,
    rounds: int,
    warmup: int = 3,
    prompt_len: int = 16,
    seed: int = 0,
) -> OverheadRow:
    """Rounds of n_seq sequences at a fixed K; the time outside both evaluators' decodes."""
    sp = GREEDY if mode == "greedy" else SAMPLED
    cfg = SpecConfig(mode="pq" if mode == "greedy" else mode)
    rng = np.random.default_rng(seed)
    states = []
    for s in range(n_seq):
        prompt = rng.integers(0, n_vocab, prompt_len).tolist()
        st = SeqState.start(s, prompt, sp, cfg, np.random.default_rng(seed + s), Counters(), FixedK(k))
        states.append(st)
    sources = sources_for(draft)  # built once, as an engine's scheduler does
    decode_round(target, draft, [], filling=states, sources=sources)  # the prompts, unmeasured
    times, cpu, emitted, decodes = [], [], [], []
    for i in range(warmup + rounds):
        before = target.decode_s + draft.decode_s
        before_cpu = target.decode_cpu_s + draft.decode_cpu_s
        n0 = sum(st.n_new for st in states)
        c0 = time.thread_time()  # a system call, kept outside the wall-clock interval
        t0 = time.perf_counter()
        decode_round(target, draft, states, sources=sources)
        wall = time.perf_counter() - t0
        used = time.thread_time() - c0
        if i >= warmup:
            decodes.append((target.decode_s + draft.decode_s - before) * 1e3)
            times.append((wall - decodes[-1] / 1e3) * 1e3)
            cpu.append((used - (target.decode_cpu_s + draft.decode_cpu_s - before_cpu)) * 1e3)
            emitted.append(sum(st.n_new for st in states) - n0)
        for st in states:
            st.take()
            if st.finish == "stop":  # a real model's end of text: rounds are measured, not texts
                st.finish = None
    return OverheadRow(
        backend, n_vocab, n_seq, k, mode, statistics.median(times), min(times), max(times),
        statistics.median(cpu), rounds, statistics.mean(emitted), statistics.median(decodes),
    )  # fmt: skip


def zero_cost_grid(
    *,
    vocabs: Sequence[int] = VOCABS,
    sequences: Sequence[int] = SEQUENCES,
    draft_lengths: Sequence[int] = DRAFT_LENGTHS,
    modes: Sequence[str] = MODES,
    rounds: int = 30,
    top_ks: Sequence[int] = TOP_KS,
    progress: Callable[[str], None] | None = None,
) -> list[OverheadRow]:
    out = []
    for v in vocabs:
        pool = random_pool(v)
        for top_k in top_ks:
            name = rows_label("zero-cost", top_k)
            for n_seq in sequences:
                for k in draft_lengths:
                    for mode in modes:
                        if progress:
                            progress(f"{name} vocab {v} x{n_seq} K={k} {mode}")
                        n_ctx = 64 + (rounds + 4) * (k + 1)
                        target = ZeroCostDecoder(pool, n_ctx=n_ctx, n_seq=n_seq, top_k=top_k)
                        draft = ZeroCostDecoder(pool, n_ctx=n_ctx, n_seq=n_seq, top_k=top_k)
                        out.append(
                            measure(target, draft, backend=name, n_vocab=v, n_seq=n_seq, k=k, mode=mode,
                                    rounds=rounds)
                        )  # fmt: skip
    return out


def rows_label(backend: str, top_k: int) -> str:
    return f"{backend}, top-{top_k} rows" if top_k else backend


def real_grid(
    settings,  # noqa: ANN001 - config.Settings with a target (and maybe a draft)
    *,
    sequences: Sequence[int] = SEQUENCES,
    draft_lengths: Sequence[int] = DRAFT_LENGTHS,
    modes: Sequence[str] = MODES,
    rounds: int = 8,
    top_ks: Sequence[int] = TOP_KS,
    progress: Callable[[str], None] | None = None,
) -> list[OverheadRow]:
    """The same grid on real models: the settings' target, drafted for by its draft (or by itself,
    which accepts nearly everything: the worst case again)."""
    from localspec import llama  # noqa: PLC0415

    n_ctx = 64 + (rounds + 4) * (max(draft_lengths) + 1)
    with llama.Model(settings.target) as tm:
        dm = llama.Model(settings.draft) if settings.draft else tm
        try:
            out = []
            for top_k, n_seq in itertools.product(top_ks, sequences):
                name = rows_label(settings.target.name, top_k)
                kw = dict(n_ctx=n_ctx, n_seq=n_seq, n_batch=max(512, n_seq * (max(draft_lengths) + 1)),
                          n_threads=settings.n_threads, backend_top_k=top_k)  # fmt: skip
                with llama.Context(tm, **kw) as target, llama.Context(dm, **kw) as draft:
                    target.cpu_timing = draft.cpu_timing = True
                    for k in draft_lengths:
                        for mode in modes:
                            if progress:
                                progress(f"{name} x{n_seq} K={k} {mode}")
                            target.reset()
                            draft.reset()
                            out.append(
                                measure(target, draft, backend=name, n_vocab=tm.n_vocab,
                                        n_seq=n_seq, k=k, mode=mode, rounds=rounds)
                            )  # fmt: skip
            return out
        finally:
            if dm is not tm:
                dm.close()


def print_table(rows: Sequence[OverheadRow]) -> None:
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="round overhead outside llama_decode (ms per round, median)")
    for col in (
        "backend",
        "vocab",
        "seqs",
        "K",
        "mode",
        "ms/round",
        "min-max",
        "CPU ms",
        "decode ms",
        "tokens/round",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r.backend, str(r.n_vocab), str(r.n_seq), str(r.k), r.mode, f"{r.ms_per_round:.2f}",
            f"{r.ms_min:.2f}-{r.ms_max:.2f}", f"{r.cpu_ms_per_round:.2f}", f"{r.decode_ms_per_round:.1f}",
            f"{r.tokens_per_round:.1f}",
        )  # fmt: skip
    Console().print(table)


def markdown(rows: Sequence[OverheadRow]) -> str:
    """One table per backend and vocabulary: sequences x K down, modes across."""
    lines = []
    keys = list(dict.fromkeys((r.backend, r.n_vocab) for r in rows))
    modes = list(dict.fromkeys(r.mode for r in rows))
    for backend, v in keys:
        sub = [r for r in rows if (r.backend, r.n_vocab) == (backend, v)]
        lines += [f"**{backend}, vocabulary {v}** (ms per round outside llama_decode, median)", ""]
        lines += ["| seqs | K | " + " | ".join(modes) + " |", "|--:|--:|" + "--:|" * len(modes)]
        for n_seq, k in dict.fromkeys((r.n_seq, r.k) for r in sub):
            cells = {r.mode: f"{r.ms_per_round:.2f}" for r in sub if (r.n_seq, r.k) == (n_seq, k)}
            lines.append(f"| {n_seq} | {k} | " + " | ".join(cells.get(m, "-") for m in modes) + " |")
        lines.append("")
    return "\n".join(lines)


def to_dicts(rows: Sequence[OverheadRow]) -> list[dict]:
    return [asdict(r) for r in rows]
