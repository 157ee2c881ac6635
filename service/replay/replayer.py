"""How a trace replay maps each row of the Google 2011 ``task_events`` trace to the service's
commands (``Replayer``, one method per trace event), and what it counts (``Summary``).

Each row goes through the command handlers the HTTP API uses (``Commands.create_vm``,
``Commands.request_action`` with the newest API behaviour, ``Commands.record_failure``) and the
real job worker (``Worker.run_vm``), with a compute driver and a placement that take their
outcomes from the trace (``service.replay.trace``). The mapping of each trace event is on the
``Replayer`` method named after it, and in ``docs/replay.md`` with the reasons for it.

A row that does not fit the VM's state (EVICT of a VM that is not running, SCHEDULE of an
unknown task, ...) is refused and counted by reason, never raised. See ``docs/replay.md``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from domain.errors import DomainError
from domain.states import Action, VmState
from domain.stuck import StuckThresholds
from domain.vm import make_cause
from service.commands.application import VmSpec
from service.commands.quarantine import Quarantine, StuckCheck
from service.replay.commands import ReplayCommands
from service.replay.trace import (
    MACHINE_CPUS, MACHINE_RAM_MIB, MalformedRowError, TraceDriver, TraceEvent,
    TracePlacement, TraceRecord, cpu_cap, owner_uuid, parse_row, ram_mib, server_uuid, vm_uuid,
)
from service.commands.versioning import NEWEST
from service.jobs.worker import Worker, utcnow

ACTOR = "trace:google2011"
_MAX_JOBS_PER_ROW = 8  # a VM's queue never holds more than a start and a destroy


class RefusedRowError(Exception):
    """A trace row that does not fit the VM's state; its message is the counting key, so it
    names the event and the state, never a uuid."""


@dataclass
class Summary:
    """What a replay did. ``final_states`` counts the VMs it created by their state at the end,
    as folded by the command handlers (not read from a read model)."""

    trace: str
    rows_read: int = 0
    rows_applied: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    ignored: Counter[str] = field(default_factory=Counter)
    vms_created: int = 0
    final_states: Counter[str] = field(default_factory=Counter)
    wall_time_s: float = 0.0
    catch_up_s: float = 0.0  # from the replay's end to every read model at the head
    # events the follower applied to read models while the replay ran (not its last pass)
    applied_beside: int = 0
    behind_at_end: int = 0  # log positions the read models lacked at the replay's end, summed

    def as_dict(self) -> dict[str, Any]:
        """The summary as plain JSON-able data (``--json``)."""
        return {
            "trace": self.trace, "rows_read": self.rows_read, "rows_applied": self.rows_applied,
            "rows_refused": sum(self.refused.values()), "refused": dict(self.refused.most_common()),
            "rows_ignored": sum(self.ignored.values()), "ignored": dict(self.ignored),
            "vms_created": self.vms_created,
            "final_states": dict(sorted(self.final_states.items())),
            "wall_time_s": round(self.wall_time_s, 1), "catch_up_s": round(self.catch_up_s, 1),
            "applied_beside": self.applied_beside, "behind_at_end": self.behind_at_end,
        }


class Replayer:
    """Applies trace rows, in file order, to one database (it must be the only writer)."""

    def __init__(self, commands: ReplayCommands, summary: Summary):
        self.commands = commands
        self.summary = summary
        self.driver = TraceDriver()
        self.placement = TracePlacement()
        # No lease renewals: no other worker takes a replayed job over, and each ends in
        # milliseconds (a renewal thread a job cost a fifth of the replay's time; and a
        # renewal, due after a third of the lease, would add an event only on a stalled
        # disk, making the log depend on the machine).
        self.worker = Worker(commands, self.driver, find_work=list, placement=self.placement,
                             worker_id="replay", renew_leases=False,
                             unfinished="the replay was stopped, and a replay cannot be "
                             "resumed (no other worker runs its jobs)")
        self.tasks: dict[tuple[str, str], tuple[int, str]] = {}  # task -> (incarnation, vm)
        self.machines: set[str] = set()  # trace machines recorded as servers
        self.quarantine = Quarantine(commands, StuckCheck(StuckThresholds(), utcnow))

    def commit_all(self) -> None:
        """Wait until every command applied so far is committed (the replay's saves do not
        wait: ``ReplayCommands._save_later``), and stop its committer. Raises what a failed
        append raised."""
        try:
            self.commands.flush()
        finally:
            self.commands.committer.close()

    def apply(self, line: int, fields: list[str]) -> None:
        """Apply one CSV row, counting it as applied, refused or ignored."""
        self.summary.rows_read += 1
        try:
            record = parse_row(fields, line)
            event = TraceEvent(record.event)
        except (MalformedRowError, ValueError):
            self.summary.refused["malformed row"] += 1
            return
        if event in (TraceEvent.UPDATE_PENDING, TraceEvent.UPDATE_RUNNING):
            self.summary.ignored[f"{event.name}: ram and cpu are not updatable"] += 1
            return
        try:
            _HANDLERS[event](self, record)
        except RefusedRowError as refused:
            self.summary.refused[str(refused)] += 1
        else:
            self.summary.rows_applied += 1

    # -- one method per trace event --------------------------------------------------------

    def _cause(self, record: TraceRecord) -> dict[str, Any]:
        # The row and its event in the cause: an auditor tells a FINISH from a KILL by it.
        event = TraceEvent(record.event).name
        return make_cause(ACTOR, request_id=f"trace-row-{record.row}-{event}",
                          api_version=NEWEST.version)

    def _vm(self, record: TraceRecord, name: str) -> tuple[str, VmState, int]:
        """The task's current VM with its state and active job count; refuses unknown tasks."""
        known = self.tasks.get(record.task)
        if known is None:
            raise RefusedRowError(f"{name} of an unknown task")
        state, jobs = self.commands.seen[known[1]]
        return known[1], state, jobs

    def submit(self, record: TraceRecord) -> None:
        """A new VM (first SUBMIT, or after FINISH/KILL), or a start job after EVICT/FAIL."""
        known = self.tasks.get(record.task)
        if known is not None:
            vm, state, jobs = self._vm(record, "SUBMIT")
            if state in (VmState.FAILED, VmState.STOPPED) and not jobs:
                self._request(vm, Action.START, record, f"SUBMIT of a {state} VM")
                return
            if state is not VmState.DESTROYED:
                pending = " with a job queued" if jobs else ""
                raise RefusedRowError(f"SUBMIT of a {state} VM{pending}")
        incarnation = 0 if known is None else known[0] + 1
        uuid = vm_uuid(record.job_id, record.task_index, incarnation)
        spec = VmSpec(
            owner_uuid=owner_uuid(record.user), brand="joyent", ram=ram_mib(record.memory_request),
            cpu_cap=cpu_cap(record.cpu_request),
            alias=f"google2011-{record.job_id}-{record.task_index}-{incarnation}",
            tags={"trace": "google2011", "job_id": record.job_id,
                  "task_index": record.task_index, "incarnation": incarnation,
                  "priority": record.priority, "scheduling_class": record.scheduling_class},
        )
        self.commands.create_vm(spec, cause=self._cause(record), vm_uuid=uuid)
        self.tasks[record.task] = (incarnation, uuid)
        self.summary.vms_created += 1

    def _know_machine(self, record: TraceRecord) -> None:
        """Record a trace machine as a ``Server`` the first time a task is scheduled on it,
        with the scale's capacity (``service.replay.trace``)."""
        uuid = server_uuid(record.machine_id)
        if uuid not in self.machines:
            self.commands.register_server(
                uuid, hostname=f"trace-{record.machine_id}", boot_id="trace",
                ram_mib=MACHINE_RAM_MIB, cpus=MACHINE_CPUS, cause=self._cause(record))
            self.machines.add(uuid)

    def schedule(self, record: TraceRecord) -> None:
        """Run the queued provision or start on the row's machine, through the real worker."""
        vm, state, jobs = self._vm(record, "SCHEDULE")
        if not record.machine_id:
            raise RefusedRowError("SCHEDULE without a machine")
        if not jobs:
            raise RefusedRowError(f"SCHEDULE of a {state} VM with no job queued")
        self.placement.machine = server_uuid(record.machine_id)
        self._know_machine(record)
        try:
            self.worker.run_vm(vm)
        finally:
            self.placement.machine = None
        state, _ = self.commands.seen[vm]
        if state is not VmState.RUNNING:
            raise RefusedRowError(f"SCHEDULE left the VM {state}")

    def fail(self, record: TraceRecord) -> None:
        """EVICT or FAIL: the running VM failed (``evicted`` / ``crashed``) and left its
        machine; its desired state stays running."""
        name = TraceEvent(record.event).name
        vm, state, _ = self._vm(record, name)
        reason = "evicted" if record.event == TraceEvent.EVICT else "crashed"
        message = f"trace {name} at {record.timestamp} us on machine {record.machine_id}"
        try:
            self.commands.record_failure(vm, reason, message, cause=self._cause(record))
        except DomainError:
            raise RefusedRowError(f"{name} of a {state} VM") from None
        self.driver.forget(vm)  # the task left its machine

    def finish(self, record: TraceRecord) -> None:
        """The guest of a running VM shut down and the VM is deleted: a destroy job."""
        vm, state, _ = self._vm(record, "FINISH")
        if state is not VmState.RUNNING:
            raise RefusedRowError(f"FINISH of a {state} VM")
        self._destroy(vm, record, "FINISH")

    def kill(self, record: TraceRecord) -> None:
        """DeleteVm in any state but destroyed (design.md, lesson 3)."""
        vm, state, _ = self._vm(record, "KILL")
        self._destroy(vm, record, "KILL")

    def lost(self, record: TraceRecord) -> None:
        """Nobody knows where the VM is: into the operator quarantine (reason ``lost``)."""
        vm, state, _ = self._vm(record, "LOST")
        try:
            self.quarantine.quarantine(vm, "lost", cause=self._cause(record))
        except DomainError:
            raise RefusedRowError(f"LOST of a {state} VM") from None
        self.driver.forget(vm)

    # -- helpers ------------------------------------------------------------------------------

    def _request(self, vm: str, action: Action, record: TraceRecord, refusal: str) -> None:
        try:
            self.commands.request_action(vm, action, behaviour=NEWEST, cause=self._cause(record))
        except DomainError:
            raise RefusedRowError(refusal) from None

    def _destroy(self, vm: str, record: TraceRecord, name: str) -> None:
        """DeleteVm, then run the VM's queue: a start queued after an EVICT runs first and
        fails (the trace scheduled it nowhere), then the destroy."""
        state, _ = self.commands.seen[vm]
        self._request(vm, Action.DESTROY, record, f"{name} of a {state} VM")
        for _ in range(_MAX_JOBS_PER_ROW):
            if not self.worker.run_vm(vm):
                break
        state, _ = self.commands.seen[vm]
        if state is not VmState.DESTROYED:
            raise RefusedRowError(f"{name} left the VM {state}")

    def final_states(self) -> Counter[str]:
        """The VMs this replay created (every VM it saved), counted by their state now."""
        return Counter(str(state) for state, _ in self.commands.seen.values())


_HANDLERS = {
    TraceEvent.SUBMIT: Replayer.submit, TraceEvent.SCHEDULE: Replayer.schedule,
    TraceEvent.EVICT: Replayer.fail, TraceEvent.FAIL: Replayer.fail,
    TraceEvent.FINISH: Replayer.finish, TraceEvent.KILL: Replayer.kill,
    TraceEvent.LOST: Replayer.lost,
}
