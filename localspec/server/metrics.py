"""/metrics: server totals as Prometheus text, under the names vLLM and llama.cpp use, so existing
dashboards and scrapers read localspec unchanged.

One set of totals (serving/totals.py, filled from each finished request's Stats) is rendered under
both families by a custom collector, rather than bookkeeping every number twice:
- vLLM: vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens (counters, `_total`)
  and vllm:spec_decode_num_accepted_tokens_per_pos{position} (accepted at position i; divide by
  num_drafts for the per-position rate), vllm:prompt_tokens / generation_tokens, request_success
  {finished_reason}, num_requests_running / waiting.
- llama.cpp: llamacpp:prompt_tokens, tokens_predicted, prompt_seconds, tokens_predicted_seconds
  (counters), predicted_tokens_seconds (decode tok/s), requests_processing / deferred (gauges), and
  n_drafted / n_drafted_accepted (the names llama-server builds that export drafts use).
Every series carries a `model` label: a router serves many models, each with its own totals.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


def render(models: Iterable[Any]) -> bytes:
    """Every model's totals and load (serving.Model's) as Prometheus text, each series labelled
    with its model's name (`model`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(list(models)))
    return generate_latest(registry)


class _Collector:
    def __init__(self, models: list[Any]) -> None:
        self.models = models

    # -- prometheus_client collector protocol ------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for model in self.models:
            for kind, name, doc, labels, value in _samples(model):
                if name not in families:
                    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
                    families[name] = cls(name, doc, labels=["model", *labels])
                families[name].add_metric([model.name, *labels.values()], value)
        yield from families.values()


def _samples(model: Any) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
    """(kind, name, help, labels, value) of one model's series."""
    t = model.totals.snapshot()
    running, waiting = model.load()

    def counter(name: str, doc: str, value: float, **labels: str) -> tuple:
        return ("counter", name, doc, labels, value)

    def gauge(name: str, doc: str, value: float) -> tuple:
        return ("gauge", name, doc, {}, value)

    # speculation (vLLM)
    yield counter(
        "vllm:spec_decode_num_drafts", "Number of spec decoding drafts (verification rounds).", t.drafts
    )
    yield counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", t.draft_tokens)
    yield counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", t.accepted_tokens)
    for pos, n in enumerate(t.accepted_by_pos):
        yield counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", n,
            position=str(pos),
        )  # fmt: skip
    # speculation (llama.cpp)
    yield counter("llamacpp:n_drafted", "Number of tokens drafted.", t.draft_tokens)
    yield counter("llamacpp:n_drafted_accepted", "Number of drafted tokens accepted.", t.accepted_tokens)
    # requests
    for reason in ("stop", "length", "context"):
        yield counter(
            "vllm:request_success", "Count of successfully processed requests.", t.finished.get(reason, 0),
            finished_reason=reason,
        )  # fmt: skip
    yield counter(
        "localspec:requests_cancelled", "Requests whose client went away mid-generation.", t.cancelled
    )
    yield counter("localspec:requests_rejected", "Requests turned away with 503 (queue full).", t.rejected)
    yield counter("localspec:requests_failed", "Requests that ended with a server error.", t.failed)
    yield gauge("vllm:num_requests_running", "Requests in a slot.", running)
    yield gauge("vllm:num_requests_waiting", "Requests waiting for a slot.", waiting)
    yield gauge("llamacpp:requests_processing", "Number of requests processing.", running)
    yield gauge("llamacpp:requests_deferred", "Number of requests deferred.", waiting)
    # tokens and time
    yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", t.prompt_tokens)
    yield counter("vllm:generation_tokens", "Number of generation tokens processed.", t.generated_tokens)
    yield counter("llamacpp:prompt_tokens", "Number of prompt tokens processed.", t.prompt_tokens)
    yield counter(
        "localspec:prompt_tokens_evaluated",
        "Prompt tokens the target evaluated; the rest came from a cached prefix (this slot's or "
        "another's: n choices of one prompt evaluate it once).",
        t.prompt_evaluated,
    )
    yield counter("llamacpp:prompt_seconds", "Prompt process time.", t.prompt_s)
    yield counter("llamacpp:tokens_predicted", "Number of generation tokens processed.", t.generated_tokens)
    yield counter("llamacpp:tokens_predicted_seconds", "Predict process time.", t.decode_s)
    yield gauge(
        "llamacpp:predicted_tokens_seconds",
        "Average generation throughput in tokens/s (decode, one request's view).",
        t.decode_tokens / t.decode_s if t.decode_s > 0 else 0.0,
    )
