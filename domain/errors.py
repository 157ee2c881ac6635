"""The domain's vocabulary of refusals. Each error carries the facts a client needs.

HTTP statuses are not chosen here; ``service.api.errors`` maps every error to one.
"""

from __future__ import annotations

from uuid import UUID

from domain.json_input import cut


class DomainError(Exception):
    """Base of every refusal the domain makes."""


class VmNotFoundError(DomainError):
    """No VM with this uuid (or not visible to the caller). An argument that is not a uuid at
    all is said to be one (VMAPI's ``Invalid UUID``): "VM notauuid not found" read as if a VM
    could have that uuid (auditor tester). The answer stays a 404, as GetVm's is."""

    def __init__(self, vm_uuid: UUID | str, which: str = ""):
        """``which`` narrows what was not found (" at version 9"), after the uuid."""
        malformed = "" if _is_uuid(vm_uuid) else " (Invalid UUID: not a uuid)"
        super().__init__(f"VM {cut(vm_uuid)}{which} not found{malformed}")
        self.vm_uuid = str(vm_uuid)
        # what the HTTP answer adds to VMAPI's "VM not found" (service/api/errors.py)
        self.qualifier = f"{which}{malformed}"


def _is_uuid(value: UUID | str) -> bool:
    if isinstance(value, UUID):
        return True
    try:
        UUID(value)
    except ValueError:
        return False
    return True


class JobNotFoundError(DomainError):
    """No job with this uuid (or not visible to the caller)."""

    def __init__(self, job_uuid: UUID | str):
        super().__init__(f"Job {cut(job_uuid)} not found")
        self.job_uuid = str(job_uuid)


class InvalidTransitionError(DomainError):
    """The action is impossible in the VM's state (start on a destroyed VM)."""

    def __init__(self, state: str, action: str, allowed_actions: list[str], *,
                 on_no_server: bool = False):
        where = " with no server_uuid" if on_no_server else ""
        super().__init__(f"Cannot {action} a VM in state '{state}'{where}")
        self.state = str(state)
        self.action = str(action)
        self.allowed_actions = allowed_actions
        self.on_no_server = on_no_server


class UnallocatedVmError(DomainError):
    """API version 1 refuses actions on a VM with no server yet (``UnallocatedVM``). The
    texts of a provisioning VM's action and of DeleteVm are VMAPI's (``lib/endpoints/vms.js``:
    its action dispatch, and deleteVm's ``ConflictError``); VMAPI has no refusal of an
    action on a VM that is on no server and not provisioning, so that text is ours."""

    def __init__(self, state: str, action: str, allowed_actions: list[str] | None = None):
        if action == "destroy":
            message = "Cannot delete a VM with no server_uuid"
        elif state == "provisioning":
            message = f"Cannot call {action} for a VM that has not been provisioned yet"
        else:
            message = f"Cannot {action} a VM with no server_uuid (state '{state}')"
        super().__init__(message)
        self.state = str(state)
        self.action = str(action)
        self.allowed_actions = allowed_actions or []  # the API version's (its raiser's)


class VmAlreadyDestroyedError(DomainError):
    """API version 2 refuses DELETE of a destroyed VM."""

    def __init__(self, vm_uuid: UUID | str):
        super().__init__(f"VM {vm_uuid} is already destroyed")
        self.vm_uuid = str(vm_uuid)
        self.state = "destroyed"
        self.allowed_actions: list[str] = []  # the API version's (Behaviour.admit sets it)


class VmBeingDestroyedError(DomainError):
    """API version 2 refuses an action that could only fail behind the VM's destroy job,
    queued or running (``rules.fails_behind_destroy``): ``destroy_job_uuid`` names that job,
    ``execution`` says where it is (``queued``, ``running``)."""

    def __init__(self, state: str, action: str, destroy_job_uuid: str, execution: str,
                 allowed_actions: list[str] | None = None):
        super().__init__(f"Cannot {action} a VM being destroyed: its destroy job "
                         f"{destroy_job_uuid} is {execution}")
        self.state = str(state)
        self.action = str(action)
        self.destroy_job_uuid = str(destroy_job_uuid)
        self.execution = str(execution)
        self.allowed_actions = allowed_actions or []  # the API version's (its raiser's)


class VersionMismatchError(DomainError):
    """``If-Match`` named another version than the aggregate's current one (``noun``: what
    it is, for the message)."""

    def __init__(self, expected: int, current: int, noun: str = "VM"):
        super().__init__(f"{noun} is at version {current}, not {expected}")
        self.expected = expected
        self.current = current


class UpdatePendingError(VersionMismatchError):
    """An update sent with the VM's current version in ``If-Match`` while an update job of
    the VM is queued or running (``Lifecycle.require_updates_applied``): that version's
    alias, metadata and tags do not show the job's changes yet (it records them as it
    succeeds), and the update, which replaces each object it names whole, would undo them
    unseen, a lost update. ``pending_job_uuid`` names the first such job, ``execution``
    says where it is (``queued``, ``running``); ``current`` is the version, which matched."""

    def __init__(self, version: int, pending_job_uuid: str, execution: str):
        DomainError.__init__(
            self, f"the VM's update job {pending_job_uuid} is {execution}: the alias, "
                  f"metadata and tags of version {version} do not show its changes yet")
        self.expected = version
        self.current = version
        self.pending_job_uuid = str(pending_job_uuid)
        self.execution = str(execution)


class ValidationError(DomainError):
    """A request field is missing or invalid (VMAPI ``ValidationFailed``); ``summary`` is the
    error's message, ``errors`` one ``{field, code, message}`` a field."""

    summary = "Invalid Parameters"  # VMAPI's words (sdc-vmapi lib/endpoints/vms.js)

    def __init__(self, field: str, code: str, message: str):
        super().__init__(f"{field}: {message}")
        self.errors = [{"field": field, "code": code, "message": message}]


class UuidTakenError(ValidationError):
    """A create named a uuid some resource already has: one of another kind, another owner's
    VM, or a network or volume given again (VMAPI ``ValidationFailed``, ``Duplicate``). It
    says the uuid is taken, not what has it or whose: an owner learns nothing else of
    another owner's VM (api.md, "Errors")."""

    def __init__(self, uuid: UUID | str):
        # VMAPI's words (errors.duplicateParamErrorsElem's default)
        super().__init__("uuid", "Duplicate", "Already exists")
        self.summary = f"uuid {uuid} is already taken"


class DuplicateVmError(UuidTakenError):
    """A create named the uuid of an existing VM of the same owner and is no repeat of its
    create: another request, or one made after that VM was destroyed. VMAPI's
    ``validateUniqueUuid`` refuses any uuid a VM has; vmledger answers a repeat of the first
    create its first result instead (a retry of a lost answer), and refuses the rest with the
    very refusal of a taken uuid (``UuidTakenError``), so no refusal tells more than another.
    ``reason`` says which it was (``"different parameters"``, ``"destroyed"``)."""

    def __init__(self, vm_uuid: UUID | str, reason: str = "different parameters"):
        super().__init__(vm_uuid)
        self.vm_uuid = str(vm_uuid)
        self.reason = reason


class NothingToUpdateError(ValidationError):
    """An update that names no field to change (VMAPI UpdateVm: "No VM parameters
    provided", with no field errors)."""

    summary = "No VM parameters provided"

    def __init__(self, vm_uuid: UUID | str):
        DomainError.__init__(self, f"VM {vm_uuid}: no VM parameters provided")
        self.errors: list[dict[str, str]] = []


class IllegalTransitionError(DomainError):
    """An event that the transition table does not allow in this state (an invariant).
    ``has_server``: whether the VM is on a server (``Vm.has_server``), which every raiser
    knows and passes, so that the actions a refusal names are the ones this VM allows
    (``rules.allowed_actions``)."""

    def __init__(self, state: str, event_name: str, *, has_server: bool):
        super().__init__(f"{event_name} cannot happen to a VM in state '{state}'")
        self.state = str(state)
        self.event_name = event_name
        self.has_server = has_server


class JobNotRunnableError(DomainError):
    """The job cannot be claimed or advanced: it is not the head of the queue, not queued,
    already terminal, or held by another worker's lease."""

    def __init__(self, job_uuid: UUID | str, reason: str):
        super().__init__(f"Job {job_uuid}: {reason}")
        self.job_uuid = str(job_uuid)
        self.reason = reason


class StaleGenerationError(DomainError):
    """An agent report not newer than the last one applied (Omicron's generation numbers)."""

    def __init__(self, server_uuid: str, generation: int, last_applied: int):
        super().__init__(
            f"report generation {generation} of server {server_uuid} is not newer than "
            f"{last_applied}, the last one applied"
        )
        self.server_uuid = server_uuid
        self.generation = generation
        self.last_applied = last_applied


class ServerNotFoundError(DomainError):
    """No server with this uuid."""

    def __init__(self, server_uuid: UUID | str):
        super().__init__(f"Server {cut(server_uuid)} not found")
        self.server_uuid = str(server_uuid)


class ServerRemovedError(DomainError):
    """An operator's action only a server in the fleet can have (a reboot) asked of a removed
    one: its ``state`` is ``removed`` and its ``allowed_actions`` only ``remove`` (a repeat,
    which records nothing)."""

    def __init__(self, server_uuid: UUID | str, action: str):
        super().__init__(f"Cannot {action} server {server_uuid}: it is removed")
        self.server_uuid = str(server_uuid)
        self.state = "removed"
        self.action = action
        self.allowed_actions = ["remove"]


class VolumeNotFoundError(DomainError):
    """No volume with this uuid."""

    def __init__(self, volume_uuid: UUID | str):
        super().__init__(f"Volume {cut(volume_uuid)} not found")
        self.volume_uuid = str(volume_uuid)


class DamagedStreamError(LookupError):
    """A stream that cannot be folded past one of its stored events until the log is
    repaired (the event was deleted, edited or written behind the service's back; ``vmledger
    audit verify`` names every such event): ``stream`` and ``version`` name it. Not a
    refusal, and no other stream's business: whatever reads many streams (the job worker,
    the change streams) passes over it (docs/operations.md, "A damaged stream")."""

    stream: str
    version: int


class StreamGapError(DamagedStreamError):
    """A stream's stored events do not follow each other: its event of ``version`` comes
    right after ``previous``, or first when ``previous`` is 0 (one between, or its first, was
    lost or deleted behind the service's back;
    ``vmledger audit verify`` names it). Not a refusal: the stream cannot be folded past the
    gap until the log is repaired. Raised in place of the library's
    ``OriginatorVersionError``, which names no stream."""

    def __init__(self, stream: UUID | str, version: int, previous: int):
        # read in log order, a version stored out of order looks the same as one deleted (an
        # auditor took the word "gap" for a lost event): the message names both
        follows = (f"follows version {previous} (one between is missing, or stored out of "
                   "order)" if previous else "is its first")
        super().__init__(f"stream {stream} has a gap: its event of version {version} {follows}")
        self.stream = str(stream)
        self.version = version
        self.previous = previous


class UnfoldableEventError(DamagedStreamError):
    """A fold cannot apply a stored event: its aggregate refuses it (a ``DomainError``), it is
    no event of that aggregate (its topic edited to another class's), or applying it raises
    anything else. The log holds an event that should never have been appended (written
    behind the service's back; ``vmledger audit verify`` reports it as ``fold``). Names the
    stream, the version and, for a read model's fold, the read model (``read_model``), which
    the error raised (``error``) does not; raised by ``domain.folding``, which every fold of
    stored events goes through."""

    def __init__(self, stream: UUID | str, version: int, error: Exception,
                 read_model: str | None = None):
        if read_model is None:
            super().__init__(f"stream {stream} has an event its fold cannot apply at version "
                             f"{version} ({type(error).__name__}: {str(error)[:200]})")
        else:
            super().__init__(f"{read_model} cannot fold stream {stream} version {version}: "
                             f"{error}")
        self.stream = str(stream)
        self.version = version
        self.read_model = read_model


class UnreadableEventError(DamagedStreamError):
    """A stored event that cannot be read back: its topic names no event class, or its state
    does not decode (edited behind the service's back; ``vmledger audit verify`` names it).
    Like a gap (``StreamGapError``), not a refusal: the stream cannot be folded past it until
    the log is repaired."""

    def __init__(self, stream: UUID | str, version: int, reason: str):
        super().__init__(f"stream {stream} has an unreadable event at version {version} "
                         f"({reason})")
        self.stream = str(stream)
        self.version = version


class MovedEventError(DamagedStreamError):
    """A stored event whose log position is outside the log (0 or below: positions start at
    1), moved there behind the service's back. What reads the log by position (the read
    models, the change streams, ``vmledger rebuild``) never reads it, so a history that
    listed it at that position would tell another log than theirs; ``vmledger audit verify``
    names it ``out of order``. Like a gap, not a refusal: the log needs repair."""

    def __init__(self, stream: UUID | str, version: int, position: int):
        super().__init__(f"stream {stream} has its event of version {version} at log position "
                         f"{position}, outside the log (its positions start at 1): it was "
                         "moved behind the service's back")
        self.stream = str(stream)
        self.version = version
        self.position = position
