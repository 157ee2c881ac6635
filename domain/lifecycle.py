"""The lifecycle commands of a VM: facts that compute nodes, jobs and operators establish.

Each checks the transition table (``domain/transitions.py``) before recording its event, so an
impossible transition is refused and never stored. A mixin of ``domain.vm.Vm``.
"""

from __future__ import annotations

from typing import Any

from domain import transitions
from domain.errors import IllegalTransitionError, ValidationError
from domain.states import VmState

Cause = dict[str, Any]


class Lifecycle:
    """Commands that record what happened to the VM."""

    # Provided by ``Vm``.
    state: Any
    UPDATABLE_FIELDS: frozenset[str]
    Provisioned: Any
    ProvisionFailed: Any
    Started: Any
    Stopped: Any
    Rebooted: Any
    Failed: Any
    Destroyed: Any
    Quarantined: Any
    Released: Any
    MetadataUpdated: Any
    trigger_event: Any

    def _check(self, event_name: str) -> None:
        transitions.after(VmState(self.state), event_name)

    def record_provisioned(self, server_uuid: str, *, cause: Cause) -> None:
        """The VM now runs on ``server_uuid``. Raises ``IllegalTransitionError``."""
        self._check("Provisioned")
        self.trigger_event(self.Provisioned, cause=cause, server_uuid=server_uuid)

    def record_provision_failed(self, error: str, *, cause: Cause) -> None:
        """Provisioning failed. Raises ``IllegalTransitionError``."""
        self._check("ProvisionFailed")
        self.trigger_event(self.ProvisionFailed, cause=cause, error=error)

    def record_started(self, *, cause: Cause, server_uuid: str | None = None) -> None:
        """The VM runs again. Raises ``IllegalTransitionError``."""
        self._check("Started")
        self.trigger_event(self.Started, cause=cause, server_uuid=server_uuid)

    def record_stopped(self, *, cause: Cause) -> None:
        """The VM stopped. Raises ``IllegalTransitionError``."""
        self._check("Stopped")
        self.trigger_event(self.Stopped, cause=cause)

    def record_rebooted(self, *, cause: Cause) -> None:
        """The VM was rebooted. Raises ``IllegalTransitionError``."""
        self._check("Rebooted")
        self.trigger_event(self.Rebooted, cause=cause)

    def record_failed(self, reason: str, message: str, *, cause: Cause) -> None:
        """The VM failed (``reason``: ``evicted``, ``crashed``, ...). Raises
        ``IllegalTransitionError``."""
        self._check("Failed")
        self.trigger_event(self.Failed, cause=cause, reason=reason, message=message)

    def record_destroyed(self, *, cause: Cause) -> None:
        """The VM is gone. Raises ``IllegalTransitionError``."""
        self._check("Destroyed")
        self.trigger_event(self.Destroyed, cause=cause)

    def record_quarantined(self, reason: str, *, cause: Cause) -> None:
        """Take the VM into the operator quarantine. Raises ``IllegalTransitionError``."""
        self._check("Quarantined")
        self.trigger_event(self.Quarantined, cause=cause, reason=reason)

    def record_released(self, *, cause: Cause) -> None:
        """Give a quarantined VM back. Raises ``IllegalTransitionError``."""
        if VmState(self.state) is not VmState.QUARANTINED:
            raise IllegalTransitionError(self.state, "Released")
        self.trigger_event(self.Released, cause=cause)

    def update_metadata(self, changes: dict[str, Any], *, cause: Cause) -> bool:
        """Apply ``changes`` to alias, metadata or tags; return False (and record nothing)
        when nothing would change. Raises ``IllegalTransitionError`` on a destroyed VM and
        ``ValidationError`` for a field that cannot be updated."""
        if VmState(self.state) is VmState.DESTROYED:
            raise IllegalTransitionError(self.state, "MetadataUpdated")
        unknown = sorted(set(changes) - self.UPDATABLE_FIELDS)
        if unknown:
            # A domain refusal, not a ValueError: the worker fails the job with it instead
            # of crashing its pass and retrying the job at every lease expiry.
            refusal = ValidationError(unknown[0], "Invalid", "cannot be updated")
            refusal.errors += [
                {"field": f, "code": "Invalid", "message": "cannot be updated"} for f in unknown[1:]
            ]
            raise refusal
        effective = {k: v for k, v in changes.items() if getattr(self, k) != v}
        if not effective:
            return False
        self.trigger_event(self.MetadataUpdated, cause=cause, changes=effective)
        return True
