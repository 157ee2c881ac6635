"""Events whose log positions were changed are named, and only they (auditor tester): two
events of a VM whose positions were swapped were reported as the intact events between them
(``out of order: ... version 16: at position 47, after version 17``), and the one moved
earlier was not named at all (service/audit/chains.py)."""

from __future__ import annotations

from service.audit.verify import verify_chains
from tests.integration.test_audit import _vm_with_history
from tests.tampering import positions, set_positions

FIRST = 15


def _moved(services, vm_uuid: str) -> list[tuple[int | None, str]]:
    found = verify_chains(services.app)
    assert all(d.where == f"stream {vm_uuid}" for d in found), found
    return sorted((d.version, d.kind) for d in found)


def _swap(services, vm_uuid: str, *pairs: tuple[int, int]) -> dict[int, int]:
    at = positions(services, vm_uuid)
    moves = {}
    for first, second in pairs:
        moves |= {first: at[second], second: at[first]}
    set_positions(services, vm_uuid, moves)
    return moves


def test_two_events_two_apart_swapped_are_the_two_named(services):
    vm_uuid = _vm_with_history(services)
    moved = _swap(services, vm_uuid, (FIRST, FIRST + 2))
    assert _moved(services, vm_uuid) == [(FIRST, "out of order"), (FIRST + 2, "out of order")]
    details = {d.version: d.detail for d in verify_chains(services.app)}
    assert details[FIRST].startswith(
        f"at position {moved[FIRST]}, after version {FIRST + 2} in the log"), details
    assert details[FIRST + 2].startswith(
        f"at position {moved[FIRST + 2]}, before version {FIRST + 1} in the log"), details


def test_two_events_far_apart_swapped_are_the_two_named_not_those_between(services):
    vm_uuid = _vm_with_history(services)
    _swap(services, vm_uuid, (FIRST, FIRST + 6))
    assert _moved(services, vm_uuid) == [(FIRST, "out of order"), (FIRST + 6, "out of order")]


def test_two_adjacent_events_swapped_are_one_move(services):
    # either moved past the other: the one later in the log is named
    vm_uuid = _vm_with_history(services)
    _swap(services, vm_uuid, (FIRST, FIRST + 1))
    assert _moved(services, vm_uuid) == [(FIRST, "out of order")]


def test_one_event_moved_earlier_is_the_one_named(services):
    # the events it passed each shifted one place later, as a move within the log leaves them
    vm_uuid = _vm_with_history(services)
    at = positions(services, vm_uuid)
    set_positions(services, vm_uuid, {FIRST + 3: at[FIRST], FIRST: at[FIRST + 1],
                                      FIRST + 1: at[FIRST + 2], FIRST + 2: at[FIRST + 3]})
    assert _moved(services, vm_uuid) == [(FIRST + 3, "out of order")]


def test_one_event_moved_later_is_the_one_named(services):
    vm_uuid = _vm_with_history(services)
    at = positions(services, vm_uuid)
    set_positions(services, vm_uuid, {FIRST: at[FIRST + 3], FIRST + 1: at[FIRST],
                                      FIRST + 2: at[FIRST + 1], FIRST + 3: at[FIRST + 2]})
    assert _moved(services, vm_uuid) == [(FIRST, "out of order")]


def test_two_swaps_in_one_stream_are_the_four_named(services):
    vm_uuid = _vm_with_history(services)
    _swap(services, vm_uuid, (FIRST - 8, FIRST - 6), (FIRST, FIRST + 4))
    assert _moved(services, vm_uuid) == [
        (FIRST - 8, "out of order"), (FIRST - 6, "out of order"),
        (FIRST, "out of order"), (FIRST + 4, "out of order")]


def test_two_events_moved_to_the_end_apart_are_the_two_named_none_missing(services):
    vm_uuid = _vm_with_history(services)
    at = positions(services, vm_uuid)
    head = max(at.values())
    set_positions(services, vm_uuid, {FIRST: head + 10, FIRST + 4: head + 20})
    assert _moved(services, vm_uuid) == [(FIRST, "out of order"), (FIRST + 4, "out of order")]
