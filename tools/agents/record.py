"""What the server did for one agent task, read from outside: the acceptance log's lines (one per
finished request: prompt tokens, those evaluated, drafted, accepted, prefill time) appended while
the task ran, and /metrics' counters of requests cut off (a client that left, or a failure); for
llama-server (the comparison), its log's lines."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

CUT = ("localspec:requests_cancelled_total", "localspec:requests_failed_total")


@dataclass
class TaskRecord:
    requests: int = 0  # finished requests: the agent's model calls (its turns) and side calls
    speculative: int = 0  # ... of them served with speculation on (auto may still run one plain)
    cut: int = 0  # requests cancelled (the client left: a timeout, a reconnect) or failed
    prompts: list[int] = field(default_factory=list)  # each request's prompt tokens
    evaluated: list[int] = field(default_factory=list)  # ... of them evaluated by the target
    draft_evaluated: int = 0
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    # each request's prefill seconds: its time to first token, about
    prefill: list[float] = field(default_factory=list)

    @property
    def prefill_s(self) -> float:
        return sum(self.prefill)

    @property
    def first_prefill_s(self) -> float:
        return self.prefill[0] if self.prefill else 0.0

    @property
    def reused(self) -> int:
        return sum(self.prompts) - sum(self.evaluated)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def brief(self) -> str:
        return (f"{self.requests} requests ({self.cut} cut), prompt {sum(self.prompts)} tokens: "
                f"{sum(self.evaluated)} evaluated, {self.reused} reused; {self.generated} generated, "
                f"{self.accepted}/{self.drafted} drafts accepted; prefill {self.prefill_s:.0f} s")  # fmt: skip


class Watch:
    """Marks the acceptance log and the counters before a task; `record()` after it."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.offset = log.stat().st_size if log.exists() else 0
        self.cut0 = self._cut()

    def _cut(self) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name in CUT)

    def lines(self) -> list[dict]:
        if not self.log.exists():
            return []
        with self.log.open("rb") as f:
            f.seek(self.offset)
            return [json.loads(ln) for ln in f.read().splitlines() if ln.strip()]

    def record(self) -> TaskRecord:
        time.sleep(1.0)  # the log's writer thread appends a line just after the response went out
        r = TaskRecord(cut=int(self._cut() - self.cut0))
        lines = self.lines()
        for line in lines:
            s = line["stats"]
            r.requests += 1
            r.speculative += s["speculative"]
            r.prompts.append(s["n_prompt_tokens"])
            r.evaluated.append(s["n_prefilled"])
            r.draft_evaluated += s["n_draft_prefilled"]
            r.generated += s["n_generated"]
            r.drafted += s["n_drafted"]
            r.accepted += s["n_accepted"]
            r.prefill.append(s["prefill_ms"] / 1e3)
        return r


# llama-server's log lines for one finished request (server-context.cpp, print_timings and release)
_PEER = {
    "prompt": re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens"),
    "eval": re.compile(r"\|\s+eval time =\s*[\d.]+ ms /\s*(\d+) tokens"),
    "draft": re.compile(r"draft acceptance = [\d.]+ \(\s*(\d+) accepted /\s*(\d+) generated\)"),
    "stop": re.compile(r"stop processing: n_tokens = (\d+)"),
}


class PeerWatch(Watch):
    """The same record for llama-server (the comparison), from its log: each request's prompt eval
    (tokens evaluated, ms), tokens generated, drafts, and its final n_tokens (prompt + generated).
    It counts no cut requests."""

    def _cut(self) -> float:
        return 0.0

    def record(self) -> TaskRecord:
        time.sleep(1.0)
        r, generated = TaskRecord(), None  # the request's tokens generated, until its stop line
        text = self.log.read_bytes()[self.offset :].decode(errors="replace") if self.log.exists() else ""
        for line in text.splitlines():
            if m := _PEER["prompt"].search(line):
                r.requests += 1
                r.prefill.append(float(m[1]) / 1e3)
                r.evaluated.append(int(m[2]))
            elif m := _PEER["eval"].search(line):
                generated = int(m[1])
                r.generated += generated
            elif m := _PEER["draft"].search(line):
                r.accepted, r.drafted = r.accepted + int(m[1]), r.drafted + int(m[2])
            elif (m := _PEER["stop"].search(line)) and generated is not None:
                # n_tokens: the prompt and what was generated but the last token (the end is not kept)
                r.prompts.append(int(m[1]) - max(generated - 1, 0))
                generated = None
        return r
