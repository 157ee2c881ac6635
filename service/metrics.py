"""Prometheus metrics of this process (served at ``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
PROJECTION_LAG = Gauge(
    "vmledger_projection_lag_events",
    "How many events each read model is behind the log's head (as this process's projection "
    "runner last saw it)",
    ["read_model"],
)


def report_projection_lag(read_model: str, lag: int) -> None:
    """The projection runner's ``on_lag`` callback: set the read model's lag gauge."""
    PROJECTION_LAG.labels(read_model=read_model).set(lag)
