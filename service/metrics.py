"""Prometheus metrics of this process (served at ``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

VERSION_CONFLICT_RETRIES = Counter(
    "vmledger_version_conflict_retries_total",
    "Commands reloaded and decided again after another writer changed the stream first",
)
REQUESTS = Counter(
    "vmledger_http_requests_total", "HTTP requests by route and status", ["route", "status"]
)
COMMAND_LATENCY = Histogram(
    "vmledger_command_seconds", "Time to handle a command request (s)", ["route"]
)
