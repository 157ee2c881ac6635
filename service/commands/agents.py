"""What compute agents report, and what vmledger does about it (design.md, "Compute nodes"
and "Persistence policy"; api.md ``PUT /vms/{uuid}`` and ``PUT /vms?server_uuid=``).

A report carries the agent's ``generation``; one not newer than the last applied changes
nothing (``StaleGenerationError``, Omicron's generation numbers), and a report that changes
nothing appends nothing. A whole report applies in one transaction: the VMs it changes and the
server's record of its generation. A destroyed VM is never brought back by a report, and a VM
whose job is running is left to its job (the job holds the ticket; the next report, after it,
reconciles).

A report may carry the node's sequence number it is as of (``seq``, service/jobs/compute/
driver.py): for a VM whose log recorded a job step's answer from that node as of that number
or a newer one (``Vm.NodeObserved``), the report was taken before the step and changes
nothing for it (``older_than_recorded``: a log line and ``vmledger_agent_report_entries_
older_than_log_total``), whatever it says or leaves out: a VM it misses is not "forgotten",
a stopped one not shut down by its guest. A report without ``seq`` is ordered against other
reports only (its generation), as before.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from domain import policy
from domain.policy import Happening, Response
from domain.errors import ServerRemovedError, VmNotFoundError
from domain.server import Server
from domain.states import Action, DesiredState, Execution, JobName, VmState
from domain.vm import Cause, Vm
from service.commands.application import Commands
from service.commands.change import IfMatch, check_version
from service.commands.idempotency import IdempotencyKey, remembered
from service.commands.versioning import NEWEST
from service.metrics import REPORT_ENTRIES_OLDER_THAN_LOG

log = logging.getLogger(f"vmledger.{__name__}")

OBSERVED_STATES = ("running", "stopped", "failed")

# Given the reported VM as the report's change loaded it (None: the log never had it) before
# anything is decided; refuses the report by raising (the API's 404 for a VM an agent may not
# name: service/api/routes_agents.py).
Admit = Callable[[Vm | None], None]

# How a reported power state differs from what the log says, for a VM that is present.
_DIFFERENCES: dict[tuple[str, str], Happening | str] = {
    ("running", "stopped"): Happening.GUEST_SHUTDOWN,
    ("running", "failed"): Happening.GUEST_CRASH,
    ("stopped", "running"): "started_out_of_band",
}


class Reported(NamedTuple):
    """What a report (or a recorded host reboot) did: what happened to each VM it changed
    (``{vm_uuid: happening}``), and the log position of its save (None: it appended
    nothing)."""

    changed: dict[str, str]
    position: int | None


class Agents:
    """Applies agent reports (and the operator's record of a host reboot) to VMs and servers."""

    def __init__(self, commands: Commands):
        self.commands = commands

    def report_inventory(self, server_uuid: str, *, boot_id: str, generation: int,
                         vms: Mapping[str, str], cause: Cause, seq: int | None = None,
                         if_match: IfMatch = None) -> Reported:
        """The agent's whole inventory ``{vm_uuid: observed state}``, as of the node's
        sequence number ``seq`` (None: unnumbered). ``if_match`` is the server's version
        (one version cannot name each VM's; the server's stream records the report). Raises
        ``StaleGenerationError``, ``ServerNotFoundError``, ``VersionMismatchError``."""

        def affected(server: Server, rebooted: bool) -> dict[str, Happening | str]:
            found: dict[str, Happening | str] = {}
            for vm_uuid in set(server.claims) | set(vms):
                observed = vms.get(vm_uuid)
                if observed is None:
                    found[vm_uuid] = Happening.HOST_REBOOT if rebooted else Happening.AGENT_FORGOT
                else:
                    found[vm_uuid] = observed
            return found

        return self._apply(server_uuid, boot_id, generation, affected, cause, seq=seq,
                           if_match=if_match)

    def report_vm(self, vm_uuid: str, *, server_uuid: str, state: str, boot_id: str,
                  generation: int, cause: Cause, admit: Admit | None = None,
                  seq: int | None = None, if_match: IfMatch = None
                  ) -> tuple[Vm | None, int | None]:
        """One VM's observed state on ``server_uuid``, as of the node's sequence number
        ``seq`` (None: unnumbered). A new ``boot_id`` is a host reboot for the server's other
        VMs too. ``admit`` sees the VM first (``Admit``), then ``if_match`` is matched
        against its version (after ``admit``, whose refusal must not be told apart from a
        VM the log never had by a 412). Returns the VM as the report left it (the aggregate
        saved, or loaded when the report changed nothing; None: the log has no such VM),
        which the route answers without a fold of its own, and the log position of the save
        (None: nothing appended). Raises ``StaleGenerationError``, ``ServerNotFoundError``,
        what ``admit`` raises, ``VmNotFoundError`` (``if_match`` of a VM the log never had)
        and ``VersionMismatchError``."""
        seen: dict[str, Vm | None] = {}

        def admitted(vm: Vm | None) -> None:
            if admit is not None:
                admit(vm)
            if if_match is not None:
                if vm is None:
                    raise VmNotFoundError(vm_uuid)
                check_version(vm, if_match, Vm)

        def affected(server: Server, rebooted: bool) -> dict[str, Happening | str]:
            found: dict[str, Happening | str] = {vm_uuid: state}
            if rebooted:
                found.update({other: Happening.HOST_REBOOT for other in server.claims
                              if other != vm_uuid})
            return found

        reported = self._apply(server_uuid, boot_id, generation, affected, cause,
                               admit=(vm_uuid, admitted), seen=seen, seq=seq)
        return seen.get(vm_uuid), reported.position

    def host_rebooted(self, server_uuid: str, boot_id: str, *, cause: Cause,
                      if_match: IfMatch = None,
                      idempotency: IdempotencyKey | None = None) -> Reported:
        """The operator records that the host rebooted with ``boot_id`` (its VMs are gone).
        A repeat of ``idempotency`` records nothing (``{}``, no position); raises
        ``ServerNotFoundError``, ``VersionMismatchError`` (``if_match`` is not the server's
        version) and ``IdempotencyKeyReusedError``."""
        return self._apply(server_uuid, boot_id, None,
                           lambda server, rebooted: {v: Happening.HOST_REBOOT for v in server.claims}
                           if rebooted else {}, cause, if_match=if_match, idempotency=idempotency,
                           check_server=_not_removed)

    # -- one transaction per report -----------------------------------------------------------

    def _apply(self, server_uuid: str, boot_id: str, generation: int | None,
               affected: Callable[[Server, bool], dict[str, Happening | str]],
               cause: Cause, admit: tuple[str, Admit] | None = None,
               if_match: IfMatch = None,
               idempotency: IdempotencyKey | None = None,
               seen: dict[str, Vm | None] | None = None,
               seq: int | None = None,
               check_server: Callable[[Server], None] | None = None) -> Reported:
        """Apply a report to the server and the VMs ``affected`` names, in one save;
        ``seen`` (if given) is left holding the VMs the saved attempt loaded, as it left
        them. ``check_server`` may refuse the server as loaded, before anything is
        recorded."""
        older: list[str] = []  # this attempt's VMs the report is older than the log of

        def decide(server: Server) -> tuple[dict[str, str], list[Vm]]:
            # this attempt's, each VM loaded once (a retried attempt starts ``seen`` anew)
            loaded: dict[str, Vm | None] = {} if seen is None else seen
            loaded.clear()

            def vm_of(vm_uuid: str) -> Vm | None:
                if vm_uuid not in loaded:
                    loaded[vm_uuid] = self._vm(vm_uuid)
                return loaded[vm_uuid]

            if admit is not None:
                admitted, check = admit
                check(vm_of(admitted))
            if check_server is not None:
                check_server(server)
            if generation is not None:
                server.check_generation(generation)
            rebooted = server.record_reboot(boot_id, cause=cause)
            older.clear()
            changed: list[Vm] = []
            outcome: dict[str, str] = {}
            for vm_uuid, happening in affected(server, rebooted).items():
                vm = vm_of(vm_uuid)
                if vm is None or vm.server_uuid != server_uuid:
                    continue  # unknown to the log, or placed elsewhere since
                if vm.is_older_than_recorded(server_uuid, seq):
                    older.append(vm_uuid)  # taken before a job's step there: changes nothing
                    continue
                what = self._react(vm, happening, cause, server)
                if vm.pending_events:  # CopyFound alone is a change with nothing to answer
                    changed.append(vm)
                    if what:
                        outcome[vm_uuid] = what
            if generation is not None and (changed or server.pending_events):
                server.record_report(generation, cause=cause)
            return outcome, changed

        # The VMs changed are saved with the server, in one transaction.
        changed = self.commands.change(Server, server_uuid, decide,
                                       also=lambda decision: decision[1], if_match=if_match,
                                       idempotency_key=idempotency, outcome=remembered(202))
        for vm_uuid in older:
            older_than_recorded(vm_uuid, server_uuid, f"its seq {seq}")
        if changed.replayed is not None:
            return Reported({}, None)
        return Reported(changed.decision[0], changed.position)

    def _vm(self, vm_uuid: str) -> Vm | None:
        try:
            return self.commands.load(vm_uuid)
        except VmNotFoundError:  # a report may name VMs this log never had
            return None

    def _react(self, vm: Vm, happening: Happening | str, cause: Cause,
               server: Server | None = None) -> str | None:
        """Record what the report reveals about ``vm`` on ``server``; the name of what
        happened, or None. A report without ``server`` (vm-agent's, of one VM) tells an
        observed state, never a host reboot or a VM missing (a ``Happening``)."""
        state = str(vm.state)
        if state in (VmState.DESTROYED, VmState.PROVISIONING):
            return None  # never revived; or its provision decides
        if server is not None and not isinstance(happening, Happening):
            # Listed on the server a reboot took its copy from (a copy started there by hand,
            # while quarantined say): that reboot no longer explains a later absence, which
            # is then an agent forgetting a copy that may run (CopyFound).
            vm.record_copy_found(str(server.id), server.boot_id, cause=cause)
        if state == VmState.QUARANTINED:
            # An operator's: no report changes its state. But a reboot that took its copy is
            # remembered, so that once released a report without it reads as that reboot.
            if happening is Happening.HOST_REBOOT and server is not None and \
                    vm.record_copy_lost(str(server.id), server.boot_id, cause=cause):
                return happening.value
            return None
        head = vm.head_job
        if head is not None and head["execution"] == Execution.RUNNING:
            return None  # the job holding the ticket is authoritative until it ends
        if not isinstance(happening, Happening):
            happening_or_start = _DIFFERENCES.get((state, happening))
            if happening_or_start is None:
                return None  # the report agrees with the log
            if happening_or_start == "started_out_of_band":
                vm.record_started(cause=cause)
                return "started"
            happening = Happening(happening_or_start)
        if happening is Happening.AGENT_FORGOT and server is not None and \
                vm.copy_lost_on(str(server.id), server.boot_id):
            # The host rebooted since the VM last booted there (CopyLost, recorded while it
            # was stopped or quarantined): that reboot took it; the agent forgot nothing. Only
            # a VM the log says runs has anything left to react to.
            if state != VmState.RUNNING:
                return None
            happening = Happening.HOST_REBOOT
        if happening is Happening.AGENT_FORGOT:
            if state in (VmState.RUNNING, VmState.STOPPED):
                vm.record_quarantined(
                    f"the agent on server {vm.server_uuid} no longer knows the VM (same boot "
                    "id): it may still run there, so it is not restarted", cause=cause)
                return happening.value
            return None
        if happening is Happening.HOST_REBOOT and state == VmState.STOPPED and \
                server is not None:
            vm.record_copy_lost(str(server.id), server.boot_id, cause=cause)
        record_happening(vm, happening, cause)
        return happening.value


def older_than_recorded(vm_uuid: str, server_uuid: str | None, by: str) -> None:
    """Say that a report of ``server_uuid`` changed nothing for ``vm_uuid`` because it is
    older than what the log records of the VM (ordered ``by`` its seq): counted, and logged
    at INFO (it is expected of a report racing a job, not a fault)."""
    REPORT_ENTRIES_OLDER_THAN_LOG.inc()
    log.info("a report of server %s changed nothing for VM %s: %s is not newer than the "
             "job step the log recorded last there", server_uuid, vm_uuid, by)


def record_happening(vm: Vm, happening: Happening, cause: Cause) -> None:
    """Record what happened to ``vm`` on its host (a guest shutdown stops it; a crash or a
    host reboot fails a running VM) and queue what its persistence policy answers: a destroy,
    or a start of a failed VM that should run. Also what a job's takeover records when the
    host reports a run the job began and its guest ended since (docs/jobs.md)."""
    response = policy.response(vm.persistence, happening)
    if happening is Happening.GUEST_SHUTDOWN:
        vm.record_stopped(cause=cause)
    elif str(vm.state) == VmState.RUNNING:
        reason = "crashed" if happening is Happening.GUEST_CRASH else happening.value
        vm.record_failed(reason, f"reported by the agent of server {vm.server_uuid}",
                         cause=cause)
    if response is Response.DESTROY:
        _queue(vm, Action.DESTROY, JobName.DESTROY, happening, cause)
    elif response is Response.RESTART and vm.desired_state == DesiredState.RUNNING \
            and str(vm.state) == VmState.FAILED:
        _queue(vm, Action.START, JobName.START, happening, cause)


def _queue(vm: Vm, action: Action, name: JobName, happening: Happening, cause: Cause) -> None:
    params: dict[str, Any] = {"args": {}, "if_already": "succeed",
                              "api_version": NEWEST.version, "because": happening.value}
    vm.queue_job(action=action, job_uuid=str(uuidlib.uuid4()), name=name.value,
                 params=params, cause={**cause, "job_uuid": None})


def _not_removed(server: Server) -> None:
    """Refuse an operator's reboot of a removed server (``ServerRemovedError``): it recorded
    a new boot id, and its VMs' host reboots, for a host no longer in the fleet (a tester)."""
    if server.status == "removed":
        raise ServerRemovedError(str(server.id), "reboot")
