"""The operator quarantine (design.md, lesson 3): take a VM from its owner for
troubleshooting, with its full history, and give it back; and the worker's periodic check that
quarantines VMs stuck past a threshold."""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Callable
from datetime import datetime

from domain.rules import Verdict
from domain.states import Action, VmState
from domain.stuck import StuckThresholds, stuck_reason
from domain.vm import Cause, Vm, make_cause
from service.commands.application import Accepted, Commands
from service.commands.change import IfMatch
from service.commands.idempotency import IdempotencyKey
from service.commands.versioning import OLDEST, Behaviour
from service.logs import log_context

log = logging.getLogger(f"vmledger.{__name__}")


class StuckCheck:
    """Why a VM is stuck now, or None (``domain.stuck``): the thresholds and the clock read
    by both the DeleteVm of a stuck VM (``Commands(is_stuck=...)``) and the periodic check
    (``Quarantine.quarantine_if_stuck``), so the two never disagree."""

    def __init__(self, thresholds: StuckThresholds, clock: Callable[[], datetime]):
        self.thresholds = thresholds
        self.clock = clock

    def __call__(self, vm: Vm) -> str | None:
        return stuck_reason(vm, self.clock(), self.thresholds)


class Quarantine:
    """Quarantine and release commands, and the stuck-VM check."""

    def __init__(self, commands: Commands, stuck: StuckCheck):
        self.commands = commands
        self.stuck = stuck

    def quarantine(self, vm_uuid: str, reason: str, *, cause: Cause,
                   if_match: IfMatch = None, idempotency: IdempotencyKey | None = None,
                   behaviour: Behaviour = OLDEST, owner_uuid: str | None = None) -> Accepted:
        """Take the VM into the operator quarantine now (no job: a stuck job must not stand
        in the way); its queued jobs are canceled, and so is a job running on it
        (``Vm.record_quarantined``). Quarantining a quarantined VM changes
        nothing. Raises ``InvalidTransitionError`` (a destroyed VM), ``VmNotFoundError``,
        ``VersionMismatchError``, ``IdempotencyKeyReusedError`` (a repeat of
        ``idempotency`` answers the first's outcome). Given ``owner_uuid`` (the request's
        scope), another owner's VM is ``VmNotFoundError``."""

        def decide(vm: Vm) -> None:
            if behaviour.require(VmState(vm.state), Action.QUARANTINE,
                                 has_server=vm.has_server,
                                 placed=vm.shown_server_uuid is not None,
                                 destroy_job=vm.active_destroy) is Verdict.ALREADY:
                return
            vm.record_quarantined(reason, cause=cause)

        return self._changed(vm_uuid, decide, if_match, idempotency, owner_uuid)

    def release(self, vm_uuid: str, *, cause: Cause, if_match: IfMatch = None,
                idempotency: IdempotencyKey | None = None,
                behaviour: Behaviour = OLDEST, owner_uuid: str | None = None) -> Accepted:
        """Give a quarantined VM back to its owner in the state it had (a VM given back in
        ``provisioning`` gets its provision queued again). Raises ``InvalidTransitionError``
        when it is not quarantined; ``VmNotFoundError`` as ``quarantine``."""

        def decide(vm: Vm) -> None:
            # only a quarantined VM; a refusal names what this VM allows
            behaviour.require(VmState(vm.state), Action.RELEASE, has_server=vm.has_server,
                              placed=vm.shown_server_uuid is not None,
                              destroy_job=vm.active_destroy)
            vm.record_released(cause=cause)
            # Given back still provisioning, its provision canceled by the quarantine: queue
            # a new one, or it would stay provisioning with no job for ever.
            vm.queue_provision(job_uuid=str(uuidlib.uuid4()),
                               params={"args": {}, "if_already": "succeed"}, cause=cause)

        return self._changed(vm_uuid, decide, if_match, idempotency, owner_uuid)

    def _changed(self, vm_uuid: str, decide: Callable[[Vm], None], if_match: IfMatch,
                 idempotency: IdempotencyKey | None, owner_uuid: str | None) -> Accepted:
        """Change the VM with ``decide`` (no job); a repeat of ``idempotency`` is answered
        with the first's outcome."""
        _, vm, position, replayed = self.commands.change(
            Vm, vm_uuid, decide, if_match=if_match, idempotency_key=idempotency,
            owner_uuid=owner_uuid,
            outcome=lambda _decision, vm: Accepted(str(vm.id), None, vm.version, None))
        if replayed is not None:
            return replayed
        return Accepted(str(vm.id), None, vm.version, position)

    def quarantine_if_stuck(self, vm_uuid: str) -> bool:
        """The periodic check for one VM: quarantine it if it is stuck (re-checked on the
        aggregate, not the read model). True if it was quarantined, then logged as a
        WARNING naming the VM (its scope's ``vm_uuid``), the state it was stuck in
        (``vm_state``) and the reason: an operator tester found VMs quarantined, their jobs
        canceled, without a line in the log (docs/operations.md, "Logs")."""
        found: dict[str, str] = {}

        def decide(vm: Vm) -> bool:
            reason = self.stuck(vm)
            if reason is None or VmState(vm.state) in (VmState.QUARANTINED, VmState.DESTROYED):
                return False
            found.update(state=str(vm.state), reason=reason)  # as this (last) try saw it
            vm.record_quarantined(reason, cause=make_cause("stuck-check"))
            return True

        quarantined, _, _, _ = self.commands.change(Vm, vm_uuid, decide)
        if quarantined:
            with log_context(vm_uuid=vm_uuid):
                log.warning("the stuck check quarantined the VM (it was %s): %s",
                            found["state"], found["reason"],
                            extra={"vm_state": found["state"], "reason": found["reason"]})
        return quarantined

