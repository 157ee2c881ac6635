"""``job_view``: the job objects of api.md, one row per job, built from the Job* events.

Jobs live in their VM's stream; this read model lists them across VMs (``GET /jobs``) and is
the worker's index of jobs that may need running.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from domain.states import Execution
from domain.vm import Vm
from projections.db import Database, Tx
from projections.formats import rfc3339
from projections.runner import ReadModel


class JobView(ReadModel):
    """One row per job; ``chain_results`` and ``params`` are JSON text."""

    name = "job_view"
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
        ]

    def apply(self, tx: Tx, events: Sequence[tuple[int, Any]]) -> None:
        jobs = self.table("job_view")
        for position, event in events:
            if isinstance(event, Vm.JobQueued):
                tx.execute(
                    f"INSERT INTO {jobs} (uuid, vm_uuid, name, execution, params, created_at, "
                    "attempt, chain_results, position) VALUES (?, ?, ?, ?, ?, ?, 0, '[]', ?)",
                    (
                        event.job_uuid, str(event.originator_id), event.name,
                        Execution.QUEUED.value, json.dumps(event.params),
                        rfc3339(event.timestamp), position,
                    ),
                )
            elif isinstance(event, Vm.JobStarted):
                tx.execute(
                    f"UPDATE {jobs} SET execution = ?, started_at = COALESCE(started_at, ?), "
                    "attempt = ?, worker = ?, lease_expires_at = ? WHERE uuid = ?",
                    (
                        Execution.RUNNING.value, rfc3339(event.timestamp), event.attempt,
                        event.worker, rfc3339(event.lease_expires_at), event.job_uuid,
                    ),
                )
            elif isinstance(event, Vm.JobLeaseRenewed):
                tx.execute(
                    f"UPDATE {jobs} SET lease_expires_at = ? WHERE uuid = ?",
                    (rfc3339(event.lease_expires_at), event.job_uuid),
                )
            elif isinstance(event, Vm.JobStepRecorded):
                self._append_step(tx, jobs, event.job_uuid, event.step)
            elif isinstance(event, Vm.JobSucceeded):
                self._finish(tx, jobs, event, Execution.SUCCEEDED, None)
            elif isinstance(event, Vm.JobFailed):
                self._finish(tx, jobs, event, Execution.FAILED, event.error)
            elif isinstance(event, Vm.JobCanceled):
                # A canceled job ran no step; VMAPI clients judge a job by its last chain
                # result, so the cancellation itself is recorded as one.
                when = rfc3339(event.timestamp)
                self._append_step(tx, jobs, event.job_uuid, {
                    "name": "cancel", "result": None, "error": event.reason,
                    "started_at": when, "finished_at": when,
                })
                self._finish(tx, jobs, event, Execution.CANCELED, event.reason)

    @staticmethod
    def _append_step(tx: Tx, jobs: str, job_uuid: str, step: dict[str, Any]) -> None:
        tx.execute(f"SELECT chain_results FROM {jobs} WHERE uuid = ?", (job_uuid,))
        row = tx.fetchone()
        if row is None:
            raise LookupError(f"job_view has no row for job {job_uuid}: an event was missed")
        chain = json.loads(row["chain_results"])
        chain.append(step)
        tx.execute(
            f"UPDATE {jobs} SET chain_results = ? WHERE uuid = ?", (json.dumps(chain), job_uuid)
        )

    @staticmethod
    def _finish(tx: Tx, jobs: str, event: Any, execution: Execution, error: str | None) -> None:
        tx.execute(
            f"UPDATE {jobs} SET execution = ?, finished_at = ?, error = ?, "
            "lease_expires_at = NULL WHERE uuid = ?",
            (execution.value, rfc3339(event.timestamp), error, event.job_uuid),
        )


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
        with self.db.transaction(commit=False) as tx:
            tx.execute("SELECT * FROM job_view WHERE uuid = ?", (job_uuid,))
            row = tx.fetchone()
        return None if row is None else render_job(row)

    def list(
        self,
        *,
        vm_uuid: str | None = None,
        execution: str | None = None,
        name: str | None = None,
        owner_uuid: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Jobs matching every given filter, newest first (VMAPI ListJobs order)."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("vm_uuid", vm_uuid), ("execution", execution), ("name", name)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
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
