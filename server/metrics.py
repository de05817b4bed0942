"""What operators watch, in Prometheus' text format at /metrics (prometheus-client).

One registry per app (tests run several apps in a process). With `rag serve --workers N`,
each worker keeps its own figures and a scrape reads the worker that accepts it.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

from rag.common.parts import PARTS

# Seconds: searches take milliseconds, LLM answers seconds.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, in_flight: dict):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "rag_http_requests",
            "HTTP requests by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "rag_http_request_seconds",
            "Time to the end of the response, by route",
            ["route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.answers = Counter(
            "rag_answers",
            "Answers by outcome: answered, abstained, or the extractive fallback standing in for a failed LLM",
            ["outcome"],
            registry=self.registry,
        )
        self.llm_errors = Counter(
            "rag_llm_errors", "LLM failures that reached the client (fallback off)", ["kind"], registry=self.registry
        )
        self.feedback = Counter(
            "rag_feedback",
            "Ratings of answers received (POST /feedback), by rating",
            ["rating"],
            registry=self.registry,
        )
        self.papers = Gauge("rag_index_papers", "Papers in the loaded index", registry=self.registry)
        self.chunks = Gauge("rag_index_chunks", "Chunks in the loaded index", registry=self.registry)
        in_flight_gauge = Gauge("rag_answers_in_flight", "Answers being served now", registry=self.registry)
        in_flight_gauge.set_function(lambda: in_flight["answers"])
        self.registry.register(_PartFailures())

    @PARTS.guard("metrics")
    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    @PARTS.guard("metrics")
    def answer(self, answer) -> None:
        """Called with each final `rag.assistant.Answer`."""
        outcome = "abstained" if answer.abstained else "fallback" if answer.fallback else "answered"
        self.answers.labels(outcome).inc()

    @PARTS.guard("metrics")
    def index(self, index) -> None:
        self.papers.set(len(index.corpus))
        self.chunks.set(index.chunks)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _PartFailures:
    """rag_part_failures_total{part}: failures of the optional parts, which the process counts in
    rag/common/parts.py whether or not this registry (a part itself) works."""

    def collect(self):
        family = CounterMetricFamily(
            "rag_part_failures", "Failures of an optional part that did not fail the answer", labels=["part"]
        )
        for part, count in sorted(PARTS.failures.items()):
            family.add_metric([part], count)
        yield family
