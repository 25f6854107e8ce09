"""Prometheus metrics for /metrics: turns and runs by outcome, their latencies, the sandbox
pool, artifacts, and the model's tokens and errors. One registry per process (not the
library's global one), so that tests and embedded uses do not collide."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from executor import Executor
from storage.artifacts import Artifact

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TURN_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)


class Leases(Protocol):
    """The replicas' turn leases, as metrics read them (bot.conversations.turn_leases)."""

    replica: str

    def live(self) -> list[str]: ...


def platform_of(conversation: str) -> str:
    """`discord`, `slack` or `console`, from the conversation key's prefix."""
    head = conversation.split(":", 1)[0]
    return head if head in ("discord", "slack") else "console"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter(
            "cellmate_turns", "Turns by platform and outcome", ["platform", "outcome"], registry=r
        )
        self.turn_seconds = Histogram(
            "cellmate_turn_seconds", "Turn latency", ["platform"], buckets=TURN_BUCKETS, registry=r
        )
        self.runs = Counter("cellmate_runs", "Code runs by status", ["status"], registry=r)
        self.run_seconds = Histogram(
            "cellmate_run_seconds", "Code run latency", buckets=RUN_BUCKETS, registry=r
        )
        self.artifacts = Counter(
            "cellmate_artifacts", "Artifacts by status", ["status"], registry=r
        )
        self.artifact_bytes = Counter(
            "cellmate_artifact_bytes", "Bytes of published artifacts", registry=r
        )
        self.llm_tokens = Counter("cellmate_llm_tokens", "Model tokens used", ["kind"], registry=r)
        self.llm_errors = Counter(
            "cellmate_llm_errors", "Failed model calls by kind", ["kind"], registry=r
        )
        self.refusals = Counter(
            "cellmate_refusals", "Turns refused before starting", ["reason"], registry=r
        )
        self.egress_requests = Counter(
            "cellmate_egress_requests",
            "Requests sandboxes made through the egress proxy, by platform and verdict",
            ["platform", "verdict"],
            registry=r,
        )
        self.egress_bytes = Counter(
            "cellmate_egress_bytes",
            "Bytes through the egress proxy (both ways), by platform",
            ["platform"],
            registry=r,
        )

    def watch(self, executor: Executor) -> None:
        """Report the executor's pool and queue at every scrape."""
        self.registry.register(_PoolCollector(executor))

    def turn(self, conversation: str, outcome: str, seconds: float) -> None:
        platform = platform_of(conversation)
        self.turns.labels(platform, outcome).inc()
        self.turn_seconds.labels(platform).observe(seconds)

    def run(self, status: str, seconds: float) -> None:
        self.runs.labels(status).inc()
        self.run_seconds.observe(seconds)

    def published(self, manifest: Iterable[Artifact]) -> None:
        for artifact in manifest:
            self.artifacts.labels(artifact.status).inc()
            if artifact.status == "published":
                self.artifact_bytes.inc(artifact.size)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_tokens.labels("prompt").inc(prompt_tokens)
        self.llm_tokens.labels("completion").inc(completion_tokens)

    def llm_error(self, kind: str) -> None:
        self.llm_errors.labels(kind).inc()

    def refused(self, reason: str) -> None:
        self.refusals.labels(reason).inc()

    def egress(self, conversation: str, verdict: str, size: int) -> None:
        platform = platform_of(conversation)
        self.egress_requests.labels(platform, verdict).inc()
        self.egress_bytes.labels(platform).inc(size)

    def watch_cluster(self, leases: Leases) -> None:
        """Report this replica's name and, from the shared database, the turns running on
        every replica, at every scrape."""
        self.registry.register(_ClusterCollector(leases))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _PoolCollector(Collector):
    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def collect(self) -> Iterable[GaugeMetricFamily]:
        pool = self.executor.pool
        yield GaugeMetricFamily(
            "cellmate_sandboxes_live", "Sandboxes running (in sessions or ready)", pool.live
        )
        yield GaugeMetricFamily(
            "cellmate_pool_ready", "Started sandboxes waiting for work", pool.ready
        )
        yield GaugeMetricFamily("cellmate_queue_length", "Runs waiting for a sandbox", pool.waiting)
        yield GaugeMetricFamily(
            "cellmate_sessions",
            "Conversations with a live session",
            len(self.executor.sessions.active),
        )


class _ClusterCollector(Collector):
    def __init__(self, leases: Leases) -> None:
        self.leases = leases

    def collect(self) -> Iterable[GaugeMetricFamily]:
        info = GaugeMetricFamily(
            "cellmate_replica_info", "This process, as turn leases name it", labels=["replica"]
        )
        info.add_metric([self.leases.replica], 1)
        yield info
        try:
            holders = self.leases.live()
        except Exception:
            return  # the database's health is /healthz's to report, not a scrape's to fail
        yield GaugeMetricFamily(
            "cellmate_cluster_turns", "Turns running now on every replica", len(holders)
        )
        yield GaugeMetricFamily(
            "cellmate_cluster_replicas_busy",
            "Replicas with a turn running now",
            len({holder.rsplit("/", 1)[0] for holder in holders}),
        )
