"""GetVm ``?version=`` on a stream with an event deleted behind the service's back: each
version before the gap is served (its fold does not cross it), the missing version and every
later one answer 503 naming the gap, in the process that cached the stream as in a new one.
Found by a tester: the process that had served the VM answered the deleted version as its
predecessor (``?version=10`` gave version 9), and a new process answered 503 for every
version, those before the gap too."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import pytest

from projections.formats import rfc3339
from tests.api.helpers import assert_error, create_running_vm, get_vm
from tests.tampering import delete_event

DELETED = 7  # of a running VM's 10 events: the provision's steps come after its creation


@pytest.fixture
def gapped(client, services) -> str:
    """A running VM, served once (its fold cached), then its event of ``DELETED`` deleted."""
    vm_uuid = create_running_vm(client)
    assert get_vm(client, vm_uuid)["version"] == 10
    assert client.get(f"/vms/{vm_uuid}", params={"version": 10}).status_code == 200
    delete_event(services, vm_uuid, DELETED)
    return vm_uuid


@pytest.fixture
def gapped_at(client, services) -> tuple[str, str, int]:
    """A running VM whose event of ``DELETED`` was deleted; the instant of its creation
    (before the gap) and the VM's version then."""
    vm_uuid = create_running_vm(client)
    events = client.get(f"/vms/{vm_uuid}/history").json()
    created = events[0]["timestamp"]
    version = max(e["version"] for e in events if e["timestamp"] <= created)
    assert version < DELETED
    delete_event(services, vm_uuid, DELETED)
    return vm_uuid, created, version


def test_versions_before_a_gap_are_served_and_none_from_it_on(client, restarted,
                                                             gapped) -> None:
    for http in (client, restarted):
        for version in range(1, DELETED):
            response = http.get(f"/vms/{gapped}", params={"version": version})
            assert response.status_code == 200, (version, response.text)
            assert response.json()["version"] == version
            assert response.headers["ETag"] == f'"{version}"'
        for version in range(DELETED, 11):
            body = assert_error(http.get(f"/vms/{gapped}", params={"version": version}),
                                503, "Unavailable")
            assert body["message"].startswith(
                f"stream {gapped} has a gap: its event of version {DELETED + 1} follows "
                f"version {DELETED - 1}"), (version, body)
            assert "the log needs repair" in body["message"], body
        # past the head is no version the VM had, as on a sound stream
        assert_error(http.get(f"/vms/{gapped}", params={"version": 11}), 404,
                     "ResourceNotFound")


def test_an_instant_before_a_gap_is_served_and_one_after_it_is_503(client, restarted,
                                                                   gapped_at) -> None:
    vm_uuid, created, version = gapped_at
    for http in (client, restarted):
        response = http.get(f"/vms/{vm_uuid}", params={"at": created})
        assert response.status_code == 200, response.text
        assert response.json()["version"] == version
        # an instant after every event before the gap may be past it: the gap is named
        body = assert_error(http.get(f"/vms/{vm_uuid}", params={
            "at": rfc3339(datetime.now(UTC))}), 503, "Unavailable")
        assert body["message"].startswith(f"stream {vm_uuid} has a gap: its event of version "
                                          f"{DELETED + 1} follows version {DELETED - 1}"), body


def test_reads_that_do_not_fold_across_a_gap_are_served(client, restarted, services) -> None:
    """A gap is found only by a fold that crosses it (docs/api.md, "Reads"): a version loaded
    from a snapshot taken after the gap, and a history page that ends before it, are served;
    a version before that snapshot, and a page that reaches the gap, are 503 naming it."""
    vm_uuid = create_running_vm(client)
    services.app.take_snapshot(UUID(vm_uuid), version=DELETED + 2)
    delete_event(services, vm_uuid, DELETED)
    gap = f"stream {vm_uuid} has a gap: its event of version {DELETED + 1} follows version"
    for http in (client, restarted):
        for version in (DELETED + 2, 10):
            response = http.get(f"/vms/{vm_uuid}", params={"version": version})
            assert response.status_code == 200, (version, response.text)
            assert response.json()["version"] == version
        body = assert_error(http.get(f"/vms/{vm_uuid}", params={"version": DELETED + 1}),
                            503, "Unavailable")
        assert body["message"].startswith(gap), body
        page = http.get(f"/vms/{vm_uuid}/history", params={"limit": DELETED - 1})
        assert page.status_code == 200, page.text
        assert [e["version"] for e in page.json()] == list(range(1, DELETED))
        body = assert_error(http.get(f"/vms/{vm_uuid}/history", params={"limit": 1000}),
                            503, "Unavailable")
        assert body["message"].startswith(gap), body
