"""The hash chain (domain/chain.py): its canonical JSON, which the encoder made once writes
exactly as ``json.dumps(sort_keys=True, separators=(",", ":"), default=str)`` does, so every
link stored before it still verifies; and the fold of a chained stream, which names the
stream a gap is in."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from enum import Enum
from uuid import UUID

import pytest

from domain import chain
from domain.errors import StreamGapError
from domain.network import Network
from tests.builders import cause, new_vm


class Colour(str, Enum):
    RED = "red"


ODD_VALUES = [
    {"b": 1, "a": {"d": [None, True, False], "c": 0}},  # nested keys sorted
    [1.5, 0.1, 1e16, 1e-7, -0.0, float("nan"), float("inf"), 2**70],
    ["é", "☃", "\u2028", 'quote " and \\ backslash', "\x00\x1f"],
    {"when": datetime(2026, 12, 1, 16, 0, 0, 123456, tzinfo=UTC),
     "who": UUID(int=7), "colour": Colour.RED, "pair": (1, 2)},
    {2: "two", 1: "one"},  # keys that are not strings, which json.dumps turns into strings
]


def test_canonical_json_is_byte_for_byte_what_json_dumps_writes():
    for value in ODD_VALUES:
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
        assert chain._canonical_json(value) == expected, value


def test_a_link_is_the_sha256_of_the_canonical_form_without_the_excluded_fields():
    fields = {"timestamp": datetime(2026, 1, 2, tzinfo=UTC), "ram": 1024, "chain": "x",
              "class_version": 2, "originator_topic": "vm", "tags": {"é": 1.5}}
    stream = UUID(int=1)
    canonical = json.dumps(
        [chain.GENESIS, str(stream), 1, "vm.created",
         {"timestamp": fields["timestamp"], "ram": 1024, "tags": {"é": 1.5}}],
        sort_keys=True, separators=(",", ":"), default=str)
    assert chain.link(chain.GENESIS, stream, 1, "vm.created", fields) == hashlib.sha256(
        canonical.encode()).hexdigest()


@pytest.mark.parametrize("kind", ["vm", "network"])
def test_an_event_that_skips_a_version_raises_a_stream_gap_naming_the_stream(kind):
    # The library's OriginatorVersionError names no stream; every fold (a load, a read
    # model's, the audit's) applies events through ChainedEvent.mutate, which names it.
    if kind == "vm":
        aggregate = new_vm()
        aggregate.record_quarantined("stuck", cause=cause())
        aggregate.record_released(cause=cause())
    else:
        aggregate = Network.create(network_uuid=UUID(int=9), name="n", subnet="10.0.0.0/24",
                                   provision_start_ip="10.0.0.10", provision_end_ip="10.0.0.20",
                                   gateway=None, cause=cause())
        aggregate.claim("10.0.0.10", vm_uuid="a", mac="02:00:00:00:00:01", cause=cause())
        aggregate.claim("10.0.0.11", vm_uuid="b", mac="02:00:00:00:00:02", cause=cause())
    first, *_, last = aggregate.collect_events()
    folded = first.mutate(None)
    with pytest.raises(StreamGapError) as gap:
        last.mutate(folded)
    assert (gap.value.stream, gap.value.version, gap.value.previous) == (
        str(aggregate.id), last.originator_version, 1)
    # "or stored out of order": read in log order, a version stored after the next one
    # looks the same (an auditor took "gap" alone for a deleted event)
    assert str(gap.value) == (f"stream {aggregate.id} has a gap: its event of version "
                              f"{last.originator_version} follows version 1 (one between is "
                              "missing, or stored out of order)")


def test_a_stream_whose_first_events_are_missing_is_a_gap_naming_its_first():
    # found by a tester: the library only asserted (an empty AssertionError, a 500)
    vm = new_vm()
    vm.record_quarantined("stuck", cause=cause())
    _created, second, *_ = vm.collect_events()
    with pytest.raises(StreamGapError) as gap:
        second.mutate(None)
    assert (gap.value.stream, gap.value.version, gap.value.previous) == (str(vm.id), 2, 0)
    assert str(gap.value) == f"stream {vm.id} has a gap: its event of version 2 is its first"
