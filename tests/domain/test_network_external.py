"""The ``ExternalNetwork`` aggregate (domain/network_external.py): the volumes' addresses on a
network uuid vmledger does not know, which the network created with that uuid claims
(``Network.claim_noted``)."""

from __future__ import annotations

import uuid

import pytest

from domain.errors import ValidationError
from domain.network import Network
from domain.network_external import ExternalNetwork, external_id
from domain.vm import make_cause

NETWORK = "5f3c7d2e-1111-4222-8333-444455550088"
VOLUME, OTHER = str(uuid.uuid4()), str(uuid.uuid4())


def test_its_stream_is_derived_from_the_network_uuid_in_any_case() -> None:
    assert external_id(NETWORK) == external_id(NETWORK.upper()) != uuid.UUID(NETWORK)
    assert ExternalNetwork.create(NETWORK, cause=make_cause()).id == external_id(NETWORK)


def test_it_notes_forgets_and_is_adopted() -> None:
    external = ExternalNetwork.create(NETWORK, cause=make_cause())
    external.note("10.88.0.10", volume_uuid=VOLUME, cause=make_cause())
    external.note("10.88.0.10", volume_uuid=VOLUME, cause=make_cause())  # nothing new
    external.note("10.88.0.11", volume_uuid=OTHER, cause=make_cause())
    external.forget(OTHER, cause=make_cause())
    external.forget(OTHER, cause=make_cause())  # nothing new
    assert [type(e).__name__ for e in external.collect_events()] == [
        "Created", "VolumeAddressNoted", "VolumeAddressNoted", "VolumeAddressForgotten"]
    assert external.addresses == {VOLUME: "10.88.0.10"} and not external.adopted
    external.adopt(cause=make_cause())
    assert external.adopted and external.addresses == {}


def _network() -> Network:
    return Network.create(network_uuid=uuid.UUID(NETWORK), name="later",
                          subnet="10.88.0.0/24", provision_start_ip="10.88.0.10",
                          provision_end_ip="10.88.0.20", gateway="10.88.0.1",
                          cause=make_cause())


def test_a_network_claims_what_was_noted_or_refuses_naming_the_volume() -> None:
    net = _network()
    net.claim_noted({VOLUME: "10.88.0.10", OTHER: "10.88.0.99"}, cause=make_cause())
    assert net.claims == {"10.88.0.10": VOLUME, "10.88.0.99": OTHER}
    for noted, code in (({VOLUME: "192.0.2.7"}, "Invalid"), ({VOLUME: "10.88.0.1"}, "Invalid"),
                        ({VOLUME: "fe80::1"}, "Invalid"),
                        ({VOLUME: "10.88.0.30", OTHER: "10.88.0.30"}, "Duplicate")):
        with pytest.raises(ValidationError) as refused:
            _network().claim_noted(noted, cause=make_cause())
        (error,) = refused.value.errors
        assert (error["field"], error["code"]) == ("uuid", code)
        assert f"on network {NETWORK}" in error["message"]
