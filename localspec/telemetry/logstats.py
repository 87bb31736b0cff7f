"""Reading the acceptance log back (localspec/acclog.py writes it) and summarizing it as data, line
by line, however big the file; `localspec stats` formats and plots the result. A line that is not
a record, or whose fields have the wrong types, is counted and skipped."""

from __future__ import annotations

import io
import json
import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from localspec.errors import LocalspecError
from localspec.files import open_regular


@dataclass(frozen=True)
class LogSummary:
    generations: int
    speculative: int  # generations that drafted
    prompt_tokens: int
    prefilled_tokens: int
    generated_tokens: int
    drafted: int
    accepted: int
    rounds: int
    drafted_by_pos: list[int]
    accepted_by_pos: list[int]
    tok_s: list[float]  # decode tok/s per generation, in log order
    started: list[float]  # start times (POSIX seconds; NaN where a line has none), in log order
    draft_ms: float
    verify_ms: float
    first: str
    last: str
    sources: dict[str, int] = field(default_factory=dict)
    # per draft source (draft, lookup, grammar): {"drafted": n, "accepted": n} over every generation
    draft_sources: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_len(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def acceptance_by_pos(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_pos, self.drafted_by_pos)]

    @property
    def verify_draft_ratio(self) -> float:
        """Target verify time over draft time: the draft should cost a small part of a round."""
        return self.verify_ms / self.draft_ms if self.draft_ms else 0.0

    def tok_s_quantiles(self) -> dict[str, float]:
        xs = np.array([x for x in self.tok_s if x > 0])
        if not len(xs):
            return {}
        names = ("min", "p10", "median", "p90", "max")
        return dict(zip(names, np.quantile(xs, [0, 0.1, 0.5, 0.9, 1.0]).tolist()))


MAX_LINE = 1 << 20  # a longer line is no record of ours (acclog bounds what it writes)


def iter_records(path: Path) -> Iterator[dict[str, Any] | None]:
    """The log's records in order, read line by line (never the whole file at once); None for each
    line that is not one (torn, foreign, too long, or a record whose fields have the wrong types)."""
    with open_regular(path, "acceptance log", missing=_NO_LOG) as f:
        text = io.TextIOWrapper(f, encoding="utf-8", errors="replace")
        while line := text.readline(MAX_LINE):
            if not line.endswith("\n") and len(line) >= MAX_LINE:  # skip the rest of a long line
                while (more := text.readline(MAX_LINE)) and not more.endswith("\n"):
                    pass
                yield None
            elif line.strip():
                yield _record(line)


_NO_LOG = "no acceptance log at {path} yet: `localspec run` and `localspec chat` write it"


def _record(line: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return rec if isinstance(rec, dict) and _well_typed(rec) else None


_COUNTS = ("n_prompt_tokens", "n_prefilled", "n_generated", "n_drafted", "n_accepted", "rounds")
_NUMBERS = ("decode_tok_s", "draft_ms", "verify_ms", "acceptance_rate")


def _well_typed(rec: dict[str, Any]) -> bool:
    """Whether every field `summarize` and `localspec list` read has the type acclog writes (a line
    of the right shape can still carry a string where a count goes)."""
    st = rec.get("stats")
    if not isinstance(st, dict) or not isinstance(rec.get("source", ""), str):
        return False
    if not isinstance(rec.get("started", ""), str) or not _is_time(rec.get("started", "")):
        return False
    if not all(_number(st.get(k)) for k in _COUNTS + _NUMBERS):
        return False
    if not all(_numbers(st.get(k)) for k in ("drafted_by_pos", "accepted_by_pos")):
        return False
    sources = st.get("sources")
    if sources is not None and not (
        isinstance(sources, dict)
        and all(isinstance(c, dict) and _number(c.get("drafted")) and _number(c.get("accepted"))
                for c in sources.values())
    ):  # fmt: skip
        return False
    return all(isinstance(rec.get(k), (dict, type(None))) for k in ("target", "draft"))


def _number(x: Any) -> bool:
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x))


def _numbers(xs: Any) -> bool:
    return xs is None or (isinstance(xs, list) and len(xs) <= 1024 and all(_number(x) for x in xs))


def _is_time(t: str) -> bool:
    try:
        return not t or datetime.fromisoformat(t) is not None
    except ValueError:
        return False


class _Totals:
    """What summarize adds up, one record at a time."""

    def __init__(self) -> None:
        self.n = 0
        self.sums = dict.fromkeys(_COUNTS, 0)
        self.speculative = 0
        self.draft_ms = self.verify_ms = 0.0
        self.by_pos_d: list[int] = []
        self.by_pos_a: list[int] = []
        self.sources: dict[str, int] = {}
        self.drafters: dict[str, dict[str, int]] = {}
        self.tok_s = array("d")  # 16 bytes a generation: a log of millions still fits in memory
        self.started = array("d")
        self.first = self.last = ""

    def add(self, r: dict[str, Any]) -> None:
        st = r["stats"]
        self.n += 1
        for k in _COUNTS:
            self.sums[k] += int(st.get(k) or 0)
        if st.get("n_drafted"):
            self.speculative += 1
            self.draft_ms += float(st.get("draft_ms") or 0)
            self.verify_ms += float(st.get("verify_ms") or 0)
        for name, c in (st.get("sources") or {}).items():
            into = self.drafters.setdefault(name, {"drafted": 0, "accepted": 0})
            into["drafted"] += int(c.get("drafted") or 0)
            into["accepted"] += int(c.get("accepted") or 0)
        _add(self.by_pos_d, st.get("drafted_by_pos") or [])
        _add(self.by_pos_a, st.get("accepted_by_pos") or [])
        source = r.get("source", "?")
        self.sources[source] = self.sources.get(source, 0) + 1
        self.tok_s.append(float(st.get("decode_tok_s") or 0.0))
        t = r.get("started", "")
        self.started.append(datetime.fromisoformat(t).timestamp() if t else math.nan)
        self.first = t if not self.first or (t and t < self.first) else self.first
        self.last = max(self.last, t)


def _add(into: list[int], xs: list[int]) -> None:
    into.extend([0] * (len(xs) - len(into)))
    for i, x in enumerate(xs):
        into[i] += int(x)


def read_summary(path: Path) -> tuple[LogSummary, int]:
    """The log at `path` summarized as it is read, and how many lines were not records."""
    totals, bad = _Totals(), 0
    for rec in iter_records(path):
        if rec is None:
            bad += 1
        else:
            totals.add(rec)
    return _summary(totals), bad


def summarize(records: Iterable[dict[str, Any]]) -> LogSummary:
    totals = _Totals()
    for r in records:
        totals.add(r)
    return _summary(totals)


def _summary(t: _Totals) -> LogSummary:
    if not t.n:
        raise LocalspecError("the acceptance log has no generations yet")
    return LogSummary(
        generations=t.n,
        speculative=t.speculative,
        prompt_tokens=t.sums["n_prompt_tokens"],
        prefilled_tokens=t.sums["n_prefilled"],
        generated_tokens=t.sums["n_generated"],
        drafted=t.sums["n_drafted"],
        accepted=t.sums["n_accepted"],
        rounds=t.sums["rounds"],
        drafted_by_pos=t.by_pos_d,
        accepted_by_pos=t.by_pos_a,
        tok_s=list(t.tok_s),
        started=list(t.started),
        draft_ms=t.draft_ms,
        verify_ms=t.verify_ms,
        first=t.first,
        last=t.last,
        sources=t.sources,
        draft_sources=t.drafters,
    )
