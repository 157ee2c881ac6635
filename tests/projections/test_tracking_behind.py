"""A read model whose ``projection_tracking`` row was set back behind the service's back (or
whose tables were restored newer than it): its runner meets events its rows already hold.
Every read model, not only ``vm_view``, says so and how to mend it, where before
``job_view`` and ``server_view`` failed with a bare duplicate-key error and ``analytics`` with
"Provisioned cannot happen to a VM in state 'stopped'" (left over from session 18)."""

from __future__ import annotations

import pytest

from domain.states import Action
from projections.tracking_behind import TrackingBehindError
from service.audit.read_models import verify_read_models
from service.commands.networks import NicRequest
from tests.builders import act, cause, create, settle

# The read models that cannot apply an event twice; the others' writes are upserts of the
# stream's state at the event's version, and applying the events again mends their rows.
APPLIED_ONCE = ["vm_view", "job_view", "analytics"]
APPLIED_AGAIN = ["server_view", "network_view", "volume_mounts"]


def _fleet_with_history(services) -> int:
    """A network, a volume and VMs on them run through jobs, then stopped and destroyed;
    the log's head between the two, where the tracking rows are then set back to (past every
    stream's creation: a read model that replays a stream from its creation folds it anew)."""
    network, _ = services.commands.create_network(
        name="behind", subnet="10.61.0.0/24", provision_start_ip="10.61.0.10",
        provision_end_ip="10.61.0.20", gateway=None, cause=cause())
    volume, _ = services.commands.create_volume(
        name="data", cause=cause(), networks={str(network.id): "10.61.0.5"})
    mount = [{"volume_uuid": str(volume.id), "mountpoint": "/data"}]
    vms = [create(services, networks=(NicRequest(str(network.id)),), volumes=mount).vm_uuid
           for _ in range(2)]
    settle(services)
    between = services.projections.head()
    act(services, vms[0], Action.STOP)
    act(services, vms[1], Action.DESTROY)
    settle(services)
    return between


@pytest.mark.parametrize("name", APPLIED_ONCE)
def test_a_tracking_row_set_back_is_said_to_be_behind_the_rows(services, name):
    between = _fleet_with_history(services)
    _set_back(services, name, between)
    with pytest.raises(TrackingBehindError) as raised:
        services.projections.catch_up([name])
    message = str(raised.value)
    assert message.startswith(f"read model {name}'s tracking is behind its rows: ")
    assert message.endswith(f"the log is intact: `vmledger rebuild {name}` rebuilds the "
                            "read model")
    assert [d.kind for d in verify_read_models(services)] == ["tracking"]  # nothing applied


@pytest.mark.parametrize("name", APPLIED_AGAIN)
def test_a_read_model_of_upserts_set_back_applies_the_events_again(services, name):
    between = _fleet_with_history(services)
    _set_back(services, name, between)
    services.projections.catch_up([name])
    assert verify_read_models(services) == []
    assert services.projections.positions()[name] == services.projections.head()


def test_server_view_set_back_before_a_claim_is_said_to_be_behind_the_rows(services):
    # a server's claims are rows of their own: a VM's claim cannot be inserted twice
    _fleet_with_history(services)
    _set_back(services, "server_view", 1)
    with pytest.raises(TrackingBehindError, match="read model server_view's tracking is "
                                                  "behind its rows: "):
        services.projections.catch_up(["server_view"])


def _set_back(services, name: str, position: int) -> None:
    with services.db.transaction() as tx:
        tx.execute("UPDATE projection_tracking SET position = ? WHERE name = ?",
                   (position, name))


def test_a_failing_batch_with_tracking_in_place_keeps_its_own_error(services, monkeypatch):
    _fleet_with_history(services)
    job_view = services.projections.read_models["job_view"]
    create(services)

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug of the read model's own")

    monkeypatch.setattr(type(job_view), "apply", broken, raising=False)
    monkeypatch.setattr(type(job_view), "write", broken, raising=False)
    with pytest.raises(RuntimeError, match="a bug of the read model's own"):
        services.projections.catch_up(["job_view"])
