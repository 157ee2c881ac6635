"""A load refuses a snapshot that does not match the log and folds from the events instead
(tester B, B1: an edited snapshot changed time travel and command decisions)."""

from __future__ import annotations

import hashlib
import json
import logging
from uuid import UUID

import pytest
from eventsourcing.application import AggregateNotFoundError

from domain.vm import make_cause
from service.commands.snapshot_seal import SEAL, SealCheckingRepository, seal
from service.container import Services
from tests.integration.test_audit import _vm_with_history
from tests.service.test_snapshots import folded, state
from tests.tampering import delete_event, delete_stream, edit_snapshot


def _snapshot_then_more(services) -> tuple[str, int]:
    vm_uuid = _vm_with_history(services)
    version = services.commands.load(vm_uuid).version
    services.app.take_snapshot(UUID(vm_uuid), version=version)
    services.commands.change(type(services.commands.load(vm_uuid)), UUID(vm_uuid),
                             lambda vm: vm.update_metadata({"alias": "after"},
                                                           cause=make_cause()))
    return vm_uuid, version


def test_an_untouched_snapshot_is_sealed_and_loads_as_the_fold(services, caplog):
    vm_uuid, version = _snapshot_then_more(services)
    [snapshot] = services.app.snapshots.get(UUID(vm_uuid))
    assert SEAL in snapshot.state
    with caplog.at_level(logging.WARNING):
        for at in (version, version + 1):
            loaded = services.app.repository.get(UUID(vm_uuid), version=at)
            assert state(loaded) == state(folded(services, vm_uuid, at))
    assert "snapshot" not in caplog.text


def test_an_edited_snapshot_is_refused_logged_and_the_events_folded(services, caplog):
    vm_uuid, version = _snapshot_then_more(services)
    edit_snapshot(services, vm_uuid, b'"ram":256', b'"ram":99999')
    with caplog.at_level(logging.WARNING):
        for at in (version, version + 1):
            loaded = services.app.repository.get(UUID(vm_uuid), version=at)
            assert loaded.ram == 256
            assert state(loaded) == state(folded(services, vm_uuid, at))
    assert f"snapshot of {vm_uuid} at version {version} refused" in caplog.text


def test_a_snapshot_whose_stream_was_removed_loads_nothing(services):
    """The snapshot alone is not the VM: with its events gone it is refused, and the VM is
    not found (it was loaded from the snapshot)."""
    vm_uuid, version = _snapshot_then_more(services)
    delete_stream(services, vm_uuid)
    with pytest.raises(AggregateNotFoundError):
        services.app.repository.get(UUID(vm_uuid), version=version + 1)


def test_a_snapshot_without_a_seal_is_not_used_and_not_warned_of(services, caplog):
    """Snapshots from before seals: loads fold the events, as if there were none."""
    vm_uuid, version = _snapshot_then_more(services)
    edit_snapshot(services, vm_uuid, b',"snapshot_seal":"', b',"old_field":"')
    with caplog.at_level(logging.WARNING):
        loaded = services.app.repository.get(UUID(vm_uuid), version=version + 1)
    assert state(loaded) == state(folded(services, vm_uuid, version + 1))
    assert "refused" not in caplog.text


def test_a_gap_before_a_snapshot_is_found_by_a_fold_across_it_not_by_a_load_from_it(services):
    """What docs/operations.md says of a gap (tester D, bug 3): a load that starts from a later
    snapshot reads no event before it, so it does not see the gap; a fold across it does, and
    ``audit verify`` folds every stream from its first event."""
    from domain.errors import StreamGapError
    from service.audit.snapshots import verify_snapshots
    from service.audit.verify import verify_chains
    from service.commands.aggregate_cache import fold_stream

    vm_uuid, version = _snapshot_then_more(services)
    delete_event(services, vm_uuid, 3)
    with pytest.raises(StreamGapError):
        fold_stream(services.app, UUID(vm_uuid), version=version - 1)
    assert services.app.repository.get(UUID(vm_uuid), version=version + 1).version == version + 1
    assert [d.kind for d in verify_chains(services.app)] == ["missing"]
    assert [d.kind for d in verify_snapshots(services.app)] == ["snapshot"]


def _seal_as_first_defined(transcoder, snapshot) -> str:
    """The seal as snapshots were first sealed: the state encoded, parsed, and encoded again
    in canonical JSON. Seals stored then must still match."""
    state = {k: v for k, v in snapshot.state.items() if k != SEAL}
    content = [str(snapshot.originator_id), snapshot.originator_version, snapshot.topic,
               json.loads(transcoder.encode(state))]
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def test_a_snapshot_an_older_class_version_took_is_not_used_and_not_warned_of(
        services, caplog, monkeypatch):
    """Its upcast can only guess what that version did not keep (a VM's state_since): loads
    fold the events, quietly, as for a snapshot from before seals."""
    vm_uuid = _vm_with_history(services)
    vm_class = type(services.commands.load(vm_uuid))
    with monkeypatch.context() as older:
        older.setattr(vm_class, "class_version", 1)  # sealed, with no class_version
        services.app.take_snapshot(UUID(vm_uuid))
    [snapshot] = services.app.snapshots.get(UUID(vm_uuid))
    assert "class_version" not in snapshot.state and SEAL in snapshot.state
    version = snapshot.originator_version
    with caplog.at_level(logging.DEBUG, logger="vmledger"):
        loaded = services.app.repository.get(UUID(vm_uuid), version=version)
    assert state(loaded) == state(folded(services, vm_uuid, version))
    [record] = [r for r in caplog.records if "refused" in r.getMessage()]
    assert record.levelno == logging.DEBUG
    assert "an older version of its aggregate took it" in record.getMessage()


def test_the_seal_is_the_one_stored_seals_were_made_with(services):
    vm_uuid, _ = _snapshot_then_more(services)
    services.commands.change(type(services.commands.load(vm_uuid)), UUID(vm_uuid),
                             lambda vm: vm.update_metadata({"alias": "wébserveur ☃"},
                                                           cause=make_cause()))
    services.app.take_snapshot(UUID(vm_uuid))
    transcoder = services.app.mapper.transcoder
    snapshots = list(services.app.snapshots.get(UUID(vm_uuid)))
    assert len(snapshots) == 2
    assert "wébserveur ☃" in str(snapshots[-1].state)
    for snapshot in snapshots:
        stored = snapshot.state.pop(SEAL)  # as a load takes it out before checking it
        assert stored == seal(transcoder, snapshot)
        assert seal(transcoder, snapshot) == _seal_as_first_defined(transcoder, snapshot)


def test_a_load_from_a_snapshot_encodes_its_state_once(services, monkeypatch):
    """The seal is checked with one canonical encode, and no other encode."""
    vm_uuid, version = _snapshot_then_more(services)
    transcoder = services.app.mapper.transcoder
    calls: list[str] = []
    for name in ("encode", "canonical"):
        original = getattr(transcoder, name)
        monkeypatch.setattr(transcoder, name,
                            lambda obj, name=name, original=original: (calls.append(name),
                                                                       original(obj))[1])
    loaded = services.app.repository.get(UUID(vm_uuid), version=version + 1)
    assert calls == ["canonical"]
    assert state(loaded) == state(folded(services, vm_uuid, version + 1))


def test_the_repository_is_the_librarys_with_the_applications_settings(settings):
    """The seal-checking repository is the one the library builds from the settings (its
    cache and fast-forward), not a copy of how it builds it."""
    built = Services.build(settings.model_copy(update={"aggregate_cache_size": 7}))
    try:
        repository = built.app.repository
        assert isinstance(repository, SealCheckingRepository)
        assert repository.cache is not None and repository.cache.maxsize == 7
        assert repository.fastforward is False
        assert repository.snapshot_store is built.app.snapshots
        assert repository.transcoder is built.app.mapper.transcoder
    finally:
        built.close()
