"""The ``ComputeDriver`` protocol (design.md, "Compute nodes"; docs/jobs.md).

Every operation is idempotent by VM uuid: repeating it after a crash or a lost response
changes nothing more. Idempotent by uuid is not enough for a boot or a reboot ("booted, then
shut down by the guest" looks like "never booted"), so every run of a VM on a node is an
**incarnation**: a number the node assigns when it boots the VM (1, 2, ...), ended by any stop
(ours, the guest's, a crash; a host reboot takes the copy away). A boot or reboot names the
effect it is (``effect``: the job's uuid), and the node remembers which effect began the
current incarnation: a repeat of that effect finds it already done and does nothing, so a
replayed step cannot restart a VM its guest shut down, or reboot it twice (Omicron #2209).

Naming the effect is not enough either: a worker paused in a call (a stopped process, a long
garbage collection, a slow network) can resume after its job was taken over, and even after
later jobs ran, and then carry out a step that is no longer wanted (a stop that undoes a later
start, a reboot of a run a later job began). So every operation a job makes on a VM carries
its **fence** (``Fence``), and the driver refuses one whose fence is older than the newest it
has seen for that VM (``FencedOffError``; docs/jobs.md, "Fencing"). Each node keeps its own:
a fence raised on one server refuses nothing on another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

PowerState = Literal["running", "stopped", "failed"]
TargetState = Literal["running", "stopped", "rebooted"]


@dataclass(frozen=True)
class Incarnation:
    """What a node reports of one VM copy: its power state, the number of its latest run
    (``number``; 0: never booted; the run is over unless ``state`` is ``running``) and the
    effect that began that run (``begun_by``: a job's uuid, None when not vmledger's).

    ``server_uuid`` and ``seq``: the node that answered, and its sequence number the answer
    is as of (``ComputeDriver``); None from a driver that does not number its answers. Not
    compared: two answers of the same run are the same incarnation."""

    state: PowerState
    number: int
    begun_by: str | None = None
    server_uuid: str | None = field(default=None, compare=False)
    seq: int | None = field(default=None, compare=False)

    def as_result(self) -> dict[str, object]:
        """The step result the job records (``chain_results``), so a takeover can compare."""
        return {"state": self.state, "incarnation": self.number}


@dataclass(frozen=True)
class Fence:
    """The fencing token of one holder of a job: the job (``job_uuid``) and its ``epoch``,
    the version of the VM's stream at the ``JobStarted`` that gave the holder the job. Each
    claim and each takeover appends a ``JobStarted`` to the VM's stream, so whoever holds the
    VM's head job now has a higher epoch than every earlier holder, of this job or of any job
    before it: epochs compare across jobs, and only epochs are compared."""

    job_uuid: str
    epoch: int


class FencedOffError(Exception):
    """The operation carries an older fence than the newest its server has seen for the VM:
    its job was taken from the worker asking (or later jobs ran since), so nothing was done.
    Not a ``ComputeError``: nothing failed that a job should record or retry; the worker
    treats it as its job taken from it and records nothing (docs/jobs.md, "Fencing")."""


class ComputeError(Exception):
    """A compute node could not do what was asked (the job records the message)."""


class OutcomeUnknownError(ComputeError):
    """The call may have done its work: the node took it, and its answer was lost (a
    timeout after the request was sent, a connection cut while it ran). Any other
    ``ComputeError`` says the node did nothing. A driver raises it only once the call can no
    longer take effect (the node finished or dropped it), so a later call of the same job
    on that VM there is ordered after it. A job whose step failed so asks the node what it
    did before it records anything as not done (docs/jobs.md, "An answer lost on the last
    attempt")."""


class UnknownServerError(ComputeError):
    """The driver has no such server: it cannot reach it, so asking again cannot help (a
    server registered in the log that the compute fleet does not have, docs/jobs.md)."""


class ServerRemovedError(UnknownServerError):
    """The server is removed (its node reports it gone, or an operator recorded it): no VM can
    be made or changed there, so asking again cannot help, and a placement that chose it
    before it went moves on to the next candidate (docs/jobs.md, "Placement")."""


class NoCapacityError(ComputeError):
    """No server has room for the VM."""


@dataclass(frozen=True)
class ServerInfo:
    """A compute node as its agent describes it; RAM in MiB."""

    uuid: str
    hostname: str
    boot_id: str
    ram_mib: int
    cpus: int
    ram_allocated_mib: int
    status: str = "running"

    @property
    def ram_free_mib(self) -> int:
        return self.ram_mib - self.ram_allocated_mib


class ComputeDriver(Protocol):
    """What the worker may ask of the compute nodes.

    Every operation on one VM (``ensure_registered``, ``observe``, ``ensure_state``,
    ``unregister``, ``reconfigure``) takes the ``fence`` of the job asking. Each server keeps,
    per VM, the newest fence it has seen, durably (a restart of the driver, an agent or a host
    forgets none), and checks and raises it atomically with the operation itself, so that no
    step with an older fence can take effect there after one with a newer fence was admitted
    there. A server keeps only the fences asked of it: fencing a lost worker off is asking
    every server it may call.

    - an older epoch than the newest seen: ``FencedOffError``, and nothing is done (a lookup
      is not answered either);
    - the same epoch or a newer one: the operation is done, and the fence is the newest seen.

    ``observe`` admits its fence as well: a takeover's first look at a VM is what fences off
    the worker it took the job from. ``raise_fence`` admits it and does nothing else: the
    ``fence`` job's call, which fences off a job a quarantine or a destroy canceled while it
    ran. ``fence=None`` (a call outside any job: a test, an operator's tool) is neither
    checked nor remembered.
    """

    def servers(self) -> list[ServerInfo]:
        """Every known server."""

    def server_info(self, server_uuid: str) -> ServerInfo:
        """One server. Raises ``UnknownServerError`` if unknown."""

    def inventory(self, server_uuid: str) -> dict[str, PowerState]:
        """The VMs the server has, by uuid, with their power state."""

    def ensure_registered(
        self, server_uuid: str, vm_uuid: str, *, ram_mib: int, metadata: dict[str, object],
        fence: Fence | None = None,
    ) -> None:
        """Make sure the VM exists on the server (created stopped if absent)."""

    def observe(self, server_uuid: str, vm_uuid: str, *,
                fence: Fence | None = None) -> Incarnation | None:
        """The VM's copy on the server as its agent reports it, or None if it has none."""

    def ensure_state(self, server_uuid: str, vm_uuid: str, state: TargetState, *,
                     effect: str | None = None,
                     fence: Fence | None = None) -> Incarnation | None:
        """Make sure the VM is in ``state``; returns its copy afterwards.

        ``running``: boot it unless it runs, or unless ``effect`` began its latest incarnation
        (done before: its guest may have stopped it since; nothing is repeated).
        ``rebooted``: end the running incarnation and begin the next, unless ``effect`` began
        the latest (done before) or none runs (the run it meant to end is over: nothing to do).
        ``stopped``: end the running incarnation; a VM the server does not have is stopped
        there too (None). Raises ``ComputeError`` if the server cannot act, and for
        ``running``/``rebooted`` if it does not have the VM."""

    def unregister(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        """Make sure the VM no longer exists on the server."""

    def raise_fence(self, server_uuid: str, vm_uuid: str, *, fence: Fence | None = None) -> None:
        """Admit ``fence`` for the VM on the server and change nothing else: from then on an
        operation with an older fence is refused there (docs/jobs.md, "A quarantine while a
        job runs"). It only refuses more, so it is asked of a server an operator recorded
        removed too (``RecordedRemovalsRefused`` lets it through): its node may still be up.
        Raises ``ComputeError`` if the server cannot act (``UnknownServerError`` if it is not
        the driver's or is removed by its own report: then it takes no call at all)."""

    def reconfigure(self, server_uuid: str, vm_uuid: str, changes: dict[str, object], *,
                    fence: Fence | None = None) -> None:
        """Apply a change of the VM's configuration on its server (``vmadm update``: alias,
        metadata, tags, NICs added or removed). ``changes`` holds whole new values, and NICs
        by MAC (``add_nics``: ``{"nics": [...]}``, a NIC the VM has is not added again;
        ``remove_nics``: ``{"macs": [...]}``, one it has not is gone already), so a repeat (a
        lost response retried, a takeover running the step again) changes nothing more.
        Raises ``ComputeError`` if the server cannot act."""
