"""/metrics: server totals as Prometheus text, under the names vLLM and llama.cpp use, so existing
dashboards and scrapers read localspec unchanged.

One set of totals (`Totals`, filled from each finished request's Stats) is rendered under both
families by a custom collector, rather than bookkeeping every number twice:
- vLLM: vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens (counters, `_total`)
  and vllm:spec_decode_num_accepted_tokens_per_pos{position} (accepted at position i; divide by
  num_drafts for the per-position rate), vllm:prompt_tokens / generation_tokens, request_success
  {finished_reason}, num_requests_running / waiting.
- llama.cpp: llamacpp:prompt_tokens, tokens_predicted, prompt_seconds, tokens_predicted_seconds
  (counters), predicted_tokens_seconds (decode tok/s), requests_processing / deferred (gauges), and
  n_drafted / n_drafted_accepted (the names llama-server builds that export drafts use).
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from dataclasses import dataclass, field
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from localspec.decode.stats import Stats


@dataclass
class Totals:
    finished: Tally = field(default_factory=Tally)  # finish reason -> requests
    cancelled: int = 0
    rejected: int = 0  # turned away with 503 (queue full)
    failed: int = 0  # ended with a server error (the generation failed, the engine was lost)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0
    decode_tokens: int = 0  # tokens produced inside decode_s (each request's first comes with prefill)
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_by_pos: list[int] = field(default_factory=list)


class ServerMetrics:
    def __init__(self, load: Callable[[], tuple[int, int]]) -> None:
        """`load` says (running, waiting) right now."""
        self._load = load
        self._lock = threading.Lock()
        self.totals = Totals()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def record(self, stats: Stats, finish_reason: str) -> None:
        with self._lock:
            t = self.totals
            t.finished[finish_reason] += 1
            t.prompt_tokens += stats.n_prompt_tokens
            t.generated_tokens += stats.n_generated
            t.prompt_s += stats.prefill_ms / 1e3
            t.decode_s += stats.decode_ms / 1e3
            t.decode_tokens += max(stats.n_generated - 1, 0)
            t.drafts += stats.rounds
            t.draft_tokens += stats.n_drafted
            t.accepted_tokens += stats.n_accepted
            for i, n in enumerate(stats.accepted_by_pos):
                if i == len(t.accepted_by_pos):
                    t.accepted_by_pos.append(0)
                t.accepted_by_pos[i] += n

    def count(self, what: str) -> None:
        """Count a request that ended without a response: cancelled, rejected or failed."""
        with self._lock:
            setattr(self.totals, what, getattr(self.totals, what) + 1)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- prometheus_client collector protocol ------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        with self._lock:
            t = Totals(**{k: getattr(self.totals, k) for k in Totals.__dataclass_fields__})
            t.accepted_by_pos = list(t.accepted_by_pos)
            t.finished = Tally(t.finished)
        running, waiting = self._load()

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=value)

        # speculation (vLLM)
        yield counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts (verification rounds).", t.drafts
        )
        yield counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", t.draft_tokens)
        yield counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", t.accepted_tokens)
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=["position"],
        )
        for pos, n in enumerate(t.accepted_by_pos):
            per_pos.add_metric([str(pos)], n)
        yield per_pos
        # speculation (llama.cpp)
        yield counter("llamacpp:n_drafted", "Number of tokens drafted.", t.draft_tokens)
        yield counter("llamacpp:n_drafted_accepted", "Number of drafted tokens accepted.", t.accepted_tokens)
        # requests
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.", labels=["finished_reason"]
        )
        for reason in ("stop", "length", "context"):
            success.add_metric([reason], t.finished.get(reason, 0))
        yield success
        yield counter(
            "localspec:requests_cancelled", "Requests whose client went away mid-generation.", t.cancelled
        )
        yield counter(
            "localspec:requests_rejected", "Requests turned away with 503 (queue full).", t.rejected
        )
        yield counter("localspec:requests_failed", "Requests that ended with a server error.", t.failed)
        yield gauge("vllm:num_requests_running", "Requests in a slot.", running)
        yield gauge("vllm:num_requests_waiting", "Requests waiting for a slot.", waiting)
        yield gauge("llamacpp:requests_processing", "Number of requests processing.", running)
        yield gauge("llamacpp:requests_deferred", "Number of requests deferred.", waiting)
        # tokens and time
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", t.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", t.generated_tokens)
        yield counter("llamacpp:prompt_tokens", "Number of prompt tokens processed.", t.prompt_tokens)
        yield counter("llamacpp:prompt_seconds", "Prompt process time.", t.prompt_s)
        yield counter(
            "llamacpp:tokens_predicted", "Number of generation tokens processed.", t.generated_tokens
        )
        yield counter("llamacpp:tokens_predicted_seconds", "Predict process time.", t.decode_s)
        yield gauge(
            "llamacpp:predicted_tokens_seconds",
            "Average generation throughput in tokens/s (decode, one request's view).",
            t.decode_tokens / t.decode_s if t.decode_s > 0 else 0.0,
        )
