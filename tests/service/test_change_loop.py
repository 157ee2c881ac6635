"""The one change loop (service/commands/change.py): every writer goes through it, for every
kind of aggregate (docs/architecture.md, "Optimistic concurrency and the change loop")."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest
from eventsourcing.persistence import IntegrityError

from domain.errors import (
    ServerNotFoundError,
    UuidTakenError,
    VmNotFoundError,
    VolumeNotFoundError,
)
from domain.server import Server
from domain.vm import Vm
from domain.volume import Volume
from tests.builders import cause, create, spec

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "service" / "commands" / "change.py"
# the one loader: the aggregate a change decides on (the loop's own part, split off)
LOADER = ROOT / "service" / "commands" / "loader.py"
# the loader's cache: what a load copies, fast-forwards and keeps (the loop's own part)
LOADER_CACHE = ROOT / "service" / "commands" / "aggregate_cache.py"
# the loader's snapshot check: the repository whose loads refuse a snapshot unlike the log
LOADER_SNAPSHOTS = ROOT / "service" / "commands" / "snapshot_seal.py"


def _names_used(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


# Below the loop's one save: the group committer and the recorders make the appends, and
# report a conflict as the library's IntegrityError (they never retry, nor read a stream).
APPEND = (ROOT / "service" / "commands" / "committer.py", ROOT / "service" / "storage.py",
          ROOT / "service" / "group_commit.py")


def test_only_the_change_loop_reads_streams_saves_and_retries_conflicts() -> None:
    # What a second loop or loader would need: the repository, the app's save, the conflict
    # error and the back-off. Outside change.py and its loader no source module of service/
    # uses them.
    loop_only = {"IntegrityError", "back_off_s", "repository", "AggregateNotFoundError"}
    offending = {
        str(path.relative_to(ROOT)): sorted(loop_only & _names_used(path))
        for path in sorted((ROOT / "service").rglob("*.py"))
        if path not in (LOOP, LOADER, LOADER_CACHE, LOADER_SNAPSHOTS, *APPEND)
        and loop_only & _names_used(path)
    }
    assert not offending, offending


@pytest.fixture
def one_conflict(services, monkeypatch) -> list[int]:
    """The next save conflicts once, as if another writer had won; returns the conflicts
    counted by the loop."""
    save = services.commands.committer.save  # the append under Changes.save
    failed: list[int] = []
    counted: list[int] = []

    def conflicting_once(*aggregates, **kwargs):
        if not failed:
            failed.append(1)
            raise IntegrityError("simulated conflict")
        return save(*aggregates, **kwargs)

    monkeypatch.setattr(services.commands.committer, "save", conflicting_once)
    monkeypatch.setattr(services.commands, "on_conflict", lambda: counted.append(1))
    return counted


def test_a_volume_change_that_meets_a_conflict_is_retried(services, one_conflict) -> None:
    volume, _ = services.commands.create_volume(name="data", cause=cause())
    assert one_conflict == [1]  # the create itself met the conflict, and was made again
    attached, position = services.commands.attach_network(
        str(volume.id), str(uuid.uuid4()), "10.0.0.5", cause=cause())
    assert position == services.commands.head_position()
    assert services.commands.load_volume(volume.id).version == attached.version == 2


def test_a_server_change_that_meets_a_conflict_is_retried(services, one_conflict) -> None:
    server_uuid = str(uuid.uuid4())
    assert services.commands.register_server(server_uuid, hostname="cn9", boot_id="b1",
                                             ram_mib=1024, cpus=2, cause=cause())
    assert one_conflict == [1]
    assert not services.commands.register_server(server_uuid, hostname="cn9", boot_id="b1",
                                                 ram_mib=1024, cpus=2, cause=cause())
    _, server, position, _ = services.commands.change(
        Server, server_uuid, lambda s: s.set_status("removed", cause=cause()))
    assert position is not None and server.status == "removed"


@pytest.mark.parametrize(("kind", "refusal"), [
    (Server, ServerNotFoundError), (Volume, VolumeNotFoundError)])
def test_the_loader_refuses_another_kinds_stream_with_the_kinds_not_found(
        services, kind, refusal) -> None:
    vm = create(services)
    with pytest.raises(refusal):
        services.commands.load_aggregate(kind, vm.vm_uuid)
    assert isinstance(services.commands.load_aggregate(Vm, vm.vm_uuid), Vm)
    with pytest.raises(VmNotFoundError):
        services.commands.load_aggregate(Vm, "not-a-uuid")


def test_a_create_reads_nothing_before_its_append_and_a_repeated_one_is_still_found(
        services, monkeypatch) -> None:
    # A create's stream is almost always new: its first attempt makes the aggregate without
    # reading (the replay creates a VM a task). The alias rule's change made every create read
    # its stream first with the rule off, its default (the replay's CPU per command up 10-25 %).
    read: list[str] = []
    select = services.app.recorder.select_events

    def selecting(originator_id, *args, **kwargs):
        read.append(str(originator_id))
        return select(originator_id, *args, **kwargs)

    monkeypatch.setattr(services.app.recorder, "select_events", selecting)
    vm_uuid = str(uuid.uuid4())
    first = services.commands.create_vm(spec(), cause=cause(), vm_uuid=vm_uuid)
    assert vm_uuid not in read
    # the same create again: its unread attempt conflicts, and the retry reads the stream
    again = services.commands.create_vm(spec(), cause=cause(), vm_uuid=vm_uuid)
    assert (again.job_uuid, again.position) == (first.job_uuid, None)
    assert vm_uuid in read
    with pytest.raises(UuidTakenError):  # another kind's stream under the uuid
        services.commands.register_server(vm_uuid, hostname="h", boot_id="b", ram_mib=1024,
                                          cpus=1, cause=cause())
