"""What an owner may see of a VM's past: one rule for every read that shows it event by event
or version by version (``GET /changes`` and Triton's changefeed, ``GET /vms/{uuid}/history``,
GetVm ``?version=`` and ``?at=``; api.md "Contract: roles").

An owner sees a VM's event when the VM is that owner's *after* the event. So the events from
its ``Quarantined`` (which moves it to the operator quarantine, ``QUARANTINE_OWNER_UUID``) up
to, not including, its ``Released`` (which gives it back) are the operators' alone: their
reason and actor are free text an operator wrote for operators.
"""

from __future__ import annotations


def owner_sees(owner_after_event: str | None, owner_uuid: str) -> bool:
    """Whether owner ``owner_uuid`` may see a VM event (or the VM at a version) after which
    the VM's owner is ``owner_after_event``."""
    return owner_after_event == owner_uuid
