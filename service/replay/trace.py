"""What the trace replay (``service.replay.run``) puts in place of the real world: the rows of the
Google 2011 ``task_events`` trace, the names and sizes they map to, compute nodes whose
operations the trace has already decided (the command handlers as the only writer sees them
are in ``service.replay.commands``).

The file is the gzip CSV of clusterdata-2011-2 (no header; columns in
``../shared/data/README.md``, schema v2.1 of Reiss, Wilkes & Hellerstein). A task
``(job_id, task_index)`` is a VM; each time a task is submitted again after it finished or was
killed it is a new VM (a new *incarnation*). Everything here is deterministic, so two replays of
the same file name the same VMs, owners and servers.

Scale (our decision; the trace normalizes requests to its largest machine): a request of 1.0 is
a machine of ``MACHINE_RAM_MIB`` MiB and ``MACHINE_CPUS`` CPUs. ``ram`` is at least 1 MiB;
``cpu_cap`` is in VMAPI's unit, percent of one CPU (100 = one CPU), or None when not given.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path
from typing import NamedTuple
from uuid import UUID, uuid5

from service.jobs.compute.driver import (
    ComputeError, Fence, FencedOffError, Incarnation, PowerState, ServerInfo, TargetState,
)


MACHINE_RAM_MIB = 65_536
MACHINE_CPUS = 64

# Every uuid the replay derives lives under this namespace (uuid5), so it never collides with
# the uuid4s of VMs created through the API.
NAMESPACE = uuid5(UUID(int=0), "vmledger:trace:google2011")


class TraceEvent(IntEnum):
    """``event_type`` of ``task_events`` (schema v2.1)."""

    SUBMIT = 0
    SCHEDULE = 1
    EVICT = 2
    FAIL = 3
    FINISH = 4
    KILL = 5
    LOST = 6
    UPDATE_PENDING = 7
    UPDATE_RUNNING = 8


class TraceRecord(NamedTuple):
    """One row of ``task_events``. ``row`` is the 1-based line number in the file; the
    requests are the trace's normalized values (0..1), None where blank."""

    row: int
    timestamp: int  # microseconds since the trace start; 0 = before the window
    missing_info: str
    job_id: str
    task_index: str
    machine_id: str  # "" when the task is on no machine
    event: int  # a TraceEvent value; unknown codes are kept so they can be refused
    user: str
    scheduling_class: str
    priority: str
    cpu_request: float | None
    memory_request: float | None

    @property
    def task(self) -> tuple[str, str]:
        """The task key ``(job_id, task_index)``."""
        return self.job_id, self.task_index


class MalformedRowError(ValueError):
    """A row that is not a ``task_events`` record (too few columns, non-numeric codes)."""


def _request(text: str) -> float | None:
    return float(text) if text else None


def parse_row(fields: list[str], row: int) -> TraceRecord:
    """The record of one CSV row. Raises ``MalformedRowError``."""
    if len(fields) < 11:
        raise MalformedRowError(f"row {row}: {len(fields)} columns, expected 13")
    try:
        return TraceRecord(
            row=row,
            timestamp=int(fields[0]),
            missing_info=fields[1],
            job_id=fields[2],
            task_index=fields[3],
            machine_id=fields[4],
            event=int(fields[5]),
            user=fields[6],
            scheduling_class=fields[7],
            priority=fields[8],
            cpu_request=_request(fields[9]),
            memory_request=_request(fields[10]),
        )
    except ValueError as error:
        raise MalformedRowError(f"row {row}: {error}") from None


def read_rows(
    path: Path | str, *, skip_jobs: int = 0, max_jobs: int | None = None,
    max_rows: int | None = None,
) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of the rows selected, in file order.

    Jobs are numbered by the order in which their ``job_id`` first appears. ``skip_jobs``
    drops the rows of the first K jobs and ``max_jobs`` keeps those of the next N only (whole
    jobs, hence whole tasks); ``max_rows`` stops after N selected rows. Raises ``OSError``
    (``EOFError`` for a truncated gzip).
    """
    for line_number, fields in scan_rows(path, skip_jobs=skip_jobs, max_jobs=max_jobs,
                                         max_rows=max_rows):
        if fields is not None:
            yield line_number, fields


def scan_rows(
    path: Path | str, *, skip_jobs: int = 0, max_jobs: int | None = None,
    max_rows: int | None = None, tick: int = 0,
) -> Iterator[tuple[int, list[str] | None]]:
    """``read_rows``, and with ``tick`` > 0 also ``(line number, None)`` after every ``tick``
    lines read, selected or not: a reader ahead hands over what it has at each
    (``service.replay.ahead``), so a row followed by many unselected lines is not held."""
    opener = gzip.open if str(path).endswith(".gz") else open
    chosen: dict[str, bool] = {}  # job_id -> selected
    last = None if max_jobs is None else skip_jobs + max_jobs
    taken = 0
    with opener(path, "rt", newline="") as stream:
        for line_number, fields in enumerate(csv.reader(stream), start=1):
            if max_rows is not None and taken >= max_rows:
                return
            job_id = fields[2] if len(fields) > 2 else ""
            selected = chosen.get(job_id)
            if selected is None:
                number = len(chosen)
                selected = number >= skip_jobs and (last is None or number < last)
                chosen[job_id] = selected
            if selected:
                taken += 1
                yield line_number, fields
            if tick and not line_number % tick:
                yield line_number, None


def count_rows(path: Path | str, **selection: int | None) -> int:
    """How many rows ``read_rows(path, **selection)`` selects (the progress bar's total)."""
    return sum(1 for _ in read_rows(path, **selection))


# -- names ---------------------------------------------------------------------------------


def vm_uuid(job_id: str, task_index: str, incarnation: int) -> str:
    """The VM of one incarnation of a task (0 for the first submission)."""
    return str(uuid5(NAMESPACE, f"task:{job_id}:{task_index}:{incarnation}"))


def owner_uuid(user: str) -> str:
    """The owner of the VMs of a (hashed, opaque) trace user."""
    return str(uuid5(NAMESPACE, f"user:{user}"))


def server_uuid(machine_id: str) -> str:
    """The server (compute node) of a trace machine."""
    return str(uuid5(NAMESPACE, f"machine:{machine_id}"))


def ram_mib(memory_request: float | None) -> int:
    """RAM in MiB for a normalized memory request: 1.0 = ``MACHINE_RAM_MIB``, at least 1."""
    return max(1, round((memory_request or 0.0) * MACHINE_RAM_MIB))


def cpu_cap(cpu_request: float | None) -> int | None:
    """VMAPI ``cpu_cap`` (percent of one CPU) for a normalized CPU request: 1.0 =
    ``MACHINE_CPUS`` CPUs; None (no cap) when the request is blank or zero."""
    if not cpu_request:
        return None
    return max(1, round(cpu_request * MACHINE_CPUS * 100))


# -- compute nodes as the trace sees them ------------------------------------------------------


class TraceDriver:
    """A ``ComputeDriver`` whose operations always succeed: the trace is the truth, so a job
    the trace says ran (a SCHEDULE) cannot fail on the compute side.

    It remembers, in memory, which VM is on which machine, so a start job can ask whether a
    failed VM is still where it was (``inventory``). ``forget`` is the trace telling us a task
    left its machine (EVICT, FAIL, LOST). It keeps the protocol's fences in memory too: a
    replay is one worker in one process, so an older fence only comes from a bug.
    """

    def __init__(self) -> None:
        self._where: dict[str, str] = {}  # vm uuid -> server uuid
        self._vms: dict[str, dict[str, PowerState]] = {}  # server uuid -> vm uuid -> power
        # (machine, vm uuid) -> the newest fence's epoch: each machine keeps its own
        self._epochs: dict[tuple[str, str], int] = {}

    def _admit(self, server_uuid: str, vm_uuid: str, fence: Fence | None) -> None:
        """The fence check (``ComputeDriver``): raises ``FencedOffError`` for an older one
        than the machine has seen for the VM."""
        if fence is None:
            return
        key = (server_uuid, vm_uuid)
        if fence.epoch < self._epochs.get(key, fence.epoch):
            raise FencedOffError(f"fenced off: VM {vm_uuid} has seen epoch "
                                 f"{self._epochs[key]} on {server_uuid}, newer than {fence.epoch}")
        self._epochs[key] = fence.epoch

    def servers(self) -> list[ServerInfo]:
        """The machines the replay has placed VMs on."""
        return [self.server_info(s) for s in sorted(self._vms)]

    def server_info(self, server_uuid: str) -> ServerInfo:
        """A trace machine with the scale's capacity. The trace's requests are not what a
        machine really uses, so no RAM is counted as allocated."""
        return ServerInfo(uuid=server_uuid, hostname=f"trace-{server_uuid[:8]}",
                          boot_id="trace", ram_mib=MACHINE_RAM_MIB, cpus=MACHINE_CPUS,
                          ram_allocated_mib=0)

    def inventory(self, server_uuid: str) -> dict[str, PowerState]:
        """The VMs on the machine, with their power state."""
        return dict(self._vms.get(server_uuid, {}))

    def ensure_registered(
        self, server_uuid: str, vm_uuid: str, *, ram_mib: int, metadata: dict[str, object],
        fence: Fence | None = None,
    ) -> None:
        """Put the VM on the machine, stopped (moving it if it was elsewhere)."""
        self._admit(server_uuid, vm_uuid, fence)
        if self._where.get(vm_uuid) != server_uuid:
            self.forget(vm_uuid)
            self._where[vm_uuid] = server_uuid
            self._vms.setdefault(server_uuid, {})[vm_uuid] = "stopped"

    def observe(self, server_uuid: str, vm_uuid: str, *,
                fence: Fence | None = None) -> Incarnation | None:
        """The VM on the machine (the replay counts no incarnations: always 1), or None."""
        self._admit(server_uuid, vm_uuid, fence)
        power = self._vms.get(server_uuid, {}).get(vm_uuid)
        return None if power is None else Incarnation(power, 1)

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState, *,
                     effect: str | None = None,
                     fence: Fence | None = None) -> Incarnation | None:
        """Power the VM on or off (a replay is one process: no step is ever repeated, so
        ``effect`` is not needed). Raises ``ComputeError`` if it is not on the machine (a bug
        of the replay, never a trace fact)."""
        self._admit(server_uuid, vm_uuid, fence)
        if self._where.get(vm_uuid) != server_uuid:
            raise ComputeError(f"VM {vm_uuid} is not on server {server_uuid}")
        power: PowerState = "stopped" if state == "stopped" else "running"
        self._vms[server_uuid][vm_uuid] = power
        return Incarnation(power, 1)

    def unregister(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        """Take the VM off the machine (nothing if it is not there)."""
        self._admit(server_uuid, vm_uuid, fence)
        if self._where.get(vm_uuid) == server_uuid:
            self.forget(vm_uuid)

    def raise_fence(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        """The fence check alone (the replay quarantines, so a fence job may ask)."""
        self._admit(server_uuid, vm_uuid, fence)

    def reconfigure(self, server_uuid: str, vm_uuid: str, changes: dict[str, object], *,
                    fence: Fence | None = None) -> None:
        """Nothing to do but the fence check: the trace has no configuration changes, and its
        machines are never removed."""
        self._admit(server_uuid, vm_uuid, fence)

    def forget(self, vm_uuid: str) -> None:
        """The trace says the task left its machine."""
        server = self._where.pop(vm_uuid, None)
        if server is not None:
            self._vms[server].pop(vm_uuid, None)


class TracePlacement:
    """The worker's placement during a replay: the machine of the SCHEDULE being applied.

    ``machine`` is set just before the job runs and cleared after; a job that runs at any other
    moment (the start queued behind a KILL) finds no server, as the trace scheduled none.
    """

    def __init__(self) -> None:
        self.machine: str | None = None

    def __call__(self, vm: object) -> str | None:
        return self.machine
