"""The vocabulary of VM lifecycles: states, desired states, actions, jobs."""

from __future__ import annotations

from enum import StrEnum


class VmState(StrEnum):
    """What is true of a VM now (api.md, VM object ``state``)."""

    PROVISIONING = "provisioning"
    RUNNING = "running"
    STOPPED = "stopped"
    FAILED = "failed"
    DESTROYED = "destroyed"
    QUARANTINED = "quarantined"


TRANSIENT_STATES = frozenset({VmState.PROVISIONING})


class DesiredState(StrEnum):
    """What was last asked of a VM, so a failed VM that should run is told apart."""

    RUNNING = "running"
    STOPPED = "stopped"
    DESTROYED = "destroyed"


class Action(StrEnum):
    """What a client may ask of an existing VM (``?action=`` and DELETE)."""

    START = "start"
    STOP = "stop"
    KILL = "kill"
    REBOOT = "reboot"
    UPDATE = "update"
    DESTROY = "destroy"
    QUARANTINE = "quarantine"
    RELEASE = "release"


class JobName(StrEnum):
    """The kinds of job (api.md, job object ``name``)."""

    PROVISION = "provision"
    START = "start"
    STOP = "stop"
    REBOOT = "reboot"
    UPDATE = "update"
    DESTROY = "destroy"
    ADD_NICS = "add_nics"  # the NICs are recorded when asked for; the job applies them
    REMOVE_NICS = "remove_nics"
    # vmledger's own: queued by a quarantine or a destroy at once that cancels a running job,
    # to raise the VM's fence above that job's claim on its nodes (docs/jobs.md, "A quarantine
    # while a job runs")
    FENCE = "fence"


class Execution(StrEnum):
    """Where a job is in its life (api.md, job object ``execution``)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


TERMINAL_EXECUTIONS = frozenset({Execution.SUCCEEDED, Execution.FAILED, Execution.CANCELED})

# The state a job asks for, set as ``desired_state`` when it is queued (``JobQueued``); a job
# not named asks for none (update, NIC changes, fence). domain/desire.py withdraws the ask of
# one that ends without doing it.
JOB_DESIRES: dict[str, DesiredState] = {
    JobName.PROVISION: DesiredState.RUNNING,
    JobName.START: DesiredState.RUNNING,
    JobName.REBOOT: DesiredState.RUNNING,
    JobName.STOP: DesiredState.STOPPED,
    JobName.DESTROY: DesiredState.DESTROYED,
}

# The job each action queues; kill is a forced stop (VMAPI ``action=kill``).
JOB_FOR_ACTION: dict[Action, JobName] = {
    Action.START: JobName.START,
    Action.STOP: JobName.STOP,
    Action.KILL: JobName.STOP,
    Action.REBOOT: JobName.REBOOT,
    Action.UPDATE: JobName.UPDATE,
    Action.DESTROY: JobName.DESTROY,
}
