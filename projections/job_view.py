"""``job_view``: the job objects of api.md, one row per job, built from the Job* events.

Jobs live in their VM's stream; this read model lists them across VMs (``GET /jobs``) and is
the worker's index of jobs that may need running.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from domain.states import Execution
from domain.vm import Vm
from projections.db import Database, Dialect, Tx
from projections.formats import rfc3339, uuid_text
from projections.kept_folds import KeptFolds
from projections.read_model import EventKinds
from projections.runner import ReadModel

# Jobs kept between batches (rows of a few hundred bytes): those of the last seconds' batches
KEPT_JOBS = 4096


class JobView(ReadModel):
    """One row per job; ``chain_results`` and ``params`` are JSON text."""

    name = "job_view"
    blind_writes = True
    tables = ("job_view",)

    def create_statements(self, db: Database) -> list[str]:
        jobs = self.table("job_view")
        return [
            f"CREATE TABLE IF NOT EXISTS {jobs} ("
            "uuid TEXT PRIMARY KEY, vm_uuid TEXT NOT NULL, name TEXT NOT NULL, "
            "execution TEXT NOT NULL, params TEXT NOT NULL, created_at TEXT NOT NULL, "
            "started_at TEXT, finished_at TEXT, attempt INTEGER NOT NULL, error TEXT, "
            "chain_results TEXT NOT NULL, worker TEXT, lease_expires_at TEXT, "
            "position BIGINT NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {self.index('job_view_vm')} ON {jobs} (vm_uuid, position)",
            f"CREATE INDEX IF NOT EXISTS {self.index('job_view_execution')} "
            f"ON {jobs} (execution, position)",
            # covers the console's deepest queues (unfinished jobs by VM): docs/console.md
            f"CREATE INDEX IF NOT EXISTS {self.index('job_view_unfinished')} "
            f"ON {jobs} (execution, vm_uuid, created_at)",
        ]

    def __init__(self, *, kept_jobs: int = KEPT_JOBS):
        # The jobs the last committed batch changed, as rows, kept for the next batch: a job
        # queued in one batch and started or canceled in a later one needs no read of its row
        # (projections.kept_folds; docs/performance.md, P5)
        self.kept: KeptFolds = KeptFolds(kept_jobs)

    def read(self, tx: Tx, events: Sequence[tuple[int, Any]]
             ) -> Callable[[], dict[str, dict[str, Any]]]:
        mine = [e for _, e in _JOB_EVENTS.of(events)]
        queued = {e.job_uuid for e in mine if isinstance(e, Vm.JobQueued)}
        return tx.submit_rows_by_key(self.table("job_view"), "uuid", {
            e.job_uuid for e in mine if self.kept.get(e.job_uuid) is None} - queued)

    def write(self, tx: Tx, events: Sequence[tuple[int, Any]],
              stored: dict[str, dict[str, Any]]) -> None:
        # The batch's jobs are changed in memory and each written once at the end: a step no
        # longer costs a read and a write of its job's row (docs/performance.md, P3).
        mine = _JOB_EVENTS.of(events)
        if not mine:
            return
        jobs = self.table("job_view")
        changed: dict[str, dict[str, Any]] = {}
        existing: set[str] = set()  # jobs with a row already: updated, not inserted
        for position, event in mine:
            if isinstance(event, Vm.JobQueued):
                changed[event.job_uuid] = _queued(position, event)
                continue
            job = (changed.get(event.job_uuid) or self.kept.get(event.job_uuid)
                   or _loaded(stored, event.job_uuid))
            if event.job_uuid not in changed:
                existing.add(event.job_uuid)
            changed[event.job_uuid] = job
            _apply(job, event)
        rows = [{**job, "chain_results": json.dumps(job["chain_results"])}
                for job in changed.values()]
        tx.executemany(f"UPDATE {jobs} SET {_SETS} WHERE uuid = ?",
                       [[row[c] for c in _UPDATED] + [row["uuid"]]
                        for row in rows if row["uuid"] in existing])
        tx.executemany(f"INSERT INTO {jobs} ({', '.join(_COLUMNS)}) "
                       f"VALUES ({', '.join('?' * len(_COLUMNS))})",
                       [[row[c] for c in _COLUMNS] for row in rows
                        if row["uuid"] not in existing])
        self.kept.folded(changed)


_JOB_EVENTS = EventKinds(Vm.JobQueued, Vm.JobStarted, Vm.JobLeaseRenewed, Vm.JobStepRecorded,
                        Vm.JobSucceeded, Vm.JobFailed, Vm.JobCanceled)
_COLUMNS = ("uuid", "vm_uuid", "name", "execution", "params", "created_at", "started_at",
            "finished_at", "attempt", "error", "chain_results", "worker", "lease_expires_at",
            "position")
_UPDATED = ("execution", "started_at", "finished_at", "attempt", "error", "chain_results",
            "worker", "lease_expires_at")
_SETS = ", ".join(f"{column} = ?" for column in _UPDATED)


def _queued(position: int, event: Any) -> dict[str, Any]:
    return {
        "uuid": event.job_uuid, "vm_uuid": uuid_text(event.originator_id), "name": event.name,
        "execution": Execution.QUEUED.value, "params": json.dumps(event.params),
        "created_at": rfc3339(event.timestamp), "started_at": None, "finished_at": None,
        "attempt": 0, "error": None, "chain_results": [], "worker": None,
        "lease_expires_at": None, "position": position,
    }


def _loaded(stored: dict[str, dict[str, Any]], job_uuid: str) -> dict[str, Any]:
    row = stored.get(job_uuid)
    if row is None:
        raise LookupError(f"job_view has no row for job {job_uuid}: an event was missed")
    return {**row, "chain_results": json.loads(row["chain_results"])}


def _apply(job: dict[str, Any], event: Any) -> None:
    """Change ``job`` (a row, ``chain_results`` as a list) by one of its events."""
    when = rfc3339(event.timestamp)
    if isinstance(event, Vm.JobStarted):
        job.update(execution=Execution.RUNNING.value, started_at=job["started_at"] or when,
                   attempt=event.attempt, worker=event.worker,
                   lease_expires_at=rfc3339(event.lease_expires_at))
    elif isinstance(event, Vm.JobLeaseRenewed):
        job["lease_expires_at"] = rfc3339(event.lease_expires_at)
    elif isinstance(event, Vm.JobStepRecorded):
        job["chain_results"].append(event.step)
    elif isinstance(event, Vm.JobCanceled):
        # VMAPI clients judge a job by its last chain result, so the cancellation itself is
        # recorded as one (after the steps of a running job a quarantine canceled).
        job["chain_results"].append({"name": "cancel", "result": None, "error": event.reason,
                                     "started_at": when, "finished_at": when})
        _finish(job, Execution.CANCELED, when, event.reason)
    else:
        failed = isinstance(event, Vm.JobFailed)
        _finish(job, Execution.FAILED if failed else Execution.SUCCEEDED, when,
                event.error if failed else None)


def _finish(job: dict[str, Any], execution: Execution, when: str, error: str | None) -> None:
    job.update(execution=execution.value, finished_at=when, error=error, lease_expires_at=None)


def render_job(row: dict[str, Any]) -> dict[str, Any]:
    """The job object of api.md from a ``job_view`` row."""
    return {
        "uuid": row["uuid"],
        "name": row["name"],
        "execution": row["execution"],
        "vm_uuid": row["vm_uuid"],
        "params": json.loads(row["params"]),
        "created_at": row["created_at"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "attempt": row["attempt"],
        "error": row["error"],
        "chain_results": json.loads(row["chain_results"]),
    }


class JobQueries:
    """Read-only queries of ``job_view``."""

    def __init__(self, db: Database):
        self.db = db

    def get(self, job_uuid: str) -> dict[str, Any] | None:
        """The job object, or None."""
        row = self.db.one("SELECT * FROM job_view WHERE uuid = ?", (job_uuid,))
        return None if row is None else render_job(row)

    def list(
        self,
        *,
        vm_uuid: str | None = None,
        execution: str | None = None,
        name: str | None = None,
        owner_uuid: str | None = None,
        forced: bool | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Jobs matching every given filter, newest first (VMAPI ListJobs order) by the log
        position of the event that queued each: the one total order of the log, where
        ``created_at`` is the clock of the process that took the command (api.md, "Reads").
        ``forced``: only the jobs whose ``params.args.force`` is true (what a kill queues:
        a stop job, docs/jobs.md), or only the others; None: either."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("vm_uuid", vm_uuid), ("execution", execution), ("name", name)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if forced is not None:
            # JSON true reads 'true' from both (SQLite's json_type, PostgreSQL's #>>)
            force = ("json_type(params, '$.args.force')" if self.db.dialect is Dialect.SQLITE
                     else "(params::jsonb #>> '{args,force}')")
            clauses.append(f"{force} = 'true'" if forced else f"COALESCE({force}, '') <> 'true'")
        if owner_uuid is not None:
            clauses.append("vm_uuid IN (SELECT uuid FROM vm_view WHERE owner_uuid = ?)")
            params.append(owner_uuid)
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        with self.db.transaction(commit=False) as tx:
            tx.execute(
                f"SELECT * FROM job_view{where} ORDER BY position DESC LIMIT ? OFFSET ?",
                [*params, limit, offset],
            )
            return [render_job(row) for row in tx.fetchall()]

    def newest_of_vm(self, vm_uuid: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """The VM's newest ``limit`` jobs, newest first, and how many it has in all, read
        in one transaction (so the count is of the same jobs)."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT * FROM job_view WHERE vm_uuid = ? ORDER BY position DESC "
                       "LIMIT ?", (vm_uuid, limit))
            jobs = [render_job(row) for row in tx.fetchall()]
            tx.execute("SELECT COUNT(*) AS n FROM job_view WHERE vm_uuid = ?", (vm_uuid,))
            row = tx.fetchone()
        return jobs, int(row["n"]) if row else 0

    def vms_with_unfinished_jobs(self, limit: int = 1000) -> list[str]:
        """VMs that have a queued or running job, oldest job first (the worker's index)."""
        with self.db.transaction(commit=False) as tx:
            tx.execute(
                "SELECT vm_uuid, MIN(position) AS first FROM job_view "
                "WHERE execution IN ('queued', 'running') "
                "GROUP BY vm_uuid ORDER BY first LIMIT ?",
                (limit,),
            )
            return [row["vm_uuid"] for row in tx.fetchall()]


    def gauges(self) -> JobGauges:
        """The job figures ``/metrics`` publishes, read in one transaction: how many jobs are
        in each execution state (every state listed, 0 when none) and the most unfinished
        (queued + running) jobs any one VM has (0 with none)."""
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT execution, COUNT(*) AS n FROM job_view GROUP BY execution")
            counts = {row["execution"]: int(row["n"]) for row in tx.fetchall()}
            tx.execute(
                "SELECT COALESCE(MAX(n), 0) AS depth FROM (SELECT COUNT(*) AS n FROM job_view "
                "WHERE execution IN ('queued', 'running') GROUP BY vm_uuid) AS per_vm"
            )
            row = tx.fetchone()
        return JobGauges(
            by_execution={e.value: counts.get(e.value, 0) for e in Execution},
            max_queue_depth=int(row["depth"]) if row else 0,
        )


@dataclass(frozen=True)
class JobGauges:
    """Job figures at one moment of ``job_view``: jobs per execution state, and the largest
    number of unfinished (queued + running) jobs of any one VM."""

    by_execution: dict[str, int]
    max_queue_depth: int


class StuckCandidates:
    """VMs the read models say may be stuck (the aggregate has the last word): provisioning
    since before the transient threshold, or under a job running since before the job
    threshold."""

    def __init__(self, db: Database):
        self.db = db

    def __call__(self, now: datetime, thresholds: Any) -> list[str]:
        transient = rfc3339(now - timedelta(seconds=thresholds.transient_s))
        job = rfc3339(now - timedelta(seconds=thresholds.job_s))
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT uuid FROM vm_view WHERE state = 'provisioning' "
                       "AND create_timestamp < ?", (transient,))
            found = {row["uuid"] for row in tx.fetchall()}
            tx.execute("SELECT vm_uuid FROM job_view WHERE execution = 'running' "
                       "AND started_at < ?", (job,))
            found |= {row["vm_uuid"] for row in tx.fetchall()}
        return sorted(found)
