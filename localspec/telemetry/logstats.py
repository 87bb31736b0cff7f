"""Reading the acceptance log back (localspec/acclog.py writes it) and summarizing it as data;
`localspec stats` formats and plots the result."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from localspec.errors import LocalspecError


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
    started: list[str]  # ISO timestamps, in log order
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


def read_log(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a log, and how many lines were not records (a torn or foreign line)."""
    if not path.exists():
        raise LocalspecError(
            f"no acceptance log at {path} yet: `localspec run` and `localspec chat` write it"
        )
    records, bad = [], 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(rec, dict) and isinstance(rec.get("stats"), dict):
                records.append(rec)
            else:
                bad += 1
    return records, bad


def _add(into: list[int], xs: list[int]) -> None:
    into.extend([0] * (len(xs) - len(into)))
    for i, x in enumerate(xs):
        into[i] += int(x)


def summarize(records: list[dict[str, Any]]) -> LogSummary:
    if not records:
        raise LocalspecError("the acceptance log has no generations yet")
    by_pos_d: list[int] = []
    by_pos_a: list[int] = []
    sources: dict[str, int] = {}
    drafters: dict[str, dict[str, int]] = {}
    for r in records:
        st = r["stats"]
        for name, c in (st.get("sources") or {}).items():
            into = drafters.setdefault(name, {"drafted": 0, "accepted": 0})
            into["drafted"] += int(c.get("drafted", 0))
            into["accepted"] += int(c.get("accepted", 0))
        _add(by_pos_d, st.get("drafted_by_pos", []))
        _add(by_pos_a, st.get("accepted_by_pos", []))
        sources[r.get("source", "?")] = sources.get(r.get("source", "?"), 0) + 1
    stats = [r["stats"] for r in records]

    def total(key: str) -> float:
        return sum(st.get(key) or 0 for st in stats)

    started = [r.get("started", "") for r in records]
    return LogSummary(
        generations=len(records),
        speculative=sum(1 for st in stats if st.get("n_drafted")),
        prompt_tokens=int(total("n_prompt_tokens")),
        prefilled_tokens=int(total("n_prefilled")),
        generated_tokens=int(total("n_generated")),
        drafted=int(total("n_drafted")),
        accepted=int(total("n_accepted")),
        rounds=int(total("rounds")),
        drafted_by_pos=by_pos_d,
        accepted_by_pos=by_pos_a,
        tok_s=[float(st.get("decode_tok_s") or 0.0) for st in stats],
        started=started,
        draft_ms=float(sum(st.get("draft_ms") or 0 for st in stats if st.get("n_drafted"))),
        verify_ms=float(sum(st.get("verify_ms") or 0 for st in stats if st.get("n_drafted"))),
        first=min(started),
        last=max(started),
        sources=sources,
        draft_sources=drafters,
    )
