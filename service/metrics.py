"""Prometheus metrics (served at ``GET /metrics``; docs/operations.md, "Health and metrics").

Two kinds, because vmledger runs as several processes:

- counters, gauges and histograms of what *this process* did (requests, command latency,
  version-conflict retries, lease takeovers by its job worker, the lag its projection runner
  saw), kept in the process-wide ``prometheus_client.REGISTRY``; the job worker's and the
  projection runner's only in a process that runs one (``export_worker_metrics``);
- figures of the whole fleet's jobs (``JobCollector``), read from the ``job_view`` read model
  at scrape time, so every process that serves them publishes the same numbers whichever
  process ran or projected the jobs (sum the former across processes, never the latter).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, \
    generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from domain.states import Execution
from projections.job_view import JobGauges

log = logging.getLogger(f"vmledger.{__name__}")

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
# The job worker's: put in the registry only by a process whose worker runs
# (``export_worker_metrics``), as the projection lag is published only by a process whose
# runner runs. A process that runs no worker (``serve`` in production mode, ``vmledger
# project``) exported them as a constant 0, which hid a worker whose own endpoint was not
# scraped (operator tester): absent, ``absent()`` alerts on them.
LEASE_TAKEOVERS = Counter(
    "vmledger_job_lease_takeovers_total",
    "Jobs this process's worker took over from another worker whose lease had expired",
    registry=None,
)
REPORT_ENTRIES_OLDER_THAN_LOG = Counter(
    "vmledger_agent_report_entries_older_than_log_total",
    "VMs of agent reports applied by this process that the report changed nothing for, because "
    "it was taken before a job step the log recorded of the VM (by its seq)",
)

DAMAGED_STREAMS_PASSED = Gauge(
    "vmledger_worker_damaged_streams",
    "VMs with unfinished jobs that this process's worker passed over in its last pass because "
    "their stream cannot be folded (a gap, an unreadable event: the log needs repair)",
    registry=None,
)
FAILING_VMS_PASSED = Gauge(
    "vmledger_worker_failing_vms",
    "VMs with unfinished jobs that this process's worker passed over in its last pass because "
    "loading them or running their job raised an error that is not the database's (a bug)",
    registry=None,
)
_WORKER_METRICS = (LEASE_TAKEOVERS, DAMAGED_STREAMS_PASSED, FAILING_VMS_PASSED)
_worker_metrics_lock = threading.Lock()
_worker_metrics_exported = False


def export_worker_metrics() -> None:
    """Put the job worker's metrics (``_WORKER_METRICS``) in this process's registry, once:
    called whenever a worker runs (``Worker.run_pending``, ``Worker.run_vm``), cheap after the
    first call. Thread-safe."""
    global _worker_metrics_exported
    if _worker_metrics_exported:
        return
    with _worker_metrics_lock:
        if not _worker_metrics_exported:
            for metric in _WORKER_METRICS:
                REGISTRY.register(metric)
            _worker_metrics_exported = True


def report_projection_lag(read_model: str, lag: int) -> None:
    """The projection runner's ``on_lag`` callback: set the read model's lag gauge."""
    PROJECTION_LAG.labels(read_model=read_model).set(lag)


class JobCollector(Collector):
    """The fleet's job figures, read from ``job_view`` at every scrape (``read`` is
    ``JobQueries.gauges``):

    - ``vmledger_jobs{execution}``: jobs per execution state (queued, running, succeeded,
      failed, canceled; ``domain.states.Execution``);
    - ``vmledger_vm_queue_depth_max``: the most unfinished (queued + running) jobs any one VM
      has.

    They are as current as ``job_view`` (its lag is ``vmledger_projection_lag_events`` and
    ``/ping``). If the database cannot be read the scrape leaves both out (and logs a
    warning) rather than failing: alert on their absence.
    """

    def __init__(self, read: Callable[[], JobGauges]):
        self.read = read

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families, without reading the database (for the registry's name check)."""
        yield from self._families(None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The families with their values, read now."""
        try:
            gauges = self.read()
        except Exception as error:  # noqa: BLE001 - a scrape must not fail on the database
            log.warning("job metrics left out of this scrape: %s: %s",
                        type(error).__name__, error)
            return
        yield from self._families(gauges)

    @staticmethod
    def _families(gauges: JobGauges | None) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "vmledger_jobs", "Jobs by execution state (from the job_view read model)",
            labels=["execution"])
        depth = GaugeMetricFamily(
            "vmledger_vm_queue_depth_max",
            "The most queued and running jobs any one VM has (from the job_view read model)")
        if gauges is not None:
            for execution in Execution:
                jobs.add_metric([execution.value], gauges.by_execution.get(execution.value, 0))
            depth.add_metric([], gauges.max_queue_depth)
        yield jobs
        yield depth


def fleet_registry(read: Callable[[], JobGauges]) -> CollectorRegistry:
    """A registry holding one ``JobCollector`` (one per app: the collector reads that app's
    database, so it is not put in the process-wide registry)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(JobCollector(read))
    return registry


def exposition(*registries: CollectorRegistry) -> bytes:
    """The text format of this process's metrics followed by those of ``registries``."""
    return b"".join(generate_latest(r) for r in (REGISTRY, *registries))


def serve_process_metrics(address: str | None) -> WSGIServer | None:
    """Serve this process's metrics (the process-wide registry only) over HTTP at
    ``address`` (``HOST:PORT``; an empty host is 127.0.0.1) from a daemon thread, for
    processes that serve no API (``vmledger project``, ``vmledger work``), logging the
    ``HOST:PORT`` it listens on (INFO, ``metrics_address``). Returns the
    server (``server_port`` is the port bound, ``shutdown()`` stops it), or None when
    ``address`` is unset. Raises ``OSError`` if the address cannot be bound."""
    if not address:
        return None
    host, _, port = address.rpartition(":")
    server, _ = start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1")
    bound = str(server.server_address[0])
    # the host:port it listens on, not the port alone (an operator could not tell the
    # interface: 127.0.0.1, or every one); an IPv6 host in brackets, as a URL has it
    where = f"[{bound}]" if ":" in bound else bound
    log.info("serving this process's metrics on %s:%s at /metrics", where, server.server_port,
             extra={"metrics_address": f"{where}:{server.server_port}"})
    return server


# Each request's children, by label values: ``labels()`` checks and joins its arguments under a
# lock on every call, about 1 % of a command's CPU (docs/performance.md, "A lean HTTP edge").
# A child stays its parent's until ``remove``/``clear``, which nothing calls on these two.
_REQUEST_COUNTS: dict[tuple[str, int], Counter] = {}
_COMMAND_TIMES: dict[str, Histogram] = {}


def count_request(route: str, status: int) -> None:
    """One more ``REQUESTS`` answered on ``route`` (a path template) with ``status``."""
    child = _REQUEST_COUNTS.get((route, status))
    if child is None:
        child = _REQUEST_COUNTS[route, status] = REQUESTS.labels(route=route, status=str(status))
    child.inc()


def observe_command(route: str, seconds: float) -> None:
    """A command request on ``route`` (``METHOD /template``) took ``seconds``."""
    child = _COMMAND_TIMES.get(route)
    if child is None:
        child = _COMMAND_TIMES[route] = COMMAND_LATENCY.labels(route=route)
    child.observe(seconds)
