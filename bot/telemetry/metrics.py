"""The bot's Prometheus metrics, in a registry of its own (nothing registers at import): the Slack
surface and the HTTP face count into one `BotMetrics`, which /metrics serves.

| metric | labels | meaning |
|---|---|---|
| gpumem_slack_commands_total | verb, outcome | commands answered, by how they ended |
| gpumem_slack_command_duration_seconds | verb | from the command to its final answer |
| gpumem_http_request_duration_seconds | path | HTTP requests; for /slack/events this is the ack |
| gpumem_slack_api_errors_total | method, error | Slack Web API calls that failed after retries |
| gpumem_slack_api_retries_total | method, reason | retries: ratelimited, server_error, connection |
| gpumem_jobs_running, gpumem_jobs_queued | | the work pool now |
| gpumem_http_refused_total | reason | requests refused before any listener ran: body_too_large, bad_timestamp, stale_timestamp, bad_signature, bad_payload, replay, webhook_unauthorized, webhook_bad_body, webhook_disabled, webhook_queue_full, ... |
| gpumem_alerts_total | status, outcome | Alertmanager alerts received, by what became of them: triaged, joined, duplicate, resolved, busy, no_target, no_route, ... |
| gpumem_audit_chain_broken | | 1 when the audit's hash chain was broken when `gpumem serve` checked it at start, else 0 |
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: outcomes of a command
OUTCOMES = ("healthy", "cause", "insufficient", "ok", "error", "timeout", "usage", "refused", "busy")
CONTENT_TYPE = CONTENT_TYPE_LATEST


class BotMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.commands = Counter("gpumem_slack_commands", "Slack commands by verb and outcome",
                                ["verb", "outcome"], registry=r)
        self.command_seconds = Histogram("gpumem_slack_command_duration_seconds",
                                         "Seconds from a command to its final answer", ["verb"],
                                         buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=r)
        self.http_seconds = Histogram("gpumem_http_request_duration_seconds", "HTTP request seconds by path",
                                      ["path"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5),
                                      registry=r)
        self.api_errors = Counter("gpumem_slack_api_errors", "Slack Web API calls that failed (after retries)",
                                  ["method", "error"], registry=r)
        self.api_retries = Counter("gpumem_slack_api_retries", "Slack Web API retries by reason",
                                   ["method", "reason"], registry=r)
        self.http_refused = Counter("gpumem_http_refused", "HTTP requests refused before a listener ran, by reason",
                                    ["reason"], registry=r)
        self.alerts = Counter("gpumem_alerts", "Alertmanager alerts received, by status and what became of them",
                              ["status", "outcome"], registry=r)
        self.audit_chain_broken = Gauge("gpumem_audit_chain_broken",
                                        "1 when the audit's hash chain did not hold at start, else 0", registry=r)
        self.jobs_running = Gauge("gpumem_jobs_running", "Jobs running now", registry=r)
        self.jobs_queued = Gauge("gpumem_jobs_queued", "Jobs waiting for a worker", registry=r)

    def watch_pool(self, running: Callable[[], int], queued: Callable[[], int]) -> None:
        self.jobs_running.set_function(running)
        self.jobs_queued.set_function(queued)

    def command(self, verb: str, outcome: str, seconds: float | None = None) -> None:
        self.commands.labels(verb=verb, outcome=outcome).inc()
        if seconds is not None:
            self.command_seconds.labels(verb=verb).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def outcome_of(primary: str) -> str:
    """The command outcome for a verdict."""
    return {"healthy": "healthy", "insufficient_evidence": "insufficient"}.get(primary, "cause")
